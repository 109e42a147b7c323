"""GPU slot leases (mathrl.pipeline.gpus) and `mathrl launch` (mathrl.pipeline.launch), with faked GPU counts.

Real launches run torchrun on CPU with tiny probe modules instead of `mathrl train`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from mathrl.pipeline import gpus
from mathrl.pipeline.cli import main
from mathrl.pipeline.launch import default_lock_dir, launch

ROOT = Path(__file__).resolve().parent.parent

# Holds a lease in a separate process: prints the leased ids, then sleeps until killed.
HOLDER = (
    "import sys, time; from mathrl.pipeline.gpus import acquire; "
    "l = acquire(int(sys.argv[2]), sys.argv[1], timeout=10); print(','.join(l.ids), flush=True); time.sleep(120)"
)

PROBE = """
import json, os, sys
out, code = sys.argv[1], int(sys.argv[2])
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
with open(f"{out}.{os.environ['RANK']}", "w") as f:
    json.dump({"env": {k: os.environ.get(k) for k in keys}, "argv": sys.argv[1:]}, f)
sys.exit(code)
"""

SLEEPER = """
import os, sys, time
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
"""


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("MATHRL_FAKE_GPUS", "4")
    monkeypatch.setenv("MATHRL_GPU_LOCK_DIR", str(tmp_path / "locks"))


@pytest.fixture
def locks(tmp_path) -> Path:
    return tmp_path / "locks"


@pytest.fixture
def procs():
    """Subprocesses started by a test; whatever is left is killed at the end."""
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait()


def hold_in_process(procs, locks: Path, n: int) -> tuple[subprocess.Popen, list[str]]:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(locks), str(n)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    procs.append(p)
    line = p.stdout.readline().strip()
    assert line, "the holder process got no lease"
    return p, line.split(",")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_until(predicate, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


# --- leases -------------------------------------------------------------------------------


def test_visible_count_is_faked_and_ids_default_to_range(monkeypatch):
    assert gpus.visible_gpu_count() == 4
    assert gpus.visible_gpu_ids() == ["0", "1", "2", "3"]
    monkeypatch.setenv("MATHRL_FAKE_GPUS", "0")
    assert gpus.visible_gpu_count() == 0
    monkeypatch.setenv("MATHRL_FAKE_GPUS", "two")
    with pytest.raises(ValueError, match="MATHRL_FAKE_GPUS"):
        gpus.visible_gpu_count()


def test_a_machine_without_a_gpu_driver_counts_none_without_importing_torch(tmp_path):
    """The launcher of every training job counts GPUs; on a CPU machine that must not cost torch's import."""
    env = {k: v for k, v in os.environ.items() if k not in ("MATHRL_FAKE_GPUS", "CUDA_VISIBLE_DEVICES")}
    probe = (
        "import sys; from mathrl.pipeline import gpus; gpus.GPU_DEVICE_GLOBS = {globs!r}; "
        "print(gpus.visible_gpu_count(), 'torch' in sys.modules)"
    )
    device = tmp_path / "nvidia0"
    device.touch()
    absent = subprocess.run(
        [sys.executable, "-c", probe.format(globs=(str(tmp_path / "absent*"),))],
        env=env,
        capture_output=True,
        text=True,
    )
    assert absent.stdout.split() == ["0", "False"], absent.stderr
    present = subprocess.run(
        [sys.executable, "-c", probe.format(globs=(str(device),))], env=env, capture_output=True, text=True
    )
    assert present.stdout.split()[1:] == ["True"], present.stderr  # a driver's file: torch counts


def test_four_leases_get_distinct_ids_and_a_fifth_waits_for_a_release(locks):
    leases = [gpus.acquire(1, locks, timeout=0) for _ in range(4)]
    ids = [lease.ids[0] for lease in leases]
    assert sorted(ids) == ["0", "1", "2", "3"]
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        gpus.acquire(1, locks, timeout=0.2, poll=0.05)
    assert time.monotonic() - t0 >= 0.2
    freed = leases.pop(2)
    freed.release()
    fifth = gpus.acquire(1, locks, timeout=0.2, poll=0.05)
    assert fifth.ids == [ids[2]]
    for lease in [*leases, fifth]:
        lease.release()


def test_two_runs_per_gpu_share_each_device_and_a_ninth_waits(locks):
    leases = [gpus.acquire(1, locks, timeout=0, per_gpu=2) for _ in range(8)]
    ids = sorted(lease.ids[0] for lease in leases)
    assert ids == ["0", "0", "1", "1", "2", "2", "3", "3"]
    assert (locks / "gpu0.lock").exists() and (locks / "gpu0-1.lock").exists()
    with pytest.raises(TimeoutError, match="2 a GPU"):
        gpus.acquire(1, locks, timeout=0.1, poll=0.05, per_gpu=2)
    for lease in leases:
        lease.release()


