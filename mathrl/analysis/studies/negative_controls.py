"""Negative controls, a part of the diagnostics study (not a report section of its own).

The experiment `negative_controls` trains, beside its reference, on a reward that ignores the answer (`reward:
random`, with and without the ratio clip) and on one sign of advantage only (`sample_filter: positive | negative`).
Its tables: per variant the held-out accuracy change from the start (greedy and sampled) with 95% t intervals over
seeds and its difference from the reference (paired by seed), what engaged (clip fraction, the sign of the mean
advantage, entropy and KL at the end), and pass@k at k = 1 and the largest k before and after RL. The tables state
measurements; the claims read them (see the report section for the columns).

The functions take the experiment's run table (`diagnostics_negative_controls_runs`,
`mathrl.analysis.measures.policy_updates`) and its runs' pass@k rows, which `mathrl.analysis.studies.diagnostics`
passes in. The claims on these tables are declared in config/claims.yaml (part "negative controls").
"""

from __future__ import annotations

import pandas as pd

from mathrl.analysis.kit import NAN, arms, estimate_columns, joined_roles, per_seed, versus
from mathrl.analysis.verdict import difference, mean_interval

EXPERIMENT = "negative_controls"
ENGAGED = ("clip_frac", "adv_mean", "reward_mean", "entropy_first", "entropy_last", "kl_last")  # means per variant
SUMMARY_COLUMNS = [
    *"setting role n initial_eval_mean final_eval_mean".split(),
    *(f"{v}_{c}" for v in ("gain", "sampled_change", "vs_reference") for c in ("mean", "lo", "hi")),
    "vs_reference_n",
    *(f"{c}_mean" for c in ENGAGED),
]


def control_summary(runs: pd.DataFrame, roles: dict) -> pd.DataFrame:
    """Per variant: the greedy and sampled held-out change from the start (95% t interval over seeds), the final
    greedy accuracy minus the reference's (paired by seed; empty for the reference), and the engagement columns'
    means."""
    rows = [
        {
            "setting": name,
            "role": g["role"].iloc[0],
            "n": int(g["gain"].notna().sum()),
            "initial_eval_mean": float(g["initial_eval"].mean()),
            "final_eval_mean": float(g["final_eval"].mean()),
            **estimate_columns("gain", mean_interval(g["gain"])),
            **estimate_columns("sampled_change", mean_interval(g["sampled_change"])),
            **estimate_columns("vs_reference", versus(g, ref, "final_eval"), n=True),
            **{f"{c}_mean": float(g[c].mean()) for c in ENGAGED},
        }
        for name, g, ref in arms(runs, roles.get("reference"))
    ]
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def control_pass_at_k(pk: pd.DataFrame, roles: dict) -> pd.DataFrame:
    """pass@k of the experiment's runs (`pk`, their rows of the per-run pass@k table) at k = 1 and the largest k: before
    and after RL (means over seeds) and the change (after − before, paired by seed, 95% t interval)."""
    cols = ["setting", "role", "k", "n", "initial_mean", "final_mean", "change_mean", "change_lo", "change_hi"]
    names, rows = joined_roles(roles), []
    for (name, k), g in pk[pk["k"].isin([1, pk["k"].max()])].groupby(["setting", "k"], sort=False):
        before, after = per_seed(g, "pass_at_k", phase="initial"), per_seed(g, "pass_at_k", phase="final")
        est = difference(after, before)
        rows.append(
            {
                "setting": name,
                "role": names.get(name, ""),
                "k": int(k),
                "n": est.n,
                "initial_mean": float(pd.Series(before).mean()) if before else NAN,
                "final_mean": float(pd.Series(after).mean()) if after else NAN,
                **estimate_columns("change", est),
            }
        )
    # a stable sort by k keeps the settings in the config's order within each k
    return pd.DataFrame(rows, columns=cols).sort_values("k", kind="stable").reset_index(drop=True)


def tables(per_run: pd.DataFrame, pk: pd.DataFrame, roles: dict) -> dict[str, pd.DataFrame]:
    """The experiment's tables from its run table, the pass@k rows of its runs (`pk`, per run, phase and k; kept
    apart from the other runs' pass@k, whose claims are not theirs) and its roles."""
    return {
        "diagnostics_negative_controls_pass_at_k_runs": pk,
        "diagnostics_negative_controls": control_summary(per_run, roles),
        "diagnostics_negative_controls_pass_at_k": control_pass_at_k(pk, roles),
    }


def section(t) -> dict:
    return {
        "controls": t["diagnostics_negative_controls"],
        "controls_pass_at_k": t["diagnostics_negative_controls_pass_at_k"],
        "controls_experiment": EXPERIMENT,
    }
