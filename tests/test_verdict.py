"""mathrl.analysis.verdict: intervals checked by hand, then each outcome on synthetic runs with a known effect."""

import math

import numpy as np
import pytest

from mathrl.analysis.verdict import (
    Claim,
    Estimate,
    Verdict,
    difference,
    interval_numbers,
    judge,
    mean_interval,
    minimum_detectable,
    paired_difference,
    rate_difference,
    seeds_needed,
    sentence,
    unpaired_difference,
    wilson,
)  # fmt: skip

T2 = 4.302653  # t(0.975, df=2)


def test_paired_interval_by_hand():
    # differences 0.5, 0.2, 0.6: mean 0.4333, sd 0.2082, se 0.1202
    e = paired_difference({0: 1.0, 1: 2.0, 2: 3.0}, {0: 0.5, 1: 1.8, 2: 2.4})
    sd = math.sqrt(((0.5 - 1.3 / 3) ** 2 + (0.2 - 1.3 / 3) ** 2 + (0.6 - 1.3 / 3) ** 2) / 2)
    assert e.estimate == pytest.approx(1.3 / 3) and e.sd == pytest.approx(sd) and e.n == 3 and e.kind == "paired"
    assert e.lo == pytest.approx(1.3 / 3 - T2 * sd / math.sqrt(3), rel=1e-6) and e.hi == pytest.approx(
        1.3 / 3 + T2 * sd / math.sqrt(3), rel=1e-6
    )
    assert e.effect == pytest.approx((1.3 / 3) / sd)
    # the seeds both arms have are paired; a seed only one arm has is left out of the pairs
    assert paired_difference({0: 1.0, 1: 2.0, 2: 3.0, 3: 9.0}, {0: 0.5, 1: 1.8, 2: 2.4}).estimate == pytest.approx(
        1.3 / 3
    )


def test_welch_interval_by_hand():
    # a: 1, 2, 3 (var 1); b: 0, 0, 0, 4 (var 4): se = sqrt(1/3 + 4/4), Welch df = (4/3)^2 / ((1/3)^2/2 + 1/3)
    e = unpaired_difference([1.0, 2.0, 3.0], [0.0, 0.0, 0.0, 4.0])
    se = math.sqrt(1 / 3 + 1)
    df = (4 / 3) ** 2 / ((1 / 3) ** 2 / 2 + 1 / 3)
    from scipy import stats

    half = stats.t.ppf(0.975, df) * se
    assert e.estimate == pytest.approx(1.0) and e.se == pytest.approx(se) and e.df == pytest.approx(df)
    assert (e.lo, e.hi) == (pytest.approx(1 - half), pytest.approx(1 + half)) and (e.n_a, e.n_b) == (3, 4)
    # difference() pairs when one arm's seeds include the other's, on the seeds both hold
    assert (
        difference({0: 1, 1: 2}, {0: 0, 1: 1}).kind == "paired"
        and difference({0: 1, 1: 2}, {0: 0, 2: 1}).kind == "unpaired"
    )
    nested = difference({0: 1.0, 1: 2.0, 2: 3.0, 3: 7.0}, {0: 0.0, 1: 1.5, 2: 2.0})
    assert nested.kind == "paired" and nested.n == 3 and nested.estimate == pytest.approx(2.5 / 3)
    assert difference({0: 1.0, 1: 2.0, 2: 3.0}, {0: 0.0, 5: 1.0, 6: 2.0}).kind == "unpaired"  # one seed in common


def test_wilson_and_rates_by_hand():
    lo, hi = wilson(0, 3)  # z^2/(n+z^2) = 3.8415/6.8415
    assert lo == pytest.approx(0.0, abs=1e-12) and hi == pytest.approx(3.8415 / 6.8415, rel=1e-3)
    lo, hi = wilson(3, 3)
    assert hi == pytest.approx(1.0) and lo == pytest.approx(1 - 3.8415 / 6.8415, rel=1e-3)
    d = rate_difference(1, 3, 0, 3)
    assert d.estimate == pytest.approx(1 / 3) and d.lo < 0 < d.hi and d.kind == "rates"
    assert math.isnan(wilson(0, 0)[0])


def test_judge_rules():
    up = Claim("k", "t", "m")
    est = lambda lo, hi: Estimate((lo + hi) / 2, lo, hi, 3, "paired")  # noqa: E731
    assert judge(up, est(0.1, 0.3))[0] == "agrees"
    assert judge(up, est(-0.3, -0.1))[0] == "disagrees"
    assert judge(up, est(-0.1, 0.3))[0] == "inconclusive"
    sized = Claim("k", "t", "m", direction=-1, size=(-0.52, -0.52))  # the document's -52%
    assert judge(sized, est(-0.6, -0.4))[0] == "agrees"
    out, reason = judge(sized, est(-0.014, -0.006))  # right direction, far too small
    assert out == "disagrees" and "size" in reason
    assert judge(sized, est(-0.054, 0.034))[0] == "disagrees"  # excludes -52% too
    eq = Claim("k", "t", "m", kind="equivalence", margin=0.1)
    assert (
        judge(eq, est(-0.05, 0.05))[0] == "agrees"
        and judge(eq, est(-0.05, 0.2))[0] == "inconclusive"
        and judge(eq, est(0.2, 0.3))[0] == "disagrees"
    )
    ni = Claim("k", "t", "m", kind="noninferior", margin=0.02)
    assert (
        judge(ni, est(-0.01, 0.05))[0] == "agrees"
        and judge(ni, est(-0.17, 0.12))[0] == "inconclusive"
        and judge(ni, est(-0.11, -0.06))[0] == "disagrees"
    )
    assert judge(up, Estimate(0.1, math.nan, math.nan, 1, "paired"))[0] == "not judged"
    assert judge(up, None)[0] == "not judged"


