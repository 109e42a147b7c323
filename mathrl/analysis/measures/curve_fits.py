"""Compute-performance curves of runs (ScaleRL's sigmoid, `mathrl.analysis.curves`, arXiv 2510.13786): a run's held-out
greedy accuracy against the rollouts it has sampled (the `samples` column of metrics.csv), its fit (R0, C_max, A, B,
C_mid, and the error of a fit on the first half of its compute predicting the second half), the fitted runs' ceiling
and efficiency with their intervals, and the measured and fitted curves the diagnostics study draws.

A run is given as an (experiment, setting, run) triple, as `mathrl.analysis.studies.diagnostics` passes them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mathrl.analysis import curves
from mathrl.analysis.measures.general import n_eval
from mathrl.analysis.measures.series import NAN
from mathrl.analysis.results import mean_spread, warmup
from mathrl.analysis.verdict import estimate_columns, mean_interval

GRID = 40  # points of each drawn curve
RUN_COLUMNS = [
    "experiment",
    "setting",
    "seed",
    "warmup",
    "R0",
    "C_max",
    *curves.FIT_KEYS,
    *"half_mae half_points half_predicted half_noise half_reason".split(),
]


def evaluation_points(run) -> pd.DataFrame:
    """(step, eval_accuracy, samples) at the run's evaluations, the start first (step 0, no samples yet)."""
    e = run.evals
    samples = dict(zip(run.metrics["step"], run.metrics["samples"]))
    return e.assign(samples=[0.0 if s == 0 else float(samples.get(s, NAN)) for s in e["step"]])


def run_fit(run) -> dict:
    """A run's fit (and the fit of its first half, with the error a perfect forecast would show from the
    evaluation's sampling alone): R0, C_max, A, B, C_mid, how many points, and why not where not."""
    p = evaluation_points(run)
    c, r = p["samples"].to_numpy(), p["eval_accuracy"].to_numpy()
    return {
        "R0": run.initial_eval,
        "C_max": float(np.nanmax(c)),
        **curves.fit_curve(c, r, run.initial_eval),
        **curves.half_fit_error(c, r, run.initial_eval, problems=n_eval(run)),
    }


def fit_runs(runs) -> pd.DataFrame:
    """One row per run of `run_fit`. A run two experiments share (`same_as`: one directory, one training) is
    fitted once and listed under each."""
    fits, rows = {}, []
    for exp, name, run in runs:
        if run.spec.trained_as not in fits:
            fits[run.spec.trained_as] = run_fit(run)
        rows.append(
            {
                "experiment": exp,
                "setting": name,
                "seed": run.spec.seed,
                "warmup": warmup(run),
                **fits[run.spec.trained_as],
            }
        )
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def ceiling_and_efficiency(fits: pd.DataFrame) -> dict:
    """A and B over the fitted runs of a setting (95% t intervals; B over the runs that gained) and how many runs
    have A at its bound. Each interval is cut to the values its fit allows (A to [0, 1], B to curves.B_BOUNDS): a t
    interval of three ceilings near 1, or of efficiencies of which one ran to its bound of 20, reaches past them."""
    a, b = mean_interval(fits["A"]), mean_interval(fits["B"])
    return {
        **estimate_columns("A", a, (0.0, 1.0)),
        "a_at_bound": int(fits["a_at_bound"].sum()),
        "B_n": b.n,
        **estimate_columns("B", b, curves.B_BOUNDS),
    }


def note(g: pd.DataFrame, fitted: pd.DataFrame) -> str:
    """Why a setting's numbers are missing or read with care, in words (`g`: its runs' fits, `fitted`: those fitted)."""
    if fitted.empty:
        return f"not fitted: {g['reason'].iloc[0]}"
    at_bound, flat = int(fitted["a_at_bound"].sum()), int(fitted["B"].isna().sum())
    step = int((~fitted["converged"].astype(bool) & fitted["B"].notna()).sum())
    cases = [
        (at_bound, "A at its bound 1", "the curve has not bent"),
        (flat, "no gain", "A = R0, no B"),
        (step, "a step in log C", f"B runs to its bound {curves.B_BOUNDS[1]:g}; A and C_mid hold"),
    ]
    parts = [f"{what} in {count} of {len(fitted)} runs ({why})" for count, what, why in cases if count]
    if fitted["half_mae"].isna().all():
        parts.append(f"no half fit: {fitted['half_reason'].iloc[0]}")
    return "; ".join(parts)


def fitted_curve(fit, compute: np.ndarray) -> np.ndarray:
    """A run's fitted curve (a row of `fit_runs`) at `compute`: R0 throughout where it has no gain (no B)."""
    flat = not np.isfinite(fit.B)
    return np.full(len(compute), fit.R0) if flat else curves.sigmoid_curve(compute, fit.R0, fit.A, fit.B, fit.C_mid)


def drawn(fitted: pd.DataFrame, runs, experiment: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The curves of an experiment's fitted settings (`fitted`: their runs' fits; `runs`: triples): the measured
    accuracy per evaluation and the fitted curves on a grid of compute, each as the mean and spread over seeds."""
    points = [
        evaluation_points(run).assign(setting=name, seed=run.spec.seed)
        for exp, name, run in runs
        if exp == experiment and name in set(fitted["setting"])
    ]
    pts = pd.concat(points).rename(columns={"eval_accuracy": "accuracy"}) if points else pd.DataFrame()
    pts, grid = pts.reindex(columns=["setting", "seed", "samples", "accuracy"]), []
    for name, g in fitted.groupby("setting", sort=False):
        first = pts.loc[(pts["setting"] == name) & (pts["samples"] > 0), "samples"].min()
        c = np.geomspace(first, g["C_max"].max(), GRID)  # from the first evaluation after the start to the last
        for fit in g.itertuples():
            grid += [
                {"setting": name, "seed": fit.seed, "samples": x, "fit": y} for x, y in zip(c, fitted_curve(fit, c))
            ]
    fit = pd.DataFrame(grid, columns=["setting", "seed", "samples", "fit"])
    return mean_spread(pts, ["setting", "samples"], ["accuracy"]), mean_spread(fit, ["setting", "samples"], ["fit"])
