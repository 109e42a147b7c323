"""Claims as data, judged by one engine.

A claim is declared in YAML (`config/claims.yaml` for the documents', the papers' and the
testbed's claims; an experiment's own `claims:` block for a user's). It names a table of
per-seed measures (`run_measures`, one row per RL run, or a study's table), the column it
measures, the arms compared (filters on that table's rows), how they are compared, what the
document expects, and the checks that must pass before the comparison means anything: that
the failure a remedy exists for was shown (`failure`), and that the remedy's mechanism acted
(`engaged`). The engine turns each claim into one row of `results/tables/claims.csv`:

- the per-seed values of each arm (rows whose seed is `all` are pooled rows, never values), keyed
  by seed or by the column the claim's `pair_on` names;
- an estimate with its 95% interval (`mathrl.analysis.verdict`: paired by that key where one arm's keys
  include the other's, else Welch; the delta method for a relative difference; Wilson and
  Newcombe for rates);
- the outcome: `mathrl.analysis.verdict.judge` on the interval, "not judged" where a check failed;
- the p-value of the test behind that outcome (`deciding_tests`), adjusted across the family of
  `document` claims judged by Holm and by Benjamini-Hochberg (statsmodels); a decided document
  claim that does not survive the configured adjustment is "inconclusive";
- for an inconclusive claim, the seeds per arm that would decide it (`seeds_needed`: power at
  the spread measured, for rates from Cohen's h, for a demoted claim at the adjustment's level); a
  zero-width interval is stated as exact and, outside setup checks, noted as a result likely
  fixed by construction.

The report's verdict tables are views of that file. The grammar is the `claim`
definition of `config/config.schema.yaml`; docs/ARCHITECTURE.md shows a claim end to end.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from mathrl.analysis import claim_names
from mathrl.analysis.verdict import (
    Claim,
    Estimate,
    Verdict,
    between_share,
    cluster_means,
    correlation_interval,
    difference,
    distance_to_pass,
    fisher_z,
    mean_interval,
    number,
    rate_difference,
    rate_seeds_needed,
    relative_difference,
    seeds_for,
    wilson,
)
from mathrl.pipeline.errors import ConfigError

KINDS = ("document", "setup", "reference", "beyond", "user")
COMPARES = ("difference", "one_sample", "correlation", "rate", "relative", "point")
# whether a comparison needs a second arm b (a rate takes one or none)
SECOND_ARM = {"difference": True, "relative": True, "one_sample": False, "correlation": False, "point": False}
ALPHA = 0.05
COLUMNS = [
    "claim_id",
    "kind",
    "source",
    "statement",
    "outcome",
    "difference",
    "ci_low",
    "ci_high",
    "n",
    "p_value",
    "p_holm",
    "p_bh",
    "engaged",
    "failure_established",
    "reason",
]
EXTRA = [
    "section",
    "part",
    "measure",
    "expected",
    "margin",
    "unit",
    "design",
    "n_a",
    "n_b",
    "sd",
    "effect_size",
    "mde",
    "effect_target",
    "seeds_needed",
    "note",
    "checks",
    "outcome_unadjusted",
    "p_null",
    "p_test",
    "n_of",
    "runs",
    "warmups",
    "between_share",
    "quote",
    "translation",
    "status",
    "line",
    "design_key",
]
WARMUP = "warmup"  # the column naming the warm-up a run started from: the unit of replication of a claim on the GPT
BY_CONSTRUCTION = (
    "nothing varied across seeds (a zero-width interval, or every run the same outcome against 0): the "
    "result "
    "is likely fixed by construction of the setup rather than a finding"
)
SPECIAL = ("max", "min")  # arm values resolved over the table: the largest or smallest numeric value of the column


# ----------------------------------------------------------------------------- declarations
@dataclass(frozen=True)
class Check:
    """A registered predicate: the mean (or sum, or max, or an end of its 95% interval) of a
    measure over one arm's seeds against a threshold. `ratio_to` / `minus_to`: the measure
    divided by, or less, another arm's seed by seed first (an arm: a, b, or a filter)."""

    type: str  # failure (the problem a remedy is for was shown) | engaged (its mechanism acted) | precondition
    label: str
    measure: str
    arm: str | dict = "a"
    stat: str = "mean"
    at_least: float | None = None
    at_most: float | None = None
    ratio_to: str | dict | None = None
    minus_to: str | dict | None = None
    text: str = ""
    table: str | None = None


