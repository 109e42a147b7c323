"""Reward functions over generated answer tokens, vectorised over the batch.

Every function takes ``generated`` and ``target``, both (B, W+1) token tensors in the
layout of ``mathrl.engine.tasks`` (W digits, then ``$``); ``target`` comes from
``Task.encode_answers``, so rewards and evaluation cannot drift from the encoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mathrl.engine.tasks import END

REWARD_KINDS = ("exact", "signed", "shaped", "shaped_penalty", "proxy", "random")


def _check_kind(kind: str) -> None:
    if kind not in REWARD_KINDS:
        raise ValueError(f"reward kind {kind!r} is unknown; allowed: {', '.join(REWARD_KINDS)}")


@dataclass(frozen=True)
class RewardSpec:
    """Which reward the trainer optimises, and its weights.

    Kinds: ``exact`` is 1 for an exactly right answer, else 0 (the documents' reward).
    ``signed`` is +1 for an exactly right answer and -1 otherwise (the collapse analysis's
    "success +1, failure -1": below half right, most rewards are the same negative value).
    ``shaped`` = exact + format_bonus * format_ok + digit_weight * digit_frac: dense
    credit for a well-formed answer and for each right digit. ``shaped_penalty`` is
    shaped minus invalid_penalty for malformed output (garbage, no end token).
    ``proxy`` is a deliberately exploitable learned-reward stand-in for the
    reward-hacking study: format_ok * (proxy_correct_weight * digit_frac +
    proxy_bias_weight * mean_digit / 9). It "believes" big digits look right, so the
    well-formed all-9s answer earns at least proxy_bias_weight (0.7) on every problem,
    more than any correct answer whose mean digit is below about 5, while its exact-match
    reward is 0: a policy can climb this reward while its accuracy falls.
    ``random`` is a negative control: 1 with probability 0.5, independent of the answer, from
    uniform numbers the caller draws from a seeded generator (``coins``), so a run that
    resumes draws the same rewards. Whatever a policy learns from it is not the task.
    """

    kind: str = "exact"
    """one of REWARD_KINDS"""
    format_bonus: float = 0.1
    """shaped kinds: reward for a well-formed answer (W digits then ``$``)"""
    digit_weight: float = 0.5
    """shaped kinds: reward for the share of answer digits in the right place"""
    invalid_penalty: float = 0.5
    """shaped_penalty: subtracted when the answer is malformed"""
    proxy_correct_weight: float = 0.3
    """proxy: weight of the share of right digits (the part that tracks correctness)"""
    proxy_bias_weight: float = 0.7
    """proxy: weight of the mean digit value / 9 (the exploitable bias)"""
    offset: float = 0.0
    """added to every reward: rewards on a scale whose common part dwarfs what tells answers apart"""

    def __post_init__(self):
        _check_kind(self.kind)


def answer_checks(generated: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-answer float checks (B,): ``exact`` (every token, ``$`` included, matches),
    ``format_ok`` (W digits then ``$``), ``digit_frac`` (share of the W digit positions
    equal to the target) and ``invalid`` (1 - format_ok)."""
    if generated.shape != target.shape or generated.dim() != 2:
        raise ValueError(f"generated {tuple(generated.shape)} and target {tuple(target.shape)} must both be (B, W+1)")
    W = generated.shape[1] - 1
    digits = generated[:, :W]  # (B, W)
    is_digit = (digits >= 0) & (digits <= 9)  # (B, W)
    format_ok = (is_digit.all(1) & (generated[:, W] == END)).float()  # (B,)
    return {
        "exact": (generated == target).all(1).float(),  # (B,)
        "format_ok": format_ok,
        "digit_frac": (digits == target[:, :W]).float().mean(1),  # (B,)
        "invalid": 1.0 - format_ok,
    }


def compute_rewards(spec: RewardSpec, generated: torch.Tensor, target: torch.Tensor, coins: torch.Tensor | None = None):
    """The training reward (B,) of kind ``spec.kind``, and the ``answer_checks`` dict
    (the trainer logs accuracy from ``checks["exact"]`` whatever reward it trains on).
    ``coins`` (B,), uniform in [0, 1): the random reward's draws (1 where below 0.5); other kinds ignore it."""
    _check_kind(spec.kind)
    checks = answer_checks(generated, target)
    exact, format_ok, digit_frac = checks["exact"], checks["format_ok"], checks["digit_frac"]
    shaped = exact + spec.format_bonus * format_ok + spec.digit_weight * digit_frac  # (B,)
    if spec.kind == "exact":
        reward = exact
    elif spec.kind == "signed":
        reward = 2 * exact - 1
    elif spec.kind == "shaped":
        reward = shaped
    elif spec.kind == "shaped_penalty":
        reward = shaped - spec.invalid_penalty * checks["invalid"]
    elif spec.kind == "random":
        if coins is None or coins.shape != exact.shape:
            raise ValueError(
                f"the random reward needs coins of shape {tuple(exact.shape)}, "
                f"got {None if coins is None else tuple(coins.shape)}"
            )
        reward = (coins < 0.5).float()  # (B,)
    else:  # proxy
        W = generated.shape[1] - 1
        # clamp keeps non-digit tokens finite; format_ok zeroes those rows anyway
        mean_digit = generated[:, :W].clamp(0, 9).float().mean(1)  # (B,)
        looks_right = spec.proxy_correct_weight * digit_frac + spec.proxy_bias_weight * mean_digit / 9
        reward = format_ok * looks_right
    return reward + spec.offset if spec.offset else reward, checks


def token_rewards(generated: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A dense per-token signal for a critic: (B, W+1) -> (B, W+1), ``1 / (W+1)`` on each
    answer token (digit or ``$``) equal to the target's token there, else 0. Summed over the
    answer it is the share of tokens right; from a token on, the share still to be got right."""
    if generated.shape != target.shape or generated.dim() != 2:
        raise ValueError(f"generated {tuple(generated.shape)} and target {tuple(target.shape)} must both be (B, W+1)")
    return (generated == target).float() / generated.shape[1]
