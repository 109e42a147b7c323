"""Hand-checkable cases for mathrl.engine.control: schedules, the baseline and the KL controllers."""

import io
import math

import pytest
import torch

from mathrl.engine import control as C


def roundtrip(state: dict) -> dict:
    """Through torch.save / torch.load(weights_only=True), as a snapshot would."""
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


# ----------------------------------------------------------------- learning-rate schedules


def test_step_schedule_is_documents_rule():
    # lr = lr0 * 0.9 ** (step // 500)
    assert C.lr_factor("step", 0, 2000) == 1.0
    assert C.lr_factor("step", 499, 2000) == 1.0
    assert C.lr_factor("step", 500, 2000) == pytest.approx(0.9)
    assert C.lr_factor("step", 1000, 2000) == pytest.approx(0.81)
    assert C.lr_factor("step", 100, 2000, decay_rate=0.5, decay_every=50) == pytest.approx(0.25)


def test_constant_and_cosine_schedule():
    assert C.lr_factor("constant", 12345, 100) == 1.0
    assert C.lr_factor("cosine", 0, 100) == pytest.approx(1.0)
    assert C.lr_factor("cosine", 50, 100) == pytest.approx(0.5)
    assert C.lr_factor("cosine", 100, 100) == pytest.approx(0.0, abs=1e-12)
    # min_factor 0.1: midpoint (1 + 0.1) / 2, end and beyond 0.1
    assert C.lr_factor("cosine", 50, 100, min_factor=0.1) == pytest.approx(0.55)
    assert C.lr_factor("cosine", 100, 100, min_factor=0.1) == pytest.approx(0.1)
    assert C.lr_factor("cosine", 200, 100, min_factor=0.1) == pytest.approx(0.1)


def test_warmup_then_schedule():
    # (step + 1) / 10 during warm-up, then the schedule from its start
    assert C.lr_factor("constant", 0, 100, warmup_steps=10) == pytest.approx(0.1)
    assert C.lr_factor("constant", 4, 100, warmup_steps=10) == pytest.approx(0.5)
    assert C.lr_factor("constant", 9, 100, warmup_steps=10) == pytest.approx(1.0)
    # cosine over the 100 steps after a 10-step warm-up
    assert C.lr_factor("cosine", 10, 110, warmup_steps=10) == pytest.approx(1.0)
    assert C.lr_factor("cosine", 60, 110, warmup_steps=10) == pytest.approx(0.5)
    assert C.lr_factor("cosine", 110, 110, warmup_steps=10) == pytest.approx(0.0, abs=1e-12)
    assert C.lr_factor("step", 509, 1000, warmup_steps=10) == pytest.approx(1.0)
    assert C.lr_factor("step", 510, 1000, warmup_steps=10) == pytest.approx(0.9)


def test_unknown_lr_schedule_names_allowed():
    with pytest.raises(ValueError, match="constant, step, cosine"):
        C.lr_factor("linear", 0, 10)


# ----------------------------------------------------------------- entropy schedules


def test_entropy_schedules():
    assert C.entropy_coef_at("constant", 70, 100, 0.01, 0.0) == 0.01
    assert C.entropy_coef_at("linear", 0, 100, 0.01, 0.0) == pytest.approx(0.01)
    assert C.entropy_coef_at("linear", 25, 100, 0.01, 0.0) == pytest.approx(0.0075)
    assert C.entropy_coef_at("linear", 100, 100, 0.01, 0.0) == pytest.approx(0.0)
    assert C.entropy_coef_at("linear", 150, 100, 0.01, 0.0) == pytest.approx(0.0)
    assert C.entropy_coef_at("cosine", 0, 100, 0.01, 0.002) == pytest.approx(0.01)
    assert C.entropy_coef_at("cosine", 50, 100, 0.01, 0.002) == pytest.approx(0.006)
    assert C.entropy_coef_at("cosine", 100, 100, 0.01, 0.002) == pytest.approx(0.002)
    with pytest.raises(ValueError, match="constant, linear, cosine"):
        C.entropy_coef_at("exp", 0, 100, 0.01, 0.0)


# ----------------------------------------------------------------- baseline