@dataclass(frozen=True)
class ClaimSpec:
    """One declared claim (the `claim` definition of config/config.schema.yaml gives every field's meaning)."""

    id: str
    kind: str
    source: str
    statement: str
    table: str
    measure: str
    a: dict
    b: dict | None = None
    compare: str = "difference"
    value: float = 0.0
    direction: int = 1
    size: tuple[float, float] | None = None
    equivalence: float | None = None
    noninferior: float | None = None
    unit: str = "num"
    measure_text: str = ""
    section: str = ""
    part: str = ""
    experiment: str | None = None
    checks: tuple[Check, ...] = ()
    optional_roles: tuple[str, ...] = ()
    note: str = ""
    paired: bool | None = None
    pair_on: str = "seed"
    quote: str = ""
    translation: str = ""
    design: str = ""
    line: str = ""
    size_basis: str = ""

    @property
    def verdict_claim(self) -> Claim:
        if self.equivalence is not None:
            return Claim(
                self.id,
                self.statement,
                self.measure_text or self.measure,
                "equivalence",
                margin=float(self.equivalence),
                unit=self.unit,
            )
        if self.noninferior is not None:
            return Claim(
                self.id,
                self.statement,
                self.measure_text or self.measure,
                "noninferior",
                self.direction,
                margin=float(self.noninferior),
                unit=self.unit,
            )
        return Claim(
            self.id,
            self.statement,
            self.measure_text or self.measure,
            "direction",
            self.direction,
            size=self.size,
            unit=self.unit,
        )


def validate(decl: dict, where: str) -> None:
    """A declaration against the schema's `claim` definition (config.validate_claim)."""
    from mathrl.pipeline.config import validate_claim

    validate_claim(decl, where)


def parse(d: dict, where: str) -> ClaimSpec:
    """One claim declaration (validated, already expanded) as a ClaimSpec."""
    compare = d.get("compare") or ("difference" if d.get("b") else "one_sample")
    if compare in SECOND_ARM and SECOND_ARM[compare] != bool(d.get("b")):
        raise ConfigError(f"{where}: compare {compare} takes {'an arm b' if SECOND_ARM[compare] else 'no arm b'}")
    d = dict(d)
    expect = dict(d.pop("expect", None) or {})
    size = expect.get("size")
    checks = tuple(Check(**c) for c in d.get("checks") or ())
    return ClaimSpec(
        id=str(d["id"]),
        kind=d["kind"],
        source=str(d.get("source", "")),
        statement=str(d["statement"]),
        table=d.get("table", "run_measures"),
        measure=d["measure"],
        a=dict(d["a"]),
        b=dict(d["b"]) if d.get("b") else None,
        compare=compare,
        value=float(d.get("value", 0.0)),
        direction=int(expect.get("direction", 1)),
        size=(float(size[0]), float(size[1])) if size is not None else None,
        equivalence=expect.get("equivalence"),
        noninferior=expect.get("noninferior"),
        unit=d.get("unit", "num"),
        measure_text=d.get("measure_text", ""),
        section=d.get("section", ""),
        part=d.get("part", ""),
        experiment=d.get("experiment"),
        checks=checks,
        optional_roles=tuple(d.get("optional") or ()),
        note=d.get("note", ""),
        paired=d.get("paired"),
        pair_on=d.get("pair_on", "seed"),
        quote=d.get("quote", ""),
        translation=d.get("translation", ""),
        design=d.get("design", ""),
        size_basis=d.get("size_basis", ""),
        line=d.get("line", "primary" if d["kind"] == "document" else ""),
    )


def expand(decl: dict, tables: Mapping[str, pd.DataFrame] | None = None, cfg: dict | None = None) -> list[dict]:
    """claim_names.expand, where "*" takes the column's distinct values in the claim's table (kept as a placeholder
    without tables)."""
    star = None if tables is None else lambda table, name: _column_values(tables.get(table), name)
    return claim_names.expand(decl, cfg, star)


def _column_values(df: pd.DataFrame | None, name: str) -> list[str]:
    if df is None or df.empty or name not in df:
        return []
    return sorted(_rows(df)[name].dropna().astype(str).unique(), key=_natural)


def _natural(s: str):
    try:
        return (0, float(s), s)
    except ValueError:
        return (1, 0.0, s)


def default_claims_file() -> Path:
    """config/claims.yaml: the documents', the papers' and the testbed's claims."""
    from mathrl.pipeline.config import CLAIMS_PATH

    return CLAIMS_PATH


def declarations(cfg: dict, path: Path | None = None) -> list[tuple[dict, str]]:
    """(declaration, where it was written) for every claim of a configuration (config.claim_declarations)."""
    from mathrl.pipeline.config import claim_declarations

    return claim_declarations(cfg, path)


def load(cfg: dict, tables: Mapping[str, pd.DataFrame] | None = None, path: Path | None = None) -> list[ClaimSpec]:
    """Every claim of a configuration, expanded and parsed; duplicate ids are an error."""
    out, seen = [], {}
    for decl, where in declarations(cfg, path):
        validate(decl, where)
        for d in expand(decl, tables, cfg):
            spec = parse(d, where)
            if spec.id in seen:
                raise ConfigError(f"{where}: claim id {spec.id!r} is declared twice (first in {seen[spec.id]})")
            seen[spec.id] = where
            out.append(spec)
    return out


# ----------------------------------------------------------------------------- arms
def _rows(df: pd.DataFrame) -> pd.DataFrame:
    """Per-seed rows: a study's pooled rows (seed `all`) are summaries, not measurements."""
    return df[df["seed"].astype(str) != "all"] if "seed" in df else df


