"""Pure tensor maths of the RL update: log-probs, entropy, KL estimators, advantages,
surrogate and value losses, and how per-token terms are averaged.

Shapes used throughout: ``B`` sequences (rollouts), ``T`` answer tokens, ``V`` vocabulary.
``mask`` is a (B, T) float or bool tensor that is 1 on the real answer tokens of a
sequence (up to and including its end token) and 0 after it. Rewards are per sequence,
shape (B,); where groups matter (GRPO, RLOO) the batch holds groups of ``group_size``
consecutive rollouts of the same prompt.

Every function here is side-effect free and has no state; the trainer composes them.
"""

from __future__ import annotations

import math

import torch

from mathrl.pipeline.registry import Registry

LOSS_AGG_MODES = ("token", "sequence")


# --------------------------------------------------------------------------- log-probs


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Log-probability of each chosen token.

    logits (B, T, V), tokens (B, T) int -> (B, T) float32:
    ``logp[b, t] = log_softmax(logits[b, t])[tokens[b, t]]``.
    """
    # float32 even under bf16 autocast: log_softmax over V in bf16 loses the small
    # differences between old and new log-probs that the PPO ratio is made of.
    logp_all = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    return logp_all.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)  # (B, T)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the full categorical distribution at each position.

    logits (B, T, V) -> (B, T) float32: ``H = -sum_v p_v log p_v`` with ``p = softmax(logits)``.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    p = logp.exp()
    # A -inf logit gives p = 0 and 0 * -inf = NaN; its true contribution is 0.
    return -torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(-1)


# --------------------------------------------------------------------------- masking


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` over the positions where ``mask`` is set.

    x, mask broadcastable (e.g. (B, T)); dim None sums everything -> scalar, else sums over
    ``dim``. Masked-out entries are replaced by 0 rather than multiplied by 0, so an inf or
    NaN after the end of a sequence cannot leak into the result.
    """
    x = torch.where(mask.bool(), x, torch.zeros_like(x))
    return x.sum() if dim is None else x.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over the positions where ``mask`` is set.

    ``sum(x * mask, dim) / sum(mask, dim)``; dim None -> scalar. A mean over no positions
    is NaN (0/0): an empty selection has no mean, and a silent 0 would hide that.
    """
    x = x if x.is_floating_point() else x.float()
    # counting with the same where() keeps mask broadcasting (e.g. (B, 1)) consistent
    return masked_sum(x, mask, dim) / masked_sum(torch.ones_like(x), mask, dim)


# --------------------------------------------------------------------------- KL


# Per-token estimators of KL(pi || ref) by name, as functions of d = ref_logp - logp (the log
# of the ratio ref/pi at tokens sampled from pi):
KL_ESTIMATORS: Registry = Registry("kl_estimator", "KL estimator")
KL_ESTIMATORS.add("k1", lambda d: -d)  # logp - ref_logp: unbiased, high variance, can be negative
KL_ESTIMATORS.add("k2", lambda d: 0.5 * d.square())  # biased, low variance, >= 0
# exp(d) - d - 1: unbiased (E_pi[exp(d)] = 1) and >= 0 (Schulman). expm1(d) - d: no
# cancellation when d is tiny, the usual case while the policy is close to the reference.
KL_ESTIMATORS.add("k3", lambda d: torch.expm1(d) - d)


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) from tokens sampled from pi, by the estimator
    named `kind` (KL_ESTIMATORS). logp, ref_logp (B, T): log-probs of the sampled tokens
    under the policy and the reference -> (B, T)."""
    return KL_ESTIMATORS.lookup(kind)(ref_logp - logp)


# --------------------------------------------------------------------------- advantages


