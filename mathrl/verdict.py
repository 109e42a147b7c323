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

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
POWER = 0.80
MAX_SEEDS = 1000  # seeds_needed gives up here (an effect of about zero)
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
        return self.estimate / self.sd if self.sd > 0 else math.nan

    @property
    def finite(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    def scaled(self, factor: float) -> Estimate:
        """The same estimate in other units (a difference as a share of a baseline, say)."""
        f = float(factor)
        lo, hi = sorted((self.lo * f, self.hi * f))
        return Estimate(self.estimate * f, lo, hi, self.n, self.kind, self.n_a, self.n_b, self.sd * abs(f), self.se * abs(f), self.df)


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
    """a − b, paired by seed when both arms hold the same seeds (at least two), else Welch."""
    va, vb = _values(a), _values(b)
    if paired is None:
        paired = set(va) == set(vb) and len(va) >= 2
    return paired_difference(va, vb) if paired else unpaired_difference(va, vb)


def wilson(k: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a rate k/n (NaN for n = 0)."""
    if not n:
        return math.nan, math.nan
    ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return float(ci.low), float(ci.high)


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
    """The smallest true difference this design finds with 80% power at the 5% level (two-sided)."""
    if est.kind == "rates" or not est.se == est.se or est.df != est.df:
        return math.nan
    return _factor(est.df) * est.se


def seeds_needed(est: Estimate, target: float) -> float:
    """Seeds per arm at which an effect of size `target` would be detected with 80% power
    (the spread as measured); NaN when the spread is unknown, MAX_SEEDS + 1 past the cap."""
    if est.kind == "rates" or not (est.sd == est.sd) or not target or not math.isfinite(target):
        return math.nan
    target = abs(target)
    if est.sd == 0:
        return 2.0
    n = np.arange(2, MAX_SEEDS + 1)
    one = est.kind in ("paired", "one-sample")
    se = est.sd / np.sqrt(n) if one else est.sd * np.sqrt(2 / n)
    df = n - 1 if one else 2 * n - 2
    ok = np.nonzero((stats.t.ppf(0.5 + CONFIDENCE / 2, df) + stats.t.ppf(POWER, df)) * se <= target)[0]
    return float(n[ok[0]]) if len(ok) else float(MAX_SEEDS + 1)


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
            return "disagrees", f"the interval excludes the document's size ({side} than it)" if right else "the interval excludes the document's effect"
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
        if e is not None and e.finite:
            self.mde = minimum_detectable(e)
            if self.outcome == "inconclusive":
                target = self.claim.margin if self.claim.kind != "direction" else (
                    min(abs(x) for x in self.claim.size) if self.claim.size else abs(e.estimate))  # fmt: skip
                self.seeds = seeds_needed(e, target)

    def row(self) -> dict:
        e = self.est or Estimate(math.nan, math.nan, math.nan, 0, "")
        c = asdict(self.claim)
        return {
            "key": c["key"], "claim": c["text"], "measure": c["measure"], "expected": self.claim.expected, "unit": c["unit"],
            "outcome": self.outcome, "diff": e.estimate, "ci_low": e.lo, "ci_high": e.hi, "n": e.n, "n_a": e.n_a, "n_b": e.n_b,
            "design": e.kind, "effect_size": e.effect, "mde": self.mde, "seeds_needed": self.seeds, "reason": self.reason, "note": self.note,
            **self.extra,
        }  # fmt: skip




# ----------------------------------------------------------------------------- text
def number(x, unit: str = "num", sign: bool = True) -> str:
    """A number in a unit: pts (accuracy points from a fraction), pct (a share as %), num."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    s = "+" if sign else ""
    if unit == "pts":
        return f"{100 * x:{s}.1f} pts"
    if unit == "pct":
        return f"{100 * x:{s}.1f}%"
    return f"{x:{s}.3g}"


def sentence(r: Mapping) -> str:
    """One verdict row in words: difference, 95% interval, n, design, effect size, outcome."""
    u = r.get("unit", "num")
    if r.get("outcome") == "not judged":
        return f"Not judged: {r.get('reason', '')}."
    n = int(r["n"]) if r.get("n") == r.get("n") and r.get("n") is not None else 0
    design = {"paired": f"n={n} seeds, paired", "unpaired": f"n={int(r.get('n_a') or 0)} vs {int(r.get('n_b') or 0)} seeds, unpaired",
              "one-sample": f"n={n} runs", "rates": f"n={int(r.get('n_a') or 0)} vs {int(r.get('n_b') or 0)} runs, Wilson/Newcombe",
              "probe": f"n={n} probe"}.get(r.get("design"), f"n={n}")  # fmt: skip
    es = r.get("effect_size")
    eff = f", effect size {es:.2g}" if es is not None and es == es and math.isfinite(es) else ""
    lo, hi = r.get("ci_low"), r.get("ci_high")
    if lo is None or hi is None or lo != lo or hi != hi:  # a single probe or a deterministic check: no interval to give
        text = f"{number(r['diff'], u)} ({design}, no interval): {r['outcome']}"
    else:
        text = f"{number(r['diff'], u)}, 95% CI [{number(lo, u)}, {number(hi, u)}] ({design}{eff}): {r['outcome']}"
    text += f" ({r['reason']})" if r.get("reason") else ""
    mde = r.get("mde")
    if mde == mde and mde is not None:
        text += f". Smallest effect this design detects (80% power): {number(mde, u, sign=False)}"
    seeds = r.get("seeds_needed")
    if r.get("outcome") == "inconclusive" and seeds == seeds and seeds is not None:
        text += f"; seeds per arm to decide: {'more than ' + str(MAX_SEEDS) if seeds > MAX_SEEDS else int(seeds)}"
    return text + "."
