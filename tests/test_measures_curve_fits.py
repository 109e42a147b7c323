"""The compute-performance curves of runs (mathrl.analysis.measures.curve_fits) on hand-made runs: evaluation points,
a run's fit, a run two experiments share fitted once, and the fitted curve of a run without a gain."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from mathrl.analysis.curves import sigmoid_curve
from mathrl.analysis.measures import curve_fits as cf

R0, A, B, C_MID = 0.3, 0.8, 2.0, 80.0


def run(seed: int = 0, trained_as: str = "batch__s0", evals: int = 10, batch: int = 16) -> SimpleNamespace:
    """A run of 2 * `evals` steps of `batch` rollouts, evaluated every 2 steps on the exact curve (100 problems)."""
    steps = np.arange(1, 2 * evals + 1)
    accuracy = [sigmoid_curve(batch * s, R0, A, B, C_MID) if s % 2 == 0 else math.nan for s in steps]
    metrics = pd.DataFrame({"step": steps, "samples": batch * steps, "eval_accuracy": accuracy})
    evaluated = metrics.dropna()
    return SimpleNamespace(
        ok=True,
        spec=SimpleNamespace(seed=seed, trained_as=trained_as, warmup=0),
        metrics=metrics,
        evals=pd.DataFrame(
            {"step": [0, *evaluated["step"]], "eval_accuracy": [R0, *evaluated["eval_accuracy"].astype(float)]}
        ),
        initial_eval=R0,
        summary={"resolved": {"n_eval": 100}},
        settings={"warmup": 0},
    )


def test_evaluation_points_start_at_no_samples():
    p = cf.evaluation_points(run(evals=3))
    assert p["step"].tolist() == [0, 2, 4, 6] and p["samples"].tolist() == [0.0, 32.0, 64.0, 96.0]
    assert p["eval_accuracy"].iloc[0] == R0


def test_a_runs_fit_recovers_its_curve():
    fit = cf.run_fit(run())
    assert fit["R0"] == R0 and fit["C_max"] == 320.0 and fit["points"] == 10 and fit["fitted"]
    assert fit["A"] == pytest.approx(A, abs=1e-3) and fit["B"] == pytest.approx(B, rel=1e-2)
    assert fit["C_mid"] == pytest.approx(C_MID, rel=1e-2) and fit["half_mae"] < 1e-3
    few = cf.run_fit(run(evals=3))
    assert not few["fitted"] and few["reason"].startswith("3 points after the start")


def test_a_shared_run_is_fitted_once_and_listed_under_each(monkeypatch):
    fitted = []
    monkeypatch.setattr(cf, "run_fit", lambda r: fitted.append(r) or {"R0": r.initial_eval})
    shared = run()
    rows = cf.fit_runs([("batch", "b16", shared), ("system", "ref", shared), ("batch", "b16", run(1, "batch__s1"))])
    assert len(fitted) == 2 and rows["experiment"].tolist() == ["batch", "system", "batch"]
    assert list(rows.columns) == cf.RUN_COLUMNS and rows["seed"].tolist() == [0, 0, 1]


def test_a_run_without_a_gain_is_drawn_flat_at_its_start():
    flat = SimpleNamespace(R0=0.4, A=0.4, B=math.nan, C_mid=math.nan)
    assert cf.fitted_curve(flat, np.array([1.0, 10.0])).tolist() == [0.4, 0.4]
    rising = SimpleNamespace(R0=R0, A=A, B=B, C_mid=C_MID)
    assert cf.fitted_curve(rising, np.array([C_MID]))[0] == pytest.approx((R0 + A) / 2)  # half the gain at C_mid


def test_a_settings_note_says_why_its_numbers_are_missing_or_read_with_care():
    fits = pd.DataFrame(
        {
            "fitted": [True, True, True, False],
            "a_at_bound": [True, False, False, False],
            "B": [1.0, math.nan, 20.0, math.nan],
            "converged": [True, True, False, False],
            "half_mae": [math.nan] * 4,
            "half_reason": ["first half: 3 points after the start (a fit needs 5)"] * 4,
            "reason": ["", "", "", "2 points after the start (a fit needs 5)"],
        }
    )
    fitted = fits[fits["fitted"]]
    assert cf.note(fits, fitted) == "; ".join(
        [
            "A at its bound 1 in 1 of 3 runs (the curve has not bent)",
            "no gain in 1 of 3 runs (A = R0, no B)",
            "a step in log C in 1 of 3 runs (B runs to its bound 20; A and C_mid hold)",
            "no half fit: first half: 3 points after the start (a fit needs 5)",
        ]
    )
    assert cf.note(fits, fitted.iloc[:0]) == "not fitted: "  # the first run's reason: it was fitted
    assert cf.note(fits.iloc[3:], fitted.iloc[:0]) == "not fitted: 2 points after the start (a fit needs 5)"
