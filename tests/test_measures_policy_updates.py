"""The measures of what a policy update did (mathrl.analysis.measures.policy_updates) on hand-made runs."""

import math

import numpy as np
import pandas as pd
import pytest

from mathrl.analysis.measures import MEASURES, RUN_TABLES
from mathrl.analysis.measures import policy_updates as pu
from mathrl.analysis.results import Run
from mathrl.pipeline.config import RunSpec


def run_of(metrics: dict, summary: dict | None = None) -> Run:
    spec = RunSpec("policy_losses__gspo__s0", "policy_losses", "gspo", {}, 0, {"policy_loss": "gspo"})
    initial = {"eval_accuracy": 0.4, **(summary or {})}
    return Run(spec, "complete", {"initial": initial}, pd.DataFrame(metrics))


STEPS = [1, 2, 3, 4, 5, 6]
RUN = run_of(
    {
        "step": STEPS,
        "entropy": [1.0, 0.75, 1.0, 0.5, 0.25, 0.5],  # changes: -0.25, +0.25, -0.5, -0.25, +0.25
        "kl": [0.0, 0.01, 0.02, 0.03, 0.05, 0.04],
        "logp_adv_cov": [0.2, -0.1, 0.3, 0.1, -0.2, 0.0],  # the last step's covariance has no change after it
        "clip_frac": [0.1, 0.2, 0.3, 0.1, 0.2, 0.3],
        "clip_frac_low": [0.05] * 6,
        "clip_frac_high": [0.05, 0.15, 0.25, 0.05, 0.15, 0.25],
        "seq_clip_frac": [0.5] * 3 + [0.25] * 3,
        "ppo_kl": [0.01, 0.03] * 3,
        "adv_mean": [0.2, -0.1] * 3,
        "adv_std": [1.0] * 6,
        "adv_abs_max": [2.0, 3.0] * 3,
        "reward_mean": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
        "token_selected_frac": [0.2] * 6,
        "entropy_selected": [0.9] * 6,
        "entropy_unselected": [0.3] * 6,
        "eval_sampled_accuracy": [math.nan, math.nan, 0.3, math.nan, math.nan, 0.35],
        "eval_accuracy": [math.nan, math.nan, 0.45, math.nan, math.nan, 0.5],
    },
    summary={"eval_sampled_accuracy": 0.25},
)


def value(name: str, run: Run = RUN) -> float:
    return MEASURES[name][1](run)


def test_entropy_and_kl_at_the_first_and_the_last_step():
    assert value("entropy_first") == 1.0 and value("entropy_last") == 0.5
    assert value("entropy_reduction") == 0.5  # 1 − 0.5 / 1.0
    assert value("kl_last") == pytest.approx(0.04)  # the last step's, not the largest
    assert pu.reduction(0.5, 0.0) == 1.0 and math.isnan(pu.reduction(0.0, 0.1))


def test_step_means_of_the_clips_advantages_and_selection():
    assert value("clip_frac") == pytest.approx(0.2) and value("clip_frac_low") == pytest.approx(0.05)
    assert value("clip_frac_high") == pytest.approx(0.15) and value("seq_clip_frac") == pytest.approx(0.375)
    assert value("ppo_kl") == pytest.approx(0.02)
    assert value("adv_mean") == pytest.approx(0.05) and value("adv_std") == 1.0 and value("adv_abs_max") == 2.5
    assert value("reward_mean") == pytest.approx(0.35) and value("logp_adv_cov") == pytest.approx(0.05)
    assert value("token_selected_frac") == pytest.approx(0.2)
    assert value("entropy_selected") == pytest.approx(0.9) and value("entropy_unselected") == pytest.approx(0.3)
    # a loss that logs no clip of a kind (CISPO: no PPO clip; the others: no importance-weight cap) has none
    assert math.isnan(value("is_clip_frac")) and math.isnan(value("dual_clip_frac"))


def test_held_out_accuracy_sampled_before_rl_and_at_the_last_evaluation():
    assert value("initial_sampled") == 0.25 and value("final_sampled") == 0.35
    assert value("sampled_change") == pytest.approx(0.10)
    unsampled = run_of({"step": [1], "entropy": [0.5], "eval_accuracy": [0.5]})
    assert math.isnan(value("initial_sampled", unsampled)) and math.isnan(value("sampled_change", unsampled))


def test_the_covariance_entropy_correlation_by_hand():
    # the covariance at steps 1-5 against the entropy change after each: ranks (4, 2, 5, 3, 1) and, ties shared,
    # (2.5, 4.5, 1, 2.5, 4.5); about their means 3 and 3: Σxy = −9, Σx² = 10, Σy² = 9
    assert value("cov_entropy_corr") == pytest.approx(-9 / math.sqrt(90))  # entropy falls after a positive covariance
    assert math.isnan(pu.cov_entropy_correlation(np.array([0.1] * 6), np.arange(6.0)))  # a covariance that is flat
    assert math.isnan(pu.cov_entropy_correlation(np.array([0.1, 0.2, 0.3, 0.4, 0.5]), np.arange(5.0)))  # 4 changes
    no_cov = run_of({"step": [1, 2], "entropy": [0.5, 0.4]})
    assert math.isnan(value("cov_entropy_corr", no_cov))


