"""Compute-performance curves as pure, torch-free functions (ScaleRL, Khatri et al. 2025, arXiv 2510.13786).

ScaleRL fits a run's pass rate R against the compute C it has spent with a sigmoid in log C:

    R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)

- ``R0``: the pass rate before RL (C = 0), measured, not fitted;
- ``A``: the asymptote, the ceiling the run approaches with unlimited compute (R0 <= A <= 1);
- ``B`` > 0: the efficiency, how steeply the curve climbs in log C;
- ``C_mid``: the compute at which half of the gain A - R0 is reached.

A recipe can raise the ceiling (A) or only reach the same ceiling sooner (B, C_mid); ScaleRL's
point is that the two are different questions. ``fit_curve`` fits A, B and log C_mid by bounded
least squares (scipy.optimize.least_squares, curve_fit's solver, with the curve's own derivatives,
several starts); ``half_fit_error`` fits the points of the first half of the compute and measures the
error on the second half (is the fitted curve a forecast?).
"""

from __future__ import annotations

import math

import numpy as np

MIN_POINTS = 5
"""A fit needs at least this many points with C > 0: three parameters from fewer leave no check on the fit."""
B_BOUNDS = (1e-3, 20.0)
"""B's range: positive; 20 is already a step function in log C."""
C_MID_SPAN = 1e3
"""C_mid may lie at most this factor below the smallest or above the largest compute measured:
beyond the data the curve is an extrapolation, and an unbounded C_mid wanders to infinity
(with A at 1) where a run's accuracy still rises linearly."""
FLAT = 1e-3
"""A fitted curve that rises less than this (a tenth of a point) over the measured compute has no gain:
A is then R0, and B and C_mid are undefined (with flat data any A fits, its rise placed beyond the data)."""

MAX_NFEV = 300
"""Evaluations per start of the solver: a fit that needs more sits on a ridge (B at its bound), where more evaluations
move B and not the fit (its error changes in the fifth decimal)."""

FIT_KEYS = ("A", "B", "C_mid", "rmse", "points", "fitted", "converged", "a_at_bound", "reason")


def sigmoid_curve(c, r0: float, a: float, b: float, c_mid: float) -> np.ndarray:
    """R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B); R0 at C = 0. Arrays broadcast."""
    c = np.asarray(c, dtype=float)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        r = r0 + (a - r0) / (1.0 + np.power(c_mid / c, b))
    return np.where(c > 0, r, r0)


def _in_log(r0: float):
    """The curve in x = log C with parameters (A, B, log C_mid): better conditioned for the optimiser."""
    return lambda x, a, b, log_mid: r0 + (a - r0) / (1.0 + _odds_against(x, b, log_mid))


def _odds_against(x, b: float, log_mid: float):
    """exp(B (log C_mid - x)): how far the curve at x = log C still is from its asymptote, relative to
    what it has risen (clipped so that it neither overflows nor underflows)."""
    return np.exp(np.clip(b * (log_mid - x), -700, 700))


def _in_log_jacobian(r0: float):
    """The derivatives of `_in_log`'s curve by (A, B, log C_mid), one row per point: with
    s = 1 / (1 + exp(B (log C_mid - x))), R = R0 + (A - R0) s and ds = s (1 - s) d(B (x - log C_mid))."""

    def jacobian(x, a, b, log_mid):
        s = 1.0 / (1.0 + _odds_against(x, b, log_mid))
        slope = (a - r0) * s * (1.0 - s)
        return np.column_stack([s, slope * (x - log_mid), -slope * b])

    return jacobian


def _points(compute, accuracy) -> tuple[np.ndarray, np.ndarray]:
    c, r = np.asarray(compute, dtype=float), np.asarray(accuracy, dtype=float)
    keep = np.isfinite(c) & np.isfinite(r) & (c > 0)
    order = np.argsort(c[keep], kind="stable")
    return c[keep][order], r[keep][order]


