"""`RunSettings`: one RL run's settings, typed and frozen.

A run's settings are built once, from the validated and completed config
(`config.run_settings` / `config.expand_runs` resolve the train defaults, the algorithm's
preset and the experiment's own values), by `RunSettings.from_dict`, which refuses a key
too many or too few. The schema (config/config.schema.yaml, `definitions.train`) stays the
one place where defaults, ranges and meanings live: `RunSettings.help(name)` is the
schema's description of a field (each field carries it in `metadata["help"]`, read from the
schema when this module is imported), and tests check that the fields here are exactly the
schema's keys with matching types. `mathrl settings` lists every field with its value,
range and help (`listing`). Every summary.json records `as_dict()` under `config`.
"""

from __future__ import annotations

import dataclasses
import textwrap
import types
from dataclasses import dataclass
from typing import Any

from mathrl.pipeline.errors import ConfigError


@dataclass(frozen=True)
class RunSettings:
    # what is trained, from where, for how long
    task: str
    algorithm: str
    init: str | None
    warmup: int | None
    steps: int
    train_subset: int
    batch_size: int
    group_size: int
    micro_batch_size: int
    # optimizer and learning-rate schedule
    lr: float
    lr_scale: float
    lr_schedule: str
    lr_decay_rate: float
    lr_decay_every: int
    lr_min_factor: float
    warmup_steps: int
    optimizer: str
    weight_decay: float
    adam_beta1: float
    adam_beta2: float
    momentum: float
    grad_clip: float | None
    # KL penalty and entropy bonus
    kl_coef: float
    kl_estimator: str
    kl_controller: str
    kl_target: float
    kl_horizon: int
    entropy_coef: float
    entropy_schedule: str
    entropy_coef_end: float
    # sampling and reward
    temperature: float
    # the rollout/trainer mismatch: its sources and the importance-sampling corrections
    sampler_dtype: str
    rollout_staleness: int
    sample_top_k: int
    sample_top_p: float
    tis_cap: float | None
    mis_cap: float | None
    seq_mask_cap: float | None
    reward: str
    format_bonus: float
    digit_weight: float
    invalid_penalty: float
    proxy_correct_weight: float
    proxy_bias_weight: float
    reward_offset: float
    reward_norm: bool
    reward_clip: float | None
    # advantages and the loss
    adv_norm: bool
    adv_clip: float | None
    sample_filter: str
    baseline_decay: float
    ppo_epochs: int
    clip_eps: float | None
    clip_eps_high: float | None
    value_coef: float
    value_clip: float | None
    reward_placement: str
    gae_lambda: float
    gamma: float
    dynamic_sampling: bool
    dynamic_sampling_rounds: int
    loss_agg: str
    curriculum_start: int | None
    curriculum_every: int
    # evaluation, logging, snapshots, faults, monitor, device
    eval_every: int
    eval_size: int
    eval_sampled: bool
    eval_split: str
    log_every: int
    snapshot_every: int
    seed: int
    nan_policy: str
    fault_nan_step: int | None
    fault_grad_spike_step: int | None
    fault_grad_spike_scale: float
    critic_warmup_steps: int
    critic_warmup_lr: float | None
    monitor_entropy_min: float
    monitor_kl_max: float
    monitor_reward_swing: float
    monitor_window: int
    monitor_swing_sigmas: float | None
    monitor_grad_spike: float | None
    monitor_entropy_rise: float | None
    # diagnostics and entropy remedies
    policy_loss: str
    cov_ratio: float
    clip_cov_lower: float
    clip_cov_upper: float
    kl_cov_coef: float
    gspo_clip_low: float
    gspo_clip_high: float
    cispo_clip_high: float
    clip_ratio_c: float
    token_selection: str
    token_fraction: float
    grad_noise_scale: bool
    pass_at_k: bool
    pass_at_k_problems: int
    pass_at_k_samples: int
    carry_probe: bool
    device: str
    wandb: bool

    @classmethod
    def from_dict(cls, settings: dict[str, Any]) -> RunSettings:
        """From a run's resolved settings (every key of the schema's `train`, no other)."""
        names = {f.name for f in dataclasses.fields(cls)}
        missing, unknown = sorted(names - set(settings)), sorted(set(settings) - names)
        if missing or unknown:
            raise ConfigError(
                f"run settings: missing {', '.join(missing) or 'none'}; unknown {', '.join(unknown) or 'none'}"
            )
        return cls(**settings)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def help(name: str) -> str:
        """The schema's description of setting `name` (also the field's `metadata["help"]`)."""
        return FIELDS[name].metadata["help"]


def _with_help() -> dict[str, dataclasses.Field]:
    """The fields by name, each carrying its help in `metadata["help"]` (as TRL's config
    dataclasses do), read from the schema, the one place it is written."""
    from mathrl.pipeline.config import load_schema

    props = load_schema()["definitions"]["train"]["properties"]
    fields = {f.name: f for f in dataclasses.fields(RunSettings)}
    for name, f in fields.items():
        f.metadata = types.MappingProxyType({"help": props[name]["description"]})
    return fields


FIELDS = _with_help()


def allowed(spec: dict) -> str:
    """A schema property's type and range in words: `number > 0`, `one of: cpu, cuda`."""
    if "enum" in spec:
        return "one of: " + ", ".join("null" if v is None else str(v) for v in spec["enum"])
    kinds = spec.get("type", "any")
    text = " or ".join(kinds) if isinstance(kinds, list) else kinds
    bounds = [("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<")]
    return " ".join([text] + [f"{op} {spec[key]:g}" for key, op in bounds if key in spec])


def listing(train: dict, names: list[str] | None = None) -> str:
    """Every run setting (or those whose name contains one of `names`): the value `mathrl train`
    uses without overrides (`train`, the config's completed train block), the schema default
    where it differs, type and range, and help: `mathrl settings`."""
    from mathrl.pipeline.config import load_schema

    props = load_schema()["definitions"]["train"]["properties"]
    lines = []
    for name in (f.name for f in dataclasses.fields(RunSettings)):
        if names and not any(part in name for part in names):
            continue
        spec, value = props[name], train.get(name)
        default = "" if spec.get("default") == value else f" (schema default {spec.get('default')!r})"
        lines.append(f"{name} = {value!r}{default}  [{allowed(spec)}]")
        lines.append(textwrap.fill(RunSettings.help(name), 100, initial_indent="    ", subsequent_indent="    "))
    return "\n".join(lines)
