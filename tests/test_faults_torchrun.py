"""Fault injection under torchrun: a killed worker ends the job with a clear error, and
torchrun's restarts resume from the snapshot."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pandas as pd
import pytest
from conftest import child_env, copy_tree, metrics, run, run_dir, torchrun_cmd, wait_for

from mathrl.engine import snapshot

pytestmark = pytest.mark.faults


# --- under torchrun -------------------------------------------------------------------------

DDP_SETTINGS = ["steps=4", "snapshot_every=1", "batch_size=16", "group_size=4", "reward=shaped"]


@pytest.fixture(scope="module")
def ddp_reference(tree, tmp_path_factory) -> pd.DataFrame:
    """metrics.csv of an uninterrupted 2-process run (gloo on CPU)."""
    e = copy_tree(tree, tmp_path_factory.mktemp("ddp_reference"))
    done = run(torchrun_cmd(e, "two", *DDP_SETTINGS))
    assert done.returncode == 0, done.stderr[-3000:]
    return metrics(run_dir(e, "two"))


def test_torchrun_worker_killed_ends_the_job_with_a_clear_error(env, background):
    """Both workers pause in step 3; rank 1 is killed by pid: the job ends (no hang) with
    torchrun's failure report naming the rank, its pid and the signal."""
    out, err = env["dir"] / "out.log", env["dir"] / "err.log"
    proc = background.start(
        torchrun_cmd(env, "two", *DDP_SETTINGS), out, child_env(MATHRL_FAULT_SLEEP_AT_STEP="3:300"), err=err
    )
    pid = int(wait_for(proc, err, r"fault: pid (\d+) rank 1 in step 3")[1])
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    rc = proc.wait(timeout=60)
    assert rc != 0 and time.monotonic() - killed < 60
    text = err.read_text()
    assert "ChildFailedError" in text and "mathrl FAILED" in text
    assert re.search(rf"rank\s*: 1 \(local_rank: 1\)\s*\n\s*exitcode\s*: -9 \(pid: {pid}\)", text), text[-3000:]
    assert snapshot.load(run_dir(env, "two") / "snapshot.pt")["step"] == 2
    assert not (run_dir(env, "two") / "summary.json").exists()


def test_torchrun_max_restarts_recovers_from_the_snapshot(env, ddp_reference):
    """Rank 1 kills itself in step 3 of the first attempt; torchrun restarts both workers,
    which resume from step 2's snapshot and end with the uninterrupted run's metrics."""
    cmd = torchrun_cmd(env, "two", *DDP_SETTINGS, extra=("--max-restarts=1",))
    done = run(cmd, env=child_env(MATHRL_FAULT_KILL_RANK_AT_STEP="1:3"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 1 killing itself in step 3" in done.stderr  # the fault did happen
    assert f"resuming two from {run_dir(env, 'two') / 'snapshot.pt'} at step 2" in done.stdout
    pd.testing.assert_frame_equal(metrics(run_dir(env, "two")), ddp_reference, check_exact=True)
    assert json.loads((run_dir(env, "two") / "summary.json").read_text())["resolved"]["world_size"] == 2
