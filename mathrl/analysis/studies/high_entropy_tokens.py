"""Which tokens carry the learning (arXiv 2506.01939), a part of the diagnostics study.

The experiment `token_selection` trains addition from the warm-up with the policy gradient on every answer token
(`token_selection: all`), on the 20% of the batch's answer tokens of highest entropy (`top_entropy`) and on the other
80% (`bottom_entropy`), at equal rollouts and seeds (`mathrl.engine.token_selection`). The claims read its run table
`diagnostics_token_selection_runs` (`mathrl.analysis.measures.policy_updates`: held-out accuracy, the tokens selected
and their entropy, the carry probe's means). Here: per variant, the means with 95% t intervals over seeds; per variant
and step, held-out accuracy over seeds; per checkpoint, answer position and carry, the carry probe's mean entropy: each
run's probe (`mathrl.engine.carry_probe`; this module runs no model) of its warm-up and its final policy, teacher-forced
on the first `PROBE_PROBLEMS` held-out problems, whose per-run means weigh equally the digit positions where a carry
enters some digits and not others (`mathrl.analysis.estimators.carry_means`).
"""

from __future__ import annotations

import pandas as pd

import mathrl.analysis.kit as kit
from mathrl.analysis.figure_style import COLORS, NONNEGATIVE, SHARE, bands, placeholder, plt, table_band
from mathrl.analysis.measures.policy_updates import RUN_TABLES, carry_probe_rows
from mathrl.analysis.results import mean_spread
from mathrl.engine.carry_probe import PROBE_PROBLEMS

EXPERIMENT = "token_selection"
PART = "token selection"  # the claims' part (config/claims.yaml) this part of the section shows
BASELINE = "baseline"  # the role of the arm that trains on every answer token
RUN_VALUES = RUN_TABLES["diagnostics_token_selection_runs"]["measures"]  # summarised per variant
CARRY_KEYS = ["checkpoint", "position", "carry"]  # the carry probe's table: mean entropy per these
ENTROPIES = ["entropy_selected", "entropy_unselected", "entropy_carry", "entropy_nocarry"]
SHARES = ["initial_eval", "final_eval", "token_selected_frac"]
LIMITS = dict.fromkeys(SHARES, SHARE) | dict.fromkeys(ENTROPIES, NONNEGATIVE)


def tables(ctx) -> dict[str, pd.DataFrame]:
    """The experiment's tables from its complete runs (its roles must name the baseline)."""
    kit.roles(ctx.cfg, EXPERIMENT, (BASELINE,))
    runs, per_run = ctx.experiment(EXPERIMENT), ctx.run_table("diagnostics_token_selection_runs")
    # per variant: every per-run value's mean with its 95% t interval over seeds (the same columns without runs)
    summary = kit.add_intervals(mean_spread(per_run, ["setting", "role"], RUN_VALUES), RUN_VALUES, bounds=LIMITS)
    return {
        "diagnostics_token_selection": summary,
        "diagnostics_token_selection_steps": kit.setting_steps(runs, ["eval_accuracy"], evals=True),
        # per checkpoint kind (the warm-up or an arm's final policies), position and carry: mean entropy over seeds
        "diagnostics_token_selection_carry": mean_spread(carry_probe_rows(runs), CARRY_KEYS, ["entropy"]),
    }


def figure(t) -> plt.Figure:
    """Token entropy by answer position, carry against no carry (left), and held-out accuracy per arm (right); bands:
    95% t intervals over seeds."""
    carry, steps = t["diagnostics_token_selection_carry"], t["diagnostics_token_selection_steps"]
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.6), layout="constrained")
    for i, (name, g) in enumerate(carry.groupby("checkpoint", sort=False) if len(carry) else []):
        for flag, style in ((True, "-"), (False, "--")):
            h = g[g["carry"].astype(str).str.lower() == str(flag).lower()].sort_values("position")
            label, color = f"{name}, {'carry in' if flag else 'no carry'}", COLORS[i % len(COLORS)]
            table_band(axes[0], h, "entropy", label, color, x="position", linestyle=style, marker="o", markersize=3)
    axes[0].legend(fontsize=6) if len(carry) else placeholder(axes[0], "no token_selection runs")
    xlabel = "answer position (0: lowest digit; last: end token)"
    axes[0].set(xlabel=xlabel, ylabel="token entropy (nats)", title="Entropy by position and carry")
    groups = list(steps.groupby("setting", sort=False)) if len(steps) else []
    labels = dict(ylabel="held-out accuracy (%)", title="Held-out accuracy per token selection")
    style = dict(scale=100, legend={"fontsize": 7}, line={"marker": "o", "markersize": 3})
    bands(axes[1], groups, "eval_accuracy", "no token_selection runs", **style, **labels)
    return fig


def section(t) -> dict:
    return {"tokens_experiment": EXPERIMENT, "tokens_probe_problems": PROBE_PROBLEMS}
