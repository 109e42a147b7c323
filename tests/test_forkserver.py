"""The fork server (mathrl/pipeline/forkserver.py): a run forked from it equals a fresh interpreter's,
exit statuses and output come back, signals and deaths propagate, and it is used only
where it is safe."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from mathrl.pipeline import forkserver
from tests.conftest import ROOT
from tests.test_launch import alive, wait_until


@pytest.fixture
def sockets(monkeypatch):
    """A private socket directory (short: Unix socket paths are limited to 107 bytes) whose
    servers exit after 2 idle seconds, and are killed at teardown in any case."""
    path = Path(tempfile.mkdtemp(prefix="mfs-", dir="/tmp"))
    monkeypatch.setenv("MATHRL_FORK_SERVER_DIR", str(path))
    monkeypatch.setenv("MATHRL_FORK_SERVER_IDLE", "2")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("MATHRL_NO_FORK_SERVER", raising=False)
    yield path
    for pid in server_pids(path):
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def server_pids(sock_dir: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            b"mathrl.pipeline.forkserver" in cmd
            and any(str(sock_dir).encode() in part for part in cmd)
            and alive(int(proc.name))
        ):
            pids.append(int(proc.name))
    return [pid for pid in pids if parent(pid) not in pids]  # forked runs share the server's command line


def parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def launch_cmd(config: Path, *train_args: str, fork: str = "auto") -> list[str]:
    return [sys.executable, "-m", "mathrl", "launch", "--gpus", "0", "--threads", "1", "--torchrun", "auto",
            "--fork-server", fork, "--", "--config", str(config), *train_args]  # fmt: skip


def test_a_forked_run_equals_a_fresh_interpreter_run(run_env, sockets):
    results = run_env["results"]
    for name, _ in (("fresh", "off"), ("forked", "auto"), ("forked_again", "auto")):
        out = subprocess.run(
            launch_cmd(run_env["config"], "--run-id", name, "steps=3"), cwd=ROOT, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        assert f"run {name}: complete" in out.stdout  # the child's stdout is the launcher's
    assert server_pids(sockets), "no fork server was started"
    fresh = (results / "runs" / "fresh" / "metrics.csv").read_text().splitlines()
    for name in ("forked", "forked_again"):
        forked = (results / "runs" / name / "metrics.csv").read_text().splitlines()
        # every column but the timings
        strip = lambda lines: [",".join(ln.split(",")[:15]) for ln in lines]  # noqa: E731
        assert strip(forked) == strip(fresh)


def test_exit_status_and_error_message_come_back(run_env, sockets):
    out = subprocess.run(launch_cmd(run_env["config"], "algorithm=sarsa"), cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2
    assert "run.algorithm: 'sarsa' is not allowed" in out.stderr
    assert server_pids(sockets)


def test_the_child_works_in_the_jobs_directory_and_streams(run_env, sockets, tmp_path):
    # (The job's environment reaching the child is shown by the fault hooks below: the
    # server never had MATHRL_FAULT_SLEEP_AT_STEP, the child acts on it.)
    out = subprocess.run(launch_cmd(run_env["config"], "--run-id", "here", "--out", "rel_out", "steps=1"),
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                         text=True)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "rel_out" / "summary.json").is_file()  # relative to the launcher's directory
    assert server_pids(sockets)
    probe = subprocess.run([sys.executable, "-c", "import sys; from mathrl.pipeline import forkserver; "
                            "sys.exit(forkserver.run(['runs', '--config', sys.argv[1]]))", str(run_env["config"])],
                           cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert probe.returncode == 0 and "tiny__batch_size-8__s0" in probe.stdout, probe.stderr


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_launcher_leaves_no_run_behind(run_env, sockets, sig):
    env = {**os.environ, "MATHRL_FAULT_SLEEP_AT_STEP": "2:120"}
    proc = subprocess.Popen(launch_cmd(run_env["config"], "--run-id", "cut", "steps=4"), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        line = ""
        deadline = time.monotonic() + 60
        while "fault: pid" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        pid = int(re.search(r"fault: pid (\d+)", line)[1])
        assert pid != proc.pid and alive(pid)
        proc.send_signal(sig)
        rc = proc.wait(timeout=30)
        if sig == signal.SIGTERM:  # forwarded: the run ended by it and its status came back
            assert rc == 128 + signal.SIGTERM
        assert wait_until(lambda: not alive(pid), forkserver.KILL_GRACE + 10), "the forked run outlived its launcher"
        assert not (run_env["results"] / "runs" / "cut" / "summary.json").exists()
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_server_takes_its_runs_with_it_and_the_next_launch_starts_a_new_one(run_env, sockets):
    env = {**os.environ, "MATHRL_FAULT_SLEEP_AT_STEP": "2:120"}
    proc = subprocess.Popen(launch_cmd(run_env["config"], "--run-id", "orphan", "steps=4"), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        line = ""
        while "fault: pid" not in line:
            line = proc.stderr.readline()
        pid = int(re.search(r"fault: pid (\d+)", line)[1])
        (server,) = server_pids(sockets)
        os.kill(server, signal.SIGKILL)
        assert wait_until(lambda: not alive(pid), 20), "the run outlived its server"
        assert proc.wait(timeout=30) != 0  # the launcher says the run ended with its server
    finally:
        proc.kill()
        proc.wait()
    out = subprocess.run(
        launch_cmd(run_env["config"], "--run-id", "after", "steps=1"), cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert server_pids(sockets) and server not in server_pids(sockets)


def test_an_idle_server_exits_and_removes_its_socket(run_env, sockets):
    subprocess.run(
        launch_cmd(run_env["config"], "--run-id", "once", "steps=1"), cwd=ROOT, check=True, capture_output=True
    )
    assert list(sockets.glob("*.sock")) and server_pids(sockets)
    assert wait_until(lambda: not server_pids(sockets), 20)
    assert not list(sockets.glob("*.sock"))


def test_editing_the_code_changes_the_server_key(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("x = 1\n")
    before = forkserver.code_key(pkg)
    assert forkserver.code_key(pkg) == before
    (pkg / "a.py").write_text("x = 22\n")
    assert forkserver.code_key(pkg) != before
    (pkg / "b.py").write_text("")
    assert len({before, forkserver.code_key(pkg)}) == 2


def test_used_only_for_a_cpu_run_outside_slurm():
    assert forkserver.enabled(0, {})
    assert not forkserver.enabled(1, {})
    assert not forkserver.enabled(0, {"SLURM_JOB_ID": "42"})
    assert not forkserver.enabled(0, {"MATHRL_NO_FORK_SERVER": "1"})


def test_a_socket_directory_others_can_enter_is_refused_and_the_run_starts_the_ordinary_way(
    run_env, monkeypatch, tmp_path
):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv("MATHRL_FORK_SERVER_DIR", str(shared))
    with pytest.raises(PermissionError, match="not a private directory"):
        forkserver.socket_dir()
    assert forkserver.run(["runs", "--config", str(run_env["config"])]) is None
    out = subprocess.run(launch_cmd(run_env["config"], "--run-id", "plain", "steps=1"), cwd=ROOT,
                         env={**os.environ, "MATHRL_FORK_SERVER_DIR": str(shared)}, capture_output=True,
                         text=True)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert not list(shared.iterdir())


def test_the_cpu_kernels_are_part_of_the_server_key(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("x = 1\n")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    pinned = forkserver.code_key(pkg)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    assert forkserver.code_key(pkg) != pinned
