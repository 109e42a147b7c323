"""Measures of a run's held-out problems one by one: pass@k before and after RL for each k, from the samples and
correct answers per problem its `pass_at_k.csv` holds (runs with `pass_at_k`), with a 95% percentile-bootstrap
interval over problems; and greedy held-out accuracy at the start and the end by the number of carries of a problem
(addition's measure of difficulty), from its `heldout.csv` (every run). The maths is `mathrl.analysis.estimators`.

Their tables have a row per run and k, or per run and number of carries: claim tables (`CLAIM_TABLES`), built here
from the runs a study passes in.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
from scipy import stats

from mathrl.analysis import estimators as dx
from mathrl.analysis.results import Run, read_csv

KS = (1, 2, 4, 8, 16, 32, 64)  # the k of pass@k, each up to the samples drawn per problem
RUN_KEYS = ["experiment", "setting", "seed"]
PASS_AT_K = [*RUN_KEYS, "phase", "k", "problems", "pass_at_k", "boot_lo", "boot_hi"]
CARRIES = ["setting", "seed", "warmup", "carries", "problems", "initial", "final", "gain"]
# The tables claims read, and their columns, stated once: the tables are made with them, and
# mathrl.analysis.claim_names reads this assignment from the source (without importing the module).
CLAIM_TABLES = {
    "diagnostics_pass_at_k_runs": PASS_AT_K,
    # the negative controls' rows of pass_at_k_runs, apart: their claims are not the other runs'
    "diagnostics_negative_controls_pass_at_k_runs": PASS_AT_K,
    "diagnostics_adv_scaling_runs": CARRIES,
}


def bootstrap_mean(x: np.ndarray) -> tuple[float, float]:
    """95% percentile-bootstrap interval of a mean over problems (scipy.stats.bootstrap)."""
    if np.ptp(x) == 0:  # one problem, or all alike: nothing to resample
        return float(np.mean(x)), float(np.mean(x))
    res = stats.bootstrap((x,), np.mean, n_resamples=2000, method="percentile", random_state=np.random.default_rng(0))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def run_csv(run: Run, name: str) -> pd.DataFrame | None:
    """A CSV file of a run's directory, checked whole against what its summary.json recorded of it
    (`results.read_csv`); None where the run wrote none."""
    path = run.dir / name if run.dir is not None else None
    if path is None or not path.exists():
        return None
    return read_csv(path, ((run.summary or {}).get("files") or {}).get(name))


def pass_at_k_rows(keys: dict, run: Run) -> list[dict]:
    """A run's pass@k per phase (initial, final) and k (each of KS up to its fewest samples of a problem): the mean
    over problems and its bootstrap interval; none where the run wrote no pass_at_k.csv."""
    rows, found = [], run_csv(run, "pass_at_k.csv")
    for phase, g in found.groupby("phase", sort=False) if found is not None else ():
        n, c = g["samples"].to_numpy(), g["correct"].to_numpy()
        for k in (k for k in KS if k <= n.min()):
            p = dx.pass_at_k(n, c, k)
            lo, hi = bootstrap_mean(p)
            row = {
                "phase": phase,
                "k": k,
                "problems": len(p),
                "pass_at_k": float(p.mean()),
                "boot_lo": lo,
                "boot_hi": hi,
            }
            rows.append({**keys, **row})
    return rows


def pass_at_k_runs(runs: Iterable[tuple[dict, Run]]) -> pd.DataFrame:
    """pass@k per run (its `keys`: experiment, setting, seed), phase and k (`pass_at_k_rows`)."""
    return pd.DataFrame([row for keys, run in runs for row in pass_at_k_rows(keys, run)], columns=PASS_AT_K)


def carry_rows(keys: dict, run: Run, is_add: bool) -> list[dict]:
    """A run's greedy held-out accuracy at the start and the end over all its problems (carries `all`) and per
    number of carries (-1 for a task other than addition, `is_add` False); none where it wrote no heldout.csv."""
    h = run_csv(run, "heldout.csv")
    if h is None:
        return []
    h["carries"] = dx.carries(h["a"], h["b"]) if is_add else -1
    return [
        {
            **keys,
            "carries": str(c),
            "problems": len(g),
            "initial": float(g["initial"].mean()),
            "final": float(g["final"].mean()),
        }
        for c, g in [("all", h), *h.groupby("carries")]
    ]


def carry_runs(runs: Iterable[tuple[dict, Run]], tasks: dict) -> pd.DataFrame:
    """Held-out accuracy by carries per run (its `keys`: setting, seed, warm-up; `carry_rows`) and its gain (final −
    initial); `tasks`: the configuration's tasks (an addition task has `op: add`)."""
    rows = [
        row
        for keys, run in runs
        for row in carry_rows(keys, run, tasks.get(run.settings.get("task"), {}).get("op") == "add")
    ]
    df = pd.DataFrame(rows, columns=CARRIES[:-1])
    return df.assign(gain=df["final"] - df["initial"])