def _numbers(s: pd.Series) -> pd.Series:
    return pd.to_numeric(s, errors="coerce").dropna()


@dataclass
class Arm:
    """The rows of one arm and the settings that selected them (`role` resolved to a variant)."""

    rows: pd.DataFrame
    where: dict = field(default_factory=dict)
    measure: str = ""
    key: str = "seed"  # the column pairing the two arms' rows (the claim's pair_on)
    tag: str = ""  # the arm's name (a, b): rows keyed by position carry it, so they pair with no other arm's

    def values(self) -> dict:
        """{seed (or the pair_on column): value} when those are unique in the arm, else {row position: value}."""
        if self.rows.empty or self.measure not in self.rows:
            return {}
        v = pd.to_numeric(self.rows[self.measure], errors="coerce")
        return {k: float(x) for k, x in zip(self.keys(), v) if x == x}

    def keys(self) -> list:
        """The pairing column's values where they are unique in the arm; else the rows' positions, as ("row", tag, i),
        which pair with nothing in another arm."""
        k = self.key
        if k in self.rows and self.rows[k].is_unique:
            return list(self.rows[k])
        return [("row", self.tag, i) for i in range(len(self.rows))]

    def clusters(self) -> dict:
        """{key of `values`: the warm-up its run started from} where the table has a `warmup` column (a run from a
        random policy, NaN there, is a cluster of its own); empty where it has none (the bandit's seeds)."""
        if self.rows.empty or WARMUP not in self.rows:
            return {}
        warmups = pd.to_numeric(self.rows[WARMUP], errors="coerce")
        return {k: (None if w != w else int(w)) for k, w in zip(self.keys(), warmups)}


def resolve_role(cfg: dict, experiment: str | None, role: str) -> dict:
    """A role of an experiment as a filter: its variant, or the grid point `key=value` it names."""
    roles = ((cfg.get("experiments") or {}).get(experiment or "") or {}).get("roles") or {}
    if role not in roles:
        raise KeyError(role)
    target = str(roles[role])
    if "=" in target:
        key, value = target.split("=", 1)
        return {key: value}
    return {"variant": target}


def select(df: pd.DataFrame, where: dict, cfg: dict, spec: ClaimSpec) -> Arm:
    """The rows of `df` matching an arm's filter (`role`, `measure` and `table` are not columns)."""
    where = dict(where)
    measure = str(where.pop("measure", spec.measure))
    where.pop("table", None)
    experiment = where.pop("experiment", spec.experiment)
    if "role" in where:  # through the config's roles (one variant may hold several roles), else the table's own column
        role = where.pop("role")
        declared = ((cfg.get("experiments") or {}).get(experiment or "") or {}).get("roles") or {}
        where.update(resolve_role(cfg, experiment, role) if role in declared or "role" not in df else {"role": role})
    if "variant" in where and "variant" not in df and "setting" in df:  # tables that name a variant its setting
        where["setting"] = where.pop("variant")
    rows = _rows(df)
    if experiment and "experiment" in rows:
        rows = rows[rows["experiment"] == experiment]
    resolved = {}
    for col, want in where.items():
        if col not in rows:
            return Arm(rows.iloc[0:0], {**resolved, col: want}, measure, spec.pair_on)
        if want in SPECIAL:
            nums = _numbers(rows[col])
            want = (nums.max() if want == "max" else nums.min()) if len(nums) else math.nan
        if isinstance(want, float) and math.isnan(want):
            return Arm(rows.iloc[0:0], resolved, measure, spec.pair_on)
        rows = rows[_equal(rows[col], want)]
        resolved[col] = _plain(want)
    return Arm(rows, resolved, measure, spec.pair_on)


def _equal(col: pd.Series, want) -> pd.Series:
    """Column equals value, numerically where both are numbers (512 == 512.0 == "512")."""
    try:
        w = float(want)
        return pd.to_numeric(col, errors="coerce").eq(w) | col.astype(str).eq(str(want))
    except (TypeError, ValueError):
        return col.astype(str).eq(str(want))


def _plain(x):
    if isinstance(x, (float, np.floating)) and float(x).is_integer():
        return int(x)
    return x.item() if isinstance(x, np.generic) else x


# ----------------------------------------------------------------------------- replication
@dataclass(frozen=True)
class Replication:
    """What a claim's estimate is replicated over: the arms' values per unit (a warm-up's mean over its RL seeds,
    or a seed's or run's own value), the comparison made on them, and the units' description."""

    a: dict
    b: dict
    compare: str
    n_of: str  # warm-ups | seeds | runs
    runs: int  # the runs behind the values (arm a's, or the pairs')
    warmups: float  # the distinct warm-ups behind them (NaN without any)
    between: float  # the share of the runs' variance between warm-ups (NaN where not estimable)


