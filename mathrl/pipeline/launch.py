"""`mathrl launch`: one training job under torchrun on GPUs of its own.

Concurrent local Snakemake jobs each lease distinct GPU slots (`mathrl.pipeline.gpus`), run
`torchrun --standalone` (its own rendezvous, so jobs never clash on a port) with
CUDA_VISIBLE_DEVICES set to the lease and OMP/MKL threads split between the workers, hold
the lease until torchrun exits and pass its exit code on. SIGTERM and SIGINT are forwarded
to torchrun, which stops its workers; if the launcher itself dies, torchrun gets SIGTERM
(Linux parent-death signal), so a killed job leaves no training process on the GPU.

A lone CPU worker (`--gpus 0 --torchrun auto`) runs `mathrl train` without torchrun's agent,
and with `--fork-server auto` it is forked from `mathrl.pipeline.forkserver` (torch imported once)
instead of a fresh interpreter, with the same signal and death guarantees.

`--parallel K` (or auto) splits a group of runs (several `--experiment-run`) between K launches
that run at once, each training its share one after another on `--threads` threads: a job that
has the machine to itself (a DVC stage) uses its cores without changing any run's thread count,
and so any run's float sums (`run_shares`, `parallel_count`, `run_all`).
"""

from __future__ import annotations

import getpass
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from mathrl.pipeline import gpus as gpu_slots
from mathrl.pipeline.layout import group_args
from mathrl.pipeline.processes import forwarding_signals, parent_death_preexec

ENV_KEYS = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# What the fork server imports before it forks a run: the commands a run may be, and what
# a torch.optim step imports lazily (torch._dynamo, about 1.5 s of CPU; mathrl.engine.optim).
FORK_PRELOAD = ("torch", "torch._dynamo", "mathrl.pipeline.cli", "mathrl.engine.trainer", "mathrl.engine.sft")


def default_lock_dir() -> Path:
    """$MATHRL_GPU_LOCK_DIR, else one directory per user (and per SLURM job) under /tmp.

    Inside a SLURM job the ids in CUDA_VISIBLE_DEVICES may be renumbered per job (device
    cgroups: every job sees "0"), so jobs sharing a node must not share lock files.
    """
    if os.environ.get("MATHRL_GPU_LOCK_DIR"):
        return Path(os.environ["MATHRL_GPU_LOCK_DIR"])
    name = f"mathrl-gpu-locks-{os.environ.get('USER') or getpass.getuser()}"
    if os.environ.get("SLURM_JOB_ID"):
        name += f"-slurm{os.environ['SLURM_JOB_ID']}"
    return Path("/tmp") / name


def torchrun_command(
    nproc: int,
    args: Sequence[str],
    torchrun_args: Sequence[str] = (),
    module: Sequence[str] = ("mathrl", "train"),
    mode: str = "always",
) -> list[str]:
    """The worker command. mode "auto" runs a lone CPU worker without torchrun: the same
    entry point as a world of one, minus torchrun's agent process (about 2 s per run here,
    which dominates a grid of a hundred short CPU runs)."""
    if mode == "auto" and nproc == 1 and not torchrun_args:
        return [sys.executable, "-m", *module, *args]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        *torchrun_args,
        "-m",
        *module,
        *args,
    ]


RUN_FLAGS = ("--experiment-run", "--run")  # `mathrl train`'s flag for one run of an experiment, and its alias


