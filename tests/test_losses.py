"""Hand-checkable cases for mathrl.engine.losses: every expected number is worked out in a comment."""

import math

import pytest
import torch

from mathrl.engine import losses as L

LN2 = math.log(2.0)


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(
        torch.as_tensor(actual, dtype=torch.float32),
        torch.as_tensor(expected, dtype=torch.float32),
        atol=atol,
        rtol=0,
    )


# ----------------------------------------------------------------- log-probs and entropy


def test_token_logprobs_and_entropy_match_manual_softmax():
    probs = torch.tensor([0.2, 0.3, 0.5])
    # 2 x 2 x 3: uniform logits, log-probabilities (softmax gives them back), and a shifted copy
    logits = torch.stack(
        [
            torch.stack([torch.zeros(3), probs.log()]),
            torch.stack([probs.log() + 7.0, torch.tensor([1.0, 2.0, 3.0])]),
        ]
    )
    tokens = torch.tensor([[1, 2], [0, 2]])
    softmax_123 = torch.tensor([1.0, 2.0, 3.0]).exp() / torch.tensor([1.0, 2.0, 3.0]).exp().sum()
    expected_logp = torch.tensor([[math.log(1 / 3), math.log(0.5)], [math.log(0.2), softmax_123[2].log().item()]])
    close(L.token_logprobs(logits, tokens), expected_logp)

    h_probs = -(probs * probs.log()).sum()  # 1.0297 nats
    h_123 = -(softmax_123 * softmax_123.log()).sum()
    close(L.token_entropy(logits), torch.tensor([[math.log(3), h_probs], [h_probs, h_123]]))


def test_logprobs_float32_from_bf16_and_entropy_with_masked_logit():
    logits = torch.zeros(1, 1, 3, dtype=torch.bfloat16)
    assert L.token_logprobs(logits, torch.tensor([[0]])).dtype == torch.float32
    # a -inf logit is a probability of 0: it contributes 0, not NaN; two equal left -> log 2
    masked = torch.tensor([[[0.0, 0.0, -math.inf]]])
    close(L.token_entropy(masked), [[LN2]])


# ----------------------------------------------------------------- masking


