"""Lab 04 on a bandit: entropy collapse, vanishing gradients and reward hacking.

A stateless k-armed bandit: the policy is a small MLP from one fixed state vector to action
logits, trained by REINFORCE with a batch-mean baseline and Adam. Each study returns one row
per (setting, seed, step), with the columns in `COLUMNS` (plus `p3`.. when a study has more
than three arms). Everything runs on the CPU and is deterministic per seed: the seed fixes
the initial weights (`torch.manual_seed`, inside `fork_rng` so the caller's RNG is untouched)
and an explicit generator draws the actions and any reward noise.

Configuration is the `bandit:` block of config/config.yaml (see config/bandit.defaults.yaml):
shared keys at the top, then per study a `settings` mapping (name -> lr, entropy_coef and
optional overrides of the shared keys) and the study's own keys. `run_study` merges the block
it is given over `DEFAULTS`, so a partial block works too.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import torch
from torch import nn

from mathrl.atomic import atomic_write
from mathrl.bandit_config import (  # noqa: F401 - re-exported
    BANDIT_STUDIES,
    COLUMNS,
    DEFAULTS,
    SETTING_DEFAULTS,
    SHARED_KEYS,
    converged_to,
    proxy_scores,
    resolve,
    study_seeds,
)

class SimplePolicy(nn.Module):
    """MLP from a state vector to action logits. The last layer starts at zero weights with
    bias `init_logits` (default 0), so the initial policy is softmax(init_logits): uniform
    unless told otherwise, whatever the seed."""

    def __init__(self, state_dim: int, hidden: int, n_actions: int, init_logits=None):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(state_dim, hidden), nn.Tanh())
        self.head = nn.Linear(hidden, n_actions)
        nn.init.zeros_(self.head.weight)
        with torch.no_grad():
            self.head.bias.copy_(torch.zeros(n_actions) if init_logits is None else torch.tensor(init_logits))

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(state))


def fit_proxy(lengths, rewards, labelled_arms) -> torch.Tensor:
    """`proxy_scores` as a float32 tensor, the reward signal of the simulation."""
    return torch.tensor(proxy_scores(lengths, rewards, labelled_arms), dtype=torch.float64).float()


def train_seed(run: dict, seed: int, signal, n_arms: int, init_logits=None) -> list[dict]:
    """Train one policy for run['steps'] steps; return one metrics dict per step.

    `signal(actions, step, gen) -> (rewards, extras)` gives the rewards the policy is
    trained on and the row's `phase`, `true_reward` and `proxy_reward`.
    REINFORCE with the batch-mean baseline: advantage = reward - mean reward of the batch
    (no learned value, no std normalisation); loss = -mean(logp * adv) - entropy_coef * H,
    where H is the entropy of the full action distribution (nats)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        policy = SimplePolicy(run["state_dim"], run["hidden"], n_arms, init_logits)
    opt = torch.optim.Adam(policy.parameters(), lr=run["lr"])
    gen = torch.Generator().manual_seed(seed)
    state = torch.ones(run["state_dim"])
    rows = []
    for step in range(run["steps"]):
        logp = torch.log_softmax(policy(state), dim=-1)
        probs = logp.exp()
        entropy = -(probs * logp).sum()
        actions = torch.multinomial(probs.detach(), run["batch_size"], replacement=True, generator=gen)
        rewards, extras = signal(actions, step, gen)
        adv = rewards - rewards.mean()
        loss = -(logp[actions] * adv).mean() - run["entropy_coef"] * entropy
        opt.zero_grad()
        loss.backward()
        grad_norm = torch.sqrt(sum(p.grad.pow(2).sum() for p in policy.parameters())).item()
        opt.step()
        p = probs.detach().tolist()
        rows.append({"step": step, "entropy": entropy.item(),
                     **{f"p{i}": p[i] for i in range(n_arms)}, "loss": loss.item(), "grad_norm": grad_norm,
                     "reward_std": rewards.std(unbiased=False).item(), "reward_mean": rewards.mean().item(),
                     **extras})
    return rows


