"""Measures of the rollout/trainer mismatch (experiment `rollout_mismatch`): how far the sampler's log-probs of the
sampled tokens are from the trainer's, read from the `mismatch_*` columns each run logs per step
(`mathrl.engine.mismatch`), what each step spent sampling and updating, the run table its claims read, and the
table of the exact control at scale (every run of the pipeline without a source of mismatch, pooled).

A step mean is the mean over the steps that logged the column; the largest gap is the largest over steps, the
smallest effective sample size the smallest. A run that did not log a column has NaN.
"""

from __future__ import annotations

import pandas as pd

from mathrl.analysis.measures.catalog import SHARE, measure
from mathrl.analysis.measures.series import NAN, step_mean


def step_max(run, column: str) -> float:
    """The largest value of a logged column over a run's steps; NaN where the run did not log it."""
    return float(run.metrics[column].max()) if column in run.metrics else NAN


def step_min(run, column: str) -> float:
    """The smallest value of a logged column over a run's steps; NaN where the run did not log it."""
    return float(run.metrics[column].min()) if column in run.metrics else NAN


@measure("logp_diff_mean", "mean per-token |trainer − sampler log-prob|, mean over the run's steps")
def logp_diff_mean(run) -> float:
    return step_mean(run.metrics, "mismatch_logp_diff_mean")


@measure("logp_diff_max", "largest per-token |trainer − sampler log-prob| over the run")
def logp_diff_max(run) -> float:
    return step_max(run, "mismatch_logp_diff_max")


@measure("kl_k3", "k3 estimate of the KL from sampler to trainer, mean over the run's steps")
def kl_k3(run) -> float:
    return step_mean(run.metrics, "mismatch_kl_k3")


@measure("chi2", "χ² divergence of the importance weights (E[w²] − 1), mean over the run's steps")
def chi2(run) -> float:
    return step_mean(run.metrics, "mismatch_chi2")


@measure("ess", "normalised effective sample size of the importance weights, mean over the run's steps", SHARE)
def ess(run) -> float:
    return step_mean(run.metrics, "mismatch_ess")


@measure("ess_min", "smallest normalised effective sample size of a step", bounds=SHARE)
def ess_min(run) -> float:
    return step_min(run, "mismatch_ess")


@measure("logp_corr", "correlation of sampler and trainer log-probs, mean over the run's steps")
def logp_corr(run) -> float:
    return step_mean(run.metrics, "mismatch_logp_corr")


@measure("corrected_frac", "share of tokens a mismatch correction capped or dropped, mean over the run's steps", SHARE)
def corrected_frac(run) -> float:
    return step_mean(run.metrics, "mismatch_corrected_frac")


@measure("sample_seconds", "seconds a step spent sampling (rollouts and rewards), mean over the run's steps")
def sample_seconds(run) -> float:
    return step_mean(run.metrics, "sample_seconds")


@measure("update_seconds", "seconds a step spent updating the policy, mean over the run's steps")
def update_seconds(run) -> float:
    return step_mean(run.metrics, "update_seconds")


MISMATCH = ["logp_diff_mean", "logp_diff_max", "kl_k3", "chi2", "ess", "ess_min", "logp_corr", "corrected_frac"]
RUN_TABLES = {
    "diagnostics_mismatch_runs": {
        "experiment": "rollout_mismatch",
        "keys": ["setting", "seed", "warmup"],
        "measures": [
            "steps_done",
            *MISMATCH,
            "sample_seconds",
            "update_seconds",
            "initial_eval",
            "final_eval",
            "gain",
        ],
        "runs": "with_result",
    },
}

# a run samples exactly as it trains (no source of mismatch) under these settings
NO_SOURCE = {
    "sampler_dtype": "float32",
    "rollout_staleness": 0,
    "sample_top_k": 0,
    "sample_top_p": 1.0,
    "temperature": 1.0,
}
# The table claims read that is not one row per run, and its columns (mathrl.analysis.claim_names reads this from
# the source): one row, the runs without a source of mismatch, pooled.
CLAIM_TABLES = {
    "diagnostics_mismatch_control": [
        "runs",
        "tokens_max",
        "run_max_median",
        "mean_gap_mean",
        "mean_gap_max",
        "ess_min",
    ],
}


def control_at_scale(runs) -> pd.DataFrame:
    """Of `runs` (every run of the pipeline), those complete, trained under their own id, that logged the mismatch
    and have no source of it: how large float rounding between the sampling path and the training forward makes the
    per-token log-prob gap (the largest token, the median run's largest, the mean gap's mean and largest, and the
    smallest effective sample size)."""
    cols = CLAIM_TABLES["diagnostics_mismatch_control"]
    runs = [r for r in runs if r.ok and r.spec.same_as is None and "mismatch_logp_diff_max" in r.metrics]
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
