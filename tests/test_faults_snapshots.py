"""Fault injection: damaged snapshots are reported by name and the previous one used;
nothing is overwritten when no usable one is left."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import run_dir, run_files

from mathrl.pipeline.cli import main

pytestmark = pytest.mark.faults


# --- damaged snapshots ----------------------------------------------------------------------


def flip_payload_bit(path: Path) -> None:
    """One bit of the payload (after the checksum header) flipped: same size, bad content."""
    data = bytearray(path.read_bytes())
    start = data.index(b"\n") + 1
    data[start + (len(data) - start) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def test_bit_flipped_snapshot_is_reported_and_the_previous_one_used(env, capsys):
    args = ["train", "--config", str(env["config"]), "--run-id", "r", "snapshot_every=1", "reward=shaped"]
    assert main([*args, "steps=2"]) == 0
    d = run_dir(env, "r")
    flip_payload_bit(d / "snapshot.pt")
    capsys.readouterr()
    assert main([*args, "steps=3"]) == 0
    out, err = capsys.readouterr()
    assert f"snapshot {d / 'snapshot.pt'} is unusable" in err and "checksum mismatch" in err
    assert f"resuming r from {d / 'snapshot.pt.prev'} at step 1" in out  # the file it read, never step 0
    assert list(pd.read_csv(d / "metrics.csv")["step"]) == [1, 2, 3]


def test_both_snapshots_damaged_is_an_error_naming_both_and_nothing_is_overwritten(env, capsys):
    args = ["train", "--config", str(env["config"]), "--run-id", "r", "snapshot_every=1"]
    assert main([*args, "steps=2"]) == 0
    d = run_dir(env, "r")
    flip_payload_bit(d / "snapshot.pt")
    prev = d / "snapshot.pt.prev"
    prev.write_bytes(prev.read_bytes()[:1000])  # truncated
    before = run_files(d)
    capsys.readouterr()
    assert main([*args, "steps=3"]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("mathrl train: error: no usable snapshot")
    assert f"{d / 'snapshot.pt'}: " in last and f"{prev}: " in last and "checksum mismatch" in last
    assert last.endswith(f"; to start over from step 0, remove {d / 'snapshot.pt'} and {prev}")
    assert run_files(d) == before  # nothing rewritten, nothing added