def _groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """rewards (B,) -> (B // group_size, group_size), checking that groups tile the batch."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must have shape (B,), got {tuple(rewards.shape)}")
    if group_size < 1 or rewards.numel() % group_size != 0:
        raise ValueError(f"group_size={group_size} must be >= 1 and divide the batch of {rewards.numel()} rewards")
    return rewards.view(-1, group_size)


def baseline_advantages(rewards: torch.Tensor, baseline: float) -> torch.Tensor:
    """REINFORCE advantage with a scalar baseline: rewards (B,) -> ``A = r - b`` (B,).

    The baseline must not depend on this batch's rewards (see
    ``control.MovingAverageBaseline``) for the gradient to stay unbiased.
    """
    return rewards - baseline


def group_advantages(rewards: torch.Tensor, group_size: int, scale: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """GRPO advantage: each reward against the other rollouts of its prompt.

    rewards (B,) in groups of ``group_size`` consecutive rollouts -> (B,):
    ``A = (r - mean_g) / (std_g + eps)`` when ``scale``, else ``A = r - mean_g``.

    ``std_g`` is the population std (divide by G, not G-1): it is defined for any G,
    and for binary rewards it is sqrt(p(1-p)) of the group's success rate p. A group whose
    rewards are all equal gets advantage exactly 0 (it carries no learning signal; this is
    the vanishing-gradient case ``frac_zero_std`` counts), not a rounding residue / eps.
    """
    g = _groups(rewards, group_size)  # (n_groups, G)
    centred = g - g.mean(dim=1, keepdim=True)
    if scale:
        centred = centred / (g.std(dim=1, unbiased=False, keepdim=True) + eps)
    flat = (g == g[:, :1]).all(dim=1, keepdim=True)  # (n_groups, 1)
    return torch.where(flat, torch.zeros_like(centred), centred).view(-1)


def rloo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO advantage: each reward minus the mean of the OTHER G-1 rewards of its group.

    rewards (B,) -> (B,): ``A_i = r_i - (sum_g - r_i) / (G - 1)``. The baseline excludes
    r_i itself, so it is independent of sample i and the estimator is unbiased.
    Requires G >= 2.
    """
    if group_size < 2:
        raise ValueError(f"RLOO needs group_size >= 2 (a leave-one-out mean), got {group_size}")
    g = _groups(rewards, group_size)
    others_mean = (g.sum(dim=1, keepdim=True) - g) / (group_size - 1)
    return (g - others_mean).view(-1)


