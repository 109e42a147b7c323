"""Tests of the reward kinds on hand-made answer rows (mathrl.engine.rewards)."""

import pytest
import torch

from mathrl.engine.rewards import REWARD_KINDS, RewardSpec, answer_checks, compute_rewards, token_rewards
from mathrl.engine.tasks import VOCAB_SIZE, Task, encode

# 7+45 = 52, written "2500$" by Task("add", 3)
TARGET_TEXT = "2500$"
ROWS = [
    "2500$",  # correct
    "2600$",  # one wrong digit: 3 of 4 digits right, well formed
    "25000",  # right digits but no end token
    "2+00$",
]  # garbage: a '+' among the digits


def batch(rows, target=TARGET_TEXT):
    generated = torch.tensor([encode(r) for r in rows])  # (B, 5)
    return generated, torch.tensor([encode(target)] * len(rows))


def test_target_matches_task_encoding():
    encoded = Task("add", 3).encode_answers(torch.tensor([7]), torch.tensor([45]))
    assert torch.equal(batch([TARGET_TEXT])[1], encoded)


def test_answer_checks_by_hand():
    checks = answer_checks(*batch(ROWS))
    assert checks["exact"].tolist() == [1, 0, 0, 0]
    assert checks["format_ok"].tolist() == [1, 1, 0, 0]
    assert checks["invalid"].tolist() == [0, 0, 1, 1]
    assert checks["digit_frac"].tolist() == [1, 0.75, 1, 0.75]
    assert all(v.dtype == torch.float32 and v.shape == (4,) for v in checks.values())


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("exact", [1, 0, 0, 0]),
        ("shaped", [1.6, 0.475, 0.5, 0.375]),  # exact + 0.1 format + 0.5 * digit_frac
        ("shaped_penalty", [1.6, 0.475, 0.0, -0.125]),  # shaped - 0.5 when malformed
        # format_ok * (0.3 digit_frac + 0.7 mean_digit / 9): mean digit 7/4 and 8/4
        ("proxy", [0.3 + 0.7 * 1.75 / 9, 0.225 + 0.7 * 2 / 9, 0, 0]),
    ],
)
def test_each_kind_by_hand(kind, expected):
    reward, checks = compute_rewards(RewardSpec(kind), *batch(ROWS))
    assert reward.shape == (4,) and reward.dtype == torch.float32
    assert reward.tolist() == pytest.approx(expected)
    assert checks["exact"].tolist() == [1, 0, 0, 0]  # accuracy is logged whatever the reward


def test_weights_are_used():
    spec = RewardSpec("shaped_penalty", format_bonus=0.2, digit_weight=1.0, invalid_penalty=2.0)
    reward, _ = compute_rewards(spec, *batch(ROWS))
    assert reward.tolist() == pytest.approx([2.2, 0.95, -1.0, -1.25])


def test_proxy_is_hacked_by_all_nines():
    # 12+34 = 46, written "640$" by Task("add", 2)
    generated, target = batch(["640$", "999$"], target="640$")
    proxy, checks = compute_rewards(RewardSpec("proxy"), generated, target)
    assert proxy.tolist() == pytest.approx([0.3 + 0.7 * (10 / 3) / 9, 0.7])
    assert proxy[1] > proxy[0]  # the wrong all-9s answer beats the right one
    assert checks["exact"].tolist() == [1, 0]
    exact, _ = compute_rewards(RewardSpec("exact"), generated, target)
    assert exact.tolist() == [1, 0]


def test_unknown_kind_and_bad_shapes():
    assert REWARD_KINDS == ("exact", "signed", "shaped", "shaped_penalty", "proxy", "random")
    with pytest.raises(ValueError, match="exact, signed, shaped, shaped_penalty, proxy, random"):
        RewardSpec("bogus")
    spec = RewardSpec()
    object.__setattr__(spec, "kind", "bogus")  # a spec that skipped validation
    with pytest.raises(ValueError, match="allowed"):
        compute_rewards(spec, *batch(ROWS))
    with pytest.raises(ValueError, match="must both be"):
        answer_checks(torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long))


