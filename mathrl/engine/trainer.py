"""The RL trainer: sample, reward, estimate advantages, update, monitor, snapshot.

One step, `Trainer.step`, in three stages read top to bottom, each recording its metrics in
the step's `StepMetrics` (`mathrl.engine.metrics`) where it computes them:
1. `rollout`: draw prompts for the global batch (groups of `group_size` copies of a prompt)
   and the Gumbel noise for sampling; this rank samples its slice with the KV cache (by the
   policy of `mathrl.engine.sampler`: the trainer's own unless a source of mismatch is set), records
   the sampler's log-prob of each token, and rewards the answers (the training reward;
   exact-match accuracy is logged regardless); with dynamic sampling, groups whose rewards
   are all equal are replaced by fresh ones;
2. `score`: rewards normalised and clipped as configured, reference and old log-probs, and
   advantages from the algorithm's estimator in the registry (`mathrl.engine.algorithms`), kept for one
   sign of advantage only where `sample_filter` says so;
3. `update`: for each PPO epoch one optimizer step over the whole batch, accumulated over
   micro-batches (`micro_batch`); the loss per answer token is the policy loss named by
   `policy_loss` in its registry (`mathrl.engine.policy_losses`), times the rollout correction's
   weight when one is set (`mathrl.engine.mismatch`) and by the token selection's weight when
   `token_selection` picks answer tokens by entropy (`mathrl.engine.token_selection`)
   + kl_coef * KL(pi || ref) - entropy_coef * entropy (+ value_coef * value loss),
   aggregated per token or per sequence and divided by a global count, so micro-batches
   and ranks add up exactly to the large-batch gradient. The KL penalty sits in the loss
   (as in GRPO) for every algorithm, so the KL studies compare like with like. A
   non-finite loss or gradient never reaches the weights: the update is skipped (or the
   run stopped) and an alert recorded.
Then the metrics row, its sums reduced over ranks in one collective; the KL controller, the
monitor and evaluation. Rank 0 logs, writes and snapshots.

REINFORCE runs through the same clipped surrogate (`policy_loss: vanilla`) with old log-probs
equal to the current ones: the ratio is 1, the clip inactive, and the gradient is exactly
-A * grad log pi.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import json
import math
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import mathrl
from mathrl.engine import eval_cache, resume, snapshot
from mathrl.engine.algorithms import AdvantageInputs, get_estimator
from mathrl.engine.carry_probe import probe_csv
from mathrl.engine.control import MovingAverageBaseline, make_kl_controller
from mathrl.engine.distributed import Dist, all_mean_std, all_sum, barrier
from mathrl.engine.evaluation import greedy_correct, sampled_correct, sampled_correct_counts
from mathrl.engine.losses import (
    aggregate,
    clip_abs,
    explained_variance,
    filter_samples,
    moment_sums,
    normalize,
    per_token_loss,
    ppo_kl,
    token_entropy,
    token_logprobs,
    value_clipped,
    value_rmse,
    zero_std_groups,
)

# METRICS and EXTRAS: metrics.csv's layout, as the tests and callers read it from here
from mathrl.engine.metrics import COLUMNS, EXTRAS, METRICS, GradNoiseProbe, StepMetrics  # noqa: F401
from mathrl.engine.mismatch import correction, mismatch_max, mismatch_metrics, mismatch_sums
from mathrl.engine.model import GPT, ValueHead, gpt_config
from mathrl.engine.monitor import StabilityMonitor
from mathrl.engine.optim import make_optimizer, set_lr
from mathrl.engine.policy_losses import PolicyLossInputs, get_policy_loss
from mathrl.engine.rewards import RewardSpec, compute_rewards, token_rewards
from mathrl.engine.sampler import RolloutSampler, sampler_logprobs
from mathrl.engine.schedules import Schedule
from mathrl.engine.sft import load_policy
from mathrl.engine.tasks import VOCAB_SIZE, answer_mask, filter_by_ndigit, read_problems, task_of
from mathrl.engine.token_selection import get_token_selection, reads_entropy, selection_weight
from mathrl.pipeline import faults
from mathrl.pipeline.atomic import atomic_write, record
from mathrl.pipeline.config import ConfigError
from mathrl.pipeline.console import console_line, time_left
from mathrl.pipeline.layout import CARRY_PROBE_FILE, init_checkpoint, problems_file
from mathrl.pipeline.settings import RunSettings

# Version of the snapshot layout (3: optimizer state of torch.optim; 4: the held-out sampled accuracy).
SNAPSHOT_FORMAT = 4


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


def read_run_problems(cfg: dict, s: RunSettings, task) -> tuple[list, list]:
    """A run's training problems (its subset, if any) and the split it evaluates on (cut to eval_size)."""
    files = {split: problems_file(cfg, s.task, split) for split in ("train", s.eval_split)}
    for path in files.values():
        if not path.is_file():
            raise ConfigError(f"task {s.task}: {path} is missing (run `mathrl problems` first)")
    train = read_problems(files["train"], task)
    if s.train_subset:  # a training set too small for the task (the collapse analysis's data problem)
        train = train[: s.train_subset]
    # the held-out test set, or the validation split that selects settings
    test = read_problems(files[s.eval_split], task)
    if not len(test):
        raise ConfigError(f"eval_split: task {s.task} has no {s.eval_split} problems (tasks.{s.task}.n_val is 0)")
    return train, test[: s.eval_size] if s.eval_size else test


