"""A run's schedules: what each step reads from the settings, as one object the trainer and the resume check share.

`Schedule(settings, task_ndigit)` gives a 1-based step's learning rate (the LR schedule, or the critic warm-up's
LR), entropy coefficient, operand digits under the curriculum, and whether it ends with a held-out evaluation; its
`plan(step)` is all of that with the test faults that fire there, the step's whole reading of the scheduled
settings. The trainer asks it every step; `mathrl.engine.resume` compares two runs' plans step by step to decide
whether a snapshot may resume under changed settings. The settings are a run's resolved settings read by key: the
run's own `RunSettings` (the trainer's, typed when the runs were expanded; read through its `as_dict()`), or
the dict a snapshot recorded (`RunSettings.as_dict()` of the mathrl that wrote it, which may lack a later key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mathrl.engine.control import entropy_coef_at, lr_factor
from mathrl.pipeline.settings import RunSettings

# Settings no step reads: when to print a line, write a snapshot, log to W&B, or probe the policies at the end.
OUTSIDE_THE_STEP = frozenset({"log_every", "snapshot_every", "wandb", "carry_probe"})

# Settings a step reads only through the step-indexed items of its plan (`Schedule.plan`).
SCHEDULED = frozenset(
    {
        "steps",
        "lr",
        "lr_schedule",
        "lr_decay_rate",
        "lr_decay_every",
        "lr_min_factor",
        "warmup_steps",
        "entropy_coef",
        "entropy_schedule",
        "entropy_coef_end",
        "curriculum_start",
        "curriculum_every",
        "eval_every",
        "fault_nan_step",
        "fault_grad_spike_step",
        "nan_policy",
    }
)


def settings_dict(settings) -> dict[str, Any]:
    """A run's settings as a dict: a RunSettings' `as_dict()`, or a copy of a snapshot's recorded dict."""
    return settings.as_dict() if isinstance(settings, RunSettings) else dict(settings)


@dataclass(frozen=True)
class Schedule:
    """What each 1-based step of a run reads from its settings `s` through its schedules."""

    s: Mapping[str, Any]  # the settings as a dict: a RunSettings' as_dict(), or a snapshot's recorded dict
    task_ndigit: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "s", settings_dict(self.s))

    def lr(self, step: int) -> float:
        """The learning rate (critic_warmup_lr during critic pre-training, when set)."""
        s = self.s
        if step <= s.get("critic_warmup_steps", 0) and s.get("critic_warmup_lr"):
            return s["critic_warmup_lr"]  # only the value head has gradients then
        return s["lr"] * lr_factor(
            s["lr_schedule"],
            step - 1,
            s["steps"],
            decay_rate=s["lr_decay_rate"],
            decay_every=s["lr_decay_every"],
            min_factor=s["lr_min_factor"],
            warmup_steps=s["warmup_steps"],
        )

    def entropy_coef(self, step: int) -> float:
        """The entropy-bonus coefficient."""
        s = self.s
        return entropy_coef_at(s["entropy_schedule"], step - 1, s["steps"], s["entropy_coef"], s["entropy_coef_end"])

    def ndigit(self, step: int) -> int:
        """Operand digits under the curriculum (the task's without one)."""
        start = self.s["curriculum_start"]
        if start is None:
            return self.task_ndigit
        return min(self.task_ndigit, start + (step - 1) // self.s["curriculum_every"])

    def evaluated(self, step: int) -> bool:
        """Whether the step ends with a held-out evaluation (every eval_every, and the last)."""
        return step % self.s["eval_every"] == 0 or step == self.s["steps"]

    def plan(self, step: int, nonfinite: frozenset = frozenset()) -> dict:
        """What the step reads from the settings through its schedules. `nonfinite` are the steps that met a
        non-finite loss or gradient: only there does `nan_policy` decide anything."""
        s = self.s
        plan = {
            "lr": self.lr(step),
            "entropy_coef": self.entropy_coef(step),
            "ndigit": self.ndigit(step),
            "evaluated": self.evaluated(step),
            "nan_injected": s.get("fault_nan_step") == step,
            "spike_injected": s.get("fault_grad_spike_step") == step,
        }
        if step in nonfinite:
            plan["nan_policy"] = s.get("nan_policy")
        return plan


def unscheduled(s: Mapping[str, Any]) -> dict:
    """The settings every step reads as they are."""
    return {k: v for k, v in s.items() if k not in SCHEDULED | OUTSIDE_THE_STEP}
