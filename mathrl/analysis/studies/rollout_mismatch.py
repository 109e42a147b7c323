"""Beyond the documents: the rollout/trainer mismatch (experiment `rollout_mismatch`), part of the diagnostics section.

Each run's metrics.csv holds the mismatch between the sampler's log-probs of the sampled tokens and the trainer's
(`mathrl.engine.mismatch`); its measures per run are the run table `diagnostics_mismatch_runs`
(`mathrl.analysis.measures.sampling_mismatch`). The tables here give, per variant, the mean over seeds of those
measures with its 95% t interval, the final held-out accuracy's difference from the fp32 control paired by seed, and
the gap along training; one more reads every run of the pipeline without a source of mismatch (the exact control at
scale, `sampling_mismatch.control_at_scale`). Tables only: which claims they support is for the claims engine.
"""

from __future__ import annotations

import pandas as pd

from mathrl.analysis.figure_style import COLORS, placeholder, plt
from mathrl.analysis.kit import StudyTables, add_intervals, setting_differences, setting_steps
from mathrl.analysis.measures.sampling_mismatch import MISMATCH, control_at_scale
from mathrl.analysis.results import mean_spread

EXPERIMENT = "rollout_mismatch"
RUN_VALUES = [*MISMATCH, "sample_seconds", "update_seconds", "initial_eval", "final_eval", "gain"]  # summarised
STEP_VALUES = ["mismatch_logp_diff_mean", "mismatch_logp_diff_max", "mismatch_kl_k3"]


def accuracy_differences(runs: pd.DataFrame, roles: dict) -> pd.DataFrame:
    """Final held-out accuracy of each setting minus the control's, and of the remedy minus the
    setting it remedies, paired by seed (the same prompts and sampling noise), with 95% intervals."""
    control, settings = roles.get("control"), list(pd.unique(runs["setting"])) if len(runs) else []
    pairs = [(name, control) for name in settings if name != control] if control is not None else []
    if control is not None and roles.get("remedy") in settings and roles.get("remedied") in settings:
        pairs.append((roles["remedy"], roles["remedied"]))
    return setting_differences(runs, pairs, "final_eval")


def tables(ctx, roles: dict) -> dict[str, pd.DataFrame]:
    runs = ctx.run_table("diagnostics_mismatch_runs")
    return {
        "diagnostics_mismatch": add_intervals(mean_spread(runs, ["setting"], RUN_VALUES), RUN_VALUES),
        "diagnostics_mismatch_accuracy": accuracy_differences(runs, roles),
        "diagnostics_mismatch_steps": setting_steps(ctx.experiment(EXPERIMENT), STEP_VALUES),
        "diagnostics_mismatch_control": control_at_scale(ctx.runs.values()),
    }


def figures(t) -> dict[str, plt.Figure]:
    """The per-token log-prob gap along training per setting (mean over seeds): mean per token
    (solid) and the step's largest (dashed), on a log scale that shows the control's rounding."""
    steps = t["diagnostics_mismatch_steps"]
    fig, ax = plt.subplots(figsize=(7.2, 3.8), layout="constrained")
    for i, (name, g) in enumerate(steps.groupby("setting", sort=False) if len(steps) else []):
        for stat, line in (("mean", {}), ("max", {"ls": "--", "lw": 1})):
            color, label = COLORS[i % len(COLORS)], f"{name}: {stat}"
            ax.plot(g["step"], g[f"mismatch_logp_diff_{stat}_mean"], color=color, **line, label=label)
    if len(steps):
        ax.set_yscale("log")
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        placeholder(ax, f"no runs of {EXPERIMENT}")
    title = "The rollout/trainer log-prob gap (mean over seeds)"
    ax.set(xlabel="step", ylabel="|trainer − sampler log-prob| per token", title=title)
    return {"diagnostics_mismatch": fig}


def section(t) -> dict:
    return {"tables": StudyTables(t, "diagnostics"), "experiment": EXPERIMENT}
