"""Verdicts on a document's claims: a measured difference, its 95% interval, n and an outcome.

Pure statistics over per-seed values (scipy.stats), then one rule that turns an interval
into one of three outcomes:

- **agrees**: the interval excludes 0 in the document's direction and, where the document
  states a size, overlaps that size;
- **disagrees**: the interval excludes the document's effect (the wrong direction, or a
  size the document states);
- **inconclusive**: anything else, with the seeds a decision would need.

A claim of "no difference" is an equivalence test within a stated margin (two one-sided
tests at 2.5% each: the 95% interval inside ±margin); "at least as good" a non-inferiority
test (the interval above −margin). Runs of two arms that share their seeds (same prompts,
same sampling noise) are compared paired by seed; otherwise Welch's unpaired interval.
Where nothing can be judged (no runs, or n < 2) the verdict is "not judged" with a reason.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

CONFIDENCE = 0.95
POWER = 0.80
MAX_SEEDS = 1000  # seeds_needed gives up here (an effect of about zero)
EXACT = 1e-9  # an interval narrower than this share of its value has zero width: every seed gave the same value
OUTCOMES = ("agrees", "disagrees", "inconclusive", "not judged")


# ----------------------------------------------------------------------------- estimates
@dataclass(frozen=True)
class Estimate:
    """A mean or a difference of means with its t interval.

    n: the pairs (paired), the values (one sample) or the smaller arm (unpaired); n_a, n_b:
    the values of each arm. sd: of the paired differences, of the values, or pooled.
    effect: Cohen's d (d_z when paired): the estimate in units of sd."""

    estimate: float
    lo: float
    hi: float
    n: int
    kind: str  # paired | unpaired | one-sample
    n_a: int = 0
    n_b: int = 0
    sd: float = math.nan
    se: float = math.nan
    df: float = math.nan

    @property
    def effect(self) -> float:
        return self.estimate / self.sd if self.sd > 0 and not self.exact else math.nan

    @property
    def finite(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    @property
    def exact(self) -> bool:
        """A zero-width interval: every seed gave the same value (or the same difference)."""
        return self.kind == "exact" or (
            self.kind != "rates" and self.finite and self.hi - self.lo <= EXACT * max(1.0, abs(self.estimate))
        )

    def as_exact(self) -> Estimate:
        """The same value, marked exact: no spread, so no effect size and no power to speak of."""
        m = self.estimate
        return Estimate(m, m, m, self.n, "exact", self.n_a, self.n_b, 0.0, 0.0, self.df)

    def scaled(self, factor: float) -> Estimate:
        """The same estimate in other units (a difference as a share of a baseline, say)."""
        f = float(factor)
        lo, hi = sorted((self.lo * f, self.hi * f))
        return Estimate(
            self.estimate * f,
            lo,
            hi,
            self.n,
            self.kind,
            self.n_a,
            self.n_b,
            self.sd * abs(f),
            self.se * abs(f),
            self.df,
        )


def _values(x) -> dict:
    """{seed: value} from a mapping or a Series (seed index), or a list (by position); NaN and None dropped."""
    items = x.items() if isinstance(x, Mapping) or hasattr(x, "items") else enumerate(x)
    out = {}
    for k, v in items:
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if not math.isnan(f):
            out[k] = f
    return out


def _t(df: float) -> float:
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, df)) if df > 0 else math.nan


def t_halfwidth(std, n):
    """Half-width of the 95% t interval of a mean from its std and n (NaN for n < 2); vectorised."""
    std, n = np.asarray(std, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(n >= 2, stats.t.ppf(0.5 + CONFIDENCE / 2, np.maximum(n - 1, 1)), np.nan)
        return t * std / np.sqrt(n)


def mean_interval(values) -> Estimate:
    """One-sample t interval of the mean (a gain from start to end, say)."""
    x = np.array(list(_values(values).values()))
    n = len(x)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, "one-sample")
    m = float(x.mean())
    if n < 2:
        return Estimate(m, math.nan, math.nan, n, "one-sample", n)
    sd = float(x.std(ddof=1))
    se = sd / math.sqrt(n)
    half = _t(n - 1) * se
    return Estimate(m, m - half, m + half, n, "one-sample", n, 0, sd, se, n - 1)


