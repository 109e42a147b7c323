"""Measures of what a policy update did: token entropy at a run's first and last step, the step means of the clip
diagnostics each policy loss logs (`mathrl.engine.policy_losses`), of the advantages and of the tokens a selection
kept (`mathrl.engine.token_selection`) and of the carry probe a run wrote (its final policy's entropy at the digits a
carry enters and at the others; the probes' rows of several runs, for a table by position), held-out accuracy sampled
at the policy's temperature, the correlation of the log-prob/advantage covariance with the entropy change that
follows, and whether a fault was injected; the run tables of the negative controls, the policy losses and the token
selection, and the update diagnostics of every run that logged them (a claim table: its rows come from every
experiment).

A step mean is the mean over the steps that logged the column (NaN for a run that logged none: a loss without a PPO
clip logs no clip_frac).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
from scipy import stats

from mathrl.analysis.estimators import carry_means
from mathrl.analysis.measures.catalog import CHANGE, MEASURES, SHARE, measure
from mathrl.analysis.measures.series import NAN, logged, step_mean
from mathrl.analysis.measures.training_challenges import by_step, reduction
from mathrl.analysis.results import Run, read_csv, warmup
from mathrl.pipeline.config import point_label
from mathrl.pipeline.layout import CARRY_PROBE_FILE

CORRELATED_STEPS = 5  # the steps with a covariance and an entropy change that a correlation needs at least


def cov_entropy_correlation(cov: np.ndarray, entropy: np.ndarray) -> float:
    """Spearman's correlation between the log-prob/advantage covariance at step t and the entropy change
    H(t+1) − H(t), over the steps where both are finite; NaN with fewer than CORRELATED_STEPS of them or a covariance
    that does not vary."""
    cov, dh = np.asarray(cov, dtype=float)[:-1], np.diff(np.asarray(entropy, dtype=float))
    keep = np.isfinite(cov) & np.isfinite(dh)
    if keep.sum() < CORRELATED_STEPS or np.ptp(cov[keep]) == 0:
        return NAN
    return float(stats.spearmanr(cov[keep], dh[keep]).statistic)


# ----------------------------------------------------------------------------- entropy and KL at the ends
@measure("entropy_first", "token entropy at the first step (the rollouts of the policy before any update)")
def entropy_first(run) -> float:
    return float(by_step(run)["entropy"].iloc[0])


@measure("entropy_last", "token entropy at the last step")
def entropy_last(run) -> float:
    return float(by_step(run)["entropy"].iloc[-1])


@measure("entropy_reduction", "share of token entropy lost from the first step to the last")
def entropy_reduction(run) -> float:
    return reduction(entropy_first(run), entropy_last(run))


@measure("kl_last", "KL to the reference policy at the last step")
def kl_last(run) -> float:
    return float(run.metrics["kl"].iloc[-1])


# ----------------------------------------------------------------------------- the clips of the policy losses
@measure("clip_frac", "share of tokens whose ratio the clip cut, mean over the run's steps", bounds=SHARE)
def clip_frac(run) -> float:
    return step_mean(run.metrics, "clip_frac")


@measure("clip_frac_low", "share of tokens cut at the lower clip bound, mean over the run's steps", bounds=SHARE)
def clip_frac_low(run) -> float:
    return step_mean(run.metrics, "clip_frac_low")


@measure("clip_frac_high", "share of tokens cut at the upper clip bound, mean over the run's steps", bounds=SHARE)
def clip_frac_high(run) -> float:
    return step_mean(run.metrics, "clip_frac_high")


@measure("seq_clip_frac", "share of sequences GSPO's sequence clip cut, mean over the run's steps", bounds=SHARE)
def seq_clip_frac(run) -> float:
    return step_mean(run.metrics, "seq_clip_frac")


@measure("is_clip_frac", "share of tokens whose importance weight CISPO's cap cut, mean over the steps", SHARE)
def is_clip_frac(run) -> float:
    return step_mean(run.metrics, "is_clip_frac")


@measure("dual_clip_frac", "share of tokens dual-clip's bound hit, mean over the run's steps", bounds=SHARE)
def dual_clip_frac(run) -> float:
    return step_mean(run.metrics, "dual_clip_frac")


@measure("ppo_kl", "KL between the policy before and after a step's updates, mean over the run's steps")
def ppo_kl(run) -> float:
    return step_mean(run.metrics, "ppo_kl")


# ----------------------------------------------------------------------------- advantages and rewards
@measure("adv_mean", "mean advantage over answer tokens, over the steps")
def adv_mean(run) -> float:
    return step_mean(run.metrics, "adv_mean")


@measure("adv_std", "standard deviation of the advantages of a step, mean over the run's steps")
def adv_std(run) -> float:
    return step_mean(run.metrics, "adv_std")


@measure("adv_abs_max", "mean largest |advantage| of a step (logged after the advantage clip)")
def adv_abs_max(run) -> float:
    return step_mean(run.metrics, "adv_abs_max")


@measure("reward_mean", "mean training reward, over the run's steps")
def reward_mean(run) -> float:
    return step_mean(run.metrics, "reward_mean")


@measure("logp_adv_cov", "covariance of the sampled tokens' log-probs and advantages, mean over the run's steps")
def logp_adv_cov(run) -> float:
    return step_mean(run.metrics, "logp_adv_cov")


@measure("cov_entropy_corr", "Spearman correlation of logp_adv_cov(t) and the entropy change H(t+1) − H(t)")
def cov_entropy_corr(run) -> float:
    m = run.metrics
    return cov_entropy_correlation(m["logp_adv_cov"], m["entropy"]) if "logp_adv_cov" in m else NAN


# ----------------------------------------------------------------------------- held-out accuracy, sampled
@measure("initial_sampled", "held-out accuracy before RL, sampled at the policy's temperature", bounds=SHARE)
def initial_sampled(run) -> float:
    return run.summary.get("initial", {}).get("eval_sampled_accuracy", NAN)


@measure("final_sampled", "held-out accuracy at the last evaluation that sampled it", bounds=SHARE)
def final_sampled(run) -> float:
    return logged(run, "eval_sampled_accuracy")


@measure("sampled_change", "held-out accuracy sampled at the policy's temperature: final − before RL", CHANGE)
def sampled_change(run) -> float:
    return final_sampled(run) - initial_sampled(run)


# ----------------------------------------------------------------------------- the tokens a selection kept
@measure("token_selected_frac", "share of answer tokens the selection kept, mean over the run's steps", SHARE)
def token_selected_frac(run) -> float:
    return step_mean(run.metrics, "token_selected_frac")


@measure("entropy_selected", "mean entropy of the answer tokens the selection kept, mean over the run's steps")
def entropy_selected(run) -> float:
    return step_mean(run.metrics, "entropy_selected")


@measure("entropy_unselected", "mean entropy of the answer tokens the selection left out, mean over the run's steps")
def entropy_unselected(run) -> float:
    return step_mean(run.metrics, "entropy_unselected")


# ----------------------------------------------------------------------------- the carry probe a run wrote
def probe_rows(run) -> pd.DataFrame | None:
    """The carry probe a run wrote (carry_probe.csv, `mathrl.engine.carry_probe`: its start and final policies'
    entropy by answer position and carry), checked whole against the run's record of it; None where it wrote none."""
    path = run.dir / CARRY_PROBE_FILE if run.dir is not None else None
    if path is None or not path.is_file():
        return None
    return read_csv(path, ((run.summary or {}).get("files") or {}).get(path.name))


