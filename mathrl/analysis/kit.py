"""What every study shares: roles from the config, per-seed values, summaries across seeds with their intervals,
the rows and cells a section reads, and the documents' numbers.

A study keeps only its science; this module holds the table plumbing (the bands every figure draws are
`mathrl.analysis.figure_style`'s, the statistics `mathrl.analysis.verdict`'s).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd

from mathrl.analysis.measures.series import known
from mathrl.analysis.results import mean_spread
from mathrl.analysis.section_verdicts import by_key, by_part, verdicts
from mathrl.analysis.verdict import (
    NO_DIFFERENCE,
    OUTCOMES,
    Estimate,
    difference,
    estimate_columns,
    mean_interval,
    t_halfwidth,
    wilson,
)
from mathrl.pipeline.config import ROOT, expand_runs, point_label, read_yaml
from mathrl.pipeline.errors import ConfigError
from mathrl.pipeline.layout import DOCUMENTS_FILE

NAN = math.nan


@functools.cache
def document_facts(study: str) -> dict:
    """The documents' numbers and tables a study's tables set beside its measurements (config/documents.yaml)."""
    return read_yaml(ROOT / DOCUMENTS_FILE)[study]


# ----------------------------------------------------------------------------- roles
def roles(cfg: dict, experiment: str, required: tuple[str, ...]) -> dict[str, str]:
    """{role: variant} of an experiment, from its `roles` block in the config.

    An experiment absent from the config has no roles (its study reports no data); one that
    is present must name a variant for every role the study needs (that each names one of its
    variants, `mathrl.pipeline.config` checks when it expands the runs)."""
    exp = cfg.get("experiments", {}).get(experiment)
    if exp is None:
        return {}
    declared = exp.get("roles") or {}
    missing = [r for r in required if r not in declared]
    if missing:
        raise ConfigError(
            f"experiments.{experiment}.roles: missing role(s) {', '.join(missing)} "
            f"(the {experiment} study needs: {', '.join(required)}; give each the name of one of its "
            "variants)"
        )
    return dict(declared)


def setting(spec) -> str:
    """A run's setting as a role names it: its variant, else its grid point (`batch_size=512`; "" for neither)."""
    return spec.variant or point_label(spec.point)


def first_settings(cfg: dict, experiment: str, name=None) -> dict[str, dict]:
    """{setting: the resolved settings of its first run} of an experiment, its settings in the order of their first
    runs; `name` gives a run's setting from its spec (`setting` where None)."""
    out: dict[str, dict] = {}
    for spec in (s for s in expand_runs(cfg).values() if s.experiment == experiment):
        if (key := (name or setting)(spec)) not in out:
            out[key] = spec.settings.as_dict()
    return out


def role_settings(cfg: dict, experiment: str, role: str | None = None) -> dict | None:
    """The resolved settings of an experiment's first run: of the variant in `role`, or of any setting without one;
    None when the experiment has no such role or no run."""
    settings = first_settings(cfg, experiment, lambda spec: spec.variant)
    if role is None:
        return next(iter(settings.values()), None)
    name = roles(cfg, experiment, ()).get(role)
    return settings.get(name) if name else None


def joined_roles(role: dict[str, str]) -> dict[str, str]:
    """{variant: its roles, joined with commas} from an experiment's {role: variant}."""
    return {variant: ", ".join(r for r, v in role.items() if v == variant) for variant in role.values()}


def _where(df: pd.DataFrame, where: dict, *cols: str) -> pd.DataFrame:
    """The rows of `df` whose columns equal `where` (compared as text); none when the table or a column is absent."""
    if df is None or df.empty or any(k not in df for k in [*cols, *where]):
        return pd.DataFrame(columns=["seed", *cols])
    return df[(df[list(where)].astype(str) == [str(v) for v in where.values()]).all(axis=1)]


def per_seed(df: pd.DataFrame, col: str, **where) -> dict:
    """{seed: value} of one column over the rows matching `where` (NaN kept out)."""
    sel = _where(df, where, col)
    return {s: float(v) for s, v in zip(sel["seed"], sel[col]) if pd.notna(v)}


def row_of(df: pd.DataFrame, **where) -> dict:
    """The first row whose columns equal `where` (compared as text), as a dict; empty when none does."""
    rows = _where(df, where)
    return rows.iloc[0].to_dict() if len(rows) else {}


def records(df: pd.DataFrame | None) -> list[dict]:
    """A table's rows as dicts (none for a missing or empty table)."""
    return [] if df is None or df.empty else df.to_dict("records")


