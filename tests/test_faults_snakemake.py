"""Fault injection on the pipeline: Snakemake killed mid-grid, and two Snakemakes on one
directory."""

from __future__ import annotations

import json
import os
import signal

import pandas as pd
import pytest
from conftest import (
    child_env,
    finished_runs,
    gone,
    pipeline_dir,
    planned_runs,
    run,
    snakemake,
    snakemake_cmd,
    wait_for,
)

from mathrl.engine import snapshot
from mathrl.pipeline.cli import main

pytestmark = pytest.mark.faults


# --- Snakemake killed, and two Snakemakes at once -----------------------------------------


def test_killed_snakemake_aggregates_no_partial_run_and_reruns_only_what_is_missing(
    tree, tmp_path, background, monkeypatch
):
    """Run a (2 steps) finishes while b (6 steps, snapshots every 2) is paused in step 4;
    then the whole process group gets SIGKILL. Aggregation before the rerun counts b as
    missing (even with a partial metrics.csv planted in its directory); the rerun, after
    `--unlock`, runs b alone, which resumes from its step-2 snapshot."""
    experiments = {
        "cut": {"fixed": {"snapshot_every": 2}, "variants": {"a": {"steps": 2}, "b": {"steps": 6}}, "seeds": [0]}
    }
    config = pipeline_dir(tree, tmp_path, experiments)
    a, b = (tmp_path / "results" / "runs" / f"cut__{v}__s0" for v in "ab")
    targets = [f"results/runs/cut__{v}__s0/summary.json" for v in "ab"]
    log, b_log = tmp_path / "first.log", tmp_path / "results" / "logs" / "train" / "cut__b__s0.log"
    proc = background.start(snakemake_cmd(tmp_path, config, "--cores", "2", *targets), log,
                            child_env(MATHRL_FAULT_SLEEP_AT_STEP="4:300"),
                            cwd=tmp_path)  # fmt: skip
    wait_for(proc, log, r"Finished job", until=lambda: "cut__a__s0" in finished_runs(log.read_text()))
    b_pid = int(wait_for(proc, b_log, r"fault: pid (\d+) rank 0 in step 4")[1])
    os.killpg(proc.pid, signal.SIGKILL)  # Snakemake and every job: a machine going down
    proc.wait(timeout=30)
    assert gone(b_pid), "the training job survived its Snakemake"
    assert (a / "summary.json").exists() and not (b / "summary.json").exists()
    assert snapshot.load(b / "snapshot.pt")["step"] == 2
    a_summary = (a / "summary.json").stat().st_mtime_ns

    # A partial metrics.csv where b's would be (as a copy cut mid-line would leave it).
    text = (a / "metrics.csv").read_text()
    (b / "metrics.csv").write_text(text[: len(text) * 2 // 3])
    monkeypatch.chdir(tmp_path)  # the config's results directory is relative, as in the pipeline
    assert main(["aggregate", "--config", str(config)]) == 0
    runs = pd.read_csv(tmp_path / "results" / "tables" / "runs.csv").set_index("run_id")
    assert runs.loc["cut__a__s0", "status"] == "complete" and runs.loc["cut__b__s0", "status"] == "missing"
    curves = pd.read_csv(tmp_path / "results" / "tables" / "curves.csv")
    assert set(curves["run_id"]) == {"cut__a__s0"} and len(curves) == 2
    (b / "metrics.csv").unlink()

    locked = run(snakemake_cmd(tmp_path, config, "--cores", "2", *targets), cwd=tmp_path)
    assert locked.returncode != 0 and "cannot be locked" in locked.stdout + locked.stderr  # the killed one's lock
    unlock = run(snakemake_cmd(tmp_path, config, "--unlock", *targets), cwd=tmp_path)
    assert unlock.returncode == 0, unlock.stdout + unlock.stderr
    again = run(snakemake_cmd(tmp_path, config, "--cores", "2", *targets), cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert planned_runs(again.stdout + again.stderr) == {"cut__b__s0"}
    assert (a / "summary.json").stat().st_mtime_ns == a_summary
    assert "resuming cut__b__s0" in b_log.read_text() and "at step 2" in b_log.read_text()
    assert list(pd.read_csv(b / "metrics.csv")["step"]) == [1, 2, 3, 4, 5, 6]


def test_second_snakemake_on_the_same_directory_is_refused_and_the_first_completes(tree, tmp_path, background):
    config = pipeline_dir(tree, tmp_path, {"lock": {"fixed": {"steps": 3}, "seeds": [0]}})
    target = "results/runs/lock__base__s0/summary.json"
    d, release = tmp_path / "results" / "runs" / "lock__base__s0", tmp_path / "release"
    log, run_log = tmp_path / "first.log", tmp_path / "results" / "logs" / "train" / "lock__base__s0.log"
    hook = child_env(MATHRL_FAULT_SLEEP_AT_STEP="2:300", MATHRL_FAULT_RELEASE=str(release))
    first = background.start(snakemake_cmd(tmp_path, config, "--cores", "1", target), log, hook, cwd=tmp_path)
    wait_for(first, run_log, r"fault: pid \d+ rank 0 in step 2")

    second = snakemake(tmp_path, "--cores", "1", target, "--configfile", str(config), timeout=120)
    out = second.stdout + second.stderr
    assert second.returncode != 0 and "cannot be locked" in out, out
    assert "rule train" not in out and run_log.read_text().count("fault:") == 1  # no second job started

    release.touch()
    assert first.wait(timeout=180) == 0, log.read_text()[-3000:]
    assert json.loads((d / "summary.json").read_text())["status"] == "complete"
    assert list(pd.read_csv(d / "metrics.csv")["step"]) == [1, 2, 3]
    assert snapshot.load(d / "snapshot.pt")["step"] == 3
    assert not list((tmp_path / ".snakemake" / "locks").glob("*"))
    again = snakemake(tmp_path, "-n", target, "--configfile", str(config))
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr
