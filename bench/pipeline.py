"""The default pipeline end to end: `python -m bench.pipeline [--results DIR | --existing DIR]`.

Runs what `make report` runs (`snakemake --profile profiles/default report`, every core)
into a fresh results directory, times it, and sums Snakemake's per-job benchmark files
(`<results>/benchmarks/<rule>/*.tsv`) by rule: jobs, summed job seconds, the longest job.
`--existing DIR` only reads the benchmark files of a finished run (for example the
`results/` of your own `make report`), without running anything.

The wall time is that of Snakemake alone: `make report` adds `make setup`, which on a
fresh clone installs the virtual environment (not part of this time).

`--alternate OLD --rounds N` times two versions of the pipeline on one machine, alternately:
by default in ABBA order (OLD, NEW, NEW, OLD, OLD, NEW, ...), so that a machine that drifts
over the hours (load, heat, page cache) favours neither; `--order alternating` gives OLD,
NEW, OLD, NEW. Each version is a `git archive` of its commit (NEW: `--new`, default HEAD),
each round into fresh results, fork-server and cache directories (kept under `--keep DIR`,
else removed); `--config-from REV` gives both the default configuration of commit REV (the
same runs for both). It prints each round's wall seconds and job-seconds (all jobs, training
jobs) and, for a version that records them, the training jobs' split (bench.split), then new
over old pooled over the rounds; `--json FILE` keeps the records.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
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
        st = stages.setdefault(
            rule, {"jobs": 0, "job_seconds": 0.0, "max_seconds": 0.0, "max_job": "", "max_rss_mb": 0.0}
        )
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
    return {"wall_s": wall, "cores": cores, "command": cmd, "loadavg_start": list(load_start),
            "loadavg_end": list(os.getloadavg()),
            "report_bytes": report.stat().st_size if report.is_file() else None}  # fmt: skip


def export(rev: str, dest: Path, config_from: str | None) -> Path:
    """A checkout of commit `rev` at `dest` (git archive), with `config_from`'s default config."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    if config_from:
        text = subprocess.run(["git", "show", f"{config_from}:config/config.yaml"], cwd=ROOT, capture_output=True,
                              check=True).stdout  # fmt: skip
        (dest / "config" / "config.yaml").write_bytes(text)
    return dest


ORDERS = ("abba", "alternating")


def schedule(rounds: int, order: str) -> list[tuple[int, str]]:
    """(round, version) in running order: "alternating" runs old then new each round; "abba"
    swaps the pair every other round (old new, new old, old new, ...)."""
    if order not in ORDERS:
        raise ValueError(f"order {order!r}: expected one of {', '.join(ORDERS)}")
    pairs = []
    for rnd in range(rounds):
        pair = ("new", "old") if order == "abba" and rnd % 2 else ("old", "new")
        pairs += [(rnd, name) for name in pair]
    return pairs


