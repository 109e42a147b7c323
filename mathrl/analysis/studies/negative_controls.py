"""Negative controls, a part of the diagnostics study (not a report section of its own).

The experiment `negative_controls` trains, beside its reference, on a reward that ignores the answer (`reward:
random`, with and without the ratio clip) and on one sign of advantage only (`sample_filter: positive | negative`).
From its run table (`diagnostics_negative_controls_runs`, `mathrl.analysis.measures.policy_updates`) and its runs'
pass@k rows, which `mathrl.analysis.studies.diagnostics` passes in, per variant: the held-out accuracy change from the
start (greedy and sampled) with 95% t intervals over seeds and its difference from the reference (paired by seed),
what engaged (clip fraction, the sign of the mean advantage, entropy and KL at the end), and pass@k at k = 1 and the
largest k before and after RL. The claims on them are declared in config/claims.yaml (part "negative controls").
"""

from __future__ import annotations

import pandas as pd

from mathrl.analysis.kit import arm_summary, joined_roles, phase_change

EXPERIMENT = "negative_controls"
ENGAGED = ("clip_frac", "adv_mean", "reward_mean", "entropy_first", "entropy_last", "kl_last")  # means per variant
# per variant (kit.arm_summary): the accuracies' means, the changes with intervals, the final accuracy's difference
# from the reference, and what engaged
SUMMARY = [
    ("mean", ["initial_eval", "final_eval"]),
    ("interval", ["gain", "sampled_change"]),
    ("versus", {"vs_reference": "final_eval"}),
    ("mean", ENGAGED),
]


def control_pass_at_k(pk: pd.DataFrame, roles: dict) -> pd.DataFrame:
    """pass@k of the experiment's runs (`pk`, their rows of the per-run pass@k table) at k = 1 and the largest k: before
    and after RL (means over seeds) and the change (after − before, paired by seed, 95% t interval)."""
    out = phase_change(pk[pk["k"].isin([1, pk["k"].max()])], ["setting", "k"], "pass_at_k")
    out.insert(1, "role", out["setting"].map(joined_roles(roles)).fillna(""))
    # a stable sort by k keeps the settings in the config's order within each k
    return out.sort_values("k", kind="stable").reset_index(drop=True)


def tables(per_run: pd.DataFrame, pk: pd.DataFrame, roles: dict) -> dict[str, pd.DataFrame]:
    """The experiment's tables from its run table, the pass@k rows of its runs (`pk`, per run, phase and k; kept
    apart from the other runs' pass@k, whose claims are not theirs) and its roles."""
    return {
        "diagnostics_negative_controls_pass_at_k_runs": pk,
        "diagnostics_negative_controls": arm_summary(per_run, roles.get("reference"), ["role"], "gain", SUMMARY),
        "diagnostics_negative_controls_pass_at_k": control_pass_at_k(pk, roles),
    }


def section(t) -> dict:
    return {"controls_experiment": EXPERIMENT}
