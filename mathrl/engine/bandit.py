"""Lab 04 on a bandit: entropy collapse, vanishing gradients and reward hacking.

A stateless k-armed bandit: the policy is a small MLP from one fixed state vector to action
logits, trained by REINFORCE with a batch-mean baseline and Adam. Each study returns one row
per (setting, seed, step), with the columns in `COLUMNS` (plus `p3`.. when a study has more
than three arms). Everything runs on the CPU and is deterministic per seed: the seed fixes
the initial weights (`torch.manual_seed`, inside `fork_rng` so the caller's RNG is untouched)
and an explicit generator draws the actions and any reward noise. All seeds of a setting are
trained together, their weights stacked along a leading seed axis (`train_seeds`): one batched
forward, backward and Adam step per step instead of one per seed, with each seed's results
those of training it alone.

Configuration is the `bandit:` block of config/config.yaml (defaults: config/config.schema.yaml):
shared keys at the top, then per study a `settings` mapping (name -> lr, entropy_coef and
optional overrides of the shared keys) and the study's own keys. `run_study` merges the block
it is given over `DEFAULTS`, so a partial block works too.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from mathrl.pipeline.atomic import atomic_write
from mathrl.pipeline.bandit_config import (  # noqa: F401 - re-exported
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


def init_params(seeds, state_dim: int, hidden: int, n_actions: int, init_logits=None) -> list[torch.Tensor]:
    """Each seed's `SimplePolicy` weights, built under `torch.manual_seed(seed)` (inside
    `fork_rng`), stacked along a leading seed axis: [w1 (S, hidden, state_dim), b1 (S, hidden),
    w2 (S, n_actions, hidden), b2 (S, n_actions)], as leaf tensors that require grad."""
    policies = []
    for seed in seeds:
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            policies.append(SimplePolicy(state_dim, hidden, n_actions, init_logits))
    per_seed = [list(policy.parameters()) for policy in policies]
    return [torch.stack(ps).detach().requires_grad_() for ps in zip(*per_seed)]


def batched_logits(params: list[torch.Tensor], state: torch.Tensor) -> torch.Tensor:
    """`SimplePolicy.forward` of S policies at once (`params` as from `init_params`) on the one
    state vector: logits [S, n_actions]."""
    w1, b1, w2, b2 = params
    hidden = torch.tanh(w1 @ state + b1)
    return (w2 @ hidden.unsqueeze(-1)).squeeze(-1) + b2


def reinforce_loss(logp, actions, rewards, entropy, entropy_coef: float) -> torch.Tensor:
    """Per-seed REINFORCE loss with the batch-mean baseline, for logp [S, A], actions and
    rewards [S, B], entropy [S]: advantage = reward - mean reward of the seed's batch (no
    learned value, no std normalisation); loss = -mean(logp[action] * adv) - entropy_coef * H."""
    adv = rewards - rewards.mean(dim=-1, keepdim=True)
    return -(logp.gather(-1, actions) * adv).mean(dim=-1) - entropy_coef * entropy


def per_seed_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The L2 norm over all parameters of each seed's gradient, [S], for stacked grads [S, ...]."""
    return torch.sqrt(sum(g.pow(2).flatten(1).sum(dim=1) for g in grads))


def sample_actions(probs: torch.Tensor, batch_size: int, gens: list[torch.Generator]) -> torch.Tensor:
    """`batch_size` actions per seed, [S, B], each seed's row drawn with its own generator."""
    return torch.stack([torch.multinomial(p, batch_size, replacement=True, generator=g) for p, g in zip(probs, gens)])


