"""The stability monitor on imported logs against rldoctor 0.2.0, scored on the testbed's labelled runs.

    python -m bench.detectors --results DIR [--config FILE ...] [--venv DIR] [--out DIR]

The testbed knows how its runs fail. Each trained run of a results tree (a run two experiments share counted
once) is labelled from its own files, by the project's definitions, per failure kind (`LABELS`):
- `entropy_collapse`: token entropy over the last 5 steps at most half of the first 5 (lab 04's collapse line);
- `reward_hacking`: a reward other than the exact answer's (the proxy, a shaped one) rose (last 5 steps against the
  first 5) while held-out accuracy fell by more than 5 points (the proxy-reward study's failure);
- `crash`: the run collapsed (mathrl.analysis.results.COLLAPSE_DEFINITION: held-out accuracy below half its start, or a
  non-finite loss or gradient: the high-LR failures);
- `no_learning`: held-out accuracy rose by less than a point and the training reward by less than 0.01 (the
  negative controls' random reward, RL from a random policy).

Each run is then exported as a TRL log (`checkpoint-N/trainer_state.json`, the names TRL's GRPOTrainer logs:
`reward`, `reward_std`, `frac_reward_zero_std`, `entropy`, `kl`, `clip_ratio/*`, `grad_norm`,
`learning_rate`, `loss`; held-out accuracy as `eval_reward` at the evaluation steps, step 0 as with
`eval_on_start`), one folder per setting and seed (`EXPERIMENT.VARIANT_sSEED`), and read by both:
- `mathrl import` on each experiment's export (its reference arm the experiment's `baseline` or `reference`
  role): a run is flagged for a kind when one of the kind's alerts (`OURS`) fired on it or on its arm;
- `rl-doctor diagnose PATH --format json` (rldoctor 0.2.0, installed by this script in a venv of its own): a
  run is flagged when a finding of the kind's detectors (`THEIRS`) is a WARNING or CRITICAL, its own alert level.

It prints, per kind and tool, precision and recall with their counts (and writes them to OUT/detectors.csv and
.md). Nothing here is a test: the numbers depend on the results tree given.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd

from bench.common import ROOT

RLDOCTOR = "rldoctor==0.2.0"
KINDS = ("entropy_collapse", "reward_hacking", "crash", "no_learning")
OURS = {
    "entropy_collapse": {"low_entropy", "arm_entropy_collapse", "arm_entropy_below_reference"},
    "reward_hacking": {"arm_reward_hack"},
    "crash": {"reward_swing", "nonfinite", "grad_norm_spike", "high_kl"},
    "no_learning": {"no_signal", "reward_flat"},
}
THEIRS = {
    "entropy_collapse": {"entropy_collapse"},
    "reward_hacking": {"reward_hacking"},
    "crash": {"gradient_pathology", "kl_drift"},
    "no_learning": {"plateau", "advantage_collapse"},
}
TRL_NAMES = {
    "reward_mean": "reward",
    "reward_std": "reward_std",
    "frac_zero_std": "frac_reward_zero_std",
    "entropy": "entropy",
    "kl": "kl",
    "clip_frac_low": "clip_ratio/low_mean",
    "clip_frac_high": "clip_ratio/high_mean",
    "clip_frac": "clip_ratio/region_mean",
    "grad_norm": "grad_norm",
    "lr": "learning_rate",
    "policy_loss": "loss",
}


def labels(run) -> dict[str, bool]:
    """The run's failures by the project's definitions (module docstring), from its files."""
    from mathrl.analysis.measures import MEASURES
    from mathrl.analysis.results import collapsed

    m = {
        name: fn(run)
        for name, (_, fn) in MEASURES.items()
        if name in ("entropy_fall", "gain", "reward_start", "reward_end")
    }
    rise = m["reward_end"] - m["reward_start"]
    return {
        "entropy_collapse": bool(m["entropy_fall"] >= 0.5),
        "reward_hacking": bool(run.settings.get("reward", "exact") != "exact" and rise > 0 and m["gain"] < -0.05),
        "crash": bool(collapsed(run)),
        "no_learning": bool(m["gain"] < 0.01 and rise < 0.01),
    }


def trl_state(run) -> dict:
    """A run's metrics as the `trainer_state.json` TRL's GRPOTrainer would leave: a training row per step, an
    evaluation row (`eval_reward`) at each evaluation, step 0 included."""
    history = [{"step": 0, "eval_reward": float(run.initial_eval)}] if not math.isnan(run.initial_eval) else []
    for row in run.metrics.to_dict("records"):
        step = int(row["step"])
        train = {name: float(row[col]) for col, name in TRL_NAMES.items() if col in row and row[col] == row[col]}
        history.append({"step": step, **train})
        if row.get("eval_accuracy") == row.get("eval_accuracy"):
            history.append({"step": step, "eval_reward": float(row["eval_accuracy"])})
    return {"global_step": int(run.metrics["step"].iloc[-1]), "log_history": history}


def export(runs: dict, out: Path) -> dict[str, dict[str, Path]]:
    """{experiment: {run id: its trainer_state.json}}, one folder per setting and seed under OUT/export."""
    from mathrl.analysis.kit import setting

    files: dict[str, dict[str, Path]] = {}
    for run_id, run in runs.items():
        name = f"{run.spec.experiment}.{setting(run.spec) or 'default'}".replace("=", "-").replace(",", "-")
        path = out / "export" / run.spec.experiment / f"{name}_s{run.spec.seed}"
        state = trl_state(run)
        target = path / f"checkpoint-{state['global_step']}" / "trainer_state.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(state))
        files.setdefault(run.spec.experiment, {})[run_id] = target
    return files


def our_flags(cfg: dict, experiment: str, folder: Path, out: Path) -> dict[str, set[str]]:
    """{exported run folder name: the alert kinds raised on it or its arm} from `mathrl import` of one experiment."""
    import yaml

    from mathrl.analysis.imported import build

    roles = (cfg["experiments"].get(experiment) or {}).get("roles") or {}
    base = roles.get("baseline") or roles.get("reference")
    exported = {p.name.rsplit("_s", 1)[0] for p in folder.iterdir()}
    base = base if f"{experiment}.{base}" in exported else None  # a tree without the reference arm's runs
    spec = out / "arms" / f"{experiment}.yaml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(yaml.safe_dump({"name": experiment, **({"baseline": f"{experiment}.{base}"} if base else {})}))
    done = build([folder], spec, out / "imported" / experiment, "../report.html", "bench.detectors")
    t = done["tables"]
    flags = {r.log.name: set() for r in done["runs"]}
    by_id = {r.run_id: r.log.name for r in done["runs"]}
    for a in t["imported_alerts"].itertuples():
        flags[by_id[a.run_id]].add(a.kind)
    for a in t["imported_arm_alerts"].itertuples():
        for r in done["runs"]:
            if r.arm == a.arm:
                flags[r.log.name].add(a.kind)
    return flags


def rldoctor(venv: Path) -> Path:
    """rl-doctor in a venv of its own (made once)."""
    exe = venv / "bin" / "rl-doctor"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", RLDOCTOR], check=True)
    return exe


def their_flags(exe: Path, state: Path) -> set[str]:
    """The detectors whose finding on one exported run is a WARNING or CRITICAL."""
    done = subprocess.run([str(exe), "diagnose", str(state), "--format", "json"], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"rl-doctor on {state}: {done.stderr.strip()}")
    findings = json.loads(done.stdout)["findings"]
    return {f["detector"] for f in findings if f["severity"] in ("WARNING", "CRITICAL")}


def score(rows: pd.DataFrame) -> pd.DataFrame:
    """Per kind and tool: runs labelled, flagged, flagged and labelled; precision and recall."""
    out = []
    for kind in KINDS:
        truth = rows[f"label_{kind}"]
        for tool in ("mathrl", "rldoctor"):
            flag = rows[f"{tool}_{kind}"]
            tp, flagged, positives = int((flag & truth).sum()), int(flag.sum()), int(truth.sum())
            out.append(
                {
                    "kind": kind,
                    "tool": tool,
                    "runs": len(rows),
                    "labelled": positives,
                    "flagged": flagged,
                    "true_positives": tp,
                    "precision": tp / flagged if flagged else math.nan,
                    "recall": tp / positives if positives else math.nan,
                }
            )
    return pd.DataFrame(out)


def markdown(table: pd.DataFrame) -> str:
    """The table of docs/guide/own-runs.md: per kind, each tool's precision and recall with their counts."""
    lines = [
        "| failure kind (runs labelled) | mathrl: precision | mathrl: recall | rldoctor 0.2.0: precision | "
        "rldoctor 0.2.0: recall |",
        "| --- | --- | --- | --- | --- |",
    ]
    for kind, g in table.groupby("kind", sort=False):
        cells = []
        for tool in ("mathrl", "rldoctor"):
            r = g[g["tool"] == tool].iloc[0]
            p = f"{r.precision:.2f} ({r.true_positives}/{r.flagged})" if r.flagged else "– (0 flagged)"
            rec = f"{r.recall:.2f} ({r.true_positives}/{r.labelled})" if r.labelled else "– (none labelled)"
            cells += [p, rec]
        lines.append(f"| {kind} ({g['labelled'].iloc[0]} of {g['runs'].iloc[0]}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.detectors", description=__doc__.split("\n")[0])
    p.add_argument("--results", required=True, help="a results tree of the pipeline (its runs/ are read)")
    p.add_argument("--config", action="append", metavar="FILE", help="the config files the tree was made with")
    p.add_argument(
        "--venv",
        default=str(ROOT.parent / "rldoctor-venv"),
        help="rldoctor's venv, made there once (default: ../rldoctor-venv beside the checkout)",
    )
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "detectors"), help="exports and the table")
    args = p.parse_args(argv)
    from mathrl.analysis.results import load_runs
    from mathrl.pipeline.config import layered, load_config_and_runs

    cfg = load_config_and_runs(layered(args.config), [f"results={args.results}"])[0]
    runs = {rid: r for rid, r in load_runs(cfg).items() if r.ok and r.spec.same_as is None}
    if not runs:
        print(f"no trained runs under {args.results}", file=sys.stderr)
        return 2
    out = Path(args.out)
    files = export(runs, out)
    exe = rldoctor(Path(args.venv))
    rows = []
    for experiment, states in files.items():
        ours = our_flags(cfg, experiment, out / "export" / experiment, out)
        for run_id, state in states.items():
            mine, theirs = ours[state.parent.parent.name], their_flags(exe, state)
            rows.append(
                {
                    "run_id": run_id,
                    "experiment": experiment,
                    **{f"label_{k}": v for k, v in labels(runs[run_id]).items()},
                    **{f"mathrl_{k}": bool(mine & OURS[k]) for k in KINDS},
                    **{f"rldoctor_{k}": bool(theirs & THEIRS[k]) for k in KINDS},
                    "mathrl_alerts": " ".join(sorted(mine)),
                    "rldoctor_findings": " ".join(sorted(theirs)),
                }
            )
    rows = pd.DataFrame(rows)
    table = score(rows)
    rows.to_csv(out / "detector_runs.csv", index=False)
    table.to_csv(out / "detectors.csv", index=False)
    text = markdown(table)
    (out / "detectors.md").write_text(text + "\n")
    experiments = ", ".join(f"{e} ({(rows.experiment == e).sum()})" for e in files)
    print(f"{len(rows)} runs of {args.results}: {experiments}\n\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
