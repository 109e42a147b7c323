"""The seed plan: how many RL seeds each experiment's arms get, from a pilot's variance components.

A claim on the GPT is replicated over warm-ups (W of them, `sft.TASK.warmups`) with m RL seeds from each, so its
estimate's variance is (σ_b² + σ_w²/m) / W: σ_b² the variance between warm-ups of a run's value (of a pair's
difference, where the claim pairs), σ_w² the variance of runs within one warm-up. A pilot with two seeds per
warm-up measures both (claims.csv's `sd` of the warm-ups' means and `between_share`, the share of the runs' variance
between warm-ups). For each claim the plan takes the fewest seeds per warm-up, of those the budget allows, at which
a two-sided test at 5% detects the claim's smallest effect that matters with 80% power; an experiment's arms get the
most any of its claims asks for. A claim no allowed count can decide (its between-warm-up variance too large for W
warm-ups) asks for none of them, and the plan records the warm-ups it would need. The plan reads the pilot's
variances and the claims' declared effects, never their estimates: it is fixed before the runs it plans.
Torch-free; `python -m bench.seed_plan` writes config/seed_plan.yaml from a pilot tree.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

ALPHA, POWER = 0.05, 0.80
# the table a claim reads -> the experiment whose runs it holds, where the claim names none
TABLE_EXPERIMENT = {
    "stability_batch_runs": "batch",
    "stability_fvd_runs": "fixed_vs_dynamic",
    "stability_clipping_runs": "clipping",
    "stability_value_clip_runs": "value_clip",
    "stability_tuning_runs": "batch_tuning",
    "stability_equal_samples_pairs": "batch",
    "system_start_runs": "system",
    "lab04_gpt_runs": "lab04_gpt",
    "collapse_per_run": "collapse",
    "diagnostics_pass_at_k_runs": "adv_scaling",
}


def detectable(sd_cluster: float, warmups: int, design: str) -> float:
    """The smallest true difference detected with POWER at ALPHA (two-sided) by a t test over `warmups` units whose
    values spread by `sd_cluster` (paired and one-sample: one mean; unpaired: two arms of `warmups` each)."""
    if warmups < 2 or not sd_cluster == sd_cluster:
        return math.nan
    if design == "unpaired":
        se, df = sd_cluster * math.sqrt(2 / warmups), 2 * warmups - 2
    else:
        se, df = sd_cluster / math.sqrt(warmups), warmups - 1
    return float((stats.t.ppf(1 - ALPHA / 2, df) + stats.t.ppf(POWER, df)) * se)


def components(sd_pilot: float, between: float, per_warmup: int) -> tuple[float, float]:
    """(σ_b², σ_w²) from a pilot's spread of the warm-ups' means (`sd_pilot`, each a mean of `per_warmup` runs) and
    the share of the runs' variance between warm-ups (`between`; NaN where the pilot could not tell it: then all of
    it is taken to lie between warm-ups, so more seeds within one are never assumed to help)."""
    rho = 1.0 if not between == between else float(np.clip(between, 0.0, 1.0))
    total = sd_pilot**2 / (rho + (1 - rho) / per_warmup)  # a run's variance, σ_b² + σ_w²
    return rho * total, (1 - rho) * total


def seeds_per_warmup(
    effect: float,
    sd_pilot: float,
    between: float,
    pilot_per_warmup: int,
    warmups: int,
    design: str,
    allowed: tuple[int, ...],
) -> int | None:
    """The fewest seeds per warm-up of `allowed` at which `effect` is detected; None where none of them is enough."""
    var_b, var_w = components(sd_pilot, between, pilot_per_warmup)
    for m in allowed:
        if detectable(math.sqrt(var_b + var_w / m), warmups, design) <= abs(effect):
            return m
    return None


def warmups_needed(
    effect: float, sd_pilot: float, between: float, pilot_per_warmup: int, design: str, per_warmup: int, cap: int = 200
) -> int | None:
    """The fewest warm-ups at which `effect` is detected with `per_warmup` seeds from each (None past `cap`)."""
    var_b, var_w = components(sd_pilot, between, pilot_per_warmup)
    sd = math.sqrt(var_b + var_w / per_warmup)
    return next((w for w in range(2, cap + 1) if detectable(sd, w, design) <= abs(effect)), None)