def fit_curve(compute, accuracy, r0: float, min_points: int = MIN_POINTS) -> dict:
    """Fit A, B and C_mid of ``sigmoid_curve`` to one run's points (compute C, accuracy R), R0 given.

    Points with C <= 0 or a NaN are dropped. Returns A, B, C_mid, rmse (of the fit), points (used),
    fitted (bool), converged (the solver met its tolerance; else it stopped at its evaluation budget
    with the best point found, as on the ridge where B runs to its bound and the curve is a step),
    a_at_bound (A at 1: the curve has not bent, so its ceiling is the bound, not a measurement) and
    reason (why not fitted, or why B and C_mid are NaN; empty otherwise).
    Not fitted with fewer than ``min_points`` points or an R0 outside [0, 1).
    A fit that rises less than FLAT over the measured compute has A = R0 and B, C_mid NaN.

    The solver is scipy.optimize.least_squares (trust-region reflective, the bounds below), which is
    what curve_fit runs with bounds; called directly it returns its best point at the budget, where
    curve_fit raises. Several starts over C_mid, the best kept."""
    from scipy.optimize import least_squares

    c, r = _points(compute, accuracy)
    out = {
        "A": math.nan,
        "B": math.nan,
        "C_mid": math.nan,
        "rmse": math.nan,
        "points": len(c),
        "fitted": False,
        "converged": False,
        "a_at_bound": False,
        "reason": "",
    }
    if len(c) < min_points:
        out["reason"] = f"{len(c)} point{'' if len(c) == 1 else 's'} after the start (a fit needs {min_points})"
        return out
    if not (math.isfinite(r0) and 0.0 <= r0 < 1.0):
        out["reason"] = f"starting value R0 = {r0} is not in [0, 1)"
        return out
    x, f, jac = np.log(c), _in_log(r0), _in_log_jacobian(r0)
    lower = (r0, B_BOUNDS[0], x[0] - math.log(C_MID_SPAN))
    upper = (1.0, B_BOUNDS[1], x[-1] + math.log(C_MID_SPAN))
    a0 = float(np.clip(r.max(), r0 + 1e-3, 1.0 - 1e-6))
    best = None
    for log_mid in np.linspace(x[0], x[-1], 4):  # several starts: the least-squares surface has flat valleys
        res = least_squares(
            lambda p: f(x, *p) - r,
            x0=(a0, 1.0, log_mid),
            jac=lambda p: jac(x, *p),
            bounds=(lower, upper),
            method="trf",
            max_nfev=MAX_NFEV,
        )
        if np.all(np.isfinite(res.x)) and (best is None or res.cost < best.cost):
            best = res
    if best is None:
        out["reason"] = "the solver found no finite fit"
        return out
    a, b, log_mid = (float(v) for v in best.x)
    out.update(rmse=math.sqrt(2 * best.cost / len(c)), fitted=True, converged=bool(best.status > 0))
    if f(x[-1], a, b, log_mid) - r0 < FLAT:
        out.update(
            A=r0, reason="no gain: the fitted curve stays at R0 over the measured compute, so B and C_mid are undefined"
        )
    else:
        out.update(A=a, B=b, C_mid=math.exp(log_mid), a_at_bound=bool(a >= 1.0 - 1e-6))
    return out


def sampling_mae(accuracy, problems: int) -> float:
    """The mean absolute error a perfect forecast would still show against accuracies each measured on
    ``problems`` problems: E|X - p| of a normal with the binomial standard error sqrt(p(1-p)/n) is
    sqrt(2/pi) times it, averaged over the points (p: the measured accuracy). NaN without points or problems."""
    r = np.asarray(accuracy, dtype=float)
    r = r[np.isfinite(r)]
    if not len(r) or not problems or problems < 1:
        return math.nan
    return float(np.mean(math.sqrt(2 / math.pi) * np.sqrt(r * (1 - r) / problems)))


def half_fit_error(compute, accuracy, r0: float, min_points: int = MIN_POINTS, problems: int = 0) -> dict:
    """Fit the points with C <= half the largest C, predict the rest: half_mae (mean absolute error,
    in accuracy units), half_points (points the fit used), half_predicted (points predicted),
    half_noise (``sampling_mae`` of the predicted points when each evaluation read ``problems`` problems:
    the error a perfect forecast would show from the evaluation's sampling alone; NaN without
    ``problems``) and half_reason (why NaN, else empty)."""
    c, r = _points(compute, accuracy)
    out = {"half_mae": math.nan, "half_points": 0, "half_predicted": 0, "half_noise": math.nan, "half_reason": ""}
    if not len(c):
        out["half_reason"] = "no points after the start"
        return out
    first = c <= c[-1] / 2
    out.update(
        half_points=int(first.sum()), half_predicted=int((~first).sum()), half_noise=sampling_mae(r[~first], problems)
    )
    fit = fit_curve(c[first], r[first], r0, min_points)
    if not fit["fitted"]:
        out["half_reason"] = f"first half: {fit['reason']}"
    elif not math.isfinite(fit["B"]):  # no gain in the first half: the forecast is R0 (flat)
        out["half_mae"] = float(np.mean(np.abs(r[~first] - fit["A"])))
    else:
        out["half_mae"] = float(
            np.mean(np.abs(r[~first] - sigmoid_curve(c[~first], r0, fit["A"], fit["B"], fit["C_mid"])))
        )
    return out
