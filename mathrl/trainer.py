"""The RL trainer: sample, reward, estimate advantages, update, monitor, snapshot.

One step, read top to bottom in `Trainer.step`:
1. draw prompts for the global batch (groups of `group_size` copies of a prompt) and the
   Gumbel noise for sampling; this rank samples its slice with the KV cache;
2. reward the answers (the training reward; exact-match accuracy is logged regardless);
   with dynamic sampling, groups whose rewards are all equal are replaced by fresh ones;
3. advantages by algorithm: REINFORCE (moving-average baseline), GRPO/DAPO (group
   normalised), RLOO (leave one out), PPO (value head + GAE);
4. for each PPO epoch one optimizer step over the whole batch, accumulated over
   micro-batches; the loss per answer token is
   surrogate + kl_coef * KL(pi || ref) - entropy_coef * entropy (+ value_coef * value loss),
   aggregated per token or per sequence and divided by a global count, so micro-batches
   and ranks add up exactly to the large-batch gradient. The KL penalty sits in the loss
   (as in GRPO) for every algorithm, so the KL studies compare like with like;
5. a non-finite loss or gradient never reaches the weights: the update is skipped (or the
   run stopped) and an alert recorded;
6. metrics reduced over ranks; rank 0 logs, writes and snapshots.

REINFORCE runs through the same clipped surrogate with old log-probs equal to the current
ones: the ratio is 1, the clip inactive, and the gradient is exactly -A * grad log pi.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import json
import math
import os
import platform
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import mathrl
from mathrl import faults, snapshot
from mathrl.atomic import atomic_write
from mathrl.config import ConfigError
from mathrl.console import console_line
from mathrl.control import MovingAverageBaseline, entropy_coef_at, lr_factor, make_kl_controller
from mathrl.distributed import Dist, all_sum, barrier
from mathrl.evaluation import greedy_correct
from mathrl.losses import (
    aggregate,
    clipped_surrogate,
    explained_variance,
    gae_advantages,
    group_advantages,
    kl_estimate,
    rloo_advantages,
    token_entropy,
    token_logprobs,
    value_loss,
)
from mathrl.model import GPT, GPTConfig, ValueHead, gpt_config
from mathrl.monitor import StabilityMonitor
from mathrl.optim import make_optimizer, set_lr
from mathrl.rewards import RewardSpec, compute_rewards
from mathrl.tasks import END, VOCAB_SIZE, Task, filter_by_ndigit, read_problems

# metrics.csv columns fixed by DESIGN.md, then our extras.
METRICS = [
    "step", "samples", "reward_mean", "reward_std", "accuracy", "eval_accuracy", "entropy", "kl",
    "kl_coef", "grad_norm", "policy_loss", "value_loss", "clip_frac", "frac_zero_std", "lr", "seconds",
]  # fmt: skip
EXTRAS = [
    "ndigit", "format_rate", "baseline", "entropy_coef", "value_rmse", "explained_variance",
    "skipped", "sample_seconds", "update_seconds",
]  # fmt: skip
# Version of the snapshot layout (3: optimizer state of torch.optim).
SNAPSHOT_FORMAT = 3
# Settings that may differ when a run resumes (they do not change what was computed so far).
RESUMABLE_CHANGES = {"steps", "log_every", "eval_every", "snapshot_every", "wandb", "device", "fault_nan_step", "nan_policy"}


def task_of(cfg: dict, name: str) -> Task:
    t = cfg["tasks"][name]
    return Task(op=t["op"], ndigit=t["ndigit"], reverse=t["reverse"])


def problems_dir(cfg: dict, task_name: str) -> Path:
    return Path(cfg["results"]) / "problems" / task_name


def sft_checkpoint(cfg: dict, task_name: str) -> Path:
    return Path(cfg["results"]) / "sft" / task_name / "model.pt"


def load_policy(path: Path) -> tuple[GPT, dict]:
    """A policy from a warm-up checkpoint (written by `mathrl sft`)."""
    if not Path(path).is_file():
        raise ConfigError(f"init: checkpoint {path} does not exist (run `mathrl sft` for the task first)")
    ckpt = snapshot.decode(Path(path).read_bytes(), str(path))
    model = GPT(GPTConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    return model, ckpt


class ActorCritic(nn.Module):
    """The policy and, for PPO, a value head on its final hidden state (shared trunk)."""

    def __init__(self, policy: GPT, value_head: ValueHead | None):
        super().__init__()
        self.policy = policy
        self.value_head = value_head

    def forward(self, idx, answers=None, group_size: int = 1):
        """(logits, values or None) over tokens idx (B, T); with answers, idx holds the distinct
        prompts and both are at the answer-predicting positions only (GPT.forward_shared)."""
        if answers is not None:
            if self.value_head is None:
                return self.policy.forward_shared(idx, answers, group_size), None
            logits, hidden = self.policy.forward_shared(idx, answers, group_size, return_hidden=True)
            return logits, self.value_head(hidden)
        if self.value_head is None:
            return self.policy(idx), None
        logits, hidden = self.policy(idx, return_hidden=True)
        return logits, self.value_head(hidden)


def answer_mask(tokens: torch.Tensor) -> torch.Tensor:
    """1.0 for answer tokens up to and including the first end token."""
    is_end = (tokens == END).long()  # (B, L)
    return ((is_end.cumsum(1) - is_end) == 0).float()


class Trainer:
    """One RL run. `settings` is the fully resolved train block of the run."""

    def __init__(self, cfg: dict, run_id: str, settings: dict, run_dir: Path, d: Dist, experiment: str | None = None):
        self.cfg, self.run_id, self.s, self.dir, self.d, self.experiment = cfg, run_id, settings, Path(run_dir), d, experiment
        s = settings
        self.task = task_of(cfg, s["task"])
        pdir = problems_dir(cfg, s["task"])
        for split in ("train", "test"):
            if not (pdir / f"{split}.txt").is_file():
                raise ConfigError(f"task {s['task']}: {pdir / f'{split}.txt'} is missing (run `mathrl problems` first)")
        self.train_pairs = read_problems(pdir / "train.txt", self.task)
        test = read_problems(pdir / "test.txt", self.task)
        self.test_pairs = test[: s["eval_size"]] if s["eval_size"] else test
        self.pools: dict[int, torch.Tensor] = {}

        if s["init"] == "random":  # lab 04: RL from a random policy sees only zero rewards
            torch.manual_seed(s["seed"])
            policy, self.init_meta = GPT(gpt_config(cfg["sft"][s["task"]]["preset"], VOCAB_SIZE, self.task.seq_len)), {}
            self.init_path = "random"
        else:
            self.init_path = Path(s["init"]) if s["init"] else sft_checkpoint(cfg, s["task"])
            policy, self.init_meta = load_policy(self.init_path)
        # What the run started from: a snapshot trained from another checkpoint is not this run.
        self.init_digest = "random" if self.init_path == "random" else hashlib.sha256(Path(self.init_path).read_bytes()).hexdigest()[:16]
        self.model_config = asdict(policy.config)
        self.ref = copy.deepcopy(policy).to(d.device).eval().requires_grad_(False)
        head = ValueHead(policy.config.n_embd) if s["algorithm"] == "ppo" else None
        self.net = ActorCritic(policy, head).to(d.device)
        self.ddp = DDP(self.net, device_ids=[d.device.index] if d.device.type == "cuda" else None) if d.active else self.net
        self.opt = make_optimizer(self.net.parameters(), s["optimizer"], lr=s["lr"], weight_decay=s["weight_decay"],
                                  betas=(s["adam_beta1"], s["adam_beta2"]), momentum=s["momentum"])  # fmt: skip
        self.reward_spec = RewardSpec(
            kind=s["reward"], format_bonus=s["format_bonus"], digit_weight=s["digit_weight"],
            invalid_penalty=s["invalid_penalty"], proxy_correct_weight=s["proxy_correct_weight"],
            proxy_bias_weight=s["proxy_bias_weight"],
        )  # fmt: skip
        # Randomness is rank-independent: every rank draws the same global prompts and noise.
        self.prompt_gen = torch.Generator().manual_seed(s["seed"])
        self.noise_gen = torch.Generator().manual_seed(s["seed"] + 7919)
        self.baseline = MovingAverageBaseline(decay=s["baseline_decay"])
        self.kl_ctl = make_kl_controller(s["kl_controller"], coef=s["kl_coef"], target=s["kl_target"], horizon=s["kl_horizon"])
        self.monitor = StabilityMonitor(
            entropy_min=s["monitor_entropy_min"], kl_max=s["monitor_kl_max"],
            reward_swing=s["monitor_reward_swing"], window=s["monitor_window"],
        )  # fmt: skip
        self.step_no, self.samples, self.rows, self.status = 0, 0, [], "running"
        self.initial_eval: float | None = None
        # Prefix sharing (GPT.forward_shared, generate(group_size=G)): each group's prompt is
        # computed once. MATHRL_NO_PREFIX_SHARING=1 turns it off: a benchmark switch.
        self.share_prefix = os.environ.get("MATHRL_NO_PREFIX_SHARING", "").strip() in ("", "0")

    # ---------------------------------------------------------------- state
    def state(self) -> dict:
        return {
            "format": SNAPSHOT_FORMAT, "run_id": self.run_id, "step": self.step_no, "samples": self.samples,
            "settings": self.s, "model_config": self.model_config, "net": self.net.state_dict(),
            "opt": self.opt.state_dict(), "prompt_gen": self.prompt_gen.get_state(),
            "noise_gen": self.noise_gen.get_state(), "baseline": self.baseline.state_dict(),
            "kl_ctl": self.kl_ctl.state_dict(), "monitor": self.monitor.state_dict(), "rows": self.rows,
            "initial_eval": self.initial_eval, "status": self.status, "init_digest": self.init_digest,
        }  # fmt: skip

    def restore(self, st: dict, where: Path) -> None:
        """Resume from a snapshot, refusing one written for another model or run settings."""
        if st.get("format") != SNAPSHOT_FORMAT:
            raise snapshot.SnapshotError(
                f"{where}: snapshot format {st.get('format')!r} is not {SNAPSHOT_FORMAT} (an older mathrl wrote it); "
                f"remove {self.dir} to start over"
            )
        if st.get("model_config") != self.model_config:
            raise snapshot.SnapshotError(
                f"{where}: snapshot model {st.get('model_config')} does not match this run's model {self.model_config}; "
                f"remove {self.dir} to start over"
            )
        if st.get("init_digest") != self.init_digest:
            raise snapshot.SnapshotError(
                f"{where}: snapshot was trained from another start checkpoint than {self.init_path} "
                f"(digest {st.get('init_digest')} vs {self.init_digest}); remove {self.dir} to start over"
            )
        changed = {k for k in set(st["settings"]) | set(self.s) if k not in RESUMABLE_CHANGES and st["settings"].get(k) != self.s.get(k)}
        if changed:
            diff = ", ".join(f"{k}: snapshot {st['settings'].get(k)!r} vs now {self.s.get(k)!r}" for k in sorted(changed))
            raise snapshot.SnapshotError(f"{where}: snapshot was written with other settings ({diff}); remove {self.dir} to start over")
        self.net.load_state_dict(st["net"])
        self.opt.load_state_dict(st["opt"])
        self.prompt_gen.set_state(st["prompt_gen"])
        self.noise_gen.set_state(st["noise_gen"])
        self.baseline.load_state_dict(st["baseline"])
        self.kl_ctl.load_state_dict(st["kl_ctl"])
        self.monitor.load_state_dict(st["monitor"])
        self.step_no, self.samples, self.rows = st["step"], st["samples"], list(st["rows"])
        self.initial_eval, self.status = st["initial_eval"], st["status"]
        if self.status == "complete" and self.step_no < self.s["steps"]:
            self.status = "running"  # the same run extended to more steps

    # ---------------------------------------------------------------- sampling
    def ndigit_at(self, step: int) -> int:
        start = self.s["curriculum_start"]
        if start is None:
            return self.task.ndigit
        return min(self.task.ndigit, start + (step - 1) // self.s["curriculum_every"])

    def pool(self, nd: int) -> torch.Tensor:
        if nd not in self.pools:
            pairs = self.train_pairs if nd == self.task.ndigit else filter_by_ndigit(self.train_pairs, nd)
            if len(pairs) == 0:
                raise ConfigError(f"curriculum: no training problems with {nd} digits in {problems_dir(self.cfg, self.s['task'])}")
            self.pools[nd] = pairs
        return self.pools[nd]

    @torch.no_grad()
    def draw(self, nd: int) -> dict:
        """Sample this rank's slice of one global batch of rollouts."""
        s, d, task = self.s, self.d, self.task
        G, L = s["group_size"], task.answer_len
        n_groups = s["batch_size"] // G
        n_local = n_groups // d.world_size
        pool = self.pool(nd)
        idx = torch.randint(len(pool), (n_groups,), generator=self.prompt_gen)
        noise = torch.rand(s["batch_size"], L, VOCAB_SIZE, generator=self.noise_gen)  # (B_global, L, V)
        lo = d.rank * n_local
        pairs = pool[idx[lo : lo + n_local]].repeat_interleave(G, dim=0)  # (B, 2)
        prompts = task.encode_prompts(pairs[:, 0], pairs[:, 1]).to(d.device)  # (B, P)
        target = task.encode_answers(pairs[:, 0], pairs[:, 1]).to(d.device)  # (B, L)
        u = noise[lo * G : (lo + n_local) * G].to(d.device)
        if self.share_prefix:  # prefill each group's prompt once
            tokens = self.net.policy.generate(prompts[::G], L, temperature=s["temperature"], noise=u, group_size=G)  # (B, L)
        else:
            tokens = self.net.policy.generate(prompts, L, temperature=s["temperature"], noise=u)  # (B, L)
        rewards, checks = compute_rewards(self.reward_spec, tokens, target)
        return {"prompts": prompts, "tokens": tokens, "rewards": rewards.float(), **{k: v.float() for k, v in checks.items()}}

    def collect(self, nd: int) -> tuple[dict, int]:
        """One batch of rollouts; with dynamic sampling, homogeneous groups are replaced.

        Refill rounds are decided on global counts so that every rank runs the same number
        of rounds (and collectives); each rank then keeps its own informative groups first."""
        s, G = self.s, self.s["group_size"]
        batch = self.draw(nd)
        sampled = s["batch_size"]
        if not s["dynamic_sampling"]:
            return batch, sampled
        n_local = len(batch["rewards"]) // G
        parts = [batch]
        for _ in range(s["dynamic_sampling_rounds"] - 1):
            informative = sum(int((p["rewards"].view(-1, G).std(1, unbiased=False) > 0).sum()) for p in parts)
            if all_sum(self.d, torch.tensor([informative])).item() >= n_local * self.d.world_size:
                break
            parts.append(self.draw(nd))
            sampled += s["batch_size"]
        merged = {k: torch.cat([p[k] for p in parts]) for k in batch}
        group_std = merged["rewards"].view(-1, G).std(1, unbiased=False)
        order = torch.argsort((group_std == 0).long(), stable=True)[:n_local]  # informative groups first
        rows = (order[:, None] * G + torch.arange(G)).flatten().to(merged["rewards"].device)
        return {k: v[rows] for k, v in merged.items()}, sampled

    # ---------------------------------------------------------------- one step
    def advantages(self, rewards: torch.Tensor, mask: torch.Tensor, old_values) -> tuple[torch.Tensor, torch.Tensor | None, float]:
        """(B, L) advantages, PPO returns (or None) and the REINFORCE baseline (NaN otherwise)."""
        s, G, algo = self.s, self.s["group_size"], self.s["algorithm"]
        baseline, returns = math.nan, None
        if algo == "reinforce":
            n = all_sum(self.d, torch.tensor([rewards.sum().item(), float(len(rewards))], dtype=torch.float64))
            baseline = self.baseline.update(float(n[0] / n[1]))
            adv = (rewards - baseline)[:, None].expand_as(mask)
        elif algo in ("grpo", "dapo"):
            adv = group_advantages(rewards, G)[:, None].expand_as(mask)
        elif algo == "rloo":
            adv = rloo_advantages(rewards, G)[:, None].expand_as(mask)
        else:  # ppo
            adv, returns = gae_advantages(rewards, old_values, mask, gamma=s["gamma"], lam=s["gae_lambda"])
        adv = adv * mask
        if s["adv_norm"]:
            mean, std = self.global_mean_std(adv, mask)
            adv = (adv - mean) / (std + 1e-8) * mask
        if s["adv_clip"] is not None:
            adv = adv.clamp(-s["adv_clip"], s["adv_clip"])
        return adv, returns, baseline

    def global_mean_std(self, x: torch.Tensor, weight: torch.Tensor) -> tuple[float, float]:
        t = all_sum(self.d, torch.stack([(x * weight).sum(), (x * x * weight).sum(), weight.sum()]).double().cpu())
        mean = float(t[0] / t[2])
        return mean, math.sqrt(max(float(t[1] / t[2]) - mean * mean, 0.0))

    def step(self) -> dict:
        s, d, G = self.s, self.d, self.s["group_size"]
        step = self.step_no + 1
        t0 = time.perf_counter()
        nd = self.ndigit_at(step)
        batch, sampled = self.collect(nd)
        t1 = time.perf_counter()

        raw = batch["rewards"]
        tokens = batch["tokens"]
        mask = answer_mask(tokens)  # (B, L)
        B, P = len(raw), self.task.prompt_len
        micro = s["micro_batch_size"] or B
        # Groups are contiguous rows: with prefix sharing the forwards take each group's prompt
        # once (prompts[::G]) and return outputs at the answer-predicting positions only.
        # Micro-batches must then hold whole groups; otherwise the full-sequence path.
        share = self.share_prefix and micro % G == 0
        uprompts = batch["prompts"][::G]  # (B/G, P)
        inp = None if share else torch.cat([batch["prompts"], tokens], dim=1)[:, :-1]  # (B, P+L-1)

        def answer_outputs(lo: int, hi: int):
            """(logits (b, L, V), values (b, L) or None) that chose answer tokens of rows lo:hi."""
            if share:
                return self.ddp(uprompts[lo // G : hi // G], tokens[lo:hi], G)
            logits, values = self.ddp(inp[lo:hi])
            return logits[:, P - 1 :], None if values is None else values[:, P - 1 :]
        zero_std = (raw.view(-1, G).std(1, unbiased=False) == 0).float().sum()
        mean_r, std_r = self.global_mean_std(raw, torch.ones_like(raw))
        rewards = raw
        if s["reward_norm"]:
            rewards = (rewards - mean_r) / (std_r + 1e-8)
        if s["reward_clip"] is not None:
            rewards = rewards.clamp(-s["reward_clip"], s["reward_clip"])

        with torch.no_grad():
            ref_logits = self.ref.forward_shared(uprompts, tokens, G) if self.share_prefix else self.ref(inp)[:, P - 1 :]
            ref_logp = token_logprobs(ref_logits, tokens)  # (B, L)
            old_logp = old_values = None
            if s["ppo_epochs"] > 1 or s["algorithm"] == "ppo":
                # the training forward's path, so that the first epoch's ratio is exactly 1
                if share:
                    logits, old_values = self.net(uprompts, tokens, G)
                else:
                    logits, values = self.net(inp)
                    logits, old_values = logits[:, P - 1 :], None if values is None else values[:, P - 1 :]
                old_logp = token_logprobs(logits, tokens)
        adv, returns, baseline = self.advantages(rewards, mask, old_values)

        lr = s["lr"] * lr_factor(
            s["lr_schedule"], step - 1, s["steps"], decay_rate=s["lr_decay_rate"], decay_every=s["lr_decay_every"],
            min_factor=s["lr_min_factor"], warmup_steps=s["warmup_steps"],
        )  # fmt: skip
        set_lr(self.opt, lr)
        kl_coef = self.kl_ctl.value
        ent_coef = entropy_coef_at(s["entropy_schedule"], step - 1, s["steps"], s["entropy_coef"], s["entropy_coef_end"])
        den = float(all_sum(d, mask.sum().double().cpu())) if s["loss_agg"] == "token" else float(s["batch_size"])
        eps_low, eps_high = s["clip_eps"], s["clip_eps_high"] if s["clip_eps_high"] is not None else s["clip_eps"]
        # Sums over this rank's tokens/sequences, reduced over ranks below.
        acc = dict.fromkeys(["pg", "ent", "kl", "vloss", "clip", "clip_tokens", "loss_finite"], 0.0)
        acc["loss_finite"] = 1.0
        acc_values = []
        norms, skipped = [], False
        for epoch in range(s["ppo_epochs"]):
            self.opt.zero_grad(set_to_none=True)
            for lo in range(0, B, micro):
                sl = slice(lo, lo + micro)
                sync = lo + micro >= B or not d.active
                with nullcontext() if sync else self.ddp.no_sync():
                    logits, values = answer_outputs(lo, lo + micro)  # (b, L, V): the logits that chose each answer token
                    logp = token_logprobs(logits, tokens[sl])  # (b, L)
                    old = old_logp[sl] if old_logp is not None else logp.detach()
                    pg, clipped = clipped_surrogate(logp, old, adv[sl], eps_low, eps_high)
                    kl = kl_estimate(logp, ref_logp[sl], s["kl_estimator"])
                    ent = token_entropy(logits)
                    per_token = pg + kl_coef * kl - ent_coef * ent
                    m = mask[sl]
                    if values is not None:
                        v = values
                        vl = value_loss(v, old_values[sl], returns[sl], s["value_clip"])
                        per_token = per_token + s["value_coef"] * vl
                        acc["vloss"] += float((vl.detach() * m).sum())
                        if epoch == 0:
                            acc_values.append(v.detach())
                    num, _ = aggregate(per_token, m, s["loss_agg"])
                    loss = num / den * d.world_size
                    if s["fault_nan_step"] == step:
                        loss = loss * float("nan")
                    acc["loss_finite"] = min(acc["loss_finite"], float(torch.isfinite(loss.detach())))
                    loss.backward()
                acc["clip"] += float((clipped.float() * m).sum())
                acc["clip_tokens"] += float(m.sum())
                if epoch == 0:
                    acc["pg"] += float(aggregate(pg.detach(), m, s["loss_agg"])[0])
                    acc["ent"] += float((ent.detach() * m).sum())
                    acc["kl"] += float((kl.detach() * m).sum())
            norm = torch.nn.utils.clip_grad_norm_(self.net.parameters(), s["grad_clip"] or math.inf)
            norms.append(float(norm))
            finite = math.isfinite(norms[-1]) and all_sum(d, torch.tensor([acc["loss_finite"]])).item() == d.world_size
            if not finite:
                self.opt.zero_grad(set_to_none=True)
                skipped = True
                msg = f"non-finite loss or gradient (grad norm {norms[-1]}); update skipped"
                if s["nan_policy"] == "stop":
                    msg = f"non-finite loss or gradient (grad norm {norms[-1]}); run stopped"
                    self.status = "stopped_nonfinite"
                self.monitor.record(step, "nonfinite", norms[-1], msg)
                break
            if epoch == 0:
                faults.in_step(step, d.rank)  # test-only hooks (no-ops unless their env vars are set)
            self.opt.step()
        t2 = time.perf_counter()

        # Reduce the step's statistics over ranks in one collective.
        keys = ["pg", "ent", "kl", "vloss", "clip", "clip_tokens", "tokens", "exact", "format", "zero_std", "groups"]
        local = [acc["pg"], acc["ent"], acc["kl"], acc["vloss"], acc["clip"], acc["clip_tokens"], float(mask.sum()),
                 float(batch["exact"].sum()), float(batch["format_ok"].sum()), float(zero_std), float(B // G)]  # fmt: skip
        tot = dict(zip(keys, all_sum(d, torch.tensor(local, dtype=torch.float64)).tolist()))
        n_seq = s["batch_size"]
        entropy, kl_mean = tot["ent"] / tot["tokens"], tot["kl"] / tot["tokens"]
        value_rmse = ev = math.nan
        if acc_values:
            values0 = torch.cat(acc_values)
            value_rmse = float(((values0 - returns) ** 2 * mask).sum() / mask.sum()) ** 0.5
            ev = float(explained_variance(values0, returns, mask))
        self.samples += sampled
        row = {
            "step": step, "samples": self.samples, "reward_mean": mean_r, "reward_std": std_r,
            "accuracy": tot["exact"] / n_seq, "eval_accuracy": math.nan, "entropy": entropy, "kl": kl_mean,
            "kl_coef": kl_coef, "grad_norm": float(sum(norms) / len(norms)), "policy_loss": tot["pg"] / den,
            "value_loss": tot["vloss"] / tot["clip_tokens"] if s["algorithm"] == "ppo" else math.nan,
            "clip_frac": tot["clip"] / tot["clip_tokens"], "frac_zero_std": tot["zero_std"] / tot["groups"], "lr": lr,
            "ndigit": nd, "format_rate": tot["format"] / n_seq, "baseline": baseline, "entropy_coef": ent_coef,
            "value_rmse": value_rmse, "explained_variance": ev, "skipped": int(skipped),
            "sample_seconds": t1 - t0, "update_seconds": t2 - t1,
        }  # fmt: skip
        if not skipped:
            self.kl_ctl.update(kl_mean)
        for alert in self.monitor.check(step, entropy=entropy, kl=kl_mean, reward_mean=mean_r):
            self.say(f"alert: step {step}: {alert['message']}")
        if skipped:
            self.say(f"alert: step {step}: {self.monitor.alerts[-1]['message']}")
        if step % s["eval_every"] == 0 or step == s["steps"] or self.status != "running":
            row["eval_accuracy"] = self.evaluate()
        row["seconds"] = time.perf_counter() - t0
        self.step_no = step
        self.rows.append(row)
        return row

    def evaluate(self) -> float:
        """Greedy exact-match accuracy on the held-out problems, split over ranks."""
        d = self.d
        mine = self.test_pairs[d.rank :: d.world_size]
        correct = greedy_correct(self.net.policy, self.task, mine, d.device)
        n = all_sum(d, torch.tensor([float(correct.sum()), float(len(correct))], dtype=torch.float64))
        return float(n[0] / n[1])

    # ---------------------------------------------------------------- the run
    def say(self, text: str) -> None:
        if self.d.is_main:
            print(text, flush=True)

    def run(self, on_mismatch: str = "error") -> dict:
        """Train to `steps` (resuming from a snapshot if there is one) and write the outputs.

        A snapshot from other settings or another start checkpoint is an error; with
        on_mismatch="restart" it is set aside (snapshot.stale.pt) and the run starts over,
        saying so: the pipeline's case after a user changed the run's configuration."""
        s, d = self.s, self.d
        snap_path = self.dir / "snapshot.pt"
        st = snapshot.load(snap_path)
        if st is not None:
            try:
                self.restore(st, snap_path)
                self.say(f"resuming {self.run_id} from {snap_path} at step {self.step_no}")
            except snapshot.SnapshotError as exc:
                if on_mismatch != "restart":
                    raise
                barrier(d)  # every rank has read the snapshot before rank 0 moves it
                if d.is_main:
                    snapshot.set_aside(snap_path)
                self.say(f"restarting {self.run_id} from step 0: {exc}; the old snapshot is kept as snapshot.stale.pt")
        if self.initial_eval is None:
            self.initial_eval = self.evaluate()
        wandb_run = self.start_wandb()
        progress = None
        if d.is_main and sys.stderr.isatty():
            from tqdm import tqdm

            progress = tqdm(total=s["steps"], initial=self.step_no, desc=self.run_id, leave=False)
        while self.step_no < s["steps"] and self.status == "running":
            row = self.step()
            step = row["step"]
            if progress is not None:
                progress.update(1)
            if wandb_run is not None:
                wandb_run.log({f"train/{k}": v for k, v in row.items()}, step=step)
            if step % s["log_every"] == 0 or step == 1 or step == s["steps"]:
                self.say(console_line(row, s["steps"]))
            if d.is_main and (step % s["snapshot_every"] == 0 or step == s["steps"] or self.status != "running"):
                if self.status == "running" and step == s["steps"]:
                    self.status = "complete"
                snapshot.save(snap_path, self.state())
        if self.status == "running":
            self.status = "complete"
        if progress is not None:
            progress.close()
        if wandb_run is not None:
            wandb_run.finish()
        summary = self.summary()
        if d.is_main:
            write_metrics(self.dir / "metrics.csv", self.rows)
            atomic_write(self.dir / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
        return summary

    def start_wandb(self):
        if not (self.s["wandb"] and self.d.is_main):
            return None
        try:
            import os

            import wandb
        except ImportError:
            raise ConfigError("wandb: true needs the wandb package (pip install -e '.[wandb]')") from None
        os.environ.setdefault("WANDB_MODE", "offline")
        return wandb.init(project="mathrl", name=self.run_id, config=self.s, dir=str(self.dir))

    def summary(self) -> dict:
        evals = [(r["step"], r["eval_accuracy"]) for r in self.rows if not math.isnan(r["eval_accuracy"])]
        best = max(evals, key=lambda e: e[1]) if evals else (0, math.nan)
        last = self.rows[-1] if self.rows else {}
        s = self.s
        return {
            "run_id": self.run_id, "experiment": self.experiment, "task": s["task"], "algorithm": s["algorithm"],
            "batch_size": s["batch_size"], "lr": s["lr"], "kl_coef": s["kl_coef"], "seed": s["seed"],
            "config": {**s, "task_config": self.cfg["tasks"][s["task"]], "model": self.model_config,
                       "init": str(self.init_path), "world_size": self.d.world_size, "device": str(self.d.device)},
            "status": self.status,
            "initial": {"eval_accuracy": self.initial_eval},
            "final": {**last, "eval_accuracy": evals[-1][1] if evals else math.nan},
            "best": {"step": best[0], "eval_accuracy": best[1]},
            "steps_done": self.step_no,
            "wall_seconds": sum(r["seconds"] for r in self.rows),
            "versions": versions(),
            "alerts": self.monitor.alerts,
        }  # fmt: skip


def versions() -> dict:
    import numpy

    return {"mathrl": mathrl.__version__, "python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__}


def write_metrics(path: Path, rows: list[dict]) -> None:
    """metrics.csv in one atomic write: a reader never sees a partial file."""
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=METRICS + EXTRAS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: row.get(k, math.nan) for k in METRICS + EXTRAS})
    atomic_write(path, buf.getvalue())
