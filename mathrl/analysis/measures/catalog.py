"""The registry of measures: each a pure function with its name, what it means, and where bounded, its values.

Two kinds:

- a measure of a run (`@measure`): `fn(run) -> value`, read from the run's files alone (metrics, evaluations,
  summary, settings). `every_run=True` puts it in `run_measures`, the table of every run that a claim reads by
  default and `mathrl compare` reads; the others are columns of the run tables that name them
  (`mathrl.analysis.measures.tables`);
- a measure of a run among its table's rows (`@among`): `fn(rows) -> column`, from the measures of the other runs
  of its experiment (its spread around its group's median, say), computed once every run's own measures are in.

`mathrl claims --measures` lists both. Names are unique across both.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

MEASURES: dict[str, tuple[str, Callable]] = {}  # name -> (what it means, fn(run))
EVERY_RUN: list[str] = []  # the measures of run_measures, in the order registered
BOUNDS: dict[str, tuple[float, float]] = {}  # the values a bounded measure can take (an accuracy: 0 to 1)
AMONG: dict[str, tuple[str, Callable[[pd.DataFrame], pd.Series]]] = {}  # name -> (meaning, fn(rows))
SHARE, CHANGE = (0.0, 1.0), (-1.0, 1.0)  # a share, and a change of a share


def _unique(name: str) -> None:
    if name in MEASURES or name in AMONG:
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


def described() -> dict[str, str]:
    """{name: what it means} of every registered measure, run measures first."""
    return {**{k: text for k, (text, _) in MEASURES.items()}, **{k: text for k, (text, _) in AMONG.items()}}


def listing(run_tables: dict[str, dict]) -> str:
    """Every registered measure, what it means, and the tables a claim reads it in (`run_measures` for the measures of
    every run; `run_tables`: the RUN_TABLES declarations), sorted by name: `mathrl claims --measures`."""
    where: dict[str, list[str]] = {name: ["run_measures"] for name in EVERY_RUN}
    for table, decl in run_tables.items():
        for name in decl["measures"]:
            where.setdefault(name, []).append(table)
    lines = []
    for name, text in sorted(described().items()):
        lines += [
            f"{name}: {text}",
            f"    in: {', '.join(where.get(name, [])) or 'no run table (a study table or `mathrl compare` reads it)'}",
        ]
    return "\n".join(lines)
