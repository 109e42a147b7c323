"""The measures of math-rl-training-system.md's runs, and its table of starts and supervised controls, on hand-made
runs and starts."""

import math

import pandas as pd
import pytest

from mathrl.analysis.measures import MEASURES
from mathrl.analysis.measures import training_system as ts
from mathrl.analysis.results import Run
from mathrl.pipeline.config import RunSpec

CFG = {"sft": {"add": {"band": [0.3, 0.6]}}}


def make_run(settings: dict, summary: dict | None = None, metrics: pd.DataFrame | None = None) -> Run:
    spec = RunSpec("system__add__s0", "system", "add", {}, 0, {"task": "add", **settings})
    return Run(spec, "complete", {"initial": {"eval_accuracy": 0.3}, "config": {}, **(summary or {})}, metrics)


def test_steps_and_throughput():
    m = pd.DataFrame({"step": [1, 2, 3, 4], "samples": [128, 256, 384, 512], "seconds": [1.0, 2.0, 0.5, 0.5]})
    run = make_run({}, metrics=m)
    assert MEASURES["steps_done"][1](run) == 4.0
    assert MEASURES["seq_per_s"][1](run) == pytest.approx(512 / 4.0)  # sequences over the steps' 4 seconds


def test_sequences_per_micro_batch():
    sequences = MEASURES["micro_batch_sequences"][1]
    assert sequences(make_run({"micro_batch_size": 64, "batch_size": 512})) == 64
    assert sequences(make_run({"micro_batch_size": 0, "batch_size": 512})) == 512  # no accumulation: the whole batch
    two_ranks = make_run({"micro_batch_size": 0, "batch_size": 512}, {"resolved": {"world_size": 2}})
    assert sequences(two_ranks) == 256  # each rank's share


def test_console_line_from_the_log_else_rebuilt():
    row = {
        "step": 3,
        "policy_loss": 0.5,
        "accuracy": 0.25,
        "reward_mean": 0.25,
        "lr": 3e-4,
        "entropy": 0.1,
        "kl": 0.0,
        "eval_accuracy": math.nan,
    }
    run = make_run({"steps": 10}, metrics=pd.DataFrame([row]))
    log = "Step 1/10 | Loss 0.100\nalert: something\n  Step 3/10 | x\nStep 3/10 | Loss 0.500  \n"
    assert ts.console_of(run, log) == ("Step 3/10 | Loss 0.500", "log")  # the last line that starts with `Step `
    assert ts.console_of(run, "alert: something\n") == (
        "Step 3/10 | Loss 0.500 | Acc 0.250 | Reward 0.250 | LR 3.00e-04 | Ent 0.100 | KL 0.0000",
        "metrics.csv",
    )


def test_a_run_starts_from_its_init_or_the_band():
    assert ts.band_start(CFG, "add") == "start_30"
    assert ts.start_of(CFG, {"task": "add", "init": None}) == "start_30"  # the warm-up checkpoint: its band's start
    assert ts.start_of(CFG, {"task": "add", "init": "start_85"}) == "start_85"
    assert ts.start_of(CFG, {"task": "add", "init": "random"}) == "random"


def test_pick_start_reads_the_validation_split_alone():
    assert ts.pick_start({"start_30": 0.31, "start_70": 0.72, "start_85": 0.86}, 0.80) == "start_70"
    assert ts.pick_start({"start_30": 0.31, "start_85": 0.86}, 0.90) == "start_85"
    assert ts.pick_start({"start_85": 0.91, "start_95": 0.96}, 0.90) == "start_85"  # none below: the least trained
    assert ts.pick_start({"start_30": math.nan}, 0.90) == "start_30" and ts.pick_start({}, 0.9) is None
    assert ts.pick_start({"start_30": math.nan, "start_85": 0.5}, 0.9) == "start_85"  # no reading: not picked


STARTS_JSON = {
    "starts": [
        {
            "start": "start_85",
            "threshold": 0.85,
            "sft_steps": 1500,
            "val_accuracy": 0.86,
            "test_accuracy": 0.85,
            "reached": True,
        }
    ],
    "controls": [{"start": "start_85", "seed": 0, "initial_test": 0.85, "final_test": 0.9}],
}
SUMMARY = {"steps": 425, "val_accuracy": 0.32, "eval_accuracy": 0.3, "reached": True}


def test_warmup_starts_read_starts_json_else_the_band_from_the_summary():
    found = ts.warmup_starts(CFG, "add", [(STARTS_JSON, SUMMARY), (None, SUMMARY), (None, None)])
    assert found["starts"] == [
        {**STARTS_JSON["starts"][0], "warmup": 0},
        {
            "start": "start_30",
            "threshold": 0.3,
            "sft_steps": 425,
            "val_accuracy": 0.32,
            "test_accuracy": 0.3,
            "reached": True,
            "warmup": 1,
        },
    ]
    assert found["controls"] == [{**STARTS_JSON["controls"][0], "warmup": 0}]  # warm-up 2 wrote nothing


