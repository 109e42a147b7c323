"""Measures: registered pure functions of a run's files, and the per-run tables claims read.

- `catalog`: the registry (`@measure`, `@among`; `mathrl claims --measures` lists it);
- `series`: reading a run's logged series (the start and end of a metric, its mean, its last value);
- `general`: the measures of every run (`run_measures`);
- `tables`: `run_measures` and the builders of the run tables and bandit tables the other modules declare
  (`RUN_TABLES`, `BANDIT_TABLES`);
- one module per family of studies: its measures and the run tables its claims read (`bandit_seeds`: the measures
  of a bandit seed and lab 04's bandit tables).

A new claim costs its YAML (config/claims.yaml) and, where no measure says what it needs, one function in a
module here, registered by name and listed in the table the claim reads. Every module of this package is
imported here (in name order), so its measures and tables are registered.
"""

from __future__ import annotations

import importlib
import pkgutil

from mathrl.analysis.measures.catalog import AMONG, BOUNDS, CHANGE, EVERY_RUN, MEASURES, SEED_MEASURES, SHARE, measure
from mathrl.analysis.measures.tables import run_measures

MODULES = [importlib.import_module(f"{__name__}.{m.name}") for m in sorted(pkgutil.iter_modules(__path__))]
RUN_TABLES: dict[str, dict] = {}
BANDIT_TABLES: dict[str, dict] = {}
for _module in MODULES:
    for _kind, _tables in (("RUN_TABLES", RUN_TABLES), ("BANDIT_TABLES", BANDIT_TABLES)):
        for _name, _decl in getattr(_module, _kind, {}).items():
            if _name in RUN_TABLES or _name in BANDIT_TABLES:
                raise ValueError(f"{_module.__name__}: table {_name} is declared twice")
            _tables[_name] = _decl

__all__ = [
    "AMONG",
    "BANDIT_TABLES",
    "BOUNDS",
    "CHANGE",
    "EVERY_RUN",
    "MEASURES",
    "MODULES",
    "RUN_TABLES",
    "SEED_MEASURES",
    "SHARE",
    "measure",
    "run_measures",
]
