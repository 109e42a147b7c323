"""Crafted metric sequences for mathrl.engine.monitor.StabilityMonitor."""

import io
import math

import pytest
import torch

from mathrl.engine.monitor import StabilityMonitor


def feed(monitor, entropies=None, kls=None, rewards=None, start=0):
    """Run check() over the sequences (missing ones held at quiet values); return the steps
    at which each kind fired."""
    n = len(entropies or kls or rewards)
    entropies = entropies or [1.0] * n
    kls = kls or [0.0] * n
    rewards = rewards or [0.5] * n
    fired = []
    for i, (h, kl, r) in enumerate(zip(entropies, kls, rewards)):
        fired += [(a["step"], a["kind"]) for a in monitor.check(start + i, h, kl, r)]
    return fired


def test_low_entropy_is_edge_triggered():
    m = StabilityMonitor(entropy_min=0.5)
    # fires at 1; stays quiet at 2 (still low); clears at 3; fires again at 4
    assert feed(m, entropies=[1.0, 0.4, 0.3, 0.6, 0.2]) == [(1, "low_entropy"), (4, "low_entropy")]
    first = m.alerts[0]
    assert first["kind"] == "low_entropy" and first["value"] == 0.4 and first["threshold"] == 0.5
    assert "0.4" in first["message"] and set(first) == {
        "step",
        "kind",
        "value",
        "threshold",
        "message",
    }


def test_high_kl_and_nan_kl():
    m = StabilityMonitor(kl_max=0.5)
    # NaN at 3 neither clears nor re-fires; 0.2 at 5 clears; 0.9 at 6 fires again
    kls = [0.1, 0.6, 0.7, math.nan, 0.8, 0.2, 0.9]
    assert feed(m, kls=kls) == [(1, "high_kl"), (6, "high_kl")]
    quiet = StabilityMonitor()
    assert feed(quiet, kls=[math.nan] * 5) == []
    assert quiet.alerts == []


def test_reward_swing_needs_full_window_and_is_edge_triggered():
    m = StabilityMonitor(reward_swing=0.3, window=3)
    # step 1 swings 0.5 but the window holds only 2 values; step 2 window [0, .5, .5] fires;
    # steps 3-4 window all 0.5 clears; step 5 window [.5, .5, 0] fires again
    assert feed(m, rewards=[0.0, 0.5, 0.5, 0.5, 0.5, 0.0]) == [
        (2, "reward_swing"),
        (5, "reward_swing"),
    ]
    assert m.alerts[0]["value"] == 0.5 and m.alerts[0]["threshold"] == 0.3
    # a swing of exactly the threshold is not above it
    assert feed(StabilityMonitor(reward_swing=0.25, window=3), rewards=[0.0, 0.25, 0.25]) == []


def test_several_kinds_on_one_step_and_record():
    m = StabilityMonitor()
    alerts = m.check(0, entropy=0.1, kl=0.9, reward_mean=0.5)
    assert [a["kind"] for a in alerts] == ["low_entropy", "high_kl"]
    rec = m.record(1, "nonfinite", math.inf, "loss is inf; step skipped")
    assert rec["kind"] == "nonfinite" and rec["threshold"] is None
    assert [a["kind"] for a in m.alerts] == ["low_entropy", "high_kl", "nonfinite"]
    assert m.alerts[-1]["message"] == "loss is inf; step skipped"


def test_state_roundtrip_gives_identical_later_alerts():
    entropies = [1.0, 0.4, 0.3, 0.3, 0.6, 0.2]
    kls = [0.6, 0.7, 0.1, 0.1, 0.8, 0.8]
    rewards = [0.5, 0.5, 0.5, 0.5, 0.1, 0.5]
    split = 3  # at the split low_entropy is active and the reward window is full

    reference = StabilityMonitor(window=3)
    feed(reference, entropies, kls, rewards)

    first = StabilityMonitor(window=3)
    feed(first, entropies[:split], kls[:split], rewards[:split])
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    buf.seek(0)
    resumed = StabilityMonitor(window=3)
    resumed.load_state_dict(torch.load(buf, weights_only=True))
    later = feed(resumed, entropies[split:], kls[split:], rewards[split:], start=split)

    # step 3 entropy still low: no repeat; step 4 KL rises and the window [.5, .5, .1]
    # (two values from before the split) swings 0.4; step 5 entropy low again
    assert later == [(4, "high_kl"), (4, "reward_swing"), (5, "low_entropy")]
    assert resumed.alerts == reference.alerts

    # without the state, low entropy would repeat at 3 and the swing come a step late
    fresh = StabilityMonitor(window=3)
    assert feed(fresh, entropies[split:], kls[split:], rewards[split:], start=split) == [
        (3, "low_entropy"),
        (4, "high_kl"),
        (5, "low_entropy"),
        (5, "reward_swing"),
    ]


def test_noise_threshold_by_hand():
    from mathrl.engine.monitor import noise_threshold

    assert noise_threshold(0.5, 100, 6) == pytest.approx(6 * 0.05)  # sqrt(0.25 / 100)
    assert noise_threshold(0.5, 400, 6) == pytest.approx(6 * 0.025)  # four times the batch: half the threshold
    assert noise_threshold(0.0, 100, 6) == pytest.approx(6 / 100) and noise_threshold(1.3, 100, 6) == pytest.approx(
        6 / 100
    )  # floor


def test_scaled_reward_swing_ignores_noise_of_its_batch():
    # batch 64 at p = 0.5: se = 0.0625, 6 sigmas = 0.375; a 0.3 swing is noise here, a 0.45 one is not
    quiet = StabilityMonitor(entropy_min=None, kl_max=None, reward_swing=0.1, window=3, swing_sigmas=6, batch_size=64)
    assert feed(quiet, rewards=[0.35, 0.65, 0.5]) == []
    loud = StabilityMonitor(entropy_min=None, kl_max=None, reward_swing=0.1, window=3, swing_sigmas=6, batch_size=64)
    assert feed(loud, rewards=[0.3, 0.75, 0.5]) == [(2, "reward_swing")]  # steps count from 0


def test_sustained_drops_and_precision_recall_by_hand():
    from mathrl.engine.monitor import precision_recall, sustained_drops

    steps = [0, 5, 10, 15, 20, 25, 30, 35]
    acc = [0.40, 0.50, 0.44, 0.43, 0.50, 0.44, 0.52, 0.51]
    assert sustained_drops(steps, acc) == [
        10
    ]  # 0.44, 0.43 both >= 5 points below the best 0.50; step 25 is one reading only
    assert sustained_drops(steps, acc, sustain=1) == [10, 25]
    assert sustained_drops([0, 5, 10], [0.5, float("nan"), 0.5]) == []
    # alerts at 3 (drop at 10 within 10 steps: hit), 12 (nothing after within 10: miss); drops 10 and 40 (40
    # unannounced)
    assert precision_recall([3, 12], [10, 40], horizon=10) == (1, 2, 1, 2)
    assert precision_recall([], [10], horizon=10) == (0, 0, 0, 1)
