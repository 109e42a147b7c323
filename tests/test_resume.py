"""Resume only where no step already computed would have gone differently (mathrl.engine.resume),
checked on the pure plan and on real runs against uninterrupted ones."""

from __future__ import annotations

import pandas as pd
import pytest

from mathrl.engine import resume, schedules
from mathrl.pipeline.cli import main
from mathrl.pipeline.config import load_schema

VOLATILE = ["seconds", "sample_seconds", "update_seconds", "eval_seconds"]


def defaults() -> dict:
    props = load_schema()["definitions"]["train"]["properties"]
    return {k: v.get("default") for k, v in props.items()}


def verdict(old: dict, new: dict, done: int, ndigit: int = 3) -> list[str]:
    return [c.key for c in resume.conflicts({**defaults(), **old}, {**defaults(), **new}, done, ndigit)]


# ---------------------------------------------------------------- the plan, every schedule and controller
@pytest.mark.parametrize(
    ("settings", "resumable"),
    [
        ({"lr_schedule": "constant"}, True),
        ({"lr_schedule": "step", "lr_decay_every": 3}, True),  # reads the step, not `steps`
        ({"lr_schedule": "cosine"}, False),  # every step reads `steps`
        ({"lr_schedule": "cosine", "warmup_steps": 12}, True),  # steps 1-10 are all warm-up
        ({"lr_schedule": "cosine", "warmup_steps": 5}, False),
        ({"entropy_schedule": "constant", "entropy_coef": 0.01}, True),
        ({"entropy_schedule": "linear", "entropy_coef": 0.01}, False),
        ({"entropy_schedule": "cosine", "entropy_coef": 0.01}, False),
        ({"entropy_schedule": "linear", "entropy_coef": 0.01, "entropy_coef_end": 0.01}, True),  # a flat line
        ({"kl_controller": "fixed"}, True),
        ({"kl_controller": "adaptive"}, True),
        ({"kl_controller": "threshold"}, True),
        ({"curriculum_start": 1, "curriculum_every": 4}, True),
    ],
)
def test_more_steps_resume_exactly_when_no_schedule_reads_steps_before_the_snapshot(settings, resumable):
    found = verdict({**settings, "steps": 10}, {**settings, "steps": 20}, done=10)
    assert found == ([] if resumable else ["steps"])


@pytest.mark.parametrize(
    ("key", "old", "new", "resumable"),
    [
        ("lr_decay_every", 20, 30, True),  # the first decay is after the snapshot either way
        ("lr_decay_every", 5, 30, False),
        ("lr_decay_rate", 0.5, 0.7, True),  # lr_decay_every 20: no decay yet
        ("warmup_steps", 0, 3, False),
        ("curriculum_every", 20, 30, True),  # both still at the first digit count at step 10
        ("curriculum_every", 4, 5, False),
        ("curriculum_start", 3, 4, True),  # clamped at the task's 3 digits either way
        ("fault_nan_step", None, 15, True),
        ("fault_nan_step", None, 5, False),
        ("eval_every", 5, 10, True),  # step 5's evaluation is forgotten
        ("eval_every", 10, 5, False),  # step 5 was never evaluated
        ("log_every", 10, 1, True),
        ("snapshot_every", 10, 1, True),
        ("wandb", False, True, True),
    ],
)
def test_a_changed_schedule_setting_is_judged_by_the_steps_it_changes(key, old, new, resumable):
    base = {"lr_schedule": "step", "lr_decay_every": 20, "curriculum_start": 1, "curriculum_every": 20, "steps": 20}
    found = verdict({**base, key: old}, {**base, key: new}, done=10)
    assert found == ([] if resumable else [key])


def test_every_other_setting_conflicts_at_step_one_and_is_named():
    props = load_schema()["definitions"]["train"]["properties"]
    for key, spec in props.items():
        if key in schedules.SCHEDULED | schedules.OUTSIDE_THE_STEP:
            continue
        value = spec.get("default")
        other = {bool: lambda v: not v, int: lambda v: v + 1, float: lambda v: v * 2 + 0.5, str: lambda v: v + "x"}.get(
            type(value), lambda v: 1
        )(value)
        found = resume.conflicts(defaults(), {**defaults(), key: other}, 3, 3)
        assert [(c.key, c.step) for c in found] == [(key, 1)], key
    assert not resume.conflicts(defaults(), defaults(), 3, 3)


def test_nan_policy_matters_only_where_a_step_met_a_non_finite_value():
    assert verdict({"nan_policy": "skip"}, {"nan_policy": "stop"}, done=10) == []
    found = resume.conflicts(
        {**defaults(), "nan_policy": "skip"}, {**defaults(), "nan_policy": "stop"}, 10, 3, nonfinite_steps=[4]
    )
    assert [(c.key, c.step) for c in found] == [("nan_policy", 4)]


