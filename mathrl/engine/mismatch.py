"""The rollout/trainer mismatch: how far the policy that sampled is from the policy being trained,
and the importance-sampling corrections for it.

The sampler records the log-probability of each token it sampled (`sampler_logp`); the trainer
computes the same token's log-probability under its current weights before the update
(`trainer_logp`). With no source of mismatch the two differ only by float rounding (the KV
cache and incremental decoding against the training forward). A low-precision sampler, stale
weights or truncated sampling (top-k, top-p) make them differ for real. The per-token
importance weight is ``w = exp(trainer_logp - sampler_logp)``.

Shapes: (B, T) log-probs and a (B, T) mask of the real answer tokens, as in `mathrl.engine.losses`.
Diagnostics are computed from sums (`mismatch_sums`), so micro-batches and ranks add theirs up
before `mismatch_metrics`; corrections are per-token weights, detached, that multiply the
policy-gradient term (verl's rollout correction, TRL's vLLM importance sampling).
"""

from __future__ import annotations

import math

import torch

from mathrl.pipeline.layout import MISMATCH_COLUMNS

METRICS = MISMATCH_COLUMNS  # metrics.csv's columns of this module, in this order (stated in layout)


def importance_weights(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor) -> torch.Tensor:
    """Per-token weights ``w = exp(trainer_logp - sampler_logp)`` (B, T), in float64: in the control
    w - 1 is about 1e-7, below float32's resolution near 1."""
    return torch.exp(trainer_logp.double() - sampler_logp.double())


def mismatch_sums(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sums over the masked tokens from which the mismatch diagnostics follow, float64:
    ``[n, Σ|d|, Σk3, Σw, Σw², Σs, Σt, Σst, Σs², Σt²]`` with d = t - s (t trainer, s sampler
    log-prob), k3 = exp(d) - 1 - d (KL from sampler to trainer, tokens drawn by the sampler),
    w = exp(d). The largest |d| is `mismatch_max`, a maximum, not a sum."""
    m = mask.bool()
    zero = torch.zeros((), dtype=torch.float64)
    t = torch.where(m, trainer_logp.double(), zero)
    s = torch.where(m, sampler_logp.double(), zero)
    d = t - s
    w = torch.where(m, torch.exp(d), zero)
    k3 = torch.expm1(d) - d  # 0 where masked (d = 0 there)
    return torch.stack(
        [
            m.double().sum(),
            d.abs().sum(),
            k3.sum(),
            w.sum(),
            (w * w).sum(),
            s.sum(),
            t.sum(),
            (s * t).sum(),
            (s * s).sum(),
            (t * t).sum(),
        ]
    )


def mismatch_max(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor) -> float:
    """The largest per-token |trainer_logp - sampler_logp| over the masked tokens (0 over none)."""
    d = (trainer_logp.double() - sampler_logp.double()).abs()
    return float(torch.where(mask.bool(), d, torch.zeros_like(d)).max()) if d.numel() else 0.0


def mismatch_metrics(sums) -> dict[str, float]:
    """From `mismatch_sums`: the mean |d| per token, the k3 KL, the χ² (E[w²] - 1), the effective
    sample size of w normalised to (0, 1] ((Σw)² / (n Σw²)) and the Pearson correlation of sampler
    and trainer log-probs; NaN over no tokens (correlation NaN when either log-prob is constant).
    The largest |d| is `mismatch_max`'s."""
    n, sd, sk3, sw, sw2, ss, st, sst, sss, stt = (float(v) for v in sums)
    names = ["mismatch_logp_diff_mean", "mismatch_kl_k3", "mismatch_chi2", "mismatch_ess", "mismatch_logp_corr"]
    if n <= 0:
        return dict.fromkeys(names, math.nan)
    var_s, var_t = sss / n - (ss / n) ** 2, stt / n - (st / n) ** 2
    cov = sst / n - (ss / n) * (st / n)
    corr = cov / math.sqrt(var_s * var_t) if var_s > 0 and var_t > 0 else math.nan
    ess = sw * sw / (n * sw2) if sw2 > 0 else math.nan
    return dict(zip(names, [sd / n, sk3 / n, sw2 / n - 1.0, ess, corr]))


# --------------------------------------------------------------------------- corrections


def truncated_weights(w: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance sampling (TIS): ``min(w, cap)`` per token."""
    return w.clamp(max=cap)


def token_mask_weights(w: torch.Tensor, cap: float) -> torch.Tensor:
    """Masked importance sampling: 1 where ``1/cap <= w <= cap``, else 0 (the token is dropped)."""
    return ((w >= 1.0 / cap) & (w <= cap)).to(w.dtype)


def sequence_mask_weights(
    trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor, cap: float
) -> torch.Tensor:
    """Sequence-level masking: 1 for every token of a sequence whose geometric-mean weight
    ``exp(mean_t d)`` over its masked tokens lies in [1/cap, cap], else 0; (B, T)."""
    m = mask.bool()
    d = torch.where(m, trainer_logp.double() - sampler_logp.double(), torch.zeros((), dtype=torch.float64))
    mean_d = d.sum(1, keepdim=True) / m.sum(1, keepdim=True).clamp(min=1)  # (B, 1)
    keep = mean_d.abs() <= math.log(cap)  # |log of the geometric mean| within log(cap)
    return keep.expand_as(d).double()


def correction(
    trainer_logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    mask: torch.Tensor,
    tis_cap: float | None = None,
    mis_cap: float | None = None,
    seq_mask_cap: float | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The per-token weight (B, T), detached, float32, that multiplies the policy loss: the product
    of TIS (tis_cap), token masking (mis_cap) and sequence masking (seq_mask_cap), each off when
    None; and which tokens the correction changed (float 0/1, (B, T)): capped by TIS or given
    weight 0 by a mask. (None, None) when all are off: the loss is left exactly as it is."""
    if tis_cap is None and mis_cap is None and seq_mask_cap is None:
        return None, None
    trainer_logp, sampler_logp = trainer_logp.detach(), sampler_logp.detach()
    w = importance_weights(trainer_logp, sampler_logp)
    weight = truncated_weights(w, tis_cap) if tis_cap is not None else torch.ones_like(w)
    changed = w > tis_cap if tis_cap is not None else torch.zeros_like(w, dtype=torch.bool)
    if mis_cap is not None:
        weight = weight * token_mask_weights(w, mis_cap)
    if seq_mask_cap is not None:
        weight = weight * sequence_mask_weights(trainer_logp, sampler_logp, mask, seq_mask_cap)
    changed = changed | (weight == 0)
    return weight.float(), changed.float()
