"""The policy losses of 2025 against PPO's clipped surrogate, a part of the diagnostics study.

The experiment `policy_losses` trains each loss of the registry (`mathrl.engine.policy_losses`: vanilla, gspo, cispo,
dual_clip) on one setting, at equal samples and seeds. Per run (the run table `diagnostics_policy_losses_runs`,
`mathrl.analysis.measures.policy_updates`): token entropy at the first and the last step, held-out accuracy at the
start and the end, and the step means of what shows each loss's mechanism acting (the clips' shares and `ppo_kl`).
Here, per variant: the means with 95% t intervals over seeds, and each loss's difference from the baseline (vanilla)
paired by seed; per step: token entropy and clip_frac over seeds, for the figure. The claims on these tables are
declared in config/claims.yaml (part "policy losses").
"""

from __future__ import annotations

import pandas as pd

import mathrl.analysis.kit as kit
from mathrl.analysis.figure_style import COLORS, NONNEGATIVE, SHARE, band_panels, plt
from mathrl.analysis.measures.policy_updates import CLIPS, RUN_TABLES

EXPERIMENT = "policy_losses"
PART = "policy losses"  # the claims' part (config/claims.yaml) this part of the section shows
BASELINE = "baseline"  # the role of the clipped surrogate the others are compared with
VALUES = RUN_TABLES["diagnostics_policy_losses_runs"]["measures"]  # summarised per variant
COMPARED = ["entropy_last", "final_eval", "clip_frac"]  # differences from the baseline, paired by seed
SUMMARY = [("interval", VALUES), ("versus", {f"vs_baseline_{v}": v for v in COMPARED})]  # kit.arm_summary
ENTROPIES = ["entropy_first", "entropy_last"]
LIMITS = dict.fromkeys(ENTROPIES, NONNEGATIVE) | dict.fromkeys(["initial_eval", "final_eval", *CLIPS], SHARE)


def tables(ctx, roles: dict) -> dict[str, pd.DataFrame]:
    """The experiment's tables from its run table and its roles."""
    per_run = ctx.run_table("diagnostics_policy_losses_runs")
    summary = kit.arm_summary(per_run, roles.get(BASELINE), ["role", "policy_loss"], "entropy_last", SUMMARY, LIMITS)
    return {
        "diagnostics_policy_losses": summary,
        "diagnostics_policy_losses_steps": kit.setting_steps(ctx.experiment(EXPERIMENT), ["entropy", "clip_frac"]),
    }


def figure(t) -> plt.Figure:
    """Token entropy along training per loss (left) and the share of tokens whose gradient its clip cut (right); bands:
    95% t intervals over seeds."""
    steps = t["diagnostics_policy_losses_steps"]
    groups = list(steps.groupby("setting", sort=False)) if len(steps) else []
    clipped = [(name, g if g["clip_frac_mean"].notna().any() else g.iloc[:0]) for name, g in groups]
    colors = [COLORS[i % len(COLORS)] for i in range(len(groups))]  # a loss keeps its colour where it has no clip
    shared = dict(empty="no policy_losses runs", colors=colors, legend={"fontsize": 7})
    entropy = dict(groups=groups, metric="entropy", ylabel="token entropy (nats)", **shared)
    clip_label = "tokens whose gradient the clip cut (%)"
    clip = dict(groups=clipped, metric="clip_frac", scale=100, ylabel=clip_label, **shared)
    entropy["title"], clip["title"] = "Token entropy per policy loss", "Clip share (GSPO: tokens of cut sequences)"
    return band_panels([entropy, clip], 1, 2, (9.0, 3.6), layout="constrained")


def section(t) -> dict:
    return {"losses_experiment": EXPERIMENT}