def test_power():
    e = mean_interval([0.0, 0.1, 0.2])  # sd 0.1, se 0.0577, df 2: (4.303 + 1.061) x se
    assert minimum_detectable(e) == pytest.approx((T2 + 1.060660) * 0.1 / math.sqrt(3), rel=1e-4)
    # an effect of one sd needs (t + t_power) / sqrt(n) <= 1: n = 10 for paired designs
    assert seeds_needed(e, 0.1) == 10
    assert seeds_needed(e, 1e-9) > 1000


def _runs(rng, n, effect, sd=0.03, seed_sd=0.05):
    """n seeds of two arms sharing a seed effect (same prompts and noise), arm b offset by `effect`."""
    shared = rng.normal(0.5, seed_sd, n)
    a = {s: shared[s] + rng.normal(0, sd) for s in range(n)}
    b = {s: shared[s] + effect + rng.normal(0, sd) for s in range(n)}
    return a, b


def test_outcomes_on_synthetic_runs():
    """A true effect is found, a null effect is not called, a small-n effect stays inconclusive."""
    rng = np.random.default_rng(0)
    claim = Claim("k", "b is better than a", "b − a", unit="pts")
    found = [Verdict(claim, difference(*reversed(_runs(rng, 10, 0.08)))).outcome for _ in range(200)]
    assert (
        found.count("agrees") / 200 > 0.9 and "disagrees" not in found
    )  # power near 1 at 10 seeds, effect 2.7 sd of the difference
    null = [Verdict(claim, difference(*reversed(_runs(rng, 10, 0.0)))).outcome for _ in range(400)]
    assert null.count("agrees") / 400 < 0.05 and null.count("disagrees") / 400 < 0.05  # 2.5% each side by construction
    small = [Verdict(claim, difference(*reversed(_runs(rng, 3, 0.03)))) for _ in range(200)]
    assert sum(v.outcome == "inconclusive" for v in small) / 200 > 0.6
    v = next(v for v in small if v.outcome == "inconclusive")
    assert v.seeds > 3 and v.mde > 0.03  # it says how many seeds it would need, and that 3 cannot see 3 points
    # pairing by seed is what makes the shared seed effect cancel: unpaired, the same runs are inconclusive far more
    # often
    runs = [_runs(rng, 3, 0.08) for _ in range(200)]
    paired = sum(Verdict(claim, difference(b, a)).outcome == "agrees" for a, b in runs)
    unpaired = sum(Verdict(claim, unpaired_difference(b, a)).outcome == "agrees" for a, b in runs)
    assert paired > 1.5 * unpaired


def test_sentence_states_interval_and_n():
    v = Verdict(
        Claim("k", "t", "m", unit="pts"), paired_difference({0: 0.5, 1: 0.6, 2: 0.55}, {0: 0.5, 1: 0.5, 2: 0.5})
    )
    text = sentence(v.row())
    assert text.startswith("+5.0 pts, 95% CI [") and "n=3 seeds, paired" in text and v.outcome in text
    assert (
        sentence({"outcome": "not judged", "reason": "no runs with a result"}) == "Not judged: no runs with a result."
    )
    one_rate = {"outcome": "agrees", "diff": 0.5, "ci_low": 0.41, "ci_high": 0.5, "unit": "pts", "design": "rates"}
    assert "(n=40 runs, Wilson)" in sentence({**one_rate, "n": 40, "n_a": 40, "n_b": 0})
    assert "(n=40 vs 38 runs, Wilson/Newcombe)" in sentence({**one_rate, "n": 40, "n_a": 40, "n_b": 38})


def test_interval_numbers_share_the_precision_of_the_half_width():
    # half-width 0.0048: two significant figures are four decimals, trailing zeros kept
    assert interval_numbers(0.9856, 0.98, 0.9896) == ("+0.9856", "+0.9800", "+0.9896")
    assert interval_numbers(-0.0654, -1.4217, 1.2909) == ("-0.1", "-1.4", "+1.3")  # half-width 1.36: one decimal
    assert interval_numbers(0.013, -0.0195, 0.0455, sign=False) == ("0.013", "-0.019", "0.045")
    # no width, numbers below 1e-3 or from 1e5: three significant figures each, as number() gives them
    assert interval_numbers(0.5, 0.5, 0.5) == ("+0.5", "+0.5", "+0.5")
    assert interval_numbers(4.46e-5, 1e-5, 9e-5) == ("+4.46e-05", "+1e-05", "+9e-05")
    assert interval_numbers(123456.0, 120000.0, 126000.0, sign=False) == ("1.23e+05", "1.2e+05", "1.26e+05")
    assert interval_numbers(0.1, 0.05, 0.15, "pts") == ("+10.0 pts", "+5.0 pts", "+15.0 pts")  # pts: one decimal
    assert interval_numbers(float("nan"), 0.0, 1.0) == ("–", "+0", "+1")
