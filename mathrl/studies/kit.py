"""What every study shares: roles from the config, per-seed values, verdict tables, text and plot style.

A study keeps only its science; this module holds the plumbing and the plot style, which
`mathrl.plots` (the driver over the studies' figures) imports too, so no study imports the driver.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats  # noqa: E402

from mathrl.errors import ConfigError  # noqa: E402
from mathrl.verdict import CONFIDENCE, MAX_SEEDS, VERDICT_COLUMNS, Verdict, number, sentence  # noqa: E402

NAN = math.nan

# ----------------------------------------------------------------------------- roles
def roles(cfg: dict, experiment: str, required: tuple[str, ...]) -> dict[str, str]:
    """{role: variant} of an experiment, from its `roles` block in the config.

    An experiment absent from the config has no roles (its study reports no data); one that
    is present must name a variant for every role the study needs, and only variants it has."""
    exp = cfg.get("experiments", {}).get(experiment)
    if exp is None:
        return {}
    declared = exp.get("roles") or {}
    missing = [r for r in required if r not in declared]
    if missing:
        raise ConfigError(f"experiments.{experiment}.roles: missing role(s) {', '.join(missing)} "
                          f"(the {experiment} study needs: {', '.join(required)}; give each the name of one of its variants)")  # fmt: skip
    variants = set((exp.get("variants") or {}).keys())
    for role, variant in declared.items():
        if variant not in variants:
            raise ConfigError(f"experiments.{experiment}.roles.{role}: {variant!r} is not a variant of {experiment} "
                              f"(allowed: {', '.join(sorted(variants)) or 'none'})")  # fmt: skip
    return {r: declared[r] for r in declared}


def per_seed(df: pd.DataFrame, col: str, **where) -> dict:
    """{seed: value} of one column over the rows matching `where` (NaN kept out)."""
    if df is None or df.empty or col not in df:
        return {}
    mask = np.ones(len(df), dtype=bool)
    for k, v in where.items():
        if k not in df:
            return {}
        mask &= (df[k].astype(str) == str(v)).to_numpy()
    sel = df[mask]
    return {s: float(v) for s, v in zip(sel["seed"], sel[col]) if pd.notna(v)}


def cell(df: pd.DataFrame, col: str, **where) -> float:
    """The value of `col` in the first row matching `where`; NaN when absent."""
    if df is None or df.empty or col not in df:
        return NAN
    mask = np.ones(len(df), dtype=bool)
    for k, v in where.items():
        if k not in df:
            return NAN
        mask &= (df[k].astype(str) == str(v)).to_numpy()
    vals = df.loc[mask, col]
    return float(vals.iloc[0]) if len(vals) and pd.notna(vals.iloc[0]) else NAN


def known(*xs) -> bool:
    """No value is None or NaN (numpy floats included)."""
    return all(x is not None and not (isinstance(x, (float, np.floating)) and math.isnan(x)) for x in xs)


# ----------------------------------------------------------------------------- mechanisms that engaged
@dataclass(frozen=True)
class Engaged:
    """Whether a variant's mechanism acted in its runs: a measured value against a threshold.

    A remedy that never acted (an upper clip that never binds, a penalty that meets no
    malformed answer, a critic that explains nothing) says nothing about the document's
    claim, so a verdict that rests on it is "not judged" (see `judged`). direction +1: the
    check passes at value >= threshold; -1: at value <= threshold."""

    mechanism: str
    measure: str
    value: float
    threshold: float
    direction: int = 1

    @property
    def passed(self) -> bool | None:
        """True or False; None when the value could not be measured."""
        if not known(self.value):
            return None
        return bool(self.value >= self.threshold) if self.direction > 0 else bool(self.value <= self.threshold)

    def describe(self) -> str:
        word = {True: "engaged", False: "did not engage", None: "not measured"}[self.passed]
        sign = ">=" if self.direction > 0 else "<="
        value = "–" if not known(self.value) else f"{self.value:.3g}"
        return f"{self.mechanism} {word}: {self.measure} {value} (needs {sign} {self.threshold:g})"


def engaged(mechanism: str, measure: str, values, threshold: float, direction: int = 1) -> Engaged:
    """An `Engaged` check on the mean of `values` (a {seed: value} mapping or a list; NaN dropped)."""
    vals = [float(v) for v in (values.values() if hasattr(values, "values") else values) if known(v)]
    return Engaged(mechanism, measure, float(np.mean(vals)) if vals else NAN, float(threshold), direction)


def judged(claim, est, *checks: Engaged, **kw) -> Verdict:
    """A verdict that is given only where every check passed; otherwise "not judged" with the
    measured reason. The checks' measured values go to the row's `engaged` column either way."""
    extra = {**kw.pop("extra", {}), "engaged": "; ".join(c.describe() for c in checks)}
    failed = [c for c in checks if not c.passed]
    if failed:
        return Verdict(claim, est, outcome="not judged", reason="mechanism not engaged: " + "; ".join(c.describe() for c in failed), extra=extra, **kw)
    return Verdict(claim, est, extra=extra, **kw)


# ----------------------------------------------------------------------------- intervals in tables
def t_halfwidth(std, n):
    """Half-width of the 95% t interval of a mean from its std and n (NaN for n < 2); vectorised."""
    std, n = np.asarray(std, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(n >= 2, stats.t.ppf(0.5 + CONFIDENCE / 2, np.maximum(n - 1, 1)), np.nan)
        return t * std / np.sqrt(n)


def add_intervals(df: pd.DataFrame, values: list[str]) -> pd.DataFrame:
    """For each `{v}_mean`/`{v}_std` with `n`: `{v}_lo`, `{v}_hi` (95% t interval of the mean)."""
    out = df.copy()
    for v in values:
        if f"{v}_mean" in out and f"{v}_std" in out and "n" in out:
            h = t_halfwidth(out[f"{v}_std"], out["n"])
            out[f"{v}_lo"], out[f"{v}_hi"] = out[f"{v}_mean"] - h, out[f"{v}_mean"] + h
    return out


def add_wilson(df: pd.DataFrame, count: str, n: str = "n", prefix: str = "collapse_rate") -> pd.DataFrame:
    """`{prefix}`, `{prefix}_lo`, `{prefix}_hi`: a rate count/n with its 95% Wilson interval."""
    from mathrl.verdict import wilson

    out = df.copy()
    ci = [wilson(int(k), int(m)) if known(k, m) and m else (NAN, NAN) for k, m in zip(out[count], out[n])]
    out[prefix] = [k / m if known(k, m) and m else NAN for k, m in zip(out[count], out[n])]
    out[f"{prefix}_lo"], out[f"{prefix}_hi"] = [c[0] for c in ci], [c[1] for c in ci]
    return out


def verdict_frame(verdicts: list[Verdict]) -> pd.DataFrame:
    """One row per verdict: VERDICT_COLUMNS, then any extra columns the study added (its `part`, say)."""
    rows = [v.row() for v in verdicts]
    extra = list(dict.fromkeys(k for r in rows for k in r if k not in VERDICT_COLUMNS))
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS + extra)


def verdict_rows(df: pd.DataFrame) -> list[dict]:
    """A verdicts table read back from CSV, as dicts for the template macro (with `sentence`)."""
    if df is None or df.empty:
        return []
    rows = df.astype(object).where(df.notna(), None).to_dict("records")
    out = []
    for r in rows:
        r = {k: (NAN if v is None and k not in ("reason", "note", "outcome", "design", "unit", "engaged") else v) for k, v in r.items()}
        r["reason"], r["note"], r["engaged"] = r.get("reason") or "", r.get("note") or "", r.get("engaged") or ""
        r["sentence"] = sentence(r)
        out.append(r)
    return out


def by_key(rows: list[dict]) -> dict[str, dict]:
    return {r["key"]: r for r in rows}


def power_note(df: pd.DataFrame) -> str:
    """The study's power in one sentence: n per arm and the smallest effects its verdicts can detect."""
    if df is None or df.empty:
        return "No verdicts: no runs with a result."
    judged = df[df["outcome"] != "not judged"]
    ns = sorted({int(n) for n in judged["n"].dropna()}) if len(judged) else []
    parts = [f"n per arm: {', '.join(map(str, ns)) if ns else 'none'}"]
    mdes = [f"{r.key} {number(r.mde, r.unit, sign=False)}" for r in judged.itertuples() if pd.notna(r.mde)]
    if mdes:
        parts.append("smallest effect detectable with 80% power: " + "; ".join(mdes))
    need = [f"{r.key} {'more than ' + str(MAX_SEEDS) if r.seeds_needed > MAX_SEEDS else int(r.seeds_needed)}"
            for r in judged.itertuples() if r.outcome == "inconclusive" and pd.notna(r.seeds_needed)]  # fmt: skip
    if need:
        parts.append("seeds per arm an inconclusive verdict would need: " + "; ".join(need))
    counts = df["outcome"].value_counts()
    parts.append(", ".join(f"{counts.get(o, 0)} {o}" for o in ("agrees", "disagrees", "inconclusive", "not judged")))
    return ". ".join(parts) + "."