PROBE_COLUMNS = ["checkpoint", "seed", "position", "carry", "entropy", "tokens"]


def carry_probe_rows(runs) -> pd.DataFrame:
    """The carry probes the complete `runs` wrote (`probe_rows`), per position and carry: each run's final policy
    under its setting's name (its variant, else its grid point) and seed, and each warm-up the runs started from once
    (the arms of an experiment share their warm-ups), as `warm-up` without a seed (columns PROBE_COLUMNS)."""
    frames, warmups = [], set()
    for run, rows in ((run, probe_rows(run)) for run in runs if run.ok):
        if rows is None:
            continue
        name = run.spec.variant or point_label(run.spec.point)
        frames.append(rows[rows["checkpoint"] == "final"].assign(checkpoint=name, seed=run.spec.seed))
        if warmup(run) not in warmups:
            warmups.add(warmup(run))
            frames.append(rows[rows["checkpoint"] == "start"].assign(checkpoint="warm-up", seed=NAN))
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()).reindex(columns=PROBE_COLUMNS)


def carry_probe(run) -> dict:
    """The run's carry probe (`probe_rows`) as the means of its final policy's entropy `estimators.carry_means`
    gives; NaN each where the run wrote none."""
    rows = probe_rows(run)
    if rows is None:
        return dict.fromkeys(("entropy_carry", "entropy_nocarry", "carry_gap"), NAN)
    return carry_means(rows[rows["checkpoint"] == "final"])


