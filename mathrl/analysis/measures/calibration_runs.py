"""Measures of the testbed's calibration (is there a reference setting in which RL learns?): a run's gain with its
Newcombe interval on the problems evaluated, whether its accuracy dropped for long, the pilot's rule, and the rows the
calibration study summarises: the pilot's runs, its pick per task and batch, every trained run's gain.

A setting *learns* when its gain (final − start validation accuracy) has a 95% interval above 0 and its accuracy never
makes a sustained drop (two evaluations in a row more than DROP below the start, or the last); the pilot's pick is the
largest LR multiple that learns.
"""

from __future__ import annotations

import pandas as pd

from mathrl.analysis.measures.catalog import CHANGE, measure
from mathrl.analysis.measures.general import final_eval, gain, initial_eval, n_eval
from mathrl.analysis.measures.series import NAN
from mathrl.analysis.measures.tables import run_table
from mathrl.analysis.results import sustained_below
from mathrl.analysis.verdict import rate_difference

PILOT = "calibration"
DROP = 0.05  # "more than 5 points below": a sustained drop (pilot) and a run ending below its warm-up
POINTS = f"{100 * DROP:g} points"
# the columns of the calibration tables, named as the study's report reads them
NAMED = {
    "initial_eval": "start",
    "final_eval": "final",
    "eval_split": "split",
    "ends_below": "below",
    "ends_above": "above",
}
PILOT_RUNS = {
    "experiment": PILOT,
    "keys": ["variant", "seed", "warmup", "task", "batch_size", "lr", "steps", "eval_split", "status"],
    "measures": ["initial_eval", "final_eval", "gain", "gain_lo", "gain_hi", "sustained_drop", "n_eval", "learns"],
}
GAINS = {  # every experiment's runs with a result (the experiments are the config's)
    "keys": ["run_id", "experiment", "setting", "seed", "warmup", "task"],
    "measures": ["initial_eval", "final_eval", "gain", "ends_below", "ends_above"],
    "runs": "with_result",
}


def learns(gain_lo: float, dropped: bool) -> bool:
    """The pilot's rule: the gain's interval lies above 0 and accuracy never dropped for long."""
    return bool(gain_lo > 0 and not dropped)  # a NaN bound (no interval) is not above 0


def pick(multiples_learning: dict[float, bool]) -> float:
    """The largest LR multiple that learns (NaN when none does)."""
    return max((m for m, good in multiples_learning.items() if good), default=NAN)


def gain_interval(run):
    """The gain's Newcombe interval on the problems evaluated (no interval where their number is unknown, 0)."""
    n = n_eval(run)
    return rate_difference(round(final_eval(run) * n), n, round(initial_eval(run) * n), n)


@measure("gain_lo", "held-out accuracy gain (final − before RL): its 95% Newcombe interval's lower end", CHANGE)
def gain_lo(run) -> float:
    return gain_interval(run).lo


@measure("gain_hi", "held-out accuracy gain (final − before RL): its 95% Newcombe interval's upper end", CHANGE)
def gain_hi(run) -> float:
    return gain_interval(run).hi


@measure(
    "sustained_drop",
    f"True when held-out accuracy fell more than {POINTS} below its start at two evaluations in a row or the last",
)
def sustained_drop(run) -> bool:
    ev = run.evals["eval_accuracy"].tolist()
    return sustained_below(ev[1:], ev[0] - DROP)


@measure("learns", "True when the gain's 95% interval lies above 0 and there was no sustained drop (the pilot's rule)")
def learns_here(run) -> bool:
    return learns(gain_lo(run), sustained_drop(run))


@measure("ends_below", f"True when held-out accuracy ended more than {POINTS} below its start")
def ends_below(run) -> bool:
    return bool(gain(run) < -DROP)


@measure("ends_above", f"True when held-out accuracy ended more than {POINTS} above its start")
def ends_above(run) -> bool:
    return bool(gain(run) > DROP)


def pilot_rows(runs: dict, cfg: dict) -> pd.DataFrame:
    """One row per pilot run: task, batch, LR and its multiple of the task's reference (the variant its
    `reference_<task>` role names), split, status, start, final, gain with its interval, sustained drop, learns."""
    rows = run_table(PILOT_RUNS, runs, cfg).rename(columns=NAMED)
    lr, roles = dict(zip(rows["variant"], rows["lr"])), cfg["experiments"].get(PILOT, {}).get("roles") or {}
    ref_lr = {r.removeprefix("reference_"): lr[v] for r, v in roles.items() if r.startswith("reference_") and v in lr}
    rows.insert(6, "multiple", rows["lr"] / rows["task"].map(ref_lr))
    return rows


def pick_rows(pilot: pd.DataFrame) -> pd.DataFrame:
    """Per task and batch: the multiples tried, the pick, and whether the configured reference is it."""
    rows = []
    for (task, batch), g in pilot.groupby(["task", "batch_size"], sort=False) if len(pilot) else []:
        done = g[g["learns"].notna()]
        chosen = pick({float(m): bool(ok) for m, ok in zip(done["multiple"], done["learns"])})
        rows.append(
            {
                "task": task,
                "batch_size": batch,
                "tried": ", ".join(f"{m:.3g}x" for m in sorted(done["multiple"].round(3))),
                "n_learning": int(done["learns"].sum()),
                "pick": chosen,
                "reference_is_pick": bool(abs(chosen - 1) < 1e-6) if len(done) else None,
            }
        )
    return pd.DataFrame(rows)


def gain_rows(runs: dict, cfg: dict) -> pd.DataFrame:
    """Every trained run with a result once (a run two experiments share is counted under the first): start, final,
    gain, and whether it ended more than DROP below or above its start."""
    trained = {run_id: r for run_id, r in runs.items() if not r.spec.same_as}
    decl = {**GAINS, "experiment": list(cfg["experiments"])}
    return run_table(decl, trained, cfg).rename(columns=NAMED)