def cell(df: pd.DataFrame, col: str, **where) -> float:
    """The value of `col` in the first row matching `where`; NaN when absent."""
    vals = _where(df, where, col)[col]
    return float(vals.iloc[0]) if len(vals) and pd.notna(vals.iloc[0]) else NAN


def part_summary(rows: list[dict]) -> str:
    """A part's verdicts counted by outcome; its setup checks (no claims of the document) counted apart."""
    setup = sum(r.get("kind") == "setup" for r in rows)
    counts = {o: sum(r["outcome"] == o and r.get("kind") != "setup" for r in rows) for o in OUTCOMES}
    summary = ", ".join(f"{k} {o}" for o, k in counts.items() if k) or "no verdicts"
    return summary + (f"; and {setup} setup check{'s' * (setup != 1)}, not counted" if setup else "")


def parts(rows: list[dict], names: tuple[str, ...]) -> dict[str, dict]:
    """Per part of `names`, a section's verdict rows of that part (`rows`, in claims.csv's order) and their
    `summary` (`part_summary`)."""
    grouped = by_part(rows)
    return {part: {"rows": grouped.get(part, []), "summary": part_summary(grouped.get(part, []))} for part in names}


class StudyTables:
    """A study's tables by their names without its prefix, each read when asked for: `tables["batch"]` (in a
    template, `ctx.tables.batch`) is `t["stability_batch"]`, an empty frame for a table that was not written."""

    def __init__(self, t, study: str):
        self._t, self._study = t, study

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self._t[f"{self._study}_{name}"]


def section_context(t, study: str, names: tuple[str, ...] | None = None) -> dict:
    """What a section's template reads first: its study's tables by name (`tables`, `StudyTables`), its verdict rows
    in claims.csv's order (`verdict_list`), by claim id (`verdicts`) and by part (`parts`, `parts()`: the parts of
    `names`, else every part its rows have)."""
    rows = verdicts(t, study)
    return {
        "tables": StudyTables(t, study),
        "verdict_list": rows,
        "verdicts": by_key(rows),
        "parts": parts(rows, tuple(by_part(rows)) if names is None else names),
    }


# ----------------------------------------------------------------------------- intervals in tables
def add_intervals(
    df: pd.DataFrame, values: list[str], bounds: dict | None = None, counts: pd.DataFrame | None = None
) -> pd.DataFrame:
    """For each `{v}_mean`/`{v}_std` with `n`: `{v}_lo`, `{v}_hi` (95% t interval of the mean), clipped
    to `bounds[v]` (lo, hi; either None) where given, so an accuracy's interval stays within [0, 1]. `counts`: each
    value's own count per row (where some values are missing in rows that others have), instead of `n`."""
    out = df.copy()
    for v in values:
        if f"{v}_mean" in out and f"{v}_std" in out and "n" in out:
            h = t_halfwidth(out[f"{v}_std"], out["n"] if counts is None else counts[v].to_numpy())
            lo, hi = (bounds or {}).get(v) or (None, None)
            out[f"{v}_lo"], out[f"{v}_hi"] = (out[f"{v}_mean"] - h).clip(lo, hi), (out[f"{v}_mean"] + h).clip(lo, hi)
    return out


def arms(runs: pd.DataFrame, reference: str | None):
    """Each setting's rows of a per-run table (indexed by seed; settings in order of appearance) with the reference
    setting's rows to compare them with: None for the reference itself, or where the reference has no rows."""
    ref = runs[runs["setting"] == reference].set_index("seed") if len(runs) else runs
    for name, rows in runs.groupby("setting", sort=False):
        yield name, rows.set_index("seed"), ref if name != reference and len(ref) else None


def versus(arm: pd.DataFrame, reference: pd.DataFrame | None, column: str) -> Estimate:
    """An arm's `column` minus the reference's, paired by seed (`mathrl.analysis.verdict.difference`); without a
    reference,
    NO_DIFFERENCE."""
    return NO_DIFFERENCE if reference is None else difference(arm[column], reference[column])


SUMMARY_CELLS = {"mean": ("mean",), "interval": ("mean", "lo", "hi"), "versus": ("mean", "lo", "hi", "n")}