def _noisy(base: torch.Tensor, noise: float, gen: torch.Generator) -> torch.Tensor:
    return base + noise * torch.randn(base.shape, generator=gen) if noise > 0 else base


def _study_signal(name: str, study: dict, run: dict, arm_rewards: torch.Tensor):
    """The study's reward signal (see `train_seed`), its number of arms and initial logits.
    `true_reward` is the mean noiseless arm reward of the batch; `proxy_reward` the mean
    proxy score (reward hacking only, NaN elsewhere)."""
    noise = run["reward_noise"]
    if name == "entropy_collapse":
        def signal(actions, step, gen):
            true = arm_rewards[actions]
            return _noisy(true, noise, gen), {"phase": "", "true_reward": true.mean().item(), "proxy_reward": math.nan}
        return signal, len(arm_rewards), run.get("init_logits")  # a biased start, when the setting gives one
    if name == "gradient_vanishing":
        def signal(actions, step, gen):
            true = arm_rewards[actions]
            extras = {"phase": "diverse", "true_reward": true.mean().item(), "proxy_reward": math.nan}
            # Every reward equal: the advantage and the policy gradient are exactly 0 (Adam's
            # momentum still moves the weights a little; grad_norm shows the vanishing).
            if (step // study["phase_steps"]) % 2 == 1:
                extras["phase"] = "homogeneous"
                return torch.full_like(true, float(study["homogeneous_reward"])), extras
            return _noisy(true, noise, gen), extras
        return signal, len(arm_rewards), None
    n_arms = len(study["true_rewards"])
    if len(study["arm_lengths"]) != n_arms or len(study["init_logits"]) != n_arms:
        raise ValueError(f"reward_hacking: true_rewards, arm_lengths and init_logits need one entry per arm ({n_arms})")
    if not all(0 <= a < n_arms for a in study["labelled_arms"]):
        raise ValueError(f"reward_hacking: labelled_arms {study['labelled_arms']} must be arms 0..{n_arms - 1}")
    true_rewards = torch.tensor(study["true_rewards"], dtype=torch.float32)
    proxy = fit_proxy(study["arm_lengths"], study["true_rewards"], study["labelled_arms"])

    def signal(actions, step, gen):
        score = proxy[actions]  # the policy is trained on the proxy score, never the true reward
        return _noisy(score, noise, gen), {"phase": "", "true_reward": true_rewards[actions].mean().item(),
                                           "proxy_reward": score.mean().item()}
    return signal, n_arms, study["init_logits"]


def run_study(name: str, cfg: dict | None = None) -> pd.DataFrame:
    """Run study `name` (one of BANDIT_STUDIES) for every setting and seed of the `bandit`
    block `cfg`; one row per setting, seed and step."""
    if name not in BANDIT_STUDIES:
        raise ValueError(f"unknown bandit study {name!r}; allowed: {', '.join(BANDIT_STUDIES)}")
    cfg = resolve(cfg)
    study = cfg["studies"][name]
    arm_rewards = torch.tensor(cfg["arm_rewards"], dtype=torch.float32)
    frames = []
    for setting, overrides in study["settings"].items():
        run = {**{k: cfg[k] for k in (*SHARED_KEYS, "state_dim")}, **SETTING_DEFAULTS, **overrides}
        signal, n_arms, init_logits = _study_signal(name, study, run, arm_rewards)
        for seed in study_seeds(cfg, name):
            df = pd.DataFrame(train_seed(run, int(seed), signal, n_arms, init_logits))
            df.insert(0, "seed", int(seed))
            df.insert(0, "setting", setting)
            df.insert(0, "study", name)
            df["lr"], df["entropy_coef"] = float(run["lr"]), float(run["entropy_coef"])
            frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    extra_p = sorted((c for c in df.columns if c[0] == "p" and c[1:].isdigit() and c not in COLUMNS),
                     key=lambda c: int(c[1:]))
    order = COLUMNS[:9] + extra_p + COLUMNS[9:]
    return df[order]


def write_study(df: pd.DataFrame, path: str | Path) -> Path:
    """Write `df` as CSV atomically (mathrl.atomic)."""
    return atomic_write(path, df.to_csv(index=False, lineterminator="\n"))