def test_a_start_over_its_warm_ups():
    rows = pd.DataFrame(
        {
            "threshold": [0.85, 0.85],
            "sft_steps": [1500, 1700],
            "val_accuracy": [0.86, 0.88],
            "test_accuracy": [0.85, 0.81],
            "reached": [True, None],
        }
    )
    cols = ts.start_columns(rows)
    assert cols["warmups"] == 2 and cols["warm_up_steps"] == 1600 and cols["start_val"] == pytest.approx(0.87)
    assert (cols["start_test"], cols["start_test_min"], cols["start_test_max"]) == pytest.approx((0.83, 0.81, 0.85))
    assert cols["threshold"] == 0.85 and cols["reached"] is False  # a warm-up without a reading did not reach it
    assert ts.start_columns(rows.iloc[:1])["reached"] is True


def test_start_runs_sets_the_controls_beside_the_runs_and_picks_a_start():
    per_run = pd.DataFrame(
        {
            "task": "add",
            "start": ["start_30", "start_85", "start_85"],
            "algorithm": "reinforce",
            "seed": [0, 0, 1],
            "warmup": [1, 0, 0],
            "initial_eval": [0.3, 0.85, 0.85],
            "final_eval": [0.5, 0.95, math.nan],
            "gain": [0.2, 0.1, math.nan],
            "lowest_change": [-0.01, 0.0, math.nan],
            "roughness": [0.1, 0.2, math.nan],
        }
    )
    starts = {"add": ts.warmup_starts(CFG, "add", [(STARTS_JSON, SUMMARY), (None, SUMMARY)])}
    table = ts.start_runs(per_run, starts, {"add": 0.9})
    assert list(table.columns) == ts.CLAIM_TABLES["system_start_runs"]
    out = table.set_index(["start", "algorithm"])
    assert len(out) == 3  # two runs with a final evaluation and one control
    control = out.loc[("start_85", ts.SUPERVISED)]
    assert control.gain == pytest.approx(0.05) and math.isnan(control.lowest_change) and control.cell == "add_start_85"
    assert out.loc[("start_30", "reinforce")].start_val == 0.32 and control.start_val == 0.86
    assert set(out[out.picked == "yes"].index.get_level_values("start")) == {"start_85"}  # 0.86 < 0.90: below
    assert ts.start_runs(per_run.iloc[:0], {"add": {"starts": [], "controls": []}}, {"add": 0.9}).empty


def test_a_start_s_summary_over_warm_ups_sets_rl_beside_its_supervised_control():
    start = {"threshold": 0.3, "sft_steps": 100, "val_accuracy": 0.3, "test_accuracy": 0.32, "reached": True}
    starts = {
        "add": {
            "starts": [
                {**start, "start": name, "warmup": w} for name in ("start_30", "start_85", "start_90") for w in (0, 1)
            ]
        }
    }
    runs = pd.DataFrame(
        {
            "task": "add",
            "start": ["start_30"] * 5 + ["start_85"],
            "algorithm": ["reinforce"] * 3 + [ts.SUPERVISED] * 3,
            "warmup": [0, 0, 1, 0, 1, 0],
            "final_eval": [0.5, 0.7, 0.8, 0.4, 0.5, 0.9],
            "picked": ["yes"] * 5 + ["no"],
        }
    )
    out = ts.start_summary(starts, runs, {"add": (0.9, 0.95)}).set_index("start")
    assert list(out.index) == ["start_30", "start_85"]  # a start without runs is left out
    first = out.loc["start_30"]
    assert first.warmups == 2 and first.picked and (first.expected_low, first.expected_high) == (0.9, 0.95)
    assert (first.rl_n, first.rl_final, first.sup_n, first.sup_final) == pytest.approx((2, 0.7, 2, 0.45))  # 0.6, 0.8
    assert first.rl_minus_sup == pytest.approx(0.25) and first.rl_minus_sup_lo < 0.25 < first.rl_minus_sup_hi
    assert first.rl_hi <= 1.0 and first.sup_lo >= 0.0  # accuracies' intervals within [0, 1]
    alone = out.loc["start_85"]  # one control on one warm-up: no interval, no difference
    assert alone.rl_n == 0 and alone.sup_n == 1 and alone.sup_final == 0.9 and math.isnan(alone.sup_lo)
    assert math.isnan(alone.rl_minus_sup) and not alone.picked
