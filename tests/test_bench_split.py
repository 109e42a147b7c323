"""bench.split on synthetic results trees: the training jobs' seconds by part."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.split import split, split_table

HEADER = "step,eval_accuracy,seconds,sample_seconds,update_seconds"


def job(results: Path, rule: str, name: str, seconds: float) -> None:
    path = results / "benchmarks" / rule / f"{name}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:0{int(seconds)}\t30.0\n")


def run(results: Path, name: str, rows: list[str], summary: dict, header: str) -> None:
    d = results / "runs" / name
    d.mkdir(parents=True)
    (d / "metrics.csv").write_text("\n".join([header, *rows]) + "\n")
    (d / "summary.json").write_text(json.dumps(summary))


def test_split_of_a_tree_with_eval_seconds(tmp_path):
    header = HEADER + ",eval_seconds"
    job(tmp_path, "train", "r1", 4.0)
    run(tmp_path, "r1", ["1,nan,0.5,0.1,0.3,nan", "2,0.4,0.9,0.1,0.3,0.4"],
        {"run_seconds": 3.0, "initial": {"eval_seconds": 0.25}}, header)  # fmt: skip
    job(tmp_path, "train", "r2", 2.0)
    run(tmp_path, "r2", ["1,0.5,0.6,0.2,0.2,0.1"],
        {"run_seconds": 1.5, "initial": {"eval_seconds": 0.0}, "pass_at_k_seconds": 0.3}, header)  # fmt: skip
    job(tmp_path, "sft", "add", 10.0)
    s = split(tmp_path)
    t = s["train"]
    assert t["jobs"] == 2 and t["job_seconds"] == pytest.approx(6.0)
    assert t["rl_steps"] == pytest.approx(0.8 + 0.4)
    assert t["evaluation"] == pytest.approx(0.4 + 0.25 + 0.1 + 0.3)  # pass@k's sampling is an evaluation
    assert t["run_setup"] == pytest.approx((3.0 - 0.8 - 0.65) + (1.5 - 0.4 - 0.1 - 0.3))
    assert t["outside_run"] == pytest.approx(1.0 + 0.5)
    parts = t["rl_steps"] + t["evaluation"] + t["run_setup"] + t["outside_run"]
    assert parts == pytest.approx(t["job_seconds"])
    assert t["outside_share"] == pytest.approx((t["run_setup"] + t["outside_run"]) / 6.0)
    assert s["rules"] == {"train": 6.0, "sft": 10.0} and s["total"] == pytest.approx(16.0)
    text = split_table(s)
    assert "train: run setup" in text and "sft (1 jobs)" in text and f"{t['outside_share']:.1%}" in text


def test_a_job_that_trained_a_settings_seeds_splits_over_its_runs(tmp_path):
    header = HEADER + ",eval_seconds"
    job(tmp_path, "train", "exp__a", 5.0)  # one job: the runs exp__a__s0 and exp__a__s1, one after another
    for seed in (0, 1):
        run(tmp_path, f"exp__a__s{seed}", ["1,0.4,0.9,0.1,0.3,0.4"],
            {"run_seconds": 2.0, "initial": {"eval_seconds": 0.1}}, header)  # fmt: skip
    run(tmp_path, "exp__ab__s0", ["1,0.4,0.9,0.1,0.3,0.4"], {"run_seconds": 9.0}, header)  # another setting's run
    t = split(tmp_path)["train"]
    assert (t["jobs"], t["runs"]) == (1, 2) and t["job_seconds"] == pytest.approx(5.0)
    assert t["rl_steps"] == pytest.approx(2 * 0.4) and t["evaluation"] == pytest.approx(2 * 0.5)
    assert t["run_setup"] == pytest.approx(2 * (2.0 - 0.4 - 0.5)) and t["outside_run"] == pytest.approx(5.0 - 4.0)


def test_split_of_an_older_tree_lumps_what_it_did_not_record(tmp_path):
    job(tmp_path, "train", "r1", 4.0)
    run(tmp_path, "r1", ["1,nan,0.5,0.1,0.3", "2,0.4,0.9,0.1,0.3"], {"wall_seconds": 1.4}, HEADER)
    t = split(tmp_path)["train"]
    assert t["evaluation"] == pytest.approx(0.5)  # the evaluating step's seconds beyond sampling and update
    assert t["setup_and_outside"] == pytest.approx(4.0 - 0.8 - 0.5)
    assert "run_setup" not in t and "outside_run" not in t
    assert math.isclose(t["outside_steps_and_evaluations"], t["setup_and_outside"])


def test_alternate_exports_a_commit_with_another_commits_config(tmp_path):
    """bench.pipeline --alternate runs `git archive` checkouts; --config-from gives both one config."""
    import subprocess

    from bench.pipeline import ROOT, alternate_table, export

    older = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD~1"], cwd=ROOT, capture_output=True, text=True)
    if older.returncode != 0:
        pytest.skip("a checkout with one commit of history")
    first = older.stdout.strip()
    head = export("HEAD", tmp_path / "head", first)
    assert (head / "mathrl" / "engine" / "eval_cache.py").is_file()
    wanted = subprocess.run(
        ["git", "show", f"{first}:config/config.yaml"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    assert (head / "config" / "config.yaml").read_bytes() == wanted
    text = alternate_table([{"version": "old", "rev": first[:7], "round": 0, "wall_s": 10.0, "job_seconds": 20.0,
                             "train_job_seconds": 15.0, "returncode": 0}])  # fmt: skip
    assert "train job seconds" in text and "20.0" in text


def test_abba_schedule_swaps_the_pair_every_other_round():
    from bench.pipeline import schedule

    assert schedule(3, "abba") == [(0, "old"), (0, "new"), (1, "new"), (1, "old"), (2, "old"), (2, "new")]
    assert schedule(2, "alternating") == [(0, "old"), (0, "new"), (1, "old"), (1, "new")]
    with pytest.raises(ValueError, match="abba, alternating"):
        schedule(1, "random")


def test_pooled_ratio_counts_only_the_stages_every_pipeline_ran():
    from bench.pipeline import pooled_ratio, pooled_ratio_line

    def rec(version, **stages):
        return {"version": version, "stages": {k: {"job_seconds": v} for k, v in stages.items()}}

    records = [rec("old", train=100.0, sft=20.0, report=5.0), rec("new", train=60.0, sft=20.0),
               rec("new", train=70.0, sft=10.0, report=1.0), rec("old", train=80.0, sft=0.0, report=5.0)]  # fmt: skip
    ratio, common = pooled_ratio(records)
    assert common == ["sft", "train"]
    assert ratio == pytest.approx((60 + 20 + 70 + 10) / (100 + 20 + 80 + 0))
    assert "left out: report" in pooled_ratio_line(records)