def train_seeds(run: dict, seeds: list[int], signal, n_arms: int, init_logits=None) -> pd.DataFrame:
    """Train one policy per seed for run['steps'] steps, all seeds together; return one row
    per (seed, step), seed-major.

    The seeds share nothing but the tensors they are stacked in: each has its own initial
    weights (`init_params`), its own generator (seeded with the seed) for the actions and the
    reward noise, and its own REINFORCE loss (`reinforce_loss`, H the entropy of its full
    action distribution, in nats). One Adam over the stacked parameters, stepped on the sum of
    the seeds' losses, is exactly one Adam per seed: each seed's gradient is that of its own
    loss, and Adam is elementwise.

    `signal(actions, step, gens) -> (rewards, extras)` maps actions [S, B] to the rewards
    the policies are trained on and the rows' `phase` (one string for the step) and
    `true_reward` and `proxy_reward` (one value per seed)."""
    params = init_params(seeds, run["state_dim"], run["hidden"], n_arms, init_logits)
    opt = torch.optim.Adam(params, lr=run["lr"])
    gens = [torch.Generator().manual_seed(seed) for seed in seeds]
    state = torch.ones(run["state_dim"])
    history = []
    for step in range(run["steps"]):
        logp = torch.log_softmax(batched_logits(params, state), dim=-1)
        probs = logp.exp()
        entropy = -(probs * logp).sum(dim=-1)
        actions = sample_actions(probs.detach(), run["batch_size"], gens)
        rewards, extras = signal(actions, step, gens)
        loss = reinforce_loss(logp, actions, rewards, entropy, run["entropy_coef"])
        opt.zero_grad()
        loss.sum().backward()
        grad_norm = per_seed_norm([p.grad for p in params])
        opt.step()
        history.append(
            {
                "entropy": entropy.detach(),
                "probs": probs.detach(),
                "loss": loss.detach(),
                "grad_norm": grad_norm,
                "reward_std": rewards.std(dim=-1, correction=0),
                "reward_mean": rewards.mean(dim=-1),
                **extras,
            }
        )
    return _history_frame(history, seeds, n_arms)


def _history_frame(history: list[dict], seeds: list[int], n_arms: int) -> pd.DataFrame:
    """`train_seeds`' per-step records as a frame, one row per (seed, step), seed-major."""
    n_steps = len(history)

    def column(key):  # [steps, S] -> seed-major float64
        return torch.stack([h[key] for h in history]).T.reshape(-1).double().numpy()

    probs = torch.stack([h["probs"] for h in history]).transpose(0, 1).reshape(-1, n_arms).double().numpy()
    return pd.DataFrame(
        {
            "seed": np.repeat(np.asarray(seeds, dtype=np.int64), n_steps),
            "step": np.tile(np.arange(n_steps, dtype=np.int64), len(seeds)),
            "entropy": column("entropy"),
            **{f"p{i}": probs[:, i] for i in range(n_arms)},
            **{key: column(key) for key in ("loss", "grad_norm", "reward_std", "reward_mean")},
            "phase": [h["phase"] for h in history] * len(seeds),
            **{key: column(key) for key in ("true_reward", "proxy_reward")},
        }
    )


def _noisy(base: torch.Tensor, noise: float, gens: list[torch.Generator]) -> torch.Tensor:
    """`base` [S, B] plus Gaussian noise of std `noise`, each seed's row drawn with its own generator."""
    if noise <= 0:
        return base
    return base + noise * torch.stack([torch.randn(row.shape, generator=g) for row, g in zip(base, gens)])


def study_signal(name: str, study: dict, run: dict, arm_rewards: torch.Tensor):
    """The study's reward signal (see `train_seeds`), its number of arms and initial logits.
    `true_reward` is the mean noiseless arm reward of each seed's batch; `proxy_reward` the
    mean proxy score (reward hacking only, NaN elsewhere)."""
    noise = run["reward_noise"]

    def no_proxy(actions):
        return torch.full((len(actions),), math.nan)

    if name == "entropy_collapse":

        def signal(actions, step, gens):
            true = arm_rewards[actions]
            return _noisy(true, noise, gens), {
                "phase": "",
                "true_reward": true.mean(dim=-1),
                "proxy_reward": no_proxy(actions),
            }

        return signal, len(arm_rewards), run.get("init_logits")  # a biased start, when the setting gives one
    if name == "gradient_vanishing":

        def signal(actions, step, gens):
            true = arm_rewards[actions]
            extras = {"phase": "diverse", "true_reward": true.mean(dim=-1), "proxy_reward": no_proxy(actions)}
            # Every reward equal: the advantage and the policy gradient are exactly 0 (Adam's
            # momentum still moves the weights a little; grad_norm shows the vanishing).
            if (step // study["phase_steps"]) % 2 == 1:
                extras["phase"] = "homogeneous"
                return torch.full_like(true, float(study["homogeneous_reward"])), extras
            return _noisy(true, noise, gens), extras

        return signal, len(arm_rewards), None
    n_arms = len(study["true_rewards"])
    if len(study["arm_lengths"]) != n_arms or len(study["init_logits"]) != n_arms:
        raise ValueError(f"reward_hacking: true_rewards, arm_lengths and init_logits need one entry per arm ({n_arms})")
    if not all(0 <= a < n_arms for a in study["labelled_arms"]):
        raise ValueError(f"reward_hacking: labelled_arms {study['labelled_arms']} must be arms 0..{n_arms - 1}")
    true_rewards = torch.tensor(study["true_rewards"], dtype=torch.float32)
    proxy = fit_proxy(study["arm_lengths"], study["true_rewards"], study["labelled_arms"])

    def signal(actions, step, gens):
        score = proxy[actions]  # the policy is trained on the proxy score, never the true reward
        return _noisy(score, noise, gens), {
            "phase": "",
            "true_reward": true_rewards[actions].mean(dim=-1),
            "proxy_reward": score.mean(dim=-1),
        }

    return signal, n_arms, study["init_logits"]


def run_study(name: str, cfg: dict | None = None) -> pd.DataFrame:
    """Run study `name` (one of BANDIT_STUDIES) for every setting and seed of the `bandit`
    block `cfg`, all seeds of a setting trained together (`train_seeds`); one row per
    setting, seed and step."""
    if name not in BANDIT_STUDIES:
        raise ValueError(f"unknown bandit study {name!r}; allowed: {', '.join(BANDIT_STUDIES)}")
    cfg = resolve(cfg)
    study = cfg["studies"][name]
    arm_rewards = torch.tensor(cfg["arm_rewards"], dtype=torch.float32)
    seeds = study_seeds(cfg, name)
    frames = []
    for setting, overrides in study["settings"].items():
        run = {**{k: cfg[k] for k in (*SHARED_KEYS, "state_dim")}, **SETTING_DEFAULTS, **overrides}
        signal, n_arms, init_logits = study_signal(name, study, run, arm_rewards)
        df = train_seeds(run, seeds, signal, n_arms, init_logits)
        df.insert(0, "setting", setting)
        df.insert(0, "study", name)
        df["lr"], df["entropy_coef"] = float(run["lr"]), float(run["entropy_coef"])
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    extra_p = sorted(
        (c for c in df.columns if c[0] == "p" and c[1:].isdigit() and c not in COLUMNS), key=lambda c: int(c[1:])
    )
    order = COLUMNS[:9] + extra_p + COLUMNS[9:]
    return df[order]


def write_study(df: pd.DataFrame, path: str | Path) -> Path:
    """Write `df` as CSV atomically (mathrl.pipeline.atomic)."""
    return atomic_write(path, csv_text(df))


CSV_SPECIAL = (",", '"', "\n", "\r")  # a cell holding one of these is quoted by `to_csv`


def csv_text(df: pd.DataFrame) -> str:
    """`df.to_csv(index=False, lineterminator="\n")`, the same text, built column by column
    (`csv_cells`). A frame with a column of another kind, a cell that would be quoted, or a
    single column (whose empty cells `to_csv` quotes) goes to `to_csv` itself."""
    columns = [csv_cells(df[name]) for name in df.columns]
    header = [str(name) for name in df.columns]
    plain = all(c is not None for c in columns) and not any(s in cell for cell in header for s in CSV_SPECIAL)
    if len(columns) < 2 or not plain:
        return df.to_csv(index=False, lineterminator="\n")
    return "\n".join([",".join(header), *map(",".join, zip(*columns))]) + "\n"


def csv_cells(column: pd.Series) -> list[str] | None:
    """A column's cells as `to_csv` writes them, each distinct value formatted once: a float64
    as its repr (the shortest text that reads back as the same number; its bits tell -0.0 from
    0.0), NaN as an empty cell, an integer or a string as str. None for any other column, or a
    string column with a missing value or a cell that `to_csv` would quote."""
    values = column.to_numpy()
    if values.dtype == np.float64:
        codes, distinct = pd.factorize(values.view(np.int64))
        texts = ["" if math.isnan(x) else repr(x) for x in distinct.view(np.float64).tolist()]
    elif values.dtype.kind in "iu" or (pd.api.types.is_string_dtype(column) and not column.isna().any()):
        codes, distinct = pd.factorize(values)
        texts = [str(x) for x in distinct.tolist()]
        if values.dtype.kind not in "iu" and any(s in text for text in texts for s in CSV_SPECIAL):
            return None
    else:
        return None
    return np.asarray(texts, dtype=object)[codes].tolist()
