"""The study kit: mechanism checks (a verdict is given only where its mechanism engaged), roles and bands."""

from __future__ import annotations

import math

from mathrl.studies.kit import (
    Engaged,
    add_intervals,
    band_limits,
    bounds,
    engaged,
    judged,
    pm,
    role_of,
    verdict_frame,
    verdict_rows,
)
from mathrl.verdict import Claim, difference


def test_engaged_check_by_hand():
    c = engaged("upper clip", "mean clip_frac", {0: 0.0, 1: 0.02, 2: 0.04}, 0.01)
    assert c.value == 0.02 and c.passed is True  # mean of 0, 0.02, 0.04
    assert engaged("upper clip", "mean clip_frac", [0.0, 0.0, 0.003], 0.01).passed is False
    assert engaged("x", "y", {0: math.nan}, 0.1).passed is None  # nothing measured
    low = engaged("format errors gone", "malformed share", [0.2, 0.4], 0.05, direction=-1)
    assert abs(low.value - 0.3) < 1e-12
    assert low.passed is False and Engaged("m", "v", 0.05, 0.05, -1).passed is True  # the threshold itself passes
    assert "did not engage" in low.describe() and "0.3" in low.describe() and "<= 0.05" in low.describe()


def test_judged_withholds_the_verdict_and_says_why():
    claim = Claim("k", "remedy helps", "a − b")
    est = difference({0: 0.3, 1: 0.4, 2: 0.35}, {0: 0.1, 1: 0.2, 2: 0.15})  # +0.2 every seed: agrees when judged
    ok = judged(claim, est, engaged("clip", "clip_frac", [0.05], 0.01))
    assert ok.outcome == "agrees" and "engaged: clip_frac 0.05" in ok.extra["engaged"]
    no = judged(claim, est, engaged("clip", "clip_frac", [0.05], 0.01), engaged("critic", "explained variance", [-0.02], 0.1))
    assert no.outcome == "not judged"
    assert no.reason == "mechanism not engaged: critic did not engage: explained variance -0.02 (needs >= 0.1)"
    rows = verdict_rows(verdict_frame([ok, no]))
    assert rows[1]["sentence"].startswith("Not judged: mechanism not engaged: critic did not engage")
    assert "clip engaged" in rows[1]["engaged"]


def test_band_is_a_clipped_t_interval_by_hand():
    # mean 0.05, std 0.1, n 3: t(2) = 4.3027, half-width 4.3027 x 0.1 / sqrt(3) = 0.2484
    lo, hi = band_limits([0.05, 0.5], [0.1, 0.1], [3, 1])
    assert abs(lo[0] - (0.05 - 0.24841)) < 1e-4 and abs(hi[0] - (0.05 + 0.24841)) < 1e-4
    assert lo[1] == hi[1] == 0.5  # one seed: no interval, the band is the line
    lo, hi = band_limits([0.05, 0.97], [0.1, 0.1], 3, bounds=bounds("eval_accuracy"))
    assert lo[0] == 0.0 and hi[1] == 1.0 and abs(hi[0] - 0.29841) < 1e-4
    lo, hi = band_limits([0.05], [0.1], 3, bounds=bounds("entropy"))  # bounded below only
    assert lo[0] == 0.0 and hi[0] > 0.29
    assert bounds("loss") is None


def test_a_variant_with_two_roles_is_named_by_the_studys_own():
    role = {"baseline": "exact", "shaped": "shaped", "reference": "exact"}
    assert role_of(role, ("baseline", "shaped")) == {"exact": "baseline", "shaped": "shaped"}
    assert role_of({"reference": "exact"}, ("baseline",)) == {"exact": "reference"}  # none of the study's: the other


def test_table_and_text_intervals_of_an_accuracy_stay_within_its_range():
    import pandas as pd

    df = pd.DataFrame({"final_mean": [0.006], "final_std": [0.01], "gain_mean": [0.006], "gain_std": [0.01], "n": [3]})
    out = add_intervals(df, ["final", "gain"], bounds={"final": bounds("eval_accuracy")})
    assert out["final_lo"][0] == 0.0 and abs(out["final_hi"][0] - (0.006 + 0.024841)) < 1e-5  # t(2) x 0.01 / sqrt(3)
    assert abs(out["gain_lo"][0] - (0.006 - 0.024841)) < 1e-5  # a difference: not clipped
    assert pm(0.006, 0.01, 3, "pct", bounds=bounds("eval_accuracy")) == "0.6% [0.0%, 3.1%] (n=3)"
    assert pm(0.006, 0.01, 3, "pct") == "0.6% [-1.9%, 3.1%] (n=3)"