def test_a_run_of_two_gpus_takes_one_slot_on_each_of_two_devices(locks, monkeypatch):
    monkeypatch.setenv("MATHRL_FAKE_GPUS", "2")
    with gpus.acquire(1, locks, timeout=0, per_gpu=3) as one:
        with gpus.acquire(2, locks, timeout=0, per_gpu=3) as two:
            assert sorted(two.ids) == ["0", "1"] and one.ids == ["0"]
    with pytest.raises(ValueError, match="at least 1"):
        gpus.acquire(1, locks, per_gpu=0)


def test_one_run_per_gpu_uses_the_same_lock_files_as_before(locks):
    with gpus.acquire(1, locks, timeout=0, per_gpu=1) as lease:
        assert lease.ids == ["0"] and sorted(p.name for p in locks.iterdir()) == ["gpu0.lock"]


def test_lock_file_names_the_holder_pid(locks):
    with gpus.acquire(1, locks) as lease:
        assert lease.ids == ["0"]
        assert (locks / "gpu0.lock").read_text().strip() == str(os.getpid())
    assert lease.ids == [] and lease.fds == []


def test_release_and_context_manager_free_the_slots(locks):
    with gpus.acquire(4, locks, timeout=0):
        with pytest.raises(TimeoutError):
            gpus.acquire(1, locks, timeout=0)
    with gpus.acquire(4, locks, timeout=0) as again:
        assert sorted(again.ids) == ["0", "1", "2", "3"]


def test_a_blocking_acquire_waits_until_a_slot_is_freed(locks):
    all_four = gpus.acquire(4, locks, timeout=0)
    threading.Timer(0.3, all_four.release).start()
    t0 = time.monotonic()
    with gpus.acquire(1, locks, timeout=None, poll=0.05) as lease:
        assert time.monotonic() - t0 >= 0.25
        assert lease.ids == ["0"]


def test_two_of_four_with_one_taken_skips_the_taken_slot(locks, monkeypatch):
    with gpus.acquire(1, locks) as taken:
        with gpus.acquire(2, locks, timeout=0) as pair:
            assert len(set(pair.ids)) == 2 and taken.ids[0] not in pair.ids
    monkeypatch.setenv("MATHRL_FAKE_GPUS", "3")
    first, middle = gpus.acquire(1, locks), gpus.acquire(1, locks)
    assert (first.ids, middle.ids) == (["0"], ["1"])
    first.release()
    with gpus.acquire(2, locks, timeout=0) as other_two:  # the slot in the middle is taken
        assert other_two.ids == ["0", "2"]
    middle.release()


def test_a_partial_set_is_given_back_when_not_enough_are_free(locks):
    with gpus.acquire(1, locks):
        with pytest.raises(TimeoutError):
            gpus.acquire(4, locks, timeout=0.1, poll=0.05)
        with gpus.acquire(3, locks, timeout=0) as rest:  # the three it took were released
            assert sorted(rest.ids) == ["1", "2", "3"]


def test_asking_for_more_than_visible_names_both_numbers(locks):
    with pytest.raises(ValueError, match=r"5.*4"):
        gpus.acquire(5, locks)
    with pytest.raises(ValueError):
        gpus.acquire(-1, locks)


def test_zero_gpus_is_an_empty_lease_forcing_cpu(locks, monkeypatch):
    monkeypatch.setenv("MATHRL_FAKE_GPUS", "0")
    with gpus.acquire(0, locks) as lease:
        assert lease.ids == []
        assert lease.env() == {"CUDA_VISIBLE_DEVICES": ""}


