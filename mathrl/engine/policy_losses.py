"""The policy losses by name: what each answer token contributes to the surrogate, in a registry.

In the spirit of verl's `register_policy_loss`: `train.policy_loss` names a function here,
which the trainer looks up once and calls on every micro-batch; no line of the trainer
depends on which loss runs. A loss is a pure function of `PolicyLossInputs` returning

- the per-token loss (B, T), to which the trainer adds its KL and entropy terms before
  aggregating (per token or per sequence, `train.loss_agg`), and
- its diagnostics: metrics.csv column -> tensor, (B, T) per answer token or (B,) per
  sequence; the column is its mean over tokens (or sequences), micro-batches, PPO epochs and
  ranks. A column no loss reports is NaN.

The tensor maths lives in `mathrl.engine.losses`; the functions here read their settings and name
their diagnostics. Adding a loss: a function under `@policy_loss("name")`, and the name in
the schema's `&policy_losses` list (config/config.schema.yaml; a test checks the two agree).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from mathrl.engine.losses import (
    centred_product,
    cispo_surrogate,
    clip_cov_tokens,
    clip_sides,
    clipped_surrogate,
    covariance_penalised,
    dual_clip_surrogate,
    gspo_surrogate,
    kl_cov_tokens,
)
from mathrl.pipeline.registry import Registry
from mathrl.pipeline.settings import RunSettings


@dataclass(frozen=True)
class PolicyLossInputs:
    """What a policy loss may read. Shapes: B rollouts, T answer tokens."""

    logp: torch.Tensor  # (B, T) log-probs of the sampled tokens under the policy, with their gradient
    old_logp: torch.Tensor  # (B, T) under the rollout's policy (equal to logp, detached, without PPO epochs)
    advantages: torch.Tensor  # (B, T) 0 outside the mask
    mask: torch.Tensor  # (B, T) 1.0 on answer tokens up to and including the end token
    settings: RunSettings
    seed: int = 0  # of any random choice the loss makes; the trainer gives each micro-batch and epoch its own


Diagnostics = dict[str, torch.Tensor]
PolicyLossFn = Callable[[PolicyLossInputs], tuple[torch.Tensor, Diagnostics]]
POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy_loss", "policy loss")
policy_loss = POLICY_LOSSES.register  # @policy_loss(name): register the decorated function as the policy loss `name`
get_policy_loss = POLICY_LOSSES.lookup


# PPO's standard clip range (Schulman et al. 2017, and every framework's default): the reference a tighter clip is
# measured against (`clip_tighter_cut`).
STANDARD_CLIP_EPS = 0.2


def clip_range(s: RunSettings) -> tuple[float | None, float | None]:
    """PPO's (eps_low, eps_high): clip_eps below, clip_eps_high (clip-higher) or clip_eps above."""
    return s.clip_eps, s.clip_eps_high if s.clip_eps_high is not None else s.clip_eps


def clip_diagnostics(logp: torch.Tensor, old_logp: torch.Tensor, clipped: torch.Tensor) -> Diagnostics:
    """Tokens the clip cut (their gradient is 0), split by the bound that binds."""
    low, high = clip_sides(logp.detach(), old_logp, clipped)
    return {"clip_frac": clipped, "clip_frac_low": low, "clip_frac_high": high}


def clip_higher_freed(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, eps_low: float | None, eps_high: float | None
) -> torch.Tensor:
    """The tokens clip-higher keeps a gradient for, (B, T) bool: advantage > 0 and ratio in
    (1 + eps_low, 1 + eps_high], which a symmetric clip at eps_low would cut and the upper bound
    1 + eps_high does not. None of them where eps_high <= eps_low or either side is unclipped."""
    if eps_low is None or eps_high is None or eps_high <= eps_low:
        return torch.zeros_like(logp, dtype=torch.bool)
    ratio = torch.exp(logp.detach() - old_logp)
    return (advantages > 0) & (ratio > 1.0 + eps_low) & (ratio <= 1.0 + eps_high)


def clip_tighter_cut(
    logp: torch.Tensor, old_logp: torch.Tensor, clipped: torch.Tensor, eps: float = STANDARD_CLIP_EPS
) -> torch.Tensor:
    """The tokens a clip tighter than `eps` cuts and a clip of `eps` on both sides would not, (B, T)
    bool: cut by the run's clip (`clipped`, from the surrogate) with the ratio within [1 - eps,
    1 + eps]. What a clip epsilon of 0.1 does that PPO's standard 0.2 does not, read on the same
    tokens of the same run; none where the run's clip is at least as wide as `eps`."""
    ratio = torch.exp(logp.detach() - old_logp)
    return clipped & (ratio >= 1.0 - eps) & (ratio <= 1.0 + eps)


