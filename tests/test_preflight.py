"""What `mathrl train` checks before its first step, against the process's own limits, and the one-line messages:
memory within `ulimit -v` (RLIMIT_AS) and a cgroup's limit, an allocation that fails anyway, threads against the CPUs
the process may use, a usage error, a missing start checkpoint."""

from __future__ import annotations

import copy
import resource

import pytest

from mathrl.pipeline import limits
from mathrl.pipeline.cli import check_threads, main
from tests.conftest import PY, TINY, child_env, run, write_config


@pytest.fixture
def config(tmp_path):
    return write_config(tmp_path / "c.yaml", {**copy.deepcopy(TINY), "results": str(tmp_path / "results")})


def address_space_limit(limit: int):
    """preexec_fn: the child's address space at most `limit` bytes, as `ulimit -v` sets it."""
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))


def test_a_batch_beyond_the_address_space_limit_is_refused_in_one_line(config, tmp_path):
    """Under `ulimit -v` of 4 GB a step of 40,000 rollouts (about 4.3 GiB) cannot be held whatever the machine has
    free: refused before anything loads or is written, in one line naming the limit."""
    cmd = [PY, "-m", "mathrl", "train", "--config", str(config), "--run-id", "big", "batch_size=40000"]
    done = run(cmd, env=child_env(MATHRL_CACHE_DIR="off"), preexec_fn=address_space_limit(4 * 10**9))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("mathrl train: error: run.batch_size: 40000 rollouts need about 4.3 GiB per step")
    machine = limits.available_memory()  # this process has no such limit: the machine's (or its cgroup's) memory
    if machine is not None and machine[0] > 4.3 * 2**30:
        assert line.endswith(
            "left under this process's address-space limit (ulimit -v); use a smaller batch_size "
            "(micro_batch_size bounds the training term only)"
        )
    assert not (tmp_path / "results").exists()


def test_the_memory_a_cgroup_leaves_is_the_least_of_its_limits(tmp_path, monkeypatch):
    """cgroup v2: the process's cgroup allows 1000 bytes and uses 400, its parent allows 500 and uses 300 (a limit of
    the parent binds the child): 200 left. cgroup v1 likewise; and a CPU quota of 1.5 CPUs allows 2 busy threads."""
    (tmp_path / "proc").write_text("0::/job/step\n")
    monkeypatch.setattr(limits, "PROC_CGROUP", tmp_path / "proc")
    monkeypatch.setattr(limits, "CGROUP", tmp_path / "fs")
    step, job = tmp_path / "fs" / "job" / "step", tmp_path / "fs" / "job"
    step.mkdir(parents=True)
    (tmp_path / "fs" / "cgroup.controllers").write_text("memory cpu\n")
    for d, limit, usage in ((step, "1000", "400"), (job, "500", "300"), (tmp_path / "fs", "max", "9999")):
        (d / "memory.max").write_text(limit + "\n")
        (d / "memory.current").write_text(usage + "\n")
    assert limits.cgroup_memory_left() == 200
    (job / "cpu.max").write_text("150000 100000\n")
    assert limits.cgroup_cpu_quota() == 1.5
    (tmp_path / "proc").write_text("4:memory:/job\n")  # cgroup v1: one mount per controller
    v1 = tmp_path / "fs" / "memory" / "job"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(f"{2**63 - 4096}\n")  # v1's "no limit"
    (v1 / "memory.usage_in_bytes").write_text("10\n")
    assert limits.cgroup_memory_left() is None
    (v1 / "memory.limit_in_bytes").write_text("100\n")
    assert limits.cgroup_memory_left() == 90


def test_an_allocation_that_fails_anyway_is_one_line(config, capsys, monkeypatch):
    """The estimate is an estimate: a step that cannot allocate (here 2**62 bytes, for real) stops with one line."""
    import torch

    import mathrl.engine.trainer

    def allocate(self, on_mismatch="error"):
        return torch.empty(2**62, dtype=torch.uint8)

    monkeypatch.setattr(mathrl.engine.trainer.Trainer, "__init__", lambda self, *a, **k: None)
    monkeypatch.setattr(mathrl.engine.trainer.Trainer, "run", allocate)
    monkeypatch.setattr("mathrl.pipeline.cli._check_init", lambda cfg, s: None)
    assert main(["train", "--config", str(config), "--run-id", "r"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("mathrl train: error: out of memory: can't allocate memory: you tried to allocate ")
    assert "a smaller batch_size (or micro_batch_size, which bounds the training activations) needs less" in line


def test_more_threads_than_cpus_are_named(capsys, monkeypatch):
    monkeypatch.setattr(limits, "usable_cpus", lambda: (2, "its CPU affinity"))
    check_threads(2, "--threads")
    assert capsys.readouterr().err == ""
    check_threads(1000, "--threads")
    assert capsys.readouterr().err == (
        "mathrl: warning: --threads 1000: this process may use 2 CPUs (its CPU affinity), so the threads take turns "
        "and run slower (with the float sums of 1000 threads all the same)\n"
    )


def test_a_bad_threads_value_is_one_line_not_the_usage(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--threads", "-1"])
    assert e.value.code == 2
    assert capsys.readouterr().err == (
        "mathrl train: error: argument --threads: '-1' is not allowed; use a whole number >= 0 (`mathrl train --help` "
        "lists the arguments)\n"
    )


def test_a_missing_init_file_is_named_without_the_warm_ups_hint(config, capsys, tmp_path):
    assert main(["train", "--config", str(config), "--run-id", "r", f"init={tmp_path / 'mine.pt'}"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"mathrl train: error: run.init: {tmp_path / 'mine.pt'}: {tmp_path / 'mine.pt'} does not exist; init is a "
        "checkpoint file, start_PCT (a start of the warm-up), random, or null (the task's warm-up)\n"
    )
    assert not (tmp_path / "results").exists()
