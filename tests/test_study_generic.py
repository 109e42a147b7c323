"""The generic study's figure: bands of bounded quantities stay inside their range."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from mathrl.analysis.measures.general import metric_range
from mathrl.analysis.studies import generic


def test_bounds_of_each_metric_and_reward_kind():
    s = {"reward": "exact", "kl_estimator": "k3", "format_bonus": 0.1, "digit_weight": 0.5, "invalid_penalty": 0.5,
         "proxy_correct_weight": 0.3, "proxy_bias_weight": 0.7}  # fmt: skip
    assert metric_range("eval_accuracy", None) == (0.0, 1.0)
    assert metric_range("entropy", s) == (0.0, math.inf)
    assert metric_range("kl", s) == (0.0, math.inf)
    assert metric_range("kl", {**s, "kl_estimator": "k1"}) == (-math.inf, math.inf)
    assert metric_range("reward_mean", s) == (0.0, 1.0)
    assert metric_range("reward_mean", {**s, "reward": "shaped"}) == (0.0, pytest.approx(1.6))
    assert metric_range("reward_mean", {**s, "reward": "shaped_penalty"}) == (-0.5, pytest.approx(1.6))
    assert metric_range("reward_mean", {**s, "reward": "proxy"}) == (0.0, 1.0)
    assert metric_range("reward_mean", {**s, "reward": "signed"}) == (-1.0, 1.0)
    assert metric_range("reward_mean", {**s, "reward": "random"}) == (0.0, 1.0)
    assert metric_range("reward_mean", {**s, "reward_offset": 10.0}) == (10.0, 11.0)
    assert metric_range("reward_mean", None) == (-math.inf, math.inf)  # settings unknown: not clipped


def test_two_seed_bands_of_accuracy_reward_and_kl_stay_in_range():
    steps = [0, 1, 2]
    rows = []
    cases = [("eval_accuracy", 0.95, 0.2), ("reward_mean", 0.9, 0.3), ("kl", 0.01, 0.05), ("entropy", 0.05, 0.2)]
    for metric, mean, std in cases:
        rows += [
            {"experiment": "e", "setting": "a", "metric": metric, "step": k, "mean": mean, "std": std, "n": 2}
            for k in steps
        ]
    settings = {"a": {"reward": "exact", "kl_estimator": "k3"}}
    fig = generic.figure(pd.DataFrame(rows), "e", settings)
    for ax, (lo, hi) in zip(fig.axes, [(0, 1), (0, np.inf), (0, np.inf), (0, 1)]):
        (poly,) = ax.collections
        y = np.concatenate([path.vertices[:, 1] for path in poly.get_paths()])
        assert y.min() >= lo - 1e-12 and y.max() <= hi + 1e-12, ax.get_title()
        assert y.max() > y.min()  # a band is still drawn


def test_the_probability_of_improvement_is_over_the_baseline_or_else_the_reference():
    """Over the `baseline` role where an experiment declares one, else over its `reference` role; the compared
    setting's own row and an experiment with neither role have none. By hand: 2 of the 4 seed pairs end higher."""
    runs = pd.DataFrame(
        {
            "experiment": ["e"] * 4 + ["f"] * 4 + ["g"] * 2,
            "setting": ["a", "a", "b", "b"] * 2 + ["x"] * 2,
            "seed": [0, 1] * 5,
            "status": "complete",
            "eval_size": 100.0,
            "start": 0.4,
            "final": [0.5, 0.7, 0.6, 0.6, 0.5, 0.7, 0.6, 0.6, 0.5, 0.6],
            "best": 0.7,
            "gain": 0.1,
        }
    )
    cfg = {
        "experiments": {
            "e": {"roles": {"baseline": "b", "reference": "a"}},
            "f": {"roles": {"reference": "b"}},
            "g": {},
        }
    }
    out = generic.summary_table(runs, cfg).set_index(["experiment", "setting"])
    assert out.loc[("e", "a"), "p_improvement"] == 0.5 and out.loc[("e", "a"), "p_improvement_over"] == "b"
    assert out.loc[("f", "a"), "p_improvement"] == 0.5 and out.loc[("f", "a"), "p_improvement_over"] == "b"
    assert math.isnan(out.loc[("e", "b"), "p_improvement"]) and math.isnan(out.loc[("g", "x"), "p_improvement"])
    assert out.loc[("g", "x"), "p_improvement_over"] == ""