def test_the_run_tables_name_each_experiments_keys():
    assert RUN_TABLES["diagnostics_policy_losses_runs"]["keys"][-1] == "policy_loss"
    assert RUN_TABLES["diagnostics_token_selection_runs"]["keys"][-1] == "token_selection"
    for name in ("diagnostics_negative_controls_runs", "diagnostics_policy_losses_runs"):
        assert RUN_TABLES[name]["runs"] == "with_result" and "gain" in RUN_TABLES[name]["measures"]


def test_the_carry_measures_read_the_probe_the_run_wrote(tmp_path):
    """The final policy's rows of carry_probe.csv, by position: the carry and no-carry entropies averaged over the
    positions where both occur (position 0 has no carry row: left out), each position weighing the same."""
    rows = [
        ("start", 0, False, 9.0),  # the warm-up's rows are not the run's
        ("final", 0, False, 0.7),
        ("final", 1, True, 0.6),
        ("final", 1, False, 0.2),
        ("final", 2, True, 1.0),
        ("final", 2, False, 0.4),
    ]
    probe = pd.DataFrame(rows, columns=["checkpoint", "position", "carry", "entropy"]).assign(tokens=10)
    probe.to_csv(tmp_path / "carry_probe.csv", index=False)
    run = run_of({"step": [1], "entropy": [1.0]})
    probed = Run(run.spec, "complete", run.summary, run.metrics, dir=tmp_path)
    assert pu.entropy_carry(probed) == pytest.approx(0.8) and pu.entropy_nocarry(probed) == pytest.approx(0.3)
    assert pu.carry_gap(probed) == pytest.approx(0.5)
    unprobed = Run(run.spec, "complete", run.summary, run.metrics, dir=tmp_path / "elsewhere")
    assert math.isnan(pu.entropy_carry(unprobed)) and math.isnan(pu.carry_gap(run))  # no file, or no directory


def test_the_update_diagnostics_of_the_runs_that_logged_them():
    spiked = Run(RUN.spec, "complete", {"initial": {}, "config": {"fault_grad_spike_step": 3}}, RUN.metrics)
    silent = Run(RUN.spec, "complete", {"initial": {}}, pd.DataFrame({"step": [1], "entropy": [1.0]}))
    keys = {"experiment": "policy_losses", "setting": "gspo", "seed": 0, "warmup": 0}
    df = pu.update_runs([(keys, RUN), (keys, spiked), (keys, silent)])  # the silent run logged no covariance
    assert list(df.columns) == ["experiment", "setting", "seed", "fault_injected", *pu.UPDATE]
    assert df["fault_injected"].tolist() == ["no", "yes"] and value("fault_injected", spiked) == "yes"
    assert df["clip_frac_high"].tolist() == pytest.approx([0.15, 0.15])
    assert df["cov_entropy_corr"].iloc[0] == value("cov_entropy_corr")


def test_the_carry_probes_rows_name_each_final_policy_and_each_warmup_once(tmp_path):
    rows = [("start", 1, True, 0.9), ("start", 1, False, 0.5), ("final", 1, True, 0.4), ("final", 1, False, 0.2)]
    probe = pd.DataFrame(rows, columns=["checkpoint", "position", "carry", "entropy"]).assign(tokens=10)
    runs = []
    for seed in (0, 1):
        (tmp_path / f"s{seed}").mkdir()
        probe.to_csv(tmp_path / f"s{seed}" / "carry_probe.csv", index=False)
        spec = RunSpec(f"token_selection__top__s{seed}", "token_selection", "top", {}, seed, {"warmup": 0})
        runs.append(
            Run(spec, "complete", {"initial": {"eval_accuracy": 0.4}}, pd.DataFrame(), dir=tmp_path / f"s{seed}")
        )
    unprobed = Run(runs[0].spec, "complete", runs[0].summary, pd.DataFrame(), dir=tmp_path / "none")
    table = pu.carry_probe_rows([*runs, unprobed])
    assert list(table.columns) == pu.PROBE_COLUMNS
    # seed 0's final policy, the warm-up both seeds started from (once, without a seed), seed 1's final policy
    assert list(table["checkpoint"]) == ["top", "top", "warm-up", "warm-up", "top", "top"]
    assert list(table["seed"].iloc[:2]) == [0, 0] and table["seed"].iloc[2:4].isna().all()
    assert list(table["entropy"]) == [0.4, 0.2, 0.9, 0.5, 0.4, 0.2]
    assert pu.probe_rows(unprobed) is None and pu.carry_probe_rows([unprobed]).empty