@measure("entropy_carry", "final policy's mean token entropy at the digits a carry enters (the carry probe)")
def entropy_carry(run) -> float:
    return carry_probe(run)["entropy_carry"]


@measure("entropy_nocarry", "final policy's mean token entropy at the digits no carry enters (the carry probe)")
def entropy_nocarry(run) -> float:
    return carry_probe(run)["entropy_nocarry"]


@measure("carry_gap", "entropy at the digits a carry enters − at the others, final policy (the carry probe)")
def carry_gap(run) -> float:
    return carry_probe(run)["carry_gap"]


HELD_OUT = ["initial_eval", "final_eval", "gain"]
CLIPS = ["clip_frac", "clip_frac_low", "clip_frac_high", "seq_clip_frac", "is_clip_frac", "dual_clip_frac"]
RUN_TABLES = {
    "diagnostics_negative_controls_runs": {
        "experiment": "negative_controls",
        "keys": ["setting", "role", "seed", "warmup"],
        "measures": [
            *HELD_OUT,
            *["initial_sampled", "final_sampled", "sampled_change"],
            *["clip_frac", "adv_mean", "reward_mean", "entropy_first", "entropy_last", "kl_last"],
        ],
        "runs": "with_result",
    },
    "diagnostics_policy_losses_runs": {
        "experiment": "policy_losses",
        "keys": ["setting", "role", "seed", "warmup", "policy_loss"],
        "measures": ["entropy_first", "entropy_last", "entropy_reduction", *HELD_OUT, *CLIPS, "ppo_kl", "samples"],
        "runs": "with_result",
    },
    "diagnostics_token_selection_runs": {
        "experiment": "token_selection",
        "keys": ["setting", "role", "seed", "warmup", "token_selection"],
        "measures": [
            *HELD_OUT,
            "token_selected_frac",
            "entropy_selected",
            "entropy_unselected",
            "entropy_carry",
            "entropy_nocarry",
            "carry_gap",
        ],
        "runs": "with_result",
    },
}


# ----------------------------------------------------------------------------- the update diagnostics of every run
# A run with a fault injected by the trainer's test hooks (a gradient spike, a NaN) shows the fault's dynamics,
# not training's.
FAULT_STEPS = ("fault_grad_spike_step", "fault_nan_step")


@measure("fault_injected", "yes where the trainer's test hooks injected a fault (a gradient spike, a NaN), else no")
def fault_injected(run) -> str:
    return "yes" if any(run.settings.get(k) is not None for k in FAULT_STEPS) else "no"


UPDATE = ["clip_frac_low", "clip_frac_high", "ppo_kl", "adv_std", "adv_abs_max", "logp_adv_cov", "cov_entropy_corr"]
# A table claims read whose rows are the runs of every experiment that logged the update diagnostics; its columns,
# stated once: the table is made with them, and mathrl.analysis.claim_names reads this assignment from the source.
CLAIM_TABLES = {"diagnostics_update_runs": ["experiment", "setting", "seed", "fault_injected", *UPDATE]}


def update_runs(runs: Iterable[tuple[dict, Run]]) -> pd.DataFrame:
    """Per run (its `keys`: experiment, setting, seed, with the run) that logged the update diagnostics: whether a
    fault was injected, their step means and the Spearman correlation between the log-prob/advantage covariance at
    step t and the entropy change H(t+1) − H(t) (the Entropy Mechanism paper: entropy falls where the covariance is
    positive)."""
    rows = [
        {**keys, **{c: MEASURES[c][1](run) for c in ("fault_injected", *UPDATE)}}
        for keys, run in runs
        if "logp_adv_cov" in run.metrics
    ]
    return pd.DataFrame(rows, columns=CLAIM_TABLES["diagnostics_update_runs"])
