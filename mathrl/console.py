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
