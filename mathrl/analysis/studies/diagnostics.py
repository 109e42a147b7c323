"""Beyond the documents: pass@k before and after RL, the entropy-performance law,
advantage scaling by difficulty, the gradient noise scale, and the per-step update diagnostics.

Everything is computed from files the runs wrote: `pass_at_k.csv` (runs with `pass_at_k`), `heldout.csv` (every run:
greedy correctness per held-out problem at the start and at the end), `metrics.csv`, and the gradient probe's JSON. The
numbers of one run are measures (`mathrl.analysis.measures`: `heldout_problems` for pass@k and accuracy by carries,
`training_laws` for the entropy law and the noise scale, `policy_updates` for the update diagnostics); the intervals
over seeds are `mathrl.analysis.verdict`'s.
Five parts live in modules of their own: the rollout/trainer mismatch (`rollout_mismatch`), compute-performance curves
(`compute_curves`), the negative controls (`negative_controls`), the policy losses of 2025 (`loss_comparison`) and the
token selection by entropy (`high_entropy_tokens`).
"""

from __future__ import annotations

import pandas as pd

import mathrl.analysis.kit as kit
import mathrl.analysis.studies.compute_curves as compute_curves
import mathrl.analysis.studies.high_entropy_tokens as high_entropy_tokens
import mathrl.analysis.studies.loss_comparison as loss_comparison
import mathrl.analysis.studies.negative_controls as negative_controls
import mathrl.analysis.studies.rollout_mismatch as rollout_mismatch

# modules, not `from mathrl.analysis.studies import ...`: the package's __init__ imports this module
from mathrl.analysis.figure_style import COLORS, NONNEGATIVE, SHARE, bands, interval_points, placeholder, plt
from mathrl.analysis.measures.heldout_problems import KS, carry_runs, pass_at_k_runs
from mathrl.analysis.measures.policy_updates import UPDATE, update_runs
from mathrl.analysis.measures.training_laws import (
    LAW_R2,
    LAW_RMSE,
    REACHED_STEPS,
    entropy_law_runs,
    noise_scale_beside_batches,
    noise_scale_runs,
)
from mathrl.analysis.results import mean_spread, warmup
from mathrl.analysis.studies.generic import setting

NAME = "diagnostics"
TITLE = "Beyond the documents: pass@k, the entropy law, advantage scaling, noise scale"
DOCUMENT = ""

EXPERIMENT = "adv_scaling"  # the advantage-scaling experiment (its roles name the four variants)


def ok_runs(ctx):
    """Every complete run, with the columns that name it in the per-run tables: experiment, setting and seed."""
    for exp in ctx.cfg.get("experiments", {}):
        for run in (r for r in ctx.experiment(exp) if r.ok):
            keys = {"experiment": exp, "setting": setting(run.spec), "seed": run.spec.seed, "warmup": warmup(run)}
            yield keys, run


# Per-run tables summarised across seeds the same way: {summary: (group keys, values averaged, the values with a 95%
# t interval and the range each is held to)}. A t interval of a share reaches past [0, 1] with 3 seeds near 1: it is
# cut to it; a gain is a difference, and B_noise has no upper bound.
SUMMARIES = {
    "diagnostics_pass_at_k": (["experiment", "setting", "phase", "k"], ["pass_at_k"], {"pass_at_k": SHARE}),
    "diagnostics_adv_scaling": (
        ["setting", "carries"],
        ["initial", "final", "gain", "problems"],
        {"initial": SHARE, "final": SHARE, "gain": None},
    ),
    "diagnostics_noise_scale_steps": (
        ["experiment", "setting", "batch_size"],
        ["early", "late", "undefined_steps"],
        {"early": None, "late": None},
    ),
}


def summary(runs: pd.DataFrame, name: str) -> pd.DataFrame:
    """A per-run table summarised as SUMMARIES[name] says: per group, each value's mean, spread and interval."""
    by, values, bounds = SUMMARIES[name]
    return kit.add_intervals(mean_spread(runs, by, values), list(bounds), bounds=bounds)


