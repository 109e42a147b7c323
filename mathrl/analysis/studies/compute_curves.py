"""Compute-performance curves, a part of the diagnostics study (not a report section of its own).

ScaleRL's sigmoid (`mathrl.analysis.curves`, arXiv 2510.13786) fitted to each run's held-out greedy accuracy against the
rollouts it has sampled (the `samples` column of metrics.csv; every rollout of a task has the same number of answer
tokens, so tokens would only rescale C_mid). Per setting: the ceiling A and the efficiency B with 95% t intervals
over seeds (one fit per seed; a bootstrap over three to five seeds would understate the spread), C_mid, and the error
of a fit on the first half of a run's compute predicting its second half, beside the error a perfect forecast would
show from the evaluation's sampling alone (policy_losses evaluates every step on few problems: its runs have a first
half to fit). The batch study is restated as ceiling against efficiency: each batch size's A and B against the
reference batch's, paired by seed.

The functions take the runs as (experiment, setting, run) triples, which `mathrl.analysis.studies.diagnostics` passes
in.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import mathrl.analysis.kit as kit
from mathrl.analysis import curves
from mathrl.analysis.figure_style import COLORS, placeholder, plt, table_band
from mathrl.analysis.kit import NAN, arms, estimate_columns, versus
from mathrl.analysis.results import mean_spread, warmup
from mathrl.analysis.verdict import Estimate, mean_interval, t_halfwidth

BATCH = "batch"  # the experiment restated as ceiling against efficiency
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
SUMMARY_COLUMNS = (
    "experiment setting runs n points R0 A_mean A_lo A_hi a_at_bound B_n B_mean B_lo B_hi C_mid "
    "rmse_mean half_n half_mae_mean half_mae_lo half_mae_hi half_noise fitted note"
).split()
BATCH_COLUMNS = (
    "setting batch_size reference n A_mean A_lo A_hi a_at_bound B_n B_mean B_lo B_hi "
    "dA dA_lo dA_hi dA_n dB dB_lo dB_hi dB_n"
).split()


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
        **curves.half_fit_error(c, r, run.initial_eval, problems=kit.n_evaluated(run)),
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


def _difference(name: str, est: Estimate) -> dict:
    return {name: est.estimate, f"{name}_lo": est.lo, f"{name}_hi": est.hi, f"{name}_n": est.n}


def _note(g: pd.DataFrame, fitted: pd.DataFrame) -> str:
    """Why a setting's numbers are missing or read with care, in words."""
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


def summary(fits: pd.DataFrame) -> pd.DataFrame:
    """Per experiment and setting: A and B with 95% t intervals over the fitted runs, C_mid (geometric mean),
    the half-fit prediction error, the points a run's fit rests on, and a note."""
    rows = []
    for (exp, name), g in fits.groupby(["experiment", "setting"], sort=False):
        fitted = g[g["fitted"].astype(bool)]
        half = mean_interval(fitted["half_mae"])
        noise = fitted.loc[fitted["half_mae"].notna(), "half_noise"]
        log_mid = np.log(fitted["C_mid"].dropna())  # C_mid: a geometric mean (NaN where no run has one)
        rows.append(
            {
                "experiment": exp,
                "setting": name,
                "runs": len(g),
                "n": len(fitted),
                "fitted": len(fitted) > 0,
                "points": int(g["points"].median()),
                "R0": float(g["R0"].mean()),
                **ceiling_and_efficiency(fitted),
                "C_mid": float(np.exp(log_mid.mean())),
                "rmse_mean": float(fitted["rmse"].mean()),
                **estimate_columns("half_mae", half, (0.0, None)),  # an absolute error is at least 0
                "half_n": half.n,
                "half_noise": float(noise.mean()),
                "note": _note(g, fitted),
            }
        )
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def batch_design(cfg: dict) -> tuple[str, dict[str, int]]:
    """The batch study's reference cell (its `reference` role, a grid point like batch_size=512; else the largest
    batch), and the batch size of each of its settings: its variants' own, or its grid points'."""
    exp = cfg.get("experiments", {}).get(BATCH) or {}
    grid = (exp.get("grid") or {}).get("batch_size") or []
    reference = (exp.get("roles") or {}).get("reference") or (f"batch_size={max(grid)}" if grid else "")
    fixed = (exp.get("fixed") or {}).get("batch_size")
    sizes = {name: v.get("batch_size", fixed) for name, v in (exp.get("variants") or {}).items()}
    sizes.update({f"batch_size={b}": b for b in grid})
    return reference, {k: int(v) for k, v in sizes.items() if v is not None}