def test_masked_mean_and_sum_ignore_junk_after_the_end():
    x = torch.tensor([[1.0, 3.0, math.nan], [2.0, math.inf, 5.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    close(L.masked_sum(x, mask), 6.0)
    close(L.masked_mean(x, mask), 2.0)  # (1 + 3 + 2) / 3
    close(L.masked_mean(x, mask, dim=1), [2.0, 2.0])
    close(L.masked_sum(x, mask, dim=0), [3.0, 3.0, 0.0])
    assert math.isnan(L.masked_mean(x, torch.zeros_like(mask)).item())


# ----------------------------------------------------------------- KL estimators


def test_kl_estimators_by_hand():
    # policy gave the sampled token p = 0.5, reference 0.25: d = ref - logp = -ln 2
    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    close(L.kl_estimate(logp, ref, "k1"), [LN2])  # 0.6931
    close(L.kl_estimate(logp, ref, "k2"), [0.5 * LN2**2])  # 0.2402
    close(L.kl_estimate(logp, ref, "k3"), [0.5 + LN2 - 1.0])  # exp(-ln2) + ln2 - 1 = 0.1931
    # the other way round: d = +ln 2
    close(L.kl_estimate(ref, logp, "k1"), [-LN2])
    close(L.kl_estimate(ref, logp, "k3"), [2.0 - LN2 - 1.0])  # 0.3069
    # identical distributions: every estimator is exactly 0
    for kind in L.KL_ESTIMATORS:
        assert L.kl_estimate(logp, logp, kind).item() == 0.0


def test_kl_unknown_kind_names_allowed():
    with pytest.raises(ValueError, match="k1, k2, k3"):
        L.kl_estimate(torch.zeros(1), torch.zeros(1), "k4")


def test_k3_nonnegative_and_unbiased_on_samples():
    g = torch.Generator().manual_seed(0)
    pi = torch.tensor([0.5, 0.3, 0.2])
    ref = torch.tensor([0.2, 0.3, 0.5])
    true_kl = (pi * (pi / ref).log()).sum().item()  # 0.5 ln 2.5 + 0.2 ln 0.4 = 0.2749
    samples = torch.multinomial(pi, 200_000, replacement=True, generator=g)
    logp, ref_logp = pi.log()[samples], ref.log()[samples]
    k3 = L.kl_estimate(logp, ref_logp, "k3")
    assert (k3 >= 0).all()
    assert abs(k3.mean().item() - true_kl) < 0.005
    assert abs(L.kl_estimate(logp, ref_logp, "k1").mean().item() - true_kl) < 0.005
    # k3 >= 0 also for arbitrary pairs, including far apart ones
    a, b = torch.randn(1000, generator=g) * 5, torch.randn(1000, generator=g) * 5
    assert (L.kl_estimate(a, b, "k3") >= 0).all()


# ----------------------------------------------------------------- advantages


def test_baseline_advantages():
    close(L.baseline_advantages(torch.tensor([1.0, 0.0, 0.5]), 0.25), [0.75, -0.25, 0.25])


def test_group_advantages_grpo():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    # group 1: mean 0.5, population std 0.5 -> +-0.5 / 0.5 = +-1; group 2: all equal -> 0
    adv = L.group_advantages(rewards, 4)
    close(adv, [1.0, -1.0, -1.0, 1.0, 0, 0, 0, 0], atol=1e-4)
    assert (adv[4:] == 0).all()
    close(L.group_advantages(rewards, 4, scale=False), [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0])
    # equal non-binary rewards: exactly 0. In float32 mean([0.9] * 3) - 0.9 = 6e-8, which
    # (x - mean) / (0 + eps) would blow up to 0.06
    assert (L.group_advantages(torch.full((6,), 0.9), 3) == 0).all()


def test_group_size_must_tile_batch():
    with pytest.raises(ValueError, match="group_size=3"):
        L.group_advantages(torch.zeros(8), 3)


def test_rloo_advantages():
    # 1 - (0 + 0)/2 = 1; 0 - (1 + 0)/2 = -0.5
    close(L.rloo_advantages(torch.tensor([1.0, 0.0, 0.0]), 3), [1.0, -0.5, -0.5])
    close(L.rloo_advantages(torch.tensor([1.0, 0.0, 2.0, 2.0]), 2), [1.0, -1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="group_size >= 2"):
        L.rloo_advantages(torch.tensor([1.0, 0.0]), 1)


def test_frac_zero_std():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    close(L.frac_zero_std(rewards, 4), 0.5)
    close(L.zero_std_groups(rewards, 4), 1.0)
    close(L.frac_zero_std(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0]), 2), 2 / 3)  # [1,1] [0,1] [0,0]


def test_gae_gamma_lambda_one_is_reward_minus_value():
    rewards = torch.tensor([1.0, 0.0])
    values = torch.tensor([[0.2, 0.4, 0.6, 9.0], [0.1, 0.3, 9.0, 9.0]])  # 9s lie past the end
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    adv, ret = L.gae_advantages(rewards, values, mask)
    close(adv, [[0.8, 0.6, 0.4, 0.0], [-0.1, -0.3, 0.0, 0.0]])
    close(ret, [[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])


def test_gae_per_token_rewards_by_hand():
    # per-token rewards (B, T): each arrives where it is; past the end (mask 0) it is dropped
    rewards = torch.tensor([[0.25, 0.0, 0.25, 7.0], [0.25, 0.25, 7.0, 7.0]])
    values = torch.tensor([[0.5, 0.25, 0.25, 9.0], [0.0, 0.5, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    # gamma = lam = 1: R_t = the rewards still to come; row 0: 0.5, 0.25, 0.25; row 1: 0.5, 0.25
    adv, ret = L.gae_advantages(rewards, values, mask)
    close(ret, [[0.5, 0.25, 0.25, 0.0], [0.5, 0.25, 0.0, 0.0]])
    close(adv, [[0.0, 0.0, 0.0, 0.0], [0.5, -0.25, 0.0, 0.0]])  # A_t = R_t - V_t
    # lam 0 (one-step TD): A_t = r_t + V_{t+1} - V_t; row 0: 0.25 + 0.25 - 0.5 = 0, 0 + 0.25 - 0.25 = 0,
    # 0.25 + 0 - 0.25 = 0; row 1: 0.25 + 0.5 - 0 = 0.75, 0.25 + 0 - 0.5 = -0.25
    adv, ret = L.gae_advantages(rewards, values, mask, lam=0.0)
    close(adv, [[0.0, 0.0, 0.0, 0.0], [0.75, -0.25, 0.0, 0.0]])
    close(ret, [[0.5, 0.25, 0.25, 0.0], [0.75, 0.25, 0.0, 0.0]])  # R_t = A_t + V_t
    # a sequence reward equals per-token rewards that put it all on the last real token
    seq, tok = torch.tensor([1.0, 0.0]), torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    for a, b in zip(L.gae_advantages(seq, values, mask, 0.9, 0.8), L.gae_advantages(tok, values, mask, 0.9, 0.8)):
        close(a, b)


def test_gae_discounting_by_hand():
    rewards, values, mask = (
        torch.tensor([1.0]),
        torch.tensor([[0.2, 0.4, 5.0]]),
        torch.tensor([[1, 1, 0]]),
    )
    # gamma 0.5, lam 1: delta_1 = 1 - 0.4 = 0.6; delta_0 = 0.5 * 0.4 - 0.2 = 0; A_0 = 0 + 0.5 * 0.6
    adv, ret = L.gae_advantages(rewards, values, mask, gamma=0.5, lam=1.0)
    close(adv, [[0.3, 0.6, 0.0]])
    close(ret, [[0.5, 1.0, 0.0]])  # returns = discounted reward 0.5 * 1 and 1
    # lam 0: one-step TD, A_0 = delta_0 = 0
    adv, ret = L.gae_advantages(rewards, values, mask, gamma=0.5, lam=0.0)
    close(adv, [[0.0, 0.6, 0.0]])
    close(ret, [[0.2, 1.0, 0.0]])


def test_normalize_and_clip_abs():
    close(L.normalize(torch.tensor([1.0, 3.0]), 2.0, 1.0), [-1.0, 1.0])  # mean 2, population std 1
    assert (L.normalize(torch.tensor([4.0, 4.0]), 4.0, 0.0) == 0).all()  # constant input: 0, not NaN
    x, mask = torch.tensor([1.0, 3.0, 100.0]), torch.tensor([1, 1, 0])
    close(L.normalize(x, 2.0, 1.0, mask=mask), [-1.0, 1.0, 0.0])
    close(L.clip_abs(torch.tensor([-3.0, 0.5, 2.0]), 1.0), [-1.0, 0.5, 1.0])
    close(L.clip_abs(torch.tensor([-3.0, 2.0]), None), [-3.0, 2.0])


# ----------------------------------------------------------------- policy loss


def test_clipped_surrogate_asymmetric_by_hand():
    # eps_low 0.2, eps_high 0.28: the ratio may move in [0.8, 1.28]
    ratio = torch.tensor([[1.1, 1.5, 0.5, 0.5, 1.5, 1.25, 0.75]])
    adv = torch.tensor([[1.0, 1.0, 1.0, -1.0, -1.0, 2.0, -1.0]])
    loss, clipped = L.clipped_surrogate(ratio.log(), torch.zeros_like(ratio), adv, 0.2, 0.28)
    close(
        loss,
        [
            [
                -1.1,  # inside the range
                -1.28,  # A > 0, ratio above 1 + eps_high: capped
                -0.5,  # A > 0, ratio below 1 - eps_low: the unclipped (pessimistic) branch
                0.8,  # A < 0, ratio below 1 - eps_low: min(-0.5, -0.8) = -0.8
                1.5,  # A < 0, ratio above the range: unclipped -1.5 is the min
                -2.5,  # 1.25 < 1.28: inside only because eps_high > eps_low
                0.8,  # A < 0, 0.75 < 0.8: clipped at the lower bound
            ]
        ],
    )
    assert clipped.tolist() == [[False, True, False, True, False, False, True]]
    # symmetric 0.2 clips the 1.25 token
    loss_sym, clipped_sym = L.clipped_surrogate(ratio.log(), torch.zeros_like(ratio), adv, 0.2, 0.2)
    close(loss_sym[0, 5], -2.4)
    assert clipped_sym[0, 5]


def test_clipped_surrogate_broadcasts_sequence_advantage():
    ratio = torch.tensor([[1.0, 2.0], [1.0, 0.5]])
    loss, clipped = L.clipped_surrogate(ratio.log(), torch.zeros(2, 2), torch.tensor([[1.0], [-2.0]]), 0.2, 0.2)
    close(loss, [[-1.0, -1.2], [2.0, 1.6]])
    assert clipped.shape == (2, 2) and clipped.tolist() == [[False, True], [False, True]]


def test_unclipped_surrogate_gradient_is_reinforce():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 4, 5, generator=g, requires_grad=True)
    tokens = torch.randint(0, 5, (3, 4), generator=g)
    adv = torch.tensor([[1.5], [-0.5], [2.0]])

    logp = L.token_logprobs(logits, tokens)
    loss, clipped = L.clipped_surrogate(logp, logp.detach(), adv, None, None)
    assert not clipped.any()
    (grad_surrogate,) = torch.autograd.grad(loss.sum(), logits)

    logp = L.token_logprobs(logits, tokens)
    (grad_reinforce,) = torch.autograd.grad((-adv * logp).sum(), logits)
    torch.testing.assert_close(grad_surrogate, grad_reinforce)
    assert grad_reinforce.abs().sum() > 0


def test_clipped_tokens_get_no_gradient():
    logp = torch.tensor([[math.log(1.5), math.log(1.1)]], requires_grad=True)
    loss, clipped = L.clipped_surrogate(logp, torch.zeros(1, 2), torch.ones(1, 1), 0.2, 0.2)
    loss.sum().backward()
    assert clipped.tolist() == [[True, False]]
    close(logp.grad, [[0.0, -1.1]])  # d(-ratio)/dlogp = -ratio on the unclipped token


# ----------------------------------------------------------------- value loss


def test_value_loss_clipped_and_unclipped():
    values = torch.tensor([[1.0, 0.5]])
    old = torch.tensor([[0.5, 0.0]])
    returns = torch.tensor([[0.0, 0.5]])
    # token 0: (1 - 0)^2 = 1; clipped v = 0.7, (0.7)^2 = 0.49; max 1 -> 0.5
    # token 1: v hit the return, 0; clipped v = 0.2, (0.3)^2 = 0.09; max 0.09 -> 0.045
    close(L.value_loss(values, old, returns, None), [[0.5, 0.0]])
    close(L.value_loss(values, old, returns, 0.2), [[0.5, 0.045]])


def test_value_clipped_marks_predictions_moved_past_the_clip():
    values = torch.tensor([[1.0, 0.5, -0.1]])
    old = torch.tensor([[0.5, 0.4, 0.2]])
    # moved 0.5, 0.1, 0.3: past 0.2 are tokens 0 and 2; without a clip nothing is cut
    close(L.value_clipped(values, old, 0.2), [[1.0, 0.0, 1.0]])
    close(L.value_clipped(values, old, None), [[0.0, 0.0, 0.0]])
    close(L.value_clipped(old, old, 0.2), [[0.0, 0.0, 0.0]])  # a batch's first epoch: v == old


# ----------------------------------------------------------------- aggregation


def test_aggregate_token_vs_sequence_on_ragged_mask():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 100.0, 100.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    num, den = L.aggregate(per_token, mask, "token")
    close(num, 10.0)  # 1 + 2 + 3 + 4
    assert den == 4.0  # 2.5 per token
    num, den = L.aggregate(per_token, mask, "sequence")
    close(num, 6.0)  # mean 2 + mean 4
    assert den == 2.0  # 3.0 per sequence
    with pytest.raises(ValueError, match="token, sequence"):
        L.aggregate(per_token, mask, "batch")


# ----------------------------------------------------------------- value diagnostics


def test_explained_variance_and_rmse():
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0, 50.0]])
    assert L.explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert L.explained_variance(torch.full_like(returns, 7.0), returns, mask) == pytest.approx(0.0, abs=1e-6)
    # R - V = [0, 0, 0, 2]: Var = 1 - 0.25 = 0.75; Var[R] = 1.25; EV = 1 - 0.6 = 0.4
    values = torch.tensor([[1.0, 2.0, 3.0, 2.0, -9.0]])
    assert L.explained_variance(values, returns, mask) == pytest.approx(0.4, abs=1e-6)
    assert L.value_rmse(values, returns, mask) == pytest.approx(1.0)  # sqrt(4 / 4)
    assert math.isnan(L.explained_variance(values, torch.ones_like(returns), mask))


# ----------------------------------------------------------------- the sample filter


def test_filter_samples_keeps_one_sign_of_rollouts():
    # four rollouts of 3 tokens (the last token of rollouts 1 and 3 is padding, its 9.0 ignored);
    # rollout 2's tokens differ in sign (a per-token estimator): its mean (1 - 3 + 1) / 3 < 0
    adv = torch.tensor([[0.5, 0.5, 0.5], [-1.0, -1.0, 9.0], [1.0, -3.0, 1.0], [0.0, 0.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 0]])
    close(L.filter_samples(adv, mask, "positive"), [[0.5, 0.5, 0.5], [0, 0, 0], [0, 0, 0], [0, 0, 0]])
    close(L.filter_samples(adv, mask, "negative"), [[0, 0, 0], [-1.0, -1.0, 9.0], [1.0, -3.0, 1.0], [0, 0, 0]])
    assert L.filter_samples(adv, mask, "all") is adv  # rollout 4 (advantage 0) is in neither filter: it trains nothing
    # GRPO's group of 4 with one success: +1.5 on the right answer, -0.5 on each wrong one (per-token, masked)
    grpo = torch.tensor([1.5, -0.5, -0.5, -0.5])[:, None] * torch.ones(4, 2)
    ones = torch.ones(4, 2)
    assert L.filter_samples(grpo, ones, "positive").sum() == pytest.approx(3.0)
    assert L.filter_samples(grpo, ones, "negative").sum() == pytest.approx(-3.0)
    with pytest.raises(ValueError, match="all, positive, negative"):
        L.filter_samples(adv, mask, "pos")
