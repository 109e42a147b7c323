"""Test-only fault hooks, driven by environment variables (unset: each is a no-op).

They let the fault-injection tests (tests/test_faults_*.py) stop a run at a chosen instant
deterministically; nothing in the pipeline sets them.

- MATHRL_FAULT_SLEEP_AT_STEP=N:SECONDS   sleep in the middle of step N, after the backward
  pass and before the optimizer step (every rank);
- MATHRL_FAULT_SLEEP_IN_SNAPSHOT=SECONDS or N:SECONDS   sleep after writing half of the
  temporary file of a snapshot (of step N only);
- MATHRL_FAULT_KILL_RANK_AT_STEP=R:N   rank R kills itself with SIGKILL in the middle of
  step N (a worker dying, as by the OOM killer).

A pause prints `fault: ...` (with the rank and pid) on stderr first, ends early once the
file named by MATHRL_FAULT_RELEASE exists, and every hook fires only on a job's first
attempt (TORCHELASTIC_RESTART_COUNT unset or 0), so torchrun's restart runs clean.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def _first_attempt() -> bool:
    return os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"


def _setting(name: str) -> list[float] | None:
    value = os.environ.get(name)
    if not value or not _first_attempt():
        return None
    try:
        return [float(part) for part in value.split(":")]
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected numbers separated by ':'") from None


def pause(seconds: float, what: str) -> None:
    """Say where we are on stderr, then sleep (ended early by the release file)."""
    print(
        f"fault: pid {os.getpid()} rank {os.environ.get('RANK', '0')} {what}; sleeping {seconds:g}s",
        file=sys.stderr,
        flush=True,
    )
    release = os.environ.get("MATHRL_FAULT_RELEASE")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if release and Path(release).exists():
            return
        time.sleep(0.05)


def in_step(step: int, rank: int) -> None:
    """Called in the middle of a step, before the optimizer step."""
    kill = _setting("MATHRL_FAULT_KILL_RANK_AT_STEP")
    if kill and len(kill) == 2 and (int(kill[0]), int(kill[1])) == (rank, step):
        print(f"fault: pid {os.getpid()} rank {rank} killing itself in step {step}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    sleep = _setting("MATHRL_FAULT_SLEEP_AT_STEP")
    if sleep and len(sleep) == 2 and int(sleep[0]) == step:
        pause(sleep[1], f"in step {step} before the optimizer step")


def in_snapshot_write(step: int | None) -> float:
    """Seconds to sleep halfway through writing the snapshot of `step` (0: none)."""
    sleep = _setting("MATHRL_FAULT_SLEEP_IN_SNAPSHOT")
    if not sleep or (len(sleep) == 2 and int(sleep[0]) != step):
        return 0.0
    return sleep[-1]
