"""Replication as a measured property: `python -m bench.replicate [--keep DIR] [--compare FIRST SECOND]`.

Trains the default pipeline twice on this machine, each time on another float path, into fresh results
directories, and compares the two claims.csv files claim by claim:

- path `native`: the CPU kernels torch, oneMKL and oneDNN pick themselves (the default: AVX-512 where the CPU has
  it);
- path `other`: a narrower one, the same on every run: on a CPU with AVX2 and FMA, all three pinned to AVX2
  (`MATHRL_CPU_PINS=avx2`); on one without, torch's `ATEN_CPU_CAPABILITY=default` and oneMKL's
  `MKL_CBWR=COMPATIBLE`.

A sum taken in another order trains other warm-ups and other runs, as another machine would. The verdicts rest on
independent warm-ups, so the second pipeline's estimate should fall inside the first's 95% interval about as often
as a rerun's would (about 83% for two independent estimates of equal precision under a normal interval; more
under the t interval of five warm-ups), and outcomes should rarely change. Printed, per claim and in total (all
claims and the document family): whether the outcome is the same, whether it turned from agrees to disagrees or
back, and, for the claims whose estimate differs between the pipelines, whether the second lies inside the first's
interval. Neither report is changed: this is a check. `--compare FIRST SECOND` compares two finished results
directories without training.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from bench.common import ROOT, table
from bench.pipeline import pipeline_command

DECIDED = ("agrees", "disagrees")


def float_paths(flags: set[str]) -> dict[str, dict[str, str]]:
    """The environment of each float path on a CPU with these flags (see the module's docstring)."""
    other = (
        {"MATHRL_CPU_PINS": "avx2"}
        if {"avx2", "fma"} <= flags
        else {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
    )
    return {"native": {}, "other": other}


def compare_claims(first: pd.DataFrame, second: pd.DataFrame) -> pd.DataFrame:
    """One row per claim judged in both: the outcomes, whether they are the same, whether the claim turned from
    agrees to disagrees or back (`flip`), whether the two estimates differ (`differs`: the runs behind the claim are
    not the same), and whether the second estimate lies inside the first's 95% interval (`inside`; empty where
    they do not differ or the first has no interval)."""
    cols = ["claim_id", "kind", "outcome", "difference", "ci_low", "ci_high", "n"]
    both = first[cols].merge(second[cols], on=["claim_id", "kind"], suffixes=("_1", "_2"))
    both["same"] = both["outcome_1"] == both["outcome_2"]
    both["flip"] = both["outcome_1"].isin(DECIDED) & both["outcome_2"].isin(DECIDED) & ~both["same"]
    d1, d2 = (pd.to_numeric(both[f"difference_{k}"], errors="coerce") for k in (1, 2))
    both["differs"] = ~((d1 - d2).abs() <= 1e-12 * (1 + d1.abs())) & d1.notna() & d2.notna()
    lo, hi = (pd.to_numeric(both[c], errors="coerce") for c in ("ci_low_1", "ci_high_1"))
    inside = (lo <= d2) & (d2 <= hi)
    both["inside"] = inside.where(both["differs"] & lo.notna() & hi.notna())
    return both


def totals(compared: pd.DataFrame) -> dict:
    """Counts over all claims and over the document family."""
    out = {}
    for name, rows in (("all", compared), ("document", compared[compared["kind"] == "document"])):
        measured = rows["inside"].dropna()
        out[name] = {
            "claims": len(rows),
            "same_outcome": int(rows["same"].sum()),
            "flips": int(rows["flip"].sum()),
            "differ": int(rows["differs"].sum()),
            "inside": int(measured.astype(bool).sum()),
            "inside_of": len(measured),
        }
    return out


def summary_lines(compared: pd.DataFrame) -> list[str]:
    lines = []
    for name, t in totals(compared).items():
        share = t["inside"] / t["inside_of"] if t["inside_of"] else float("nan")
        lines.append(
            f"{name}: {t['same_outcome']} of {t['claims']} claims keep their outcome; {t['flips']} turn between "
            f"agrees and disagrees; of the {t['inside_of']} whose estimate differs (and has an interval), "
            f"{t['inside']} ({share:.0%}) lie inside the first pipeline's 95% interval"
        )
    return lines


def claims_table(compared: pd.DataFrame) -> str:
    def row(r) -> list[str]:
        inside = "" if pd.isna(r.inside) else ("yes" if r.inside else "no")
        interval = f"[{r.ci_low_1:.4g}, {r.ci_high_1:.4g}]"
        return [
            r.claim_id,
            r.kind,
            r.outcome_1,
            r.outcome_2,
            f"{r.difference_1:.4g}",
            interval,
            f"{r.difference_2:.4g}",
            inside,
        ]

    heads = ["claim", "kind", "first", "second", "estimate 1", "interval 1", "estimate 2", "inside"]
    return table(heads, [row(r) for r in compared.itertuples()])


def train(results: Path, env_extra: dict, cores: str) -> dict:
    """The default pipeline into `results` with the float path's environment; its wall time."""
    work = results.parent
    env = {
        **os.environ,
        **env_extra,
        "MATHRL_CACHE_DIR": str(work / "cache"),
        "MATHRL_FORK_SERVER_DIR": str(work / "fork"),
    }
    for key in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "MATHRL_CPU_PINS"):
        if key not in env_extra:
            env.pop(key, None)  # the path's own kernels, not the caller's
    (work / "fork").mkdir(parents=True, mode=0o700, exist_ok=True)
    cmd = pipeline_command(results, cores, [])
    print(f"  {results}: {' '.join(cmd)} with {env_extra or 'no kernel variables'}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with open(work / "snakemake.log", "w") as fh:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"bench.replicate: the pipeline into {results} failed; see {work / 'snakemake.log'}")
    return {"results": str(results), "env": env_extra, "wall_s": time.perf_counter() - t0}


def main(argv=None) -> int:
    from mathrl import cpu_flags

    p = argparse.ArgumentParser(prog="python -m bench.replicate", description=__doc__.splitlines()[0])
    p.add_argument("--compare", nargs=2, type=Path, metavar=("FIRST", "SECOND"), help="two finished results dirs")
    p.add_argument("--keep", type=Path, help="keep both pipelines' results under this new directory")
    p.add_argument("--cores", default="all", help="snakemake --cores (default all, as make report)")
    p.add_argument("--json", type=Path, help="write the per-claim comparison and totals here")
    args = p.parse_args(argv)
    runs = []
    with contextlib.ExitStack() as stack:
        if args.compare:
            first, second = args.compare
        else:
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=False)
            base = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mathrl-replicate-")))
            paths = float_paths(cpu_flags())
            first, second = (base / name / "results" for name in paths)
            runs = [train(results, env, args.cores) for results, env in zip((first, second), paths.values())]
        compared = compare_claims(*(pd.read_csv(d / "tables" / "claims.csv") for d in (first, second)))
    print(claims_table(compared))
    for line in summary_lines(compared):
        print(line)
    if args.json:
        record = {"pipelines": runs, "totals": totals(compared), "claims": compared.to_dict("records")}
        args.json.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