def paired_keys(a: dict, b: dict, paired: bool | None) -> list | None:
    """The keys two arms are paired on (as `verdict.difference` decides), None where they are not paired."""
    common = set(a) & set(b)
    if paired is False or not b:
        return None
    if paired or (len(common) >= 2 and common in (set(a), set(b))):
        return sorted(common, key=str)
    return None


def replicate(spec: ClaimSpec, a: dict, b: dict, ca: dict, cb: dict) -> Replication:
    """The values a claim's statistics run on. Where the runs started from warm-ups (`ca`, `cb`: each key's warm-up),
    the warm-up is the unit of replication: each arm's values are averaged over the runs of a warm-up (paired
    designs: the per-key pairs, then their means per warm-up), so the interval counts the variation between
    warm-ups that a rerun would draw anew, and n counts warm-ups. A rate becomes the share per warm-up, compared
    by t over warm-ups. Without warm-ups (the bandit's seeds, runs from a random policy alone) the values are
    returned as they are."""
    rate = spec.compare == "rate"
    if rate:
        a, b = ({k: float(x > 0) for k, x in arm.items()} for arm in (a, b))
    kind = "runs" if rate else "seeds"
    real = {w for w in (*ca.values(), *cb.values()) if w is not None}
    if not real:
        return Replication(a, b, spec.compare, kind, len(a), math.nan, math.nan)
    if len(real) == 1 and None not in (*ca.values(), *cb.values()):  # every run from one warm-up: seeds given it
        return Replication(a, b, spec.compare, f"{kind}, one warm-up", len(a), 1.0, math.nan)
    keys = paired_keys(a, b, spec.paired) if spec.compare in ("difference", "relative", "rate") else None
    if keys is not None:
        a, b = {k: a[k] for k in keys}, {k: b[k] for k in keys}
        cb = {k: ca.get(k) for k in keys}  # a pair is one run of each arm from the same warm-up
        spread = {k: a[k] - b[k] for k in keys}
    else:
        spread = a
    if spec.compare == "correlation":  # averaged on Fisher's z, where a mean of correlations is meaningful
        za = cluster_means(dict(zip(a, fisher_z(a))), ca)
        ma, mb = {c: float(np.tanh(z)) for c, z in za.items()}, {}
    else:
        ma, mb = cluster_means(a, ca), cluster_means(b, cb) if b else {}
    compare = ("difference" if b else "one_sample") if rate else spec.compare
    return Replication(ma, mb, compare, "warm-ups", len(spread), float(len(real)), between_share(spread, ca))


# ----------------------------------------------------------------------------- statistics
def estimate(spec: ClaimSpec, a: dict, b: dict) -> tuple[Estimate | None, str]:
    """(estimate, note) for one claim's per-seed values."""
    if spec.compare == "point":
        vals = list(a.values())
        if not vals:
            return None, ""
        v = float(np.mean(vals)) - spec.value
        return Estimate(v, math.nan, math.nan, len(vals), "probe", len(vals)), ""
    if spec.compare == "rate":
        ka, na = _hits(a)
        if not b:
            lo, hi = wilson(ka, na)
            est = Estimate(ka / na - spec.value, lo - spec.value, hi - spec.value, na, "rates", na) if na else None
            return est, f"{ka} of {na} runs"
        kb, nb = _hits(b)
        if not na or not nb:
            return None, ""
        return rate_difference(ka, na, kb, nb), f"{ka} of {na} runs against {kb} of {nb}"
    if spec.compare == "one_sample":
        return mean_interval({k: x - spec.value for k, x in a.items()}), ""
    if spec.compare == "correlation":
        return correlation_interval(a), ""
    if spec.compare == "relative":
        return relative_difference(a, b, spec.paired), ""
    return difference(a, b, spec.paired), ""


def _hits(arm: dict) -> tuple[int, int]:
    """(runs with a positive value, runs) of a rate's arm."""
    return int(sum(x > 0 for x in arm.values())), len(arm)


def deciding_tests(claim: Claim, est: Estimate, outcome: str) -> tuple[list[tuple[float, str]], int]:
    """The null values and sides of the test behind `outcome` (TOST: both), on the claim's scale, and the factor
    its p-value is multiplied by. A one-sided test is read at 2.5%, as a 95% interval decides, so its p is doubled:
    then p < 0.05 exactly when the interval decides (for rates nearly: Fisher's exact test and the score test are not
    what Newcombe's interval inverts), for every kind of claim, and one adjustment serves them all.
    - a margin (equivalence, non-inferiority): the test that the difference lies inside it, or, for a
      disagreement, beyond it on the losing side;
    - a document's size the interval excludes: the nearer end of the size, two-sided;
    - otherwise no difference, two-sided."""
    if claim.kind == "equivalence":
        m = claim.margin
        if outcome == "disagrees":
            return ([(m, "greater")] if est.lo > m else [(-m, "less")]), 2
        return [(-m, "greater"), (m, "less")], 2
    if claim.kind == "noninferior":
        win, lose = ("greater", "less") if claim.direction > 0 else ("less", "greater")
        return [(-claim.direction * claim.margin, lose if outcome == "disagrees" else win)], 2
    if claim.size is not None and outcome == "disagrees":
        low, high = claim.size
        return [(low if est.hi < low else high, "two-sided")], 1
    return [(0.0, "two-sided")], 1