class Trainer:
    """One RL run with its settings (built once, from the validated config)."""

    def __init__(
        self,
        cfg: dict,
        run_id: str,
        settings: RunSettings,
        run_dir: Path,
        d: Dist,
        experiment: str | None = None,
        started: float | None = None,
    ):
        # when the run's command began (time.perf_counter), for summary.json's run_seconds
        self.started = time.perf_counter() if started is None else started
        self.cfg, self.run_id, self.s = cfg, run_id, settings
        self.dir, self.d, self.experiment = Path(run_dir), d, experiment
        self.record = settings.as_dict()  # the settings as summary.json and snapshots record them
        self.progress = None  # the progress bar while one is shown (interactive runs)
        s = settings
        self.task = task_of(cfg, s.task)
        self.schedule = Schedule(s, self.task.ndigit)  # LR, entropy coefficient, digits, evaluations
        self.train_pairs, self.test_pairs = read_run_problems(cfg, s, self.task)
        self.pools: dict[int, torch.Tensor] = {}
        self._build_networks(self._starting_policy())
        self._build_signals()
        self._start_counters()

    # ---------------------------------------------------------------- builders (in this order: the random draws)
    def _starting_policy(self) -> GPT:
        """The policy RL starts from (a warm-up's checkpoint, a start, a file, or a random one), and its digest."""
        s, cfg = self.s, self.cfg
        if s.init == "random":  # lab 04: RL from a random policy sees only zero rewards
            torch.manual_seed(s.seed)
            policy = GPT(gpt_config(cfg["sft"][s.task]["preset"], VOCAB_SIZE, self.task.seq_len))
            self.init_path = "random"
        else:
            self.init_path = init_checkpoint(cfg["results"], s.task, s.init, s.warmup)
            policy, _ = load_policy(self.init_path)
        # What the run started from: a snapshot trained from another checkpoint is not this run.
        self.init_sha256 = (
            "random" if self.init_path == "random" else hashlib.sha256(Path(self.init_path).read_bytes()).hexdigest()
        )
        self.init_digest = self.init_sha256[:16]
        return policy

    def _build_networks(self, policy: GPT) -> None:
        """The reference policy, the estimator, loss and token selection, the actor-critic, the sampler, the
        optimizer."""
        s, d = self.s, self.d
        self.model_config = asdict(policy.config)
        self.ref = copy.deepcopy(policy).to(d.device).eval().requires_grad_(False)
        self.estimator = get_estimator(s.algorithm)  # the advantage estimator (mathrl.engine.algorithms)
        self.policy_loss = get_policy_loss(s.policy_loss)  # the per-token surrogate (mathrl.engine.policy_losses)
        self.select_tokens = get_token_selection(
            s.token_selection
        )  # the tokens it trains on (mathrl.engine.token_selection)
        if s.reward_placement != "end" and not self.estimator.critic:
            raise ConfigError(
                f"reward_placement {s.reward_placement}: only a critic's GAE reads per-token rewards, "
                f"and {s.algorithm} has no critic; use algorithm ppo, or reward_placement end"
            )
        head = ValueHead(policy.config.n_embd) if self.estimator.critic else None
        self.net = ActorCritic(policy, head).to(d.device)
        # the policy that samples rollouts: the trainer's own, or a copy in another precision or with stale weights
        self.sampler = RolloutSampler(self.net.policy, s.sampler_dtype, s.rollout_staleness)
        self.sampling_policy = self.net.policy  # this step's (RolloutSampler.policy_for_step)
        self.ddp = (
            DDP(self.net, device_ids=[d.device.index] if d.device.type == "cuda" else None) if d.active else self.net
        )
        self.opt = make_optimizer(
            self.net.parameters(),
            s.optimizer,
            lr=s.lr,
            weight_decay=s.weight_decay,
            betas=(s.adam_beta1, s.adam_beta2),
            momentum=s.momentum,
        )

    def _build_signals(self) -> None:
        """The reward, the random streams, the baseline, the KL controller and the stability monitor."""
        s = self.s
        self.reward_spec = RewardSpec(
            kind=s.reward,
            format_bonus=s.format_bonus,
            digit_weight=s.digit_weight,
            invalid_penalty=s.invalid_penalty,
            proxy_correct_weight=s.proxy_correct_weight,
            proxy_bias_weight=s.proxy_bias_weight,
            offset=s.reward_offset,
        )
        # Randomness is rank-independent: every rank draws the same global prompts and noise.
        self.prompt_gen = torch.Generator().manual_seed(s.seed)
        self.noise_gen = torch.Generator().manual_seed(s.seed + 7919)
        self.baseline = MovingAverageBaseline(decay=s.baseline_decay)
        self.kl_ctl = make_kl_controller(s.kl_controller, coef=s.kl_coef, target=s.kl_target, horizon=s.kl_horizon)
        self.monitor = StabilityMonitor(
            entropy_min=s.monitor_entropy_min,
            kl_max=s.monitor_kl_max,
            reward_swing=s.monitor_reward_swing,
            window=s.monitor_window,
            swing_sigmas=s.monitor_swing_sigmas,
            batch_size=s.batch_size,
        )

    def _start_counters(self) -> None:
        """Progress, the evaluations before RL, and the per-problem records, as a fresh run has them."""
        self.step_no, self.samples, self.rows, self.status = 0, 0, [], "running"
        self.initial_eval: float | None = None
        self.initial_sampled = math.nan
        self.initial_eval_seconds = 0.0  # what this process spent on the evaluation before RL (0 when resumed)
        # per held-out problem: greedy correctness at the start and at the last evaluation
        # (heldout.csv), and pass@k's correct counts before and after RL (pass_at_k.csv)
        self.initial_correct: list[int] | None = None
        self.last_correct: list[int] | None = None
        self.pass_counts: dict[str, list[int]] = {}
        self.pass_at_k_seconds = 0.0  # what this process spent sampling pass@k's answers (before and after RL)
        # Prefix sharing (GPT.forward_shared, generate(group_size=G)): each group's prompt is
        # computed once. MATHRL_NO_PREFIX_SHARING=1 turns it off: a benchmark switch.
        self.share_prefix = os.environ.get("MATHRL_NO_PREFIX_SHARING", "").strip() in ("", "0")

    # ---------------------------------------------------------------- state
    def state(self) -> dict:
        return {
            "format": SNAPSHOT_FORMAT,
            "run_id": self.run_id,
            "step": self.step_no,
            "samples": self.samples,
            "settings": self.record,
            "model_config": self.model_config,
            "net": self.net.state_dict(),
            "opt": self.opt.state_dict(),
            "prompt_gen": self.prompt_gen.get_state(),
            "noise_gen": self.noise_gen.get_state(),
            "baseline": self.baseline.state_dict(),
            "kl_ctl": self.kl_ctl.state_dict(),
            "monitor": self.monitor.state_dict(),
            "rows": self.rows,
            "initial_eval": self.initial_eval,
            "initial_sampled": self.initial_sampled,
            "status": self.status,
            "init_digest": self.init_digest,
            "initial_correct": self.initial_correct,
            "last_correct": self.last_correct,
            "pass_counts": self.pass_counts,
            "sampler": self.sampler.state_dict(),
        }

    def restore(self, st: dict, where: Path) -> None:
        """Resume from a snapshot, refusing one written for another model or run settings."""
        if st.get("format") != SNAPSHOT_FORMAT:
            raise snapshot.SnapshotError(
                f"{where}: snapshot format {st.get('format')!r} is not {SNAPSHOT_FORMAT} (an older mathrl wrote it); "
                f"remove {self.dir} to start over"
            )
        if st.get("model_config") != self.model_config:
            raise snapshot.SnapshotError(
                f"{where}: snapshot model {st.get('model_config')} does not match this run's model {self.model_config};"
                f" remove {self.dir} to start over"
            )
        if st.get("init_digest") != self.init_digest:
            raise snapshot.SnapshotError(
                f"{where}: snapshot was trained from another start checkpoint than {self.init_path} "
                f"(digest {st.get('init_digest')} vs {self.init_digest}); remove {self.dir} to start over"
            )
        nonfinite = [r["step"] for r in st["rows"] if r.get("skipped")]
        conflicts = resume.conflicts(st["settings"], self.s, st["step"], self.task.ndigit, nonfinite)
        if conflicts:
            diff = "; ".join(map(str, conflicts))
            raise snapshot.SnapshotError(
                f"{where}: snapshot was written with other settings, under which steps up to "
                f"{st['step']} "
                f"would have gone differently ({diff}); remove {self.dir} to start "
                "over"
            )
        forget = resume.evaluations_to_forget(st["settings"], self.s, st["step"])  # the old last step's evaluation
        rows = [
            {**r, "eval_accuracy": math.nan, "eval_sampled_accuracy": math.nan} if r["step"] in forget else r
            for r in st["rows"]
        ]
        # answers are sampled at the last step only: an extended run's old last step keeps its greedy evaluation alone
        rows = [r if r["step"] == self.s.steps else {**r, "eval_sampled_accuracy": math.nan} for r in rows]
        self.net.load_state_dict(st["net"])
        self.opt.load_state_dict(st["opt"])
        self.prompt_gen.set_state(st["prompt_gen"])
        self.noise_gen.set_state(st["noise_gen"])
        self.baseline.load_state_dict(st["baseline"])
        self.kl_ctl.load_state_dict(st["kl_ctl"])
        self.monitor.load_state_dict(st["monitor"])
        self.step_no, self.samples, self.rows = st["step"], st["samples"], rows
        self.initial_eval, self.initial_sampled, self.status = st["initial_eval"], st["initial_sampled"], st["status"]
        self.initial_correct, self.last_correct = st.get("initial_correct"), st.get("last_correct")
        self.pass_counts = dict(st.get("pass_counts") or {})
        self.sampler.load_state_dict(st.get("sampler") or {})
        if self.status == "complete" and self.step_no < self.s.steps:
            self.status = "running"  # the same run extended to more steps

    # ---------------------------------------------------------------- sampling
    def ndigit_at(self, step: int) -> int:
        return self.schedule.ndigit(step)

    def pool(self, nd: int) -> torch.Tensor:
        if nd not in self.pools:
            pairs = self.train_pairs if nd == self.task.ndigit else filter_by_ndigit(self.train_pairs, nd)
            if len(pairs) == 0:
                raise ConfigError(
                    f"curriculum: no training problems with {nd} digits in"
                    f" {problems_file(self.cfg, self.s.task, 'train')}"
                )
            self.pools[nd] = pairs
        return self.pools[nd]

    @torch.no_grad()
    def draw(self, nd: int) -> dict:
        """Sample this rank's slice of one global batch of rollouts."""
        s, d, task = self.s, self.d, self.task
        G, L = s.group_size, task.answer_len
        n_groups = s.batch_size // G
        n_local = n_groups // d.world_size
        pool = self.pool(nd)
        idx = torch.randint(len(pool), (n_groups,), generator=self.prompt_gen)
        noise = torch.rand(s.batch_size, L, VOCAB_SIZE, generator=self.noise_gen)  # (B_global, L, V)
        # the random reward's coins: drawn after the noise from the same (snapshotted) generator, global batch
        coins = torch.rand(s.batch_size, generator=self.noise_gen) if s.reward == "random" else None  # (B_global,)
        lo = d.rank * n_local
        pairs = pool[idx[lo : lo + n_local]].repeat_interleave(G, dim=0)  # (B, 2)
        prompts = task.encode_prompts(pairs[:, 0], pairs[:, 1]).to(d.device)  # (B, P)
        target = task.encode_answers(pairs[:, 0], pairs[:, 1]).to(d.device)  # (B, L)
        u = noise[lo * G : (lo + n_local) * G].to(d.device)
        how = {"temperature": s.temperature, "noise": u, "top_k": s.sample_top_k, "top_p": s.sample_top_p}
        with self.sampler.kernels(d.device):
            if self.share_prefix:  # prefill each group's prompt once
                tokens, logits = self.sampling_policy.generate(prompts[::G], L, group_size=G, return_logits=True, **how)
            else:  # tokens (B, L), logits (B, L, V)
                tokens, logits = self.sampling_policy.generate(prompts, L, return_logits=True, **how)
        mine = None if coins is None else coins[lo * G : (lo + n_local) * G].to(d.device)  # (B,)
        rewards, checks = compute_rewards(self.reward_spec, tokens, target, coins=mine)
        dense = {"token_rewards": token_rewards(tokens, target)} if s.reward_placement == "per_token" else {}
        # what the sampler records of each token: its log-prob under the distribution it sampled from
        sampler_logp = sampler_logprobs(logits, tokens, s.temperature, s.sample_top_k, s.sample_top_p)
        checks = {k: v.float() for k, v in checks.items()}
        # the sampler's per-token entropy, which only a token selection by entropy reads
        entropy = {"sampler_entropy": token_entropy(logits)} if reads_entropy(self.select_tokens) else {}
        return {
            "prompts": prompts,
            "tokens": tokens,
            "rewards": rewards.float(),
            **checks,
            **dense,
            "sampler_logp": sampler_logp,
            **entropy,
        }

    def collect(self, nd: int) -> tuple[dict, int]:
        """One batch of rollouts; with dynamic sampling, homogeneous groups are replaced.

        Refill rounds are decided on global counts so that every rank runs the same number
        of rounds (and collectives); each rank then keeps its own informative groups first."""
        s, G = self.s, self.s.group_size
        batch = self.draw(nd)
        sampled = s.batch_size
        if not s.dynamic_sampling:
            return batch, sampled
        n_local = len(batch["rewards"]) // G
        parts = [batch]
        for _ in range(s.dynamic_sampling_rounds - 1):
            informative = sum(int((p["rewards"].view(-1, G).std(1, unbiased=False) > 0).sum()) for p in parts)
            if all_sum(self.d, torch.tensor([informative])).item() >= n_local * self.d.world_size:
                break
            parts.append(self.draw(nd))
            sampled += s.batch_size
        merged = {k: torch.cat([p[k] for p in parts]) for k in batch}
        group_std = merged["rewards"].view(-1, G).std(1, unbiased=False)
        order = torch.argsort((group_std == 0).long(), stable=True)[:n_local]  # informative groups first
        rows = (order[:, None] * G + torch.arange(G, device=order.device)).flatten()
        return {k: v[rows] for k, v in merged.items()}, sampled

    # ---------------------------------------------------------------- one step
    def answer_outputs(self, net, batch: dict, lo: int, hi: int):
        """(logits (b, L, V), values (b, L) or None) of `net` that chose the answer tokens of rows lo:hi."""
        G, P = self.s.group_size, self.task.prompt_len
        if batch["share"]:
            return net(batch["uprompts"][lo // G : hi // G], batch["tokens"][lo:hi], G)
        logits, values = net(batch["inp"][lo:hi])
        return logits[:, P - 1 :], None if values is None else values[:, P - 1 :]

    def rollout(self, step: int, metrics: StepMetrics) -> dict:
        """Stage 1: this rank's rollouts of the step, rewarded, with the inputs its forwards take."""
        s, G = self.s, self.s.group_size
        nd = self.ndigit_at(step)
        self.sampling_policy = self.sampler.policy_for_step(self.net.policy)
        batch, sampled = self.collect(nd)
        tokens = batch["tokens"]
        metrics.value("ndigit", nd)
        metrics.ratio("accuracy", float(batch["exact"].sum()), float(len(tokens)))
        metrics.ratio("format_rate", float(batch["format_ok"].sum()), float(len(tokens)))
        micro = s.micro_batch_size or len(tokens)
        # Groups are contiguous rows: with prefix sharing the forwards take each group's prompt
        # once (prompts[::G]) and return outputs at the answer-predicting positions only.
        # Micro-batches must then hold whole groups; otherwise the full-sequence path.
        share = self.share_prefix and micro % G == 0
        return {
            **batch,
            "mask": answer_mask(tokens),
            "sampled": sampled,
            "share": share,
            "uprompts": batch["prompts"][::G],  # (B/G, P)
            "inp": None if share else torch.cat([batch["prompts"], tokens], dim=1)[:, :-1],
        }  # (B, P+L-1)

    @torch.no_grad()
    def score(self, batch: dict, metrics: StepMetrics) -> dict:
        """Stage 2: rewards shaped, reference log-probs (with a critic also the old log-probs and values:
        the advantages need them; without one, `update` takes the old log-probs from its first epoch),
        advantages by the registry."""
        s, d, G = self.s, self.d, self.s.group_size
        raw, tokens, mask = batch["rewards"], batch["tokens"], batch["mask"]
        mean_r, std_r = all_mean_std(d, raw, torch.ones_like(raw))
        metrics.value("reward_mean", mean_r)
        metrics.value("reward_std", std_r)
        metrics.ratio("frac_zero_std", float(zero_std_groups(raw, G)), float(len(mask) // G))
        rewards = normalize(raw, mean_r, std_r) if s.reward_norm else raw
        rewards = clip_abs(rewards, s.reward_clip)
        if self.share_prefix:
            ref_logits = self.ref.forward_shared(batch["uprompts"], tokens, G)
        else:
            ref_logits = self.ref(batch["inp"])[:, self.task.prompt_len - 1 :]
        old_logp = old_values = None
        if self.estimator.critic:  # the advantages need the values before the update
            # the training forward's path, so that the first epoch's ratio is exactly 1
            logits, old_values = self.answer_outputs(self.net, batch, 0, len(raw))
            old_logp = token_logprobs(logits, tokens)
        baseline = math.nan
        if self.estimator.baseline:
            n = all_sum(d, torch.tensor([rewards.sum().item(), float(len(rewards))], dtype=torch.float64))
            baseline = self.baseline.update(float(n[0] / n[1]))
            metrics.value("baseline", baseline)
        inputs = AdvantageInputs(
            rewards,
            mask,
            G,
            old_values,
            baseline,
            gamma=s.gamma,
            lam=s.gae_lambda,
            mean_std=lambda x, w: all_mean_std(d, x, w),
            token_rewards=batch.get("token_rewards"),
        )
        adv, returns = self.estimator.fn(inputs)
        if s.adv_norm:
            adv = normalize(adv, *all_mean_std(d, adv, mask), mask=mask)
        # train on the positive- or negative-advantage rollouts only (zeroing commutes with the clip below)
        adv = filter_samples(adv, mask, s.sample_filter)
        return {
            "ref_logp": token_logprobs(ref_logits, tokens),
            "old_logp": old_logp,
            "old_values": old_values,
            "adv": clip_abs(adv, s.adv_clip),
            "returns": returns,
            "pg_weight": self.token_weight(batch.get("sampler_entropy"), mask, metrics),
        }

    def token_weight(
        self, entropy: torch.Tensor | None, mask: torch.Tensor, metrics: StepMetrics
    ) -> torch.Tensor | None:
        """The token selection's weight on the policy-gradient term (None: every answer token, no weight), and its
        metrics: the share of answer tokens selected and the mean entropy of the selected and the other tokens.
        `entropy` is None where the sampler did not compute it (token_selection all)."""
        if entropy is None:
            return None
        selected = self.select_tokens(entropy, mask, self.s.token_fraction)
        if selected is None:
            return None
        answer = mask > 0
        counts = all_sum(self.d, torch.tensor([float(selected.sum()), float(answer.sum())], dtype=torch.float64))
        metrics.ratio("token_selected_frac", float(selected.sum()), float(answer.sum()))
        metrics.masked_mean("entropy_selected", entropy, selected.float())
        metrics.masked_mean("entropy_unselected", entropy, (answer & ~selected).float())
        return selection_weight(selected, mask, float(counts[0]), float(counts[1]))

    def coefficients(self, step: int, mask: torch.Tensor, metrics: StepMetrics) -> dict:
        """The step's scheduled learning rate, KL and entropy coefficients and loss divisor."""
        s = self.s
        lr = self.schedule.lr(step)  # the schedules resume compares to decide what may resume
        # Loss terms are sums over this rank divided by a global count, so ranks and micro-batches add up.
        den = float(all_sum(self.d, mask.sum().double().cpu())) if s.loss_agg == "token" else float(s.batch_size)
        coefs = {
            "lr": lr,
            "kl_coef": self.kl_ctl.value,
            "den": den,
            "ent_coef": self.schedule.entropy_coef(step),
        }
        metrics.value("lr", lr)
        metrics.value("kl_coef", coefs["kl_coef"])
        metrics.value("entropy_coef", coefs["ent_coef"])
        return coefs

    def update(self, batch: dict, scored: dict, coefs: dict, step: int, metrics: StepMetrics) -> bool:
        """Stage 3: per PPO epoch one optimizer step, accumulated over micro-batches. A
        non-finite loss or gradient skips it (or stops the run); returns whether it was skipped.
        The first epoch's log-probs, taken before any step, are the later epochs' old log-probs
        (where `score` did not compute them): no forward pass of its own."""
        s, d = self.s, self.d
        B = len(batch["tokens"])
        micro = s.micro_batch_size or B
        set_lr(self.opt, coefs["lr"])
        norms, values, first_logp, skipped = [], [], [], False
        for epoch in range(s.ppo_epochs):
            if epoch == 1 and scored["old_logp"] is None:
                scored = {**scored, "old_logp": torch.cat(first_logp)}
            self.opt.zero_grad(set_to_none=True)
            probe = None
            if s.grad_noise_scale and epoch == 0 and micro < B and not d.active:
                probe = GradNoiseProbe(self.net.parameters(), micro, B, coefs["den"])
            finite = True
            for lo in range(0, B, micro):
                sync = lo + micro >= B or not d.active
                with nullcontext() if sync else self.ddp.no_sync():
                    rows = slice(lo, lo + micro)
                    finite &= self.micro_batch(batch, scored, coefs, rows, epoch, step, metrics, values, first_logp)
                if probe is not None:  # this micro-batch's own gradient, as a mean over its own tokens or sequences
                    own = batch["mask"][rows].sum() if s.loss_agg == "token" else len(batch["tokens"][rows])
                    probe.observe(float(own))
            if probe is not None:
                probe.record(metrics)
            if step <= s.critic_warmup_steps:  # critic pre-training: the value loss moves only the value head
                for p in self.net.policy.parameters():
                    p.grad = None
            norm = float(torch.nn.utils.clip_grad_norm_(self.net.parameters(), s.grad_clip or math.inf))
            norms.append(norm)
            if not (math.isfinite(norm) and all_sum(d, torch.tensor([float(finite)])).item() == d.world_size):
                self.opt.zero_grad(set_to_none=True)
                skipped = True
                outcome = "update skipped"
                if s.nan_policy == "stop":
                    outcome, self.status = "run stopped", "stopped_nonfinite"
                self.monitor.record(
                    step, "nonfinite", norm, f"non-finite loss or gradient (grad norm {norm}); {outcome}"
                )
                break
            if epoch == 0:
                faults.in_step(step, d.rank)  # test-only hooks (no-ops unless their env vars are set)
            self.opt.step()
        metrics.value("grad_norm", float(sum(norms) / len(norms)))
        metrics.value("skipped", int(skipped))
        if values:  # the critic's values before the update, against its targets (this rank's)
            values0, mask = torch.cat(values), batch["mask"]
            metrics.value("value_rmse", value_rmse(values0, scored["returns"], mask))
            metrics.value("explained_variance", explained_variance(values0, scored["returns"], mask))
        return skipped

    def micro_batch(
        self,
        batch: dict,
        scored: dict,
        coefs: dict,
        rows: slice,
        epoch: int,
        step: int,
        metrics: StepMetrics,
        values0: list,
        logp0: list,
    ) -> bool:
        """Forward, loss (`losses.per_token_loss`) and backward of some rows, their metrics recorded; whether the
        loss was finite. On the first epoch the critic's values go to `values0` and the log-probs to `logp0`."""
        s, sc, m = self.s, scored, batch["mask"][rows]
        logits, values = self.answer_outputs(self.ddp, batch, rows.start, rows.stop)  # (b, L, V): chose each token
        logp = token_logprobs(logits, batch["tokens"][rows])  # (b, L)
        old = sc["old_logp"][rows] if sc["old_logp"] is not None else logp.detach()
        if epoch == 0 and sc["old_logp"] is None:
            logp0.append(old)
        # the rollout correction: a detached weight of the trainer's log-prob before the update against the sampler's
        weight, corrected = correction(old, batch["sampler_logp"][rows], m, s.tis_cap, s.mis_cap, s.seq_mask_cap)
        seed = s.seed * 1_000_003 + step * 1009 + epoch * 101 + rows.start  # a loss's random choices (Clip-Cov's)
        per_token, terms = per_token_loss(
            self.policy_loss,
            PolicyLossInputs(logp, old, sc["adv"][rows], m, s, seed=seed),
            logits,
            sc["ref_logp"][rows],
            coefs,
            correction=weight,
            selection=sc["pg_weight"][rows] if sc["pg_weight"] is not None else None,  # the token selection's
            critic=(values, sc["old_values"][rows], sc["returns"][rows]) if values is not None else None,
            policy_terms=step > s.critic_warmup_steps,  # the critic's warm-up trains the value head alone
        )
        loss = self.injected_fault(aggregate(per_token, m, s.loss_agg)[0] / coefs["den"] * self.d.world_size, step)
        finite = bool(torch.isfinite(loss.detach()))
        loss.backward()
        self.record_micro_batch(metrics, terms, batch, scored, rows, epoch, logp, old, corrected, coefs)
        if values is not None:
            metrics.masked_mean("value_loss", terms["value_loss"].detach(), m)
            self.record_values(metrics, values.detach(), sc["old_values"][rows], m, epoch, values0)
        return finite

    def injected_fault(self, loss: torch.Tensor, step: int) -> torch.Tensor:
        """The fault studies' hooks on a step's loss: a NaN (fault_nan_step), a gradient spike (fault_grad_spike_step,
        times fault_grad_spike_scale); the loss itself on every other step."""
        if self.s.fault_nan_step == step:
            loss = loss * float("nan")
        if self.s.fault_grad_spike_step == step:
            loss = loss * self.s.fault_grad_spike_scale
        return loss

    def record_micro_batch(self, metrics, terms, batch, scored, rows, epoch, logp, old, corrected, coefs) -> None:
        """A micro-batch's metrics: its loss's diagnostics and the PPO KL; on the first epoch the advantage statistics,
        the policy loss, entropy and KL, and the rollout/trainer mismatch of the sampled tokens before the update."""
        s, m, adv = self.s, batch["mask"][rows], scored["adv"][rows]
        for name, x in terms["diagnostics"].items():
            metrics.masked_mean(name, x, m)
        metrics.masked_mean("ppo_kl", ppo_kl(logp.detach(), old), m)
        if epoch != 0:
            return
        # x: log-prob of the sampled token, y: its advantage (after normalisation and clipping)
        metrics.moments(moment_sums(logp.detach(), adv, m), mean_y="adv_mean", std_y="adv_std", cov="logp_adv_cov")
        metrics.maximum("adv_abs_max", float(torch.where(m.bool(), adv.abs(), torch.zeros_like(adv)).max()))
        metrics.divided("policy_loss", float(aggregate(terms["pg"].detach(), m, s.loss_agg)[0]), coefs["den"])
        metrics.masked_mean("entropy", terms["entropy"].detach(), m)
        metrics.masked_mean("kl", terms["kl"].detach(), m)
        sampler_logp = batch["sampler_logp"][rows]
        metrics.summed(mismatch_sums(old, sampler_logp, m), mismatch_metrics)
        metrics.maximum("mismatch_logp_diff_max", mismatch_max(old, sampler_logp, m))
        if corrected is not None:
            metrics.masked_mean("mismatch_corrected_frac", corrected, m)

    def record_values(self, metrics, values, old_values, m, epoch: int, values0: list) -> None:
        """The critic's metrics of a micro-batch: on the first epoch its values (for the step's fit), later how far
        this update moved them and which of them the value clip cut."""
        if epoch == 0:
            values0.append(values)
        else:
            metrics.masked_mean("value_delta", (values - old_values).abs(), m)
            metrics.masked_mean("value_clip_frac", value_clipped(values, old_values, self.s.value_clip), m)

    def step(self) -> dict:
        """One RL step: rollout, score, update, its metrics row reduced over ranks; then the KL
        controller, monitor and evaluation."""
        s, step = self.s, self.step_no + 1
        metrics = StepMetrics()
        t0 = time.perf_counter()
        batch = self.rollout(step, metrics)
        t1 = time.perf_counter()
        scored = self.score(batch, metrics)
        coefs = self.coefficients(step, batch["mask"], metrics)
        skipped = self.update(batch, scored, coefs, step, metrics)
        t2 = time.perf_counter()
        metrics.value("step", step)
        metrics.value("samples", self.samples + batch["sampled"])
        metrics.value("sample_seconds", t1 - t0)
        metrics.value("update_seconds", t2 - t1)
        row = metrics.reduce(self.d)
        self.samples = row["samples"]
        if not skipped:
            self.kl_ctl.update(row["kl"])
        for alert in self.monitor.check(step, entropy=row["entropy"], kl=row["kl"], reward_mean=row["reward_mean"]):
            self.say(f"alert: step {step}: {alert['message']}")
        for alert in self.monitor.check_trends(
            step,
            grad_norm=row["grad_norm"],
            entropy=row["entropy"],
            grad_spike=s.monitor_grad_spike,
            entropy_rise=s.monitor_entropy_rise,
        ):
            self.say(f"alert: step {step}: {alert['message']}")
        if skipped:  # its own alert: the checks above may have added others after it
            nonfinite = next(a for a in reversed(self.monitor.alerts) if a["kind"] == "nonfinite")
            self.say(f"alert: step {step}: {nonfinite['message']}")
        if self.schedule.evaluated(step) or self.status != "running":
            last = step == self.s.steps or self.status != "running"
            t_eval = time.perf_counter()
            row["eval_accuracy"], row["eval_sampled_accuracy"] = self.evaluate(step, sampled=last and s.eval_sampled)
            row["eval_seconds"] = time.perf_counter() - t_eval
        row["seconds"] = time.perf_counter() - t0
        self.step_no = step
        self.rows.append(row)
        return row

    def evaluate(self, step: int, sampled: bool = True) -> tuple[float, float]:
        """Held-out exact-match accuracy, greedy (every problem's result kept in `last_correct`,
        in test-set order, for heldout.csv) and, when `sampled` (before RL from a random start, and at
        the last step with eval_sampled), sampled at the policy's temperature: one answer per problem,
        noise seeded by the run's seed and the step, so a resumed run draws the same answers; NaN when
        not sampled.
        Each problem is evaluated on one rank."""
        d, s = self.d, self.s
        mine = slice(d.rank, None, d.world_size)
        full = torch.zeros(len(self.test_pairs), dtype=torch.float64)
        full[mine] = greedy_correct(self.net.policy, self.task, self.test_pairs[mine], d.device).double()
        full = all_sum(d, full)  # every problem's result, in test-set order
        self.last_correct = [int(v) for v in full.tolist()]
        hits = math.nan
        if sampled:
            noise = torch.rand(
                len(self.test_pairs),
                self.task.answer_len,
                VOCAB_SIZE,
                generator=torch.Generator().manual_seed(s.seed * 100_003 + step),
            )
            right = sampled_correct(
                self.net.policy, self.task, self.test_pairs[mine], d.device, noise[mine], s.temperature
            )
            hits = float(all_sum(d, torch.tensor([float(right.sum())], dtype=torch.float64))[0])
        return float(full.mean()), hits / len(self.test_pairs)

    def evaluate_start(self) -> float:
        """The evaluation before RL: greedy (kept in `last_correct`) and sampled accuracy of the
        starting checkpoint, read from beside it or computed once and stored there
        (`mathrl.engine.eval_cache`: the sampled answers' noise has a fixed seed, not the run's); a
        random start is evaluated as any step is. The seconds the evaluation takes to compute."""
        if self.init_path == "random":
            t0 = time.perf_counter()
            self.initial_eval, self.initial_sampled = self.evaluate(0)
            return time.perf_counter() - t0
        result = eval_cache.initial_evaluation(
            Path(self.init_path),
            self.init_sha256,
            self.net.policy,
            self.task,
            self.cfg["tasks"][self.s.task],
            self.test_pairs,
            self.s.temperature,
            self.d.device,
        )
        self.last_correct = result.greedy
        self.initial_eval, self.initial_sampled = result.greedy_accuracy, result.sampled_accuracy
        return result.compute_seconds

    def pass_at_k_counts(self) -> list[int]:
        """Correct samples out of pass_at_k_samples per problem, for the first pass_at_k_problems
        held-out problems at the sampling temperature; the same noise before and after RL."""
        s, t0 = self.s, time.perf_counter()
        gen = torch.Generator().manual_seed(s.seed + 104729)
        pairs = self.test_pairs[: s.pass_at_k_problems]
        counts = sampled_correct_counts(
            self.net.policy, self.task, pairs, s.pass_at_k_samples, s.temperature, self.d.device, gen
        )
        self.pass_at_k_seconds += time.perf_counter() - t0
        return [int(c) for c in counts]

    def initial_pass_at_k_counts(self) -> list[int]:
        """pass@k's counts before RL: those of the same seed from the same checkpoint, read from
        beside it where another run stored them (`mathrl.engine.eval_cache`), else sampled here."""
        if self.init_path == "random":
            return self.pass_at_k_counts()
        s, t0 = self.s, time.perf_counter()
        counts = eval_cache.initial_pass_at_k(
            Path(self.init_path),
            self.init_sha256,
            self.cfg["tasks"][s.task],
            self.test_pairs[: s.pass_at_k_problems],
            s.pass_at_k_samples,
            s.temperature,
            s.seed,
            self.d.device,
            self.pass_at_k_counts,
        )
        if self.pass_at_k_seconds == 0.0:  # read, not sampled: the reading's seconds
            self.pass_at_k_seconds = time.perf_counter() - t0
        return counts

    # ---------------------------------------------------------------- the run
    def say(self, text: str) -> None:
        if self.d.is_main:
            if self.progress is not None:  # above the progress bar, not over it
                self.progress.write(text)
            else:
                print(text, flush=True)

    def run(self, on_mismatch: str = "error") -> dict:
        """Train to `steps` (resuming from a snapshot if there is one) and write the outputs.

        A snapshot from other settings or another start checkpoint is an error; with
        on_mismatch="restart" it is set aside (snapshot.stale.pt) and the run starts over,
        saying so: the pipeline's case after a user changed the run's configuration."""
        s, d = self.s, self.d
        snap_path = self.dir / "snapshot.pt"
        found = snapshot.load_found(snap_path)
        if found is not None:
            st, used = found  # the .prev where the latest snapshot was damaged
            try:
                self.restore(st, used)
                self.say(f"resuming {self.run_id} from {used} at step {self.step_no}")
            except snapshot.SnapshotError as exc:
                if on_mismatch != "restart":
                    raise
                barrier(d)  # every rank has read the snapshot before rank 0 moves it
                if d.is_main:
                    snapshot.set_aside(snap_path)
                self.say(f"restarting {self.run_id} from step 0: {exc}; the old snapshot is kept as snapshot.stale.pt")
        eval_seconds = 0.0
        if self.initial_eval is None:  # said first: on a pipe, nothing else shows for a while
            self.say(
                f"{self.run_id}: {s.steps} steps of {s.batch_size} rollouts on {d.device} (world size "
                f"{d.world_size}); evaluating {len(self.test_pairs)} held-out problems first"
            )
            t0 = time.perf_counter()
            eval_seconds = self.evaluate_start()  # what evaluating takes here (read from the cache: what it took)
            self.initial_correct = self.last_correct
            self.initial_eval_seconds = time.perf_counter() - t0
        if s.pass_at_k and d.is_main and "initial" not in self.pass_counts:
            self.pass_counts["initial"] = self.initial_pass_at_k_counts()
        wandb_run = self.start_wandb()
        progress = None
        if d.is_main and sys.stderr.isatty():
            from tqdm import tqdm

            progress = self.progress = tqdm(total=s.steps, initial=self.step_no, desc=self.run_id, leave=False)
        first = self.step_no + 1
        while self.step_no < s.steps and self.status == "running":
            row = self.step()
            step = row["step"]
            if progress is not None:
                progress.update(1)
            if wandb_run is not None:
                wandb_run.log({f"train/{k}": v for k, v in row.items()}, step=step)
            if step % s.log_every == 0 or step == 1 or step == s.steps:
                self.say(console_line(row, s.steps))
            if step == first and step < s.steps:  # how long the rest will take, from this step's pace
                left = range(step + 1, s.steps + 1)
                evals = sum(self.schedule.evaluated(k) for k in left) if eval_seconds else 0
                self.say(f"{self.run_id}: " + time_left(len(left), row["seconds"], evals, eval_seconds))
            if d.is_main and (step % s.snapshot_every == 0 or step == s.steps or self.status != "running"):
                if self.status == "running" and step == s.steps:
                    self.status = "complete"
                snapshot.save(snap_path, self.state())
        if self.status == "running":
            self.status = "complete"
        if progress is not None:
            progress.close()
            self.progress = None
        if wandb_run is not None:
            wandb_run.finish()
        if s.pass_at_k and d.is_main and self.status == "complete" and "final" not in self.pass_counts:
            self.pass_counts["final"] = self.pass_at_k_counts()
        summary = self.summary()
        if d.is_main:
            written = {"metrics.csv": write_metrics(self.dir / "metrics.csv", self.rows), **self.write_problem_files()}
            summary["files"] = {name: record(data) for name, data in written.items()}  # what readers check them by
            atomic_write(self.dir / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
        return summary

    def write_problem_files(self) -> dict[str, bytes]:
        """heldout.csv: a, b and greedy correctness (0/1) at the start and at the last evaluation
        of every held-out problem; pass_at_k.csv (runs with pass_at_k): a, b, phase
        (initial/final), samples and correct samples per problem; carry_probe.csv (complete runs with carry_probe,
        mathrl.engine.carry_probe). What was written, by file name."""
        pairs, written = self.test_pairs.tolist(), {}
        if self.initial_correct is not None and self.last_correct is not None:
            lines = ["a,b,initial,final"] + [
                f"{a},{b},{i},{f}" for (a, b), i, f in zip(pairs, self.initial_correct, self.last_correct)
            ]
            written["heldout.csv"] = ("\n".join(lines) + "\n").encode()
        if self.pass_counts:
            lines = ["phase,a,b,samples,correct"]
            for phase, counts in self.pass_counts.items():
                lines += [f"{phase},{a},{b},{self.s.pass_at_k_samples},{c}" for (a, b), c in zip(pairs, counts)]
            written["pass_at_k.csv"] = ("\n".join(lines) + "\n").encode()
        if self.s.carry_probe and self.status == "complete":  # the start and final policies, probed once
            test = read_problems(problems_file(self.cfg, self.s.task, "test"), self.task)
            written[CARRY_PROBE_FILE] = probe_csv({"start": self.ref, "final": self.net.policy}, self.task, test)
        for name, data in written.items():
            atomic_write(self.dir / name, data)
        return written

    def start_wandb(self):
        if not (self.s.wandb and self.d.is_main):
            return None
        try:
            import os

            import wandb
        except ImportError:
            raise ConfigError("wandb: true needs the wandb package (pip install -e '.[wandb]')") from None
        os.environ.setdefault("WANDB_MODE", "offline")
        return wandb.init(project="mathrl", name=self.run_id, config=self.s.as_dict(), dir=str(self.dir))

    def summary(self) -> dict:
        evals = [(r["step"], r["eval_accuracy"]) for r in self.rows if not math.isnan(r["eval_accuracy"])]
        best = max(evals, key=lambda e: e[1]) if evals else (0, math.nan)
        last = self.rows[-1] if self.rows else {}
        s = self.s
        return {
            "run_id": self.run_id,
            "experiment": self.experiment,
            "task": s.task,
            "algorithm": s.algorithm,
            "batch_size": s.batch_size,
            "lr": s.lr,
            "kl_coef": s.kl_coef,
            "seed": s.seed,
            "config": s.as_dict(),  # the run's complete settings (RunSettings), as the tables read them
            "resolved": {
                "task_config": self.cfg["tasks"][s.task],
                "model": self.model_config,
                "init": str(self.init_path),
                "world_size": self.d.world_size,
                "device": str(self.d.device),
                "n_eval": len(self.test_pairs),
            },
            "status": self.status,
            "initial": {
                "eval_accuracy": self.initial_eval,
                "eval_sampled_accuracy": self.initial_sampled,
                "eval_seconds": self.initial_eval_seconds,
            },
            "pass_at_k_seconds": self.pass_at_k_seconds,  # an evaluation too, outside the steps' eval_seconds
            "final": {**last, "eval_accuracy": evals[-1][1] if evals else math.nan},
            "best": {"step": best[0], "eval_accuracy": best[1]},
            "steps_done": self.step_no,
            "wall_seconds": sum(r["seconds"] for r in self.rows),
            "run_seconds": time.perf_counter() - self.started,  # the command so far: setup, steps, evaluations, writing
            "versions": mathrl.versions(),
            "git": mathrl.git_state(),  # the commit and whether tracked files had changes
            "alerts": self.monitor.alerts,
        }


def write_metrics(path: Path, rows: list[dict]) -> bytes:
    """metrics.csv in one atomic write: a reader never sees a partial file. The bytes written."""
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: row.get(k, math.nan) for k in COLUMNS})
    data = buf.getvalue().encode()
    atomic_write(path, data)
    return data