def arm_summary(
    runs: pd.DataFrame, reference: str | None, keys: list[str], count: str, columns: list, bounds: dict | None = None
) -> pd.DataFrame:
    """Per setting of a per-run table (`arms`, in order of appearance): `setting`, the `keys` of its first row, `n`
    (its runs with a `count`), then per `(kind, columns)` of `columns` (a list of columns, or {name: column}), in
    order: `mean`: `{name}_mean`; `interval`: `{name}_mean`, `_lo`, `_hi`, the mean with its 95% t interval over
    seeds, cut to `bounds[column]` where given; `versus`: `{name}_mean`, `_lo`, `_hi`, `_n`, the column minus the
    `reference` setting's, paired by seed (`versus`; empty for the reference). The same columns without runs."""
    named = [(kind, cols if isinstance(cols, dict) else dict(zip(cols, cols))) for kind, cols in columns]
    specs = [(kind, column, name) for kind, cols in named for name, column in cols.items()]

    def cells(kind: str, column: str, name: str, arm: pd.DataFrame, ref: pd.DataFrame | None) -> dict:
        if kind == "mean":
            return {f"{name}_mean": float(arm[column].mean())}
        if kind == "interval":
            return estimate_columns(name, mean_interval(arm[column]), (bounds or {}).get(column, (None, None)))
        return estimate_columns(name, versus(arm, ref, column), n=True)

    rows = [
        {
            "setting": label,
            **{k: arm[k].iloc[0] for k in keys},
            "n": int(arm[count].notna().sum()),
            **{k: v for spec in specs for k, v in cells(*spec, arm, ref).items()},
        }
        for label, arm, ref in arms(runs, reference)
    ]
    names = [f"{name}_{cell}" for kind, _, name in specs for cell in SUMMARY_CELLS[kind]]
    return pd.DataFrame(rows, columns=["setting", *keys, "n", *names])


DIFFERENCES = ["setting", "against", "difference", "lo", "hi", "n"]


def setting_differences(runs: pd.DataFrame, pairs: list[tuple[str, str]], column: str) -> pd.DataFrame:
    """Per (setting, against) of `pairs`: the setting's `column` minus the other's in a per-run table, paired by seed
    (`mathrl.analysis.verdict.difference`), with its 95% interval (columns DIFFERENCES); a setting without rows has
    no values."""
    values = {name: g.set_index("seed")[column] for name, g in runs.groupby("setting", sort=False)} if len(runs) else {}
    rows = [(a, b, difference(values.get(a, {}), values.get(b, {}))) for a, b in pairs]
    return pd.DataFrame([(a, b, e.estimate, e.lo, e.hi, e.n) for a, b, e in rows], columns=DIFFERENCES)


def phase_change(rows: pd.DataFrame, by: list[str], column: str, before="initial", after="final") -> pd.DataFrame:
    """Per group of `rows` by `by` (in order of appearance): `n`, `{before}_mean` and `{after}_mean` (the means over
    seeds of `column` in its rows of each `phase`) and `change_mean`, `_lo`, `_hi`: after − before, paired by seed
    (`mathrl.analysis.verdict.difference`, 95% interval)."""
    out = []
    for key, g in rows.groupby(by, sort=False):
        phases = {p: per_seed(g, column, phase=p) for p in (before, after)}
        est = difference(phases[after], phases[before])
        means = {f"{p}_mean": float(pd.Series(v).mean()) if v else NAN for p, v in phases.items()}
        out.append({**dict(zip(by, key)), "n": est.n, **means, **estimate_columns("change", est)})
    changes = ["change_mean", "change_lo", "change_hi"]
    return pd.DataFrame(out, columns=[*by, "n", f"{before}_mean", f"{after}_mean", *changes])


def summarise(rows: pd.DataFrame, by: list[str], values: list[str], count: str = "expected") -> pd.DataFrame:
    """`mean_spread` plus, after its `n` (the runs with a result), `count`: the runs the config asks for per group."""
    out = mean_spread(rows, by, values)
    out.insert(out.columns.get_loc("n") + 1, count, rows.groupby(by, sort=False, dropna=False).size().values)
    return out


def over_seeds(frames: list[pd.DataFrame], by: list[str], values: list[str]) -> pd.DataFrame:
    """Per `by` and step: the mean, std and n over runs of `values` (`mean_spread`), from each run's frame of steps."""
    return mean_spread(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), [*by, "step"], values)


def setting_steps(runs, values: list[str], evals: bool = False) -> pd.DataFrame:
    """Per setting and step: the mean, std and n over seeds (`over_seeds`) of `values` from the complete `runs`' steps
    (their evaluations with `evals`); a run that logged none of `values` is left out."""
    frames = [
        (run.evals if evals else run.metrics).assign(setting=setting(run.spec), seed=run.spec.seed)
        for run in runs
        if run.ok
    ]
    return over_seeds([f for f in frames if set(values) & set(f)], ["setting"], values)