def deciding_p(spec: ClaimSpec, claim: Claim, est: Estimate | None, outcome: str, a: dict, b: dict) -> dict:
    """The p-value of the claim's test behind its outcome (`deciding_tests`), from scipy.stats (t, Welch, binomial,
    Fisher's exact) or statsmodels (two rates against a difference other than 0), with the null it tests against
    (of two, the nearer the estimate) and the test in words: {p_value, p_null, p_test}. The p is NaN for a probe's
    single value, an exact value (no spread) or a rate against 0 or 1."""
    if est is None or spec.compare == "point" or est.kind == "exact":
        return {"p_value": math.nan, "p_null": math.nan, "p_test": ""}
    tests, factor = deciding_tests(claim, est, outcome)
    ps = [_p_at(spec, a, b, est, null, side) for null, side in tests]
    p = min(1.0, factor * max(ps)) if all(x == x for x in ps) else math.nan
    null = min((x for x, _ in tests), key=lambda x: abs(est.estimate - x))
    if len(tests) > 1:
        text = f"against ±{number(abs(null), claim.unit).lstrip('+')} (two one-sided tests, the larger p doubled)"
    else:
        text = f"against {number(null, claim.unit)} ({tests[0][1]}{', doubled' if factor > 1 else ''})"
    return {"p_value": p, "p_null": null, "p_test": text}


def _p_at(spec: ClaimSpec, a: dict, b: dict, est: Estimate, null: float, side: str) -> float:
    """p of `side` against `null` (on the claim's scale) for one claim's per-seed values."""
    if spec.compare == "rate":
        (ka, na), (kb, nb) = _hits(a), _hits(b)
        if not b:
            rate = spec.value + null
            return float(stats.binomtest(ka, na, rate, alternative=side).pvalue) if na and 0 < rate < 1 else math.nan
        if null == 0:
            return float(stats.fisher_exact([[ka, na - ka], [kb, nb - kb]], alternative=side).pvalue)
        from statsmodels.stats.proportion import test_proportions_2indep

        with np.errstate(divide="ignore", invalid="ignore"):  # its ratio and odds columns at a rate of 0
            side = {"two-sided": "two-sided", "greater": "larger", "less": "smaller"}[side]
            return float(
                test_proportions_2indep(
                    ka, na, kb, nb, value=null, compare="diff", method="score", alternative=side
                ).pvalue
            )
    if spec.compare == "one_sample":
        return _t_one([x - spec.value for x in a.values()], null, side)
    if spec.compare == "correlation":  # the t test of Fisher's z, against the null's z
        return _t_one(list(fisher_z(a)), float(np.arctanh(null)), side)
    if spec.compare == "relative":  # the delta method's t statistic, on the interval's own standard error and df
        if not (est.se > 0):
            return math.nan
        t = (est.estimate - null) / est.se
        if side == "two-sided":
            return float(2 * stats.t.sf(abs(t), est.df))
        return float(stats.t.sf(t, est.df) if side == "greater" else stats.t.cdf(t, est.df))
    if est.kind == "paired":
        common = sorted(set(a) & set(b), key=str)
        return _t_one([a[k] - b[k] for k in common], null, side)
    xa, xb = list(a.values()), list(b.values())
    if len(xa) < 2 or len(xb) < 2:
        return math.nan
    return float(stats.ttest_ind(np.array(xa) - null, xb, equal_var=False, alternative=side).pvalue)


def _t_one(x: list[float], null: float, side: str) -> float:
    if len(x) < 2 or np.std(x) <= 1e-12 * max(1.0, abs(float(np.mean(x)))):  # no spread: an exact value, no test
        return math.nan
    return float(stats.ttest_1samp(x, null, alternative=side).pvalue)


# ----------------------------------------------------------------------------- checks
STATS = {
    "mean": lambda x: float(np.mean(x)),
    "sum": lambda x: float(np.sum(x)),
    "max": lambda x: float(np.max(x)),
    "min": lambda x: float(np.min(x)),
    "count": lambda x: float(len(x)),
    "ci_low": lambda x: mean_interval(x).lo,
    "ci_high": lambda x: mean_interval(x).hi,
}  # how a check reduces an arm's per-seed values; ci_low / ci_high: the ends of the mean's 95% t interval


def within(low: float, high: float) -> bool:
    """low <= high, where a value equal to its threshold up to float rounding counts as equal: a run's mean of a
    setting logged at every step (an entropy bonus of 0.02, say) can come out a few ulps below it."""
    return low <= high or math.isclose(low, high, rel_tol=1e-9, abs_tol=1e-12)