# a paired difference not taken (an arm against itself)
NO_DIFFERENCE = Estimate(math.nan, math.nan, math.nan, 0, "paired")


def estimate_columns(prefix: str, est, within: tuple = (None, None), n: bool = False, mean: str = "_mean") -> dict:
    """`{prefix}_mean` (`{prefix}{mean}`), `{prefix}_lo`, `{prefix}_hi` (and `{prefix}_n` with `n`) of an `Estimate`,
    the interval cut to `within` (lo, hi; either None)."""
    lo, hi = pd.Series([est.lo, est.hi]).clip(*within)
    out = {f"{prefix}{mean}": est.estimate, f"{prefix}_lo": lo, f"{prefix}_hi": hi}
    return {**out, f"{prefix}_n": est.n} if n else out


def fisher_z(values) -> np.ndarray:
    """Fisher's z of correlations, atanh(r) (r held just inside ±1, where it is infinite)."""
    return np.arctanh(np.clip(list(_values(values).values()), -1 + 1e-12, 1 - 1e-12))


def correlation_interval(values) -> Estimate:
    """The mean of per-seed correlations by Fisher's z: the t interval of the mean of atanh(r), mapped back by tanh
    (near ±1 a correlation's spread is lopsided; z's is nearly normal). sd and se are z's, times the slope of tanh at
    the mean (the delta method), so that power reads them on the correlation's scale."""
    z = mean_interval(fisher_z(values))
    slope = 1 - math.tanh(z.estimate) ** 2 if z.n else math.nan
    return Estimate(
        math.tanh(z.estimate),
        math.tanh(z.lo),
        math.tanh(z.hi),
        z.n,
        "one-sample",
        z.n,
        0,
        z.sd * slope,
        z.se * slope,
        z.df,
    )


def paired_difference(a, b) -> Estimate:
    """a − b over the seeds both arms have: a t interval of the per-seed differences."""
    va, vb = _values(a), _values(b)
    common = sorted(set(va) & set(vb), key=str)
    est = mean_interval({s: va[s] - vb[s] for s in common})
    return Estimate(est.estimate, est.lo, est.hi, est.n, "paired", len(va), len(vb), est.sd, est.se, est.df)


def unpaired_difference(a, b) -> Estimate:
    """a − b with Welch's t interval (arms of different seeds or sizes)."""
    xa, xb = np.array(list(_values(a).values())), np.array(list(_values(b).values()))
    na, nb = len(xa), len(xb)
    if not na or not nb:
        return Estimate(math.nan, math.nan, math.nan, min(na, nb), "unpaired", na, nb)
    d = float(xa.mean() - xb.mean())
    if na < 2 or nb < 2:
        return Estimate(d, math.nan, math.nan, min(na, nb), "unpaired", na, nb)
    va, vb = xa.var(ddof=1) / na, xb.var(ddof=1) / nb
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1)) if se > 0 else na + nb - 2
    pooled = math.sqrt(((na - 1) * xa.var(ddof=1) + (nb - 1) * xb.var(ddof=1)) / (na + nb - 2))
    half = _t(df) * se
    return Estimate(d, d - half, d + half, min(na, nb), "unpaired", na, nb, pooled, se, df)


def difference(a, b, paired: bool | None = None) -> Estimate:
    """a − b, paired by seed when one arm's seeds include the other's (at least two in common:
    an arm given extra seeds is paired on the seeds both hold), else Welch."""
    va, vb = _values(a), _values(b)
    if paired is None:
        common = set(va) & set(vb)
        paired = len(common) >= 2 and common in (set(va), set(vb))
    return paired_difference(va, vb) if paired else unpaired_difference(va, vb)


