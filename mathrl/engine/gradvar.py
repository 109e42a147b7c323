"""The gradient-variance probe: how noisy is the policy gradient at batch size N?

From one fixed policy state, draw `num_samples` independent batches of N rollouts (fresh
prompts and samples each time), compute the GRPO policy-gradient of each, and measure the
variance across batches of every gradient element, averaged within each parameter tensor
and then across tensors (the stability document's `compute_gradient_variance`). Theory:
Var[grad] = Var[per-rollout grad] / N, so 64 -> 512 should divide it by about 8.

The same gradients give the gradient noise scale tr(Σ)/|G|^2 (McCandlish et al. 2018) from
the mean squared gradient norm at the smallest and the largest batch size.

Also measured here: one batch's gradient computed whole against accumulated over
micro-batches (loss divided by the number of micro-batches), the largest element-wise
difference, which should be float noise.
"""

from __future__ import annotations

import torch

from mathrl.engine.losses import aggregate, group_advantages, token_logprobs
from mathrl.engine.model import GPT
from mathrl.engine.rewards import RewardSpec, compute_rewards
from mathrl.engine.tasks import VOCAB_SIZE, Task, answer_mask


def rollouts(
    policy: GPT, task: Task, pairs: torch.Tensor, n: int, group_size: int, gen: torch.Generator, temperature: float
) -> dict:
    """n rollouts in groups of `group_size` copies of random training prompts."""
    idx = torch.randint(len(pairs), (n // group_size,), generator=gen)
    chosen = pairs[idx].repeat_interleave(group_size, dim=0)  # (n, 2)
    prompts = task.encode_prompts(chosen[:, 0], chosen[:, 1])
    target = task.encode_answers(chosen[:, 0], chosen[:, 1])
    noise = torch.rand(n, task.answer_len, VOCAB_SIZE, generator=gen)
    tokens = policy.generate(prompts, task.answer_len, temperature=temperature, noise=noise)
    rewards, _ = compute_rewards(RewardSpec("exact"), tokens, target)
    return {"prompts": prompts, "tokens": tokens, "adv": group_advantages(rewards.float(), group_size)}


def pg_loss(policy: GPT, task: Task, batch: dict) -> torch.Tensor:
    """GRPO's surrogate at ratio 1 (its gradient is -A grad log pi), averaged per sequence."""
    inp = torch.cat([batch["prompts"], batch["tokens"]], 1)[:, :-1]
    logp = token_logprobs(policy(inp)[:, task.prompt_len - 1 :], batch["tokens"])  # (B, L)
    num, den = aggregate(-batch["adv"][:, None] * logp, answer_mask(batch["tokens"]), "sequence")
    return num / den


def flat_grad(policy: GPT, loss: torch.Tensor) -> list[torch.Tensor]:
    params = [p for p in policy.parameters() if p.requires_grad]
    return [g.detach().flatten() for g in torch.autograd.grad(loss, params)]


def gradient_moments(policy, task, pairs, batch_sizes, num_samples, group_size, seed, temperature=1.0) -> dict:
    """Per batch size, over `num_samples` fresh batches: `variance`, the mean per-element
    gradient variance (averaged within each parameter tensor, then across tensors), and
    `sq_norm`, the mean squared norm |g|^2 of a batch's gradient (the input of the gradient
    noise scale, mathrl.analysis.estimators.noise_scale)."""
    out = {}
    for n in batch_sizes:
        gen = torch.Generator().manual_seed(seed)
        grads = [
            flat_grad(policy, pg_loss(policy, task, rollouts(policy, task, pairs, n, group_size, gen, temperature)))
            for _ in range(num_samples)
        ]
        per_param = [torch.stack([g[i] for g in grads]).var(dim=0).mean() for i in range(len(grads[0]))]
        sq_norm = sum(float(sum(t.double().square().sum() for t in g)) for g in grads) / len(grads)
        out[n] = {"variance": float(torch.stack(per_param).mean()), "sq_norm": sq_norm}
    return out


def accumulation_difference(
    policy, task, pairs, batch_size, micro_batch_size, group_size, seed, temperature=1.0
) -> dict:
    """One batch: the gradient whole against accumulated over micro-batches."""
    gen = torch.Generator().manual_seed(seed)
    batch = rollouts(policy, task, pairs, batch_size, group_size, gen, temperature)
    whole = flat_grad(policy, pg_loss(policy, task, batch))
    steps = batch_size // micro_batch_size
    accumulated = [torch.zeros_like(g) for g in whole]
    for k in range(steps):
        part = {key: v[k * micro_batch_size : (k + 1) * micro_batch_size] for key, v in batch.items()}
        for acc, g in zip(accumulated, flat_grad(policy, pg_loss(policy, task, part) / steps)):
            acc += g
    diff = max(float((a - w).abs().max()) for a, w in zip(accumulated, whole))
    scale = max(float(w.abs().max()) for w in whole)
    return {
        "batch_size": batch_size,
        "micro_batch_size": micro_batch_size,
        "steps": steps,
        "max_abs_difference": diff,
        "max_abs_gradient": scale,
        "relative": diff / scale if scale else 0.0,
    }
