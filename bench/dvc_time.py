"""`python -m bench.dvc_time`: `dvc repro` against `make report`'s Snakemake, from fresh checkouts.

Exports a commit (`--rev`, default HEAD) twice with `git archive` into a temporary directory,
each made a git repository of its own (a fresh clone: no results, no dvc.lock, no DVC cache,
no Snakemake metadata; `.venv` a link to this interpreter's environment, as `make setup` makes
it). In the first it runs `make report`'s Snakemake command (`snakemake --profile
profiles/default report`), then in the second `dvc repro`, one after the other, each with
fork-server and cache directories of its own, and prints both wall times and their ratio.

`--config FILE` (a config file of the repository, e.g. config/examples/tiny.yaml) runs that
configuration instead of the default: Snakemake gets it with `--configfile`, and `mathrl
dvc-yaml --config FILE` first writes the second checkout's dvc.yaml for it (not timed).

Then, in the second checkout: `dvc status` (up to date?), a second `dvc repro` (nothing to do?
its wall time too) and `snakemake -n report` (nothing to be done after DVC?); and every run's
metrics.csv of the two pipelines compared, exactly, the wall-clock columns (`seconds`,
`*_seconds`) aside. `--json FILE` keeps the record, `--keep DIR` the checkouts and results.
Run it on a machine with nothing else running: both wall times are the machine's.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, machine_info
from bench.pipeline import export

UP_TO_DATE = "Data and pipelines are up to date"  # dvc status and dvc repro, when nothing changed
NOTHING = "Nothing to be done"  # snakemake -n, when nothing would run


def wall_clock(column: str) -> bool:
    """A column of seconds measured, which differs between any two runs of the same settings."""
    return column == "seconds" or column.endswith("_seconds")


def differing_columns(a: Path, b: Path) -> list[str]:
    """The columns in which two metrics.csv files differ, exactly as written (both NaN is equal), the wall-clock
    columns aside; ["columns"] or ["rows"] when they do not even have the same columns or rows."""
    with open(a, newline="") as fa, open(b, newline="") as fb:
        rows_a, rows_b = list(csv.reader(fa)), list(csv.reader(fb))
    if not rows_a or not rows_b or rows_a[0] != rows_b[0]:
        return ["columns"]
    if len(rows_a) != len(rows_b):
        return ["rows"]

    def same(x: str, y: str) -> bool:
        try:
            return x == y or (math.isnan(float(x)) and math.isnan(float(y)))
        except ValueError:
            return False

    header = rows_a[0]
    return [name for i, name in enumerate(header) if not wall_clock(name)
            and not all(same(ra[i], rb[i]) for ra, rb in zip(rows_a[1:], rows_b[1:], strict=True))]  # fmt: skip


def compare_runs(first: Path, second: Path) -> dict:
    """Every run's metrics.csv under `first`/runs against the same run's under `second`/runs."""
    runs = sorted(p.parent.name for p in (first / "runs").glob("*/metrics.csv"))
    differ, missing = {}, []
    for run_id in runs:
        other = second / "runs" / run_id / "metrics.csv"
        if not other.is_file():
            missing.append(run_id)
        elif columns := differing_columns(first / "runs" / run_id / "metrics.csv", other):
            differ[run_id] = columns
    extra = sorted({p.parent.name for p in (second / "runs").glob("*/metrics.csv")} - set(runs))
    return {"runs": len(runs), "identical": len(runs) - len(differ) - len(missing), "differ": differ,
            "missing": missing, "extra": extra}  # fmt: skip


def checkout(rev: str, dest: Path, env: dict) -> Path:
    """Commit `rev` at `dest` as a fresh clone: the archive, committed to a new git repository, `.venv` linked to
    this interpreter's environment (DVC's stages run `.venv/bin/python`)."""
    export(rev, dest, None)
    if sys.prefix == sys.base_prefix:
        raise SystemExit("bench.dvc_time: run it with the virtual environment's python (make setup's .venv)")
    (dest / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", f"archive of {rev}"]):
        subprocess.run(cmd, cwd=dest, env=env, check=True, capture_output=True)
    return dest


def timed(cmd: list[str], cwd: Path, env: dict, log: Path) -> tuple[float, int, str]:
    """(wall seconds, exit status, output) of `cmd`, its output also written to `log`."""
    print(f"  {log.stem}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    log.write_text(proc.stdout)
    return wall, proc.returncode, proc.stdout


def environment(work: Path, code: Path) -> dict:
    """The pipeline's environment: its checkout's package, and fork-server, cache and DVC site directories of its
    own (nothing warm from another pipeline)."""
    for name in ("fork", "cache", "dvc-site"):
        (work / name).mkdir(parents=True, mode=0o700)
    git = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "bench@localhost"}  # fmt: skip
    return {**os.environ, **git, "PYTHONPATH": str(code), "MATHRL_FORK_SERVER_DIR": str(work / "fork"),
            "MATHRL_CACHE_DIR": str(work / "cache"), "DVC_SITE_CACHE_DIR": str(work / "dvc-site"),
            "DVC_NO_ANALYTICS": "1"}  # fmt: skip


def results_dir(repo: Path, config: str | None) -> Path:
    from mathrl.pipeline.config import load_config

    files = [repo / "config" / "config.yaml", *([repo / config] if config else [])]
    return repo / load_config(files)["results"]


def measure(rev: str, config: str | None, tmp: Path) -> dict:
    """Both pipelines one after the other, then the checks; the record."""
    py = sys.executable
    configfile = ["--configfile", config] if config else []
    rec: dict = {"rev": rev, "config": config or "config/config.yaml", "machine": machine_info()}

    sm_repo, dvc_repo = tmp / "snakemake" / "repo", tmp / "dvc" / "repo"
    sm_env = environment(tmp / "snakemake", sm_repo)
    dvc_env = environment(tmp / "dvc", dvc_repo)
    checkout(rev, sm_repo, sm_env)
    checkout(rev, dvc_repo, dvc_env)
    rec["commit"] = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    wall, rc, _ = timed([py, "-m", "snakemake", "--profile", "profiles/default", "report", *configfile], sm_repo,
                        sm_env, tmp / "snakemake" / "snakemake.log")  # fmt: skip
    rec["snakemake"] = {"wall_s": wall, "returncode": rc}
    if config:  # dvc.yaml for this configuration (committed for the default one)
        gen = subprocess.run([py, "-m", "mathrl", "dvc-yaml", "--config", config], cwd=dvc_repo, env=dvc_env,
                             capture_output=True, text=True)  # fmt: skip
        if gen.returncode:
            raise SystemExit(f"bench.dvc_time: mathrl dvc-yaml --config {config} failed:\n{gen.stderr[-2000:]}")
    wall, rc, out = timed([py, "-m", "dvc", "repro"], dvc_repo, dvc_env, tmp / "dvc" / "repro.log")
    rec["dvc"] = {"wall_s": wall, "returncode": rc, "stages_run": out.count("Running stage '")}
    rec["ratio"] = rec["dvc"]["wall_s"] / rec["snakemake"]["wall_s"]

    _, rc, out = timed([py, "-m", "dvc", "status"], dvc_repo, dvc_env, tmp / "dvc" / "status.log")
    rec["dvc_status_up_to_date"] = rc == 0 and UP_TO_DATE in out
    wall, rc, out = timed([py, "-m", "dvc", "repro"], dvc_repo, dvc_env, tmp / "dvc" / "repro-again.log")
    idle = rc == 0 and "Running stage" not in out and UP_TO_DATE in out
    rec["second_repro"] = {"wall_s": wall, "nothing_to_do": idle}
    _, rc, out = timed([py, "-m", "snakemake", "-n", "report", *configfile], dvc_repo, dvc_env,
                       tmp / "dvc" / "snakemake-after.log")  # fmt: skip
    rec["snakemake_after_dvc_nothing_to_do"] = rc == 0 and NOTHING in out
    rec["runs"] = compare_runs(results_dir(sm_repo, config), results_dir(dvc_repo, config))
    rec["loadavg_end"] = list(os.getloadavg())
    return rec


def summary(rec: dict) -> str:
    m, runs, sm, dvc = rec["machine"], rec["runs"], rec["snakemake"], rec["dvc"]
    yes = {True: "yes", False: "NO"}
    return "\n".join([
        f"{rec['config']} at {rec['commit'][:12]}, {m['date']}, {m['cpu']} ({m['cpus_usable']} usable CPUs; load "
        f"average {m['loadavg_start'][0]:.2f} at the start, {rec['loadavg_end'][0]:.2f} at the end)",
        f"snakemake (make report's command): {sm['wall_s']:8.1f} s  exit {sm['returncode']}",
        f"dvc repro:                         {dvc['wall_s']:8.1f} s  exit {dvc['returncode']}, "
        f"{dvc['stages_run']} stages",
        f"dvc repro / snakemake:             {rec['ratio']:8.2f}",
        f"dvc status afterwards up to date: {yes[rec['dvc_status_up_to_date']]}; second dvc repro did nothing: "
        f"{yes[rec['second_repro']['nothing_to_do']]} ({rec['second_repro']['wall_s']:.1f} s); "
        f"snakemake -n after DVC has nothing to do: {yes[rec['snakemake_after_dvc_nothing_to_do']]}",
        f"runs' metrics.csv, wall-clock columns aside: {runs['identical']} of {runs['runs']} identical"
        + "".join(f"; {k}: {runs[k]}" for k in ("differ", "missing", "extra") if runs[k]),
    ])  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.dvc_time", description=__doc__.splitlines()[0])
    p.add_argument("--rev", default="HEAD", help="the commit to check out (default HEAD)")
    p.add_argument("--config", metavar="FILE", help="a config file of the repository (default: the default config)")
    p.add_argument("--json", type=Path, help="write the record to this file")
    p.add_argument("--keep", type=Path, help="keep the checkouts, results and logs under this new directory")
    args = p.parse_args(argv)
    if args.config and not (ROOT / args.config).is_file():
        p.error(f"--config: {args.config} is no file of the repository (a path relative to {ROOT})")
    with contextlib.ExitStack() as stack:
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=False)
            tmp = args.keep.resolve()
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mathrl-bench-dvc-")))
        rec = measure(args.rev, args.config, tmp)
    if args.json:
        args.json.write_text(json.dumps(rec, indent=1) + "\n")
    print(summary(rec))
    ok = rec["snakemake"]["returncode"] == 0 and rec["dvc"]["returncode"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