def test_random_reward_is_the_coin_not_the_answer():
    coins = torch.tensor([0.9, 0.1, 0.49, 0.5])  # 1 below 0.5
    reward, checks = compute_rewards(RewardSpec("random"), *batch(ROWS), coins=coins)
    assert reward.tolist() == [0, 1, 1, 0] and reward.dtype == torch.float32
    assert checks["exact"].tolist() == [1, 0, 0, 0]  # the right answer drew 0: accuracy is still logged
    same, _ = compute_rewards(RewardSpec("random"), *batch(["2500$"] * 4), coins=coins)
    assert torch.equal(same, reward)  # other answers, same coins: the same rewards
    with pytest.raises(ValueError, match="needs coins of shape"):
        compute_rewards(RewardSpec("random"), *batch(ROWS))
    with pytest.raises(ValueError, match=r"\(4,\), got \(3,\)"):
        compute_rewards(RewardSpec("random"), *batch(ROWS), coins=coins[:3])


def test_random_reward_draws_are_fair_and_seeded():
    coins = torch.rand(20_000, generator=torch.Generator().manual_seed(3))
    generated, target = batch(["2500$"] * 20_000)
    reward, _ = compute_rewards(RewardSpec("random"), generated, target, coins=coins)
    assert abs(float(reward.mean()) - 0.5) < 0.015  # 4 standard errors of a fair coin
    again = torch.rand(20_000, generator=torch.Generator().manual_seed(3))
    assert torch.equal(compute_rewards(RewardSpec("random"), generated, target, coins=again)[0], reward)


def test_token_rewards_by_hand():
    r = token_rewards(*batch(ROWS))  # 5 answer tokens: each right one earns 1/5
    torch.testing.assert_close(r, torch.tensor([[0.2, 0.2, 0.2, 0.2, 0.2],
                                                [0.2, 0.0, 0.2, 0.2, 0.2],
                                                [0.2, 0.2, 0.2, 0.2, 0.0],
                                                [0.2, 0.0, 0.2, 0.2, 0.2]]))  # fmt: skip
    with pytest.raises(ValueError, match="must both be"):
        token_rewards(torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long))


def test_the_signed_reward_is_plus_one_or_minus_one():
    reward, checks = compute_rewards(RewardSpec("signed"), *batch(ROWS))
    assert reward.tolist() == [2 * x - 1 for x in checks["exact"].tolist()] and set(reward.tolist()) == {1.0, -1.0}


def test_an_offset_is_added_to_every_reward_and_leaves_accuracy_alone():
    plain, checks = compute_rewards(RewardSpec("exact"), *batch(ROWS))
    shifted, same = compute_rewards(RewardSpec("exact", offset=10.0), *batch(ROWS))
    assert shifted.tolist() == [x + 10 for x in plain.tolist()] and torch.equal(same["exact"], checks["exact"])


@pytest.mark.parametrize("kind", REWARD_KINDS)
def test_every_reward_lies_in_the_range_its_bands_are_clipped_to(kind):
    """The analysis clips a run's reward band to `metric_range` from its settings: each kind's rewards, on answers drawn
    at random and on the hand-made rows, never leave it (with an offset too)."""
    from mathrl.analysis.measures.general import metric_range

    spec = RewardSpec(kind, offset=-0.25)
    settings = {
        "reward": kind,
        "reward_offset": spec.offset,
        **{k: getattr(spec, k) for k in ("format_bonus", "digit_weight", "invalid_penalty")},
        **{k: getattr(spec, k) for k in ("proxy_correct_weight", "proxy_bias_weight")},
    }
    lo, hi = metric_range("reward_mean", settings)
    g = torch.Generator().manual_seed(0)
    drawn = torch.randint(0, VOCAB_SIZE, (512, len(TARGET_TEXT)), generator=g)
    nines = torch.tensor([encode("9999$")])  # the proxy's best answer
    generated = torch.cat([drawn, batch(ROWS)[0], nines, torch.tensor([encode(TARGET_TEXT)])])
    target = torch.tensor([encode(TARGET_TEXT)] * len(generated))
    rewards, _ = compute_rewards(spec, generated, target, coins=torch.rand(len(generated), generator=g))
    assert lo - 1e-6 <= rewards.min().item() and rewards.max().item() <= hi + 1e-6
