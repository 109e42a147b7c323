"""The measures of gradient-norm and value-loss clipping, on hand-made runs: every number derived by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from mathrl.analysis.measures import clipping as cl


def run(evals, settings, **metrics) -> SimpleNamespace:
    """A run with a result: held-out accuracy at steps 0, 2, 4, ... and its logged metrics at steps 1, 2, ..."""
    steps = len(next(iter(metrics.values())))
    return SimpleNamespace(
        ok=True,
        evals=pd.DataFrame({"step": range(0, 2 * len(evals), 2), "eval_accuracy": evals}),
        initial_eval=evals[0],
        metrics=pd.DataFrame({"step": range(1, steps + 1), **metrics}),
        settings=settings,
    )


NORMS = [1.0, 2.0, 500.0, 3.0, 2.0, 1.5]  # the spike at step 3; the other steps' median is 2
EVALS = [0.5, 0.1, 0.2, 0.3]  # at steps 0, 2, 4, 6


def test_a_spiked_clipped_run():
    r = run(EVALS, {"grad_clip": 1.0, "fault_grad_spike_step": 3}, grad_norm=NORMS)
    assert (cl.max_norm(r), cl.spike(r)) == ("1.0", "yes")
    assert cl.spike_ratio(r) == 250.0 and cl.spike_norm(r) == 500.0
    assert cl.clip_bound(r) == pytest.approx(5 / 6)  # every step but the first above 1.0
    assert cl.drop_after_spike(r) == pytest.approx(0.5 - 0.2)  # the lowest from step 3 on (0.1 at step 2 comes first)


def test_an_unclipped_run_without_a_spike():
    r = run(EVALS, {"grad_clip": None}, grad_norm=NORMS)
    assert (cl.max_norm(r), cl.spike(r)) == ("none", "no")
    assert math.isnan(cl.spike_ratio(r)) and math.isnan(cl.spike_norm(r)) and math.isnan(cl.clip_bound(r))
    assert cl.drop_after_spike(r) == pytest.approx(0.4)  # from the start: its lowest is 0.1
    risen = run([0.5, 0.6], {"grad_clip": 2.0, "fault_grad_spike_step": 1}, grad_norm=[1.0, 1.0])
    assert cl.drop_after_spike(risen) == pytest.approx(-0.1) and cl.clip_bound(risen) == 0.0


def test_spike_ratio_of_a_series():
    steps = pd.Series([1, 2, 3, 4, 5])
    assert cl.spike_ratio_of(pd.Series([1.0, 2.0, 500.0, 3.0, 2.0]), steps, 3) == 250.0  # 500 over the median 2
    assert math.isnan(cl.spike_ratio_of(pd.Series([1.0] * 5), steps, None))
    assert math.isnan(cl.spike_ratio_of(pd.Series([1.0] * 5), steps, 9))  # the run never reached the spike


def test_critic_explained_variance_by_step_20():
    m = pd.DataFrame({"step": range(1, 26), "explained_variance": [0.0] * 15 + [0.1, 0.2, 0.3, 0.4, 0.5] + [0.9] * 5})
    assert cl.critic_ev(m) == pytest.approx(0.3)  # steps 16-20 only
    assert cl.critic_ev(m.head(3)) == 0.0 and math.isnan(cl.critic_ev(m.assign(explained_variance=math.nan)))


def test_the_critic_of_a_value_clipped_run():
    r = run(
        [0.5, 0.55],
        {"value_clip": 0.2},
        value_rmse=[0.3, 0.2, 0.1, math.nan],
        explained_variance=[-1.5, 0.2, 0.4, 0.5],
        value_delta=[0.45, 0.1, 0.05, 0.05],
        value_clip_frac=[0.7, 0.1, 0.0, 0.0],
    )
    assert cl.value_clip(r) == "0.2" and cl.value_clip(SimpleNamespace(settings={"value_clip": None})) == "none"
    assert cl.final_rmse(r) == pytest.approx(0.1) and cl.mean_rmse(r) == pytest.approx(0.2)  # NaN left out
    assert (cl.final_explained_variance(r), cl.ev_min(r)) == (0.5, -1.5)
    assert cl.ev_by_20(r) == pytest.approx((-1.5 + 0.2 + 0.4 + 0.5) / 4)  # a run shorter than 20 steps: all of it
    assert (cl.value_delta_max(r), cl.clip_share_max(r)) == (0.45, 0.7)