def zero_std_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Number of groups whose rewards are all equal (zero std, hence zero GRPO advantage).

    rewards (B,) -> 0-dim float tensor; a count, so ranks can add theirs up.
    """
    g = _groups(rewards, group_size)
    return (g == g[:, :1]).all(dim=1).float().sum()


def frac_zero_std(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Share of groups whose rewards are all equal: rewards (B,) -> 0-dim tensor in [0, 1]."""
    return zero_std_groups(rewards, group_size) / (rewards.numel() // group_size)


def gae_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the answer tokens.

    rewards (B,) or (B, T), values (B, T), mask (B, T) -> (advantages (B, T), returns (B, T)),
    both 0 outside the mask. A sequence reward (B,) arrives at the last real token, 0
    elsewhere; per-token rewards (B, T) arrive where they are (masked):

        delta_t = r_t + gamma * V_{t+1} - V_t,   V_{t+1} = 0 past the last real token
        A_t     = delta_t + gamma * lam * A_{t+1}
        R_t     = A_t + V_t                       (the value targets)

    The mask is assumed to be a prefix (1s then 0s). ``values`` should be detached (the
    rollout's values); with gamma = lam = 1 this gives ``A_t = R - V_t``.
    """
    m = mask.to(values.dtype)
    v = values * m  # values beyond the mask are not states of this episode
    length = m.sum(dim=1).long()  # (B,)
    if rewards.dim() == 2:  # per-token rewards
        r = rewards.to(v.dtype) * m
    else:
        last = (length - 1).clamp(min=0)
        r = torch.zeros_like(v)
        # an empty sequence (length 0) has no token to carry the reward
        r.scatter_(1, last.unsqueeze(1), (rewards.to(v.dtype) * (length > 0).to(v.dtype)).unsqueeze(1))

    T = v.shape[1]
    adv = torch.zeros_like(v)
    next_v = torch.zeros_like(v[:, 0])
    next_adv = torch.zeros_like(v[:, 0])
    for t in reversed(range(T)):  # T is the answer width (~5): a loop over time is cheap
        delta = r[:, t] + gamma * next_v - v[:, t]
        adv[:, t] = (delta + gamma * lam * next_adv) * m[:, t]
        next_v, next_adv = v[:, t], adv[:, t]  # both 0 past the end: bootstrapping stops
    returns = (adv + v) * m
    return adv, returns


def normalize(
    x: torch.Tensor, mean: float, std: float, eps: float = 1e-8, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Whiten ``x`` with given statistics: ``(x - mean) / (std + eps)``.

    Any shape. The statistics are arguments because a distributed trainer takes them over
    every rank's batch (``distributed.all_mean_std``). With ``mask`` the result is 0 outside
    it (advantage normalisation over real answer tokens only).
    """
    out = (x - mean) / (std + eps)
    return out if mask is None else torch.where(mask.bool(), out, torch.zeros_like(out))


def clip_abs(x: torch.Tensor, limit: float | None) -> torch.Tensor:
    """Clamp ``x`` to ``[-limit, limit]``; ``limit=None`` returns ``x`` unchanged."""
    if limit is None:
        return x
    if limit <= 0:
        raise ValueError(f"clip limit must be > 0 or None, got {limit}")
    return x.clamp(-limit, limit)


SAMPLE_FILTERS = ("all", "positive", "negative")


def filter_samples(adv: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Advantages with the rollouts that ``mode`` leaves out set to 0, so their policy-gradient term is 0.

    adv, mask (B, T) -> (B, T). A rollout's sign is that of its mean advantage over its answer tokens
    (with an outcome reward every token of a rollout has the same advantage). ``positive`` keeps the
    rollouts with a sign > 0 (reinforce what worked), ``negative`` those < 0 (push down what failed),
    ``all`` every rollout (``adv`` itself)."""
    if mode not in SAMPLE_FILTERS:
        raise ValueError(f"sample filter {mode!r} is unknown; allowed: {', '.join(SAMPLE_FILTERS)}")
    if mode == "all":
        return adv
    mean = (adv * mask).sum(1) / mask.sum(1).clamp_min(1)  # (B,)
    keep = mean > 0 if mode == "positive" else mean < 0  # (B,)
    return adv * keep[:, None].to(adv.dtype)


# --------------------------------------------------------------------------- losses


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float | None,
    eps_high: float | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate, per token.

    logp, old_logp (B, T); advantages (B, T) or (B, 1) -> (per_token_loss (B, T),
    clipped (B, T) bool):

        ratio = exp(logp - old_logp)
        loss  = -min(ratio * A, clamp(ratio, 1 - eps_low, 1 + eps_high) * A)

    Separate ``eps_low`` / ``eps_high`` is DAPO's clip-higher (a larger upper bound lets
    unlikely tokens grow). ``None`` leaves that side unclipped; both None gives
    ``loss = -ratio * A``, whose gradient at ``old_logp = logp.detach()`` is
    ``-A * grad(logp)``: plain REINFORCE. ``clipped`` marks tokens where the clipped
    branch was the minimum (its gradient is 0 there), for ``clip_frac``.
    """
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    if eps_low is None and eps_high is None:
        return -unclipped, torch.zeros_like(unclipped, dtype=torch.bool)
    lo = None if eps_low is None else 1.0 - eps_low
    hi = None if eps_high is None else 1.0 + eps_high
    clipped_obj = ratio.clamp(min=lo, max=hi) * advantages
    # strictly smaller: where the two branches tie the gradient still flows
    return -torch.minimum(unclipped, clipped_obj), clipped_obj < unclipped


def gspo_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float,
    eps_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GSPO (Zheng et al. 2025, arXiv 2507.18071): PPO's clipped surrogate on a sequence-level ratio.

    logp, old_logp, advantages, mask (B, T) -> (per_token_loss (B, T), clipped (B, T) bool):

        s_i   = exp(mean over the answer tokens t of sequence i of (logp - old_logp))
        loss  = -min(s_i * A, clamp(s_i, 1 - eps_low, 1 + eps_high) * A)    on each token of i

    in the paper's GSPO-token form: each token's ratio is ``sg(s_i) * pi / sg(pi)``, equal to
    s_i in value, with gradient ``s_i * grad logp_t``. With one advantage per sequence the
    clip is decided per sequence, and the mean over a sequence's tokens (``loss_agg:
    sequence``) is GSPO's loss of that sequence, with GSPO's gradient. The paper's ranges are
    tiny (3e-4, 4e-4): a mean log-ratio moves far less than a token's.
    """
    seq = masked_sum(logp.detach() - old_logp, mask, dim=1) / mask.float().sum(dim=1).clamp(min=1)  # (B,)
    log_ratio = logp - logp.detach() + seq[:, None]  # (B, T): log s_i in value
    return clipped_surrogate(log_ratio, torch.zeros_like(log_ratio), advantages, eps_low, eps_high)


def cispo_surrogate(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, eps_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """CISPO (MiniMax 2025, arXiv 2506.13585): REINFORCE weighted by a clipped, detached
    importance weight, so the clip bounds a token's step but never removes its gradient.

    logp, old_logp, advantages (B, T) -> (per_token_loss (B, T), clipped (B, T) bool):

        w    = min(exp(logp - old_logp), 1 + eps_high)      (no gradient through w)
        loss = -w * A * logp

    ``clipped`` marks the tokens whose weight the bound cut (the paper sets no lower bound).
    """
    ratio = torch.exp(logp.detach() - old_logp)
    weight = ratio.clamp(max=1.0 + eps_high)
    return -weight * advantages * logp, ratio > 1.0 + eps_high


def dual_clip_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    eps_low: float | None,
    eps_high: float | None,
    clip_ratio_c: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Dual-clip PPO (Ye et al. 2020, arXiv 1912.09729; verl's ``clip_ratio_c``): the clipped
    surrogate, bounded for negative advantages by ``clip_ratio_c * A``.

    logp, old_logp, advantages (B, T) -> (per_token_loss (B, T), clipped (B, T) bool, dual (B, T) bool):

        loss = min(ppo_loss, -clip_ratio_c * A)    where A < 0;   ppo_loss elsewhere

    so a token whose ratio grew far past 1 while its advantage is negative adds at most
    ``-clip_ratio_c * A`` and no gradient. ``clipped`` is ``clipped_surrogate``'s; ``dual``
    marks the tokens the lower bound hit (ratio > clip_ratio_c, A < 0; never clipped ones).
    """
    pg, clipped = clipped_surrogate(logp, old_logp, advantages, eps_low, eps_high)
    bound = -clip_ratio_c * advantages
    dual = (advantages < 0) & (pg > bound)
    return torch.where(dual, bound, pg), clipped, dual


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    clip: float | None,
) -> torch.Tensor:
    """Value-function loss, per token. All inputs (B, T) -> (B, T).

    Unclipped: ``0.5 * (v - R)^2``. With ``clip`` (PPO value clipping):
    ``v_c = old + clamp(v - old, -clip, clip)`` and ``0.5 * max((v - R)^2, (v_c - R)^2)``,
    the pessimistic of the two, so a value that jumped far from the rollout's estimate is
    not rewarded for it.
    """
    unclipped = (values - returns).square()
    if clip is None:
        return 0.5 * unclipped
    v_clipped = old_values + (values - old_values).clamp(-clip, clip)
    return 0.5 * torch.maximum(unclipped, (v_clipped - returns).square())


def value_clipped(values: torch.Tensor, old_values: torch.Tensor, clip: float | None) -> torch.Tensor:
    """Which value predictions the value clip cut: (B, T) float, 1 where ``|v - old| > clip``
    (all 0 without a clip). On a batch's first epoch ``v == old``, so only later epochs can bind."""
    if clip is None:
        return torch.zeros_like(values)
    return ((values - old_values).abs() > clip).to(values.dtype)


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, mode: str) -> tuple[torch.Tensor, float]:
    """Reduce a per-token loss to ``(numerator, denominator)``; the loss is their ratio.

    per_token, mask (B, T) -> (scalar tensor, float):

    - ``"token"``: numerator = sum of all masked tokens, denominator = number of masked
      tokens. Every token weighs the same, so long answers are not down-weighted (DAPO).
    - ``"sequence"``: numerator = sum over sequences of each one's masked token mean,
      denominator = number of sequences (GRPO's per-sequence mean).

    The pair is returned, not the quotient, so a distributed or micro-batched trainer can
    sum numerators locally and divide by the global count.
    """
    if mode == "token":
        return masked_sum(per_token, mask), float(mask.float().sum())
    if mode == "sequence":
        per_seq = masked_sum(per_token, mask, dim=1) / mask.float().sum(dim=1).clamp(min=1)
        return per_seq.sum(), float(per_token.shape[0])
    raise ValueError(f"unknown loss aggregation mode={mode!r}; allowed: {', '.join(LOSS_AGG_MODES)}")


