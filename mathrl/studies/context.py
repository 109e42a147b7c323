"""What study modules read: the results tree (for tables) and the tables (for the rest)."""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

import pandas as pd

from mathrl.results import Run, load_runs


class Context:
    """The results tree of one configuration, read lazily."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.root = Path(cfg["results"])

    @cached_property
    def runs(self) -> dict[str, Run]:
        return load_runs(self.cfg)

    def experiment(self, name: str) -> list[Run]:
        """The runs of one experiment, in expansion order (missing ones included)."""
        return [r for r in self.runs.values() if r.spec.experiment == name]

    def bandit(self, study: str) -> pd.DataFrame | None:
        path = self.root / "bandit" / study / "metrics.csv"
        return pd.read_csv(path, keep_default_na=False, na_values=[""]) if path.exists() else None

    def gradvar(self, task: str) -> dict | None:
        path = self.root / "gradvar" / f"{task}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def sft(self, task: str) -> dict | None:
        path = self.root / "sft" / task / "summary.json"
        return json.loads(path.read_text()) if path.exists() else None


class Tables:
    """results/tables/*.csv by name; a table that was not written reads as an empty frame."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.dir = Path(cfg["results"]) / "tables"
        self._cache: dict[str, pd.DataFrame] = {}

    def __contains__(self, name: str) -> bool:
        return (self.dir / f"{name}.csv").exists()

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in self._cache:
            path = self.dir / f"{name}.csv"
            try:
                self._cache[name] = pd.read_csv(path)
            except (FileNotFoundError, pd.errors.EmptyDataError):  # not written, or a frame with no columns
                self._cache[name] = pd.DataFrame()
        return self._cache[name]
