"""`mathrl aggregate`: the run outputs into one CSV per report table, from the files alone."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd

from mathrl.results import curves, run_index
from mathrl.snapshot import atomic_write_bytes
from mathrl.studies import STUDIES
from mathrl.studies.context import Context


def alerts_table(ctx: Context) -> pd.DataFrame:
    """Every stability-monitor alert of every run: which fired when."""
    rows = [
        {"run_id": run_id, "experiment": run.spec.experiment, "variant": run.spec.variant or "", "seed": run.spec.seed, **alert}
        for run_id, run in ctx.runs.items()
        if run.ok
        for alert in run.summary["alerts"]
    ]
    return pd.DataFrame(rows, columns=["run_id", "experiment", "variant", "seed", "step", "kind", "value", "threshold", "message"])


def sft_table(ctx: Context) -> pd.DataFrame:
    rows = []
    for task in ctx.cfg["tasks"]:
        s = ctx.sft(task)
        if s is not None:
            rows.append({"task": task, "preset": s["settings"]["preset"], "n_params": s["n_params"], "steps": s["steps"],
                         "eval_accuracy": s["eval_accuracy"], "band_low": s["band"][0], "band_high": s["band"][1],
                         "in_band": s["in_band"], "wall_seconds": s["wall_seconds"]})  # fmt: skip
    return pd.DataFrame(rows)


def all_tables(ctx: Context) -> dict[str, pd.DataFrame]:
    tables = {"runs": run_index(ctx.runs), "curves": curves(ctx.runs), "alerts": alerts_table(ctx), "sft": sft_table(ctx)}
    for study in STUDIES:
        for name, df in study.tables(ctx).items():
            if name in tables:
                raise ValueError(f"study {study.NAME}: table {name} is defined twice")
            tables[name] = df
    return tables


def aggregate(cfg: dict, out_dir: Path | None = None) -> dict[str, int]:
    """Write results/tables/{name}.csv for every table and an index.json of row counts."""
    out = Path(out_dir) if out_dir else Path(cfg["results"]) / "tables"
    counts = {}
    for name, df in all_tables(Context(cfg)).items():
        buf = io.StringIO()
        df.to_csv(buf, index=False)
        atomic_write_bytes(out / f"{name}.csv", buf.getvalue().encode())
        counts[name] = len(df)
    atomic_write_bytes(out / "index.json", (json.dumps(counts, indent=2) + "\n").encode())
    return counts