@policy_loss("vanilla")
def vanilla(x: PolicyLossInputs) -> tuple[torch.Tensor, Diagnostics]:
    """PPO's clipped surrogate per token (clip-higher with clip_eps_high); at ratio 1 (one
    update per batch) its gradient is REINFORCE's, -A grad log pi. `clip_higher_freed`: the
    tokens clip-higher frees (`clip_higher_freed()`; 0 under a symmetric clip); `clip_tighter_cut`:
    the tokens a clip tighter than PPO's standard cuts beyond it (`clip_tighter_cut()`)."""
    pg, clipped = clipped_surrogate(x.logp, x.old_logp, x.advantages, *clip_range(x.settings))
    freed = clip_higher_freed(x.logp, x.old_logp, x.advantages, *clip_range(x.settings))
    return pg, {
        **clip_diagnostics(x.logp, x.old_logp, clipped),
        "clip_higher_freed": freed,
        "clip_tighter_cut": clip_tighter_cut(x.logp, x.old_logp, clipped),
    }


@policy_loss("clip_cov")
def clip_cov(x: PolicyLossInputs) -> tuple[torch.Tensor, Diagnostics]:
    """Clip-Cov (arXiv 2505.22617): the surrogate with the gradient of a random cov_ratio share
    of tokens cut, among those whose log-prob/advantage covariance term lies in
    (clip_cov_lower, clip_cov_upper) and the clip left alone; `cov_frac` counts them."""
    s = x.settings
    pg, diagnostics = vanilla(x)
    cov = centred_product(x.logp, x.advantages, x.mask)
    gen = torch.Generator().manual_seed(x.seed)
    chosen = clip_cov_tokens(
        cov, x.mask, s.cov_ratio, s.clip_cov_lower, s.clip_cov_upper, gen, exclude=diagnostics["clip_frac"]
    )
    return covariance_penalised(pg, x.logp, x.old_logp, chosen, "clip_cov"), {**diagnostics, "cov_frac": chosen}


@policy_loss("kl_cov")
def kl_cov(x: PolicyLossInputs) -> tuple[torch.Tensor, Diagnostics]:
    """KL-Cov (arXiv 2505.22617): the surrogate plus kl_cov_coef |logp - old logp| on the
    cov_ratio share of tokens of largest covariance term (`cov_frac`)."""
    s = x.settings
    pg, diagnostics = vanilla(x)
    chosen = kl_cov_tokens(centred_product(x.logp, x.advantages, x.mask), x.mask, s.cov_ratio)
    pg = covariance_penalised(pg, x.logp, x.old_logp, chosen, "kl_cov", s.kl_cov_coef)
    return pg, {**diagnostics, "cov_frac": chosen}


@policy_loss("gspo")
def gspo(x: PolicyLossInputs) -> tuple[torch.Tensor, Diagnostics]:
    """GSPO (arXiv 2507.18071): the clipped surrogate on each sequence's ratio, the geometric
    mean of its tokens' ratios, clipped to (1 - gspo_clip_low, 1 + gspo_clip_high); meant with
    `loss_agg: sequence`. The clip columns count the tokens of cut sequences (a cut sequence sits
    at the lower bound when its advantage is negative); `seq_clip_frac` is the share of
    sequences the clip cut."""
    s = x.settings
    pg, clipped = gspo_surrogate(x.logp, x.old_logp, x.advantages, x.mask, s.gspo_clip_low, s.gspo_clip_high)
    low, high = clipped & (x.advantages < 0), clipped & (x.advantages > 0)
    sequences = (clipped & x.mask.bool()).any(dim=1)  # (B,)
    return pg, {"clip_frac": clipped, "clip_frac_low": low, "clip_frac_high": high, "seq_clip_frac": sequences}


@policy_loss("cispo")
def cispo(x: PolicyLossInputs) -> tuple[torch.Tensor, Diagnostics]:
    """CISPO (arXiv 2506.13585): -sg(min(ratio, 1 + cispo_clip_high)) A logp per token; meant with
    `loss_agg: token`. No token's gradient is removed, so the PPO clip columns are NaN;
    `is_clip_frac` is the share of tokens whose importance weight the bound cut."""
    pg, clipped = cispo_surrogate(x.logp, x.old_logp, x.advantages, x.settings.cispo_clip_high)
    return pg, {"is_clip_frac": clipped}


@policy_loss("dual_clip")
def dual_clip(x: PolicyLossInputs) -> tuple[torch.Tensor, Diagnostics]:
    """Dual-clip PPO: the clipped surrogate (clip_eps, clip_eps_high), bounded by clip_ratio_c * A
    for negative advantages; `dual_clip_frac` is the share of tokens that bound hit (their
    gradient is 0 too, but they are not in `clip_frac`)."""
    pg, clipped, dual = dual_clip_surrogate(
        x.logp, x.old_logp, x.advantages, *clip_range(x.settings), x.settings.clip_ratio_c
    )
    return pg, {**clip_diagnostics(x.logp, x.old_logp, clipped), "dual_clip_frac": dual}
