"""A full disk (a file-size limit): the previous snapshot is kept and no results file is
left half-written."""

from __future__ import annotations

import json
import resource
import signal

import pandas as pd
import pytest
from conftest import PY, run, run_dir, run_files, train_cmd

from mathrl.engine import snapshot
from mathrl.pipeline.cli import main

pytestmark = pytest.mark.faults


# --- a full disk ------------------------------------------------------------------------------


def file_size_limit(limit: int):
    """preexec_fn: files of this process may not grow past `limit` bytes (a full disk without
    privileges); writes past it fail with EFBIG instead of killing the process."""

    def pre():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return pre


def test_full_disk_during_a_snapshot_keeps_the_previous_one(env, capsys):
    """A run of 2 steps is complete; extended to 4 on a full disk (files may not grow past
    half a snapshot), its step-4 snapshot cannot be written: a one-line error naming the
    file, and everything on disk is step 2's, whole. With space again it resumes."""
    d = run_dir(env, "r")
    argv = ["train", "--config", str(env["config"]), "--run-id", "r", "snapshot_every=2"]
    assert main([*argv, "steps=2"]) == 0
    before = {name: (d / name).read_bytes() for name in ("snapshot.pt", "metrics.csv", "summary.json", "heldout.csv")}

    full = run(
        train_cmd(env, "r", "snapshot_every=2", "steps=4"), preexec_fn=file_size_limit(len(before["snapshot.pt"]) // 2)
    )
    assert full.returncode == 1, full.stderr
    assert "Traceback" not in full.stderr
    assert (
        full.stderr.strip().splitlines()[-1]
        == f"mathrl train: error: [Errno 27] cannot write {d / 'snapshot.pt'} (File too large); the file in place is"
        " unchanged"
    )
    assert {name: (d / name).read_bytes() for name in before} == before  # step 2's outputs, whole
    assert sorted(run_files(d)) == sorted(before)  # no temporary file left
    assert snapshot.load(d / "snapshot.pt")["step"] == 2

    capsys.readouterr()
    assert main([*argv, "steps=4"]) == 0  # space again: the same command resumes
    assert f"resuming r from {d / 'snapshot.pt'} at step 2" in capsys.readouterr().out
    assert list(pd.read_csv(d / "metrics.csv")["step"]) == [1, 2, 3, 4]


FULL_DISK_WRITES = """
import json, math, sys
from pathlib import Path
from mathrl.pipeline.atomic import atomic_write
from mathrl.engine.trainer import write_metrics
d = Path(sys.argv[1])
errors = []
for write in (lambda: atomic_write(d / "summary.json", b"x" * 200_000),
              lambda: write_metrics(d / "metrics.csv", [{"step": i, "lr": math.pi} for i in range(5000)])):
    try:
        write()
    except OSError as exc:
        errors.append(str(exc))
print(json.dumps(errors))
"""


def test_full_disk_never_leaves_half_a_results_file(tmp_path):
    (tmp_path / "summary.json").write_text('{"status": "complete"}\n')
    done = run([PY, "-c", FULL_DISK_WRITES, str(tmp_path)], preexec_fn=file_size_limit(64 * 1024))
    assert done.returncode == 0, done.stderr
    errors = json.loads(done.stdout)
    assert len(errors) == 2 and all("File too large" in e for e in errors), errors
    assert str(tmp_path / "summary.json") in errors[0] and str(tmp_path / "metrics.csv") in errors[1]
    assert (tmp_path / "summary.json").read_text() == '{"status": "complete"}\n'  # the good one, untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]  # no metrics.csv, no temporary file
