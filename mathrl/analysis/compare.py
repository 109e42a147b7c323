"""`mathrl compare`: arms of runs side by side on one measure, with 95% intervals.

An arm is a set of runs (`--arm A=run1,run2`, an experiment's variant, or runs grouped by
their settings but the seed). Each arm's measure is a mean over its runs with a one-sample
t interval; each arm's difference from the baseline arm is paired by seed where one arm's
seeds include the other's, else Welch's (`verdict.difference`). Runs are read from their
directories alone (summary.json, metrics.csv), so runs made with `mathrl train --run-id`
compare like an experiment's. A measure is one of `mathrl.analysis.measures`' registry, the one
`mathrl claims --measures` lists and claims read.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pandas as pd

from mathrl.analysis.measures import BOUNDS, MEASURES
from mathrl.analysis.results import Run, load_run
from mathrl.analysis.verdict import Estimate, difference, mean_interval
from mathrl.pipeline import layout
from mathrl.pipeline.errors import ConfigError


def read_run(runs_dir: Path, run_id: str, flag: str) -> Run:
    """A finished run (its summary.json and metrics.csv); a run without them is an error naming it."""
    run_dir = Path(runs_dir) / run_id
    run = load_run(run_dir, None)
    if run.status == "missing":
        raise ConfigError(
            f"{flag}: run {run_id!r} has no result ({run_dir / layout.SUMMARY_FILE} is missing); "
            f"`mathrl runs --status` says which runs are done"
        )
    if not run.ok:
        raise ConfigError(f"{flag}: run {run_id!r} does not read ({run.problem or run.status})")
    return run


def value(run: Run, measure: str) -> float:
    """A registered measure (mathrl.analysis.measures) of one run; NaN where the run lacks what it reads."""
    try:
        return float(MEASURES[measure][1](run))
    except (KeyError, IndexError, ValueError, ZeroDivisionError):
        return math.nan


def arm_values(runs: dict[str, Run], measure: str) -> dict:
    """{seed: value} of an arm's runs, or {run id: value} where two runs share a seed (then
    no pairing by seed is possible); runs without a value (NaN) are left out."""
    seeds = [r.summary.get("seed") for r in runs.values()]
    by_seed = len(set(seeds)) == len(seeds) and None not in seeds
    values = {(r.summary["seed"] if by_seed else run_id): value(r, measure) for run_id, r in runs.items()}
    return {k: v for k, v in values.items() if not math.isnan(v)}


def compare(arms: dict[str, dict], baseline: str, bounds: tuple[float, float] | None = None) -> pd.DataFrame:
    """One row per arm (its mean and 95% interval) and per other arm's difference from the baseline; with the
    measure's `bounds`, each interval is held inside the values it can take (`clipped` says where it was cut)."""
    rows = []
    for name, values in arms.items():
        rows.append(_row("arm", name, "", held(mean_interval(values), bounds), ",".join(map(str, values))))
    spread = None if bounds is None else (bounds[0] - bounds[1], bounds[1] - bounds[0])
    for name, values in arms.items():
        if name != baseline:
            rows.append(_row("difference", name, baseline, held(difference(values, arms[baseline]), spread), ""))
    return pd.DataFrame(rows)


def held(est: Estimate, bounds: tuple[float, float] | None) -> tuple[Estimate, bool]:
    """An interval inside `bounds` (a t interval of accuracies at n = 2 reaches past 0 and 1); whether it was cut."""
    if bounds is None or not math.isfinite(est.lo):
        return est, False
    lo, hi = max(est.lo, bounds[0]), min(est.hi, bounds[1])
    return dataclasses.replace(est, lo=lo, hi=hi), (lo, hi) != (est.lo, est.hi)


def _row(kind: str, arm: str, baseline: str, held: tuple[Estimate, bool], keys: str) -> dict:
    est, clipped = held
    method = {"paired": "paired by seed", "unpaired": "Welch", "one-sample": "t"}.get(est.kind, est.kind)
    interval = {"estimate": est.estimate, "ci_low": est.lo, "ci_high": est.hi, "n": est.n, "clipped": clipped}
    return {"kind": kind, "arm": arm, "baseline": baseline, **interval, "method": method, "seeds": keys}


