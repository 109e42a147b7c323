"""`RunSettings`: one RL run's settings, typed and frozen.

A run's settings are built once: `config.expand_runs` resolves each experiment run's (the
train defaults, the algorithm's preset, the experiment's own values; `lr` times `lr_scale`,
the seed's warm-up) with `config.run_settings` and types them here (`RunSettings.from_dict`,
which refuses a key too many or too few), and every reader after it (`mathrl train`, the
trainer, the schedules, the resume check, the Snakemake and DVC params) takes that object.
`mathrl train --run RUN KEY=VALUE` changes it with `config.overridden` (`dataclasses.replace`
under the same checks); an ad hoc run resolves the config's train block once, then is typed.
Hashes, JSON and params read `as_dict()`, so they are what they were for the dict; so do the
readers that compare them with recorded settings (a snapshot's, summary.json's `config`: dicts),
the schedules and the resume check, and the analysis.

Each field's help is written here, in `metadata["help"]` (as TRL's config dataclasses carry
it); the schema (config/config.schema.yaml, `definitions.train`) holds the defaults and
ranges, and its description of each key is the same text (tests/test_settings.py checks that
the fields are exactly the schema's keys, with matching types and help). `mathrl settings`
lists every field with its value, range and help (`listing`). Every summary.json records
`as_dict()` under `config`.
"""

from __future__ import annotations

import dataclasses
import textwrap
from dataclasses import dataclass, field
from typing import Any

from mathrl.pipeline.errors import ConfigError


