"""Measures of a run: registered pure functions of its files (metrics, evaluations, summary).

Each measure is one function and its name; `run_measures` applies every registered measure
to every run and gives one row per run (experiment, variant, grid point, seed), the table a
claim reads by default (`mathrl.analysis.claims`). A new measure is a function here and its name in
`MEASURES`; `mathrl claims --measures` lists them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from mathrl.analysis.results import Run, collapsed, max_drawdown, roughness, warmup

WINDOW = 5  # steps averaged for the start or end of a per-step metric (at most half a run)

# The table claims read by default, one row per run: its identity, its grid point ({grid}: every experiment's grid
# keys), its task and every registered measure ({measures}). Stated once: mathrl.analysis.claim_names reads this
# assignment
# from the source (without importing the module) to check a claim's names when the config is read.
CLAIM_TABLES = {"run_measures": ["run_id", "experiment", "variant", "seed", "warmup", "{grid}", "task", "{measures}"]}

MEASURES: dict[str, tuple[str, Callable[[Run], float]]] = {}
BOUNDS: dict[str, tuple[float, float]] = {}  # the values a bounded measure can take (an accuracy: 0 to 1)
SHARE, CHANGE = (0.0, 1.0), (-1.0, 1.0)  # a share, and a change of a share


def measure(name: str, text: str, bounds: tuple[float, float] | None = None):
    """Register `fn(run) -> float` as a measure named `name`, described by `text`, whose values lie in `bounds`
    where given (an interval of its mean is held there: `mathrl compare`)."""

    def add(fn: Callable[[Run], float]) -> Callable[[Run], float]:
        MEASURES[name] = (text, fn)
        if bounds is not None:
            BOUNDS[name] = bounds
        return fn

    return add


def _window(m: pd.DataFrame) -> int:
    return max(1, min(WINDOW, len(m) // 2))


def _head(run: Run, col: str) -> float:
    m = run.metrics
    return float(m[col].head(_window(m)).mean()) if col in m and len(m) else math.nan


def _tail(run: Run, col: str) -> float:
    m = run.metrics
    return float(m[col].tail(_window(m)).mean()) if col in m and len(m) else math.nan


@measure("initial_eval", "held-out accuracy before RL (greedy)", bounds=SHARE)
def initial_eval(run: Run) -> float:
    return float(run.initial_eval)


@measure("final_eval", "held-out accuracy at the last step (greedy)", bounds=SHARE)
def final_eval(run: Run) -> float:
    return float(run.evals["eval_accuracy"].iloc[-1])


@measure("best_eval", "best held-out accuracy over the run's evaluations", bounds=SHARE)
def best_eval(run: Run) -> float:
    return float(run.evals["eval_accuracy"].max())


@measure("gain", "held-out accuracy: final − before RL", bounds=CHANGE)
def gain(run: Run) -> float:
    return final_eval(run) - initial_eval(run)


@measure("eval_change", "held-out accuracy (an imported run's validation score): last − first evaluation")
def eval_change(run: Run) -> float:
    e = run.evals["eval_accuracy"].dropna()
    return float(e.iloc[-1] - e.iloc[0]) if len(e) > 1 else math.nan


@measure("lowest_change", "lowest held-out accuracy at an evaluation after RL began − before RL", bounds=CHANGE)
def lowest_change(run: Run) -> float:
    e = run.evals["eval_accuracy"]
    return float(e.iloc[1:].min() - e.iloc[0]) if len(e) > 1 else math.nan


@measure("entropy_start", f"mean token entropy over the first {WINDOW} steps")
def entropy_start(run: Run) -> float:
    return _head(run, "entropy")


@measure("entropy_end", f"mean token entropy over the last {WINDOW} steps")
def entropy_end(run: Run) -> float:
    return _tail(run, "entropy")


@measure("entropy_fall", "share of token entropy lost from the first to the last steps")
def entropy_fall(run: Run) -> float:
    start, end = entropy_start(run), entropy_end(run)
    return 1 - end / start if start else math.nan


@measure("reward_end", f"mean training reward over the last {WINDOW} steps")
def reward_end(run: Run) -> float:
    return _tail(run, "reward_mean")


@measure("reward_start", f"mean training reward over the first {WINDOW} steps")
def reward_start(run: Run) -> float:
    return _head(run, "reward_mean")


@measure("kl_end", f"mean KL to the reference policy over the last {WINDOW} steps")
def kl_end(run: Run) -> float:
    return _tail(run, "kl")


@measure("lr_last", "learning rate at the last step")
def lr_last(run: Run) -> float:
    m = run.metrics
    return float(m["lr"].dropna().iloc[-1]) if "lr" in m and m["lr"].notna().any() else math.nan


@measure("accuracy_gain", "sampled training accuracy: last steps − first steps", bounds=CHANGE)
def accuracy_gain(run: Run) -> float:
    return _tail(run, "accuracy") - _head(run, "accuracy")


@measure("drawdown", "largest fall of held-out accuracy from an earlier peak", bounds=SHARE)
def drawdown(run: Run) -> float:
    return float(max_drawdown(run.evals["eval_accuracy"]))


@measure("roughness", "spread of held-out accuracy around its trend")
def rough(run: Run) -> float:
    e = run.evals
    return float(roughness(e["step"], e["eval_accuracy"]))


@measure("collapsed", "1 when the run collapsed (sustained, or at the final evaluation)", bounds=SHARE)
def collapse(run: Run) -> float:
    c = collapsed(run)
    return math.nan if c is None else float(c)


@measure("samples", "rollouts drawn over the run")
def samples(run: Run) -> float:
    m = run.metrics
    return float(m["samples"].iloc[-1]) if "samples" in m and len(m) else math.nan


def run_measures(runs: dict[str, Run]) -> pd.DataFrame:
    """One row per run with a result: its identity, grid point and every registered measure."""
    rows = []
    for run_id, run in runs.items():
        if not run.ok:
            continue
        spec = run.spec
        row = {
            "run_id": run_id,
            "experiment": spec.experiment,
            "variant": spec.variant or "",
            "seed": spec.seed,
            "warmup": warmup(run),
            **{k: v for k, v in spec.point.items()},
            "task": run.settings.get("task", ""),
        }
        for name, (_, fn) in MEASURES.items():
            try:
                row[name] = fn(run)
            except (KeyError, IndexError, ValueError, ZeroDivisionError):
                row[name] = math.nan
        rows.append(row)
    return pd.DataFrame(rows)
