"""One writer per run directory: an advisory lock, taken before anything is written.

`hold(directory)` makes the directory, takes an exclusive `flock` on `directory/.lock` without
waiting, writes the holder's pid and host into it, tries a write beside it (a directory that
cannot be written is refused before the first step, not after the last), and removes the
temporary files that writers before it left when they were killed. A second process refuses at
once with `RunDirError` naming the holder. The kernel drops the lock when the holder's last
descriptor closes, a process killed with SIGKILL included, so a lock is never stale; the file
stays (removing it would let two processes lock two files of one name), and the pid in it is for
people only.

The pipeline's training job and `mathrl train` typed by hand run the same command, so they meet
the same lock. Torch-free: the CLI takes it before torch loads anything.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import time
from pathlib import Path

from mathrl.pipeline.errors import RunDirError

LOCK_FILE = ".lock"
# atomic.write_tmp's temporary names, `.NAME.tmpPID`: each process writes only its own
TEMPORARY = re.compile(r"^\..+\.tmp(\d+)$")

_held: dict[str, int] = {}  # this process's locks: directory -> descriptor (a job of several runs takes all first)


@contextlib.contextmanager
def hold(directory: str | Path):
    """Hold `directory`'s lock inside the block (again in the same process: a no-op)."""
    directory = Path(directory)
    key = str(directory.resolve())
    if key in _held:
        yield
        return
    _held[key] = take(directory)
    try:
        yield
    finally:
        os.close(_held.pop(key))  # closing drops the flock


def take(directory: Path) -> int:
    """The lock's descriptor, held; RunDirError where another process holds it or the directory cannot be written."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)  # no O_TRUNC: the holder's line stays
    except OSError as exc:
        raise not_writable(directory, exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = (
            os.pread(fd, 400, 0).decode(errors="replace").strip()
            or "another process (which has not written its pid yet)"
        )
        os.close(fd)
        raise RunDirError(
            f"{directory} is being written by {holder}; one process writes a run directory at a time: wait for it to "
            "end, or name this run otherwise (--run-id NAME)"
        ) from None
    try:
        os.ftruncate(fd, 0)
        holder = f"pid {os.getpid()} on host {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}"
        os.pwrite(fd, f"{holder}\n".encode(), 0)
        try_write(directory)
    except OSError as exc:
        os.close(fd)
        raise not_writable(directory, exc) from None
    remove_leftovers(directory)
    return fd


def try_write(directory: Path) -> None:
    """Create, write and remove a file of this process in `directory`: what saving a result will do."""
    probe = directory / f".write-test.tmp{os.getpid()}"
    with open(probe, "wb") as fh:
        fh.write(b"\n")
    probe.unlink()


def not_writable(directory: Path, exc: OSError) -> RunDirError:
    return RunDirError(
        f"{directory} cannot be written ({exc.strerror or exc}), so the run would train and then fail to save: make "
        "it writable, or write the results elsewhere (--set results=DIR, or --out DIR)"
    )


def remove_leftovers(directory: Path) -> None:
    """The temporary files of writers that are gone (killed halfway through a write): under the lock no other writer
    is at work here, and a file of a live process (its pid running) is left alone all the same."""
    for path in directory.iterdir():
        m = TEMPORARY.match(path.name)
        if m and int(m[1]) != os.getpid() and not alive(int(m[1])):
            path.unlink(missing_ok=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