def run_shares(args: Sequence[str], k: int) -> list[list[str]]:
    """`mathrl train` arguments for at most `k` launches that train the runs of `args` between them: the runs
    dealt out in turn (seed 0 to the first, seed 1 to the second, ...), each launch keeping every other argument,
    its runs where the first run stood. One launch (`args` as they are) for fewer than two runs or k < 2."""
    runs: list[str] = []
    rest: list[str] = []
    at = None
    words = iter(args)
    for word in words:
        flag, eq, value = word.partition("=")
        if flag not in RUN_FLAGS:
            rest.append(word)
            continue
        value = value if eq else next(words, None)
        if value is None:  # a flag without its run: `mathrl train` says so
            return [list(args)]
        at = len(rest) if at is None else at
        runs.append(value)
    k = min(k, len(runs))
    if k < 2:
        return [list(args)]
    return [rest[:at] + group_args(runs[i::k]) + rest[at:] for i in range(k)]


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity: a cgroup's or taskset's share of the machine)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def parallel_count(setting: str, threads: int, gpus: int | None, runs_per_gpu: int = 1) -> int:
    """How many launches may train a group's runs at once: `setting` as a whole number, or auto: as many as the
    usable CPUs give `threads` each and, for GPU runs (`gpus` per run, None: 1 if one is visible), as the GPU
    slots allow (GPUs times runs_per_gpu); at least 1."""
    if setting != "auto":
        if not setting.isdigit() or int(setting) < 1:
            raise ValueError(f"--parallel: {setting!r} is not allowed; use a whole number >= 1 or auto")
        return int(setting)
    k = usable_cpus() // max(1, threads)
    visible = gpu_slots.visible_gpu_count() if gpus is None or gpus > 0 else 0
    per_run = (1 if visible else 0) if gpus is None else gpus
    if per_run > 0:
        k = min(k, visible * runs_per_gpu // per_run)
    return max(1, k)


def run_all(cmds: Sequence[Sequence[str]]) -> int:
    """Run the commands at once, forwarding SIGTERM/SIGINT to each (and starting none after one arrived); each
    dies with this process (parent-death signal). Every command runs to its end, so that one run's failure costs
    its siblings nothing; the first non-zero exit code in the commands' order (128+N for signal N), else 0."""
    children: list[subprocess.Popen] = []
    pending: list[int] = []

    def forward(signum, _frame) -> None:
        pending.append(signum)
        for child in children:
            child.send_signal(signum)  # a no-op once the child has exited

    with forwarding_signals(forward):
        try:
            for cmd in cmds:
                if pending:
                    break
                children.append(subprocess.Popen(list(cmd), preexec_fn=parent_death_preexec()))
                for signum in pending:  # arrived while it started
                    children[-1].send_signal(signum)
            codes = [child.wait() for child in children]
        finally:
            for child in children:
                if child.poll() is None:  # an exception here: leave no orphan
                    child.kill()
                    child.wait()
    if pending and len(codes) < len(cmds):
        codes.append(128 + pending[0])
    return next((128 - rc if rc < 0 else rc for rc in codes if rc), 0)


def launch(
    args: Sequence[str] = (),
    *,
    gpus: int | None = None,
    threads: int = 1,
    lock_dir: Path | None = None,
    dry_run: bool = False,
    torchrun_args: Sequence[str] = (),
    module: Sequence[str] = ("mathrl", "train"),
    timeout: float | None = None,
    out: TextIO | None = None,
    torchrun: str = "always",
    fork_server: str = "off",
    check=None,
    runs_per_gpu: int = 1,
) -> int:
    """Run `torchrun ... -m <module> <args>` on `gpus` leased GPUs (0: CPU); its exit code.

    gpus None takes 1 when a GPU is visible, else 0. `module` is for tests (a tiny probe
    instead of `mathrl train`); `timeout` bounds the wait for free slots (None: forever);
    `runs_per_gpu` k lets k launches share each GPU (k lock slots a device).
    `check(world_size)`, before torchrun starts more than one worker, raises what every worker
    would (a config error), so that it is said once and not followed by torchrun's failure report
    (about 1.4 s on this project's 2-core machine, for the default config).
    """
    out = out or sys.stdout
    if gpus is None:
        gpus = 1 if gpu_slots.visible_gpu_count() > 0 else 0
    if gpus < 0:
        raise ValueError(f"--gpus: {gpus} is negative; use 0 for CPU")
    if threads < 1:
        raise ValueError(f"--threads: {threads} must be at least 1")
    nproc = max(1, gpus)
    per_worker = str(max(1, threads // nproc))
    if torchrun not in ("always", "auto"):
        raise ValueError(f"--torchrun: {torchrun!r} is not allowed; allowed: always, auto")
    if fork_server not in ("auto", "off"):
        raise ValueError(f"--fork-server: {fork_server!r} is not allowed; allowed: auto, off")
    # torchrun's parser reads `--run` as an ambiguous abbreviation of its own --run-path.
    args = ["--experiment-run" if a == "--run" else a for a in args]
    cmd = torchrun_command(
        nproc, args, torchrun_args, module, mode="auto" if torchrun == "auto" and gpus == 0 else "always"
    )
    lock_dir = Path(lock_dir) if lock_dir else default_lock_dir()

    if dry_run:  # the slots a launch would get now, taken and given back at once
        note = None
        try:
            with gpu_slots.acquire(gpus, lock_dir, timeout=0, per_gpu=runs_per_gpu) as lease:
                visible = lease.env()["CUDA_VISIBLE_DEVICES"]
        except TimeoutError:
            visible, note = "?", f"# no {gpus} GPU slots free now (locks in {lock_dir}); a real launch would wait"
        print(shlex.join(cmd), file=out)
        if note:
            print(note, file=out)
        for key, value in zip(ENV_KEYS, (visible, per_worker, per_worker), strict=True):
            print(f"{key}={value}", file=out)
        return 0

    if check is not None and nproc > 1:  # what one process accepts, N may not (the batch splits over them)
        check(nproc)
    with gpu_slots.acquire(gpus, lock_dir, timeout=timeout, per_gpu=runs_per_gpu) as lease:
        env = {**os.environ, **lease.env(), "OMP_NUM_THREADS": per_worker, "MKL_NUM_THREADS": per_worker}
        if cmd[1:3] == ["-m", "mathrl"] and fork_server == "auto":  # a lone CPU worker of mathrl itself
            from mathrl.pipeline import forkserver

            if forkserver.enabled(gpus, env):
                rc = forkserver.run(cmd[3:], env, module=cmd[2], preload=FORK_PRELOAD)
                if rc is not None:
                    return rc
        return _run(cmd, env, lease.fds)


def _run(cmd: list[str], env: dict[str, str], keep_fds: list[int]) -> int:
    """Run cmd, forwarding SIGTERM/SIGINT to it; its exit code (128+N when killed by signal N)."""
    child: subprocess.Popen | None = None
    pending: list[int] = []

    def forward(signum, _frame) -> None:
        if child is None:
            pending.append(signum)
        else:
            child.send_signal(signum)  # a no-op once the child has exited

    with forwarding_signals(forward):
        try:
            # The child inherits the lock descriptors: the slots stay held until the training
            # process is gone too, even if this process is killed first.
            child = subprocess.Popen(cmd, env=env, pass_fds=keep_fds, preexec_fn=parent_death_preexec())
            for signum in pending:
                child.send_signal(signum)
            rc = child.wait()
        finally:
            if child is not None and child.poll() is None:  # an exception here: leave no orphan
                child.kill()
                child.wait()
    return 128 - rc if rc < 0 else rc
