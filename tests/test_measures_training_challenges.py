"""The measures of lab 04's GPT runs (mathrl.analysis.measures.training_challenges) on hand-made runs."""

import math

import pandas as pd
import pytest

from mathrl.analysis.measures import MEASURES, RUN_TABLES
from mathrl.analysis.measures import training_challenges as tc
from mathrl.analysis.results import Run
from mathrl.pipeline.config import RunSpec

SETTINGS = {"steps": 8, "batch_size": 4, "temperature": 0.8}  # a budget of 8 x 4 = 32 rollouts


def run_of(metrics: dict, settings: dict = SETTINGS, initial_eval: float = 0.3) -> Run:
    spec = RunSpec("lab04_gpt__x__s0", "lab04_gpt", "x", {}, 0, dict(settings))
    summary = {"initial": {"eval_accuracy": initial_eval}, "config": dict(settings)}
    return Run(spec, "complete", summary, pd.DataFrame(metrics))


STEPS = list(range(1, 9))
RUN = run_of(
    {
        "step": STEPS,
        "accuracy": [s / 10 for s in STEPS],
        "entropy": [1.0 - 0.1 * (s - 1) for s in STEPS],  # 1.0 at step 1, 0.3 at step 8
        "samples": [6 * s for s in STEPS],  # 6 a step: 30 by step 5, 36 by step 6
        "eval_accuracy": [math.nan, math.nan, math.nan, 0.4, math.nan, math.nan, math.nan, 0.6],
        "frac_zero_std": [0.5] * 4 + [0.25] * 4,
        "grad_norm": [s / 10 for s in STEPS],
        "kl": [0.1, 0.7, 0.2, 0.3, 0.1, 0.1, 0.1, 0.1],
        "ppo_kl": [0.01, 0.03] * 4,
        "clip_frac": [0.0, 0.1] * 4,
        "clip_frac_high": [0.02] * 8,
        "clip_higher_freed": [0.0, 0.0, 0.0, 0.04] * 2,  # 0.08 over 8 steps
        "clip_tighter_cut": [0.01] * 8,
        "entropy_coef": [0.01] * 4 + [0.0] * 4,
    }
)


def value(name: str, run: Run = RUN) -> float:
    return MEASURES[name][1](run)


def test_pure_helpers():
    assert tc.reduction(0.4, 0.1) == pytest.approx(0.75) and math.isnan(tc.reduction(0.0, 0.1))
    assert math.isnan(tc.reduction(math.nan, 0.1)) and tc.reduction(0.5, 0.0) == 1


def test_equal_samples_step_and_the_evaluation_before_it():
    """By hand: a run drawing 1000, 2100, 3000, 4200 rollouts against a budget of 3000 matches at step 3;
    one that never draws more matches at its last step; a first step already over the budget matches nowhere (0)."""
    assert tc.equal_samples_step([1, 2, 3, 4], [1000, 2100, 3000, 4200], 3000) == 3
    assert tc.equal_samples_step([1, 2, 3], [500, 1000, 1500], 1500) == 3
    assert tc.equal_samples_step([1, 2], [4000, 8000], 3000) == 0
    evals = pd.DataFrame({"step": [0, 2, 4], "eval_accuracy": [0.3, 0.4, 0.5]})
    assert (
        tc.last_eval_by(evals, 3) == (0.4, 2)
        and tc.last_eval_by(evals, 4) == (0.5, 4)
        and tc.last_eval_by(evals, 0) == (0.3, 0)
    )


def test_accuracy_over_windows_that_never_overlap():
    """Eight steps: the start is steps 1-4 (0.1-0.4), the end steps 5-8 (0.5-0.8)."""
    assert value("accuracy_start") == pytest.approx(0.25) and value("accuracy_end") == pytest.approx(0.65)


def test_entropy_at_points():
    assert value("entropy_first") == 1.0 and value("entropy_last") == pytest.approx(0.3)
    assert value("entropy_reduction") == pytest.approx(0.7)
    shuffled = run_of({"step": [3, 1, 2], "entropy": [0.2, 0.8, 0.5]})  # read in step order
    assert value("entropy_first", shuffled) == 0.8 and value("entropy_last", shuffled) == 0.2
    assert value("entropy_reduction", shuffled) == pytest.approx(0.75)


def test_equal_samples_measures():
    """The budget is 32 rollouts: drawn 30 by step 5; the last evaluation by then is step 4's (0.4)."""
    assert value("equal_samples_step") == 5 and value("samples_at_equal") == 30
    assert value("entropy_equal_samples") == pytest.approx(0.6)
    assert value("eval_equal_samples") == 0.4 and value("eval_equal_samples_step") == 4
    early = run_of({"step": [1, 2], "entropy": [1.0, 0.9], "samples": [40, 80], "eval_accuracy": [math.nan] * 2})
    assert value("equal_samples_step", early) == 0 and math.isnan(value("samples_at_equal", early))
    assert value("eval_equal_samples", early) == 0.3 and value("eval_equal_samples_step", early) == 0  # before RL


