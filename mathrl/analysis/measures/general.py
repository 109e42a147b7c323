"""The measures of every run (`run_measures`): held-out accuracy, entropy, reward, KL and LR at the start and end,
drawdown, roughness, collapse, rollouts drawn; and the problems an evaluation reads. Each is a pure function of the
run's files; `mathrl compare` and imported logs read them too. `metric_range`: the range a logged metric of a run
cannot leave, from its settings (what a band of it is clipped to).
"""

from __future__ import annotations

import math

from mathrl.analysis.measures.catalog import CHANGE, SHARE, measure
from mathrl.analysis.measures.series import WINDOW, head_mean, tail_mean
from mathrl.analysis.results import Run, collapsed, max_drawdown, roughness


@measure("initial_eval", "held-out accuracy before RL (greedy)", bounds=SHARE, every_run=True)
def initial_eval(run: Run) -> float:
    return float(run.initial_eval)


@measure("final_eval", "held-out accuracy at the last step (greedy)", bounds=SHARE, every_run=True)
def final_eval(run: Run) -> float:
    return float(run.evals["eval_accuracy"].iloc[-1])


@measure("best_eval", "best held-out accuracy over the run's evaluations", bounds=SHARE, every_run=True)
def best_eval(run: Run) -> float:
    return float(run.evals["eval_accuracy"].max())


@measure("gain", "held-out accuracy: final − before RL", bounds=CHANGE, every_run=True)
def gain(run: Run) -> float:
    return final_eval(run) - initial_eval(run)


@measure(
    "eval_change", "held-out accuracy (an imported run's validation score): last − first evaluation", every_run=True
)
def eval_change(run: Run) -> float:
    e = run.evals["eval_accuracy"].dropna()
    return float(e.iloc[-1] - e.iloc[0]) if len(e) > 1 else math.nan


@measure(
    "lowest_change",
    "lowest held-out accuracy at an evaluation after RL began − before RL",
    bounds=CHANGE,
    every_run=True,
)
def lowest_change(run: Run) -> float:
    e = run.evals["eval_accuracy"]
    return float(e.iloc[1:].min() - e.iloc[0]) if len(e) > 1 else math.nan


@measure("entropy_start", f"mean token entropy over the first {WINDOW} steps", every_run=True)
def entropy_start(run: Run) -> float:
    return head_mean(run, "entropy")


@measure("entropy_end", f"mean token entropy over the last {WINDOW} steps", every_run=True)
def entropy_end(run: Run) -> float:
    return tail_mean(run, "entropy")


@measure("entropy_fall", "share of token entropy lost from the first to the last steps", every_run=True)
def entropy_fall(run: Run) -> float:
    start, end = entropy_start(run), entropy_end(run)
    return 1 - end / start if start else math.nan


@measure("reward_end", f"mean training reward over the last {WINDOW} steps", every_run=True)
def reward_end(run: Run) -> float:
    return tail_mean(run, "reward_mean")


@measure("reward_start", f"mean training reward over the first {WINDOW} steps", every_run=True)
def reward_start(run: Run) -> float:
    return head_mean(run, "reward_mean")


@measure("kl_end", f"mean KL to the reference policy over the last {WINDOW} steps", every_run=True)
def kl_end(run: Run) -> float:
    return tail_mean(run, "kl")


@measure("lr_last", "learning rate at the last step", every_run=True)
def lr_last(run: Run) -> float:
    m = run.metrics
    return float(m["lr"].dropna().iloc[-1]) if "lr" in m and m["lr"].notna().any() else math.nan


@measure("accuracy_gain", "sampled training accuracy: last steps − first steps", bounds=CHANGE, every_run=True)
def accuracy_gain(run: Run) -> float:
    return tail_mean(run, "accuracy") - head_mean(run, "accuracy")


@measure("drawdown", "largest fall of held-out accuracy from an earlier peak", bounds=SHARE, every_run=True)
def drawdown(run: Run) -> float:
    return float(max_drawdown(run.evals["eval_accuracy"]))


@measure("roughness", "spread of held-out accuracy around its trend", every_run=True)
def rough(run: Run) -> float:
    e = run.evals
    return float(roughness(e["step"], e["eval_accuracy"]))


@measure("collapsed", "1 when the run collapsed (sustained, or at the final evaluation)", bounds=SHARE, every_run=True)
def collapse(run: Run) -> float:
    c = collapsed(run)
    return math.nan if c is None else float(c)


@measure("samples", "rollouts drawn over the run", every_run=True)
def samples(run: Run) -> float:
    m = run.metrics
    return float(m["samples"].iloc[-1]) if "samples" in m and len(m) else math.nan


@measure("n_eval", "held-out problems per evaluation (0 where unknown)")
def n_eval(run: Run) -> int:
    """eval_size 0 means all of the test set: the number the run resolved is in its summary."""
    resolved = (run.summary or {}).get("resolved") or {}
    return int(resolved.get("n_eval") or run.settings.get("eval_size") or 0)


def metric_range(metric: str, s: dict | None) -> tuple[float, float]:
    """The range a logged metric of a run with settings `s` cannot leave, so that a band of it does not either:
    accuracy in [0, 1], entropy >= 0, KL >= 0 (k2 and k3 estimate it from non-negative terms; k1 may average below 0),
    and each reward kind's own range. Unbounded where the settings are unknown."""
    if metric == "eval_accuracy":
        return 0.0, 1.0
    if metric == "entropy" or (metric == "kl" and s is not None and s.get("kl_estimator") != "k1"):
        return 0.0, math.inf
    if metric != "reward_mean" or s is None:
        return -math.inf, math.inf
    kind, offset = s["reward"], s.get("reward_offset") or 0.0
    if kind in ("exact", "random", "signed"):  # right or not (a coin for random): 1 or 0, or +1 or -1 when signed
        lo, hi = (-1.0, 1.0) if kind == "signed" else (0.0, 1.0)
    elif kind == "proxy":
        weights = [s["proxy_correct_weight"], s["proxy_bias_weight"]]
        lo, hi = sum(min(0, w) for w in weights), sum(max(0, w) for w in weights)
    else:  # shaped: exact plus the format bonus and the digits' share; shaped_penalty less the invalid penalty
        weights = [s["format_bonus"], s["digit_weight"]]
        lo = sum(min(0, w) for w in weights) - (s["invalid_penalty"] if kind == "shaped_penalty" else 0)
        hi = 1.0 + sum(max(0, w) for w in weights)
    return lo + offset, hi + offset