def seed_band(curves: pd.DataFrame, experiment: str, variant: str, metric: str) -> pd.DataFrame:
    """Per step of one variant of an experiment: the mean, std and n across its seeds of `metric`, read from the
    `curves` table (`mathrl.analysis.results.curves`); eval_accuracy starts at step 0 with the accuracy before RL."""
    if curves.empty or metric not in curves:
        return pd.DataFrame(columns=["step", "mean", "std", "n"])
    c = curves.loc[(curves["experiment"] == experiment) & (curves["variant"] == variant), ["run_id", "step", metric]]
    if metric == "eval_accuracy":
        first = curves.loc[c.index].drop_duplicates("run_id")
        c = pd.concat([pd.DataFrame({"run_id": first["run_id"], "step": 0, metric: first["initial_eval"]}), c])
    g = c.dropna(subset=[metric]).groupby("step")[metric]
    return pd.DataFrame({"mean": g.mean(), "std": g.std(), "n": g.count()}).reset_index()


def metric_frames(run, metrics: list[str]) -> list[pd.DataFrame]:
    """A run's `metrics` as a long frame of `step`, `value` and `metric`, one metric after the other in the order
    given: eval_accuracy from its evaluations (step 0 on), the others from its steps; a metric the run did not log is
    left out. A list of that one frame, or an empty list where the run logged none of `metrics`."""
    sources = [
        (run.evals if m == "eval_accuracy" else run.metrics, m)
        for m in metrics
        if m == "eval_accuracy" or m in run.metrics
    ]
    if not sources:
        return []
    columns = {
        "step": [src["step"].to_numpy() for src, _ in sources],
        "value": [src[m].to_numpy() for src, m in sources],
        "metric": [np.full(len(src), m, dtype=object) for src, m in sources],
    }
    return [pd.DataFrame({name: np.concatenate(parts) for name, parts in columns.items()})]


def metric_curves(frames: list[pd.DataFrame], by: list[str], sort: bool = True) -> pd.DataFrame:
    """Per `by`, metric and step: the mean, std and n over runs of the long frames' `value` (`metric_frames`), sorted
    by those keys, or with `sort` False in order of appearance."""
    if not frames:
        return pd.DataFrame(columns=[*by, "metric", "step", "mean", "std", "n"])
    g = pd.concat(frames, ignore_index=True).groupby([*by, "metric", "step"], sort=sort)["value"]
    return g.agg(mean="mean", std="std", n="count").reset_index()


def group_sums(rows: pd.DataFrame, by, column: str) -> np.ndarray:
    """Per group of `rows` (in order of appearance): the sum of `column`, NaN where it has no value (a count of runs
    that collapsed, say)."""
    return rows.groupby(by, sort=False)[column].sum(min_count=1).values


def collapse_columns(out: pd.DataFrame, rows: pd.DataFrame, by, before: str | None = None) -> pd.DataFrame:
    """A summary of `rows` (`summarise`) whose values include `collapsed`: its mean becomes `collapse_rate` (the share
    of runs that collapsed; its std left out), and `collapses`, the count per group of `rows` by `by` (`group_sums`),
    goes before column `before`, or last."""
    out = out.drop(columns="collapsed_std").rename(columns={"collapsed_mean": "collapse_rate"})
    at = len(out.columns) if before is None else out.columns.get_loc(before)
    out.insert(at, "collapses", group_sums(rows, by, "collapsed"))
    return out


def add_outcomes(out: pd.DataFrame, per_run: pd.DataFrame, by, judged: bool = False) -> pd.DataFrame:
    """`collapses` and `degradations` per group of `per_run` (the rows of `out`, in order) and the collapse rate with
    its 95% Wilson interval over the group's `n` runs, or with `judged` over its `runs_judged` (the runs whose collapse
    is known: a final evaluation may be missing)."""
    out["collapses"], out["degradations"] = group_sums(per_run, by, "collapsed"), group_sums(per_run, by, "degraded")
    if judged:
        out["runs_judged"] = per_run.groupby(by, sort=False)["collapsed"].count().values
    return add_wilson(out, "collapses", n="runs_judged" if judged else "n")


def add_wilson(df: pd.DataFrame, count: str, n: str = "n", prefix: str = "collapse_rate") -> pd.DataFrame:
    """`{prefix}`, `{prefix}_lo`, `{prefix}_hi`: a rate count/n with its 95% Wilson interval; the rate replaces a
    `{prefix}` column already there, in its place, and the interval's columns follow it."""
    out = df.copy()
    ci = [wilson(int(k), int(m)) if known(k, m) and m else (NAN, NAN) for k, m in zip(out[count], out[n])]
    out[prefix] = [k / m if known(k, m) and m else NAN for k, m in zip(out[count], out[n])]
    at = out.columns.get_loc(prefix) + 1
    out.insert(at, f"{prefix}_lo", [c[0] for c in ci])
    out.insert(at + 1, f"{prefix}_hi", [c[1] for c in ci])
    return out
