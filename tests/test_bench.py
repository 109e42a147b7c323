"""Smoke test of the benchmark suite (`python -m bench`): it runs and writes its JSON.

Timings are not asserted (they are not tests); only that the figures exist and are sane."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def test_bench_quick_smoke(tmp_path):
    out = tmp_path / "bench"
    # One thread: the smoke test stays fast when other jobs share the cores.
    cmd = [sys.executable, "-m", "bench", "--quick", "--presets", "small", "--batches", "64", "--threads", "1", "--out",
           str(out),
           "--only", "rl", "--only", "sft", "--only", "naive"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
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
    # The peak RSS target reads the largest peak of the processes measured, and its verdict follows from it.
    (rss,) = [t for t in summary["targets"] if t["target"] == "training process peak RSS"]
    records = {"rl": rec, "sft": sft, "naive": naive}
    peaks = {f"{k} {r['preset']}@{r['batch']}": r["peak_rss_mb"] for k, r in records.items() if "peak_rss_mb" in r}
    assert rss["value_mb"] == max(peaks.values()) and rss["where"] == max(peaks, key=peaks.get)
    assert rss["status"] == ("PASS" if rss["value_mb"] < rss["limit_mb"] else "MISS")
    assert statuses["GRPO step, small @512 rollouts"] == "NOT MEASURED"  # 512 was not asked for


def test_time_to_accuracy_runs_both_phases_and_reports_misses():
    """A trivial target is met at the first evaluation; an impossible one is reported as a miss
    with the best accuracy, after the warm-up (stopped at once) and GRPO ran to the budget."""
    cmd = [sys.executable, "-m", "bench.tta", "--task", "add", "--targets", "0,1", "--budget", "8", "--sft-until", "0",
           "--sft-eval-every", "5", "--batch", "64", "--eval-every", "2", "--threads", "1"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (
        rec["reached"]["0"] == rec["curve"][0]
        and rec["curve"][0]["phase"] == "warm-up"
        and rec["curve"][0]["step"] == 5
    )
    assert rec["reached"]["1"] is None and rec["warmup_finished"]
    phases = [c["phase"] for c in rec["curve"]]
    assert phases.count("warm-up") == 1 and phases.count("GRPO") >= 1 and phases[-1] == "GRPO"
    assert [c["seconds"] for c in rec["curve"]] == sorted(c["seconds"] for c in rec["curve"])
    assert rec["best"]["accuracy"] == max(c["accuracy"] for c in rec["curve"])
    assert 8 <= rec["wall_s"] < 60


def test_pipeline_stage_times_sum_benchmark_files(tmp_path):
    from bench.pipeline import stage_times

    head = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    files = {"train/a.tsv": "2.5", "train/b.tsv": "4.0", "sft/add.tsv": "30.0", "report/report.tsv": "1.5"}
    for rel, secs in files.items():
        path = tmp_path / "benchmarks" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(head + f"{secs}\t0:00:02\t300.5\t1\t1\t1\t0\t0\t50\t1\n")
    stages = stage_times(tmp_path)
    assert set(stages) == {"train", "sft", "report"}
    assert stages["train"]["jobs"] == 2 and stages["train"]["job_seconds"] == 6.5
    assert (stages["train"]["max_seconds"], stages["train"]["max_job"]) == (4.0, "b")
    assert stages["sft"]["max_rss_mb"] == 300.5
    proc = subprocess.run([sys.executable, "-m", "bench.pipeline", "--existing", str(tmp_path)], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["stages"]["report"]["job_seconds"] == 1.5


def test_pipeline_command_is_make_reports(tmp_path):
    """The benchmarked command is make report's, into the fresh directory; Snakemake parses it."""
    from bench.pipeline import pipeline_command

    cmd = pipeline_command(tmp_path / "results", "all", ["train={steps: 2}"])
    assert cmd[cmd.index("--profile") + 1] == "profiles/default" and cmd[-2:] == [
        f"results={tmp_path / 'results'}",
        "train={steps: 2}",
    ]
    proc = subprocess.run([*cmd, "-n", "--quiet"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "results" / "report.html").exists()


def test_targets_and_table_read_records_of_every_section():
    """targets() and the performance table (docs/guide/performance.md) over one record per section, shaped as the
    children write them (time-to-accuracy records have a task, not a batch; the pipeline has no RSS)."""
    sys.path.insert(0, str(ROOT))
    from bench.__main__ import markdown_table, targets

    step = {"median": 0.2, "min": 0.2, "max": 0.2, "iqr_rel": 0.1, "n": 3}
    rl = {
        "preset": "small",
        "batch": 512,
        "total": step,
        "sample": step,
        "update": step,
        "sequences_per_second": 2560.0,
        "peak_rss_mb": 900.0,
    }
    tta = {
        "task": "add",
        "preset": "small",
        "budget_s": 600.0,
        "reached": {"0.95": {"seconds": 40.0, "phase": "GRPO", "step": 5}, "0.99": None},
        "best": {"accuracy": 0.97, "seconds": 41.0},
        "peak_rss_mb": 1700.0,
    }
    pipe = {"wall_s": 400.0, "cores": "all", "stages": {}}
    results = {"rl": [rl], "tta": [tta], "pipeline": [pipe]}
    ts = {t["target"]: t for t in targets(results)}
    assert ts["GRPO step, small @512 rollouts"]["status"] == "PASS"  # 0.2 <= 0.25
    assert ts["GRPO step, adder @512 rollouts"]["status"] == "NOT MEASURED"
    rss = ts["training process peak RSS"]
    assert (rss["value_mb"], rss["where"], rss["status"]) == (1700.0, "tta small@add", "MISS")
    assert (
        ts["make report, default config"]["status"] == "PASS"
        and ts["make report, default config (aim)"]["status"] == "MISS"
    )
    assert ts["add to 95% from scratch (CPU, reported)"]["value_s"] == 40.0
    assert ts["add to 99% from scratch (CPU, reported)"]["status"] == "NOT REACHED in 600 s"
    machine = {
        "date": "2026-11-22T00:00:00+00:00",
        "git": {"commit": "abc"},
        "cpu": "cpu",
        "cpus_usable": 2,
        "torch": "2.13.0",
        "cuda": False,
        "loadavg_start": [0.1],
        "loadavg_end": [0.2],
    }
    md = markdown_table(machine, results, list(ts.values()))
    assert "| make report, default config | <= 900 s | 400 s | PASS |" in md and "NOT MEASURED (no GPU)" in md


def test_gpu_targets_read_only_the_records_measured_on_cuda():
    sys.path.insert(0, str(ROOT))
    from bench.__main__ import targets

    def rl(device: str, seconds: float) -> dict:
        step = {"median": seconds, "min": seconds, "max": seconds, "iqr_rel": 0.0, "n": 3}
        return {"preset": "adder", "batch": 512, "device": device, "total": step, "sample": step, "update": step,
                "sequences_per_second": 512 / seconds, "peak_rss_mb": 900.0}  # fmt: skip

    tta = {"task": "add", "preset": "small", "device": "cuda", "budget_s": 120.0, "best": None,
           "reached": {"0.95": {"seconds": 30.0, "phase": "GRPO", "step": 5}, "0.99": {"seconds": 75.0}}}  # fmt: skip
    ts = {t["target"]: t for t in targets({"rl": [rl("cpu", 0.5), rl("cuda", 0.008)], "tta": [tta]})}
    assert ts["GRPO step, adder @512 rollouts"]["value_s"] == 0.5  # the CPU target keeps the CPU record
    step = ts["adder GRPO step @512 rollouts on one GPU"]
    assert (step["value_s"], step["status"]) == (0.008, "PASS")
    tta_target = ts["warm-up + RL to 99% on 3-digit addition on one GPU"]
    assert (tta_target["value_s"], tta_target["status"]) == (75.0, "MISS")
    assert ts["config/full.yaml grid on one GPU"]["status"] == "NOT MEASURED (no GPU)"
    assert ts["add to 95% from scratch (GPU, reported)"]["value_s"] == 30.0
    cpu_only = {t["target"]: t for t in targets({"rl": [rl("cpu", 0.5)]})}
    assert cpu_only["adder GRPO step @512 rollouts on one GPU"]["status"] == "NOT MEASURED (no GPU)"


def test_replication_compares_two_claims_tables_claim_by_claim():
    from bench.replicate import compare_claims, float_paths, totals

    cols = ["claim_id", "kind", "outcome", "difference", "ci_low", "ci_high", "n"]
    first = pd.DataFrame(
        [
            ["a", "document", "agrees", 0.10, 0.05, 0.15, 5],
            ["b", "document", "agrees", 0.10, 0.05, 0.15, 5],
            ["c", "document", "inconclusive", 0.01, -0.02, 0.04, 5],
            ["d", "setup", "agrees", 1.0, 1.0, 1.0, 5],
        ],
        columns=cols,
    )
    second = first.copy()
    second.loc[0, ["outcome", "difference"]] = ["agrees", 0.12]  # inside the first's interval
    second.loc[1, ["outcome", "difference"]] = ["disagrees", -0.2]  # a flip, outside
    second.loc[2, ["outcome", "difference"]] = ["agrees", 0.06]  # decided now, outside
    compared = compare_claims(first, second)
    assert compared["same"].tolist() == [True, False, False, True]
    assert compared["flip"].tolist() == [False, True, False, False]
    assert compared["inside"].tolist()[:3] == [True, False, False] and pd.isna(compared["inside"].iloc[3])
    t = totals(compared)
    assert t["document"] == {"claims": 3, "same_outcome": 1, "flips": 1, "differ": 3, "inside": 1, "inside_of": 3}
    assert t["all"]["claims"] == 4
    assert float_paths({"avx2", "fma"})["other"] == {"MATHRL_CPU_PINS": "avx2"}
    assert float_paths(set())["other"]["ATEN_CPU_CAPABILITY"] == "default" and float_paths(set())["native"] == {}


def test_dvc_time_compares_runs_exactly_but_for_their_wall_clock_columns(tmp_path):
    from bench.dvc_time import compare_runs, differing_columns

    def metrics(root: Path, run_id: str, rows: list[str], header: str = "step,seconds,loss,sample_seconds") -> Path:
        path = root / "runs" / run_id / "metrics.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join([header, *rows]) + "\n")
        return path

    a = metrics(tmp_path / "a", "r0", ["1,0.5,0.25,0.1", "2,0.6,nan,0.2"])
    b = metrics(tmp_path / "b", "r0", ["1,9.5,0.25,3.1", "2,0.1,nan,0.4"])  # seconds differ, loss the same (NaN too)
    assert differing_columns(a, b) == []
    c = metrics(tmp_path / "c", "r0", ["1,0.5,0.25,0.1", "2,0.6,0.3,0.2"])
    assert differing_columns(a, c) == ["loss"]
    assert differing_columns(a, metrics(tmp_path / "d", "r0", ["1,0.5,0.25,0.1"])) == ["rows"]
    assert differing_columns(a, metrics(tmp_path / "e", "r0", ["1,0.5,0.25"], "step,seconds,loss")) == ["columns"]
    metrics(tmp_path / "a", "r1", ["1,0.5,0.25,0.1"])
    metrics(tmp_path / "c", "r2", ["1,0.5,0.25,0.1"])
    assert compare_runs(tmp_path / "a", tmp_path / "b") == {"runs": 2, "identical": 1, "differ": {}, "missing": ["r1"],
                                                            "extra": []}  # fmt: skip
    assert compare_runs(tmp_path / "a", tmp_path / "c") == {"runs": 2, "identical": 0, "differ": {"r0": ["loss"]},
                                                            "missing": ["r1"], "extra": ["r2"]}  # fmt: skip