def test_a_snapshot_past_the_new_last_step_is_a_conflict():
    found = verdict({"steps": 20}, {"steps": 10}, done=20)
    assert found == ["steps"] and "past the last step" in str(
        resume.conflicts({**defaults(), "steps": 20}, {**defaults(), "steps": 10}, 20, 3)[0]
    )


def test_the_old_last_evaluation_is_forgotten_when_the_run_goes_on():
    assert resume.evaluations_to_forget({"eval_every": 4, "steps": 10}, {"eval_every": 4, "steps": 20}, 10) == [10]
    assert resume.evaluations_to_forget({"eval_every": 5, "steps": 10}, {"eval_every": 5, "steps": 20}, 10) == []


# ---------------------------------------------------------------- real runs
def train(env, run_id, *settings):
    return main(["train", "--config", str(env["config"]), "--run-id", run_id, *settings])


def metrics(env, run_id) -> pd.DataFrame:
    return pd.read_csv(env["results"] / "runs" / run_id / "metrics.csv").drop(columns=VOLATILE)


CASES = {
    # name: (settings of both commands, the first's (it stops early), the second's, the setting it is refused for)
    "constant_lr": ([], ["steps=2"], ["steps=4"], None),
    "step_lr": (["lr_schedule=step", "lr_decay_every=1", "lr_decay_rate=0.5"], ["steps=2"], ["steps=4"], None),
    "cosine_lr": (["lr_schedule=cosine"], ["steps=2"], ["steps=4"], "steps"),
    "warmup": (["warmup_steps=3"], ["steps=2"], ["steps=4"], None),
    "linear_entropy": (["entropy_schedule=linear", "entropy_coef=0.05"], ["steps=2"], ["steps=4"], "steps"),
    "cosine_entropy": (["entropy_schedule=cosine", "entropy_coef=0.05"], ["steps=2"], ["steps=4"], "steps"),
    "adaptive_kl": (["kl_controller=adaptive", "kl_target=0.001", "kl_horizon=2"], ["steps=2"], ["steps=4"], None),
    "threshold_kl": (["kl_controller=threshold", "kl_target=0.001"], ["steps=2"], ["steps=4"], None),
    "reinforce_baseline": (["algorithm=reinforce"], ["steps=2"], ["steps=4"], None),
    "curriculum": (["curriculum_start=1", "curriculum_every=2"], ["steps=2"], ["steps=4"], None),
    "odd_last_step": ([], ["steps=3"], ["steps=4"], None),  # step 3's evaluation (eval_every 2) is forgotten
    "later_decay": (
        ["lr_schedule=step", "lr_decay_rate=0.5"],
        ["steps=2", "lr_decay_every=3"],
        ["steps=4", "lr_decay_every=2"],
        None,
    ),
    "printing": ([], ["steps=2", "log_every=1"], ["steps=4", "log_every=3", "snapshot_every=1"], None),
    "later_fault": ([], ["steps=2"], ["steps=4", "fault_nan_step=3"], None),
    "earlier_eval": ([], ["steps=2"], ["steps=4", "eval_every=1"], "eval_every"),
    "seed": ([], ["steps=2"], ["steps=4", "seed=1"], "seed"),
    "stale_rollouts": (["rollout_staleness=2"], ["steps=2"], ["steps=4"], None),  # the snapshot keeps the old weights
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_resumed_run_equals_an_uninterrupted_one_or_is_refused_naming_the_setting(run_env, case, capsys):
    both, first, second, refused = CASES[case]
    assert train(run_env, "cut", *both, *first) == 0
    capsys.readouterr()
    code = train(run_env, "cut", *both, *second)
    if refused:
        err = capsys.readouterr().err
        assert code == 2 and "snapshot was written with other settings" in err and f"{refused}: snapshot" in err, err
        return
    assert code == 0 and "resuming cut" in capsys.readouterr().out
    assert train(run_env, "whole", *both, *second) == 0
    pd.testing.assert_frame_equal(metrics(run_env, "cut"), metrics(run_env, "whole"))


def test_the_pipeline_starts_a_run_over_when_it_may_not_resume(run_env, capsys):
    """What the pipeline passes (--on-mismatch restart) after `steps` changed under a cosine
    schedule: the run starts over and ends as an uninterrupted run of the new length."""
    assert train(run_env, "cos", "lr_schedule=cosine", "steps=2") == 0
    capsys.readouterr()
    assert main(["train", "--config", str(run_env["config"]), "--run-id", "cos", "--on-mismatch", "restart",
                 "lr_schedule=cosine", "steps=4"]) == 0  # fmt: skip
    assert "restarting cos from step 0" in capsys.readouterr().out
    assert train(run_env, "cos4", "lr_schedule=cosine", "steps=4") == 0
    pd.testing.assert_frame_equal(metrics(run_env, "cos"), metrics(run_env, "cos4"))
