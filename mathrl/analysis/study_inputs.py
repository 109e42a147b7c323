"""What study modules read: the results tree (for tables) and the tables (for the rest)."""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

import pandas as pd

from mathrl.analysis.measures import BANDIT_TABLES, RUN_TABLES
from mathrl.analysis.measures.tables import BanditSeed, bandit_seeds, bandit_table, run_table
from mathrl.analysis.results import Run, load_runs, read_csv, read_json  # (a file that does not read whole is named)
from mathrl.pipeline import layout
from mathrl.pipeline.config import config_hash
from mathrl.pipeline.errors import ConfigError


class Context:
    """The results tree of one configuration, read lazily."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self._declared: dict[str, pd.DataFrame] = {}  # the run and bandit tables built

    @cached_property
    def runs(self) -> dict[str, Run]:
        return load_runs(self.cfg)

    def experiment(self, name: str) -> list[Run]:
        """The runs of one experiment, in expansion order (missing ones included)."""
        return [r for r in self.runs.values() if r.spec.experiment == name]

    def run_table(self, name: str) -> pd.DataFrame:
        """A run table claims read (`mathrl.analysis.measures.RUN_TABLES`), built once; each call gets a copy."""
        if name not in self._declared:
            self._declared[name] = run_table(RUN_TABLES[name], self.runs, self.cfg)
        return self._declared[name].copy()

    def bandit_seeds(self, study: str) -> list[BanditSeed]:
        """Every setting and seed the configuration asks of a bandit study, in its order (`tables.bandit_seeds`)."""
        return bandit_seeds(self.cfg, study, self.bandit(study))

    def bandit_table(self, name: str) -> pd.DataFrame:
        """A bandit table claims read (`mathrl.analysis.measures.BANDIT_TABLES`), built once; each call gets a copy."""
        if name not in self._declared:
            decl = BANDIT_TABLES[name]
            self._declared[name] = bandit_table(decl, self.bandit_seeds(decl["study"]))
        return self._declared[name].copy()

    def run_file(self, run: Run, pattern: str) -> Path:
        """A file of a run (`pattern`: a layout path with {run_id}) where it was written: a run two experiments share
        is trained once, under the id of the one that trains it (`trained_as`)."""
        return layout.at(self.cfg, pattern, run_id=run.spec.trained_as)

    def run_text(self, run: Run, pattern: str) -> str:
        """The text of a file of a run (`run_file`; bytes that are not UTF-8 replaced), "" where none was written."""
        path = self.run_file(run, pattern)
        return path.read_text(errors="replace") if path.is_file() else ""

    def bandit(self, study: str) -> pd.DataFrame | None:
        path = layout.at(self.cfg, layout.BANDIT, study=study)
        return read_csv(path, keep_default_na=False, na_values=[""]) if path.exists() else None

    def gradvar(self, task: str) -> dict | None:
        path = layout.at(self.cfg, layout.GRADVAR, task=task)
        return read_json(path) if path.exists() else None

    def sft(self, task: str, warmup: int = 0) -> dict | None:
        path = layout.at(self.cfg, layout.SFT_SUMMARY, task=task, warmup=warmup)
        return read_json(path) if path.exists() else None

    def sft_starts(self, task: str) -> list[tuple[dict | None, dict | None]]:
        """Per warm-up of a task the config warms up: its further starts and their supervised controls (its
        starts.json, `mathrl sft --starts`) and its summary, each None where not written."""
        found = []
        for k in range(layout.warmups(self.cfg, task) if task in self.cfg.get("sft", {}) else 0):
            path = layout.at(self.cfg, layout.SFT_STARTS, task=task, warmup=k)
            found.append((read_json(path) if path.is_file() else None, self.sft(task, k)))
        return found

    def warmups(self, task: str) -> list[dict]:
        """The summaries of a task's warm-ups that exist, in warm-up order."""
        found = (self.sft(task, k) for k in range(layout.warmups(self.cfg, task)))
        return [summary for summary in found if summary is not None]


MADE_WITH = "config.json"  # beside the tables: the hash of the config `mathrl aggregate` read


def tables_hash(cfg: dict) -> str:
    """The hash of what the tables depend on: the config but where results go, how jobs are
    scheduled, and whether the file was read alone (the pipeline's copy says so)."""
    return config_hash({k: v for k, v in cfg.items() if k not in ("pipeline", "results", "standalone")})


class Tables:
    """results/tables/*.csv by name; a table that was not written reads as an empty frame."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self._run_tables: dict[str, pd.DataFrame] = {}
        self.dir = layout.at(cfg, layout.TABLES)
        self._cache: dict[str, pd.DataFrame] = {}

    def require(self, command: str) -> None:
        """Figures and the report read tables: without them every section would say "No data"."""
        if not (self.dir / "index.json").is_file():
            raise ConfigError(
                f"no tables in {self.dir}: run `mathrl aggregate` (with the same --config files) "
                f"before `mathrl {command}`"
            )

    def config_mismatch(self) -> str | None:
        """Why the tables may come from another config than this one, or None."""
        try:
            made = json.loads((self.dir / MADE_WITH).read_text())["config_hash"]
        except (OSError, ValueError, KeyError, TypeError):
            return None  # tables of an older aggregate: nothing to compare
        mine = tables_hash(self.cfg)
        return (
            None
            if made == mine
            else (
                f"the tables in {self.dir} were made from config {made}, this command read config {mine}: "
                f"pass the --config files `mathrl aggregate` was given"
            )
        )

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in self._cache:
            try:
                self._cache[name] = pd.read_csv(self.dir / f"{name}.csv")
            except (FileNotFoundError, pd.errors.EmptyDataError):  # not written, or a frame with no columns
                self._cache[name] = pd.DataFrame()
        return self._cache[name]
