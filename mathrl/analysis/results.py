"""Reading what the pipeline wrote: runs, their status, and the statistics tables share.

Everything here works from files alone. A run is `complete` (or `stopped_nonfinite`) only
when its summary.json exists: metrics.csv and summary.json are written once, atomically,
at the end of a run, so a half-finished run is `missing` (no files yet) and is never mistaken
for a result. A run whose files do not read whole is `unreadable`, never read in part: summary.json
records the length and SHA-256 of each file written before it (`atomic.record`), and a CSV is
also checked in shape (a copy cut mid-line would otherwise read as a truncated number and a row
of blanks). A run whose recorded settings differ from those the config gives it now is `stale`
(a results tree copied from another commit or config, which Snakemake has no record of and so
does not retrain): it is no result either. `mathrl aggregate` names both kinds on the console and
the report lists them; their runs are left out of every table, so a claim's n counts the others.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from mathrl.pipeline import layout
from mathrl.pipeline.config import RunSpec, expand_runs, trained_runs
from mathrl.pipeline.errors import DamagedFileError
from mathrl.pipeline.settings import RunSettings

# A run "collapsed" if held-out accuracy fell below this share of where it started and
# stayed there (two evaluations in a row, or at the final one), or a non-finite loss or
# gradient was met. A single low reading can be the noise of a small `eval_size`, not a
# collapse. A run that did not collapse but ended more than DEGRADATION below its start
# "degraded": a slow loss kept apart from collapse. One definition, used by every table and
# the report.
COLLAPSE_FRACTION = 0.5
SUSTAINED = 2  # consecutive evaluations below the line
DEGRADATION = 0.05
COLLAPSE_DEFINITION = (
    f"a run collapsed if its held-out greedy accuracy fell below {COLLAPSE_FRACTION:.0%} of its accuracy before RL "
    f"at {SUSTAINED} evaluations in a row or at the final one, or if a non-finite loss or gradient was met; "
    f"a run that did not collapse but ended more than {100 * DEGRADATION:.0f} points below its start degraded"
)


@dataclass
class Run:
    spec: RunSpec
    status: str  # complete | stopped_nonfinite | missing | unreadable | stale
    summary: dict | None = None
    metrics: pd.DataFrame | None = field(default=None, repr=False)
    problem: str = ""
    dir: Path | None = field(default=None, repr=False)  # the directory its files were read from
    _evals: pd.DataFrame | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status in ("complete", "stopped_nonfinite")

    @property
    def settings(self) -> dict:
        """The settings the run recorded (summary.json's `config`), else the config's expansion."""
        if self.ok and isinstance(self.summary.get("config"), dict):
            return {**expanded_settings(self.spec), **self.summary["config"]}
        return expanded_settings(self.spec)

    @property
    def initial_eval(self) -> float:
        return self.summary["initial"]["eval_accuracy"] if self.ok else math.nan

    @property
    def evals(self) -> pd.DataFrame:
        """(step, eval_accuracy) at evaluation steps, starting with step 0 (before RL). Built once per run (the
        tables read it thousands of times); each call gets a copy, which the caller may change."""
        if not self.ok:
            return pd.DataFrame(columns=["step", "eval_accuracy"])
        if self._evals is None:
            m = self.metrics
            evaluated = m["eval_accuracy"].notna().to_numpy()
            self._evals = pd.DataFrame(
                {
                    "step": np.concatenate([[0], m["step"].to_numpy()[evaluated]]),
                    "eval_accuracy": np.concatenate([[self.initial_eval], m["eval_accuracy"].to_numpy()[evaluated]]),
                }
            )
        return self._evals.copy()


def expanded_settings(spec: RunSpec) -> dict:
    """A run's settings as the config expanded them, as a dict (a run imported from another framework has none)."""
    return spec.settings.as_dict() if isinstance(spec.settings, RunSettings) else dict(spec.settings)


def warmup(run: Run) -> float:
    """The warm-up a run started from (its resolved `warmup` setting): the unit its verdicts are replicated over;
    NaN for a run from a random policy or one recorded before runs named their warm-up."""
    w = run.settings.get("warmup")
    return math.nan if w is None else int(w)


def progress_of(cfg: dict, spec: RunSpec) -> str:
    """How far a run is, from its files alone (no snapshot is read): `done`, `partial` (a
    snapshot, no result yet), `unreadable` (a result whose files do not read whole), `stale` (a
    result of other settings than the config's, `load_run`) or `missing`; a run read from another
    with its settings says which."""
    run_dir = layout.at(cfg, layout.RUN_DIR, run_id=spec.trained_as)
    shared = f" (as {spec.same_as})" if spec.same_as else ""
    if not (run_dir / layout.SUMMARY_FILE).exists():
        return ("partial" if (run_dir / layout.SNAPSHOT_FILE).exists() else "missing") + shared
    try:
        summary, _ = run_files(run_dir)
    except (OSError, DamagedFileError):
        return "unreadable" + shared
    status = summary.get("status", "complete")
    drift = settings_drift(expanded_settings(spec), summary.get("config") or {})
    if drift:
        return "stale" + shared
    return ("done" if status == "complete" else f"done ({status})") + shared


def adhoc_progress(cfg: dict, known: set[str]) -> dict[str, str]:
    """Run directories under the results tree that no run of the config trains in (`mathrl train --run-id NAME`,
    or an experiment since removed from the config), each with how far it is: `done`, `unreadable`, `partial` or
    `empty` (a run stopped before its first snapshot)."""
    root, out = layout.at(cfg, layout.RUNS), {}
    for run_dir in sorted(root.iterdir()) if root.is_dir() else ():
        if run_dir.is_dir() and run_dir.name not in known:
            if (run_dir / layout.SUMMARY_FILE).is_file():
                try:
                    run_files(run_dir)
                    out[run_dir.name] = "done"
                except (OSError, DamagedFileError):
                    out[run_dir.name] = "unreadable"
            else:
                out[run_dir.name] = "partial" if (run_dir / layout.SNAPSHOT_FILE).is_file() else "empty"
    return out


def settings_drift(expected: dict, recorded: dict) -> list[str]:
    """The settings a run recorded (summary.json's `config`) that differ from `expected` (what the config gives the
    run now), as "key recorded -> expected", compared as JSON values (where they are not equal already); a key the
    run did not record is not compared."""
    as_json = lambda v: json.loads(json.dumps(v, default=str))  # noqa: E731
    return [
        f"{k} {recorded[k]!r} -> {v!r}"
        for k, v in expected.items()
        if k in recorded and recorded[k] != v and as_json(recorded[k]) != as_json(v)
    ]


def load_run(run_dir: Path, spec: RunSpec | None) -> Run:
    """The run in `run_dir`; with the config's `spec` of it, `stale` where it recorded other settings (a run read
    without a spec, as `mathrl compare --run` reads one, is taken as it is)."""
    if not (run_dir / layout.SUMMARY_FILE).exists():
        return Run(spec, "missing", dir=run_dir)
    try:
        summary, text = run_files(run_dir)
        metrics = pd.read_csv(io.StringIO(text))
    except (OSError, DamagedFileError, ValueError) as exc:
        problem = str(exc) if isinstance(exc, DamagedFileError) else f"{run_dir}: {exc}"
        return Run(
            spec,
            "unreadable",
            problem=f"{problem}; remove {run_dir} (or `snakemake --forcerun`) to train the run again",
            dir=run_dir,
        )
    drift = settings_drift(expanded_settings(spec), summary.get("config") or {}) if spec is not None else []
    if drift:
        problem = (
            f"{run_dir} was trained with other settings than the config gives it now ({'; '.join(drift)}); "
            "remove the directory (or `snakemake --forcerun`) to train it again"
        )
        return Run(spec, "stale", summary, metrics, problem=problem, dir=run_dir)
    return Run(spec, summary.get("status", "complete"), summary, metrics, dir=run_dir)


def run_files(run_dir: Path) -> tuple[dict, str]:
    """A finished run's summary.json and the text of its metrics.csv, every file the summary recorded checked whole
    against its record, and metrics.csv in shape too (DamagedFileError names the first that is not)."""
    summary = read_json(run_dir / layout.SUMMARY_FILE)
    files = summary.get("files") or {}
    for name, recorded in files.items():
        if name != layout.METRICS_FILE:
            whole(run_dir / name, recorded)
    return summary, csv_text(run_dir / layout.METRICS_FILE, files.get(layout.METRICS_FILE))


def read_json(path: Path) -> dict:
    """A JSON object written whole; DamagedFileError naming the file where it does not read (cut short, damaged)."""
    try:
        data = json.loads(Path(path).read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DamagedFileError(f"{path}: cut short or damaged: it does not read as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DamagedFileError(f"{path}: damaged: a JSON {type(data).__name__}, not the object written")
    return data


def whole(path: Path, recorded: dict | None = None) -> bytes:
    """A file's bytes, checked against what its writer recorded (`atomic.record`: length and SHA-256) where it did."""
    data = Path(path).read_bytes()
    if recorded:
        if len(data) != recorded.get("bytes"):
            how = "cut short" if len(data) < recorded.get("bytes", 0) else "damaged"
            raise DamagedFileError(f"{path}: {how}: {len(data)} bytes, where its run wrote {recorded.get('bytes')}")
        if hashlib.sha256(data).hexdigest() != recorded.get("sha256"):
            raise DamagedFileError(f"{path}: damaged: its SHA-256 is not the one its run recorded")
    return data


def csv_text(path: Path, recorded: dict | None = None) -> str:
    """A CSV file's text, whole (`whole`) and in shape: it ends with a newline and every line holds the header's number
    of fields, so that a copy cut mid-line is named instead of read as a truncated number and a row of blanks."""
    try:
        text = whole(path, recorded).decode()
    except UnicodeDecodeError:
        raise DamagedFileError(f"{path}: damaged: it is not text") from None
    if not text:
        raise DamagedFileError(f"{path}: empty: not even its header")
    if not text.endswith("\n"):
        raise DamagedFileError(f"{path}: cut short: its last line ends without a newline")
    rows = csv.reader(io.StringIO(text))
    width = len(next(rows))
    for number, row in enumerate(rows, start=2):
        if len(row) != width:
            raise DamagedFileError(
                f"{path}, line {number}: cut short or damaged: {len(row)} fields, the header has {width}"
            )
    return text


def read_csv(path: Path, recorded: dict | None = None, **kwargs) -> pd.DataFrame:
    """pandas' read_csv of a file checked whole and in shape first (`csv_text`)."""
    return pd.read_csv(io.StringIO(csv_text(path, recorded)), **kwargs)


def aggregate_inputs(cfg: dict, runs: dict | None = None) -> dict[str, list[str]]:
    """Every file the tables are made from, by kind: what the pipeline's aggregate job waits
    for (rules/common.smk) and what `mathrl aggregate` checks before it calls them complete.
    `runs`: the config's trained runs where the caller has them (else expanded here)."""
    from mathrl.pipeline.bandit_config import BANDIT_STUDIES  # torch-free

    specs = trained_runs(cfg) if runs is None else runs
    res, runs = cfg["results"], list(specs)
    return {
        "summaries": [str(layout.path(res, layout.RUN_SUMMARY, run_id=run_id)) for run_id in runs],
        "metrics": [str(layout.path(res, layout.RUN_METRICS, run_id=run_id)) for run_id in runs],
        "bandit": [str(layout.path(res, layout.BANDIT, study=study)) for study in BANDIT_STUDIES],
        "gradvar": [str(layout.path(res, layout.GRADVAR, task=task)) for task in cfg["gradvar"]["tasks"]],
        "starts": [
            str(layout.path(res, layout.SFT_STARTS, task=task, warmup=k))
            for task in layout.starts_tasks(cfg)
            for k in range(layout.warmups(cfg, task))
        ],
        "warmups": [
            str(layout.path(res, layout.SFT_SUMMARY, task=task, warmup=k))
            for task in warmed_tasks(cfg, specs)
            for k in range(layout.warmups(cfg, task))
        ],
    }


def warmed_tasks(cfg: dict, runs: dict) -> list[str]:
    """The tasks whose warm-ups some run starts from, the gradient probe reads or the starts continue."""
    used = {spec.settings.task for spec in runs.values() if spec.settings.init != "random"}
    used |= set(cfg["gradvar"]["tasks"]) | set(layout.starts_tasks(cfg))
    return [task for task in cfg["tasks"] if task in used and task in (cfg.get("sft") or {})]


def missing_inputs(cfg: dict) -> list[str]:
    """The files of `aggregate_inputs` that do not exist."""
    return [path for paths in aggregate_inputs(cfg).values() for path in paths if not Path(path).is_file()]


def complete_marker(tables_dir: Path) -> Path:
    """`<tables>.complete` beside the tables (layout.TABLES_COMPLETE for the pipeline's):
    exists only while the tables were made from every input.

    The pipeline's aggregate job declares it as an output and figures and report as an
    input, so tables written by hand from missing runs (`mathrl aggregate` before training)
    never pass for the pipeline's: Snakemake sees the marker missing and trains the runs."""
    return tables_dir.with_name(tables_dir.name + ".complete")


def load_runs(cfg: dict) -> dict[str, Run]:
    """Every run the config's experiments expand into, found or not (a run that reuses
    another's settings is read from that run's directory)."""
    root = layout.at(cfg, layout.RUNS)
    return {run_id: load_run(root / spec.trained_as, spec) for run_id, spec in expand_runs(cfg).items()}


def collapsed(run: Run) -> bool | None:
    """COLLAPSE_DEFINITION, applied to one run (None when the run has no result)."""
    if not run.ok:
        return None
    if run.status == "stopped_nonfinite" or (run.metrics["skipped"].to_numpy() > 0).any():  # NaN is not > 0
        return True
    evals = run.evals["eval_accuracy"]
    return sustained_below(evals.iloc[1:], COLLAPSE_FRACTION * evals.iloc[0])


def sustained_below(values: pd.Series, line: float, k: int = SUSTAINED) -> bool:
    """Below `line` at `k` consecutive values, or at the last one."""
    low = [bool(v < line) for v in values]  # NaN is not below
    streak = 0
    for below in low:
        streak = streak + 1 if below else 0
        if streak >= k:
            return True
    return bool(low and low[-1])


def degraded(run: Run) -> bool | None:
    """Not collapsed, but final held-out accuracy more than DEGRADATION below the start."""
    c = collapsed(run)
    if c is None:
        return None
    e = run.evals["eval_accuracy"]
    return bool(not c and e.iloc[-1] < e.iloc[0] - DEGRADATION)


def roughness(steps, values) -> float:
    """Smoothness of a curve whatever its evaluation schedule: the standard deviation of the
    residuals around its least-squares straight line (0 for a straight line; NaN under 3 points)."""
    x, y = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    ok = ~np.isnan(y)
    x, y = x[ok], y[ok]
    if len(y) < 3:
        return math.nan
    resid = y - np.polyval(np.polyfit(x, y, 1), x)
    return float(np.sqrt((resid**2).sum() / (len(y) - 2)))


def max_drawdown(values) -> float:
    """The largest fall from a running peak to a later value (0 for a curve that never goes down)."""
    y = pd.Series(values, dtype=float).dropna()
    return float((y.cummax() - y).max()) + 0.0 if len(y) else math.nan


def run_index(runs: dict[str, Run]) -> pd.DataFrame:
    """One row per expected run: its settings, outcome and alerts (the report's run index)."""
    rows = []
    for run_id, run in runs.items():
        s, spec = run.settings, run.spec
        row = {
            "run_id": run_id,
            "experiment": spec.experiment,
            "variant": spec.variant or "",
            "point": ";".join(f"{k}={v}" for k, v in spec.point.items()),
            "seed": spec.seed,
            "warmup": warmup(run),
            "task": s["task"],
            "algorithm": s["algorithm"],
            "batch_size": s["batch_size"],
            "lr": s["lr"],
            "kl_coef": s["kl_coef"],
            "grad_clip": s["grad_clip"],
            "steps": s["steps"],
            "status": run.status,
            "initial_eval": math.nan,
            "final_eval": math.nan,
            "best_eval": math.nan,
            "best_step": math.nan,
            "final_reward": math.nan,
            "final_entropy": math.nan,
            "collapsed": None,
            "degraded": None,
            "n_alerts": 0,
            "alert_kinds": "",
            "wall_seconds": math.nan,
            "problem": run.problem,
            "same_as": spec.same_as or "",
            "cpu": "",
            "cpu_kernels": "",
        }
        if run.ok:
            sm, last = run.summary, run.metrics.iloc[-1]
            kinds = sorted({a["kind"] for a in sm["alerts"]})
            row.update(
                initial_eval=run.initial_eval,
                final_eval=sm["final"]["eval_accuracy"],
                best_eval=sm["best"]["eval_accuracy"],
                best_step=sm["best"]["step"],
                final_reward=float(last["reward_mean"]),
                final_entropy=float(last["entropy"]),
                collapsed=collapsed(run),
                degraded=degraded(run),
                n_alerts=len(sm["alerts"]),
                alert_kinds=" ".join(kinds),
                wall_seconds=sm["wall_seconds"],
                cpu=sm.get("versions", {}).get("cpu", ""),
                cpu_kernels=sm.get("versions", {}).get("cpu_kernels", ""),
            )
        rows.append(row)
    return pd.DataFrame(rows)


def curves(runs: dict[str, Run]) -> pd.DataFrame:
    """All complete runs' metrics rows in one long frame, with the run's identity columns."""
    frames = []
    for run_id, run in runs.items():
        if run.ok:
            m = run.metrics.copy()
            m.insert(0, "run_id", run_id)
            m.insert(1, "experiment", run.spec.experiment)
            m.insert(2, "variant", run.spec.variant or "")
            m.insert(3, "point", ";".join(f"{k}={v}" for k, v in run.spec.point.items()))
            m.insert(4, "seed", run.spec.seed)
            m.insert(5, "initial_eval", run.initial_eval)
            frames.append(m)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def mean_spread(df: pd.DataFrame, by: list[str], values: list[str]) -> pd.DataFrame:
    """Per group: `{v}_mean`, `{v}_std` (sample std across seeds, NaN for one seed) and `n`."""
    if df.empty:
        return pd.DataFrame(columns=by + ["n"] + [f"{v}_{s}" for v in values for s in ("mean", "std")])
    g = df.groupby(by, sort=False, dropna=False)
    out = g[values].agg(["mean", "std"])
    out.columns = [f"{v}_{s}" for v, s in out.columns]
    out.insert(0, "n", g[values[0]].count())
    return out.reset_index()
