"""The measures of the testbed's calibration, on hand-made runs: every number derived by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from mathrl.analysis.measures import calibration_runs as cm
from mathrl.analysis.verdict import rate_difference


def run(evals, problems: int = 100) -> SimpleNamespace:
    """A run with a result: held-out accuracy at steps 0, 2, 4, ..., each evaluation on `problems` problems."""
    return SimpleNamespace(
        ok=True,
        evals=pd.DataFrame({"step": range(0, 2 * len(evals), 2), "eval_accuracy": evals}),
        initial_eval=evals[0],
        summary={"resolved": {"n_eval": problems}},
        settings={},
    )


def test_a_run_that_learns():
    r = run([0.5, 0.6, 0.8])
    assert cm.n_eval(r) == 100
    est = rate_difference(80, 100, 50, 100)  # 80 of 100 right at the end, 50 of 100 at the start
    assert (cm.gain_lo(r), cm.gain_hi(r)) == (est.lo, est.hi) and 0 < est.lo < 0.3 < est.hi
    assert not cm.sustained_drop(r) and cm.learns_here(r)
    assert cm.ends_above(r) and not cm.ends_below(r)  # +30 points


def test_a_sustained_drop_and_a_small_gain_do_not_learn():
    dropped = run([0.5, 0.44, 0.44, 0.56])  # two evaluations in a row 6 points down, then a gain of 6 points
    assert cm.sustained_drop(dropped) and not cm.learns_here(dropped)
    assert cm.ends_above(dropped) and not cm.ends_below(dropped)
    small = run([0.5, 0.52, 0.53])  # +3 points on 100 problems: the interval includes 0
    assert cm.gain_lo(small) < 0 < cm.gain_hi(small) and not cm.learns_here(small)
    assert not cm.ends_above(small) and not cm.ends_below(small)
    fell = run([0.5, 0.47, 0.44])  # the last evaluation 6 points down
    assert cm.sustained_drop(fell) and cm.ends_below(fell)


def test_without_the_number_of_problems_there_is_no_interval():
    r = run([0.5, 0.9], problems=0)
    assert cm.n_eval(r) == 0 and math.isnan(cm.gain_lo(r)) and math.isnan(cm.gain_hi(r))
    assert not cm.learns_here(r)  # no interval above 0


def test_the_pick_per_task_and_batch():
    pilot = pd.DataFrame(
        {
            "task": ["add", "add", "add", "add", "mul"],
            "batch_size": [512, 512, 512, 128, 512],
            "multiple": [0.5, 1.0, 3.333, 1.0, 1.0],
            "learns": [True, True, False, None, False],
        }
    )
    p = cm.pick_rows(pilot).set_index(["task", "batch_size"])
    assert p.loc[("add", 512), "tried"] == "0.5x, 1x, 3.33x" and p.loc[("add", 512), "n_learning"] == 2
    assert p.loc[("add", 512), "pick"] == 1.0 and p.loc[("add", 512), "reference_is_pick"]
    assert p.loc[("add", 128), "tried"] == "" and p.loc[("add", 128), "reference_is_pick"] is None  # not run yet
    assert math.isnan(p.loc[("mul", 512), "pick"]) and not p.loc[("mul", 512), "reference_is_pick"]
    assert cm.pick_rows(pilot.iloc[:0]).empty


@pytest.mark.parametrize("gain_lo, dropped, expected", [(0.01, False, True), (0.01, True, False), (0.0, False, False)])
def test_the_pilot_rule(gain_lo, dropped, expected):
    assert cm.learns(gain_lo, dropped) is expected