# --------------------------------------------------------------------------- diagnostics


@torch.no_grad()
def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """How much of the returns' variance the value function explains, over masked tokens.

    values, returns, mask (B, T) -> float: ``1 - Var[R - V] / Var[R]`` (1 is perfect, 0 is
    no better than a constant, negative is worse). NaN when Var[R] == 0 (undefined).
    """
    var_r = masked_mean((returns - masked_mean(returns, mask)).square(), mask)
    diff = returns - values
    var_d = masked_mean((diff - masked_mean(diff, mask)).square(), mask)
    if not var_r > 0:
        return math.nan
    return float(1.0 - var_d / var_r)


@torch.no_grad()
def value_rmse(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """Root-mean-square error of the values against the returns over masked tokens.

    values, returns, mask (B, T) -> float: ``sqrt(mean_masked((V - R)^2))``.
    """
    return float(masked_mean((values - returns).square(), mask).sqrt())


# --------------------------------------------------------------------------- update diagnostics
# What the metrics row reports about an update beside the loss: which side of the PPO clip
# bound, how far the policy moved from the rollout's, the advantages' spread, and the
# covariance between log-probability and advantage that drives the change of entropy
# (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs", arXiv 2505.22617).


def clip_sides(logp: torch.Tensor, old_logp: torch.Tensor, clipped: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Split ``clipped`` (from ``clipped_surrogate``) by the bound that binds.

    logp, old_logp (B, T), clipped (B, T) bool -> (low, high), both (B, T) bool. A clipped
    token with ratio < 1 sits at the lower bound 1 - eps_low (its advantage is negative), one
    with ratio > 1 at the upper bound 1 + eps_high (its advantage is positive): TRL's
    ``clip_ratio/low_mean`` and ``clip_ratio/high_mean``. ``low | high == clipped``.
    """
    log_ratio = logp - old_logp
    return clipped & (log_ratio < 0), clipped & (log_ratio > 0)


def ppo_kl(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """Per-token estimate of KL(old || new) from tokens sampled by the old policy:
    ``old_logp - logp`` (B, T) (the k1 estimator); its masked mean is verl's ``actor/ppo_kl``.
    0 on the first epoch, where the policy has not moved yet."""
    return old_logp - logp


def moment_sums(x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sums over the masked positions from which means, stds and the covariance of x and y follow.

    x, y, mask (B, T) -> float64 tensor ``[n, Σx, Σy, Σxy, Σx², Σy²]``; sums, so micro-batches
    and ranks add theirs up before ``moments``."""
    m = mask.bool()
    x = torch.where(m, x.double(), torch.zeros((), dtype=torch.float64))
    y = torch.where(m, y.double(), torch.zeros((), dtype=torch.float64))
    return torch.stack([m.double().sum(), x.sum(), y.sum(), (x * y).sum(), (x * x).sum(), (y * y).sum()])


def moments(sums) -> dict[str, float]:
    """From ``moment_sums``: the means, population stds and population covariance of x and y
    (``cov = E[xy] - E[x] E[y]``); all NaN over no positions."""
    n, sx, sy, sxy, sxx, syy = (float(v) for v in sums)
    if n <= 0:
        return dict.fromkeys(("mean_x", "mean_y", "std_x", "std_y", "cov"), math.nan)
    mx, my = sx / n, sy / n
    return {
        "mean_x": mx,
        "mean_y": my,
        "std_x": math.sqrt(max(sxx / n - mx * mx, 0.0)),
        "std_y": math.sqrt(max(syy / n - my * my, 0.0)),
        "cov": sxy / n - mx * my,
    }


def centred_product(logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each token's term of the log-prob/advantage covariance:
    ``(logp - mean logp) * (A - mean A)``, means over the masked tokens; (B, T), 0 outside the
    mask. Its masked mean is the token-level covariance ``logp_adv_cov``; Clip-Cov and KL-Cov
    pick the tokens where it is large (they drive entropy down the most)."""
    logp = logp.detach()
    c = (logp - masked_mean(logp, mask)) * (advantages - masked_mean(advantages, mask))
    return torch.where(mask.bool(), c, torch.zeros_like(c))


def clip_cov_tokens(
    cov: torch.Tensor,
    mask: torch.Tensor,
    ratio: float,
    lower: float,
    upper: float,
    generator: torch.Generator | None = None,
    exclude: torch.Tensor | None = None,
) -> torch.Tensor:
    """Clip-Cov (arXiv 2505.22617, verl ``compute_policy_loss_clip_cov``): the tokens whose
    policy gradient is cut.

    cov (B, T) from ``centred_product``; mask (B, T) -> (B, T) bool. Of the masked tokens
    with ``lower < cov < upper`` (and not in ``exclude``: those PPO's clip already cut), a
    uniformly random ``max(1, int(ratio * n_tokens))`` are chosen (all of them if fewer).
    """
    eligible = mask.bool() & (cov > lower) & (cov < upper)
    if exclude is not None:
        eligible &= ~exclude.bool()
    idx = eligible.flatten().nonzero().squeeze(1)
    k = min(max(1, int(ratio * float(mask.float().sum()))), len(idx))
    chosen = torch.zeros(cov.numel(), dtype=torch.bool, device=cov.device)
    if k:
        chosen[idx[torch.randperm(len(idx), generator=generator)[:k].to(idx.device)]] = True
    return chosen.view_as(cov)


def kl_cov_tokens(cov: torch.Tensor, mask: torch.Tensor, ratio: float) -> torch.Tensor:
    """KL-Cov (arXiv 2505.22617, verl ``compute_policy_loss_kl_cov``): the tokens that get a KL
    penalty: the ``max(1, int(ratio * n_tokens))`` masked tokens of largest ``cov``.
    cov, mask (B, T) -> (B, T) bool."""
    n = int(mask.bool().sum())
    chosen = torch.zeros(cov.numel(), dtype=torch.bool, device=cov.device)
    if n:
        k = min(max(1, int(ratio * n)), n)
        flat = torch.where(mask.bool(), cov, torch.full_like(cov, -math.inf)).flatten()
        chosen[torch.topk(flat, k).indices] = True
    return chosen.view_as(cov)


def covariance_penalised(
    pg: torch.Tensor, logp: torch.Tensor, old_logp: torch.Tensor, chosen: torch.Tensor, kind: str, kl_coef: float = 1.0
) -> torch.Tensor:
    """The per-token surrogate ``pg`` (B, T) with Clip-Cov or KL-Cov applied on ``chosen`` tokens:

    - ``clip_cov``: their loss (hence gradient) is 0;
    - ``kl_cov``: ``kl_coef * |logp - old_logp|`` is added to their loss. Its gradient is 0
      where the policy has not moved (the first epoch, with one update per batch): KL-Cov acts
      only from a second PPO epoch on.
    """
    if kind == "clip_cov":
        return torch.where(chosen, torch.zeros_like(pg), pg)
    if kind == "kl_cov":
        return torch.where(chosen, pg + kl_coef * (logp - old_logp).abs(), pg)
    raise ValueError(f"unknown covariance remedy kind={kind!r}; allowed: clip_cov, kl_cov")


# ----------------------------------------------------------------------------- the loss of an update
def per_token_loss(
    policy_loss,
    inputs,
    logits: torch.Tensor,
    ref_logp: torch.Tensor,
    coefs: dict,
    *,
    correction: torch.Tensor | None = None,
    selection: torch.Tensor | None = None,
    critic: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    policy_terms: bool = True,
) -> tuple[torch.Tensor, dict]:
    """The loss per answer token (b, L) of one micro-batch, and its terms, each (b, L):

        loss = correction · selection · policy_loss + kl_coef · KL − ent_coef · H  (+ value_coef · value loss)

    `policy_loss(inputs)` is the run's surrogate (mathrl.engine.policy_losses: log-probs, old log-probs, advantages,
    mask, settings) and its diagnostics; `correction` the rollout correction's detached per-token weight and
    `selection` the token selection's (None: no weight); KL against the reference log-probs by the settings'
    estimator, H the entropy of `logits`; `critic` (values, old values, returns) adds the value loss, and
    `policy_terms` False (the critic's warm-up) zeroes the policy terms, kept in the graph so that DDP sees every
    parameter. The terms are computed in this order, the order the gradients are summed in. Returns (loss, terms:
    pg, kl, entropy, value_loss or None, diagnostics)."""
    s = inputs.settings
    pg, diagnostics = policy_loss(inputs)
    if correction is not None:
        pg = pg * correction
    if selection is not None:
        pg = pg * selection
    kl = kl_estimate(inputs.logp, ref_logp, s.kl_estimator)
    ent = token_entropy(logits)
    loss = pg + coefs["kl_coef"] * kl - coefs["ent_coef"] * ent
    vl = None
    if critic is not None:
        values, old_values, returns = critic
        vl = value_loss(values, old_values, returns, s.value_clip)
        if not policy_terms:
            loss = 0.0 * loss
        loss = loss + s.value_coef * vl
    return loss, {"pg": pg, "kl": kl, "entropy": ent, "value_loss": vl, "diagnostics": diagnostics}
