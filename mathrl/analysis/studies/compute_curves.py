"""Compute-performance curves, a part of the diagnostics study (not a report section of its own).

ScaleRL's sigmoid (`mathrl.analysis.curves`, arXiv 2510.13786) fitted to each run's held-out greedy accuracy against the
rollouts it has sampled (the `samples` column of metrics.csv; every rollout of a task has the same number of answer
tokens, so tokens would only rescale C_mid). Per setting: the ceiling A and the efficiency B with 95% t intervals
over seeds (one fit per seed; a bootstrap over three to five seeds would understate the spread), C_mid, and the error
of a fit on the first half of a run's compute predicting its second half, beside the error a perfect forecast would
show from the evaluation's sampling alone (policy_losses evaluates every step on few problems: its runs have a first
half to fit). The batch study is restated as ceiling against efficiency: each batch size's A and B against the
reference batch's, paired by seed.

A run's fit is `mathrl.analysis.measures.curve_fits`'s; `tables` takes the runs as (experiment, setting, run) triples,
which `mathrl.analysis.studies.diagnostics` passes in.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mathrl.analysis import curves
from mathrl.analysis.figure_style import COLORS, placeholder, plt, table_band
from mathrl.analysis.kit import NAN, arms, estimate_columns, versus
from mathrl.analysis.measures.curve_fits import ceiling_and_efficiency, drawn, fit_runs, note
from mathrl.analysis.verdict import mean_interval, t_halfwidth

BATCH = "batch"  # the experiment restated as ceiling against efficiency
SUMMARY_COLUMNS = (
    "experiment setting runs n points R0 A_mean A_lo A_hi a_at_bound B_n B_mean B_lo B_hi C_mid "
    "rmse_mean half_n half_mae_mean half_mae_lo half_mae_hi half_noise fitted note"
).split()
BATCH_COLUMNS = (
    "setting batch_size reference n A_mean A_lo A_hi a_at_bound B_n B_mean B_lo B_hi "
    "dA dA_lo dA_hi dA_n dB dB_lo dB_hi dB_n"
).split()


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
                "note": note(g, fitted),
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
                **estimate_columns("dA", versus(g, ref, "A"), n=True, mean=""),
                **estimate_columns("dB", versus(g, ref, "B"), n=True, mean=""),
            }
        )
    out = pd.DataFrame(rows, columns=BATCH_COLUMNS)
    return out.sort_values("batch_size", kind="stable").reset_index(drop=True)


def tables(runs, cfg: dict) -> dict[str, pd.DataFrame]:
    runs = list(runs)
    fits = fit_runs(runs)
    batch = fits[(fits["experiment"] == BATCH) & fits["fitted"].astype(bool)]
    points, curves_drawn = drawn(batch, runs, BATCH)
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
        "curves_points": ", ".join(f"{e} {int(p)}" for e, p in counted.items()),
        "curves_min_points": curves.MIN_POINTS,
        "curves_settings": len(s),
        "curves_fitted": int(s["fitted"].astype(bool).sum()),
        "curves_half": int((s["half_n"] > 0).sum()),
    }
