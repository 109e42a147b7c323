"""What this process may use of the machine: its CPUs and its memory, within its own limits.

A machine's totals overstate what a process gets: an affinity mask (taskset, SLURM) bounds the
CPUs it runs on and a cgroup's CPU quota (a container, a SLURM job) its CPU time; `ulimit -v`
(RLIMIT_AS) bounds its address space and a cgroup's memory limit what it may hold. `mathrl
train` reads these before its first step, so that a batch or a thread count the process cannot
have is refused or named in one line instead of failing (or crawling) later. Linux files are
read where they exist; whatever cannot be read bounds nothing. Torch-free.
"""

from __future__ import annotations

import math
import os
import resource
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
UNLIMITED = 2**62  # cgroup v1 writes "no limit" as a number near 2**63
PROC_CGROUP = Path("/proc/self/cgroup")
# a cgroup's memory limit and usage: v2's files, then v1's
FILES = (("memory.max", "memory.current"), ("memory.limit_in_bytes", "memory.usage_in_bytes"))


def usable_cpus() -> tuple[int, str]:
    """(the CPUs this process may keep busy, what bounds them): its affinity mask, or a cgroup's CPU quota below it."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    what = "its CPU affinity"
    quota = cgroup_cpu_quota()
    if quota is not None and math.ceil(quota) < count:
        count, what = max(1, math.ceil(quota)), "its cgroup's CPU quota"
    return count, what


def cgroup_cpu_quota() -> float | None:
    """CPUs' worth of time per period the process's cgroup allows (cgroup v2 cpu.max, v1 cpu.cfs_quota_us)."""
    for directory in _cgroup_dirs("cpu"):
        v2, v1 = _read(directory / "cpu.max"), _read(directory / "cpu.cfs_quota_us")
        try:
            if v2 is not None and v2.split()[0] != "max":
                quota, period = v2.split()
                return int(quota) / int(period)
            if v1 is not None and int(v1) > 0:
                return int(v1) / int(_read(directory / "cpu.cfs_period_us") or 100_000)
        except (ValueError, IndexError, ZeroDivisionError):
            continue
    return None


def available_memory() -> tuple[int, str] | None:
    """(bytes this process can still take, the limit that says so): the least of the machine's MemAvailable, what
    its address-space limit (ulimit -v) leaves above its current size, and what its cgroup's memory limit leaves;
    None where none can be read."""
    found = []
    meminfo = _field(_read(Path("/proc/meminfo")), "MemAvailable:")
    if meminfo is not None:
        found.append((meminfo, "available on this machine"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    size = _field(_read(Path("/proc/self/status")), "VmSize:")
    if soft != resource.RLIM_INFINITY and size is not None:
        found.append((max(0, soft - size), "left under this process's address-space limit (ulimit -v)"))
    cgroup = cgroup_memory_left()
    if cgroup is not None:
        found.append((cgroup, "left under its cgroup's memory limit"))
    return min(found) if found else None


def cgroup_memory_left() -> int | None:
    """The cgroup's memory limit less its usage (cgroup v2 memory.max / memory.current, v1 memory.limit_in_bytes /
    memory.usage_in_bytes), the least over the process's cgroup and its parents; None without a limit."""
    left = []
    for directory in _cgroup_dirs("memory"):
        for limit_file, usage_file in FILES:
            limit, usage = _read(directory / limit_file), _read(directory / usage_file)
            try:
                if limit is not None and usage is not None and limit != "max" and int(limit) < UNLIMITED:
                    left.append(max(0, int(limit) - int(usage)))
            except ValueError:
                continue
    return min(left) if left else None


def _cgroup_dirs(controller: str) -> list[Path]:
    """The process's cgroup directory for `controller` and its parents up to the mount (v1's controller mount, or
    v2's unified one), from /proc/self/cgroup."""
    text = _read(PROC_CGROUP) or ""
    out = []
    for line in text.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "" or controller in controllers.split(","):
            root = CGROUP if controllers == "" else CGROUP / controller
            if controllers == "" and not (root / "cgroup.controllers").exists():
                root = CGROUP / "unified"
            parts = Path(path.strip() or "/").parts[1:]
            out += [root.joinpath(*parts[:k]) for k in range(len(parts), -1, -1)]
    return [d for d in dict.fromkeys(out) if d.is_dir()]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _field(text: str | None, name: str) -> int | None:
    """A `Name:  1234 kB` line of a /proc file, in bytes."""
    for line in (text or "").splitlines():
        if line.startswith(name):
            try:
                return int(line.split()[1]) * 1024
            except (IndexError, ValueError):
                return None
    return None
