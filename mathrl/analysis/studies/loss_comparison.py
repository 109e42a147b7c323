"""The policy losses of 2025 against PPO's clipped surrogate, a part of the diagnostics study.

The experiment `policy_losses` trains each loss of the registry (`mathrl.engine.policy_losses`: vanilla, gspo, cispo,
dual_clip) on one setting, at equal samples and seeds. Per run (the run table
`diagnostics_policy_losses_runs`, `mathrl.analysis.measures.policy_updates`): the token entropy at the first and the
last step (and its relative fall), held-out greedy accuracy at the start and the end, and the step means of what shows
each loss's mechanism acting: the share of tokens whose gradient the PPO clip cut (`clip_frac`, split by bound), the
share of sequences GSPO's sequence clip cut (`seq_clip_frac`), the share of tokens whose importance weight CISPO's cap
cut (`is_clip_frac`), the share of tokens dual-clip's bound hit (`dual_clip_frac`) and `ppo_kl`. Here, per variant: the
means with 95% t intervals over seeds, and each loss's difference from the baseline (vanilla) paired by seed; per step:
token entropy and clip_frac over seeds, for the figure. The claims on these tables are declared in config/claims.yaml
(part "policy losses").
"""

from __future__ import annotations

import pandas as pd

import mathrl.analysis.kit as kit
from mathrl.analysis.figure_style import COLORS, NONNEGATIVE, SHARE, band_panels, plt
from mathrl.analysis.measures.policy_updates import CLIPS, RUN_TABLES
from mathrl.analysis.verdict import mean_interval

EXPERIMENT = "policy_losses"
PART = "policy losses"  # the claims' part (config/claims.yaml) this part of the section shows
BASELINE = "baseline"  # the role of the clipped surrogate the others are compared with
# the run table's measures (measures/policy_updates.py), summarised per variant
VALUES = RUN_TABLES["diagnostics_policy_losses_runs"]["measures"]
COMPARED = ["entropy_last", "final_eval", "clip_frac"]  # differences from the baseline, paired by seed
LIMITS = {
    "entropy_first": NONNEGATIVE,
    "entropy_last": NONNEGATIVE,
    "initial_eval": SHARE,
    "final_eval": SHARE,
    **dict.fromkeys(CLIPS, SHARE),
}


def loss_summary(runs: pd.DataFrame, roles: dict) -> pd.DataFrame:
    """Per variant: the mean of every per-run value with its 95% t interval over seeds (cut to the value's range), and
    final entropy, final accuracy and clip_frac minus the baseline's, paired by seed (empty for the baseline)."""
    rows = []
    for name, g, base in kit.arms(runs, roles.get(BASELINE)):
        row = {
            "setting": name,
            "role": g["role"].iloc[0],
            "policy_loss": g["policy_loss"].iloc[0],
            "n": int(g["entropy_last"].notna().sum()),
        }
        for v in VALUES:
            row.update(kit.estimate_columns(v, mean_interval(g[v]), LIMITS.get(v, (None, None))))
        for v in COMPARED:
            row.update(kit.estimate_columns(f"vs_baseline_{v}", kit.versus(g, base, v), n=True))
        rows.append(row)
    cols = ["setting", "role", "policy_loss", "n", *[f"{v}_{s}" for v in VALUES for s in ("mean", "lo", "hi")]]
    cols += [f"vs_baseline_{v}_{s}" for v in COMPARED for s in ("mean", "lo", "hi", "n")]
    return pd.DataFrame(rows, columns=cols)


def tables(ctx, roles: dict) -> dict[str, pd.DataFrame]:
    """The experiment's tables from its run table and its roles."""
    per_run = ctx.run_table("diagnostics_policy_losses_runs")
    steps = [
        run.metrics.assign(setting=kit.setting(run.spec), seed=run.spec.seed)
        for run in ctx.experiment(EXPERIMENT)
        if run.ok
    ]
    return {
        "diagnostics_policy_losses": loss_summary(per_run, roles),
        "diagnostics_policy_losses_steps": kit.over_seeds(steps, ["setting"], ["entropy", "clip_frac"]),
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
    return {"losses": t["diagnostics_policy_losses"], "losses_experiment": EXPERIMENT}