def pm(mean, std, n, unit: str = "pts") -> str:
    """`mean [lo, hi] (n=k)`: a mean with its 95% t interval, in a unit of mathrl.verdict.number."""
    if not known(mean):
        return "no data"
    h = float(t_halfwidth(std, n)) if known(std, n) else NAN
    ci = f" [{number(mean - h, unit, sign=False)}, {number(mean + h, unit, sign=False)}]" if known(h) else ""
    return f"{number(mean, unit, sign=False)}{ci} (n={int(n) if known(n) else 0})"


# ----------------------------------------------------------------------------- plot style
STYLE = {
    "figure.dpi": 110, "savefig.dpi": 110, "figure.figsize": (7.0, 4.0), "font.size": 9,
    "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8, "axes.grid": True,
    "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False, "lines.linewidth": 1.5,
}  # fmt: skip
COLORS = plt.get_cmap("tab10").colors


def band(ax, x, mean, std, label, color, n=None):
    """A mean line with a band: the 95% t interval of the mean when `n` (seeds per point) is
    given, else ±1 std across seeds."""
    mean, std = pd.Series(np.asarray(mean, dtype=float)), pd.Series(np.asarray(std, dtype=float))
    half = pd.Series(t_halfwidth(std, n)) if n is not None else std
    ax.plot(x, mean, label=label, color=color)
    ax.fill_between(x, mean - half.fillna(0), mean + half.fillna(0), color=color, alpha=0.18, linewidth=0)


def placeholder(ax, text: str) -> None:
    """An honest empty panel when the data a figure needs is missing."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])
