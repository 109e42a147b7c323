"""Measures of rl-stability-batch-and-hyperparameters.md's runs on batch size and hyperparameters: the shape of a
run's held-out accuracy curve (its drops and the size of its changes), its last training reward, what it cost, whether
its LR schedule or KL controller acted, what a higher LR costs its batch, and the run tables those claims read; the
batch study's curve points at fractions of its steps, and its held-out accuracy at equal samples with the pairs of runs
its claim compares there.

The document speaks of fluctuation in percent of the metric and of changes above 10% or below 3%; here they are
read on the held-out accuracy at each evaluation, free of the metric's scale where the document's figure is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mathrl.analysis.measures.catalog import CHANGE, SHARE, among, measure
from mathrl.analysis.measures.general import reward_end, reward_start
from mathrl.analysis.measures.series import NAN, end_over_start, known, logged
from mathrl.analysis.results import warmup

BIG_SWING, SMALL_SWING = 0.10, 0.03  # the document's ">10%" and "<3%", as accuracy points
# a schedule acted: B's LR fell to at most half its first; C's KL coefficient spanned at least 1.5x
LR_FELL, KL_MOVED = 0.5, 1.5


def largest_drop_of(values: pd.Series) -> float:
    """The largest decrease between consecutive values (0 when the curve never goes down)."""
    d = values.diff().dropna()
    return float(max(-d.min(), 0.0)) if len(d) else 0.0


def largest_relative_drop_of(values: pd.Series) -> float:
    """The largest decrease between consecutive values as a share of the earlier one (0 when the curve never goes
    down): the document's fluctuation in percent of the metric, free of the metric's scale."""
    v = values.to_numpy(dtype=float)
    earlier, later = v[:-1], v[1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        falls = np.where(earlier > 0, (earlier - later) / earlier, np.nan)
    falls = falls[np.isfinite(falls)]
    return float(max(falls.max(), 0.0)) if len(falls) else 0.0


def change_shares(values: pd.Series) -> tuple[float, float]:
    """Shares of consecutive changes (in either direction) above BIG_SWING and below SMALL_SWING."""
    d = values.diff().dropna().abs()
    return (float((d > BIG_SWING).mean()), float((d < SMALL_SWING).mean())) if len(d) else (NAN, NAN)


def absolute_deviation(rows: pd.DataFrame, by: str, col: str) -> pd.Series:
    """|value − its group's median|: the Brown-Forsythe transform, whose group means compare spreads."""
    return (rows[col] - rows.groupby(by)[col].transform("median")).abs()


@measure("peak_eval", "best held-out accuracy at an evaluation after RL began", bounds=SHARE)
def peak_eval(run) -> float:
    return run.evals["eval_accuracy"].iloc[1:].max()


@measure("largest_drop", "largest fall of held-out accuracy between consecutive evaluations", bounds=SHARE)
def largest_drop(run) -> float:
    return largest_drop_of(run.evals["eval_accuracy"])


@measure("largest_relative_drop", "largest fall of held-out accuracy between evaluations, as a share of the earlier")
def largest_relative_drop(run) -> float:
    return largest_relative_drop_of(run.evals["eval_accuracy"])


@measure("share_above_10", f"share of changes of held-out accuracy between evaluations above {BIG_SWING:g}", SHARE)
def share_above_10(run) -> float:
    return change_shares(run.evals["eval_accuracy"])[0]


@measure("share_below_3", f"share of changes of held-out accuracy between evaluations below {SMALL_SWING:g}", SHARE)
def share_below_3(run) -> float:
    return change_shares(run.evals["eval_accuracy"])[1]


@measure("final_reward", "training reward at the last step that logged it")
def final_reward(run) -> float:
    return logged(run, "reward_mean")


@measure("reward_gain", "mean training reward: last steps − first steps", bounds=CHANGE)
def reward_gain(run) -> float:
    return reward_end(run) - reward_start(run)


@measure("wall_seconds", "the run's wall-clock time")
def wall_seconds(run) -> float:
    return run.summary["wall_seconds"]


@measure("alerts", "stability-monitor alerts the run raised")
def alerts(run) -> float:
    return len(run.summary["alerts"])


@among("final_reward_absdev", "|final reward − the median of its batch size's runs|")
def final_reward_absdev(rows: pd.DataFrame) -> pd.Series:
    return absolute_deviation(rows, "batch_size", "final_reward")


@measure("kl_coef_last", "KL coefficient at the last step that logged it")
def kl_coef_last(run) -> float:
    return logged(run, "kl_coef")


@measure("lr_ratio", "learning rate at the last step over the first")
def lr_ratio(run) -> float:
    return end_over_start(run.metrics["lr"])


@measure("kl_coef_range", "largest KL coefficient over the smallest (1: it never moved)")
def kl_coef_range(run) -> float:
    kl = run.metrics["kl_coef"].dropna()
    return float(kl.max() / kl.min()) if len(kl) and kl.min() > 0 else NAN


@measure(
    "schedule_moved",
    f"1 when the LR fell to at most {LR_FELL:g} of its first or the KL coefficient spanned {KL_MOVED:g}x, else 0",
    bounds=SHARE,
)
def schedule_moved(run) -> float:
    lr, kl = lr_ratio(run), kl_coef_range(run)
    return float((known(lr) and lr <= LR_FELL) or (known(kl) and kl >= KL_MOVED))


@among("final_eval_absdev", "|final held-out accuracy − the median of its role's runs|")
def final_eval_absdev(rows: pd.DataFrame) -> pd.Series:
    return absolute_deviation(rows, "role", "final_eval")


