"""The entropy-performance law and the gradient noise scale per run (mathrl.analysis.measures.training_laws), on
hand-made runs."""

import math

import numpy as np
import pandas as pd
import pytest

from mathrl.analysis.measures import training_laws as tl
from mathrl.analysis.results import Run
from mathrl.pipeline.config import RunSpec

KEYS = {"experiment": "batch", "setting": "batch_size=16", "seed": 0, "warmup": 0}


def run_of(metrics: dict, initial: float = 0.5, config: dict | None = None) -> Run:
    spec = RunSpec("batch__batch_size-16__s0", "batch", None, {"batch_size": 16}, 0, {})
    summary = {"initial": {"eval_accuracy": initial}, "config": config or {}}
    return Run(spec, "complete", summary, pd.DataFrame(metrics))


def law_run(steps: int = 8) -> Run:
    """Entropy falls by 0.05 a step from 0.6; training accuracy follows R = −0.5·exp(H) + 1.2 exactly."""
    h = 0.6 - 0.05 * np.arange(steps)
    evals = [math.nan] * (steps - 1) + [0.8]
    return run_of(
        {"step": np.arange(1, steps + 1), "entropy": h, "accuracy": -0.5 * np.exp(h) + 1.2, "eval_accuracy": evals}
    )


def test_the_law_fitted_on_a_run_that_follows_it():
    run = law_run()
    df = tl.entropy_law_runs([(KEYS, run)])
    assert list(df.columns) == tl.LAW_COLUMNS and len(df) == 1
    r = df.iloc[0]
    assert r.steps == 8 and r.n == 8 and r.a == pytest.approx(0.5, abs=1e-6) and r.b == pytest.approx(1.2, abs=1e-6)
    assert r.ceiling == pytest.approx(0.7, abs=1e-6) and r.r2 == pytest.approx(1.0) and r.half_rmse < 1e-6
    assert r.entropy_start == pytest.approx(0.6) and r.entropy_end == pytest.approx(0.25)  # first and last step
    reached = np.mean(run.metrics["accuracy"].tail(tl.REACHED_STEPS))
    assert r.reached == pytest.approx(reached) and r.ceiling_minus_reached == pytest.approx(0.7 - reached, abs=1e-6)
    assert r.final_eval == 0.8 and r.holds and r.experiment == "batch" and "warmup" not in df


def test_a_run_too_short_or_without_entropy_is_not_fitted():
    assert tl.entropy_law_row(KEYS, law_run(steps=tl.LAW_STEPS - 1)) is None
    assert tl.entropy_law_row(KEYS, run_of({"step": [1, 2], "accuracy": [0.1, 0.2]})) is None
    assert list(tl.entropy_law_runs([]).columns) == tl.LAW_COLUMNS


def test_a_law_without_r2_neither_holds_nor_fails():
    flat = run_of({"step": range(1, 9), "entropy": [0.5] * 8, "accuracy": [0.3] * 8, "eval_accuracy": [0.4] * 8})
    assert tl.entropy_law_row(KEYS, flat)["holds"] is None  # entropy does not vary: nothing to fit


def test_noise_scale_early_and_late():
    # micro batch 4, batch 16; over the first two steps |g_4|² = 3, |g_16|² = 1.5: |G|² = (24 − 12)/12 = 1 and
    # tr(Σ) = 1.5/(1/4 − 1/16) = 8, so B_noise = 8; over the last two |g_4|² = 2, |g_16|² = 1.25: B_noise = 4
    m = {
        "step": range(1, 9),
        "grad_sq_micro": [3.0, 3.0, 9, 9, 9, 9, 2.0, 2.0],
        "grad_sq_batch": [1.5, 1.5, 1, 1, 1, 1, 1.25, 1.25],
        "grad_noise_scale": [8, 8, 1, math.nan, 1, 1, 4, 4],
    }
    run = run_of(m, config={"micro_batch_size": 4, "batch_size": 16})
    df = tl.noise_scale_runs([(KEYS, run)])
    assert list(df.columns) == tl.NOISE_COLUMNS
    r = df.iloc[0]
    assert r.early == pytest.approx(8.0) and r.late == pytest.approx(4.0)
    assert r.batch_size == 16 and r.undefined_steps == 1
    few = run_of({"step": [1, 2, 3], "grad_sq_micro": [1.0] * 3, "grad_sq_batch": [1.0] * 3})
    assert tl.noise_scale_row(KEYS, few) is None and tl.noise_scale_row(KEYS, law_run()) is None


def test_noise_scale_beside_the_batch_runs():
    def batch_run(b: int, seed: int, final: float) -> Run:
        spec = RunSpec(f"batch__batch_size-{b}__s{seed}", "batch", None, {"batch_size": b}, seed, {})
        summary = {"initial": {"eval_accuracy": 0.5}, "config": {"batch_size": b, "lr": 1e-4}}
        return Run(spec, "complete", summary, pd.DataFrame({"step": [1], "eval_accuracy": [final]}))

    missing = Run(RunSpec("batch__batch_size-32__s0", "batch", None, {"batch_size": 32}, 0, {}), "missing")
    runs = [batch_run(8, 0, 0.6), batch_run(8, 1, 0.8), batch_run(16, 0, 0.7), missing]  # batch 32: no result
    probes = {"add": {"grad_sq": 2.0, "trace_sigma": 32.0, "noise_scale": 16.0}, "mul": {}}
    df = tl.noise_scale_beside_batches(probes, runs)
    assert list(df.columns) == tl.NOISE_SCALE and set(df["batch_size"]) == {8, 16}
    add = df[df.task == "add"].set_index("batch_size")
    assert add.loc[8, "gain_mean"] == pytest.approx(0.2) and add.loc[8, "n"] == 2 and add.loc[8, "lr"] == 1e-4
    assert add.loc[8, "gain_lo"] < 0.2 < add.loc[8, "gain_hi"]
    # the best step size grows as B / (B + B_noise): (8/24) / (16/32) at batch 8, relative to batch 16
    assert add.loc[8, "lr_scale"] == pytest.approx(2 / 3) and add.loc[16, "lr_scale"] == 1.0
    mul = df[df.task == "mul"]
    assert len(mul) == 2 and mul["noise_scale"].isna().all() and mul["lr_scale"].isna().all()