def run_check(
    check: Check, spec: ClaimSpec, tables: Mapping[str, pd.DataFrame], cfg: dict, arms: dict
) -> tuple[bool | None, str]:
    """(passed, its description with the measured value); None when it could not be measured."""
    df = tables.get(check.table or spec.table)
    where = arms.get(check.arm) if isinstance(check.arm, str) else check.arm
    if df is None or df.empty or where is None:
        return None, f"{check.label} not measured: no data"
    arm = select(df, {**where, "measure": check.measure}, cfg, spec)
    vals = arm.values()
    for against, combine in (
        (check.ratio_to, lambda v, o: v / o if o else math.nan),
        (check.minus_to, lambda v, o: v - o),
    ):
        if against:
            o_where = arms.get(against) if isinstance(against, str) else against
            other = select(df, {**o_where, "measure": check.measure}, cfg, spec).values()
            vals = {k: combine(v, other[k]) for k, v in vals.items() if k in other}
            vals = {k: v for k, v in vals.items() if v == v}
    if check.stat in ("ci_low", "ci_high"):  # an interval over the unit of replication (a warm-up's runs' mean)
        vals = replicate(spec, vals, {}, arm.clusters(), {}).a if spec.compare != "rate" else vals
    x = list(vals.values())
    if not x:
        return None, f"{check.label} not measured: {check.text or check.measure} has no values"
    value = STATS[check.stat](x)
    if not value == value:
        return None, f"{check.label} not measured: {check.stat} of {check.text or check.measure} needs more values"
    ok = (check.at_least is None or within(check.at_least, value)) and (
        check.at_most is None or within(value, check.at_most)
    )
    bounds = " and ".join(f"{s} {t:g}" for s, t in ((">=", check.at_least), ("<=", check.at_most)) if t is not None)
    word = {
        "failure": ("established", "not established"),
        "engaged": ("engaged", "did not engage"),
        "precondition": ("met", "not met"),
    }[check.type][not ok]
    return bool(ok), f"{check.label} {word}: {check.text or check.measure} {value:.3g} (needs {bounds})"


# ----------------------------------------------------------------------------- the engine
def judge_claim(spec: ClaimSpec, tables: Mapping[str, pd.DataFrame], cfg: dict) -> dict | None:
    """One claim's row (before the family's adjustment); None where an optional role is absent."""
    exp_roles = ((cfg.get("experiments") or {}).get(spec.experiment or "") or {}).get("roles") or {}
    if any(r not in exp_roles for r in spec.optional_roles):
        return None
    df = tables.get(spec.table)
    arms = {"a": spec.a, **({"b": spec.b} if spec.b else {})}
    claim = spec.verdict_claim
    base = {
        "claim_id": spec.id,
        "kind": spec.kind,
        "source": spec.source,
        "section": spec.section,
        "part": spec.part,
        "quote": spec.quote,
        "translation": spec.translation,
        "line": spec.line,
        "design_key": spec.design,
        "status": "tested" if spec.kind == "document" else "",
    }
    if df is None or df.empty:
        v = Verdict(claim, None, outcome="not judged", reason=f"no data: table {spec.table} is empty or missing")
        return {**base, **_row(v, math.nan, [])}
    try:
        a = dataclasses.replace(select(df, spec.a, cfg, spec), tag="a")
        b = dataclasses.replace(select(df, spec.b, cfg, spec), tag="b") if spec.b else None
    except KeyError as e:
        if spec.kind == "user":  # a user's claim names a role their experiment lacks: their mistake to fix
            raise ConfigError(f"claim {spec.id}: experiment {spec.experiment!r} has no role {e.args[0]!r}") from None
        v = Verdict(
            claim, None, outcome="not judged", reason=f"experiment {spec.experiment} declares no role {e.args[0]!r}"
        )
        return {**base, **_row(v, math.nan, [])}
    statement, measure_text = (_arm_values(x, a, b) for x in (spec.statement, claim.measure))
    claim = Claim(claim.key, statement, measure_text, claim.kind, claim.direction, claim.size, claim.margin, claim.unit)
    rep = replicate(spec, a.values(), b.values() if b else {}, a.clusters(), b.clusters() if b else {})
    spec = dataclasses.replace(spec, compare=rep.compare)  # a rate over warm-ups is compared by t on their shares
    est, note = estimate(spec, rep.a, rep.b)
    if est is not None and spec.compare != "point" and est.exact:
        est = est.as_exact()
    results = [(c, *run_check(c, spec, tables, cfg, arms)) for c in spec.checks]
    failed = [(c, text) for c, ok, text in results if not ok]
    if est is not None and spec.compare == "point":
        v = _point_verdict(claim, est, spec)
    elif failed:
        first = {c.type for c, _ in failed}
        kind = next(
            w
            for t, w in (
                ("precondition", "precondition not met"),
                ("failure", "failure not established"),
                ("engaged", "mechanism not engaged"),
            )
            if t in first
        )
        v = Verdict(claim, est, outcome="not judged", reason=f"{kind}: " + "; ".join(t for _, t in failed))
    else:
        v = Verdict(claim, est)
    if spec.compare == "rate" and v.outcome == "inconclusive":
        v.seeds = rate_seeds_needed(*_rates_to_detect(spec, rep.a, rep.b), one_sample=not b)
        if v.seeds != v.seeds:
            v.reason += "; the rates are equal and the document states no size, so no number of runs can be given"
    if spec.kind in ("document", "beyond", "reference") and _degenerate(spec, est, rep.a):
        note = "; ".join(x for x in (note, BY_CONSTRUCTION) if x)
    v.note = "; ".join(x for x in (spec.note, note) if x)
    test = deciding_p(spec, claim, v.est, v.outcome, rep.a, rep.b)
    units = {"n_of": rep.n_of, "runs": rep.runs, "warmups": rep.warmups, "between_share": rep.between}
    return {**base, "statement": statement, **_row(v, test["p_value"], results), **test, **units}


