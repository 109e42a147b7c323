"""`mathrl aggregate`: the run outputs into one CSV per report table, from the files alone."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pandas as pd

from mathrl.analysis import claim_names, claims, coverage
from mathrl.analysis.measures import BANDIT_TABLES, RUN_TABLES, run_measures
from mathrl.analysis.results import complete_marker, curves, missing_inputs, run_index
from mathrl.analysis.studies import STUDIES
from mathrl.analysis.study_inputs import MADE_WITH, Context, tables_hash
from mathrl.pipeline import layout
from mathrl.pipeline.atomic import atomic_write


def alerts_table(ctx: Context) -> pd.DataFrame:
    """Every stability-monitor alert of every run: which fired when."""
    rows = [
        {
            "run_id": run_id,
            "experiment": run.spec.experiment,
            "variant": run.spec.variant or "",
            "seed": run.spec.seed,
            **alert,
        }
        for run_id, run in ctx.runs.items()
        if run.ok
        for alert in run.summary["alerts"]
    ]
    return pd.DataFrame(
        rows, columns=["run_id", "experiment", "variant", "seed", "step", "kind", "value", "threshold", "message"]
    )


def last_rise(history: list[dict], evaluations: int = 4) -> float:
    """How much validation accuracy rose over the warm-up's last `evaluations` readings: a
    large value means RL starts mid-transition, where part of any gain is the warm-up's own
    momentum. NaN with fewer readings (or none: no validation split)."""
    accs = [h["val_accuracy"] for h in history if "val_accuracy" in h]
    return accs[-1] - accs[-evaluations] if len(accs) >= evaluations else math.nan


def sft_table(ctx: Context) -> pd.DataFrame:
    """One row per warm-up of each task that has a summary."""
    rows = []
    for task in ctx.cfg["tasks"]:
        for k, s in enumerate(ctx.warmups(task)):
            rows.append(
                {
                    "task": task,
                    "warmup": s.get("warmup", k),
                    "preset": s["settings"]["preset"],
                    "n_params": s["n_params"],
                    "steps": s["steps"],
                    "val_accuracy": s.get("val_accuracy", math.nan),
                    "last_rise": last_rise(s.get("history", [])),
                    "eval_accuracy": s["eval_accuracy"],
                    "n_test": s.get("n_test", math.nan),
                    "band_low": s["band"][0],
                    "band_high": s["band"][1],
                    "in_band": s["in_band"],
                    "wall_seconds": s["wall_seconds"],
                }
            )
    return pd.DataFrame(rows)


def warmup_spread(sft: pd.DataFrame) -> pd.DataFrame:
    """Per task: how far apart its warm-ups start RL (validation and test accuracy, steps), lowest to highest."""
    rows = []
    for task, g in sft.groupby("task", sort=False) if len(sft) else []:
        row = {"task": task, "warmups": len(g)}
        for col in ("val_accuracy", "eval_accuracy", "steps"):
            values = pd.to_numeric(g[col], errors="coerce")
            row |= {f"{col}_min": values.min(), f"{col}_max": values.max(), f"{col}_range": values.max() - values.min()}
        rows.append(row)
    return pd.DataFrame(rows)


def all_tables(ctx: Context) -> dict[str, pd.DataFrame]:
    """Every table the report shows; last, claims.csv: every declared claim judged over the others."""
    tables = {
        "runs": run_index(ctx.runs),
        "curves": curves(ctx.runs),
        "alerts": alerts_table(ctx),
        "sft": sft_table(ctx),
        "run_measures": run_measures(ctx.runs),
        **{name: ctx.run_table(name) for name in RUN_TABLES},
        **{name: ctx.bandit_table(name) for name in BANDIT_TABLES},
    }
    tables["sft_spread"] = warmup_spread(tables["sft"])
    for study in STUDIES:
        for name, df in study.tables(ctx).items():
            if name in tables:
                raise ValueError(f"study {study.NAME}: table {name} is defined twice")
            tables[name] = df
    # each table claims read as its module declares it: the names a claim may use are checked against that
    tables = {name: claim_names.conform(name, df, ctx.cfg) for name, df in tables.items()}
    read_back = as_read_back(tables)
    tables["claims"] = with_unreadable_runs(claims.judge_all(ctx.cfg, read_back), ctx, read_back)
    tables["claims_counts"] = claims.counts(tables["claims"])
    tables["coverage"] = coverage.table(ctx.cfg)
    return tables


def with_unreadable_runs(judged: pd.DataFrame, ctx: Context, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """claims.csv with a note on each claim of an experiment some of whose runs' files do not read whole: those runs
    are in no table, so the claim's n counts the others, and it says so (the report and the console name the
    files)."""
    unreadable: dict[str, list[str]] = {}
    for run_id, run in ctx.runs.items():
        if run.status == "unreadable":
            unreadable.setdefault(run.spec.experiment, []).append(run_id)
    if not unreadable or judged.empty:
        return judged
    experiment = {spec.id: spec.experiment for spec in claims.load(ctx.cfg, tables)}
    out = judged.copy()
    for i, claim_id in out["claim_id"].items():
        runs = unreadable.get(experiment.get(claim_id))
        if runs:
            said = f"{len(runs)} run(s) of {experiment[claim_id]} left out, their files unreadable: {', '.join(runs)}"
            note = out.at[i, "note"]
            out.at[i, "note"] = f"{note}; {said}" if isinstance(note, str) and note else said
    return out


def as_read_back(tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The tables as the report reads them back from CSV (the claims judge exactly what is written)."""
    out = {}
    for name, df in tables.items():
        buf = io.StringIO()
        df.to_csv(buf, index=False)
        buf.seek(0)
        try:
            out[name] = pd.read_csv(buf)
        except pd.errors.EmptyDataError:
            out[name] = pd.DataFrame()
    return out