LAW_VALUES = ["r2", "a", "b", "ceiling", "reached", "final_eval", "ceiling_minus_reached", "half_rmse", "entropy_drop"]
# The range of each bounded value; the fitted a, b and ceiling stay as fitted (a ceiling above 1 is an extrapolation).
LAW_BOUNDS = {"r2": (None, 1.0), "reached": SHARE, "final_eval": SHARE, "half_rmse": NONNEGATIVE}


def entropy_law_summary(runs: pd.DataFrame) -> pd.DataFrame:
    if runs.empty:
        return pd.DataFrame(columns=["experiment", "setting", "n", "holds"])
    runs = runs.assign(entropy_drop=runs["entropy_start"] - runs["entropy_end"], holds=runs["holds"].astype(float))
    by = runs.groupby(["experiment", "setting"], sort=False)
    # n: the runs fitted; a fit on constant data has no R² (nor a and b), so each value's interval has its own count
    out = mean_spread(runs, ["experiment", "setting"], LAW_VALUES).assign(n=by.size().values)
    out = kit.add_intervals(out, LAW_VALUES, bounds=LAW_BOUNDS, counts=by[LAW_VALUES].count())
    return out.assign(holds=by["holds"].sum().values)


UPDATE_BOUNDS = {
    "clip_frac_low": SHARE,
    "clip_frac_high": SHARE,
    "adv_std": NONNEGATIVE,
    "adv_abs_max": NONNEGATIVE,
    "cov_entropy_corr": (-1.0, 1.0),
}


def update_summary(runs: pd.DataFrame) -> pd.DataFrame:
    # n: every run counts, also where its loss has no PPO clip (clip_frac_low empty, as under CISPO); each value's
    # interval is over the runs that logged it
    by = runs.groupby(["experiment", "setting"], sort=False)
    out = mean_spread(runs, ["experiment", "setting"], UPDATE).assign(n=by.size().values)
    return kit.add_intervals(out, UPDATE, bounds=UPDATE_BOUNDS, counts=by[UPDATE].count())


def tables(ctx) -> dict[str, pd.DataFrame]:
    runs, tasks = list(ok_runs(ctx)), ctx.cfg.get("gradvar", {}).get("tasks", [])
    probes = {task: (ctx.gradvar(task) or {}).get("noise_scale") or {} for task in tasks}  # B_noise per task
    pk, law, upd = pass_at_k_runs(runs), entropy_law_runs(runs), update_runs(runs)
    adv = carry_runs([(k, run) for k, run in runs if k["experiment"] == EXPERIMENT], ctx.cfg.get("tasks", {}))
    is_control = pk["experiment"] == negative_controls.EXPERIMENT  # their pass@k has claims of its own
    controls, pk = pk[is_control], pk[~is_control]
    return {
        "diagnostics_pass_at_k_runs": pk,
        "diagnostics_pass_at_k": summary(pk, "diagnostics_pass_at_k"),
        "diagnostics_entropy_law_runs": law,
        "diagnostics_entropy_law": entropy_law_summary(law),
        "diagnostics_adv_scaling_runs": adv,
        "diagnostics_adv_scaling": summary(adv, "diagnostics_adv_scaling"),
        "diagnostics_noise_scale": noise_scale_beside_batches(probes, ctx.experiment("batch")),
        "diagnostics_noise_scale_steps": summary(noise_scale_runs(runs), "diagnostics_noise_scale_steps"),
        "diagnostics_update_runs": upd,
        "diagnostics_update": update_summary(upd),
        # the rollout/trainer mismatch
        **rollout_mismatch.tables(ctx, kit.roles(ctx.cfg, rollout_mismatch.EXPERIMENT, ("control",))),
        **compute_curves.tables(((k["experiment"], k["setting"], run) for k, run in runs), ctx.cfg),
        **negative_controls.tables(
            ctx.run_table("diagnostics_negative_controls_runs"),
            controls,
            kit.roles(ctx.cfg, negative_controls.EXPERIMENT, ("reference",)),
        ),
        **loss_comparison.tables(ctx, kit.roles(ctx.cfg, loss_comparison.EXPERIMENT, (loss_comparison.BASELINE,))),
        **high_entropy_tokens.tables(ctx),
    }


