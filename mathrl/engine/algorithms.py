"""The RL algorithms by name: advantage estimators as pure functions in a registry.

In the spirit of verl's `core_algos.py`: `train.algorithm` names an estimator here, and
the trainer looks it up and calls it; no other line of the trainer depends on which
algorithm runs. An estimator takes the step's `AdvantageInputs` and returns per-token
advantages (B, T), 0 outside the mask, and the value targets (B, T) if it trains a critic
(else None). Its registration says what it needs from the trainer:

- `critic=True`: a value head on the policy; `inputs.values` holds the rollout's values
  and the returned targets train it (PPO);
- `baseline=True`: `inputs.baseline` holds the moving-average baseline, which the trainer
  updates with this batch's mean reward just before the call (REINFORCE).

Losses, KL estimators and the aggregation of per-token terms are pure functions in
`mathrl.engine.losses`, which these estimators are built from.

Adding an algorithm: a function here under `@estimator("name")`, and the name in the
schema's `&algorithms` list (config/config.schema.yaml; a test checks the two agree).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from mathrl.engine.losses import baseline_advantages, gae_advantages, group_advantages, normalize, rloo_advantages
from mathrl.pipeline.registry import Registry


@dataclass(frozen=True)
class AdvantageInputs:
    """What an estimator may read. Shapes: B rollouts, T answer tokens."""

    rewards: torch.Tensor  # (B,) one per rollout; groups of group_size consecutive rows share a prompt
    mask: torch.Tensor  # (B, T) 1.0 on answer tokens up to and including the end token
    group_size: int
    values: torch.Tensor | None = None  # (B, T) the rollout's values (critic estimators only)
    baseline: float = math.nan  # the moving-average baseline (baseline estimators only)
    gamma: float = 1.0  # discount over answer tokens (GAE)
    lam: float = 1.0  # GAE lambda
    # (x, weight) -> weighted mean and population std over the GLOBAL batch (every rank's
    # entries); the trainer passes distributed.all_mean_std. Batch-scaled estimators use it.
    mean_std: Callable[[torch.Tensor, torch.Tensor], tuple[float, float]] | None = None
    token_rewards: torch.Tensor | None = (
        None  # (B, T) per-token rewards a critic estimator uses instead (reward_placement)
    )

    def batch_mean_std(self, x: torch.Tensor, weight: torch.Tensor) -> tuple[float, float]:
        if self.mean_std is not None:
            return self.mean_std(x, weight)
        mean = float((x * weight).sum() / weight.sum())
        return mean, math.sqrt(max(float((x * x * weight).sum() / weight.sum()) - mean * mean, 0.0))


Advantages = tuple[torch.Tensor, torch.Tensor | None]  # (advantages (B, T), value targets (B, T) or None)


@dataclass(frozen=True)
class Estimator:
    name: str
    fn: Callable[[AdvantageInputs], Advantages]
    critic: bool = False
    baseline: bool = False
    grouped: bool = False  # compares the rollouts of one prompt: needs group_size >= 2


ESTIMATORS: Registry[Estimator] = Registry("algorithm", "advantage estimator")
get_estimator = ESTIMATORS.lookup


def estimator(name: str, *, critic: bool = False, baseline: bool = False, grouped: bool = False):
    """Register the decorated function as the advantage estimator `name`."""

    def register(fn: Callable[[AdvantageInputs], Advantages]):
        ESTIMATORS.add(name, Estimator(name, fn, critic=critic, baseline=baseline, grouped=grouped))
        return fn

    return register


def per_token(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A per-sequence advantage (B,) on every answer token: (B, T), 0 outside the mask."""
    return advantages[:, None] * mask


@estimator("reinforce", baseline=True)
def reinforce(x: AdvantageInputs) -> Advantages:
    """REINFORCE: A = r - b, b the moving average of past batches' mean rewards."""
    return per_token(baseline_advantages(x.rewards, x.baseline), x.mask), None


@estimator("reinforce_no_baseline")
def reinforce_no_baseline(x: AdvantageInputs) -> Advantages:
    """REINFORCE without a baseline: A = r, every rollout pushed by its raw reward (the system document's
    moving-average baseline left out: the control that shows what the baseline does)."""
    return per_token(x.rewards, x.mask), None


@estimator("grpo", grouped=True)
def grpo(x: AdvantageInputs) -> Advantages:
    """GRPO: each reward against its group, A = (r - mean_g) / (std_g + eps)."""
    return per_token(group_advantages(x.rewards, x.group_size), x.mask), None


# DAPO's advantage is GRPO's; what makes it DAPO is its preset (config: algorithms.dapo):
# clip-higher, dynamic sampling, token-level loss.
estimator("dapo", grouped=True)(grpo)


@estimator("dr_grpo", grouped=True)
def dr_grpo(x: AdvantageInputs) -> Advantages:
    """Dr. GRPO (Liu et al. 2025, arXiv 2503.20783): A = r - mean_g, GRPO without the division
    by the group's std, which up-weights groups that are nearly all right or all wrong.
    (Its other half, no per-sequence length normalisation, is `loss_agg: token`.)"""
    return per_token(group_advantages(x.rewards, x.group_size, scale=False), x.mask), None


# Advantage scaling, the four ways practitioners use: by the group's std (grpo),
# none (dr_grpo), by the batch's std (grpo_batch_std) and REINFORCE++ with a group baseline
# then whitening over the batch (reinforce_pp_baseline). With binary rewards the group std is
# sqrt(p(1-p)) of the prompt's success rate p, so only the first up-weights prompts that are
# nearly always or nearly never solved.


@estimator("grpo_batch_std", grouped=True)
def grpo_batch_std(x: AdvantageInputs) -> Advantages:
    """GRPO's group-mean baseline scaled by the whole batch's reward std (TRL's
    ``scale_rewards="batch"``): A = (r - mean_g) / (std_batch + eps). Every group keeps its
    relative weight; only the overall scale is normalised."""
    _, std = x.batch_mean_std(x.rewards, torch.ones_like(x.rewards))
    return per_token(group_advantages(x.rewards, x.group_size, scale=False) / (std + 1e-6), x.mask), None


@estimator("reinforce_pp_baseline", grouped=True)
def reinforce_pp_baseline(x: AdvantageInputs) -> Advantages:
    """REINFORCE++ with a baseline (Hu et al. 2025, arXiv 2501.03262; verl's
    ``reinforce_plus_plus_baseline``): r - mean_g on every answer token, then whitened over all
    answer tokens of the batch, A = (c - mean) / (std + eps)."""
    centred = per_token(group_advantages(x.rewards, x.group_size, scale=False), x.mask)
    mean, std = x.batch_mean_std(centred, x.mask.to(centred.dtype))
    return normalize(centred, mean, std, eps=1e-6, mask=x.mask), None


@estimator("rloo", grouped=True)
def rloo(x: AdvantageInputs) -> Advantages:
    """RLOO: A_i = r_i - mean of the other G-1 rewards of the group."""
    return per_token(rloo_advantages(x.rewards, x.group_size), x.mask), None


@estimator("ppo", critic=True)
def ppo(x: AdvantageInputs) -> Advantages:
    """PPO: GAE over the answer tokens from the critic's values; returns are its targets.
    The per-token rewards, where given, replace the sequence reward at the last token."""
    if x.values is None:
        raise ValueError("ppo: the advantage needs the rollout's values (a critic)")
    rewards = x.rewards if x.token_rewards is None else x.token_rewards
    return gae_advantages(rewards, x.values, x.mask, gamma=x.gamma, lam=x.lam)
