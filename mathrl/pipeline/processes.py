"""Process helpers shared by the launcher and the fork server: Linux's parent-death signal
and forwarding SIGTERM/SIGINT to a child. Imports nothing of mathrl, so both may use it."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading


@functools.cache
def prctl():
    """libc's prctl (Linux), or None; looked up once, before any fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def set_parent_death_signal(parent: int) -> bool:
    """Ask Linux to send this process SIGTERM when its parent dies (PR_SET_PDEATHSIG);
    if `parent` is already gone, terminate now. False where unsupported."""
    call = prctl()
    if call is None:
        return False
    call(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)
    return True


def parent_death_preexec():
    """A preexec_fn giving the child SIGTERM when this process dies (Linux; else None)."""
    if prctl() is None:
        return None
    parent = os.getpid()
    return lambda: set_parent_death_signal(parent)


@contextlib.contextmanager
def forwarding_signals(forward):
    """While inside, SIGTERM and SIGINT call forward(signum, frame) instead of their handlers
    (only in the main thread, the one Python delivers signals to); restored on exit."""
    in_main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)} if in_main else {}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
