"""The console line a run prints per log interval, in the documents' form; one format for
the trainer and for the report that shows it."""

from __future__ import annotations

import math


def console_line(row: dict, steps: int) -> str:
    """`Step 50/200 | Loss 0.234 | Acc 0.750 | Reward 0.750 | LR 1.00e-04 | ...` for a metrics row."""
    line = (
        f"Step {int(row['step'])}/{steps} | Loss {row['policy_loss']:.3f} | Acc {row['accuracy']:.3f} | "
        f"Reward {row['reward_mean']:.3f} | LR {row['lr']:.2e} | Ent {row['entropy']:.3f} | KL {row['kl']:.4f}"
    )
    eval_accuracy = row.get("eval_accuracy", math.nan)
    if eval_accuracy is not None and not math.isnan(eval_accuracy):
        line += f" | Eval {eval_accuracy:.3f}"
    return line


def duration(seconds: float) -> str:
    """`42 s`, `3 min 20 s`, `1 h 05 min`: a rough time for people."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def time_left(steps_left: int, step_seconds: float, evaluations_left: int, eval_seconds: float) -> str:
    """The estimate a run prints after its first step: the steps left at the first step's pace,
    plus the held-out evaluations left at the pace of the one before RL."""
    total = steps_left * step_seconds + evaluations_left * eval_seconds
    evals = f" and {_count(evaluations_left, 'evaluation')} of {eval_seconds:.1f} s" if evaluations_left else ""
    return f"about {duration(total)} to go ({_count(steps_left, 'step')} of {step_seconds:.2f} s{evals})"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