def figures(t) -> dict[str, plt.Figure]:
    out = {}
    pk = t["diagnostics_pass_at_k"]
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    cells = pk.groupby(["experiment", "setting", "phase"], sort=False) if len(pk) else []
    groups = [(f"{exp}/{name} {phase}", g) for (exp, name, phase), g in cells]
    labels = dict(xlabel="k", ylabel="pass@k (held-out)", title="pass@k before and after RL (95% interval over seeds)")
    bands(ax, groups, "pass_at_k", "no run asked for pass@k", x="k", legend={"fontsize": 7}, **labels)
    if len(pk):
        ax.set_xscale("log", base=2)
    out["diagnostics_pass_at_k"] = fig

    law = t["diagnostics_entropy_law_runs"]
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    if len(law):
        colors = [COLORS[i % len(COLORS)] for i in pd.factorize(law["experiment"])[0]]
        ax.scatter(law["r2"], law["half_rmse"] * 100, s=12, c=colors)
        ax.axvline(LAW_R2, color="0.5", ls=":")
        ax.axhline(LAW_RMSE * 100, color="0.5", ls=":")
        for i, exp in enumerate(pd.unique(law["experiment"])):
            ax.scatter([], [], color=COLORS[i % len(COLORS)], label=exp, s=12)
        ax.legend(fontsize=7)
    else:
        placeholder(ax, "no runs to fit")
    ax.set(
        xlabel="R² of R = −a·exp(H) + b",
        ylabel="first-half fit's error on the second half (RMSE, points)",
        title="The entropy law per run (lower right: it holds)",
    )
    out["diagnostics_entropy_law"] = fig

    adv = t["diagnostics_adv_scaling"]
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    adv = adv[adv["carries"].astype(str) != "all"] if len(adv) else adv
    if len(adv):
        for i, (name, g) in enumerate(adv.groupby("setting", sort=False)):
            x = g["carries"].astype(int).to_numpy() + (i - (adv["setting"].nunique() - 1) / 2) * 0.18
            gain, color = [g["gain_mean"], g["gain_lo"], g["gain_hi"]], COLORS[i % len(COLORS)]
            interval_points(ax, x, *gain, scale=100, fmt="o", color=color, label=name, capsize=2)
        ax.axhline(0, color="0.5", lw=0.8)
        ax.legend(fontsize=7)
    else:
        placeholder(ax, "no advantage-scaling runs")
    title = "Advantage scaling by difficulty (95% interval over seeds)"
    ax.set(xlabel="carries in the problem", ylabel="held-out gain (points)", title=title)
    out["diagnostics_adv_scaling"] = fig
    out.update(rollout_mismatch.figures(t))  # the rollout/trainer mismatch
    out["diagnostics_curves"] = compute_curves.figure(t)
    out["diagnostics_policy_losses"] = loss_comparison.figure(t)
    out["diagnostics_token_selection"] = high_entropy_tokens.figure(t)
    return out


def section(t) -> dict:
    apart = (loss_comparison.PART, high_entropy_tokens.PART)  # shown in their own parts of the section
    ctx = kit.section_context(t, NAME, apart)
    return {
        **ctx,
        "other_verdicts": [r for r in ctx["verdict_list"] if r.get("part") not in apart],
        "ks": KS,
        "law_r2": LAW_R2,
        "law_rmse": LAW_RMSE,
        "reached_steps": REACHED_STEPS,
        "experiment": EXPERIMENT,
        "mismatch": rollout_mismatch.section(t),  # the rollout/trainer mismatch (sections/mismatch.html.j2)
        **compute_curves.section(t),
        **negative_controls.section(t),
        **loss_comparison.section(t),
        **high_entropy_tokens.section(t),
    }
