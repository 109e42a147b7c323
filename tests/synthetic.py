"""A synthetic results tree: runs, bandit studies and probes written exactly as the
pipeline writes them, with values chosen by the test so tables can be checked by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from mathrl.analysis.study_inputs import Tables
from mathrl.engine.metrics import COLUMNS
from mathrl.pipeline.config import expand_runs


def write_run(
    cfg: dict, run_id: str, rows: list[dict], initial_eval: float, status: str = "complete", alerts: list | None = None
) -> Path:
    """Write metrics.csv and summary.json for `run_id` (an experiment's run) from `rows`.

    Each row needs `step`; any metric left out is NaN (eval_accuracy too: give it on the
    steps that evaluate). The summary's final/best are derived as the trainer derives them."""
    spec = runs_of(cfg)[run_id]
    d = Path(cfg["results"]) / "runs" / run_id
    d.mkdir(parents=True, exist_ok=True)
    full = [{k: r.get(k, 0 if k == "skipped" else math.nan) for k in COLUMNS} for r in rows]
    pd.DataFrame(full, columns=COLUMNS).to_csv(d / "metrics.csv", index=False)
    evals = [(r["step"], r["eval_accuracy"]) for r in full if not math.isnan(r["eval_accuracy"])]
    best = max(evals, key=lambda e: e[1]) if evals else (0, math.nan)
    s = spec.settings
    summary = {
        "run_id": run_id, "experiment": spec.experiment, "task": s.task, "algorithm": s.algorithm,
        "batch_size": s.batch_size, "lr": s.lr, "kl_coef": s.kl_coef, "seed": s.seed,
        "config": s.as_dict(), "status": status, "initial": {"eval_accuracy": initial_eval},
        "final": {**full[-1], "eval_accuracy": evals[-1][1] if evals else math.nan},
        "best": {"step": best[0], "eval_accuracy": best[1]}, "steps_done": len(rows),
        "wall_seconds": float(sum(r.get("seconds", 1.0) for r in rows)), "versions": {}, "alerts": alerts or [],
    }  # fmt: skip
    (d / "summary.json").write_text(json.dumps(summary, default=str))
    return d


_RUNS: dict[str, dict] = {}


def runs_of(cfg: dict) -> dict:
    """The configuration's runs, expanded (and validated) once per configuration, not once per run written."""
    key = json.dumps(cfg, sort_keys=True, default=str)
    if key not in _RUNS:
        _RUNS[key] = expand_runs(cfg)
    return _RUNS[key]


def write_tables(cfg: dict, tabs: dict) -> Tables:
    """Each table as the CSV `mathrl aggregate` writes, under the configuration's tables folder."""
    t = Tables(cfg)
    t.dir.mkdir(parents=True, exist_ok=True)
    for name, df in tabs.items():
        df.to_csv(t.dir / f"{name}.csv", index=False)
    return t


def curve(steps: int, eval_every: int, accuracy, **constant) -> list[dict]:
    """Rows 1..steps; `accuracy(step)` gives accuracy and (on eval steps) eval_accuracy."""
    rows = []
    for step in range(1, steps + 1):
        acc = accuracy(step)
        row = {"step": step, "samples": 8 * step, "accuracy": acc, "reward_mean": acc, "seconds": 1.0, **constant}
        if step % eval_every == 0 or step == steps:
            row["eval_accuracy"] = acc
        rows.append(row)
    return rows


def write_bandit(cfg: dict, study: str, df: pd.DataFrame) -> Path:
    path = Path(cfg["results"]) / "bandit" / study / "metrics.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    return path


def write_json(cfg: dict, rel: str, obj: dict) -> Path:
    path = Path(cfg["results"]) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    return path


def with_claims(cfg: dict, tabs: dict) -> dict:
    """A study's tables, the run and bandit tables (mathrl.analysis.measures) and claims.csv judged over them, as
    `mathrl aggregate` judges every table."""
    from mathrl.analysis import claims
    from mathrl.analysis.aggregate import as_read_back
    from mathrl.analysis.measures import BANDIT_TABLES, RUN_TABLES
    from mathrl.analysis.study_inputs import Context

    ctx = Context(cfg)
    declared = {**{name: ctx.run_table(name) for name in RUN_TABLES}}
    declared |= {name: ctx.bandit_table(name) for name in BANDIT_TABLES}
    tabs = {**declared, **tabs}
    return {**tabs, "claims": claims.judge_all(cfg, as_read_back(tabs))}


def verdicts(tabs: dict, section: str) -> pd.DataFrame:
    """A section's rows of claims.csv by claim id, under the verdict macros' names (key, claim, diff, engaged)."""
    from mathrl.analysis.section_verdicts import claim_view

    c = tabs["claims"]
    return claim_view(c[c["section"] == section]).set_index("key")
