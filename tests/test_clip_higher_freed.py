"""The tokens clip-higher frees: positive advantage, ratio between 1 + eps_low and 1 + eps_high."""

import math
from types import SimpleNamespace

import torch

from mathrl.engine.policy_losses import PolicyLossInputs, clip_higher_freed, vanilla


def _case():
    # ratios 1.0, 1.1, 1.25, 1.3 and 0.7 on a row of positive advantage, the same on a row of negative advantage
    ratios = torch.tensor([[1.0, 1.1, 1.25, 1.3, 0.7], [1.0, 1.1, 1.25, 1.3, 0.7]])
    old = torch.zeros_like(ratios)
    adv = torch.tensor([[1.0] * 5, [-1.0] * 5])
    return ratios.log(), old, adv


def test_hand_checked_case():
    logp, old, adv = _case()
    freed = clip_higher_freed(logp, old, adv, 0.2, 0.28)
    # only the positive-advantage token at ratio 1.25: above 1.2 (cut by a symmetric clip), below 1.28 (kept)
    assert freed.tolist() == [[False, False, True, False, False], [False] * 5]


def test_bound_is_inclusive_above_and_exclusive_below():
    adv = torch.ones(1, 2)
    logp = torch.tensor([[math.log(1.2), math.log(1.28)]], dtype=torch.float64)
    freed = clip_higher_freed(logp, torch.zeros_like(logp), adv, 0.2, 0.28)
    assert freed.tolist() == [[False, True]]


def test_nothing_is_freed_without_a_wider_upper_bound():
    logp, old, adv = _case()
    for low, high in ((0.2, 0.2), (0.2, 0.1), (None, 0.28), (0.2, None)):
        assert not clip_higher_freed(logp, old, adv, low, high).any()


def test_vanilla_reports_it_and_those_tokens_keep_their_gradient():
    logp, old, adv = _case()
    logp = logp.clone().requires_grad_()
    mask = torch.ones_like(logp)
    wide = SimpleNamespace(clip_eps=0.2, clip_eps_high=0.28)  # the settings vanilla reads
    pg, diag = vanilla(PolicyLossInputs(logp, old, adv, mask, wide))
    assert diag["clip_higher_freed"].tolist() == [[False, False, True, False, False], [False] * 5]
    pg.sum().backward()
    assert logp.grad[0, 2] != 0  # freed: it still pushes its probability up
    _, sym = vanilla(PolicyLossInputs(logp.detach(), old, adv, mask, SimpleNamespace(clip_eps=0.2, clip_eps_high=None)))
    assert not sym["clip_higher_freed"].any() and sym["clip_frac_high"][0, 2]  # the symmetric clip cuts that token