def relative_difference(a, b, paired: bool | None = None) -> Estimate:
    """(a − b) / mean of b, with a delta-method t interval that counts the baseline's own uncertainty: paired (by
    seed, as `difference` decides), the mean difference over the baseline's mean with their covariance; else the
    ratio of the two arms' means less 1, on Welch's degrees of freedom. sd: the differences' (or the pooled),
    scaled by the baseline's mean."""
    d = difference(a, b, paired)
    va, vb = _values(a), _values(b)
    if d.kind == "paired":
        keys = sorted(set(va) & set(vb), key=str)
        x, base = np.array([va[k] - vb[k] for k in keys]), np.array([vb[k] for k in keys])
    else:
        x, base = np.array(list(va.values())), np.array(list(vb.values()))
    m = float(base.mean()) if len(base) else math.nan
    if not m or m != m or not d.finite:
        return Estimate(d.estimate / m if m else math.nan, math.nan, math.nan, d.n, d.kind, d.n_a, d.n_b)
    r = d.estimate / m
    if d.kind == "paired":
        n = len(x)
        cov = float(np.cov(x, base, ddof=1)[0, 1]) / n
        var = (d.se**2 - 2 * r * cov + r**2 * base.var(ddof=1) / n) / m**2
        df = n - 1
    else:  # (mean a / mean b) − 1: the two means are independent
        ratio = float(x.mean()) / m
        parts = (x.var(ddof=1) / len(x) / m**2, ratio**2 * base.var(ddof=1) / len(base) / m**2)
        var, df = sum(parts), sum(parts) ** 2 / (parts[0] ** 2 / (len(x) - 1) + parts[1] ** 2 / (len(base) - 1))
    se = math.sqrt(max(var, 0.0))
    half = _t(df) * se
    return Estimate(r, r - half, r + half, d.n, d.kind, d.n_a, d.n_b, d.sd / abs(m), se, df)


# ----------------------------------------------------------------------------- replication
def cluster_means(values: Mapping, clusters: Mapping) -> dict:
    """{cluster: the mean of its values}: the unit of replication's own value (a warm-up's, over the RL seeds that
    started from it). A key with no cluster (None, NaN) is a cluster of its own, named ("key", key)."""
    groups: dict = {}
    for key, value in _values(values).items():
        c = clusters.get(key)
        c = ("key", key) if c is None or c != c else c
        groups.setdefault(c, []).append(value)
    return {c: float(np.mean(v)) for c, v in groups.items()}


def between_share(values: Mapping, clusters: Mapping) -> float:
    """The share of the variance of `values` that lies between clusters: the one-way random-effects ANOVA's
    intraclass correlation ICC(1) = s_b² / (s_b² + s_w²), with s_w² the mean square within clusters and
    s_b² = (MSB − MSW) / n0 (n0: the cluster size, adjusted for unequal sizes), held in [0, 1]. NaN where no cluster
    holds two values (nothing within to compare with) or there are fewer than two clusters."""
    groups: dict = {}
    for key, value in _values(values).items():
        c = clusters.get(key)
        groups.setdefault(("key", key) if c is None or c != c else c, []).append(value)
    sizes = np.array([len(g) for g in groups.values()], dtype=float)
    g, n = len(groups), float(sizes.sum())
    if g < 2 or n - g < 1 or not (sizes > 1).any():
        return math.nan
    grand = np.mean([x for v in groups.values() for x in v])
    msb = sum(len(v) * (np.mean(v) - grand) ** 2 for v in groups.values()) / (g - 1)
    msw = sum(((np.array(v) - np.mean(v)) ** 2).sum() for v in groups.values()) / (n - g)
    n0 = (n - (sizes**2).sum() / n) / (g - 1)
    s_b = max((msb - msw) / n0, 0.0)
    total = s_b + msw
    return float(s_b / total) if total > 0 else math.nan


