"""Fault injection: a training process killed with SIGKILL (at a chosen instant, through
the test-only hooks of `mathrl.pipeline.faults`) resumes from its last complete snapshot to the
metrics an uninterrupted run writes."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pandas as pd
import pytest
from conftest import KILL_SETTINGS, child_env, metrics, run, run_dir, run_files, train_cmd, wait_for

from mathrl.engine import snapshot

pytestmark = pytest.mark.faults


# --- a training process killed with SIGKILL ------------------------------------------------


@pytest.mark.parametrize(
    "hook, marker",
    [
        ({"MATHRL_FAULT_SLEEP_AT_STEP": "3:300"}, r"fault: pid (\d+) rank 0 in step 3 before the optimizer step"),
        ({"MATHRL_FAULT_SLEEP_IN_SNAPSHOT": "3:300"}, r"fault: pid (\d+) rank 0 wrote half of (\S+);"),
    ],
    ids=["mid-step", "mid-snapshot"],
)
def test_kill_9_resumes_from_the_last_complete_snapshot_to_identical_metrics(env, reference, background, hook, marker):
    d, log = run_dir(env, "r"), env["dir"] / "killed.log"
    proc = background.start(train_cmd(env, "r", *KILL_SETTINGS), log, child_env(**hook))
    m = wait_for(proc, log, marker)
    assert int(m[1]) == proc.pid
    if "MATHRL_FAULT_SLEEP_IN_SNAPSHOT" in hook:  # half of step 3's snapshot is on disk, under a temporary name
        half = Path(m[2])
        assert half.parent == d and 0 < half.stat().st_size < (d / "snapshot.pt").stat().st_size
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert snapshot.load(d / "snapshot.pt")["step"] == 2  # the last complete one
    assert not (d / "metrics.csv").exists() and not (d / "summary.json").exists()

    again = run(train_cmd(env, "r", *KILL_SETTINGS))  # the same command, run again
    assert again.returncode == 0, again.stderr
    assert f"resuming r from {d / 'snapshot.pt'} at step 2" in again.stdout
    assert "unusable" not in again.stderr  # the half-written file was never a candidate
    pd.testing.assert_frame_equal(metrics(d), reference, check_exact=True)
    assert list(run_files(d)) == [  # the killed process's half-written file removed
        "heldout.csv",
        "metrics.csv",
        "snapshot.pt",
        "snapshot.pt.prev",
        "summary.json",
    ]
