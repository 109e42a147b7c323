"""The measures of training-collapse-analysis.md's runs, each on a hand-made run whose values follow by hand."""

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from mathrl.analysis.measures import MEASURES
from mathrl.analysis.measures.collapse_remedies import (
    RUN_TABLES,
    adv_clip_binding_of,
    clip_binding_of,
    curve_points,
    design_points,
    five_points,
    guard_runs,
    segment_rows,
)
from mathrl.analysis.measures.tables import run_table
from mathrl.analysis.results import Run
from mathrl.pipeline.config import RunSpec

# Held-out accuracy 0.40 before RL, then at steps 2, 4, 6 and 8 of 8
EVALS = {2: 0.30, 4: 0.36, 6: 0.34, 8: 0.32}
METRICS = {
    "step": range(1, 9),
    "format_rate": [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
    "frac_zero_std": [1.0, 1.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0],
    "ndigit": [1, 1, 1, 1, 2, 2, 2, 2],
    "accuracy": [0.1, 0.2, 0.3, 0.4, 0.5, 0.5, 0.5, 0.5],
    "entropy": [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.5],
    "lr": [1e-3] * 4 + [5e-4] * 4,
    "grad_norm": [0.4, 0.6, 2.0, 0.5, 0.4, 0.4, 0.4, 0.4],
    "adv_abs_max": [1.0, 0.0, 1.0, 0.7, 0.5, 0.5, 0.5, 0.5],
    "adv_mean": [-0.1] * 8,
    "entropy_coef": [0.01] * 4 + [0.0] * 4,
    "kl_coef": [0.1] * 8,
    "kl": [0.0, 0.2, 0.4, 0.2] * 2,
    "skipped": [0] * 8,
    "samples": [16 * s for s in range(1, 9)],
    "seconds": [0.5] * 8,
}
SETTINGS = {"steps": 8, "grad_clip": 0.5, "adv_clip": 1.0, "curriculum_start": 1, "algorithm": "grpo"}


def made_run(variant="fall", seed=0, status="complete", **columns) -> Run:
    m = pd.DataFrame({**METRICS, **columns})
    m["eval_accuracy"] = m["step"].map(EVALS)
    spec = RunSpec(f"collapse__{variant}__s{seed}", "collapse", variant, {}, seed, dict(SETTINGS, warmup=seed))
    final = m["eval_accuracy"].dropna().iloc[-1]
    summary = {"initial": {"eval_accuracy": 0.40}, "final": {"eval_accuracy": final}, "config": {}}
    return Run(spec, status, summary, m) if status == "complete" else Run(spec, status)


def value(name: str, run: Run):
    return MEASURES[name][1](run)


def test_held_out_accuracy():
    run = made_run()
    assert list(five_points(run.evals, 8)["step"]) == [0, 2, 4, 6, 8]
    assert value("mid_gain", run) == pytest.approx(0.36 - 0.40)  # step 4: the evaluation nearest half of 8 steps
    assert value("late_drawdown", run) == pytest.approx(0.04)  # from step 4 on: 0.36 -> 0.32
    # never below half the start (no collapse), but ended 8 points below it: degraded
    assert value("degraded", run) == 1.0 and value("peak_eval", run) == pytest.approx(0.36)


def test_rollouts():
    run = made_run()
    assert value("initial_format_rate", run) == 0.2 and value("final_format_rate", run) == 0.9
    assert value("late_format_rate", run) == pytest.approx(0.85)  # the last quarter: steps 7 and 8
    assert value("format_gain", run) == pytest.approx(0.65)
    assert value("frac_zero_std", run) == pytest.approx(3 / 8)
    assert value("first_stage_accuracy", run) == pytest.approx(0.25)  # steps 1-4, at one digit
    no_curriculum = made_run()
    no_curriculum.spec.settings["curriculum_start"] = None
    assert math.isnan(value("first_stage_accuracy", no_curriculum))
    assert value("entropy_last", run) == 0.5 and value("early_entropy", run) == pytest.approx(0.85)
    assert value("entropy_fall_ends", run) == pytest.approx(0.5)  # 1 - 0.5 / 1.0


def test_mechanisms():
    run = made_run()
    assert value("mean_lr", run) == pytest.approx(7.5e-4) and value("lr_ratio", run) == pytest.approx(0.5)
    assert value("clip_binding", run) == 0.25  # 0.6 and 2.0 exceed 0.5; 0.5 itself does not
    assert value("adv_abs_max", run) == pytest.approx(4.7 / 8)
    assert value("adv_clip_ratio", run) == pytest.approx(4.7 / 8)  # over a clip of 1.0
    assert value("adv_clip_binding", run) == pytest.approx(2 / 7)  # the step with no advantage (0.0) is left out
    assert value("adv_mean", run) == pytest.approx(-0.1) and value("adv_mean_abs", run) == pytest.approx(0.1)
    assert value("entropy_coef_ratio", run) == 0.0
    assert value("mean_kl_coef", run) == pytest.approx(0.1) and value("mean_kl", run) == pytest.approx(0.2)


def test_clips_read_before_and_after():
    m = pd.DataFrame({"grad_norm": [0.4, 0.6, 2.0, 0.5], "adv_abs_max": [1.0, 0.0, 1.0, 0.7]})
    assert clip_binding_of(m, 0.5) == 0.5 and adv_clip_binding_of(m, 1.0) == pytest.approx(2 / 3)
    assert math.isnan(clip_binding_of(m, None)) and math.isnan(adv_clip_binding_of(m, None))
    assert math.isnan(adv_clip_binding_of(m.assign(adv_abs_max=0.0), 1.0))  # no step had an advantage


def test_guard():
    fall = made_run()
    assert value("skipped", fall) == 0.0 and math.isnan(value("first_skipped_step", fall))
    assert value("weights_finite", fall) and value("caught", fall) == 0.0  # nothing skipped: nothing caught
    huge = made_run("huge", skipped=[0, 0, 1, 1, 0, 0, 0, 0])
    assert value("skipped", huge) == 2.0 and value("first_skipped_step", huge) == 3.0 and value("caught", huge) == 1.0
    lost = made_run("huge", 1, skipped=[0, 0, 1, 1, 0, 0, 0, 0], entropy=[1.0] * 7 + [math.nan])
    assert not value("weights_finite", lost) and value("caught", lost) == 0.0
    assert value("degraded", huge) == 0.0  # a skipped update counts as a collapse, which is not a degradation


def test_run_table():
    runs = {
        r.spec.run_id: r for r in (made_run(), made_run("huge", 0, skipped=[1] * 8), made_run("huge", 1, "missing"))
    }
    cfg = {"experiments": {"collapse": {"roles": {"baseline": "fall", "nonfinite": "huge", "reference": "fall"}}}}
    t = run_table(RUN_TABLES["collapse_per_run"], runs, cfg)
    assert list(t["role"]) == ["baseline", "nonfinite", "nonfinite"] and list(t["algorithm"]) == ["grpo"] * 3
    assert list(t["caught"].iloc[:2]) == [0.0, 1.0] and math.isnan(t["caught"].iloc[2])  # no result: NaN
    assert list(t["status"]) == ["complete", "complete", "missing"] and t["steps_done"].iloc[0] == 8.0


def test_five_points_with_their_rollouts():
    """At 0, 2, 4, 6 and 8 of 8 steps: the format rate and zero-std share of the steps since the previous point."""
    rows = segment_rows(made_run(), "shaped")
    assert [r["step"] for r in rows] == [0, 2, 4, 6, 8] and [r["eval_accuracy"] for r in rows] == [
        0.40,
        *EVALS.values(),
    ]
    assert [r["format_rate"] for r in rows] == pytest.approx([0.2, 0.25, 0.45, 0.65, 0.85])  # step 1; 1-2; 3-4; ...
    assert [r["frac_zero_std"] for r in rows] == pytest.approx([1.0, 1.0, 0.5, 0.0, 0.0])
    assert {(r["variant"], r["role"], r["seed"]) for r in rows} == {("fall", "shaped", 0)}


def test_an_evaluation_nearest_two_points_is_one_row():
    """15 steps evaluated every 5: the quarter (3.75) and the half (7.5) are both nearest to step 5,
    which is one row (point 1), not two."""
    evals = pd.DataFrame({"step": [0, 5, 10, 15], "eval_accuracy": [0.1, 0.2, 0.3, 0.4]})
    metrics = pd.DataFrame({"step": range(1, 16), "format_rate": [0.5] * 15, "frac_zero_std": [0.9] * 15})
    spec = SimpleNamespace(variant="v", seed=0)
    run = SimpleNamespace(evals=evals, metrics=metrics, settings={"steps": 15}, spec=spec)
    rows = segment_rows(run, "shaped")
    assert [r["step"] for r in rows] == [0, 5, 10, 15] and [r["point"] for r in rows] == [0, 1, 3, 4]
    assert all(r["format_rate"] == 0.5 for r in rows)  # no empty segment behind a repeated step


def test_design_points_are_the_reward_designs_runs():
    runs = [made_run("shaped"), made_run("shaped", 1, "missing"), made_run("fall")]
    d = design_points(runs, {"shaped": "shaped", "fall": "baseline"})  # no result, or not a reward design: no rows
    assert list(d.columns) == [
        "variant",
        "role",
        "seed",
        "point",
        "step",
        "eval_accuracy",
        "format_rate",
        "frac_zero_std",
    ]
    assert list(d["point"]) == [0, 1, 2, 3, 4] and set(d["variant"]) == {"shaped"}
    assert design_points([], {}).empty


def test_curve_points():
    run = made_run("fall", 1)
    run.metrics = run.metrics.drop(columns=["ndigit"])
    c = curve_points(run, "baseline")
    assert list(c["step"]) == list(range(9)) and c["eval_accuracy"].iloc[0] == 0.40  # step 0: before RL
    assert c["eval_accuracy"].iloc[2] == 0.30 and math.isnan(c["eval_accuracy"].iloc[1])  # evaluated every 2 steps
    assert math.isnan(c["format_rate"].iloc[0]) and c["format_rate"].iloc[1] == 0.2
    assert c["ndigit"].isna().all()  # not logged: NaN
    assert set(zip(c["variant"], c["role"], c["seed"])) == {("fall", "baseline", 1)}


def test_guard_runs():
    cfg = {"experiments": {"collapse": {"roles": {"baseline": "fall", "nonfinite": "huge"}}}}
    huge = made_run("huge", 0, skipped=[0, 0, 1, 1, 0, 0, 0, 0])
    runs = {r.spec.run_id: r for r in (made_run(), huge, made_run("huge", 1, "missing"))}
    g = guard_runs(run_table(RUN_TABLES["collapse_per_run"], runs, cfg))
    assert list(g["run_id"]) == ["collapse__huge__s0", "collapse__huge__s1"] and list(g["status"]) == [
        "complete",
        "missing",
    ]
    assert g["skipped"].iloc[0] == 2 and g["first_skipped_step"].iloc[0] == 3 and g["caught"].iloc[0] == 1
    assert g["skipped"].dtype == float and math.isnan(g["final_eval"].iloc[1])  # the missing run: not measured
    assert g["warmup"].dtype == int  # known for both: an integer
    whole = guard_runs(run_table(RUN_TABLES["collapse_per_run"], {huge.spec.run_id: huge}, cfg))
    assert whole["skipped"].dtype == int and whole["steps_done"].iloc[0] == 8
