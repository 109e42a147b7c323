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
measures.

A bandit table is data too, declared in a module-level `BANDIT_TABLES = {name: declaration}`:

    "lab04_vanishing": {
        "study": "gradient_vanishing",          # the bandit study whose CSV it reads (ctx.bandit)
        "measures": ["grad_norm_homogeneous", "grad_norm_diverse", "grad_norm_reduction"],  # of a seed
        "spread": ["grad_norm_homogeneous", "grad_norm_diverse", "grad_norm_reduction"],  # {m}_std when pooled
        "among": ["severity"],                  # of each row among the table's rows, the pooled ones too
    }

One row per setting and seed the configuration asks of the study (in its order; a seed the CSV lacks is a row of
each measure's `missing` value with n = 0), then per setting a pooled row with seed `all`: each measure pooled
across the seeds (their mean, or the measure's own `pooled`), `n` the seeds found and `{m}_std` the sample std
across seeds of each measure in `spread`. A measure there is a registered measure of a bandit seed
(`catalog.seed_measure`: `fn(seed)` of a `BanditSeed`); an `among` measure is computed last over every row. The
columns: setting, seed, the measures, n, the spreads, the `among` measures (`claim_names.bandit_columns`).

`mathrl.analysis.claim_names` reads both kinds of declaration from the source to check a claim's names before
anything runs, and `mathrl aggregate` builds every declared table (`run_table`, `bandit_table`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from mathrl.analysis.claim_names import bandit_columns
from mathrl.analysis.measures.catalog import AMONG, EVERY_RUN, MEASURES, SEED_MEASURES
from mathrl.analysis.results import Run, mean_spread, warmup
from mathrl.pipeline import bandit_config as bandit
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


@dataclass(frozen=True, eq=False)
class BanditSeed:
    """One seed of one setting of a bandit study: its rows in step order (none where the study's CSV lacks them), the
    rows of the setting's other seeds that have any (in the configuration's seed order) and the resolved `bandit:`
    block (`bandit_config.resolve`: the arms' rewards, each study's settings)."""

    study: str
    setting: str
    seed: int
    frame: pd.DataFrame
    peers: tuple[pd.DataFrame, ...]
    config: dict


def bandit_seeds(cfg: dict, study: str, df: pd.DataFrame | None) -> list[BanditSeed]:
    """Every setting and seed the configuration asks of a bandit study, in its order, from the study's CSV (`df`, one
    row per setting, seed and step; None where it was not written)."""
    resolved = bandit.resolve(cfg.get("bandit"))
    df = pd.DataFrame(columns=bandit.COLUMNS) if df is None else df
    # one grouping for the whole study, not one filter per setting and seed
    found = {(str(k[0]), int(k[1])): g for k, g in df.groupby(["setting", "seed"], sort=False)}
    seeds = [int(s) for s in bandit.study_seeds(resolved, study)]
    out = []
    for setting in resolved["studies"][study]["settings"]:
        frames = {s: found.get((setting, s), df.iloc[:0]).sort_values("step") for s in seeds}
        for s in seeds:
            peers = tuple(f for k, f in frames.items() if k != s and len(f))
            out.append(BanditSeed(study, setting, s, frames[s], peers, resolved))
    return out


def seed_value(seed: BanditSeed, name: str):
    """A registered measure of a bandit seed; its `missing` value for a seed without rows."""
    m = SEED_MEASURES[name]
    return m.fn(seed) if len(seed.frame) or not m.rows else m.missing


def pooled_row(decl: dict, rows: pd.DataFrame, seeds: list[BanditSeed]) -> pd.DataFrame:
    """A setting's pooled row (seed `all`) from its seeds' rows: each measure's mean across seeds or its own
    `pooled`, `n` the seeds found and `{m}_std` of each measure in `spread`."""
    averaged = [m for m in decl["measures"] if m in decl["spread"] or SEED_MEASURES[m].pooled is None]
    out = mean_spread(rows, ["setting"], averaged) if averaged else rows[["setting"]].head(1).reset_index(drop=True)
    out = out.rename(columns={f"{m}_mean": m for m in averaged}).assign(seed="all", n=int(rows["n"].sum()))
    for m in decl["measures"]:
        if SEED_MEASURES[m].pooled is not None:
            out[m] = [SEED_MEASURES[m].pooled(rows[m], seeds)]
    return out


def bandit_table(decl: dict, seeds: list[BanditSeed]) -> pd.DataFrame:
    """The rows of a bandit table (a BANDIT_TABLES declaration) over the study's seeds (`bandit_seeds`)."""
    own = ["setting", "seed", *decl["measures"], "n"]
    rows = [[s.setting, s.seed, *(seed_value(s, m) for m in decl["measures"]), int(len(s.frame) > 0)] for s in seeds]
    per = pd.DataFrame(rows, columns=own)
    parts = []
    for setting, g in per.groupby("setting", sort=False):
        parts += [g, pooled_row(decl, g, [s for s in seeds if s.setting == setting])]
    df = pd.concat(parts, ignore_index=True) if parts else per
    for m in decl["among"]:
        df[m] = AMONG[m][1](df) if len(df) else pd.Series(dtype=object)
    return df.reindex(columns=bandit_columns(decl))
