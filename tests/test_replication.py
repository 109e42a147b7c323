"""Verdicts replicated over warm-ups: the interval covers the setting's difference, not one warm-up's.

Synthetic paired runs with a known difference: each warm-up shifts the difference by its own amount (the variation
a rerun draws anew with new warm-ups) and each RL seed adds its own noise. The claims engine's interval, over
warm-ups, must cover the true difference about 95% of the time; the interval over seeds, which treats the seeds of
one warm-up as independent, covers it far less often.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mathrl.analysis.claims import ClaimSpec, estimate, replicate
from mathrl.analysis.verdict import between_share, cluster_means

SPEC = ClaimSpec(id="c", kind="user", source="", statement="a beats b", table="t", measure="m", a={}, b={})


def runs(rng, true: float, warmups: int, seeds_per: int, between: float, within: float):
    """Arm values {seed: value} for a and b (b = 0 + noise) and each seed's warm-up (seed mod warmups)."""
    seeds = range(warmups * seeds_per)
    warmup = {s: s % warmups for s in seeds}
    shift = rng.normal(0, between, warmups)  # the warm-up's own effect on the difference
    base = rng.normal(0.4, 0.05, warmups)  # and on both arms alike (cancels in a pair)
    b = {s: base[warmup[s]] + rng.normal(0, within) for s in seeds}
    a = {s: b[s] + true + shift[warmup[s]] + rng.normal(0, within) for s in seeds}
    return a, b, warmup


def test_the_interval_over_warm_ups_covers_the_true_difference_about_95_percent_of_the_time():
    rng = np.random.default_rng(7)
    true, trials = 0.05, 2000
    over_warmups = over_seeds = 0
    for _ in range(trials):
        a, b, warmup = runs(rng, true, warmups=5, seeds_per=2, between=0.04, within=0.02)
        rep = replicate(SPEC, a, b, warmup, warmup)
        est, _ = estimate(SPEC, rep.a, rep.b)
        naive, _ = estimate(SPEC, a, b)  # the seeds as if each were independent
        assert (rep.n_of, est.n, naive.n) == ("warm-ups", 5, 10)
        over_warmups += est.lo <= true <= est.hi
        over_seeds += naive.lo <= true <= naive.hi
    # 2000 trials: a 95% coverage reads within about ±1 point of 95
    assert 0.93 <= over_warmups / trials <= 0.97
    assert over_seeds / trials < 0.85


def test_without_variation_between_warm_ups_both_intervals_cover():
    rng = np.random.default_rng(8)
    true, trials, covered = 0.05, 1000, 0
    for _ in range(trials):
        a, b, warmup = runs(rng, true, warmups=5, seeds_per=2, between=0.0, within=0.02)
        rep = replicate(SPEC, a, b, warmup, warmup)
        est, _ = estimate(SPEC, rep.a, rep.b)
        covered += est.lo <= true <= est.hi
    assert 0.93 <= covered / trials <= 0.97


def test_a_pair_is_averaged_within_its_warm_up_before_the_warm_ups_are_compared():
    a = {0: 1.0, 1: 2.0, 2: 3.0, 3: 5.0}
    b = {0: 0.0, 1: 0.0, 2: 1.0, 3: 1.0}
    warmup = {0: 0, 1: 1, 2: 0, 3: 1}
    rep = replicate(SPEC, a, b, warmup, warmup)
    assert rep.a == {0: 2.0, 1: 3.5} and rep.b == {0: 0.5, 1: 0.5}
    assert (rep.runs, rep.warmups) == (4, 2.0)


def test_a_rate_over_warm_ups_is_the_share_of_each_warm_ups_runs():
    spec = ClaimSpec(id="r", kind="user", source="", statement="", table="t", measure="m", a={}, compare="rate")
    a = {0: 1.0, 1: 0.0, 2: 1.0, 3: 1.0}
    rep = replicate(spec, a, {}, {0: 0, 1: 1, 2: 0, 3: 1}, {})
    assert rep.compare == "one_sample" and rep.a == {0: 1.0, 1: 0.5}


