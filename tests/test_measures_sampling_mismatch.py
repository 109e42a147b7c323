"""The measures of the rollout/trainer mismatch (mathrl.analysis.measures.sampling_mismatch) on hand-made runs."""

import math

import pandas as pd
import pytest

from mathrl.analysis.measures import MEASURES, RUN_TABLES
from mathrl.analysis.measures import sampling_mismatch as sm
from mathrl.analysis.results import Run
from mathrl.pipeline.config import RunSpec


def run_of(metrics: dict, initial_eval: float = 0.5) -> Run:
    spec = RunSpec("rollout_mismatch__bf16__s0", "rollout_mismatch", "bf16", {}, 0, {"warmup": 0})
    return Run(spec, "complete", {"initial": {"eval_accuracy": initial_eval}}, pd.DataFrame(metrics))


# three steps of a bf16 sampler: the gap per step, its largest token, and the importance weights' ESS
RUN = run_of(
    {
        "step": [1, 2, 3],
        "mismatch_logp_diff_mean": [1e-3, 2e-3, 6e-3],
        "mismatch_logp_diff_max": [0.01, 0.05, 0.02],
        "mismatch_kl_k3": [1e-6, 2e-6, 3e-6],
        "mismatch_chi2": [0.01, 0.02, 0.03],
        "mismatch_ess": [0.99, 0.95, 0.98],
        "mismatch_logp_corr": [0.999, 0.998, 0.997],
        "mismatch_corrected_frac": [math.nan, 0.1, 0.3],  # a step whose correction logged nothing is left out
        "sample_seconds": [0.1, 0.2, 0.3],
        "update_seconds": [0.4, 0.4, 0.4],
        "eval_accuracy": [math.nan, math.nan, 0.6],
    }
)


def value(name: str, run: Run = RUN) -> float:
    return MEASURES[name][1](run)


def test_step_means_and_the_runs_extremes_by_hand():
    assert value("steps_done") == 3
    assert value("logp_diff_mean") == pytest.approx(3e-3)
    assert value("logp_diff_max") == pytest.approx(0.05)  # the largest over steps, not their mean
    assert value("kl_k3") == pytest.approx(2e-6) and value("chi2") == pytest.approx(0.02)
    assert value("ess") == pytest.approx((0.99 + 0.95 + 0.98) / 3)
    assert value("ess_min") == pytest.approx(0.95)
    assert value("logp_corr") == pytest.approx(0.998)
    assert value("corrected_frac") == pytest.approx(0.2)
    assert value("sample_seconds") == pytest.approx(0.2) and value("update_seconds") == pytest.approx(0.4)


def test_a_run_without_the_mismatch_columns_has_none():
    plain = run_of({"step": [1, 2], "entropy": [0.5, 0.4], "eval_accuracy": [math.nan, 0.5]})
    assert all(math.isnan(value(name, plain)) for name in [*sm.MISMATCH, "sample_seconds", "update_seconds"])
    assert value("steps_done", plain) == 2


def test_the_run_table_reads_the_experiment_with_its_held_out_accuracy():
    decl = RUN_TABLES["diagnostics_mismatch_runs"]
    assert decl["experiment"] == "rollout_mismatch" and decl["runs"] == "with_result"
    assert decl["measures"][-3:] == ["initial_eval", "final_eval", "gain"]
    assert value("final_eval") == pytest.approx(0.6) and value("gain") == pytest.approx(0.1)


def test_the_control_at_scale_pools_the_complete_runs_without_a_source():
    def run(run_id: str, top: list, settings: dict | None = None, same_as: str | None = None) -> Run:
        spec = RunSpec(run_id, "e", None, {}, 0, {"warmup": 0, **(settings or {})}, same_as=same_as)
        gaps = {"mismatch_logp_diff_max": top, "mismatch_logp_diff_mean": [1e-7, 3e-7], "mismatch_ess": [1.0, 0.999]}
        return Run(spec, "complete", {"initial": {"eval_accuracy": 0.5}}, pd.DataFrame({"step": [1, 2], **gaps}))

    runs = [
        run("a", [1e-6, 4e-6]),
        run("b", [2e-6, 1e-6]),
        run("c", [8e-6, 1e-6]),
        run("hot", [5.0, 5.0], {"temperature": 2.0}),  # a source of mismatch: left out
        run("copy", [9.0, 9.0], same_as="a"),  # another run's result: counted once
        run_of({"step": [1], "entropy": [0.5]}),  # logged no mismatch
    ]
    row = sm.control_at_scale(runs).iloc[0]
    assert row["runs"] == 3 and row["tokens_max"] == pytest.approx(8e-6)
    assert row["run_max_median"] == pytest.approx(4e-6)  # the runs' largest: 4e-6, 2e-6, 8e-6
    assert row["mean_gap_mean"] == pytest.approx(2e-7) and row["mean_gap_max"] == pytest.approx(2e-7)
    assert row["ess_min"] == pytest.approx(0.999)
    empty = sm.control_at_scale(runs[3:])
    assert empty.empty and list(empty.columns) == sm.CLAIM_TABLES["diagnostics_mismatch_control"]