def test_existing_cuda_visible_devices_is_respected(locks, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setenv("MATHRL_FAKE_GPUS", "2")
    assert gpus.visible_gpu_ids() == ["3", "5"]
    with gpus.acquire(1, locks) as a, gpus.acquire(1, locks) as b:
        assert (a.ids, b.ids) == (["3"], ["5"])
    with gpus.acquire(2, locks) as both:
        assert both.ids == ["3", "5"]
        assert both.env() == {"CUDA_VISIBLE_DEVICES": "3,5"}
        assert {p.name for p in locks.iterdir()} == {"gpu3.lock", "gpu5.lock"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpus.visible_gpu_count() == 0


def test_leases_of_another_process_are_respected_and_freed_when_it_is_killed(locks, procs):
    holder, held = hold_in_process(procs, locks, 2)
    assert held == ["0", "1"]
    with gpus.acquire(2, locks, timeout=0) as mine:
        assert mine.ids == ["2", "3"]
        with pytest.raises(TimeoutError):
            gpus.acquire(1, locks, timeout=0.2, poll=0.05)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with gpus.acquire(4, locks, timeout=5, poll=0.05) as everything:  # no stale lock left behind
        assert sorted(everything.ids) == ["0", "1", "2", "3"]


# --- mathrl launch --dry-run --------------------------------------------------------------


def dry_run(capsys, *argv: str) -> tuple[list[str], dict[str, str]]:
    assert main(["launch", "--dry-run", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    env = dict(line.split("=", 1) for line in lines[1:] if not line.startswith("#"))
    return lines[0].split(), env


def test_dry_run_on_cpu(capsys):
    cmd, env = dry_run(capsys, "--gpus", "0", "--threads", "2", "--", "--config", "x", "--run", "r")
    assert cmd[:5] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1"]
    assert cmd[5:] == ["-m", "mathrl", "train", "--config", "x", "--experiment-run", "r"]  # see launch()
    assert env == {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}


def test_dry_run_on_two_of_four_gpus(capsys, locks):
    cmd, env = dry_run(capsys, "--gpus", "2", "--threads", "8", "--torchrun-arg=--max-restarts=2", "--", "--run", "r")
    assert "--nproc_per_node=2" in cmd
    assert cmd[cmd.index("--max-restarts=2") + 1 :] == ["-m", "mathrl", "train", "--experiment-run", "r"]
    ids = env["CUDA_VISIBLE_DEVICES"].split(",")
    assert len(ids) == 2 and len(set(ids)) == 2 and set(ids) <= {"0", "1", "2", "3"}
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "4"
    with gpus.acquire(4, locks, timeout=0):  # a dry run holds nothing afterwards
        pass


def test_dry_run_defaults(capsys, monkeypatch):
    cmd, env = dry_run(capsys, "--", "--run", "r")  # a GPU is visible: one GPU, one worker
    assert "--nproc_per_node=1" in cmd and env["CUDA_VISIBLE_DEVICES"] == "0" and env["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("MATHRL_FAKE_GPUS", "0")
    cmd, env = dry_run(capsys, "--", "--run", "r")  # none visible: CPU
    assert "--nproc_per_node=1" in cmd and env["CUDA_VISIBLE_DEVICES"] == ""


def test_dry_run_with_busy_slots_says_a_launch_would_wait(capsys, locks):
    with gpus.acquire(4, locks):
        assert main(["launch", "--dry-run", "--gpus", "1", "--", "--run", "r"]) == 0
    out = capsys.readouterr().out
    assert "would wait" in out and "CUDA_VISIBLE_DEVICES=?" in out


def test_launch_usage_errors_exit_2(capsys):
    assert main(["launch", "--dry-run", "--gpus", "5", "--", "--run", "r"]) == 2
    err = capsys.readouterr().err
    assert "5" in err and "4" in err
    assert main(["launch", "--dry-run", "--gpus", "1", "--threads", "0", "--", "--run", "r"]) == 2


def test_default_lock_dir_is_shared_and_outside_results(monkeypatch):
    assert default_lock_dir() == Path(os.environ["MATHRL_GPU_LOCK_DIR"])
    monkeypatch.delenv("MATHRL_GPU_LOCK_DIR")
    monkeypatch.setenv("USER", "alice")
    assert default_lock_dir() == Path("/tmp/mathrl-gpu-locks-alice")
    monkeypatch.setenv("SLURM_JOB_ID", "42")  # SLURM may renumber devices per job
    assert default_lock_dir() == Path("/tmp/mathrl-gpu-locks-alice-slurm42")


# --- real launches (torchrun on CPU, probe modules) ----------------------------------------


@pytest.fixture
def probe_path(tmp_path, monkeypatch) -> Path:
    (tmp_path / "probe_mod.py").write_text(textwrap.dedent(PROBE))
    (tmp_path / "sleeper_mod.py").write_text(textwrap.dedent(SLEEPER))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    return tmp_path


def test_launch_runs_workers_with_their_gpus_and_threads(probe_path, locks):
    out = probe_path / "probe"
    rc = launch([str(out), "0"], gpus=2, threads=4, module=["probe_mod"], timeout=5)
    assert rc == 0
    seen = [json.loads((probe_path / f"probe.{rank}").read_text()) for rank in (0, 1)]
    for rank, s in enumerate(seen):
        assert s["env"]["RANK"] == str(rank) and s["env"]["WORLD_SIZE"] == "2"
        assert s["env"]["OMP_NUM_THREADS"] == s["env"]["MKL_NUM_THREADS"] == "2"
        assert s["argv"] == [str(out), "0"]
    ids = seen[0]["env"]["CUDA_VISIBLE_DEVICES"].split(",")
    assert seen[1]["env"]["CUDA_VISIBLE_DEVICES"] == seen[0]["env"]["CUDA_VISIBLE_DEVICES"] and len(set(ids)) == 2
    with gpus.acquire(4, locks, timeout=0):  # the lease ended with the launch
        pass


def test_launch_on_cpu_propagates_a_failing_exit_code(probe_path):
    out = probe_path / "probe"
    rc = launch([str(out), "3"], gpus=0, threads=2, module=["probe_mod"])
    assert rc != 0
    s = json.loads((probe_path / "probe.0").read_text())
    assert s["env"] | {"LOCAL_RANK": None} == {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": None,
                                               "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "2",
                                               "MKL_NUM_THREADS": "2"}  # fmt: skip


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_killed_launch_leaves_no_worker_and_frees_its_gpu(probe_path, locks, procs, monkeypatch, sig):
    """Snakemake stops a job with SIGTERM (forwarded); SIGKILL reaches torchrun as a parent-death signal."""
    monkeypatch.setenv("MATHRL_FAKE_GPUS", "1")
    pidfile = probe_path / "worker.pid"
    code = (
        f"import sys; from mathrl.pipeline.launch import launch; sys.exit(launch([{str(pidfile)!r}], gpus=1,"
        " module=['sleeper_mod']))"
    )
    launcher = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.DEVNULL)
    procs.append(launcher)
    assert wait_until(pidfile.exists, 30), "the worker never started"
    worker = int(pidfile.read_text())
    assert alive(worker)
    with pytest.raises(TimeoutError):  # the running job holds the only GPU
        gpus.acquire(1, locks, timeout=0)
    launcher.send_signal(sig)
    # torchrun signals its workers' process group first, then waits for them; so the worker goes
    # at once, while torchrun itself may take up to twice its 30 s shutdown timeout to return:
    # a signal landing inside Popen.poll() (CPython takes the waitpid lock before its `try`)
    # leaves the lock held, and each of torchrun's waits then runs out its timeout.
    assert wait_until(lambda: not alive(worker), 30), "the training worker outlived its launcher"
    rc = launcher.wait(timeout=90)
    if sig == signal.SIGTERM:  # forwarded: the launcher waited for torchrun and passed on its failure
        assert rc > 0
        gpus.acquire(1, locks, timeout=0).release()
    else:
        assert rc == -signal.SIGKILL
    with gpus.acquire(1, locks, timeout=30, poll=0.05) as lease:
        assert lease.ids == ["0"]


def test_torchrun_auto_runs_a_lone_cpu_worker_directly(capsys, monkeypatch):
    """auto skips torchrun's agent only for one CPU worker; GPUs always go through torchrun."""
    from mathrl.pipeline.cli import main

    monkeypatch.setenv("MATHRL_FAKE_GPUS", "2")
    assert main(["launch", "--dry-run", "--gpus", "0", "--torchrun", "auto", "--", "--run", "r"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "torch.distributed.run" not in first and first.endswith("-m mathrl train --experiment-run r")
    assert main(["launch", "--dry-run", "--gpus", "1", "--torchrun", "auto", "--", "--run", "r"]) == 0
    assert "--nproc_per_node=1" in capsys.readouterr().out.splitlines()[0]
    assert main(["launch", "--dry-run", "--gpus", "0", "--", "--run", "r"]) == 0
    assert "torch.distributed.run" in capsys.readouterr().out.splitlines()[0]


# --- a group of runs between launches running at once (--parallel) -------------------------


def test_runs_are_dealt_out_in_turn_and_every_other_argument_kept():
    from mathrl.pipeline.launch import run_shares

    args = ["--config", "c", "--experiment-run", "a", "--run=b", "--experiment-run", "c", "--run-logs", "--on-mismatch",
            "restart"]  # fmt: skip
    tail = ["--run-logs", "--on-mismatch", "restart"]
    assert run_shares(args, 2) == [
        ["--config", "c", "--experiment-run", "a", "--experiment-run", "c", *tail],
        ["--config", "c", "--experiment-run", "b", *tail],
    ]
    assert [share[3] for share in run_shares(args, 5)] == ["a", "b", "c"]  # never more launches than runs
    assert run_shares(args, 1) == [args]
    assert run_shares(["--config", "c", "--run", "a"], 4) == [["--config", "c", "--run", "a"]]
    assert run_shares(["--run", "a", "--run"], 2) == [["--run", "a", "--run"]]  # train names the missing run


def test_parallel_auto_counts_cpus_per_run_and_gpu_slots(monkeypatch):
    from mathrl.pipeline import launch as launcher
    from mathrl.pipeline.launch import parallel_count

    monkeypatch.setattr(launcher, "usable_cpus", lambda: 16)
    assert parallel_count("auto", threads=1, gpus=0) == 16
    assert parallel_count("auto", threads=3, gpus=0) == 5
    assert parallel_count("auto", threads=32, gpus=0) == 1
    assert parallel_count("auto", threads=1, gpus=1) == 4  # MATHRL_FAKE_GPUS=4, a slot each
    assert parallel_count("auto", threads=1, gpus=2, runs_per_gpu=3) == 6
    assert parallel_count("auto", threads=1, gpus=None) == 4  # a GPU is visible: one each
    monkeypatch.setenv("MATHRL_FAKE_GPUS", "0")
    assert parallel_count("auto", threads=2, gpus=None) == 8
    assert parallel_count("3", threads=1, gpus=0) == 3
    for bad in ("0", "-1", "two"):
        with pytest.raises(ValueError, match="--parallel"):
            parallel_count(bad, threads=1, gpus=0)


def test_each_launch_of_a_group_gets_the_same_options_and_its_share(capfd, locks):
    argv = ["launch", "--gpus", "0", "--threads", "2", "--runs-per-gpu", "3", "--torchrun", "auto", "--fork-server",
            "auto", "--torchrun-arg=--max-restarts=2", "--lock-dir", str(locks), "--parallel", "2", "--dry-run", "--",
            "--config", "c", "--run", "a", "--run", "b", "--run", "c", "--run-logs"]  # fmt: skip
    from mathrl.pipeline.cli import build_parser, launch_options

    args = build_parser().parse_args(argv)
    again = build_parser().parse_args(["launch", *launch_options(args), "--", "x"])
    assert {**vars(again), "parallel": "2", "train_args": args.train_args} == vars(args)  # no option lost
    assert main(argv) == 0
    lines = [line for line in capfd.readouterr().out.splitlines() if " -m mathrl train " in line]
    shares = sorted(line.split(" -m mathrl train ", 1)[1] for line in lines)
    assert shares == ["--config c --experiment-run a --experiment-run c --run-logs",
                      "--config c --experiment-run b --run-logs"]  # fmt: skip
    assert main(["launch", "--parallel", "0", "--dry-run", "--", "--run", "a", "--run", "b"]) == 2


def test_the_launches_run_at_once_and_the_first_failure_is_the_exit_code(tmp_path):
    from mathrl.pipeline.launch import run_all

    # Each waits for the other's file: only launches running at once both finish.
    meet = ("import os, sys, time; open(sys.argv[1], 'w').close(); t = time.time()\n"
            "while not os.path.exists(sys.argv[2]) and time.time() - t < 30: time.sleep(0.05)\n"
            "sys.exit(int(sys.argv[3]) if os.path.exists(sys.argv[2]) else 99)")  # fmt: skip
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert run_all([[sys.executable, "-c", meet, a, b, "0"], [sys.executable, "-c", meet, b, a, "0"]]) == 0
    for name in (a, b):
        os.remove(name)
    assert run_all([[sys.executable, "-c", meet, a, b, "0"], [sys.executable, "-c", meet, b, a, "3"]]) == 3
    assert run_all([[sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]]) == 143


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_killed_group_of_launches_leaves_none_running(tmp_path, procs, sig):
    """DVC stops a stage with SIGTERM (forwarded to every launch); SIGKILL reaches them as a parent-death signal."""
    pidfiles = [tmp_path / "one.pid", tmp_path / "two.pid"]
    cmds = [[sys.executable, "-c", SLEEPER, str(pidfile)] for pidfile in pidfiles]
    code = f"import sys; from mathrl.pipeline.launch import run_all; sys.exit(run_all({cmds!r}))"
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    procs.append(parent)
    assert wait_until(lambda: all(p.exists() for p in pidfiles), 30), "the launches never started"
    children = [int(p.read_text()) for p in pidfiles]
    parent.send_signal(sig)
    assert wait_until(lambda: not any(alive(pid) for pid in children), 30), "a launch outlived the group"
    assert parent.wait(timeout=30) == (128 + signal.SIGTERM if sig == signal.SIGTERM else -signal.SIGKILL)
