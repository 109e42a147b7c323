"""The per-run tables claims read: `run_measures` (every run, every measure with `every_run`) and the run tables
each measures module declares.

A run table is data, declared in a module-level `RUN_TABLES = {name: declaration}` of a module of this package:

    "stability_batch_runs": {
        "experiment": "batch",                  # or a list of experiments, in the config's order
        "keys": ["batch_size", "lr", "seed", "warmup"],
        "measures": ["final_eval", "roughness", "final_reward_absdev"],
        "roles": ["A", "B", "C"],               # optional: the order a variant's roles are named in (key `role`)
        "runs": "all",                          # or "with_result": leave out runs without one
    }

One row per run of the experiment, in the order the config expands them. A key is an identity of the run
(IDENTITY: run_id, experiment, variant, seed, warmup, status, task, setting, role) or one of its settings
(`batch_size`); a measure is a registered measure of a run (NaN for a run without a result) or of a run among
the table's rows (`catalog.among`, computed last, in the order listed). The columns are the keys, then the
measures: `mathrl.analysis.claim_names` reads the declarations from the source to check a claim's names before
anything runs, and `mathrl aggregate` builds every declared table (`run_table`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from mathrl.analysis.measures.catalog import AMONG, EVERY_RUN, MEASURES
from mathrl.analysis.results import Run, warmup
from mathrl.pipeline.config import point_label

# The table claims read by default, one row per run: its identity, its grid point ({grid}: every experiment's grid
# keys), its task and every measure registered with every_run ({measures}).
CLAIM_TABLES = {"run_measures": ["run_id", "experiment", "variant", "seed", "warmup", "{grid}", "task", "{measures}"]}


def run_measures(runs: dict[str, Run]) -> pd.DataFrame:
    """One row per run with a result: its identity, grid point and every measure registered with `every_run`."""
    rows = []
    for run_id, run in runs.items():
        if not run.ok:
            continue
        spec = run.spec
        row = {
            "run_id": run_id,
            "experiment": spec.experiment,
            "variant": spec.variant or "",
            "seed": spec.seed,
            "warmup": warmup(run),
            **{k: v for k, v in spec.point.items()},
            "task": run.settings.get("task", ""),
        }
        for name in EVERY_RUN:
            try:
                row[name] = MEASURES[name][1](run)
            except (KeyError, IndexError, ValueError, ZeroDivisionError):
                row[name] = math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def role_of(role: dict[str, str], order: tuple[str, ...] | list[str]) -> dict[str, str]:
    """{variant: role}, the inverse of an experiment's {role: variant}. A variant can hold several roles (a study's
    own and another study's, such as the calibration's `reference`); it is named by the first of its roles in
    `order`, and by another role only where it holds none of them."""
    out: dict[str, str] = {}
    for r in [*[r for r in order if r in role], *[r for r in role if r not in order]]:
        out.setdefault(role[r], r)
    return out


IDENTITY = {
    "run_id": lambda run, role: run.spec.run_id,
    "experiment": lambda run, role: run.spec.experiment,
    "variant": lambda run, role: run.spec.variant or "",
    "seed": lambda run, role: run.spec.seed,
    "warmup": lambda run, role: warmup(run),
    "status": lambda run, role: run.status,
    "task": lambda run, role: run.settings.get("task", ""),
    "setting": lambda run, role: run.spec.variant or point_label(run.spec.point),  # as a role names it
    "role": lambda run, role: role.get(run.spec.variant or point_label(run.spec.point), ""),
}


def key(run: Run, name: str, role: Mapping[str, str]):
    """A key column of a run: an identity (IDENTITY) or the run's setting `name`."""
    return IDENTITY[name](run, role) if name in IDENTITY else run.settings[name]


def value(run: Run, name: str):
    """A registered measure of a run; NaN for a run without a result."""
    return MEASURES[name][1](run) if run.ok else math.nan


def experiments_of(decl: dict) -> list[str]:
    exp = decl["experiment"]
    return [exp] if isinstance(exp, str) else list(exp)


def run_table(decl: dict, runs: dict[str, Run], cfg: dict) -> pd.DataFrame:
    """The rows of a run table (a RUN_TABLES declaration) over `runs`, the configuration's runs in expansion order."""
    wanted = experiments_of(decl)
    chosen = [r for r in runs.values() if r.spec.experiment in wanted]
    if decl.get("runs", "all") == "with_result":
        chosen = [r for r in chosen if r.ok]
    own = [m for m in decl["measures"] if m not in AMONG]
    rows = []
    for run in chosen:
        roles = (cfg.get("experiments") or {}).get(run.spec.experiment, {}).get("roles") or {}
        role = role_of(roles, decl.get("roles", ()))
        rows.append({**{k: key(run, k, role) for k in decl["keys"]}, **{m: value(run, m) for m in own}})
    df = pd.DataFrame(rows, columns=[*decl["keys"], *own])
    for m in decl["measures"]:
        if m in AMONG:
            df[m] = AMONG[m][1](df) if len(df) else pd.Series(dtype=float)
    return df[[*decl["keys"], *decl["measures"]]]