def headline_metrics(tables: dict[str, pd.DataFrame]) -> dict:
    """A few numbers per experiment and warm-up task, for `dvc metrics show` (metrics.json):
    runs expected and complete, mean initial / final / best held-out accuracy over the
    complete runs, and the share of them that collapsed. NaN is written as null."""

    def number(value) -> float | None:
        return None if pd.isna(value) else round(float(value), 6)

    out: dict = {"experiments": {}, "sft": {}}
    runs = tables["runs"]
    for experiment, group in runs.groupby("experiment", sort=False) if not runs.empty else []:
        ok = group[group["status"].isin(["complete", "stopped_nonfinite"])]
        out["experiments"][experiment] = {
            "runs": len(group),
            "complete": len(ok),
            "initial_eval": number(ok["initial_eval"].mean()),
            "final_eval": number(ok["final_eval"].mean()),
            "best_eval": number(ok["best_eval"].mean()),
            "collapsed_share": number(ok["collapsed"].astype(float).mean()) if len(ok) else None,
        }
    for _, row in tables["sft"].iterrows():
        out["sft"].setdefault(row["task"], []).append(
            {"warmup": int(row["warmup"]), "eval_accuracy": number(row["eval_accuracy"]), "steps": int(row["steps"])}
        )
    return out


def aggregate(cfg: dict, out_dir: Path | None = None) -> tuple[dict[str, int], list[str], list[str]]:
    """Write results/tables/{name}.csv for every table, an index.json of row counts, the
    headline metrics.json and the config's hash (config.json); then results/tables.complete
    if no input was missing, stale or unreadable, else remove it. Returns the tables' row
    counts and, per stale run (trained with settings other than the config's), what differs,
    and per run whose files do not read whole, which file and why."""
    out = Path(out_dir) if out_dir else layout.at(cfg, layout.TABLES)
    counts = {}
    tables = all_tables(Context(cfg))
    for name, df in tables.items():
        buf = io.StringIO()
        df.to_csv(buf, index=False)
        atomic_write(out / f"{name}.csv", buf.getvalue().encode())
        counts[name] = len(df)
    atomic_write(out / MADE_WITH, (json.dumps({"config_hash": tables_hash(cfg)}) + "\n").encode())
    atomic_write(out / "index.json", (json.dumps(counts, indent=2) + "\n").encode())
    atomic_write(out / "metrics.json", (json.dumps(headline_metrics(tables), indent=2) + "\n").encode())
    runs = tables["runs"]
    stale, unreadable = (
        list(dict.fromkeys(runs.loc[runs["status"] == status, "problem"])) if not runs.empty else []
        for status in ("stale", "unreadable")
    )
    marker = complete_marker(out)  # the pipeline's sign that every input existed and was the config's
    if missing_inputs(cfg) or stale or unreadable:
        marker.unlink(missing_ok=True)
    else:
        atomic_write(marker, b"every input of the tables existed when they were written\n")
    return counts, stale, unreadable
