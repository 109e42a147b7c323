"""One writer per run directory (mathrl.pipeline.rundir): two `mathrl train` of one run id at once, the pipeline's job
and a
run by hand of the same id, temporary files that are each process's own, and a directory that cannot be written."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time

import pandas as pd
import pytest
from conftest import PY, child_env, pipeline_dir, run, run_dir, run_files, snakemake_cmd, train_cmd, wait_for

from mathrl.engine import snapshot
from mathrl.pipeline import atomic, rundir
from mathrl.pipeline.errors import RunDirError

pytestmark = pytest.mark.faults


def first_to_exit(procs: list[subprocess.Popen], timeout: float = 180) -> subprocess.Popen:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                return proc
        time.sleep(0.1)
    raise AssertionError("neither process ended")


def test_two_trainings_of_one_run_id_at_once_one_refuses_and_the_others_files_are_whole(env, background):
    """Both start together, with other learning rates; the one that takes the lock pauses in step 2 (a test hook).
    The other refuses at once with exit 2, naming the holder's pid and host, while the holder still holds it; the
    holder then ends with its own run, whole."""
    d, release = run_dir(env, "twin"), env["dir"] / "release"
    hook = child_env(MATHRL_FAULT_SLEEP_AT_STEP="2:300", MATHRL_FAULT_RELEASE=str(release))
    lrs = {"a": 3e-4, "b": 1e-3}
    procs = {
        name: background.start(
            train_cmd(env, "twin", "steps=3", "snapshot_every=1", f"lr={lr}"), env["dir"] / f"{name}.log", hook
        )
        for name, lr in lrs.items()
    }
    refused = first_to_exit(list(procs.values()))
    name = next(n for n, p in procs.items() if p is refused)
    holder_name = "b" if name == "a" else "a"
    holder = procs[holder_name]
    assert refused.returncode == 2 and holder.poll() is None  # it did not wait for the holder to end
    err = (env["dir"] / f"{name}.log").read_text().strip().splitlines()
    assert err[-1] == (
        f"mathrl train: error: {d} is being written by pid {holder.pid} on host {socket.gethostname()}"
        f" since {err[-1].split(' since ')[1].split(';')[0]}; one process writes a run directory at a "
        "time: wait for it to end, or name this run otherwise (--run-id NAME)"
    )
    assert "Step 1/" not in "\n".join(err)  # it trained nothing

    release.touch()
    assert holder.wait(timeout=180) == 0
    summary = json.loads((d / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["config"]["lr"] == lrs[holder_name]
    # what a reader checks the files against (results.run_files): every file written before summary.json
    assert summary["files"] == {name: atomic.record((d / name).read_bytes()) for name in ("metrics.csv", "heldout.csv")}
    assert list(pd.read_csv(d / "metrics.csv")["step"]) == [1, 2, 3]
    assert snapshot.load(d / "snapshot.pt")["step"] == 3
    assert list(run_files(d)) == ["heldout.csv", "metrics.csv", "snapshot.pt", "snapshot.pt.prev", "summary.json"]


def test_the_pipelines_job_and_a_run_by_hand_of_the_same_id_meet_the_same_lock(tree, tmp_path, background):
    """The pipeline's job (Snakemake, `mathrl launch`, the fork server) trains a run and pauses in step 2; the same
    run trained by hand is refused with exit 2 naming the job's process; the job then completes its run, whole."""
    config = pipeline_dir(tree, tmp_path, {"lock": {"fixed": {"steps": 3}, "seeds": [0]}})
    d, release = tmp_path / "results" / "runs" / "lock__base__s0", tmp_path / "release"
    log, run_log = tmp_path / "pipeline.log", tmp_path / "results" / "logs" / "train" / "lock__base__s0.log"
    hook = child_env(MATHRL_FAULT_SLEEP_AT_STEP="2:300", MATHRL_FAULT_RELEASE=str(release))
    target = "results/runs/lock__base__s0/summary.json"
    job = background.start(snakemake_cmd(tmp_path, config, "--cores", "1", target), log, hook, cwd=tmp_path)
    pid = int(wait_for(job, run_log, r"fault: pid (\d+) rank 0 in step 2")[1])

    by_hand = run([PY, "-m", "mathrl", "train", "--config", str(config), "--run", "lock__base__s0"], cwd=tmp_path)
    assert by_hand.returncode == 2, by_hand.stderr
    assert f"{d.relative_to(tmp_path)} is being written by pid {pid} on host {socket.gethostname()}" in by_hand.stderr
    assert len(by_hand.stderr.strip().splitlines()) == 1

    release.touch()
    assert job.wait(timeout=180) == 0, log.read_text()[-3000:]
    assert json.loads((d / "summary.json").read_text())["status"] == "complete"
    assert list(pd.read_csv(d / "metrics.csv")["step"]) == [1, 2, 3]


def test_temporary_files_are_each_processs_own(tmp_path):
    """A snapshot's write leaves the temporary files of other processes alone; the next holder of the directory's
    lock removes those of processes that are gone (killed halfway through a write), never a live one's; a second
    holder is refused."""
    live = subprocess.Popen(["sleep", "60"])
    gone = subprocess.Popen(["true"])
    gone.wait()
    try:
        theirs, dead = tmp_path / f".snapshot.pt.tmp{live.pid}", tmp_path / f".snapshot.pt.tmp{gone.pid}"
        for path in (theirs, dead):
            path.write_bytes(b"half a snapshot")
        snapshot.save(tmp_path / "snapshot.pt", {"step": 1})
        assert theirs.exists() and dead.exists() and snapshot.load(tmp_path / "snapshot.pt") == {"step": 1}
        with rundir.hold(tmp_path):
            assert theirs.exists() and not dead.exists()
            with pytest.raises(RunDirError, match=f"is being written by pid {os.getpid()} on host"):
                rundir.take(tmp_path)  # another open of the lock file: another holder, as a second process is
        assert (tmp_path / ".lock").read_text().startswith(f"pid {os.getpid()} on host {socket.gethostname()} since")
        os.close(rundir.take(tmp_path))  # released with the block
    finally:
        live.kill()
        live.wait()


def make_unwritable(path) -> None:
    """`path` made unwritable, as a user's read-only or immutable folder: mode 0555, or (root, whom modes do not
    stop) the immutable attribute; skipped where neither stops a write."""
    if os.geteuid() != 0:
        path.chmod(0o555)
    else:
        subprocess.run(["chattr", "+i", str(path)], capture_output=True)
    try:
        (path / "probe").touch()
    except OSError:
        return
    (path / "probe").unlink()
    pytest.skip("cannot make a directory unwritable here")


def make_writable(path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)
    path.chmod(0o755)


def test_an_unwritable_results_folder_is_refused_before_the_first_step(env):
    runs = env["results"] / "runs"
    runs.mkdir()
    make_unwritable(runs)
    try:
        done = run(train_cmd(env, "r", "steps=2"))
    finally:
        make_writable(runs)
    why = "Operation not permitted" if os.geteuid() == 0 else "Permission denied"  # immutable, or mode 0555
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"mathrl train: error: {runs / 'r'} cannot be written ({why}), so the run would train and then fail to save: "
        "make it writable, or write the results elsewhere (--set results=DIR, or --out DIR)"
    ]
    assert "Step" not in done.stdout and not list(runs.iterdir())
