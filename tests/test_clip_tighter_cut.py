"""The tokens a clip tighter than PPO's standard 0.2 cuts and 0.2 would not."""

import math
from types import SimpleNamespace

import torch

from mathrl.engine.losses import clipped_surrogate
from mathrl.engine.policy_losses import PolicyLossInputs, clip_tighter_cut, vanilla


def _case():
    # ratios 1.0, 1.15, 1.25, 0.85 and 0.75 on a row of positive advantage, the same on a row of negative advantage
    ratios = torch.tensor([[1.0, 1.15, 1.25, 0.85, 0.75], [1.0, 1.15, 1.25, 0.85, 0.75]])
    adv = torch.tensor([[1.0] * 5, [-1.0] * 5])
    return ratios.log(), torch.zeros_like(ratios), adv


def test_hand_checked_case():
    logp, old, adv = _case()
    _, clipped = clipped_surrogate(logp, old, adv, 0.1, 0.1)
    # the clip of 0.1 cuts 1.15 and 1.25 where the advantage is positive, 0.85 and 0.75 where it is negative;
    # a clip of 0.2 would keep 1.15 and 0.85 and cut the other two
    assert clipped.tolist() == [[False, True, True, False, False], [False, False, False, True, True]]
    assert clip_tighter_cut(logp, old, clipped).tolist() == [[False, True, False, False, False],
                                                             [False, False, False, True, False]]  # fmt: skip


def test_the_standard_bound_itself_counts_as_kept():
    # ratio exactly 1.2 (positive advantage) and 0.8 (negative): a clip of 0.2 leaves their gradient, 0.1 cuts it
    logp = torch.tensor([[math.log(1.2)], [math.log(0.8)]], dtype=torch.float64)
    old, adv = torch.zeros_like(logp), torch.tensor([[1.0], [-1.0]], dtype=torch.float64)
    _, clipped = clipped_surrogate(logp, old, adv, 0.1, 0.1)
    assert clip_tighter_cut(logp, old, clipped).tolist() == [[True], [True]]


def test_none_at_the_standard_clip_or_wider():
    logp, old, adv = _case()
    for low, high in ((0.2, 0.2), (0.2, 0.28), (0.3, 0.3), (None, None)):
        _, clipped = clipped_surrogate(logp, old, adv, low, high)
        assert not clip_tighter_cut(logp, old, clipped).any()


def test_vanilla_reports_it():
    logp, old, adv = _case()
    mask = torch.ones_like(logp)
    _, diag = vanilla(PolicyLossInputs(logp, old, adv, mask, SimpleNamespace(clip_eps=0.1, clip_eps_high=None)))
    assert diag["clip_tighter_cut"].tolist() == [[False, True, False, False, False], [False, False, False, True, False]]
    _, wide = vanilla(PolicyLossInputs(logp, old, adv, mask, SimpleNamespace(clip_eps=0.2, clip_eps_high=None)))
    assert not wide["clip_tighter_cut"].any()