def test_step_means_and_the_largest_kl():
    assert value("frac_zero_std") == pytest.approx(0.375) and value("grad_norm") == pytest.approx(0.45)
    assert value("kl_max") == pytest.approx(0.7) and value("ppo_kl") == pytest.approx(0.02)
    assert value("clip_frac") == pytest.approx(0.05) and value("clip_frac_high") == pytest.approx(0.02)
    assert value("clip_higher_freed") == pytest.approx(0.01) and value("clip_tighter_cut") == pytest.approx(0.01)
    assert value("entropy_coef") == pytest.approx(0.005)
    assert math.isnan(value("cov_frac"))  # not logged by this run
    assert value("cov_frac", run_of({"step": [1, 2], "cov_frac": [0.001, 0.003]})) == pytest.approx(0.002)


def test_rollouts_drawn_per_kept_and_the_temperature():
    """48 rollouts drawn over 8 steps of batch 4: 1.5 per rollout kept."""
    assert value("draws_per_rollout") == pytest.approx(1.5) and value("temperature") == 0.8
    assert math.isnan(value("temperature", run_of({"step": [1]}, {"steps": 1, "batch_size": 4})))


def test_the_run_table_names_registered_measures():
    decl = RUN_TABLES["lab04_gpt_runs"]
    assert decl["experiment"] == "lab04_gpt" and all(m in MEASURES for m in decl["measures"])
    assert {"initial_eval", "final_eval", "reward_start", "samples"} <= set(decl["measures"])  # the general ones


def test_differences_name_every_changed_setting():
    base = {"seed": 0, "lr": 6e-4, "clip_eps_high": None, "algorithm": "grpo", "steps": 20}
    dapo = {"seed": 1, "lr": 6e-4, "clip_eps_high": 0.28, "algorithm": "dapo", "steps": 20, "dynamic_sampling": True}
    assert tc.differences(dapo, base) == [
        ("algorithm", "dapo", "grpo"),
        ("clip_eps_high", 0.28, None),
        ("dynamic_sampling", True, None),
    ]
    assert tc.differences(base, base) == []


def test_each_remedy_against_the_failing_setting_of_its_cause():
    """kl_clip against kl_failing, clip_higher against entropy_failing; kl_epochs names a variant that did not run and
    remedy none: no rows for either. A setting unset on one side reads "unset"."""
    settings = {
        "kl_fail": {"seed": 0, "lr": 3e-4, "clip_eps": 0.2},
        "kl_clip": {"seed": 0, "lr": 3e-4, "clip_eps": 0.1},
        "aggressive": {"seed": 0, "lr": 5e-4, "clip_eps_high": None},
        "ch": {"seed": 0, "lr": 5e-4, "clip_eps_high": 0.28, "ppo_epochs": 2},
    }
    role = {
        "kl_failing": "kl_fail",
        "kl_clip": "kl_clip",
        "kl_epochs": "absent",
        "entropy_failing": "aggressive",
        "clip_higher": "ch",
    }
    d = tc.differences_table(settings, role)
    assert list(d.columns) == ["role", "variant", "against", "setting", "value", "failing"]
    assert d.values.tolist() == [
        ["kl_clip", "kl_clip", "kl_fail", "clip_eps", "0.1", "0.2"],
        ["clip_higher", "ch", "aggressive", "clip_eps_high", "0.28", "unset"],
        ["clip_higher", "ch", "aggressive", "ppo_epochs", "2", "unset"],
    ]
    assert tc.differences_table({}, role).empty


def test_the_summary_per_variant_counts_the_runs_with_a_result():
    """Variant a: two complete runs; b: one complete, one stopped at a non-finite value, one missing (a row of NaN)."""
    rows = pd.DataFrame(
        {
            "variant": ["a", "a", "b", "b", "b"],
            "status": ["complete", "complete", "complete", "stopped_nonfinite", "missing"],
            **{m: [0.2, 0.4, 0.1, 0.3, math.nan] for m in tc.GPT_MEASURES},
        }
    )
    s = tc.gpt_summary(rows).set_index("variant")
    assert list(s.columns[:3]) == ["n", "accuracy_start_mean", "accuracy_start_std"] and s.columns[-1] == "expected"
    assert s.loc["a", "n"] == 2 and s.loc["a", "expected"] == 2 and s.loc["b", "n"] == 2 and s.loc["b", "expected"] == 3
    assert s.loc["a", "final_eval_mean"] == pytest.approx(0.3) and s.loc["b", "kl_max_std"] == pytest.approx(
        2**0.5 / 10
    )
    empty = tc.gpt_summary(rows.iloc[:0])
    assert empty.empty and "n" in empty and "expected" not in empty
