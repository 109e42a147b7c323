"""Measures of the rollout/trainer mismatch (experiment `rollout_mismatch`): how far the sampler's log-probs of the
sampled tokens are from the trainer's, read from the `mismatch_*` columns each run logs per step
(`mathrl.engine.mismatch`), what each step spent sampling and updating, and the run table its claims read.

A step mean is the mean over the steps that logged the column; the largest gap is the largest over steps, the
smallest effective sample size the smallest. A run that did not log a column has NaN.
"""

from __future__ import annotations

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
