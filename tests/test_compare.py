"""`mathrl compare`: arms of runs (by name, by settings, or an experiment's), their means and
differences with 95% intervals, paired by seed where the arms share seeds."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from mathrl.analysis.compare import arm_values, group_by_settings
from mathrl.analysis.results import Run
from mathrl.analysis.verdict import difference, mean_interval
from mathrl.pipeline.cli import main
from mathrl.pipeline.config import expand_runs, load_config
from tests.conftest import write_config

FINAL = {"a0": 0.50, "a1": 0.60, "a2": 0.70, "b0": 0.40, "b1": 0.55, "b2": 0.58}


def write_summary(results, run_id, seed, final, lr=0.001, experiment=None, settings=None):
    """An ad hoc run's files; `settings`: those an experiment's run records (its config's), else lr, seed, batch 16."""
    d = results / "runs" / run_id
    d.mkdir(parents=True, exist_ok=True)
    summary = {"run_id": run_id, "experiment": experiment, "seed": seed, "status": "complete",
               "config": settings or {"lr": lr, "seed": seed, "batch_size": 16}, "initial": {"eval_accuracy": 0.3},
               "final": {"eval_accuracy": final, "entropy": 0.2, "kl": 0.01, "reward_mean": final},
               "best": {"eval_accuracy": final + 0.01}}  # fmt: skip
    (d / "summary.json").write_text(json.dumps(summary))
    pd.DataFrame({"step": [1, 2], "eval_accuracy": [final + 0.01, final], "entropy": 0.2, "reward_mean": final}).to_csv(
        d / "metrics.csv", index=False
    )  # the registered measures read the evaluations from here


@pytest.fixture
def made(tiny_cfg_dict, tmp_path):
    """Six ad hoc runs (`mathrl train --run-id`): arm a at lr 0.001, arm b at 0.002, seeds 0-2."""
    results = tmp_path / "results"
    for run_id, final in FINAL.items():
        write_summary(results, run_id, int(run_id[1]), final, lr=0.001 if run_id[0] == "a" else 0.002)
    return write_config(tmp_path / "c.yaml", tiny_cfg_dict), results


def test_two_named_arms_paired_by_seed(made, capsys):
    config, results = made
    out = results.parent / "cmp" / "ab.csv"
    argv = ["compare", "--config", str(config), "--arm", "A=a0,a1,a2", "--arm", "B=b0,b1,b2", "--out", str(out)]
    assert main(argv) == 0
    table = pd.read_csv(out).set_index(["kind", "arm"])
    a = {s: FINAL[f"a{s}"] for s in range(3)}
    b = {s: FINAL[f"b{s}"] for s in range(3)}
    diff, mean_b = difference(b, a), mean_interval(b)
    assert table.loc[("difference", "B"), "estimate"] == pytest.approx((-0.10 - 0.05 - 0.12) / 3)
    assert table.loc[("difference", "B"), ["ci_low", "ci_high"]].tolist() == pytest.approx([diff.lo, diff.hi])
    assert table.loc[("difference", "B"), "method"] == "paired by seed" and table.loc[("difference", "B"), "n"] == 3
    expected = [mean_b.estimate, mean_b.lo, mean_b.hi]
    assert table.loc[("arm", "B"), ["estimate", "ci_low", "ci_high"]].tolist() == pytest.approx(expected)
    assert out.with_suffix(".png").stat().st_size > 0
    text = capsys.readouterr().out
    assert "held-out accuracy at the last step (greedy) (final_eval)" in text
    assert "B - A" in text and "paired by seed" in text


def test_runs_are_grouped_into_arms_by_their_settings_and_unshared_seeds_use_welch(made, capsys):
    config, results = made
    assert main(["compare", "--config", str(config), "--runs", "a0", "a1", "b1", "b2", "--measure", "best_eval"]) == 0
    table = pd.read_csv(results / "compare" / "compare_best_eval.csv")
    assert list(table["arm"]) == ["lr=0.001", "lr=0.002", "lr=0.002"]
    assert table["method"].iloc[-1] == "Welch"  # seeds {0, 1} against {1, 2}
    assert group_by_settings({"x": {"config": {"seed": 0}}, "y": {"config": {"seed": 1}}}) == {"x": ["x", "y"]}
    no_eval = Run(None, "complete", {"seed": 0}, pd.DataFrame({"step": [1], "eval_accuracy": [float("nan")]}))
    assert arm_values({"r": no_eval}, "final_eval") == {}  # no value: left out
    assert arm_values({"r": Run(None, "complete", {"seed": 0}, pd.DataFrame())}, "final_eval") == {}  # nothing to read


@pytest.mark.parametrize("argv, needle", [
    (["--arm", "A=a0,nope", "--arm", "B=b0"], "--arm: run 'nope' has no result"),
    (["--arm", "A"], "--arm: 'A' is not NAME=RUN,RUN"),
    (["--arm", "A=a0,a1"], "a comparison needs two or more"),
    (["--arm", "A=a0", "--arm", "B=b0", "--baseline", "C"], "--baseline: 'C' is not an arm"),
    (["--experiment", "nope"], "--experiment: 'nope' is not an experiment"),
])  # fmt: skip
def test_bad_input_is_one_line_and_writes_nothing(made, capsys, argv, needle):
    config, results = made
    assert main(["compare", "--config", str(config), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
    assert not (results / "compare").exists()


def test_compare_reads_the_one_registry_of_measures(made, capsys):
    from mathrl.analysis.measures import MEASURES

    config, _ = made
    assert main(["compare", "--config", str(config), "--arm", "A=a0,a1", "--arm", "B=b0,b1", "--measure", "nope"]) == 2
    err = capsys.readouterr().err
    assert all(name in err for name in MEASURES)  # every measure a claim reads is offered


def test_an_experiments_settings_are_its_arms(made, capsys):
    config, results = made
    specs = expand_runs(load_config([config]))
    for seed, (small, big) in enumerate([(0.3, 0.5), (0.35, 0.5)]):  # the tiny experiment: batch 8 and 16, seeds 0-1
        for batch, final in ((8, small), (16, big)):
            run_id = f"tiny__batch_size-{batch}__s{seed}"
            write_summary(results, run_id, seed, final, experiment="tiny", settings=specs[run_id].settings.as_dict())
    assert main(["compare", "--config", str(config), "--experiment", "tiny", "--baseline", "batch_size=16"]) == 0
    table = pd.read_csv(results / "compare" / "tiny_final_eval.csv")
    row = table[table["kind"] == "difference"].iloc[0]
    assert (row["arm"], row["baseline"], row["n"]) == ("batch_size=8", "batch_size=16", 2)
    assert row["estimate"] == pytest.approx(((0.3 - 0.5) + (0.35 - 0.5)) / 2)


def test_an_accuracys_interval_stays_within_0_and_1(made, capsys):
    """Two runs an arm: the t interval of arm B's mean accuracy (0.95, 0.55) reaches past 1 and below 0 (t at one
    degree of freedom is 12.7); the table and the console hold it to what an accuracy can take, and say so."""
    config, results = made
    write_summary(results, "c0", 0, 0.95)
    write_summary(results, "c1", 1, 0.55)
    assert mean_interval({0: 0.95, 1: 0.55}).hi > 1 and mean_interval({0: 0.95, 1: 0.55}).lo < 0
    assert main(["compare", "--config", str(config), "--arm", "A=a0,a1,a2", "--arm", "B=c0,c1"]) == 0
    table = pd.read_csv(results / "compare" / "compare_final_eval.csv").set_index(["kind", "arm"])
    assert table.loc[("arm", "B"), ["ci_low", "ci_high"]].tolist() == [0.0, 1.0] and table.loc[("arm", "B"), "clipped"]
    assert table.loc[("difference", "B"), "ci_low"] >= -1 and table.loc[("difference", "B"), "ci_high"] <= 1
    assert not table.loc[("arm", "A"), "clipped"]  # 0.5, 0.6 and 0.7: inside [0, 1] as it is
    text = capsys.readouterr().out
    assert "0.750 [0.000, 1.000]  n=2" in text
    assert "(intervals held within what final_eval can take, 0 to 1, where the t interval of few runs reaches" in text