@dataclass(frozen=True)
class RunSettings:
    # what is trained, from where, for how long
    task: str = field(metadata={"help": "A task name from `tasks`."})
    algorithm: str = field(
        metadata={
            "help": "Advantage estimator and loss: reinforce (moving-average baseline), reinforce_no_baseline (the "
            "raw reward), ppo (critic + GAE), grpo (group-normalised), rloo (leave-one-out), dapo "
            "(group-normalised; preset adds clip-higher, dynamic sampling, token-level loss), dr_grpo "
            "(group-mean baseline, no std division), grpo_batch_std (group-mean baseline over the batch's "
            "reward std, TRL's scale_rewards=batch), reinforce_pp_baseline (group-mean baseline, then "
            "whitened over the batch's answer tokens)."
        }
    )
    init: str | None = field(
        metadata={
            "help": "Checkpoint to start from and to use as the KL reference (null: the run's warm-up, "
            "results/sft/{task}/w{warmup}/model.pt; start_PCT: that warm-up continued to this validation "
            "accuracy, results/sft/{task}/w{warmup}/starts/start_PCT.pt, one of sft.TASK.starts; random: a "
            "fresh model of the task's warm-up preset, seeded by the run's seed; else a file)."
        }
    )
    warmup: int | None = field(
        metadata={
            "help": "Which of the task's independent warm-ups (sft.TASK.warmups) the run starts from (null: its "
            "seed's, seed mod warmups). Runs of one seed share their warm-up whatever their settings, so "
            "arms compared by seed are paired by warm-up too."
        }
    )
    steps: int = field(metadata={"help": "RL steps (optimizer updates per PPO epoch)."})
    train_subset: int = field(
        metadata={
            "help": "Draw the RL prompts from the first this many training problems only (0: every training "
            "problem): a training set too small for the task."
        }
    )
    batch_size: int = field(metadata={"help": "Rollouts per step over all ranks (the global batch)."})
    group_size: int = field(
        metadata={"help": "Rollouts per prompt; batch_size must be a multiple of group_size x world size."}
    )
    micro_batch_size: int = field(
        metadata={
            "help": "Rollouts per backward pass on a rank; gradients accumulate to the full batch (0: no accumulation)."
        }
    )
    # optimizer and learning-rate schedule
    lr: float = field(metadata={"help": "Peak learning rate (after lr_scale: the value recorded is the product)."})
    lr_scale: float = field(
        metadata={
            "help": "Multiplies the lr the run would otherwise have (the train default or the experiment's), so a "
            "setting meant to be aggressive is stated relative to the calibrated reference (5: five times "
            "its LR) and means the same at every scale. An experiment's fixed block or a variant sets lr or"
            " lr_scale, not both: layered files would otherwise train at the product."
        }
    )
    lr_schedule: str = field(
        metadata={"help": "constant; step: lr x decay_rate^(step // decay_every); cosine down to lr x lr_min_factor."}
    )
    lr_decay_rate: float = field(metadata={"help": "Factor per decay period of the step schedule."})
    lr_decay_every: int = field(metadata={"help": "Steps per decay period of the step schedule."})
    lr_min_factor: float = field(metadata={"help": "Floor of the cosine schedule as a fraction of lr."})
    warmup_steps: int = field(metadata={"help": "Linear learning-rate warm-up steps."})
    optimizer: str = field(metadata={"help": "torch.optim.AdamW (fused kernel) or torch.optim.SGD."})
    weight_decay: float = field(metadata={"help": "Weight decay: decoupled for AdamW, L2 for SGD."})
    adam_beta1: float = field(metadata={"help": "AdamW beta1."})
    adam_beta2: float = field(metadata={"help": "AdamW beta2."})
    momentum: float = field(metadata={"help": "SGD momentum (AdamW ignores it)."})
    grad_clip: float | None = field(metadata={"help": "Max global gradient norm (null: no clipping)."})
    # KL penalty and entropy bonus
    kl_coef: float = field(metadata={"help": "Initial coefficient of the KL penalty to the reference policy."})
    kl_estimator: str = field(metadata={"help": "Per-token KL estimator."})
    kl_controller: str = field(
        metadata={"help": "fixed; adaptive (Ziegler et al. 2019); threshold (x1.5 above 2x target, x0.8 below half)."}
    )
    kl_target: float = field(metadata={"help": "Target KL of the adaptive and threshold controllers."})
    kl_horizon: int = field(metadata={"help": "Horizon of the adaptive controller in steps."})
    entropy_coef: float = field(metadata={"help": "Entropy bonus coefficient (at the start of its schedule)."})
    entropy_schedule: str = field(metadata={"help": "Schedule of the entropy bonus."})
    entropy_coef_end: float = field(metadata={"help": "Entropy bonus at the end of a linear or cosine schedule."})
    # sampling and reward
    temperature: float = field(metadata={"help": "Sampling temperature of rollouts."})
    # the rollout/trainer mismatch: its sources and the importance-sampling corrections
    sampler_dtype: str = field(
        metadata={
            "help": "Precision of the policy that samples rollouts (a copy of the current weights cast to it, as a "
            "bf16 or fp16 inference engine would sample); the trainer stays float32. float32: the trainer's"
            " own policy samples."
        }
    )
    rollout_staleness: int = field(
        metadata={
            "help": "Rollouts are sampled by the weights of this many updates ago, as in asynchronous RL (the first"
            " steps use the weights of step 1); 0: the current weights."
        }
    )
    sample_top_k: int = field(
        metadata={
            "help": "Truncated sampling: sample only among the top_k most likely tokens, renormalised (0: no "
            "limit). The trainer's log-probs are of the full distribution."
        }
    )
    sample_top_p: float = field(
        metadata={
            "help": "Truncated (nucleus) sampling: sample only among the fewest most likely tokens whose "
            "probability reaches top_p, renormalised (1.0: no limit)."
        }
    )
    tis_cap: float | None = field(
        metadata={
            "help": "Truncated importance sampling: each answer token's policy-gradient term is multiplied by "
            "min(w, tis_cap), detached, with w = exp(trainer log-prob - sampler log-prob) of that token "
            "(null: off)."
        }
    )
    mis_cap: float | None = field(
        metadata={
            "help": "Masked importance sampling: tokens whose w lies outside [1/mis_cap, mis_cap] get weight 0 in "
            "the policy-gradient term (still counted in the loss's divisor) (null: off)."
        }
    )
    seq_mask_cap: float | None = field(
        metadata={
            "help": "Sequence-level masking: sequences whose geometric-mean w over their answer tokens lies outside"
            " [1/seq_mask_cap, seq_mask_cap] get weight 0 in the policy-gradient term (null: off). The "
            "three corrections multiply when several are set."
        }
    )
    reward: str = field(
        metadata={
            "help": "Training reward (exact-match accuracy is logged whatever it is); signed: +1 for an exact "
            "answer, -1 otherwise; random: a negative control, 1 with probability 0.5 independent of the "
            "answer, drawn from the run's seeded sampling generator (reproducible and resumable)."
        }
    )
    format_bonus: float = field(metadata={"help": "Shaped reward for a well-formed answer."})
    digit_weight: float = field(metadata={"help": "Shaped reward weight of the share of correct digits."})
    invalid_penalty: float = field(metadata={"help": "Subtracted for invalid output in shaped_penalty."})
    proxy_correct_weight: float = field(metadata={"help": "Proxy reward model weight on correct digits."})
    proxy_bias_weight: float = field(
        metadata={"help": "Proxy reward model weight on its exploitable bias (big digits look right)."}
    )
    reward_offset: float = field(
        metadata={
            "help": "Added to every training reward (0: none): a reward on a scale whose common part dwarfs what "
            "tells answers apart, the large reward values the collapse analysis normalises away."
        }
    )
    reward_norm: bool = field(metadata={"help": "Whiten rewards over the global batch before advantages."})
    reward_clip: float | None = field(metadata={"help": "Clip rewards to +-this (after normalisation)."})
    # advantages and the loss
    adv_norm: bool = field(metadata={"help": "Whiten advantages over the global batch."})
    adv_clip: float | None = field(metadata={"help": "Clip advantages to +-this."})
    sample_filter: str = field(
        metadata={
            "help": "Which rollouts the policy-gradient term trains on, chosen after advantages are computed (and "
            "normalised): all; positive (only rollouts whose mean advantage over their answer tokens is > "
            "0); negative (only those < 0). The others' advantage is set to 0; the KL penalty, entropy "
            "bonus and value loss still act on every rollout."
        }
    )
    baseline_decay: float = field(
        metadata={"help": "REINFORCE moving-average baseline: b = decay x b + (1 - decay) x mean reward."}
    )
    ppo_epochs: int = field(metadata={"help": "Passes over each batch of rollouts."})
    clip_eps: float | None = field(metadata={"help": "Lower clip range of the ratio (null: no clipping)."})
    clip_eps_high: float | None = field(
        metadata={"help": "Upper clip range (null: same as clip_eps); DAPO's clip-higher uses 0.28."}
    )
    value_coef: float = field(metadata={"help": "PPO value-loss weight."})
    value_clip: float | None = field(metadata={"help": "PPO value-loss clipping range (null: off)."})
    reward_placement: str = field(
        metadata={
            "help": "What a critic estimator (ppo) runs GAE on: end (the sequence reward at the last answer token);"
            " per_token (a dense per-digit signal: each answer token, digits and the end token, earns "
            "1/(W+1) when it equals the target's token there, so the return from a token is the share of "
            "the answer still to be got right; reward, reward_norm and reward_clip then shape only the "
            "logged reward_mean). Other algorithms refuse per_token."
        }
    )
    gae_lambda: float = field(metadata={"help": "GAE lambda for PPO."})
    gamma: float = field(metadata={"help": "Discount over answer tokens for PPO."})
    dynamic_sampling: bool = field(
        metadata={"help": "Drop groups whose rewards are all equal and refill the batch (DAPO)."}
    )
    dynamic_sampling_rounds: int = field(metadata={"help": "Refill rounds before keeping what there is."})
    loss_agg: str = field(
        metadata={"help": "Average the loss over all answer tokens (token) or per sequence first (sequence)."}
    )
    curriculum_start: int | None = field(
        metadata={"help": "Curriculum over ndigit: start with this many digits (null: none)."}
    )
    curriculum_every: int = field(metadata={"help": "Steps per added digit of the curriculum."})
    # evaluation, logging, snapshots, faults, monitor, device
    eval_every: int = field(metadata={"help": "Steps between held-out greedy evaluations."})
    eval_size: int = field(metadata={"help": "Held-out problems per evaluation (0: all)."})
    eval_sampled: bool = field(
        metadata={
            "help": "The last evaluation also samples one answer per held-out problem at the policy's temperature "
            "(eval_sampled_accuracy in metrics.csv; NaN when off). Off by default: it costs a second "
            "evaluation, and only a study that compares sampled with greedy accuracy reads it. The accuracy"
            " sampled before RL is always in summary.json (computed once per checkpoint)."
        }
    )
    eval_split: str = field(
        metadata={
            "help": "The split every evaluation reads: test (the held-out set every verdict is judged on) or val "
            "(the validation split, disjoint from it: a run that selects a setting, the calibration "
            "pilot's, reads this one)."
        }
    )
    log_every: int = field(metadata={"help": "Steps between console lines."})
    snapshot_every: int = field(metadata={"help": "Steps between snapshots."})
    seed: int = field(metadata={"help": "Seed of prompts and sampling (rank-independent)."})
    nan_policy: str = field(metadata={"help": "On a non-finite loss or gradient: skip the update, or stop the run."})
    fault_nan_step: int | None = field(
        metadata={"help": "Test hook: make the loss non-finite at this step (null: never)."}
    )
    fault_grad_spike_step: int | None = field(
        metadata={
            "help": "Test hook: multiply the loss (so the gradient) by fault_grad_spike_scale at this step (null: "
            "never); the clipping study's injected spike."
        }
    )
    fault_grad_spike_scale: float = field(metadata={"help": "Factor of the injected gradient spike."})
    critic_warmup_steps: int = field(
        metadata={
            "help": "PPO: the first this many steps train only the value head (policy loss, KL and entropy terms "
            "dropped, trunk gradients discarded), so the critic explains returns before the policy moves."
        }
    )
    critic_warmup_lr: float | None = field(
        metadata={
            "help": "Learning rate of the critic pre-training steps (null: lr); only the value head has gradients then."
        }
    )
    monitor_entropy_min: float = field(metadata={"help": "Alert when entropy falls below this."})
    monitor_kl_max: float = field(metadata={"help": "Alert when KL exceeds this."})
    monitor_reward_swing: float = field(metadata={"help": "Alert when the reward range over the window exceeds this."})
    monitor_window: int = field(metadata={"help": "Steps in the reward-swing window."})
    monitor_swing_sigmas: float | None = field(
        metadata={
            "help": "Reward-swing threshold in sampling standard errors of a batch mean, sqrt(p(1-p)/batch_size) at"
            " the window's mean reward p (null: the fixed monitor_reward_swing)."
        }
    )
    monitor_grad_spike: float | None = field(
        metadata={
            "help": "Alert when the gradient norm exceeds this multiple of the median of the previous "
            "monitor_window steps' norms (null: off)."
        }
    )
    monitor_entropy_rise: float | None = field(
        metadata={
            "help": "Alert when entropy exceeds the minimum of the previous monitor_window steps by this fraction "
            "of it (0.5: 50% above; null: off)."
        }
    )
    # diagnostics and entropy remedies
    policy_loss: str = field(
        metadata={
            "help": "The per-token policy loss, by name from mathrl.engine.policy_losses: vanilla (PPO's clipped "
            "surrogate, clip_eps and clip_eps_high; REINFORCE's gradient at one update per batch); the "
            "entropy remedies of arXiv 2505.22617 on it: clip_cov (cut the gradient of a random cov_ratio "
            "share of tokens whose log-prob/advantage covariance term lies in (clip_cov_lower, "
            "clip_cov_upper)), kl_cov (add kl_cov_coef x |logp - old logp| on the cov_ratio share of tokens"
            " of largest covariance term; acts only from a second PPO epoch on); gspo (arXiv 2507.18071: "
            "the clipped surrogate on each sequence's ratio, exp of the mean token log-ratio, clipped by "
            "gspo_clip_low and gspo_clip_high; meant with loss_agg: sequence); cispo (arXiv 2506.13585: -w "
            "A logp with the importance weight w clipped above at 1 + cispo_clip_high and detached, so no "
            "token loses its gradient; meant with loss_agg: token); dual_clip (the clipped surrogate, "
            "bounded by clip_ratio_c x A where A < 0). Without a second PPO epoch every ratio is 1 and "
            "gspo, cispo and dual_clip give vanilla's gradient."
        }
    )
    cov_ratio: float = field(
        metadata={
            "help": "Share of answer tokens Clip-Cov or KL-Cov acts on (the paper's 2e-4 is for long LLM answers; "
            "at least one token per micro-batch)."
        }
    )
    clip_cov_lower: float = field(metadata={"help": "Clip-Cov's lower bound on a token's covariance term."})
    clip_cov_upper: float = field(metadata={"help": "Clip-Cov's upper bound on a token's covariance term."})
    kl_cov_coef: float = field(metadata={"help": "KL-Cov's coefficient of |logp - old logp| on the chosen tokens."})
    gspo_clip_low: float = field(
        metadata={
            "help": "GSPO's lower clip range of the sequence ratio (policy_loss: gspo): the ratio is kept above 1 -"
            " gspo_clip_low (the paper's 3e-4)."
        }
    )
    gspo_clip_high: float = field(
        metadata={
            "help": "GSPO's upper clip range of the sequence ratio (policy_loss: gspo): the ratio is kept below 1 +"
            " gspo_clip_high (the paper's 4e-4)."
        }
    )
    cispo_clip_high: float = field(
        metadata={
            "help": "CISPO's upper bound on the importance weight (policy_loss: cispo): w = min(ratio, 1 + "
            "cispo_clip_high), with no lower bound. The paper tunes this bound without stating its value; 4"
            " (weights up to 5) is SkyRL's default."
        }
    )
    clip_ratio_c: float = field(
        metadata={
            "help": "Dual-clip PPO's bound (policy_loss: dual_clip): where the advantage A < 0, a token's loss is "
            "at most -clip_ratio_c x A, i.e. its ratio counts up to clip_ratio_c (verl's clip_ratio_c, "
            "default 3)."
        }
    )
    token_selection: str = field(
        metadata={
            "help": "Which answer tokens the policy-gradient term trains on, by name from "
            "mathrl.engine.token_selection (arXiv 2506.01939): all (every answer token; the loss is exactly"
            " the one without selection); top_entropy (the round(token_fraction x n) answer tokens of "
            "highest entropy among the batch's n, entropy of the sampling policy at the rollout, detached; "
            "ties go to the earlier token); bottom_entropy (the other answer tokens). The policy-gradient "
            "term is the mean over the selected tokens with loss_agg: token (each selected token weighs n /"
            " selected); the KL and entropy terms keep every answer token. On several ranks each rank "
            "selects within its own batch."
        }
    )
    token_fraction: float = field(
        metadata={
            "help": "The share of answer tokens top_entropy selects (bottom_entropy selects the rest); the paper's "
            "0.2. Unused with token_selection: all."
        }
    )
    grad_noise_scale: bool = field(
        metadata={
            "help": "Log grad_noise_scale, tr(Σ)/|G|² (McCandlish et al. 2018), each step from the micro-batch "
            "gradients against the batch's (needs micro_batch_size below batch_size; one process; NaN "
            "otherwise)."
        }
    )
    pass_at_k: bool = field(
        metadata={
            "help": "Before and after RL, sample pass_at_k_samples answers at the sampling temperature for "
            "pass_at_k_problems held-out problems and write pass_at_k.csv (correct samples per problem) in "
            "the run directory."
        }
    )
    pass_at_k_problems: int = field(
        metadata={"help": "Held-out problems of the pass@k evaluation (the first of the test set)."}
    )
    pass_at_k_samples: int = field(
        metadata={"help": "Samples per problem of the pass@k evaluation (pass@k for k up to this)."}
    )
    carry_probe: bool = field(
        metadata={
            "help": "When the run completes, write carry_probe.csv (mathrl.engine.carry_probe): teacher-forced on "
            "the first 1000 problems of the task's test set, the entropy of the start and final policies at"
            " each answer token, by position and by whether a carry enters the digit (an addition task's "
            "probe of arXiv 2506.01939's forking tokens)."
        }
    )
    device: str = field(metadata={"help": "auto: CUDA when available."})
    wandb: bool = field(metadata={"help": "Log to Weights & Biases (offline unless WANDB_MODE says otherwise)."})

    @classmethod
    def from_dict(cls, settings: dict[str, Any]) -> RunSettings:
        """From a run's resolved settings (every key of the schema's `train`, no other)."""
        missing, unknown = sorted(FIELDS.keys() - set(settings)), sorted(set(settings) - FIELDS.keys())
        if missing or unknown:
            raise ConfigError(
                f"run settings: missing {', '.join(missing) or 'none'}; unknown {', '.join(unknown) or 'none'}"
            )
        return cls(**settings)

    def as_dict(self) -> dict[str, Any]:
        """The settings as the dict they were resolved from (hashes, JSON, params read this)."""
        return {name: getattr(self, name) for name in FIELDS}

    @staticmethod
    def help(name: str) -> str:
        """Setting `name`'s help (its field's `metadata["help"]`, the schema's description of it)."""
        return FIELDS[name].metadata["help"]


FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(RunSettings)}


def allowed(spec: dict) -> str:
    """A schema property's type and range in words: `number > 0`, `one of: cpu, cuda`."""
    if "enum" in spec:
        return "one of: " + ", ".join("null" if v is None else str(v) for v in spec["enum"])
    kinds = spec.get("type", "any")
    text = " or ".join(kinds) if isinstance(kinds, list) else kinds
    bounds = [("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<")]
    return " ".join([text] + [f"{op} {spec[key]:g}" for key, op in bounds if key in spec])


def listing(train: dict, props: dict, names: list[str] | None = None) -> str:
    """Every run setting (or those whose name contains one of `names`): the value `mathrl train`
    uses without overrides (`train`, the config's completed train block), the schema default
    (`props`: the schema's train properties) where it differs, type and range, and help: `mathrl settings`."""
    lines = []
    for name in (f.name for f in dataclasses.fields(RunSettings)):
        if names and not any(part in name for part in names):
            continue
        spec, value = props[name], train.get(name)
        default = "" if spec.get("default") == value else f" (schema default {spec.get('default')!r})"
        lines.append(f"{name} = {value!r}{default}  [{allowed(spec)}]")
        lines.append(textwrap.fill(RunSettings.help(name), 100, initial_indent="    ", subsequent_indent="    "))
    return "\n".join(lines)