def _degenerate(spec: ClaimSpec, est: Estimate | None, a: dict) -> bool:
    """A zero-width interval, or a rate of 0 of n or n of n judged against 0: nothing varied."""
    if est is None or spec.compare == "point":
        return False
    if spec.compare == "rate":
        return (
            spec.b is None and spec.value == 0 and spec.size is None and sum(x > 0 for x in a.values()) in (0, len(a))
        )
    return est.exact


def _rates_to_detect(spec: ClaimSpec, a: dict, b: dict) -> tuple[float, float]:
    """The two rates a power calculation compares: the observed rate of arm a (or the document's
    size added to the baseline, where stated) against arm b's rate or the claim's value."""
    p_a = sum(x > 0 for x in a.values()) / len(a) if a else math.nan
    p_b = sum(x > 0 for x in b.values()) / len(b) if b else spec.value
    if spec.size:
        p_a = min(1.0, max(0.0, p_b + spec.direction * min(abs(x) for x in spec.size)))
    return p_a, p_b


def _arm_values(text: str, a: Arm, b: Arm | None) -> str:
    """`{a.col}` / `{b.col}` in a statement: the value an arm resolved (the largest batch, say)."""
    arms = {"a": a, "b": b}
    return re.sub(
        r"\{([ab])\.(\w+)\}",
        lambda m: str((arms[m.group(1)].where if arms[m.group(1)] else {}).get(m.group(2), m.group(0))),
        text,
    )


def _point_verdict(claim: Claim, est: Estimate, spec: ClaimSpec) -> Verdict:
    """A single value (a probe, a deterministic check) against the document's range: no interval."""
    lo, hi = (
        spec.size
        if spec.size
        else (-math.inf, math.inf)
        if spec.direction == 0
        else (0, math.inf)
        if spec.direction > 0
        else (-math.inf, 0)
    )
    inside = lo <= est.estimate <= hi
    return Verdict(
        claim,
        est,
        outcome="agrees" if inside else "disagrees",
        reason=f"a single value against the expected range, without an interval (n={est.n})",
    )


def _row(v: Verdict, p: float, results: list) -> dict:
    """A judged claim's columns of claims.csv (before the family's adjustment)."""
    r = v.row()
    failures = [ok for c, ok, _ in results if c.type == "failure"]
    engages = [ok for c, ok, _ in results if c.type == "engaged"]
    return {
        "statement": r["claim"],
        "outcome": r["outcome"],
        "difference": r["diff"],
        "ci_low": r["ci_low"],
        "ci_high": r["ci_high"],
        "n": r["n"],
        "p_value": p,
        "p_holm": math.nan,
        "p_bh": math.nan,
        "margin": r["margin"],
        "sd": r["sd"],
        "effect_target": distance_to_pass(v.claim, v.est) if v.est is not None and v.est.finite else math.nan,
        "engaged": (all(bool(x) for x in engages) if engages else ""),
        "failure_established": (all(bool(x) for x in failures) if failures else ""),
        "reason": r["reason"],
        "measure": r["measure"],
        "expected": r["expected"],
        "unit": r["unit"],
        "design": r["design"],
        "n_a": r["n_a"],
        "n_b": r["n_b"],
        "effect_size": r["effect_size"],
        "mde": r["mde"],
        "seeds_needed": r["seeds_needed"],
        "note": r["note"],
        "checks": "; ".join(t for _, _, t in results),
        "outcome_unadjusted": r["outcome"],
    }


# The adjustments that may decide the document family (config `verdicts.adjustment`): the
# adjusted p-value's column, the name in words, and the per-claim level at rank r of m.
ADJUSTMENTS = {
    "holm": ("p_holm", "Holm's adjustment", lambda r, m: ALPHA / (m - r + 1)),
    "bh": ("p_bh", "Benjamini-Hochberg's adjustment", lambda r, m: ALPHA * r / m),
}


