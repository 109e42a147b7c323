"""Can a linear critic on the warm-up policy's trunk explain the returns? (the value-clipping study)

Samples groups of 8 answers per prompt from the addition warm-up (temperature 1, exact-match
reward), fits ridge regressions from the final-LayerNorm hidden state at each answer-predicting
position to the return (the reward, for every answer token), and prints the explained variance on
a held-out batch; then two oracles on that batch: the prompt's leave-one-out group success rate,
and that rate zeroed once a sampled digit is wrong (what a critic that sees its prefix's
correctness could reach). Last, the same for the dense per-digit signal of `reward_placement:
per_token` (each right answer token earns 1/(W+1); the return from a token is what is still to be
got right): the ridge critic, and a critic that knows only the answer position (the mean return
of each position), which is how much of the explained variance the position alone gives.

    .venv/bin/python scripts/critic_probe.py [--config FILE]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from mathrl.engine.rewards import RewardSpec, compute_rewards, token_rewards
from mathrl.engine.sft import load_policy
from mathrl.engine.tasks import VOCAB_SIZE, answer_mask, read_problems, task_of
from mathrl.pipeline.config import DEFAULT_CONFIG, load_config
from mathrl.pipeline.layout import problems_file, sft_checkpoint

G, PROMPTS, TRAIN_BATCHES = 8, 64, 6


def sample(policy, task, pairs, spec, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    p = pairs[torch.randint(len(pairs), (PROMPTS,), generator=g)].repeat_interleave(G, 0)
    prompts, target = task.encode_prompts(p[:, 0], p[:, 1]), task.encode_answers(p[:, 0], p[:, 1])
    with torch.no_grad():
        tokens = policy.generate(
            prompts[::G],
            task.answer_len,
            noise=torch.rand(len(p), task.answer_len, VOCAB_SIZE, generator=g),
            group_size=G,
        )
        _, hidden = policy.forward_shared(prompts[::G], tokens, G, return_hidden=True)
    rewards, _ = compute_rewards(spec, tokens, target)
    return {
        "tokens": tokens,
        "target": target,
        "hidden": hidden,
        "r": rewards.float(),
        "mask": answer_mask(tokens).bool(),
    }


def explained(y: np.ndarray, pred: np.ndarray) -> float:
    return float(1 - np.var(y - pred) / np.var(y))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", action="append", default=[])
    cfg = load_config([DEFAULT_CONFIG, *ap.parse_args().config])
    torch.manual_seed(0)
    policy, _ = load_policy(sft_checkpoint(cfg, "add"))
    policy.eval()
    task = task_of(cfg, "add")
    pairs = read_problems(problems_file(cfg, "add", "train"), task)
    spec = RewardSpec(
        kind="exact",
        format_bonus=0.1,
        digit_weight=0.5,
        invalid_penalty=0.5,
        proxy_correct_weight=0.3,
        proxy_bias_weight=0.7,
    )
    train, test = (
        [sample(policy, task, pairs, spec, s) for s in range(TRAIN_BATCHES)],
        sample(policy, task, pairs, spec, 99),
    )

    def features(b):
        returns = b["r"][:, None].expand_as(b["mask"])
        return np.c_[b["hidden"][b["mask"]].numpy(), np.ones(int(b["mask"].sum()))], returns[b["mask"]].numpy()

    X, y = map(np.concatenate, zip(*(features(b) for b in train)))
    Xt, yt = features(test)
    for lam in (0.01, 1.0, 10.0):
        w = np.linalg.solve(X.T @ X + lam * np.eye(X.shape[1]), X.T @ y)
        print(
            f"linear critic (ridge {lam:g}, {len(y)} training tokens): held-out explained variance"
            f" {explained(yt, Xt @ w):.3f}"
        )
    r = test["r"]
    grp = r.view(-1, G)
    loo = ((grp.sum(1, keepdim=True) - grp) / (G - 1)).flatten()
    print(
        f"oracle, the prompt's leave-one-out success rate: explained variance {explained(r.numpy(), loo.numpy()):.3f}"
    )
    right = (test["tokens"] == test["target"]).long().cumprod(1)
    known = torch.cat(
        [torch.ones(len(r), 1, dtype=torch.long), right[:, :-1]], 1
    )  # the prefix before each token is right
    m = test["mask"]
    values, returns = (known.float() * loo[:, None])[m], r[:, None].expand_as(m)[m]
    print(
        "oracle, that rate zeroed once a sampled digit is wrong: explained variance"
        f" {explained(returns.numpy(), values.numpy()):.3f}"
    )

    def dense(b):  # returns to go of the per-token rewards, and each token's position, over real answer tokens
        r = token_rewards(b["tokens"], b["target"]) * b["mask"]
        togo = r.flip(1).cumsum(1).flip(1)
        pos = torch.arange(r.shape[1]).expand_as(r)
        return (
            np.c_[b["hidden"][b["mask"]].numpy(), np.ones(int(b["mask"].sum()))],
            togo[b["mask"]].numpy(),
            pos[b["mask"]].numpy(),
        )

    X, y, pos = map(np.concatenate, zip(*(dense(b) for b in train)))
    Xt, yt, post = dense(test)
    w = np.linalg.solve(X.T @ X + 1.0 * np.eye(X.shape[1]), X.T @ y)
    print(f"per-token returns: linear critic (ridge 1) held-out explained variance {explained(yt, Xt @ w):.3f}")
    by_pos = {p: y[pos == p].mean() for p in np.unique(pos)}
    print(
        "per-token returns: the mean return of each answer position, explained variance"
        f" {explained(yt, np.array([by_pos[p] for p in post])):.3f}"
    )


if __name__ == "__main__":
    main()
