"""The compute-performance curve (mathrl.analysis.curves) on data drawn from known parameters, and on degenerate
data."""

import math

import numpy as np
import pytest

from mathrl.analysis.curves import (
    FIT_KEYS,
    MIN_POINTS,
    _in_log,
    _in_log_jacobian,
    fit_curve,
    half_fit_error,
    sigmoid_curve,
)


def test_sigmoid_curve_by_hand():
    # at C = C_mid half the gain; at C = 0 the start; B = 1 and C = 3 C_mid: 3/4 of the gain
    c = np.array([0.0, 100.0, 300.0])
    assert sigmoid_curve(c, 0.2, 0.6, 1.0, 100.0).tolist() == pytest.approx([0.2, 0.4, 0.2 + 0.4 * 0.75])
    assert sigmoid_curve(1e12, 0.2, 0.6, 2.0, 100.0) == pytest.approx(0.6)  # the asymptote


@pytest.mark.parametrize("a, b, log_mid", [(0.8, 1.5, 7.6), (0.55, 0.2, 3.0), (0.95, 12.0, 9.0)])
def test_the_fits_derivatives_are_the_curves(a, b, log_mid):
    # the solver's Jacobian against forward differences of the curve, at points on both sides of C_mid
    from scipy.optimize import approx_fprime

    r0, x = 0.3, np.linspace(2.0, 12.0, 9)
    exact = _in_log_jacobian(r0)(x, a, b, log_mid)
    for i, xi in enumerate(x):
        numeric = approx_fprime(np.array([a, b, log_mid]), lambda p, xi=xi: _in_log(r0)(xi, *p), 1e-7)
        assert exact[i] == pytest.approx(numeric, abs=1e-5)


@pytest.mark.parametrize("a, b, c_mid", [(0.8, 1.5, 2000.0), (0.55, 0.8, 500.0), (0.95, 3.0, 8000.0)])
def test_fit_recovers_known_parameters(a, b, c_mid):
    r0 = 0.3
    c = np.geomspace(50, 200_000, 25)
    rng = np.random.default_rng(0)
    r = sigmoid_curve(c, r0, a, b, c_mid) + rng.normal(0, 0.002, len(c))
    fit = fit_curve(c, r, r0)
    assert fit["fitted"] and fit["converged"] and fit["reason"] == "" and fit["points"] == 25
    assert fit["A"] == pytest.approx(a, abs=0.01)
    assert fit["B"] == pytest.approx(b, rel=0.05)
    assert fit["C_mid"] == pytest.approx(c_mid, rel=0.05)
    assert fit["rmse"] < 0.004
    # exact data: exact parameters, and the first half forecasts the second almost exactly
    exact = sigmoid_curve(c, r0, a, b, c_mid)
    assert fit_curve(c, exact, r0)["A"] == pytest.approx(a, abs=1e-4)
    half = half_fit_error(c, exact, r0)
    assert half["half_points"] + half["half_predicted"] == 25 and half["half_mae"] < 1e-3


def test_start_and_missing_points_are_not_fitted_points():
    c = np.array([0, 10, 20, 40, 80, 160, np.nan])
    r = sigmoid_curve(c, 0.3, 0.7, 1.0, 40.0)
    fit = fit_curve(c, r, 0.3)
    assert fit["points"] == 5 and fit["fitted"] and fit["C_mid"] == pytest.approx(40.0, rel=1e-3)


def test_too_few_points_is_not_fitted():
    c = np.array([10.0, 20.0, 30.0, 40.0])
    fit = fit_curve(c, [0.4, 0.5, 0.55, 0.6], 0.3)
    assert set(fit) == set(FIT_KEYS)
    assert not fit["fitted"] and math.isnan(fit["A"]) and fit["points"] == 4
    assert f"a fit needs {MIN_POINTS}" in fit["reason"]
    # the batch study's default: 5 evaluations after the start, so the first half (2) cannot be fitted
    half = half_fit_error(np.arange(1, 6) * 5120.0, [0.4, 0.45, 0.5, 0.52, 0.55], 0.35)
    assert math.isnan(half["half_mae"]) and half["half_points"] == 2 and half["half_predicted"] == 3
    assert half["half_reason"].startswith("first half: 2 points")


def test_flat_and_falling_runs_have_no_gain():
    c = np.arange(1, 8) * 100.0
    flat = fit_curve(c, np.full(7, 0.4), 0.4)
    assert flat["fitted"] and flat["A"] == pytest.approx(0.4, abs=1e-6)
    assert math.isnan(flat["B"]) and math.isnan(flat["C_mid"]) and "no gain" in flat["reason"]
    falling = fit_curve(c, np.linspace(0.39, 0.2, 7), 0.4)  # A is bounded below by R0: the ceiling is the start
    assert falling["A"] == pytest.approx(0.4, abs=1e-6) and math.isnan(falling["B"])


def test_a_run_still_rising_linearly_puts_its_ceiling_at_the_bound():
    c = np.arange(1, 11) * 1000.0
    fit = fit_curve(c, 0.3 + 0.06 * np.arange(1, 11), 0.3)  # 0.36 ... 0.9, no bend
    assert fit["fitted"] and fit["a_at_bound"] and fit["A"] == pytest.approx(1.0)


def test_bad_start_is_not_fitted():
    c = np.arange(1, 7) * 10.0
    assert "R0" in fit_curve(c, np.full(6, 1.0), 1.0)["reason"]
    assert not fit_curve(c, np.full(6, 0.5), math.nan)["fitted"]


def test_a_step_in_log_compute_is_fitted_at_the_solver_budget():
    # the batch study's batch 128 (seed 1): down, then up past R0 between two evaluations; the best fit is a step
    c = np.array([1280, 2560, 3840, 5120, 6400.0])
    fit = fit_curve(c, [0.2735, 0.269, 0.3025, 0.3355, 0.324], 0.3065)
    assert fit["fitted"] and not fit["converged"] and fit["B"] > 10
    assert fit["A"] == pytest.approx(0.33, abs=0.005) and 3840 < fit["C_mid"] < 5120


def test_sampling_mae_by_hand_and_beside_the_half_fit():
    from mathrl.analysis.curves import sampling_mae

    # p = 0.5 on 100 problems: standard error 0.05, mean absolute deviation 0.05 * sqrt(2 / pi) = 0.039894
    assert sampling_mae([0.5, 0.5], 100) == pytest.approx(0.05 * math.sqrt(2 / math.pi))
    assert sampling_mae([0.0, 1.0], 100) == 0.0  # certain outcomes have no sampling spread
    assert math.isnan(sampling_mae([0.5], 0)) and math.isnan(sampling_mae([], 100))
    c = np.arange(1, 11) * 512.0
    r = sigmoid_curve(c, 0.3, 0.6, 2.0, 2000.0)
    half = half_fit_error(c, r, 0.3, problems=200)
    assert half["half_points"] == 5 and half["half_predicted"] == 5 and half["half_mae"] < 1e-3
    assert half["half_noise"] == pytest.approx(sampling_mae(r[5:], 200))
    assert math.isnan(half_fit_error(c, r, 0.3)["half_noise"])  # without the problem count: not known