def wilson(k: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a rate k/n (NaN for n = 0)."""
    if not n:
        return math.nan, math.nan
    return _wilson_counts(int(k), int(n))


@functools.cache
def _wilson_counts(k: int, n: int) -> tuple[float, float]:
    """`wilson` of whole counts, once per pair: the tables ask for the same few counts a thousand times, and
    binomtest computes its exact p-value, unused here, each time."""
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return float(ci.low), float(ci.high)


def wilson_columns(prefix: str, k: int, n: int) -> dict:
    """`{prefix}`, `{prefix}_lo`, `{prefix}_hi`: the rate k/n (NaN for n = 0) and its 95% Wilson interval."""
    lo, hi = wilson(k, n)
    return {prefix: k / n if n else math.nan, f"{prefix}_lo": lo, f"{prefix}_hi": hi}


def rate_difference(k_a: int, n_a: int, k_b: int, n_b: int) -> Estimate:
    """Rate a − rate b with Newcombe's hybrid score interval (built from the two Wilson intervals)."""
    if not n_a or not n_b:
        return Estimate(math.nan, math.nan, math.nan, min(n_a, n_b), "rates", n_a, n_b)
    pa, pb = k_a / n_a, k_b / n_b
    (la, ua), (lb, ub) = wilson(k_a, n_a), wilson(k_b, n_b)
    d = pa - pb
    lo = d - math.sqrt((pa - la) ** 2 + (ub - pb) ** 2)
    hi = d + math.sqrt((ua - pa) ** 2 + (pb - lb) ** 2)
    return Estimate(d, lo, hi, min(n_a, n_b), "rates", n_a, n_b)


def binomial_halfwidth(p: float, n: int) -> float:
    """The 95% half-width of an accuracy p measured on n problems (normal approximation)."""
    return float(stats.norm.ppf(0.5 + CONFIDENCE / 2) * math.sqrt(p * (1 - p) / n)) if n and 0 <= p <= 1 else math.nan


# ----------------------------------------------------------------------------- power
def _factor(df: float) -> float:
    """t(1 − α/2) + t(power) at df: the minimum detectable effect in standard errors."""
    return _t(df) + float(stats.t.ppf(POWER, df)) if df > 0 else math.nan


def minimum_detectable(est: Estimate) -> float:
    """The smallest true difference this design finds with 80% power at the 5% level (two-sided);
    NaN for rates and for exact values (no spread: nothing to detect against)."""
    if est.kind == "rates" or est.exact or not est.se == est.se or est.df != est.df:
        return math.nan
    return _factor(est.df) * est.se


def seeds_for(sd: float, design: str, target: float, alpha: float = 1 - CONFIDENCE, power: float = POWER) -> float:
    """Seeds per arm at which an effect of size `target` is detected with `power` (80%) by a
    two-sided test at level `alpha`, for a spread `sd` of the per-seed values (paired and
    one-sample: of the values or differences; unpaired: of each arm). NaN when the spread
    or the target is unknown or the design has no spread; MAX_SEEDS + 1 past the cap."""
    if (
        design not in ("paired", "one-sample", "unpaired")
        or not (sd == sd)
        or sd <= 0
        or not target
        or not math.isfinite(target)
    ):
        return math.nan
    n = np.arange(2, MAX_SEEDS + 1)
    one = design != "unpaired"
    se = sd / np.sqrt(n) if one else sd * np.sqrt(2 / n)
    df = n - 1 if one else 2 * n - 2
    ok = np.nonzero((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * se <= abs(target))[0]
    return float(n[ok[0]]) if len(ok) else float(MAX_SEEDS + 1)


def seeds_needed(est: Estimate, target: float, alpha: float = 1 - CONFIDENCE, power: float = POWER) -> float:
    """`seeds_for` the estimate's own spread and design (the spread as measured)."""
    return seeds_for(est.sd, est.kind, target, alpha, power)


def seeds_to_decide(claim: Claim, est: Estimate) -> float:
    """Seeds per arm an inconclusive claim would need: for a direction, to detect the document's
    size (else the observed difference); for a margin, to pass if the true difference is the one
    observed (how far inside the margin it lies); NaN where the observed difference lies on or beyond
    the margin, which no number of seeds would make pass."""
    if claim.kind in ("equivalence", "noninferior"):
        inside = distance_to_pass(claim, est)
        return seeds_needed(est, inside) if inside > 0 else math.nan
    return seeds_needed(est, distance_to_pass(claim, est))


def rate_seeds_needed(p_a: float, p_b: float, one_sample: bool, alpha: float = 1 - CONFIDENCE) -> float:
    """Runs per arm at which rates p_a against p_b (a fixed value when `one_sample`) differ
    significantly with 80% power (Cohen's h, statsmodels' normal power); NaN when they are equal."""
    from statsmodels.stats.power import NormalIndPower
    from statsmodels.stats.proportion import proportion_effectsize

    if not (0 <= p_a <= 1 and 0 <= p_b <= 1) or p_a == p_b:
        return math.nan
    h = abs(float(proportion_effectsize(p_a, p_b)))
    n = NormalIndPower().solve_power(effect_size=h, alpha=alpha, power=POWER, ratio=0 if one_sample else 1)
    return float(min(max(2, math.ceil(float(n))), MAX_SEEDS + 1))


def distance_to_pass(claim: Claim, est: Estimate) -> float:
    """How far the observed difference lies from the null of the claim's test: the document's
    stated size (its smallest end), else the observed difference; for a margin, how far the
    observed difference lies inside it (<= 0: the observed value would not pass at any n)."""
    if claim.kind == "equivalence":
        return claim.margin - abs(est.estimate)
    if claim.kind == "noninferior":
        return claim.direction * est.estimate + claim.margin
    return min(abs(x) for x in claim.size) if claim.size else abs(est.estimate)


def margin_reach(claim: Claim, est: Estimate) -> str:
    """For an equivalence or non-inferiority claim whose interval is wider than its margin:
    why the design cannot pass at its n (else empty)."""
    if claim.kind not in ("equivalence", "noninferior") or not est.finite or est.kind == "rates" or est.exact:
        return ""
    half = (est.hi - est.lo) / 2
    if half < claim.margin:
        return ""
    return (
        f"the design cannot pass at n={est.n}: its interval's half-width {number(half, claim.unit, sign=False)} "
        f"(from the spread measured) is not narrower than the margin {number(claim.margin, claim.unit, sign=False)}"
    )


# ----------------------------------------------------------------------------- claims
@dataclass(frozen=True)
class Claim:
    """What a document says, as a test.

    kind: "direction" (the sign of `direction`, and `size` if the document states one),
    "equivalence" (no difference within ±margin) or "noninferior" (at least as good, within
    margin, in `direction`). size: (low, high) of effects compatible with the document's
    stated size (a point size as (x, x)). unit: how numbers print (see `number`)."""

    key: str
    text: str
    measure: str
    kind: str = "direction"
    direction: int = 1
    size: tuple[float, float] | None = None
    margin: float = math.nan
    unit: str = "num"

    @property
    def expected(self) -> str:
        u = lambda x: number(x, self.unit)  # noqa: E731
        if self.kind == "equivalence":
            return f"no difference (within ±{u(self.margin).lstrip('+')})"
        if self.kind == "noninferior":
            return f"at least as good ({'above' if self.direction > 0 else 'below'} {u(-self.direction * self.margin)})"
        word = "> 0" if self.direction > 0 else "< 0"
        if self.size is None:
            return word
        lo, hi = self.size
        return f"{word}, about {u(lo)}" if lo == hi else f"{word}, {u(lo)} to {u(hi)}"


def judge(claim: Claim, est: Estimate | None) -> tuple[str, str]:
    """(outcome, reason) of one claim against one interval."""
    if est is None or est.n == 0 or est.estimate != est.estimate:
        return "not judged", "no runs with a result"
    if not est.finite:
        return "not judged", f"n={est.n}: an interval needs at least two values per arm"
    lo, hi = est.lo, est.hi
    if claim.kind == "equivalence":
        m = claim.margin
        if -m < lo and hi < m:
            return "agrees", f"the interval lies within ±{number(m, claim.unit).lstrip('+')}"
        if lo > m or hi < -m:
            return "disagrees", f"the interval lies outside ±{number(m, claim.unit).lstrip('+')}"
        return "inconclusive", "the interval reaches beyond the equivalence margin"
    if claim.kind == "noninferior":
        m, d = claim.margin, claim.direction
        worst, best = (lo, hi) if d > 0 else (-hi, -lo)
        if worst > -m:
            return "agrees", "the interval excludes a loss larger than the margin"
        if best < -m:
            return "disagrees", "the interval lies entirely beyond the margin, on the losing side"
        return "inconclusive", "the interval includes both no loss and a loss beyond the margin"
    right = lo > 0 if claim.direction > 0 else hi < 0
    wrong = hi < 0 if claim.direction > 0 else lo > 0
    if claim.size is not None:
        slo, shi = claim.size
        if hi < slo or lo > shi:
            side = "smaller" if (hi < slo if claim.direction > 0 else lo > shi) else "larger"
            return (
                "disagrees",
                (
                    f"the interval excludes the document's size ({side} than it)"
                    if right
                    else "the interval excludes the document's effect"
                ),
            )
        if right:
            return "agrees", "the interval excludes 0 in the document's direction and includes its size"
        return "inconclusive", "the interval includes 0"
    if right:
        return "agrees", "the interval excludes 0 in the document's direction"
    if wrong:
        return "disagrees", "the interval excludes 0 on the other side"
    return "inconclusive", "the interval includes 0"


@dataclass
class Verdict:
    """A claim, the measurement and the outcome; a row of a study's verdicts table."""

    claim: Claim
    est: Estimate | None
    outcome: str = ""
    reason: str = ""
    note: str = ""  # what the reader should know beside the numbers (a ceiling, a mechanism that did not engage)
    mde: float = math.nan
    seeds: float = math.nan
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.outcome:
            self.outcome, self.reason = judge(self.claim, self.est)
        e = self.est
        if e is None or not e.finite:
            return
        self.mde = minimum_detectable(e)
        if e.exact and self.outcome == "inconclusive":
            self.reason = "every seed gave the same value, so more seeds would not change the interval"
        reach = margin_reach(self.claim, e)
        if reach and self.outcome == "inconclusive":
            self.reason = f"{self.reason}; {reach}"
        if self.outcome == "inconclusive":
            self.seeds = max(seeds_to_decide(self.claim, e), e.n + 1)  # NaN stays NaN; these n did not decide
            margin = self.claim.kind in ("equivalence", "noninferior")
            if margin and self.seeds == self.seeds:
                self.reason += (
                    f"; about {seeds_text(self.seeds)} seeds per arm would let it pass if the true "
                    "difference is the one observed"
                )
            elif margin and e.kind != "rates":
                self.reason += "; the difference observed lies beyond the margin: at it no number of seeds would pass"

    def row(self) -> dict:
        e = self.est or Estimate(math.nan, math.nan, math.nan, 0, "")
        c = asdict(self.claim)
        return {
            "key": c["key"],
            "claim": c["text"],
            "measure": c["measure"],
            "expected": self.claim.expected,
            "unit": c["unit"],
            "margin": c["margin"],
            "sd": e.sd,
            "outcome": self.outcome,
            "diff": e.estimate,
            "ci_low": e.lo,
            "ci_high": e.hi,
            "n": e.n,
            "n_a": e.n_a,
            "n_b": e.n_b,
            "design": e.kind,
            "effect_size": e.effect,
            "mde": self.mde,
            "seeds_needed": self.seeds,
            "reason": self.reason,
            "note": self.note,
            **self.extra,
        }


# ----------------------------------------------------------------------------- text
def seeds_text(seeds: float) -> str:
    return f"more than {MAX_SEEDS}" if seeds > MAX_SEEDS else str(int(seeds))


def number(x, unit: str = "num", sign: bool = True) -> str:
    """A number in a unit: pts (points: a difference of two shares, such as accuracies, times 100), pct (a share, or a
    relative change, as %), num."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    s = "+" if sign else ""
    if unit == "pts":
        return f"{100 * x:{s}.1f} pts"
    if unit == "pct":
        return f"{100 * x:{s}.1f}%"
    return f"{x:{s}.3g}"


def interval_numbers(x, lo, hi, unit: str = "num", sign: bool = True) -> tuple[str, str, str]:
    """An estimate and its interval's ends at one precision. pts and pct are `number`'s; num keeps the
    decimals that give the interval's half-width two significant figures (0.986 [0.980, 0.990], not
    0.986 [0.98, 0.99]), and `number`'s three significant figures where the interval has no width or
    the numbers are too large or small for fixed decimals."""
    values = (x, lo, hi)
    if unit == "num" and all(v is not None and math.isfinite(v) for v in values) and hi > lo:
        decimals = 1 - math.floor(math.log10((hi - lo) / 2))
        if 0 <= decimals <= 6 and 1e-3 <= max(abs(v) for v in values) < 1e5:
            return tuple(f"{v:{'+' if sign else ''}.{decimals}f}" for v in values)  # type: ignore[return-value]
    return tuple(number(v, unit, sign) for v in values)  # type: ignore[return-value]


def rates_design(n_a: int, n_b: int) -> str:
    """The n of a rate verdict: one rate against a threshold (no second arm, Wilson) or two rates (Newcombe)."""
    return f"n={n_a} runs, Wilson" if n_b == 0 else f"n={n_a} vs {n_b} runs, Wilson/Newcombe"


def sentence(r: Mapping) -> str:
    """One verdict row in words: difference, 95% interval, n, design, effect size, outcome."""
    u = r.get("unit", "num")
    if r.get("outcome") == "not judged":
        return f"Not judged: {r.get('reason', '')}."
    n = int(r["n"]) if r.get("n") == r.get("n") and r.get("n") is not None else 0
    design = {
        "paired": f"n={n} seeds, paired",
        "unpaired": f"n={int(r.get('n_a') or 0)} vs {int(r.get('n_b') or 0)} seeds, unpaired",
        "one-sample": f"n={n} runs",
        "rates": rates_design(int(r.get("n_a") or 0), int(r.get("n_b") or 0)),
        "probe": f"n={n} probe",
        "exact": f"n={n} seeds, every one the same",
    }.get(r.get("design"), f"n={n}")
    es = r.get("effect_size")
    eff = f", effect size {es:.2g}" if es is not None and es == es and math.isfinite(es) else ""
    lo, hi = r.get("ci_low"), r.get("ci_high")
    if r.get("design") == "exact":  # a zero-width interval: the value itself, without a spread to size an effect by
        text = f"{number(r['diff'], u)} exactly ({design}, a zero-width interval): {r['outcome']}"
    elif (
        lo is None or hi is None or lo != lo or hi != hi
    ):  # a single probe or a deterministic check: no interval to give
        text = f"{number(r['diff'], u)} ({design}, no interval): {r['outcome']}"
    else:
        x, lo, hi = interval_numbers(r["diff"], lo, hi, u)
        text = f"{x}, 95% CI [{lo}, {hi}] ({design}{eff}): {r['outcome']}"
    text += f" ({r['reason']})" if r.get("reason") else ""
    mde = r.get("mde")
    if mde == mde and mde is not None:
        text += f". Smallest effect this design detects (80% power): {number(mde, u, sign=False)}"
    seeds = r.get("seeds_needed")
    if r.get("outcome") == "inconclusive" and seeds == seeds and seeds is not None:
        text += f"; seeds per arm to decide: {seeds_text(seeds)}"
    return text + "."