def group_by_settings(summaries: dict[str, dict]) -> dict[str, list[str]]:  # run id -> its summary.json
    """Runs grouped by their settings but the seed; each group named by the settings that
    tell it from the others (`lr=0.001`), or by its first run where none do."""
    key_of = {
        r: json.dumps({k: v for k, v in (s.get("config") or {}).items() if k != "seed"}, sort_keys=True)
        for r, s in summaries.items()
    }
    groups: dict[str, list[str]] = {}
    for run_id, key in key_of.items():
        groups.setdefault(key, []).append(run_id)
    configs = {key: json.loads(key) for key in groups}
    keys = {k for c in configs.values() for k in c}
    differing = sorted(k for k in keys if len({json.dumps(c.get(k)) for c in configs.values()}) > 1)
    named = {}
    for key, run_ids in groups.items():
        label = ", ".join(f"{k}={configs[key].get(k)}" for k in differing) or run_ids[0]
        named[label if label not in named else run_ids[0]] = run_ids
    return named


def text(table: pd.DataFrame, measure: str) -> str:
    """The table as the console shows it."""
    width = max(len(a) for a in table["arm"]) + max((len(b) for b in table["baseline"]), default=0) + 3
    lines = [f"{MEASURES[measure][0]} ({measure}): mean [95% interval] n"]
    for r in table.itertuples():
        name = r.arm if r.kind == "arm" else f"{r.arm} - {r.baseline}"
        sign = "+" if r.kind == "difference" else ""
        finite = math.isfinite(r.ci_low)
        interval = f"[{r.ci_low:{sign}.3f}, {r.ci_high:{sign}.3f}]" if finite else "[no interval: n < 2]"
        how = f", {r.method}" if r.kind == "difference" else ""
        lines.append(f"  {name:<{width}} {r.estimate:{sign}.3f} {interval}  n={r.n}{how}")
    if table["clipped"].any():
        lo, hi = BOUNDS[measure]
        why = "where the t interval of few runs reaches past it"
        lines.append(f"(intervals held within what {measure} can take, {lo:g} to {hi:g}, {why})")
    return "\n".join(lines)


def figure(table: pd.DataFrame, arms: dict[str, dict], measure: str):
    """Left: each arm's runs (dots) and mean with its 95% interval; right: each difference
    from the baseline with its 95% interval, against 0."""
    from mathrl.analysis.figure_style import COLORS, STYLE, plt

    label = MEASURES[measure][0]
    with plt.rc_context(STYLE):
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
        means = table[table["kind"] == "arm"]
        for i, r in enumerate(means.itertuples()):
            values = list(arms[r.arm].values())
            left.scatter([i] * len(values), values, color=COLORS[i % len(COLORS)], alpha=0.5, s=14)
            if math.isfinite(r.ci_low):
                err = [[r.estimate - r.ci_low], [r.ci_high - r.estimate]]
                left.errorbar([i], [r.estimate], yerr=err, fmt="o", color="k", capsize=4)
            else:
                left.plot([i], [r.estimate], "o", color="k")
        tilt = {"rotation": 20, "ha": "right"} if max(map(len, means["arm"])) > 12 else {}
        left.set_xticks(range(len(means)), [f"{a}\n(n={n})" for a, n in zip(means["arm"], means["n"])], **tilt)
        left.set(xlabel="arm", ylabel=label, title="each run, and the mean with its 95% interval")
        diffs = table[table["kind"] == "difference"]
        for i, r in enumerate(diffs.itertuples()):
            err = [[r.estimate - r.ci_low], [r.ci_high - r.estimate]] if math.isfinite(r.ci_low) else None
            right.errorbar([i], [r.estimate], yerr=err, fmt="o", color=COLORS[(i + 1) % len(COLORS)], capsize=4)
        right.axhline(0, color="0.5", linewidth=0.8)
        labels = [f"{a}\n({meth})" for a, meth in zip(diffs["arm"], diffs["method"])]
        right.set_xticks(range(len(diffs)), labels, **tilt)
        base = diffs["baseline"].iloc[0] if len(diffs) else ""
        right.set(
            xlabel=f"arm, minus {base}", ylabel=f"difference in\n{label}", title="difference with its 95% interval"
        )
    return fig