def alternate(
    old: str, new: str, rounds: int, cores: str, config_from: str | None, config_items: list[str],
    order: str = "abba", keep: Path | None = None,
) -> list[dict]:  # fmt: skip
    """Both versions' pipelines, in `schedule` order, `rounds` times each; one record per pipeline."""
    from bench.split import split

    records = []
    with contextlib.ExitStack() as stack:
        if keep:
            keep.mkdir(parents=True, exist_ok=False)
            tmp = str(keep)
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="mathrl-bench-alternate-"))
        checkouts = {
            name: export(rev, Path(tmp) / name / "checkout", config_from) for name, rev in (("old", old), ("new", new))
        }
        for rnd, name in schedule(rounds, order):
            work = Path(tmp) / name / f"round{rnd}"
            results = work / "results"
            env = {**os.environ, "PYTHONPATH": str(checkouts[name]), "MATHRL_CACHE_DIR": str(work / "cache"),
                   "MATHRL_FORK_SERVER_DIR": str(work / "fork")}  # fmt: skip
            (work / "fork").mkdir(parents=True, mode=0o700)
            cmd = [*pipeline_command(results, cores, config_items), "--keep-going"]
            print(f"  round {rnd} {name}: {' '.join(cmd)}", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            with open(work / "snakemake.log", "w") as fh:
                proc = subprocess.run(cmd, cwd=checkouts[name], env=env, stdout=fh, stderr=subprocess.STDOUT)
            wall = time.perf_counter() - t0
            stages = stage_times(results) if (results / "benchmarks").is_dir() else {}
            rec = {"version": name, "rev": old if name == "old" else new, "round": rnd, "wall_s": wall,
                   "returncode": proc.returncode, "job_seconds": sum(st["job_seconds"] for st in stages.values()),
                   "train_job_seconds": stages.get("train", {}).get("job_seconds", 0.0), "stages": stages,
                   "loadavg_end": list(os.getloadavg())}  # fmt: skip
            if stages:
                rec["split"] = split(results)["train"]
            records.append(rec)
            print(json.dumps({k: v for k, v in rec.items() if k != "stages"}), file=sys.stderr, flush=True)
    return records


def pooled_ratio(records: list[dict]) -> tuple[float, list[str]]:
    """New's job-seconds over old's, pooled over every round, counting only the stages that
    every pipeline of both versions ran (a version that stops early is not credited with
    the stages it never reached); and those stages."""
    common = sorted(set.intersection(*(set(r["stages"]) for r in records))) if records else []
    total = {name: sum(r["stages"][st]["job_seconds"] for r in records if r["version"] == name for st in common)
             for name in ("old", "new")}  # fmt: skip
    return (total["new"] / total["old"] if total["old"] else float("nan")), common


def pooled_ratio_line(records: list[dict]) -> str:
    ratio, common = pooled_ratio(records)
    every = set.union(*(set(r["stages"]) for r in records)) if records else set()
    left = sorted(every - set(common))
    tail = f"; not in every pipeline, left out: {', '.join(left)}" if left else ""
    return f"new / old job-seconds, pooled: {ratio:.3f} ({ratio - 1:+.1%}) over {', '.join(common)}{tail}"


def alternate_table(records: list[dict]) -> str:
    rows = [[r["version"], r["rev"], str(r["round"]), f"{r['wall_s']:.0f}", f"{r['job_seconds']:.1f}",
             f"{r['train_job_seconds']:.1f}", str(r["returncode"])] for r in records]  # fmt: skip
    return table(
        ["version", "commit", "round", "wall s", "job seconds", "train job seconds", "exit"], rows, right_from=2
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--results", type=Path, help="results directory to build (default: a fresh temporary one)")
    g.add_argument("--existing", type=Path, help="only summarise this finished results directory")
    p.add_argument("--table", action="store_true", help="print a table of the per-rule times instead of JSON")
    p.add_argument("--cores", default="all", help="snakemake --cores (default all, as make report)")
    p.add_argument(
        "--config-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra snakemake --config item, e.g. for a smaller smoke run",
    )
    g.add_argument("--alternate", metavar="OLD", help="time commit OLD's pipeline against --new's, alternately")
    p.add_argument("--new", default="HEAD", help="with --alternate: the new commit (default HEAD)")
    p.add_argument("--rounds", type=int, default=2, help="with --alternate: pipelines of each version (default 2)")
    p.add_argument("--config-from", metavar="REV", help="with --alternate: both run commit REV's config/config.yaml")
    p.add_argument("--json", type=Path, help="with --alternate: write the records to this file")
    p.add_argument("--order", choices=ORDERS, default="abba", help="with --alternate: the running order (default abba)")
    p.add_argument("--keep", type=Path, help="with --alternate: keep checkouts and results under this new directory")
    args = p.parse_args(argv)

    if args.alternate:
        records = alternate(
            args.alternate, args.new, args.rounds, args.cores, args.config_from, args.config_arg, args.order, args.keep
        )
        if args.json:
            args.json.write_text(json.dumps(records, indent=1))
        print(alternate_table(records))
        for name in ("old", "new"):
            done = [r["job_seconds"] for r in records if r["version"] == name]
            print(f"{name}: job-seconds {', '.join(f'{x:.1f}' for x in done)}")
        print(pooled_ratio_line(records))
        return 0

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
