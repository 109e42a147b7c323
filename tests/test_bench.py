"""Smoke test of the benchmark suite (`python -m bench`): it runs and writes its JSON.

Timings are not asserted (they are not tests); only that the figures exist and are sane."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_quick_smoke(tmp_path):
    out = tmp_path / "bench"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    # One thread: the smoke test stays fast when other jobs share the cores.
    cmd = [sys.executable, "-m", "bench", "--quick", "--presets", "small", "--batches", "64", "--threads", "1", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RL step" in proc.stdout and "Targets" in proc.stdout and "naive/ours" in proc.stdout

    rl = json.loads((out / "rl_step.json").read_text())
    assert rl["machine"]["torch"] and rl["machine"]["cpu_count"] >= 1 and rl["machine"]["date"]
    (rec,) = rl["results"]
    assert (rec["preset"], rec["batch"], rec["group_size"], rec["algorithm"]) == ("small", 64, 8, "grpo")
    assert rec["torch_threads"] == 1
    for key in ("sample", "update", "total"):
        assert rec[key]["median"] > 0 and rec[key]["n"] == 2
    assert rec["sequences_per_second"] > 0 and rec["peak_rss_mb"] > 0

    (sft,) = json.loads((out / "sft_step.json").read_text())["results"]
    assert sft["batch"] == 256 and sft["total"]["median"] > 0 and sft["peak_rss_mb"] > 0

    (naive,) = json.loads((out / "naive.json").read_text())["results"]
    assert naive["batch"] == 64
    for key in ("sample", "total"):
        assert math.isfinite(naive["ratio"][key]) and naive["ratio"][key] > 0
    assert naive["naive"]["sample"]["median"] > 0 and naive["ours"]["sample"]["median"] > 0

    summary = json.loads((out / "summary.json").read_text())
    statuses = {t["target"]: t["status"] for t in summary["targets"]}
    assert statuses["training process peak RSS"] in ("PASS", "MISS")
    assert statuses["GRPO step, small @512 rollouts"] == "NOT MEASURED"  # 512 was not asked for
