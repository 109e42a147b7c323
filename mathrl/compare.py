"""`mathrl compare`: arms of runs side by side on one measure, with 95% intervals.

An arm is a set of runs (`--arm A=run1,run2`, an experiment's variant, or runs grouped by
their settings but the seed). Each arm's measure is a mean over its runs with a one-sample
t interval; each arm's difference from the baseline arm is paired by seed where both arms
hold the same seeds, else Welch's (`verdict.difference`). Runs are read from their
directories alone (summary.json, metrics.csv), so runs made with `mathrl train --run-id`
compare like an experiment's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mathrl.errors import ConfigError
from mathrl.verdict import Estimate, difference, mean_interval


@dataclass(frozen=True)
class Measure:
    """One number per run, from its summary.json."""

    label: str  # an axis label
    of: Callable[[dict], float]
    bounds: tuple[float, float] = (-math.inf, math.inf)  # the range the measure cannot leave


def _at(summary: dict, when: str, key: str) -> float:
    value = (summary.get(when) or {}).get(key)
    return math.nan if value is None else float(value)


MEASURES: dict[str, Measure] = {
    "final_eval": Measure("final held-out accuracy", lambda s: _at(s, "final", "eval_accuracy"), (0.0, 1.0)),
    "best_eval": Measure("best held-out accuracy", lambda s: _at(s, "best", "eval_accuracy"), (0.0, 1.0)),
    "gain": Measure("held-out accuracy gain (final - start)",
                    lambda s: _at(s, "final", "eval_accuracy") - _at(s, "initial", "eval_accuracy"), (-1.0, 1.0)),
    "final_entropy": Measure("final mean token entropy", lambda s: _at(s, "final", "entropy"), (0.0, math.inf)),
    "final_kl": Measure("final KL to the reference", lambda s: _at(s, "final", "kl")),
    "final_reward": Measure("final training reward", lambda s: _at(s, "final", "reward_mean")),
}  # fmt: skip


def read_summary(runs_dir: Path, run_id: str, flag: str) -> dict:
    """A finished run's summary.json; a run without one is an error naming it."""
    path = Path(runs_dir) / run_id / "summary.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{flag}: run {run_id!r} has no result ({path} is missing); "
                          f"`mathrl runs --status` says which runs are done") from None  # fmt: skip
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{flag}: run {run_id!r}: {path} does not read ({exc})") from None


def arm_values(summaries: dict[str, dict], measure: Measure) -> dict:
    """{seed: value} of an arm's runs, or {run id: value} where two runs share a seed (then
    no pairing by seed is possible); runs without a value (NaN) are left out."""
    seeds = [s.get("seed") for s in summaries.values()]
    by_seed = len(set(seeds)) == len(seeds) and None not in seeds
    values = {(s["seed"] if by_seed else run_id): measure.of(s) for run_id, s in summaries.items()}
    return {k: v for k, v in values.items() if not math.isnan(v)}


def compare(arms: dict[str, dict], baseline: str) -> pd.DataFrame:
    """One row per arm (its mean and 95% interval) and per other arm's difference from the baseline."""
    rows = []
    for name, values in arms.items():
        rows.append(_row("arm", name, "", mean_interval(values), ",".join(map(str, values))))
    for name, values in arms.items():
        if name != baseline:
            rows.append(_row("difference", name, baseline, difference(values, arms[baseline]), ""))
    return pd.DataFrame(rows)


def _row(kind: str, arm: str, baseline: str, est: Estimate, keys: str) -> dict:
    method = {"paired": "paired by seed", "unpaired": "Welch", "one-sample": "t"}.get(est.kind, est.kind)
    return {"kind": kind, "arm": arm, "baseline": baseline, "estimate": est.estimate,
            "ci_low": est.lo, "ci_high": est.hi, "n": est.n, "method": method, "seeds": keys}  # fmt: skip


def group_by_settings(summaries: dict[str, dict]) -> dict[str, list[str]]:
    """Runs grouped by their settings but the seed; each group named by the settings that
    tell it from the others (`lr=0.001`), or by its first run where none do."""
    key_of = {r: json.dumps({k: v for k, v in (s.get("config") or {}).items() if k != "seed"}, sort_keys=True)
              for r, s in summaries.items()}  # fmt: skip
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
    m = MEASURES[measure]
    width = max(len(a) for a in table["arm"]) + max((len(b) for b in table["baseline"]), default=0) + 3
    lines = [f"{m.label} ({measure}): mean [95% interval] n"]
    for r in table.itertuples():
        name = r.arm if r.kind == "arm" else f"{r.arm} - {r.baseline}"
        sign = "+" if r.kind == "difference" else ""
        finite = math.isfinite(r.ci_low)
        interval = f"[{r.ci_low:{sign}.3f}, {r.ci_high:{sign}.3f}]" if finite else "[no interval: n < 2]"
        how = f", {r.method}" if r.kind == "difference" else ""
        lines.append(f"  {name:<{width}} {r.estimate:{sign}.3f} {interval}  n={r.n}{how}")
    return "\n".join(lines)


def figure(table: pd.DataFrame, arms: dict[str, dict], measure: str):
    """Left: each arm's runs (dots) and mean with its 95% interval; right: each difference
    from the baseline with its 95% interval, against 0."""
    from mathrl.studies.kit import COLORS, STYLE, plt

    m = MEASURES[measure]
    lo, hi = m.bounds
    with plt.rc_context(STYLE):
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
        means = table[table["kind"] == "arm"]
        for i, r in enumerate(means.itertuples()):
            values = list(arms[r.arm].values())
            left.scatter([i] * len(values), values, color=COLORS[i % len(COLORS)], alpha=0.5, s=14)
            if math.isfinite(r.ci_low):
                a, b = max(r.ci_low, lo), min(r.ci_high, hi)  # a bounded measure's interval stays in its range
                err = [[r.estimate - a], [b - r.estimate]]
                left.errorbar([i], [r.estimate], yerr=err, fmt="o", color="k", capsize=4)
            else:
                left.plot([i], [r.estimate], "o", color="k")
        tilt = {"rotation": 20, "ha": "right"} if max(map(len, means["arm"])) > 12 else {}
        left.set_xticks(range(len(means)), [f"{a}\n(n={n})" for a, n in zip(means["arm"], means["n"])], **tilt)
        left.set(xlabel="arm", ylabel=m.label, title="each run, and the mean with its 95% interval")
        diffs = table[table["kind"] == "difference"]
        for i, r in enumerate(diffs.itertuples()):
            err = [[r.estimate - r.ci_low], [r.ci_high - r.estimate]] if math.isfinite(r.ci_low) else None
            right.errorbar([i], [r.estimate], yerr=err, fmt="o", color=COLORS[(i + 1) % len(COLORS)], capsize=4)
        right.axhline(0, color="0.5", linewidth=0.8)
        labels = [f"{a}\n({meth})" for a, meth in zip(diffs["arm"], diffs["method"])]
        right.set_xticks(range(len(diffs)), labels, **tilt)
        base = diffs["baseline"].iloc[0] if len(diffs) else ""
        right.set(xlabel=f"arm, minus {base}", ylabel=f"difference in {m.label}",
                  title="difference with its 95% interval")
    return fig
