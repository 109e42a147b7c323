"""Calibration pilot: run a list of ad hoc RL runs one after another, then tabulate them.

    .venv/bin/python scripts/calibration_sweep.py run PLAN.txt      # each line: RUN_ID key=value ...
    .venv/bin/python scripts/calibration_sweep.py table [RUN_ID ...]
    .venv/bin/python scripts/calibration_sweep.py trajectory RUN_ID ...

`run` calls `mathrl train --threads 1 --run-id RUN_ID key=value ...` for each line whose
results/runs/RUN_ID/summary.json does not exist yet (lines starting with # are skipped).
`table` reads each run's summary.json and metrics.csv and prints the warm-up's held-out
accuracy, the final one, the gain with a 95% Newcombe (Wilson) interval for the difference
of two proportions on the evaluated problems, the best and worst evaluation after the start,
the rollouts' sampled accuracy (training prompts, temperature 1) at the first step and
over the last 10, the share of zero-std groups, the final entropy and KL, the run's wall seconds and the whole
command's CPU seconds.
"""

from __future__ import annotations

import csv
import json
import math
import resource
import subprocess
import sys
from pathlib import Path

from mathrl.analysis.verdict import rate_difference

RUNS = Path("results/runs")
CPU_LOG = Path("results/calibration_cpu_seconds.tsv")


def cpu_seconds() -> dict[str, float]:
    if not CPU_LOG.exists():
        return {}
    return {k: float(v) for k, v in (line.split("\t") for line in CPU_LOG.read_text().splitlines())}


def run_plan(plan: Path) -> None:
    for line in plan.read_text().splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        run_id, overrides = words[0], words[1:]
        if (RUNS / run_id / "summary.json").exists():
            continue
        cmd = [".venv/bin/mathrl", "train", "--threads", "1", "--run-id", run_id, *overrides]
        print("$", " ".join(cmd), flush=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, check=False)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        with open(CPU_LOG, "a") as f:  # the whole command's CPU seconds (start-up included)
            f.write(f"{run_id}\t{cpu:.1f}\n")


def evals(run_id: str) -> list[dict]:
    with open(RUNS / run_id / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    return rows


def number(row: dict, key: str) -> float:
    value = row.get(key, "")
    return float(value) if value not in ("", None) else math.nan


def table(run_ids: list[str]) -> None:
    if not run_ids and not RUNS.is_dir():
        sys.exit(f"no runs under {RUNS}")
    run_ids = run_ids or sorted(p.name for p in RUNS.iterdir() if (p / "summary.json").exists())
    print(
        "| run | start | final | gain (95% CI) | best | min | sampled acc first -> last 10 | zero-std end | entropy end"
        " | kl end | wall s | cpu s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    cpu = cpu_seconds()
    for run_id in run_ids:
        path = RUNS / run_id / "summary.json"
        if not path.exists():
            continue
        s = json.loads(path.read_text())
        n = s["config"].get("eval_size") or 500
        p0, p1 = s["initial"]["eval_accuracy"], s["final"]["eval_accuracy"]
        est = rate_difference(round(p1 * n), n, round(p0 * n), n)  # Newcombe's interval, as the report's rates
        lo, hi = est.lo, est.hi
        rows = evals(run_id)
        accs = [number(r, "eval_accuracy") for r in rows if not math.isnan(number(r, "eval_accuracy"))]
        last = rows[-1]
        ent, kl = number(last, "entropy"), number(last, "kl")
        sampled_first = number(rows[0], "accuracy")
        sampled_last = sum(number(r, "accuracy") for r in rows[-10:]) / len(rows[-10:])
        zero_std = sum(number(r, "frac_zero_std") for r in rows[-10:]) / len(rows[-10:])
        print(
            f"| {run_id} | {p0:.3f} | {p1:.3f} | {100 * (p1 - p0):+.1f} ({100 * lo:+.1f}, {100 * hi:+.1f}) "
            f"| {max(accs):.3f} | {min(accs):.3f} | {sampled_first:.3f} -> {sampled_last:.3f} | {zero_std:.2f} "
            f"| {ent:.3f} | {kl:.3f} | {s['wall_seconds']:.1f} | {cpu.get(run_id, math.nan):.1f} |"
        )


def trajectory(run_ids: list[str], every: int = 20) -> None:
    """Held-out accuracy every `every` steps (from metrics.csv), one line per run."""
    for run_id in run_ids:
        rows = [r for r in evals(run_id) if not math.isnan(number(r, "eval_accuracy"))]
        points = [
            f"{int(number(r, 'step'))}:{number(r, 'eval_accuracy'):.3f}"
            for r in rows
            if int(number(r, "step")) % every == 0 or r is rows[-1]
        ]
        print(f"{run_id}: " + " ".join(points))


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command in ("-h", "--help"):
        print(__doc__)
    elif command == "run" and len(sys.argv) == 3:
        run_plan(Path(sys.argv[2]))
    elif command == "trajectory":
        trajectory(sys.argv[2:])
    elif command == "table":
        table(sys.argv[2:])
    else:
        sys.exit(f"usage: {sys.argv[0]} run PLAN.txt | table [RUN_ID ...] | trajectory RUN_ID ...")
