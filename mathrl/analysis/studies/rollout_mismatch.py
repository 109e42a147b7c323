"""Beyond the documents: the rollout/trainer mismatch (experiment `rollout_mismatch`), a part of
the diagnostics section.

Each run's metrics.csv holds the mismatch between the sampler's log-probs of the sampled tokens
and the trainer's (`mathrl.engine.mismatch`); its measures per run are the run table
`diagnostics_mismatch_runs` (`mathrl.analysis.measures.sampling_mismatch`). The tables here give, per variant, the
mean over seeds of those measures, the final held-out accuracy's difference from the fp32 control paired by seed, and
the gap along training; one more table reads every run of the pipeline without a source of mismatch (the exact control
at scale). Tables only: which claims they support is for the claims engine.
"""

from __future__ import annotations

import pandas as pd

from mathrl.analysis.figure_style import COLORS, placeholder, plt
from mathrl.analysis.kit import add_intervals, over_seeds, setting
from mathrl.analysis.measures.sampling_mismatch import MISMATCH, ess_min, logp_diff_max, logp_diff_mean
from mathrl.analysis.results import mean_spread
from mathrl.analysis.verdict import difference

EXPERIMENT = "rollout_mismatch"
RUN_VALUES = [*MISMATCH, "sample_seconds", "update_seconds", "initial_eval", "final_eval", "gain"]  # summarised
STEP_VALUES = ["mismatch_logp_diff_mean", "mismatch_logp_diff_max", "mismatch_kl_k3"]
# a run samples exactly as it trains (no source of mismatch) under these settings
NO_SOURCE = {
    "sampler_dtype": "float32",
    "rollout_staleness": 0,
    "sample_top_k": 0,
    "sample_top_p": 1.0,
    "temperature": 1.0,
}


def accuracy_differences(runs: pd.DataFrame, roles: dict) -> pd.DataFrame:
    """Final held-out accuracy of each setting minus the control's, and of the remedy minus the
    setting it remedies, paired by seed (the same prompts and sampling noise), with 95% intervals."""
    cols = ["setting", "against", "difference", "lo", "hi", "n"]
    control = roles.get("control")
    if runs.empty or control is None:
        return pd.DataFrame(columns=cols)
    final = {name: dict(zip(g["seed"], g["final_eval"])) for name, g in runs.groupby("setting", sort=False)}
    pairs = [(name, control) for name in final if name != control]
    if roles.get("remedy") in final and roles.get("remedied") in final:
        pairs.append((roles["remedy"], roles["remedied"]))
    rows = []
    for a, b in pairs:
        est = difference(final[a], final.get(b, {}))
        rows.append({"setting": a, "against": b, "difference": est.estimate, "lo": est.lo, "hi": est.hi, "n": est.n})
    return pd.DataFrame(rows, columns=cols)


def mismatch_steps(runs: list) -> pd.DataFrame:
    """Per setting and step: the mismatch over seeds (mean and std), for the figure."""
    frames = [run.metrics.assign(setting=setting(run.spec), seed=run.spec.seed) for run in runs]
    return over_seeds([f for f in frames if set(STEP_VALUES) <= set(f)], ["setting"], STEP_VALUES)


def control_at_scale(ctx) -> pd.DataFrame:
    """Every run of the pipeline without a source of mismatch: how large float rounding between
    the sampling path and the training forward makes the per-token log-prob gap."""
    cols = CLAIM_TABLES["diagnostics_mismatch_control"]
    runs = [r for r in ctx.runs.values() if r.ok and r.spec.same_as is None and "mismatch_logp_diff_max" in r.metrics]
    runs = [r for r in runs if all(r.settings.get(k, v) == v for k, v in NO_SOURCE.items())]
    if not runs:
        return pd.DataFrame(columns=cols)
    maxes, means, ess = (pd.Series([f(r) for r in runs]) for f in (logp_diff_max, logp_diff_mean, ess_min))
    row = {
        "runs": len(runs),
        "tokens_max": maxes.max(),
        "run_max_median": maxes.median(),
        "mean_gap_mean": means.mean(),
        "mean_gap_max": means.max(),
        "ess_min": ess.min(),
    }
    return pd.DataFrame([row], columns=cols)


# The table claims read that is not one row per run, and its columns (mathrl.analysis.claim_names reads this from
# the source); the runs of the experiment are the run table diagnostics_mismatch_runs (measures/sampling_mismatch.py).
CLAIM_TABLES = {
    # one row: the runs without a source of mismatch, pooled
    "diagnostics_mismatch_control": [
        "runs",
        "tokens_max",
        "run_max_median",
        "mean_gap_mean",
        "mean_gap_max",
        "ess_min",
    ],
}


def tables(ctx, roles: dict) -> dict[str, pd.DataFrame]:
    complete = [run for run in ctx.experiment(EXPERIMENT) if run.ok]
    runs = ctx.run_table("diagnostics_mismatch_runs")
    # per setting: the mean over seeds of each run's measures, with its 95% t interval
    summary = add_intervals(mean_spread(runs, ["setting"], RUN_VALUES), RUN_VALUES)
    return {
        "diagnostics_mismatch": summary,
        "diagnostics_mismatch_accuracy": accuracy_differences(runs, roles),
        "diagnostics_mismatch_steps": mismatch_steps(complete),
        "diagnostics_mismatch_control": control_at_scale(ctx),
    }


def figures(t) -> dict[str, plt.Figure]:
    """The per-token log-prob gap along training per setting (mean over seeds): mean per token
    (solid) and the step's largest (dashed), on a log scale that shows the control's rounding."""
    steps = t["diagnostics_mismatch_steps"]
    fig, ax = plt.subplots(figsize=(7.2, 3.8), layout="constrained")
    if len(steps):
        for i, (name, g) in enumerate(steps.groupby("setting", sort=False)):
            color = COLORS[i % len(COLORS)]
            ax.plot(g["step"], g["mismatch_logp_diff_mean_mean"], color=color, label=f"{name}: mean")
            ax.plot(g["step"], g["mismatch_logp_diff_max_mean"], color=color, ls="--", lw=1, label=f"{name}: max")
        ax.set_yscale("log")
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        placeholder(ax, f"no runs of {EXPERIMENT}")
    title = "The rollout/trainer log-prob gap (mean over seeds)"
    ax.set(xlabel="step", ylabel="|trainer − sampler log-prob| per token", title=title)
    return {"diagnostics_mismatch": fig}


def section(t) -> dict:
    return {
        "summary": t["diagnostics_mismatch"],
        "accuracy": t["diagnostics_mismatch_accuracy"],
        "runs": t["diagnostics_mismatch_runs"],
        "control": t["diagnostics_mismatch_control"],
        "experiment": EXPERIMENT,
    }
