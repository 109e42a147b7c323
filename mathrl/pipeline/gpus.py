"""GPU slots for concurrent local jobs, claimed with lock files.

Snakemake's `--resources gpu=4` bounds how many GPUs its local jobs use at once but does not
say which: every job would see GPU 0. `acquire(n, lock_dir)` claims n free devices by taking
an exclusive `flock` on `lock_dir/gpu<id>.lock` each. The kernel drops a lock when its
holder's last descriptor closes, a killed process included, so no lock is ever stale; the
pid inside a lock file is for humans only. With `per_gpu` k, each device has k slots
(`gpu<id>.lock`, `gpu<id>-1.lock`, ...): up to k small runs share a GPU, each on its own slot,
and a run of n GPUs holds one slot on each of n distinct devices.

Device ids are in CUDA_VISIBLE_DEVICES terms: an existing CUDA_VISIBLE_DEVICES (SLURM, a
user) restricts the slots to its list, and a lease exports ids from that list.
"""

from __future__ import annotations

import fcntl
import glob
import os
import re
import sys
import time
from pathlib import Path

# Device files a GPU torch can use leaves on Linux: NVIDIA's driver, AMD's ROCm, WSL's GPU bridge.
GPU_DEVICE_GLOBS = ("/proc/driver/nvidia", "/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")


def gpu_driver_present() -> bool:
    """Whether torch could see a GPU here: off Linux always (ask torch); on Linux when a GPU
    driver's device file exists. A CPU machine's launcher then never imports torch to count
    none (every training job starts one)."""
    return not sys.platform.startswith("linux") or any(glob.glob(pattern) for pattern in GPU_DEVICE_GLOBS)


def visible_gpu_ids() -> list[str]:
    """The ids a lease may hand out: CUDA_VISIBLE_DEVICES' entries, else 0..count-1."""
    fake = os.environ.get("MATHRL_FAKE_GPUS")
    if fake is not None:
        if not fake.strip().isdigit():
            raise ValueError(f"MATHRL_FAKE_GPUS={fake!r}: expected a count of GPUs (0, 1, 2, ...)")
        count = int(fake)
    elif not gpu_driver_present():
        count = 0  # what torch would say, without the 1.5 s its import takes
    else:
        import torch

        count = torch.cuda.device_count()  # already limited by CUDA_VISIBLE_DEVICES
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return [str(i) for i in range(count)]
    return [d.strip() for d in listed.split(",") if d.strip()][:count]


def visible_gpu_count() -> int:
    return len(visible_gpu_ids())


class GpuLease:
    """Devices held until `release()` (or the end of a `with` block, or the process)."""

    def __init__(self, ids: list[str], fds: list[int]):
        self.ids = ids
        self.fds = fds  # lock descriptors; a child given them (pass_fds) keeps the slots held too

    def env(self) -> dict[str, str]:
        """CUDA_VISIBLE_DEVICES for the holder's processes; empty (CPU only) for no GPU."""
        return {"CUDA_VISIBLE_DEVICES": ",".join(self.ids)}

    def release(self) -> None:
        for fd in self.fds:
            os.close(fd)  # closing drops the flock
        self.fds, self.ids = [], []

    def __enter__(self) -> GpuLease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"GpuLease(ids={self.ids})"


def lock_path(lock_dir: Path, device: str, slot: int = 0) -> Path:
    name = f"gpu{re.sub(r'[^A-Za-z0-9._-]', '_', device)}" + (f"-{slot}" if slot else "")
    return Path(lock_dir) / f"{name}.lock"


def _lock_a_slot(lock_dir: Path, device: str, per_gpu: int) -> int | None:
    """A free slot of one device, the lowest first; its descriptor, or None when all are held."""
    for slot in range(per_gpu):
        fd = _try_lock(lock_path(lock_dir, device, slot))
        if fd is not None:
            return fd
    return None


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # no O_TRUNC: the holder's pid stays
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def acquire(n: int, lock_dir: Path, timeout: float | None = None, poll: float = 0.5, per_gpu: int = 1) -> GpuLease:
    """Claim a free slot on each of n visible GPUs (per_gpu slots a GPU); wait (poll seconds
    apart) up to timeout, None: forever."""
    if n < 0:
        raise ValueError(f"cannot acquire {n} GPUs")
    if per_gpu < 1:
        raise ValueError(f"runs per GPU: {per_gpu} must be at least 1")
    if n == 0:
        return GpuLease([], [])
    ids = visible_gpu_ids()
    if n > len(ids):
        raise ValueError(f"asked for {n} GPUs but only {len(ids)} are visible")
    Path(lock_dir).mkdir(parents=True, exist_ok=True)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        taken: list[tuple[str, int]] = []
        for device in ids:
            fd = _lock_a_slot(lock_dir, device, per_gpu)
            if fd is not None:
                taken.append((device, fd))
                if len(taken) == n:
                    return GpuLease([d for d, _ in taken], [fd for _, fd in taken])
        for _, fd in taken:  # never sit on a partial set: two waiters could deadlock
            os.close(fd)
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(
                f"no free slot on {n} of {len(ids)} GPUs ({per_gpu} a GPU) within {timeout}s (locks in {lock_dir})"
            )
        time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))