def test_moving_average_baseline_uses_value_before_the_batch():
    b = C.MovingAverageBaseline(decay=0.9)
    assert b.value is None
    assert b.update(0.5) == pytest.approx(0.5)  # first batch: its own mean
    assert b.update(1.0) == pytest.approx(0.5)  # before this batch; then 0.9*0.5 + 0.1*1 = 0.55
    assert b.update(0.0) == pytest.approx(0.55)  # then 0.9*0.55 = 0.495
    assert b.value == pytest.approx(0.495)


def test_moving_average_baseline_with_init_and_state():
    b = C.MovingAverageBaseline(decay=0.9, init=0.0)
    assert b.update(1.0) == 0.0  # then 0.1
    assert b.update(1.0) == pytest.approx(0.1)  # then 0.19
    restored = C.MovingAverageBaseline(decay=0.5)
    restored.load_state_dict(roundtrip(b.state_dict()))
    assert restored.decay == 0.9
    assert restored.update(0.0) == b.update(0.0) == pytest.approx(0.19)
    assert restored.value == b.value


# ----------------------------------------------------------------- KL controllers


def test_fixed_kl():
    c = C.FixedKL(0.05)
    assert c.update(10.0) == 0.05 and c.value == 0.05


def test_adaptive_kl_ziegler_update_and_clip():
    c = C.AdaptiveKL(0.1, target=0.01, horizon=100)
    # error = 0.011 / 0.01 - 1 = 0.1 -> coef * (1 + 0.1 / 100)
    assert c.update(0.011) == pytest.approx(0.1 * 1.001)
    c = C.AdaptiveKL(0.1, target=0.01, horizon=100)
    assert c.update(0.011, n_steps=10) == pytest.approx(0.1 * 1.01)
    # error 99 clipped to 0.2; error -1 clipped to -0.2
    c = C.AdaptiveKL(0.1, target=0.01, horizon=100)
    assert c.update(1.0) == pytest.approx(0.1 * 1.002)
    assert c.update(0.0) == pytest.approx(0.1 * 1.002 * 0.998)
    assert c.value == pytest.approx(0.1 * 1.002 * 0.998)
    before = c.value
    assert c.update(math.nan) == before


def test_threshold_kl_up_down_and_caps():
    c = C.ThresholdKL(0.05, target=0.01)
    assert c.update(0.03) == pytest.approx(0.075)  # > 2 * target: * 1.5
    assert c.update(0.015) == pytest.approx(0.075)  # inside the band: unchanged
    assert c.update(0.02) == pytest.approx(0.075)  # exactly 2 * target is not above it
    assert c.update(0.004) == pytest.approx(0.06)  # < 0.5 * target: * 0.8
    high = C.ThresholdKL(0.9, target=0.01)
    assert high.update(1.0) == 1.0  # min(1.35, max_coef 1.0)
    low = C.ThresholdKL(0.011, target=0.01)
    assert low.update(0.0) == 0.01  # max(0.0088, min_coef 0.01)


def test_make_kl_controller():
    assert isinstance(C.make_kl_controller("fixed", 0.05), C.FixedKL)
    adaptive = C.make_kl_controller("adaptive", 0.05, target=0.01, horizon=200)
    assert isinstance(adaptive, C.AdaptiveKL) and adaptive.horizon == 200
    threshold = C.make_kl_controller("threshold", 0.05, target=0.01, max_coef=0.06)
    assert isinstance(threshold, C.ThresholdKL) and threshold.update(1.0) == 0.06
    with pytest.raises(ValueError, match="fixed, adaptive, threshold"):
        C.make_kl_controller("pid", 0.05, target=0.01)
    with pytest.raises(ValueError, match="target"):
        C.make_kl_controller("adaptive", 0.05)


@pytest.mark.parametrize("kind", C.KL_CONTROLLERS)
def test_kl_controller_state_roundtrip(kind):
    kls = [0.05, 0.001, 0.03, 0.0]
    a = C.make_kl_controller(kind, 0.05, target=0.01, horizon=10)
    for kl in kls[:2]:
        a.update(kl)
    b = C.make_kl_controller(kind, 0.3, target=0.01, horizon=10)
    b.load_state_dict(roundtrip(a.state_dict()))
    assert b.value == a.value
    for kl in kls[2:]:
        assert b.update(kl) == a.update(kl)