def test_runs_of_one_warm_up_are_judged_over_seeds_and_say_so():
    a, b = {0: 1.0, 1: 2.0, 2: 3.0}, {0: 0.0, 1: 0.5, 2: 1.0}
    rep = replicate(SPEC, a, b, dict.fromkeys(a, 0), dict.fromkeys(b, 0))
    assert (rep.a, rep.n_of, rep.warmups) == (a, "seeds, one warm-up", 1.0)


def test_without_warm_ups_the_seeds_are_the_units():
    a, b = {0: 1.0, 1: 2.0}, {0: 0.0, 1: 0.5}
    rep = replicate(SPEC, a, b, {}, {})
    assert (rep.a, rep.n_of) == (a, "seeds") and math.isnan(rep.warmups)


def test_the_share_of_variance_between_warm_ups():
    clusters = {k: k // 2 for k in range(6)}
    assert between_share({k: float(k // 2) for k in range(6)}, clusters) == 1.0  # all of it between
    assert between_share({k: float(k % 2) for k in range(6)}, clusters) == 0.0  # all of it within
    assert math.isnan(between_share({0: 1.0, 1: 2.0}, {0: 0, 1: 1}))  # one run a warm-up: no within to compare
    assert cluster_means({0: 1.0, 1: 3.0, 2: 5.0}, {0: "w", 1: "w", 2: None}) == {"w": 2.0, ("key", 2): 5.0}


def test_the_plan_splits_a_pilots_spread_into_its_components():
    from mathrl.analysis import plan

    # a pilot of two runs a warm-up: its warm-ups' means spread by 0.03 when half of a run's variance lies between
    var_b, var_w = plan.components(0.03, 0.5, 2)
    assert var_b == pytest.approx(0.0006) and var_w == pytest.approx(0.0006)  # 0.0009 = 0.0006 + 0.0006 / 2
    assert plan.components(0.03, math.nan, 2) == (pytest.approx(0.0009), 0.0)  # unknown: all of it between


def test_the_plan_takes_the_fewest_seeds_that_detect_the_effect():
    from mathrl.analysis import plan

    # five warm-ups, paired: the detectable effect is (t(0.975, 4) + t(0.8, 4)) x sd / sqrt(5) = 1.743 sd
    assert plan.detectable(1.0, 5, "paired") == pytest.approx((2.7764 + 0.9410) / math.sqrt(5), rel=1e-3)
    within = dict(sd_pilot=0.03, between=0.0, pilot_per_warmup=2, warmups=5, design="paired", allowed=(1, 2))
    # all of the variance within warm-ups: a run's sd is 0.042; one seed a warm-up detects 0.071, two 0.050
    assert plan.seeds_per_warmup(0.06, **within) == 2 and plan.seeds_per_warmup(0.08, **within) == 1
    between = {**within, "between": 1.0}  # all of it between: more seeds within a warm-up do not help
    assert plan.seeds_per_warmup(0.05, **between) == 1 and plan.seeds_per_warmup(0.04, **between) is None
    need = plan.warmups_needed(0.04, 0.03, 1.0, 2, "paired", 2)
    assert need > 5 and plan.detectable(0.03, need, "paired") <= 0.04 < plan.detectable(0.03, need - 1, "paired")


def test_the_default_config_runs_the_seeds_the_plan_fixed():
    """config/seed_plan.yaml names its pilot and the date it was fixed; every experiment it plans runs exactly its
    planned seeds in config/config.yaml, and each GPT task has at least five warm-ups to spread them over."""
    from mathrl.pipeline.config import ROOT, load_config, read_yaml

    plan = read_yaml(ROOT / "config" / "seed_plan.yaml")
    assert plan["pilot"]["commit"] and plan["pilot"]["date"] and plan["method"]
    cfg = load_config()
    runs = {name: len(exp["seeds"]) for name, exp in cfg["experiments"].items()}
    assert plan["experiments"] and {name: runs.get(name) for name in plan["experiments"]} == plan["experiments"]
    assert all(cfg["sft"][task]["warmups"] >= 5 for task in ("add", "mul"))
