"""Measures of rl-stability-batch-and-hyperparameters.md's runs: the shape of a run's held-out accuracy curve (its
drops and the size of its changes), its last training reward, what it cost, and the run tables its claims read.

The document speaks of fluctuation in percent of the metric and of changes above 10% or below 3%; here they are
read on the held-out accuracy at each evaluation, free of the metric's scale where the document's figure is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mathrl.analysis.measures.catalog import CHANGE, SHARE, among, measure
from mathrl.analysis.measures.general import reward_end, reward_start
from mathrl.analysis.measures.series import NAN, logged

BIG_SWING, SMALL_SWING = 0.10, 0.03  # the document's ">10%" and "<3%", as accuracy points


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
}
