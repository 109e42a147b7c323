"""Analyses beyond the documents as pure, torch-free functions: pass@k, carries, the
entropy-performance law, the gradient noise scale.

- ``pass_at_k``: the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language
  Models Trained on Code", arXiv 2107.03374) from n samples of which c are correct;
- ``carries``: the number of carries of a + b, a known measure of an addition's difficulty;
- ``carry_means``: a policy's token entropy at the digits a carry enters and at the others, from the
  per-position means a run's carry probe wrote (mathrl.engine.carry_probe; the token-selection study);
- ``fit_entropy_law``: R = -a exp(H) + b (Cui et al. 2025, arXiv 2505.22617) by
  scipy.optimize.curve_fit, with R², the predicted ceiling b - a (at H = 0) and the error of a
  fit on the first half of a run predicting its second half;
- ``noise_scale``: McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training",
  arXiv 1812.06162), the simple noise scale tr(Σ)/|G|² from squared gradient norms
  measured at two batch sizes.
"""

from __future__ import annotations

import math

import numpy as np


def pass_at_k(n, c, k: int) -> np.ndarray:
    """Unbiased pass@k per problem: ``1 - C(n - c, k) / C(n, k)``, the chance that k of the n
    samples drawn without replacement hold a correct one. n, c arrays (or scalars) of samples
    and correct samples; k <= n. Computed as ``1 - prod_{i=n-c+1..n} (1 - k / i)`` (Chen et
    al.'s stable form); 1 where fewer than k samples are wrong."""
    n, c = np.broadcast_arrays(np.asarray(n, dtype=int), np.asarray(c, dtype=int))
    if np.any(k > n) or k < 1:
        raise ValueError(f"pass@k needs 1 <= k <= n; got k={k}, n up to {int(n.max())}")
    out = np.empty(n.shape, dtype=float)
    for i, (ni, ci) in enumerate(zip(n.ravel(), c.ravel())):
        out.flat[i] = 1.0 if ni - ci < k else 1.0 - float(np.prod(1.0 - k / np.arange(ni - ci + 1, ni + 1)))
    return out


def carries(a, b) -> np.ndarray:
    """Number of carries when adding a + b digit by digit (non-negative integers; arrays)."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    count, carry = np.zeros(np.broadcast(a, b).shape, dtype=int), np.zeros(np.broadcast(a, b).shape, dtype=np.int64)
    while np.any((a > 0) | (b > 0) | (carry > 0)):
        carry = ((a % 10 + b % 10 + carry) >= 10).astype(np.int64)
        count += carry
        a, b = a // 10, b // 10
    return count


def law(h, a, b):
    """The entropy-performance law: R = -a exp(H) + b."""
    return -a * np.exp(h) + b


def fit_entropy_law(entropy, reward) -> dict:
    """Fit ``R = -a exp(H) + b`` to one run's steps (entropy H, performance R as arrays).

    Returns a, b, r2 (of the fit on every step), ceiling = b - a (R at H = 0), and
    half_rmse / half_mae: the error on the second half of the steps of the fit on the first
    half. NaN where there are fewer than 4 points (per half) or H does not vary."""
    import warnings

    from scipy.optimize import OptimizeWarning, curve_fit

    h, r = np.asarray(entropy, dtype=float), np.asarray(reward, dtype=float)
    keep = np.isfinite(h) & np.isfinite(r)
    h, r = h[keep], r[keep]
    out = dict.fromkeys(("a", "b", "r2", "ceiling", "half_rmse", "half_mae"), math.nan)
    out["n"] = int(len(h))

    def fit(x, y):
        if len(x) < 4 or np.ptp(x) <= 0:
            return None
        # linear in (a, b) given exp(H): least squares gives the start; curve_fit refines it
        A = np.column_stack([-np.exp(x), np.ones_like(x)])
        p0 = np.linalg.lstsq(A, y, rcond=None)[0]
        try:
            with warnings.catch_warnings():  # a perfect or degenerate fit has no covariance: not our concern
                warnings.simplefilter("ignore", OptimizeWarning)
                p, _ = curve_fit(law, x, y, p0=p0, maxfev=10000)
        except (RuntimeError, ValueError):
            return None
        return p

    p = fit(h, r)
    if p is not None:
        ss_res, ss_tot = float(np.sum((r - law(h, *p)) ** 2)), float(np.sum((r - r.mean()) ** 2))
        out.update(
            a=float(p[0]), b=float(p[1]), ceiling=float(p[1] - p[0]), r2=1 - ss_res / ss_tot if ss_tot > 0 else math.nan
        )
    half = len(h) // 2
    q = fit(h[:half], r[:half])
    if q is not None and len(h) - half >= 4:
        err = r[half:] - law(h[half:], *q)
        out.update(half_rmse=float(np.sqrt(np.mean(err**2))), half_mae=float(np.mean(np.abs(err))))
    return out


def noise_scale(small: float, big: float, sq_norm_small: float, sq_norm_big: float) -> dict:
    """McCandlish et al.'s simple noise scale from the mean squared gradient norm at two batch
    sizes (E|g_B|² = |G|² + tr(Σ)/B):

        |G|²  = (B_big |g_big|² - B_small |g_small|²) / (B_big - B_small)
        tr(Σ) = (|g_small|² - |g_big|²) / (1/B_small - 1/B_big)
        B_noise = tr(Σ) / |G|²

    Each estimate is unbiased; their ratio is not, and |G|² can come out <= 0 when noise
    dominates (B_noise is then NaN: the batches are too small to see the true gradient)."""
    if not small < big:
        raise ValueError(f"noise scale needs two batch sizes small < big, got {small} and {big}")
    g2 = (big * sq_norm_big - small * sq_norm_small) / (big - small)
    tr = (sq_norm_small - sq_norm_big) / (1 / small - 1 / big)
    return {"grad_sq": g2, "trace_sigma": tr, "noise_scale": tr / g2 if g2 > 0 else math.nan}


def carry_means(rows) -> dict:
    """entropy_carry and entropy_nocarry: over the positions where both kinds occur, the mean (each position weighing
    the same) of the mean entropy of the digit tokens a carry enters, and of the others; carry_gap, their difference,
    the mean within-position difference. `rows`: one policy's mean entropy per position and carry (position, carry,
    entropy: carry_probe.csv's rows, `mathrl.engine.carry_probe.carry_entropy`). Weighing positions equally keeps the
    share of
    carries at each position (which differs from one position to the next, as does entropy) out of the comparison."""
    by = {(int(r["position"]), _flag(r["carry"])): float(r["entropy"]) for r in _records(rows)}
    both = sorted(p for p, flag in by if flag and (p, False) in by)
    if not both:
        return {"entropy_carry": math.nan, "entropy_nocarry": math.nan, "carry_gap": math.nan}
    on = sum(by[(p, True)] for p in both) / len(both)
    off = sum(by[(p, False)] for p in both) / len(both)
    return {"entropy_carry": on, "entropy_nocarry": off, "carry_gap": on - off}


def _records(rows) -> list[dict]:
    return rows.to_dict("records") if hasattr(rows, "to_dict") else list(rows)


def _flag(value) -> bool:
    """A carry flag as written (True, False) or read back from CSV (a bool, or the text True/False)."""
    return value if isinstance(value, bool) else str(value).strip().lower() == "true"
