"""Which answer tokens the policy gradient trains on, chosen by their entropy (arXiv 2506.01939).

`train.token_selection` names a rule here, which the trainer looks up once; no line of the
trainer depends on which rule runs. A rule is a pure function of the batch's per-token entropy
(B, T) under the sampling policy at the rollout (the sampler's logits at temperature 1, before any
top-k or top-p truncation; detached), its answer mask (B, T) and
`train.token_fraction`; it returns the selected answer tokens, (B, T) bool, or None where it
selects every answer token (then the loss is exactly the unselected code path's).

- `all`: every answer token (None: the policy loss is untouched);
- `top_entropy`: the round(fraction × n) answer tokens of highest entropy among the batch's n
  (half up); ties go to the earlier token in row-major order, so the choice is deterministic;
- `bottom_entropy`: the answer tokens `top_entropy` leaves out.

`selection_weight` turns a selection into the per-token weight on the policy-gradient term:
selected / (share of answer tokens selected), 0 elsewhere. With `loss_agg: token`, whose divisor
is the number of answer tokens, the policy-gradient term is then the mean over the selected
tokens (the paper's normalisation); with `loss_agg: sequence` it is each sequence's selected
tokens, scaled by the same batch-wide factor. The KL and entropy terms keep every answer token.

The selection is over this rank's batch (the whole batch on one process).

Also here: `carry_in`, which answer digits of reversed addition a carry enters, for the study of
entropy by answer position (mathrl.analysis.studies.high_entropy_tokens).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from mathrl.pipeline.registry import Registry

TokenSelectionFn = Callable[[torch.Tensor, torch.Tensor, float], "torch.Tensor | None"]
TOKEN_SELECTIONS: Registry[TokenSelectionFn] = Registry("token_selection", "token selection")
token_selection = TOKEN_SELECTIONS.register  # @token_selection(name): register the decorated function as `name`
get_token_selection = TOKEN_SELECTIONS.lookup


def check_fraction(fraction: float) -> float:
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"token_fraction: {fraction!r} is not allowed; allowed: a number strictly between 0 and 1")
    return fraction


def highest_entropy(entropy: torch.Tensor, mask: torch.Tensor, fraction: float) -> torch.Tensor:
    """(B, T) bool: the round(fraction × n) answer tokens (mask > 0) of highest entropy, n the answer tokens;
    among equal entropies the earlier token in row-major order wins."""
    check_fraction(fraction)
    flat_h, answer = entropy.detach().flatten(), mask.flatten() > 0
    where = torch.nonzero(answer).squeeze(1)  # row-major order
    k = math.floor(fraction * len(where) + 0.5)
    order = torch.sort(-flat_h[where].double(), stable=True).indices  # descending; stable: ties keep row-major order
    chosen = torch.zeros_like(answer)
    chosen[where[order[:k]]] = True
    return chosen.view(mask.shape)


@token_selection("all")
def all_tokens(entropy: torch.Tensor, mask: torch.Tensor, fraction: float) -> None:
    """Every answer token: no selection."""
    return None


all_tokens.reads_entropy = False  # the trainer need not compute the sampler's entropy for it


def reads_entropy(rule: TokenSelectionFn) -> bool:
    """Whether a rule reads the per-token entropy (every rule does unless it says otherwise)."""
    return getattr(rule, "reads_entropy", True)


@token_selection("top_entropy")
def top_entropy(entropy: torch.Tensor, mask: torch.Tensor, fraction: float) -> torch.Tensor:
    """The `fraction` of answer tokens of highest entropy (the paper's 'forking' tokens)."""
    return highest_entropy(entropy, mask, fraction)


@token_selection("bottom_entropy")
def bottom_entropy(entropy: torch.Tensor, mask: torch.Tensor, fraction: float) -> torch.Tensor:
    """The answer tokens top_entropy leaves out (the lower 1 − fraction)."""
    return (mask > 0) & ~highest_entropy(entropy, mask, fraction)


def selection_weight(selected: torch.Tensor, mask: torch.Tensor, n_selected: float, n_answer: float) -> torch.Tensor:
    """(B, T) float: n_answer / n_selected on selected tokens, 0 elsewhere (the counts global over ranks), so that
    the token-aggregated policy-gradient term, divided by n_answer, is the mean over the selected tokens."""
    scale = n_answer / n_selected if n_selected > 0 else 0.0
    return (selected & (mask > 0)).to(mask.dtype) * scale


def carry_in(a: torch.Tensor, b: torch.Tensor, width: int) -> torch.Tensor:
    """(N, width + 1) bool: whether a carry enters each answer token of a + b written reversed (least significant
    digit first, then the end token): digit i receives a carry when the digits below it, a mod 10^i + b mod 10^i,
    reach 10^i. Digit 0 and the end token never do."""
    a, b = a.long().view(-1, 1), b.long().view(-1, 1)
    powers = 10 ** torch.arange(width, dtype=torch.long).view(1, -1)  # (1, width)
    carry = (a % powers + b % powers) >= powers  # (N, width); digit 0: 0 + 0 >= 1 is False
    return torch.cat([carry, torch.zeros(len(a), 1, dtype=torch.bool)], dim=1)
