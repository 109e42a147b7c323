"""The registry of measures: each a pure function with its name, what it means, and where bounded, its values.

Three kinds:

- a measure of a run (`@measure`): `fn(run) -> value`, read from the run's files alone (metrics, evaluations,
  summary, settings). `every_run=True` puts it in `run_measures`, the table of every run that a claim reads by
  default and `mathrl compare` reads; the others are columns of the run tables that name them
  (`mathrl.analysis.measures.tables`);
- a measure of a run among its table's rows (`@among`): `fn(rows) -> column`, from the measures of the other runs
  of its experiment (its spread around its group's median, say), computed once every run's own measures are in
  (in a bandit table, once its pooled rows are in: a row's label from its values, say);
- a measure of a bandit seed (`@seed_measure`): `fn(seed) -> value` of one seed's trajectory in one setting of a
  bandit study (`tables.BanditSeed`: its rows by step, the resolved bandit configuration), with how its values
  pool across the seeds of a setting (`pooled`: their mean unless stated) and what a seed without rows reads.
  They are kept apart from the measures of a run because they take another object: a run table cannot list one.

`mathrl claims --measures` lists all three. Names are unique across all three: a claim's measure means one thing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import pandas as pd

MEASURES: dict[str, tuple[str, Callable]] = {}  # name -> (what it means, fn(run))
EVERY_RUN: list[str] = []  # the measures of run_measures, in the order registered
BOUNDS: dict[str, tuple[float, float]] = {}  # the values a bounded measure can take (an accuracy: 0 to 1)
AMONG: dict[str, tuple[str, Callable[[pd.DataFrame], pd.Series]]] = {}  # name -> (meaning, fn(rows))
SHARE, CHANGE = (0.0, 1.0), (-1.0, 1.0)  # a share, and a change of a share


class SeedMeasure(NamedTuple):
    """A registered measure of a bandit seed (`seed_measure`)."""

    text: str
    fn: Callable  # fn(seed) -> value
    pooled: Callable | None  # fn(values, seeds) -> the pooled row's value; None: the mean across seeds
    missing: Any  # what a seed without rows reads
    rows: bool  # False: it reads the configuration alone, so a seed without rows has it too


SEED_MEASURES: dict[str, SeedMeasure] = {}  # name -> the measure of a bandit seed


def _unique(name: str) -> None:
    if name in MEASURES or name in AMONG or name in SEED_MEASURES:
        raise ValueError(f"measure {name!r} is registered twice")


def measure(name: str, text: str, bounds: tuple[float, float] | None = None, every_run: bool = False):
    """Register `fn(run) -> value` as the measure `name`, described by `text`, whose values lie in `bounds` where
    given (an interval of its mean is held there: `mathrl compare`); `every_run`: a column of run_measures."""

    def add(fn: Callable) -> Callable:
        _unique(name)
        MEASURES[name] = (text, fn)
        if every_run:
            EVERY_RUN.append(name)
        if bounds is not None:
            BOUNDS[name] = bounds
        return fn

    return add


def among(name: str, text: str):
    """Register `fn(rows) -> column` as the measure `name` of each run among its table's rows."""

    def add(fn: Callable[[pd.DataFrame], pd.Series]) -> Callable[[pd.DataFrame], pd.Series]:
        _unique(name)
        AMONG[name] = (text, fn)
        return fn

    return add


def seed_measure(
    name: str, text: str, pooled: Callable | None = None, missing: Any = math.nan, rows: bool = True
) -> Callable[[Callable], Callable]:
    """Register `fn(seed) -> value` as the measure `name` of a bandit seed, described by `text`; `pooled`:
    `fn(values, seeds)`, the value of its setting's pooled row from the seeds' values and the seeds (default: their
    mean); `missing`: what a seed without rows reads (unless `rows` is False: then fn reads the configuration alone
    and is asked for every seed)."""

    def add(fn: Callable) -> Callable:
        _unique(name)
        SEED_MEASURES[name] = SeedMeasure(text, fn, pooled, missing, rows)
        return fn

    return add


def described() -> dict[str, str]:
    """{name: what it means} of every registered measure, run measures first."""
    return {
        **{k: text for k, (text, _) in MEASURES.items()},
        **{k: text for k, (text, _) in AMONG.items()},
        **{k: m.text for k, m in SEED_MEASURES.items()},
    }


def listing(tables: dict[str, dict]) -> str:
    """Every registered measure, what it means, and the tables a claim reads it in (`run_measures` for the measures of
    every run; `tables`: the RUN_TABLES and BANDIT_TABLES declarations, whose `measures` and `among` list them),
    sorted by name: `mathrl claims --measures`."""
    where: dict[str, list[str]] = {name: ["run_measures"] for name in EVERY_RUN}
    for table, decl in tables.items():
        for name in (*decl["measures"], *decl.get("among", ())):
            where.setdefault(name, []).append(table)
    lines = []
    for name, text in sorted(described().items()):
        lines += [
            f"{name}: {text}",
            f"    in: {', '.join(where.get(name, [])) or 'no table (a study table or `mathrl compare` reads it)'}",
        ]
    return "\n".join(lines)
