"""The default pipeline end to end: `python -m bench.pipeline [--results DIR | --existing DIR]`.

Runs what `make report` runs (`snakemake --profile profiles/default report`, every core)
into a fresh results directory, times it, and sums Snakemake's per-job benchmark files
(`<results>/benchmarks/<rule>/*.tsv`) by rule: jobs, summed job seconds, the longest job.
`--existing DIR` only reads the benchmark files of a finished run (for example the
`results/` of your own `make report`), without running anything.

The wall time is that of Snakemake alone: `make report` adds `make setup`, which on a
fresh clone installs the virtual environment (timed separately in the README).
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, emit, table


def stage_times(results: Path) -> dict[str, dict]:
    """{rule: {jobs, job_seconds, max_seconds, max_job, max_rss_mb}} from the benchmark TSVs."""
    stages: dict[str, dict] = {}
    for tsv in sorted((results / "benchmarks").rglob("*.tsv")):
        rule = tsv.relative_to(results / "benchmarks").parts[0]
        rule = rule[: -len(".tsv")] if rule.endswith(".tsv") else rule
        with open(tsv, newline="") as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        if not rows:
            continue
        secs = float(rows[-1]["s"])  # the last repeat
        rss = float(rows[-1].get("max_rss") or "nan")
        st = stages.setdefault(rule, {"jobs": 0, "job_seconds": 0.0, "max_seconds": 0.0, "max_job": "", "max_rss_mb": 0.0})
        st["jobs"] += 1
        st["job_seconds"] += secs
        if secs > st["max_seconds"]:
            st["max_seconds"], st["max_job"] = secs, tsv.stem
        if rss == rss:  # not NaN ("NA" where psutil could not measure)
            st["max_rss_mb"] = max(st["max_rss_mb"], rss)
    return stages


def stages_table(stages: dict[str, dict]) -> str:
    """The per-rule times as a text table, the costliest rule first."""
    rows = [[rule, str(st["jobs"]), f"{st['job_seconds']:.1f}", f"{st['max_seconds']:.1f}", st["max_job"]]
            for rule, st in sorted(stages.items(), key=lambda kv: -kv[1]["job_seconds"])]  # fmt: skip
    total = sum(st["job_seconds"] for st in stages.values())
    rows.append(["all", str(sum(st["jobs"] for st in stages.values())), f"{total:.1f}", "", ""])
    return table(["rule", "jobs", "job seconds", "longest job s", "longest job"], rows, right_from=1)


def pipeline_command(results: Path, cores: str, config_items: list[str]) -> list[str]:
    """make report's Snakemake command into `results`; the target comes first, because
    --config takes every word after it."""
    return [sys.executable, "-m", "snakemake", "report", "--profile", "profiles/default", "--cores", cores,
            "--config", f"results={results}", *config_items]  # fmt: skip


def run_pipeline(results: Path, cores: str, config_items: list[str]) -> dict:
    cmd = pipeline_command(results, cores, config_items)
    print(f"  running: {' '.join(cmd)}", file=sys.stderr, flush=True)
    log = results.parent / "snakemake.log"
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = log.read_text()[-3000:]
        raise SystemExit(f"bench.pipeline: snakemake failed (exit {proc.returncode}); log tail:\n{tail}")
    report = results / "report.html"
    return {"wall_s": wall, "cores": cores, "command": cmd, "loadavg_start": list(load_start), "loadavg_end": list(os.getloadavg()),
            "report_bytes": report.stat().st_size if report.is_file() else None}  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--results", type=Path, help="results directory to build (default: a fresh temporary one)")
    g.add_argument("--existing", type=Path, help="only summarise this finished results directory")
    p.add_argument("--table", action="store_true", help="print a table of the per-rule times instead of JSON")
    p.add_argument("--cores", default="all", help="snakemake --cores (default all, as make report)")
    p.add_argument("--config-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="extra snakemake --config item, e.g. for a smaller smoke run")
    args = p.parse_args(argv)

    if args.existing:
        if not (args.existing / "benchmarks").is_dir():
            p.error(f"--existing: {args.existing / 'benchmarks'} does not exist (run make report first)")
        stages = stage_times(args.existing)
        if args.table:
            print(f"Per-rule times of {args.existing} (Snakemake's benchmark files; jobs ran in parallel):")
            print(stages_table(stages))
        else:
            emit({"mode": "existing", "results": str(args.existing), "stages": stages})
        return 0
    with tempfile.TemporaryDirectory(prefix="mathrl-bench-pipeline-") as tmp:
        results = (args.results or Path(tmp) / "results").resolve()
        results.parent.mkdir(parents=True, exist_ok=True)
        if results.exists() and any(results.iterdir()):
            p.error(f"--results: {results} is not empty; the benchmark needs a fresh directory")
        rec = run_pipeline(results, args.cores, args.config_arg)
        rec.update(mode="fresh", results=str(results), stages=stage_times(results))
    emit(rec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
