"""The testbed's calibration: is there a reference setting in which RL learns?

A study of how RL training goes wrong needs a setting in which it goes right; every remedy is judged against it. Three
questions, each answered from this run's files:

1. **The pilot.** The `calibration` experiment sweeps the learning rate (as a multiple of each task's reference, the
   variant its `reference_<task>` role names) at two batch sizes for a few dozen steps, evaluated on the validation
   split (`eval_split: val`: a selection never reads the held-out test set the verdicts are judged on). A setting
   *learns* when its gain (final − start validation accuracy) has a 95% interval above 0 (Newcombe, on the problems
   evaluated) and its accuracy never makes a sustained drop (two evaluations in a row more than 5 points below the
   start); `mathrl.analysis.measures.calibration_runs` measures both. The pilot's pick is the largest multiple that
   learns; the configured reference should be it.
2. **Each experiment's reference.** An experiment's `reference` role names the setting in which RL should learn (a
   variant, or a grid point as `key=value`). Its gain over seeds is a verdict: the interval above 0, or the report
   says it does not learn and by how much.
3. **How many runs end below their warm-up.** Every trained run (a run shared by two experiments counts once),
   destructive variants included: the share ending more than 5 points below its start, with its Wilson interval,
   against the testbed's target of at most a quarter.
"""

from __future__ import annotations

import pandas as pd

import mathrl.analysis.kit as kit
from mathrl.analysis.figure_style import COLORS, interval_points, placeholder, plt
from mathrl.analysis.kit import NAN, setting
from mathrl.analysis.measures.calibration_runs import DROP, gain_rows, pick_rows, pilot_rows
from mathrl.analysis.measures.general import final_eval, gain, initial_eval
from mathrl.analysis.verdict import mean_interval, wilson

NAME = "calibration"
TITLE = "Calibration: a reference setting in which RL learns"
DOCUMENT = ""

TARGET_BELOW = 0.25  # at most a quarter of the runs may end more than DROP below their warm-up
HEADROOM = 0.9  # a reference that starts this high has no room to show a gain


# ----------------------------------------------------------------------------- references
REFERENCE_COLUMNS = "experiment reference task n start final gain gain_lo gain_hi no_headroom".split()
BELOW_COLUMNS = "experiment runs below below_rate below_lo below_hi above above_rate median_gain".split()


def references_table(ctx) -> pd.DataFrame:
    """Per experiment with a reference (a variant name, or a grid point `key=value`, as its `reference` role names
    it): its setting, start, final and the gain over seeds (t interval); the verdict on it is the claim
    `reference_{experiment}` (config/claims.yaml)."""
    rows = []
    for exp, spec in ctx.cfg["experiments"].items():
        reference = (spec.get("roles") or {}).get("reference")
        runs = [r for r in ctx.experiment(exp) if setting(r.spec) == reference] if reference else []
        if not runs:
            rows.append(dict(zip(REFERENCE_COLUMNS, (exp, reference or "", "", 0))))
            continue
        per = {r.spec.seed: r for r in runs if r.ok}
        est = mean_interval({s: gain(r) for s, r in per.items()})
        start, final = (sum(m(r) for r in per.values()) / len(per) if per else NAN for m in (initial_eval, final_eval))
        ran = (setting(runs[0].spec), runs[0].settings["task"], est.n, start, final)
        values = (exp, *ran, est.estimate, est.lo, est.hi, bool(per) and start >= HEADROOM)
        rows.append(dict(zip(REFERENCE_COLUMNS, values)))
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- all runs
def below_table(gains: pd.DataFrame) -> pd.DataFrame:
    """Per experiment and overall: runs ending more than 5 points below their start (their share with its 95% Wilson
    interval) and above it, and the median gain."""
    rows = []
    for name, g in [*gains.groupby("experiment", sort=False), ("all runs", gains)] if len(gains) else []:
        k, n = int(g["below"].sum()), len(g)
        above = (int(g["above"].sum()), float(g["above"].mean()), float(g["gain"].median()))
        rows.append((name, n, k, k / n, *wilson(k, n), *above))
    return pd.DataFrame(rows, columns=BELOW_COLUMNS) if rows else pd.DataFrame()


def tables(ctx) -> dict[str, pd.DataFrame]:
    pilot, gains = pilot_rows(ctx.runs, ctx.cfg), gain_rows(ctx.runs, ctx.cfg)
    return {
        "calibration_pilot": pilot,
        "calibration_pick": pick_rows(pilot),
        "calibration_references": references_table(ctx),
        "calibration_gains": gains,
        "calibration_below": below_table(gains),
    }


# ----------------------------------------------------------------------------- figures
def pilot_figure(p: pd.DataFrame) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    done = p[p["gain"].notna()] if len(p) else p
    for i, ((task, batch), g) in enumerate(done.groupby(["task", "batch_size"], sort=False) if len(done) else []):
        g = g.sort_values("multiple")
        color, label = COLORS[i % len(COLORS)], f"{task}, batch {batch}"
        gain = [g["gain"], g["gain_lo"], g["gain_hi"]]
        interval_points(ax, g["multiple"], *gain, scale=100, marker="o", capsize=3, color=color, label=label)
        for m, y, drop in zip(g["multiple"], 100 * g["gain"], g["sustained_drop"]):
            if drop:
                ax.annotate("drop", (m, y), textcoords="offset points", xytext=(4, -10), fontsize=7)
    if done.empty:
        placeholder(ax, "no calibration runs")
    else:
        ax.set_xscale("log")
        ax.axhline(0, color="0.5", linewidth=0.8)
        ax.legend()
    ax.set(
        xlabel="learning rate, multiple of the task's reference",
        ylabel="gain in validation accuracy (points)",
        title="Calibration pilot: gain after the pilot's steps (95% Newcombe interval)",
    )
    return fig


def gains_figure(g: pd.DataFrame) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    if g.empty:
        placeholder(ax, "no runs with a result")
    else:
        exps = list(dict.fromkeys(g["experiment"]))
        for i, (_, runs) in enumerate(g.groupby("experiment", sort=False)):
            x = [i + 0.25 * ((j % 5) - 2) / 2 for j in range(len(runs))]
            ax.scatter(x, 100 * runs["gain"], s=12, color=COLORS[i % len(COLORS)])
        ax.axhline(-100 * DROP, color="tab:red", linestyle="--", linewidth=0.8, label="5 points below the warm-up")
        ax.axhline(0, color="0.5", linewidth=0.8)
        ax.set_xticks(range(len(exps)), exps, rotation=30, ha="right")
        ax.legend()
    ax.set(ylabel="final − start held-out accuracy (points)", title="Every trained run's gain over its warm-up")
    return fig


def figures(t) -> dict[str, plt.Figure]:
    return {
        "calibration_pilot": pilot_figure(t["calibration_pilot"]),
        "calibration_gains": gains_figure(t["calibration_gains"]),
    }


# ----------------------------------------------------------------------------- report
def section(t) -> dict:
    total = kit.row_of(t["calibration_below"], experiment="all runs")
    # experiments that declare no reference (an empty cell reads back from CSV as NaN); one that
    # declares it but has no finished run yet is not among them
    refs = kit.records(t["calibration_references"])
    return {
        **kit.section_context(t, NAME),
        "unreferenced": [r["experiment"] for r in refs if pd.isna(r["reference"]) or r["reference"] == ""],
        "overall": total,
        "target": TARGET_BELOW,
        "drop": DROP,
        "meets_target": bool(total and total["below_rate"] <= TARGET_BELOW),
    }
