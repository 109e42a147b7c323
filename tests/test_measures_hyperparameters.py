"""The measures of the batch-size and hyperparameter runs, on hand-made runs: every number derived by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from mathrl.analysis.measures import hyperparameters as hp

EVALS = [0.5, 0.6, 0.45, 0.7, 0.5, 0.65]  # before RL, then at steps 2, 4, ..., 10


def run(evals=EVALS, settings=None, **metrics) -> SimpleNamespace:
    """A run with a result: its held-out accuracy at steps 0, 2, 4, ... and its logged metrics at steps 1, 2, ..."""
    steps = len(next(iter(metrics.values()))) if metrics else 10
    e = pd.DataFrame({"step": range(0, 2 * len(evals), 2), "eval_accuracy": evals})
    return SimpleNamespace(
        ok=True,
        evals=e,
        initial_eval=evals[0],
        metrics=pd.DataFrame({"step": range(1, steps + 1), **metrics}),
        settings=settings or {},
        summary={"wall_seconds": 12.5, "alerts": [{"step": 4, "kind": "high_kl"}, {"step": 8, "kind": "high_kl"}]},
    )


def test_the_shape_of_the_held_out_curve():
    r = run()
    assert hp.peak_eval(r) == 0.7  # after RL began
    assert hp.largest_drop(r) == pytest.approx(0.2)  # 0.7 -> 0.5
    assert hp.largest_relative_drop(r) == pytest.approx(0.2 / 0.7)  # against 0.15 / 0.6 = 0.25
    assert hp.share_above_10(r) == pytest.approx(0.8)  # |changes| 0.1, 0.15, 0.25, 0.2, 0.15
    assert hp.share_below_3(r) == 0.0
    rising = run(evals=[0.1, 0.2, 0.21])
    assert (hp.largest_drop(rising), hp.largest_relative_drop(rising)) == (0.0, 0.0)
    assert hp.share_below_3(rising) == pytest.approx(0.5)
    assert all(math.isnan(x) for x in hp.change_shares(pd.Series([0.5])))
    assert hp.largest_relative_drop_of(pd.Series([0.0, 0.0, 0.3, 0.1])) == pytest.approx(2 / 3)  # from 0: no share


def test_reward_cost_and_alerts():
    reward = [0.1 * s for s in range(1, 10)] + [math.nan]  # step 10 logged no reward
    r = run(reward_mean=reward)
    assert hp.final_reward(r) == pytest.approx(0.9)
    assert hp.reward_gain(r) == pytest.approx((0.6 + 0.7 + 0.8 + 0.9) / 4 - 0.3)  # last 5 steps − first 5
    assert (hp.wall_seconds(r), hp.alerts(r)) == (12.5, 2)


def test_a_schedule_acted_where_its_lr_fell_by_half_or_its_kl_coefficient_moved():
    steps = range(1, 11)
    decayed = run(lr=[1e-3 * 0.9 ** (s // 2) for s in steps], kl_coef=[0.05] * 10)
    assert hp.lr_ratio(decayed) == pytest.approx(0.9**5)  # 0.59 of the first: it fell, but not to half
    assert (hp.kl_coef_range(decayed), hp.schedule_moved(decayed)) == (1.0, 0.0)
    controlled = run(lr=[1e-3] * 10, kl_coef=[0.05, 0.075, 0.1125] + [0.09] * 6 + [math.nan])
    assert hp.kl_coef_range(controlled) == pytest.approx(2.25) and hp.schedule_moved(controlled) == 1.0
    assert hp.kl_coef_last(controlled) == 0.09  # the last step that logged it
    halved = run(lr=[1e-3] * 9 + [4e-4], kl_coef=[0.05] * 10)
    assert hp.lr_ratio(halved) == pytest.approx(0.4) and hp.schedule_moved(halved) == 1.0
    assert math.isnan(hp.kl_coef_range(run(lr=[1e-3] * 10, kl_coef=[0.0] * 10)))


def test_absolute_deviation_is_the_brown_forsythe_transform():
    rows = pd.DataFrame({"batch_size": [64, 64, 64, 512, 512, 512], "final_reward": [0.1, 0.3, 0.8, 0.40, 0.41, 0.45]})
    assert list(hp.final_reward_absdev(rows).round(6)) == [0.2, 0.0, 0.5, 0.01, 0.0, 0.04]
    rows = pd.DataFrame({"role": ["B"] * 3 + ["C"] * 2, "final_eval": [0.50, 0.52, 0.56, 0.6, 0.7]})
    assert list(hp.final_eval_absdev(rows).round(6)) == [0.02, 0.0, 0.04, 0.05, 0.05]


def test_lr_sensitivity_pairs_a_run_with_the_higher_lr_run_of_its_batch_and_seed():
    rows = pd.DataFrame(
        {
            "batch_size": [64, 64, 64, 64, 512, 512, 512],
            "seed": [0, 1, 0, 1, 0, 0, 1],
            "lr": [1e-3, 1e-3, 3e-3, 3e-3, 1e-3, 3e-3, 1e-3],
            "gain": [0.10, 0.20, -0.05, math.nan, 0.30, 0.25, 0.4],  # 64's seed 1 at 3e-3 has no result
        }
    )
    out = hp.lr_sensitivity(rows)
    assert out.tolist()[0] == pytest.approx(0.15) and out.tolist()[4] == pytest.approx(0.05)
    assert out.isna().tolist() == [False, True, True, True, False, True, True]  # 512's seed 1 has no higher LR


def test_the_tuning_claim_reads_the_reference_rows():
    """batch_tuning: what three times the LR costs batch 64 against what it costs batch 512, paired by seed."""
    from mathrl.analysis import claims
    from tests import synthetic

    rows = pd.DataFrame(
        [
            {"role": f"{size}_{lr}", "batch_size": b, "lr": x, "seed": s, "warmup": s, "gain": g}
            for size, b, gains in (
                ("small", 64, [(0.1, -0.1), (0.2, 0.0), (0.1, -0.2)]),
                ("large", 512, [(0.3, 0.3)] * 3),
            )
            for s, pair in enumerate(gains)
            for lr, x, g in zip(("ref", "high"), (3e-4, 9e-4), pair)
        ]
    )
    rows["lr_sensitivity"] = hp.lr_sensitivity(rows)
    v = synthetic.verdicts({"claims": claims.judge_all({}, {"stability_tuning_runs": rows})}, "stability")
    assert v.loc["batch_tuning"]["diff"] == pytest.approx((0.2 + 0.2 + 0.3) / 3) and v.loc["batch_tuning"].n == 3


def test_curve_points_read_the_nearest_evaluation_at_fractions_of_the_steps():
    r = run(entropy=[1.0 - 0.1 * s for s in range(10)], reward_mean=[0.1 * s for s in range(1, 11)])
    r.settings = {"steps": 10}
    points = hp.curve_points(r)
    assert [p["step"] for p in points] == [2, 4, 6, 8, 10] and [p["eval_step"] for p in points] == [2, 4, 6, 8, 10]
    assert points[1]["eval_accuracy"] == 0.45 and points[1]["entropy"] == 0.7 and points[1]["reward"] == 0.4
    r.settings = {"steps": 20}  # the run stopped at step 10: no value from 60% of its steps on
    late = hp.curve_points(r)
    assert late[0]["eval_step"] == 4 and math.isnan(late[2]["eval_accuracy"]) and late[4]["point"] == 5


def batch_run(batch, seed, samples, evals, ok=True) -> SimpleNamespace:
    """A batch-study run: its rollouts drawn and held-out accuracy (NaN between evaluations) per step."""
    return SimpleNamespace(
        ok=ok,
        settings={"batch_size": batch, "warmup": seed % 2},
        spec=SimpleNamespace(seed=seed),
        summary={},
        metrics=pd.DataFrame({"samples": samples, "eval_accuracy": evals}),
    )


def test_the_batch_study_compared_at_equal_samples():
    nan = math.nan
    runs = [
        batch_run(64, 0, [0, 64, 128, 192], [0.5, nan, 0.6, 0.62]),  # samples 0 (before RL) left out
        batch_run(64, 1, [64, 128, 192], [nan, 0.55, nan]),
        batch_run(512, 0, [512, 1024], [0.7, 0.8]),
        batch_run(512, 1, [128, 512], [0.65, 0.75]),
        batch_run(512, 2, [128], [0.9], ok=False),  # no result: no row
    ]
    es = hp.equal_samples_table(runs)
    assert list(es["samples"]) == [128, 192, 128, 512, 1024, 128, 512] and list(es["warmup"]) == [0, 0, 1, 0, 0, 1, 1]
    pairs = hp.equal_samples_pairs(es)
    assert list(pairs.columns) == hp.CLAIM_TABLES["stability_equal_samples_pairs"]
    # the largest number of rollouts both batches were evaluated at: 128; batch 512 reached it with seed 1 alone
    assert pairs[["batch_size", "large_batch", "seed", "samples"]].values.tolist() == [
        [64, 512, 0, 128],
        [64, 512, 1, 128],
    ]
    assert math.isnan(pairs["large"][0]) and pairs["large"][1] == 0.65 and list(pairs["small"]) == [0.6, 0.55]
    assert hp.equal_samples_pairs(hp.equal_samples_table([])).empty
