"""Where the pipeline's job-seconds go: `python -m bench.split RESULTS [--json]`.

Reads a finished results tree: Snakemake's benchmark file of each job (its seconds, s) and,
for each training job, its runs' metrics.csv and summary.json (a job trains one setting's
seeds one after another; a tree from before that, one run). A training job's seconds
split into
- RL steps: the sum of its steps' `sample_seconds + update_seconds`;
- evaluation: its evaluations' `eval_seconds` (metrics.csv) and the evaluation before RL
  (summary.json's `initial.eval_seconds`), and pass@k's sampling before and after RL
  (`pass_at_k_seconds`, in runs that read pass@k);
- run setup: the rest of the run's own command (summary.json's `run_seconds`: reading the
  configuration, problems and checkpoint, building the model, the steps' bookkeeping,
  snapshots and writing the outputs);
- outside the runs: the job's seconds less its runs' `run_seconds` (the interpreter or
  fork, the launcher, Snakemake's shell).
A tree from before `eval_seconds` and `run_seconds` existed has neither: there the evaluations
inside the steps are the steps' `seconds - sample_seconds - update_seconds`, and what the
evaluation before RL, the setup and the outside took are one figure.
The other rules' jobs are summed by rule (the warm-ups are `sft`).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

from bench.common import table
from mathrl.pipeline.config import run_group

PARTS = ("rl_steps", "evaluation", "run_setup", "outside_run")
LABELS = {"rl_steps": "RL steps", "evaluation": "evaluation", "run_setup": "run setup",
          "outside_run": "outside the run",
          "setup_and_outside": "setup, initial evaluation and outside (not recorded apart)"}  # fmt: skip


def _job_seconds(tsv: Path) -> float | None:
    with open(tsv, newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return float(rows[-1]["s"]) if rows else None


def _number(text: str | None) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def run_parts(run_dir: Path) -> dict:
    """One run's seconds by part, inside its own command: rl_steps, evaluation and run_seconds (NaN where the run
    did not record it; an older tree's evaluation is that inside the steps alone)."""
    with open(run_dir / "metrics.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    summary = json.loads((run_dir / "summary.json").read_text())
    rl = sum(_number(r["sample_seconds"]) + _number(r["update_seconds"]) for r in rows)
    run_seconds = _number(summary.get("run_seconds"))
    if rows and "eval_seconds" in rows[0] and not math.isnan(run_seconds):
        evals = sum(x for x in (_number(r["eval_seconds"]) for r in rows) if not math.isnan(x))
        evals += _number((summary.get("initial") or {}).get("eval_seconds")) or 0.0
        evals += _number(summary.get("pass_at_k_seconds")) if "pass_at_k_seconds" in summary else 0.0
    else:  # an older tree: the evaluations inside the steps alone are known
        evals = sum(_number(r["seconds"]) - _number(r["sample_seconds"]) - _number(r["update_seconds"])
                    for r in rows if not math.isnan(_number(r["eval_accuracy"])))  # fmt: skip
        run_seconds = math.nan
    return {"rl_steps": rl, "evaluation": evals, "run_seconds": run_seconds}


def run_split(job_seconds: float, run_dirs: list[Path]) -> dict:
    """One training job's seconds by part (module docstring), over the runs it trained (one, or a setting's seeds
    one after another); where a run recorded no run_seconds, setup and outside are one figure."""
    parts = [run_parts(d) for d in run_dirs]
    rl, evals = sum(p["rl_steps"] for p in parts), sum(p["evaluation"] for p in parts)
    run_seconds = sum(p["run_seconds"] for p in parts)
    out = {"job_seconds": job_seconds, "rl_steps": rl, "evaluation": evals, "runs": len(parts)}
    if math.isnan(run_seconds):
        out["setup_and_outside"] = job_seconds - rl - evals
    else:
        out.update(run_setup=run_seconds - rl - evals, outside_run=job_seconds - run_seconds)
    return out


def job_runs(results: Path, job: str) -> list[Path]:
    """The run directories a training job trained: the run of its name (one job per run), else the runs of the
    group of its name (config.run_group: one job per setting); only runs with both outputs."""
    runs = Path(results) / "runs"
    dirs = (
        [runs / job]
        if (runs / job).is_dir()
        else sorted(d for d in runs.glob(f"{job}__s*") if run_group(d.name) == job)
    )
    return [d for d in dirs if (d / "metrics.csv").is_file() and (d / "summary.json").is_file()]


def split(results: Path) -> dict:
    """{train: {part: seconds, jobs, job_seconds}, rules: {rule: job seconds}, total, per_run}."""
    bench = Path(results) / "benchmarks"
    rules: dict[str, float] = {}
    jobs: dict[str, int] = {}
    per_run: dict[str, dict] = {}
    for tsv in sorted(bench.rglob("*.tsv")):
        rule = tsv.relative_to(bench).parts[0].removesuffix(".tsv")
        secs = _job_seconds(tsv)
        if secs is None:
            continue
        rules[rule] = rules.get(rule, 0.0) + secs
        jobs[rule] = jobs.get(rule, 0) + 1
        run_dirs = job_runs(results, tsv.stem) if rule == "train" else []
        if run_dirs:
            per_run[tsv.stem] = run_split(secs, run_dirs)
    train: dict[str, float] = {"jobs": len(per_run), "runs": sum(r["runs"] for r in per_run.values()),
                               "job_seconds": sum(r["job_seconds"] for r in per_run.values())}  # fmt: skip
    for part in (*PARTS, "setup_and_outside"):
        values = [r[part] for r in per_run.values() if part in r]
        if values:
            train[part] = sum(values)
    other = train["job_seconds"] - train.get("rl_steps", 0.0) - train.get("evaluation", 0.0)
    train["outside_steps_and_evaluations"] = other
    train["outside_share"] = other / train["job_seconds"] if train["job_seconds"] else math.nan
    return {"results": str(results), "train": train, "rules": rules, "jobs": jobs, "total": sum(rules.values()),
            "per_run": per_run}  # fmt: skip


def split_table(s: dict) -> str:
    """The split as a text table: the training jobs' parts, then every other rule."""
    t = s["train"]
    rows = [[f"train: {LABELS[p]}", f"{t[p]:.1f}", f"{t[p] / t['job_seconds']:.0%}"]
            for p in (*PARTS, "setup_and_outside") if p in t]  # fmt: skip
    rows.append([f"train jobs ({t['jobs']}, {t['runs']} runs)", f"{t['job_seconds']:.1f}", "100%"])
    for rule, secs in sorted(s["rules"].items(), key=lambda kv: -kv[1]):
        if rule != "train":
            rows.append([f"{rule} ({s['jobs'][rule]} jobs)", f"{secs:.1f}", ""])
    rows.append(["all jobs", f"{s['total']:.1f}", ""])
    head = table(["part", "job seconds", "of train"], rows, right_from=1)
    return (head + f"\ntraining jobs outside RL steps and evaluations: {t['outside_steps_and_evaluations']:.1f} s, "
            f"{t['outside_share']:.1%} of their job-seconds")  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.split", description=__doc__.splitlines()[0])
    p.add_argument(
        "results", type=Path, nargs="?", default=Path("results"), help="a finished results tree (default results)"
    )
    p.add_argument("--json", action="store_true", help="print JSON (with each run's split) instead of a table")
    args = p.parse_args(argv)
    if not (args.results / "benchmarks").is_dir():
        p.error(f"{args.results / 'benchmarks'} does not exist (run make report first)")
    s = split(args.results)
    if args.json:
        print(json.dumps(s, indent=1))
    else:
        print(
            f"Job-seconds of {args.results} by part (Snakemake's benchmark files, each run's metrics.csv and"
            " summary.json):"
        )
        print(split_table(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
