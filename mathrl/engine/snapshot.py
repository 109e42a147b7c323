"""Snapshots that survive a kill at any instant.

A snapshot is written to a temporary file of this process (`.<name>.tmp<pid>`), flushed to
disk, and renamed over the old one, whose previous version is kept as `<name>.prev`; the
half-written file of a killed process is removed by the next holder of the run directory's
lock (`mathrl.pipeline.rundir`), never by a process writing beside it. The file starts with a header
line holding the SHA-256 of the payload, so a truncated or damaged file is detected before
torch reads it. Loading uses `weights_only=True`: a snapshot can hold tensors and plain Python values,
never code.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
from pathlib import Path

from mathrl.pipeline import faults
from mathrl.pipeline.atomic import write_tmp
from mathrl.pipeline.errors import SnapshotError  # re-exported: callers import it from here

MAGIC = b"MATHRL-SNAPSHOT-1 sha256="


def encode(state: dict) -> bytes:
    buf = io.BytesIO()
    import torch  # here, not at the top: the tables, figures and report write files without torch

    torch.save(state, buf)
    payload = buf.getvalue()
    return MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def decode(data: bytes, name: str) -> dict:
    """Check the header and checksum, then unpickle with weights_only."""
    header, sep, payload = data.partition(b"\n")
    if not sep or not header.startswith(MAGIC):
        raise SnapshotError(f"{name}: not a mathrl snapshot (bad header)")
    if hashlib.sha256(payload).hexdigest().encode() != header[len(MAGIC) :]:
        raise SnapshotError(f"{name}: checksum mismatch (truncated or corrupted)")
    import torch

    return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)


def save(path: str | Path, state: dict) -> None:
    """Write a snapshot; the one it replaces becomes `<path>.prev`."""
    path = Path(path)
    tmp = write_tmp(
        path, encode(state), faults.in_snapshot_write(state.get("step"))
    )  # a full disk fails here, the old files intact
    if path.exists():
        os.replace(path, path.with_name(path.name + ".prev"))
    os.replace(tmp, path)


def load(path: str | Path) -> dict | None:
    """The latest good snapshot at `path`, falling back to `<path>.prev` (`load_found`)."""
    found = load_found(path)
    return None if found is None else found[0]


def load_found(path: str | Path) -> tuple[dict, Path] | None:
    """The latest good snapshot at `path`, falling back to `<path>.prev`, and the file it came from.

    Returns None when neither exists (a fresh start). A damaged latest file is reported by
    name on stderr and the previous one used; if no good one remains it is an error, never
    a silent restart from step 0."""
    path = Path(path)
    candidates = [p for p in (path, path.with_name(path.name + ".prev")) if p.exists()]
    if not candidates:
        return None
    problems = []
    for candidate in candidates:
        try:
            return decode(candidate.read_bytes(), str(candidate)), candidate
        except Exception as exc:  # torch raises several types for a damaged zip
            problems.append(f"{candidate}: {exc}")
            print(f"warning: snapshot {candidate} is unusable ({exc}); trying the previous one", file=sys.stderr)
    raise SnapshotError(
        "no usable snapshot: "
        + "; ".join(problems)
        + f"; to start over from step 0, remove {' and '.join(map(str, candidates))}"
    )


def set_aside(path: str | Path) -> None:
    """Move a snapshot (and its .prev) out of the way as `<stem>.stale.pt`, keeping it for
    inspection; the next load starts fresh."""
    path = Path(path)
    for p in (path, path.with_name(path.name + ".prev")):
        if p.exists():
            os.replace(p, p.with_name(p.name.replace(".pt", ".stale.pt", 1)))