def adjust(df: pd.DataFrame, method: str = "bh") -> pd.DataFrame:
    """Holm and Benjamini-Hochberg across the document claims that were judged and have a p-value (a
    claim not judged, its failure not established or its mechanism not engaged, tests nothing, so it
    is no member of the family); a decided document claim whose p-value adjusted by `method` is not
    below ALPHA becomes inconclusive, with the reason."""
    from statsmodels.stats.multitest import multipletests

    if method not in ADJUSTMENTS:
        raise ConfigError(f"verdicts.adjustment: {method!r} is not one of {', '.join(ADJUSTMENTS)}")
    column, words, level_at = ADJUSTMENTS[method]
    out = df.copy()
    family = in_family(out) & out["outcome"].ne("not judged") & pd.to_numeric(out["p_value"], errors="coerce").notna()
    if family.any():
        p = out.loc[family, "p_value"].astype(float).to_numpy()
        out.loc[family, "p_holm"] = multipletests(p, method="holm")[1]
        out.loc[family, "p_bh"] = multipletests(p, method="fdr_bh")[1]
    size = int(family.sum())
    rank = out.loc[family, "p_value"].astype(float).rank(method="first")
    for i in out.index[family]:
        r = out.loc[i]
        if r["outcome"] in ("agrees", "disagrees") and r[column] >= ALPHA:
            level = level_at(rank[i], size)  # the adjustment's threshold at this claim's rank
            out.loc[i, "outcome"] = "inconclusive"
            # the seeds at which the estimate's distance from the null its p tests against is detected at that level
            target = abs(float(r.get("difference", math.nan)) - float(r.get("p_null", math.nan)))
            target = target if target == target else float(r.get("effect_target", math.nan))
            seeds = seeds_for(float(r.get("sd", math.nan)), str(r.get("design")), target, level)
            if seeds == seeds:  # a rate keeps the seeds of its own power calculation
                out.loc[i, "seeds_needed"] = seeds
            out.loc[i, "reason"] = (
                f"{r['reason']}, but not after {words} across {size} document claims "
                f"(p = {r['p_value']:.3g}, adjusted {r[column]:.3g}; the seeds needed are for "
                f"the level {level:.2g} at this claim's rank)"
            )
    return out


def in_family(claims: pd.DataFrame) -> pd.Series:
    """The document family: document claims on the document's own design (a secondary line, a design the testbed
    adjusted so that its failure appears, is shown but not counted)."""
    line = claims["line"].fillna("primary").astype(str) if "line" in claims else pd.Series("primary", claims.index)
    return claims["kind"].eq("document") & line.ne("secondary")


def judge_all(cfg: dict, tables: Mapping[str, pd.DataFrame], path: Path | None = None) -> pd.DataFrame:
    """claims.csv: every declared claim judged, with the family's adjusted p-values."""
    rows = [r for spec in load(cfg, tables, path) if (r := judge_claim(spec, tables, cfg)) is not None]
    return adjust(pd.DataFrame(rows, columns=COLUMNS + EXTRA), adjustment(cfg))


def adjustment(cfg: dict) -> str:
    """The adjustment that decides the document family (config `verdicts.adjustment`)."""
    return (cfg.get("verdicts") or {}).get("adjustment", "bh")


# ----------------------------------------------------------------------------- views
def section_rows(claims: pd.DataFrame, section: str, part: str | None = None) -> pd.DataFrame:
    """A report section's verdicts (setup checks included: the template shows them apart)."""
    if claims is None or claims.empty:
        return pd.DataFrame(columns=COLUMNS + EXTRA)
    sel = claims["section"].astype(str).eq(section)
    if part is not None:
        sel &= claims["part"].astype(str).eq(part)
    return claims[sel]


def counts(claims: pd.DataFrame) -> pd.DataFrame:
    """Outcomes by kind of claim: the report's totals are these counts."""
    if claims is None or claims.empty:
        return pd.DataFrame(columns=["kind", "agrees", "disagrees", "inconclusive", "not judged", "total"])
    t = pd.crosstab(claims["kind"], claims["outcome"]).reindex(
        columns=["agrees", "disagrees", "inconclusive", "not judged"], fill_value=0
    )
    t["total"] = t.sum(axis=1)
    return t.reindex([k for k in KINDS if k in t.index]).reset_index()


def listing(cfg: dict, judged: Path | None = None, kind: str | None = None) -> pd.DataFrame:
    """id, kind, source and statement of every declared claim; with a claims.csv, what the document
    expects (an equivalence or non-inferiority margin included), the outcome, difference, interval, n
    and the seeds an inconclusive claim would need (a claim expanded over table values is listed once per value judged).
    """
    if judged is not None:
        df = pd.read_csv(judged)
        cols = [
            "claim_id",
            "kind",
            "source",
            "statement",
            "expected",
            "outcome",
            "difference",
            "ci_low",
            "ci_high",
            "n",
            "seeds_needed",
        ]
        out = df[[c for c in cols if c in df]]
    else:
        rows = [
            {
                "claim_id": d.get("id", "?"),
                "kind": d.get("kind", "user"),
                "source": d.get("source", ""),
                "statement": d.get("statement", ""),
            }
            for decl, _ in declarations(cfg)
            for d in expand(decl, None, cfg)
        ]
        out = pd.DataFrame(rows, columns=["claim_id", "kind", "source", "statement"])
    return out[out["kind"] == kind] if kind else out