def batch_table(fitted: pd.DataFrame, reference: str, sizes: dict[str, int]) -> pd.DataFrame:
    """The batch study as ceiling against efficiency, from its fitted runs: per batch size, A and B, and their
    differences from the reference batch's (paired by seed; B over the seeds where both runs gained). `sizes`: each
    setting's batch size (else read from a grid point's name, `batch_size=64`)."""
    rows = []
    for name, g, ref in arms(fitted, reference):
        size = sizes.get(name, int(str(name).split("=")[-1]) if "=" in str(name) else NAN)
        rows.append(
            {
                "setting": name,
                "batch_size": size,
                "reference": name == reference,
                "n": int(g["A"].count()),
                **ceiling_and_efficiency(g),
                **_difference("dA", versus(g, ref, "A")),
                **_difference("dB", versus(g, ref, "B")),
            }
        )
    out = pd.DataFrame(rows, columns=BATCH_COLUMNS)
    return out.sort_values("batch_size", kind="stable").reset_index(drop=True)


def drawn(fitted: pd.DataFrame, runs) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What the figure draws of the batch study's fitted settings (`fitted`: their runs' fits): the measured accuracy
    per evaluation and the fitted curves on a grid of compute, each as the mean and spread over seeds."""
    points = [
        evaluation_points(run).assign(setting=name, seed=run.spec.seed)
        for exp, name, run in runs
        if exp == BATCH and name in set(fitted["setting"])
    ]
    pts = pd.concat(points).rename(columns={"eval_accuracy": "accuracy"}) if points else pd.DataFrame()
    pts, grid = pts.reindex(columns=["setting", "seed", "samples", "accuracy"]), []
    for name, g in fitted.groupby("setting", sort=False):
        first = pts.loc[(pts["setting"] == name) & (pts["samples"] > 0), "samples"].min()
        c = np.geomspace(first, g["C_max"].max(), GRID)  # from the first evaluation after the start to the last
        for fit in g.itertuples():
            flat = not np.isfinite(fit.B)
            r = np.full(GRID, fit.R0) if flat else curves.sigmoid_curve(c, fit.R0, fit.A, fit.B, fit.C_mid)
            grid += [{"setting": name, "seed": fit.seed, "samples": x, "fit": y} for x, y in zip(c, r)]
    fit = pd.DataFrame(grid, columns=["setting", "seed", "samples", "fit"])
    return mean_spread(pts, ["setting", "samples"], ["accuracy"]), mean_spread(fit, ["setting", "samples"], ["fit"])


def tables(runs, cfg: dict) -> dict[str, pd.DataFrame]:
    runs = list(runs)
    fits = fit_runs(runs)
    batch = fits[(fits["experiment"] == BATCH) & fits["fitted"].astype(bool)]
    points, curves_drawn = drawn(batch, runs)
    return {
        "diagnostics_curves_runs": fits,
        "diagnostics_curves": summary(fits),
        "diagnostics_curves_batch": batch_table(batch, *batch_design(cfg)),
        "diagnostics_curves_points": points,
        "diagnostics_curves_fit": curves_drawn,
    }


def figure(t) -> plt.Figure:
    """Held-out accuracy against rollouts sampled in the batch study (points with 95% t intervals over seeds), and the
    fitted curves (band: 95% t interval over seeds)."""
    pts, fit = t["diagnostics_curves_points"], t["diagnostics_curves_fit"]
    fig, ax = plt.subplots(figsize=(6.4, 3.8), layout="constrained")
    if len(fit):
        start = pts[pts["samples"] == 0]
        for i, (name, g) in enumerate(fit.groupby("setting", sort=False)):
            color = COLORS[i % len(COLORS)]
            table_band(
                ax, g, "eval_accuracy", f"{name} (fit)", color, x="samples", value="fit", scale=100, measured=False
            )
            p = pts[(pts["setting"] == name) & (pts["samples"] > 0)]
            half = np.nan_to_num(t_halfwidth(p["accuracy_std"], p["n"])) * 100
            ax.errorbar(
                p["samples"], p["accuracy_mean"] * 100, yerr=half, fmt="o", ms=4, color=color, capsize=2, zorder=3
            )
        if len(start):
            ax.axhline(float(start["accuracy_mean"].mean()) * 100, color="0.4", ls=":", lw=1, label="start (R0)")
        ax.set_xscale("log")
        ax.legend(fontsize=7)
    else:
        placeholder(ax, "no run of the batch study has enough evaluations to fit")
    title = "Batch study: accuracy against compute, R(C) = R0 + (A − R0)/(1 + (C_mid/C)^B)"
    ax.set(xlabel="rollouts sampled (compute C)", ylabel="held-out greedy accuracy (%)", title=title)
    return fig


def section(t) -> dict:
    s = t["diagnostics_curves"].reindex(columns=SUMMARY_COLUMNS)  # a table not written: no rows
    counted = s.groupby("experiment", sort=False)["points"].median()
    return {
        "curves": s[s["fitted"].astype(bool)],
        "curves_not_fitted": s[~s["fitted"].astype(bool)],
        "curves_points": ", ".join(f"{e} {int(p)}" for e, p in counted.items()),
        "curves_batch": t["diagnostics_curves_batch"],
        "curves_min_points": curves.MIN_POINTS,
        "curves_settings": len(s),
        "curves_fitted": int(s["fitted"].astype(bool).sum()),
        "curves_half": int((s["half_n"] > 0).sum()),
    }
