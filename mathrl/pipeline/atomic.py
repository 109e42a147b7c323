"""The one atomic file write: a reader sees the old file or the whole new one, never half.

The data goes to a temporary file beside the target (same directory, so the rename stays
on one file system), is flushed to disk, and is renamed over the target."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mathrl.pipeline import faults


def write_tmp(path: Path, data: bytes, pause: float = 0.0) -> Path:
    """Write `data` beside `path` under a temporary name, flushed to disk; that name.

    A failed write (a full disk) removes the temporary file and raises an OSError naming
    `path`; `pause` is the fault-injection tests' sleep halfway through (mathrl.pipeline.faults)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            if pause:
                fh.write(data[: len(data) // 2])
                fh.flush()
                faults.pause(pause, f"wrote half of {tmp}")
                data = data[len(data) // 2 :]
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise OSError(
                exc.errno, f"cannot write {path} ({exc.strerror or exc}); the file in place is unchanged"
            ) from exc
        raise
    return tmp


def record(data: bytes) -> dict:
    """What a reader checks a written file against (`results.whole`): its length and SHA-256. Recorded in the
    file written after it (a run's summary.json), so that a copy cut short or damaged later is named, not read."""
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def atomic_write(path: str | Path, data: bytes | str) -> Path:
    """Write `data` (text is UTF-8 encoded) to `path` atomically; returns the path."""
    path = Path(path)
    os.replace(write_tmp(path, data.encode() if isinstance(data, str) else data), path)
    return path