@among(
    "lr_sensitivity",
    "held-out gain at its batch's lower LR − at the higher one, same seed (on the lower LR's row)",
)
def lr_sensitivity(rows: pd.DataFrame) -> pd.Series:
    """On the row of a run at its batch's lower LR: its gain less that of the run at the higher LR with its seed (the
    same warm-up and prompts); NaN on the other rows and where either run has no result."""
    keys = [rows["batch_size"], rows["seed"]]
    lr = rows.groupby(keys)["lr"]
    low, high = rows["lr"].eq(lr.transform("min")), rows["lr"].eq(lr.transform("max"))
    gain_high = rows["gain"].where(high & ~low).groupby(keys).transform("max")
    return (rows["gain"] - gain_high).where(low & ~high)


# ---- the batch study's curves at fractions of its steps and at equal samples -------------------------------------
FRACTIONS = (0.2, 0.4, 0.6, 0.8, 1.0)


def curve_points(run) -> list[dict]:
    """Eval accuracy (nearest evaluation), entropy and reward at 20..100% of the steps."""
    out = []
    for k, f in enumerate(FRACTIONS):
        step = round(f * run.settings["steps"])
        row = {"point": k + 1, "step": step, "eval_step": NAN, "eval_accuracy": NAN, "entropy": NAN, "reward": NAN}
        if run.ok and step <= run.metrics["step"].max():  # a run that stopped early has no value here
            ev, m = run.evals, run.metrics.set_index("step")
            i = (ev["step"] - step).abs().idxmin()
            row.update(eval_step=ev["step"][i], eval_accuracy=ev["eval_accuracy"][i])
            row.update(entropy=m["entropy"].get(step, NAN), reward=m["reward_mean"].get(step, NAN))
        out.append(row)
    return out


def equal_samples_table(runs: list) -> pd.DataFrame:
    """Held-out accuracy per batch size, seed and number of rollouts sampled, at every
    evaluation: the batch study's comparison at equal samples beside its equal steps."""
    rows = [
        {
            "batch_size": r.settings["batch_size"],
            "seed": r.spec.seed,
            "warmup": warmup(r),
            "samples": int(s),
            "eval_accuracy": acc,
        }
        for r in runs
        if r.ok
        for s, acc in zip(r.metrics["samples"], r.metrics["eval_accuracy"])
        if pd.notna(acc) and s > 0
    ]
    return pd.DataFrame(rows, columns=["batch_size", "seed", "warmup", "samples", "eval_accuracy"])


def equal_samples_pairs(es: pd.DataFrame) -> pd.DataFrame:
    """Per smaller batch and seed: held-out accuracy of the largest batch and of the smaller one at
    the largest number of rollouts both were evaluated at (the comparison at equal samples)."""
    hi, rows = es["batch_size"].max() if len(es) else None, []
    samples = {b: set(g["samples"]) for b, g in es.groupby("batch_size")}
    for small in sorted(set(samples) - {hi}):
        if common := samples[hi] & samples[small]:
            at = es[es["samples"] == max(common)]
            top = at[at["batch_size"] == hi]
            large = {s: float(v) for s, v in zip(top["seed"], top["eval_accuracy"]) if pd.notna(v)}
            mine = at[at["batch_size"] == small]
            rows += [
                {
                    "batch_size": small,
                    "large_batch": hi,
                    "seed": seed,
                    "warmup": warmup,
                    "samples": max(common),
                    "large": large.get(seed, NAN),
                    "small": acc,
                }
                for seed, warmup, acc in zip(mine["seed"], mine["warmup"], mine["eval_accuracy"])
            ]
    return pd.DataFrame(rows, columns=CLAIM_TABLES["stability_equal_samples_pairs"])


CURVE = [
    "initial_eval",
    "final_eval",
    "peak_eval",
    "roughness",
    "drawdown",
    "largest_drop",
    "largest_relative_drop",
    "share_above_10",
    "share_below_3",
    "collapsed",
    "final_reward",
    "wall_seconds",
    "alerts",
]
RUN_TABLES = {
    "stability_batch_runs": {
        "experiment": "batch",
        "keys": ["batch_size", "lr", "seed", "warmup"],
        "measures": [*CURVE, "entropy_end", "reward_gain", "final_reward_absdev"],
    },
    # the document's methods (A fixed at the large batch, B step-decayed LR, C adaptive KL) and the equal-batch control
    "stability_fvd_runs": {
        "experiment": "fixed_vs_dynamic",
        "keys": ["role", "variant", "seed", "warmup"],
        "roles": ["A", "B", "C", "equal_batch"],
        "measures": [
            *CURVE,
            "lr_last",
            "kl_coef_last",
            "lr_ratio",
            "kl_coef_range",
            "schedule_moved",
            "final_eval_absdev",
        ],
    },
    # each batch at the reference LR and at three times it
    "stability_tuning_runs": {
        "experiment": "batch_tuning",
        "keys": ["role", "batch_size", "lr", "seed", "warmup"],
        "roles": ["small_ref", "small_high", "large_ref", "large_high"],
        "measures": ["gain", "lr_sensitivity"],
    },
}
# The batch study's table that claims read whose rows are pairs of runs, and its columns (mathrl.analysis.claim_names
# reads this assignment from the source to check a claim's names when the config is read).
CLAIM_TABLES = {
    "stability_equal_samples_pairs": ["batch_size", "large_batch", "seed", "warmup", "samples", "large", "small"]
}
