"""Measures of math-rl-training-system.md's runs: how long a run trained, how fast it sampled, the sequences of a
backward pass and its last console line; the run table of the `system` experiment (REINFORCE on each task, with and
without its baseline, from each warm-up), and the starts a run trains from with the supervised control from each
(`system_start_runs`), which the system study sets beside each other.
"""

from __future__ import annotations

import math

import pandas as pd

from mathrl.analysis.measures.catalog import measure
from mathrl.analysis.verdict import NO_DIFFERENCE, difference, estimate_columns, mean_interval
from mathrl.pipeline import layout
from mathrl.pipeline.console import console_line


@measure("steps_done", "RL steps the run logged")
def steps_done(run) -> float:
    return float(len(run.metrics))


@measure("seq_per_s", "sequences sampled per second of step time")
def seq_per_s(run) -> float:
    m = run.metrics
    return float(m["samples"].iloc[-1] / m["seconds"].sum())


@measure(
    "micro_batch_sequences",
    "sequences per backward pass on a rank: micro_batch_size, or with 0 (no accumulation) the rank's whole batch",
)
def micro_batch_sequences(run) -> float:
    world = ((run.summary or {}).get("resolved") or {}).get("world_size", 1)
    return float(run.settings["micro_batch_size"] or run.settings["batch_size"] // max(1, world))


def console_of(run, log: str) -> tuple[str, str]:
    """A run's last console line and where it was read: the last `Step ` line of its log (`log`: the log's text, ""
    without one), else the line rebuilt from its last metrics row ("metrics.csv")."""
    lines = [x.strip() for x in log.splitlines() if x.startswith("Step ")]
    if lines:
        return lines[-1], "log"
    return console_line(run.metrics.iloc[-1].to_dict(), run.settings["steps"]), "metrics.csv"


STATS = [
    "final_eval",
    "initial_eval",
    "peak_eval",
    "gain",
    "lowest_change",
    "roughness",
    "steps_done",
    "wall_seconds",
    "seq_per_s",
    "collapsed",
    "degraded",
]
RUN_TABLES = {
    "system_runs": {
        "experiment": "system",
        "keys": ["task", "algorithm", "seed", "warmup", "run_id", "status"],
        "measures": STATS,
    },
}


# ----------------------------------------------------------------------------- starts and supervised controls
SUPERVISED = "supervised"  # the control's `algorithm` in system_start_runs


def band_start(cfg: dict, task: str) -> str:
    """The name of the warm-up band's start (`start_30` for band [0.3, 0.6])."""
    return f"start_{round(100 * cfg['sft'][task]['band'][0])}"


def start_of(cfg: dict, settings: dict) -> str:
    """The start a run trains from: its `init: start_PCT`, or the band's for the warm-up checkpoint."""
    init = settings.get("init")
    return init if layout.is_start(init) else band_start(cfg, settings["task"]) if init is None else str(init)


def warmup_starts(cfg: dict, task: str, files: list[tuple[dict | None, dict | None]]) -> dict:
    """The starts and supervised controls of a task over its warm-ups, each row with its `warmup`: `files` holds per
    warm-up its starts.json (`mathrl sft --starts`) and its summary, None where not written; a warm-up without
    starts.json gives its band's start alone, from its summary."""
    starts, controls = [], []
    for k, (data, sft) in enumerate(files):
        if data is not None:
            starts += [{**st, "warmup": k} for st in data["starts"]]
            controls += [{**c, "warmup": k} for c in data["controls"]]
        elif sft:
            starts.append(
                {
                    "start": band_start(cfg, task),
                    "threshold": cfg["sft"][task]["band"][0],
                    "sft_steps": sft.get("steps", math.nan),
                    "val_accuracy": sft.get("val_accuracy", math.nan),
                    "test_accuracy": sft.get("eval_accuracy", math.nan),
                    "reached": sft.get("reached"),
                    "warmup": k,
                }
            )
    return {"starts": starts, "controls": controls}


def start_columns(starts: pd.DataFrame) -> dict:
    """One start of a task over its warm-ups (its rows of `warmup_starts`' starts): its threshold, the warm-ups, their
    mean warm-up steps, validation and test accuracy, the lowest and highest test accuracy, and whether every warm-up
    reached the threshold."""
    return {
        "threshold": starts["threshold"].iloc[0],
        "warmups": len(starts),
        "warm_up_steps": starts["sft_steps"].mean(),
        "start_val": starts["val_accuracy"].mean(),
        "start_test": starts["test_accuracy"].mean(),
        "start_test_min": starts["test_accuracy"].min(),
        "start_test_max": starts["test_accuracy"].max(),
        "reached": bool(starts["reached"].fillna(False).astype(bool).all()),
    }


def pick_start(val_accuracy: dict[str, float], low: float) -> str | None:
    """The start the document's range is judged at, chosen on the validation split alone: the
    most-trained start whose validation accuracy is still below the range's lower end (RL has
    the range left to reach), else the least-trained one. A lone start is picked whatever its
    reading; None where no start, or several without a validation reading."""
    known = {k: v for k, v in val_accuracy.items() if v == v or len(val_accuracy) == 1}
    below = {k: v for k, v in known.items() if v < low}
    return max(below, key=below.get) if below else min(known, key=known.get, default=None)


def start_runs(per_run: pd.DataFrame, starts: dict[str, dict], low: dict[str, float]) -> pd.DataFrame:
    """system_start_runs: per seed, RL (each algorithm; `per_run`, the run table with each run's `start`) and the
    supervised control (`starts`: per task, `warmup_starts`) from every start of every warm-up, with `cell`
    (task_start), `start_val` (the start's validation accuracy) and `picked` ("yes" at the start `pick_start` picks
    against the lower end `low` of its task's range)."""
    cols = CLAIM_TABLES["system_start_runs"]
    rl = per_run[per_run["final_eval"].notna()]
    sup = pd.DataFrame(  # the supervised control's rows, in RL's columns
        [
            {
                "task": task,
                "start": c["start"],
                "algorithm": SUPERVISED,
                "seed": c["seed"],
                "warmup": c["warmup"],
                "initial_eval": c["initial_test"],
                "final_eval": c["final_test"],
                "gain": c["final_test"] - c["initial_test"],
            }
            for task, found in starts.items()
            for c in found["controls"]
        ]
    )
    frames = [f for f in (rl, sup) if len(f)]
    if not frames:
        return pd.DataFrame(columns=cols)
    out = pd.concat(frames, ignore_index=True)
    val = {(task, st["start"], st["warmup"]): st["val_accuracy"] for task, f in starts.items() for st in f["starts"]}
    out["start_val"] = [val.get((t, st, w), math.nan) for t, st, w in zip(out["task"], out["start"], out["warmup"])]
    out["cell"] = out["task"] + "_" + out["start"]
    mean_val = out.groupby(["task", "start"])["start_val"].mean()
    picked = {
        task: pick_start({st: mean_val.get((task, st), math.nan) for st in g["start"].unique()}, low[task])
        for task, g in out[out["algorithm"] != SUPERVISED].groupby("task")
    }
    out["picked"] = ["yes" if picked.get(t) == st else "no" for t, st in zip(out["task"], out["start"])]
    return out.reindex(columns=cols)  # the controls' rows have no lowest_change: two evaluations, no path


def accuracy_columns(prefix: str, values: dict) -> dict:
    """`{prefix}_n`, `{prefix}_final`, `{prefix}_lo`, `{prefix}_hi`: the mean of {seed: accuracy} and its 95% t
    interval, kept within [0, 1]."""
    est = mean_interval(values)
    final, lo, hi = estimate_columns(prefix, est, (0.0, 1.0)).values()
    return {f"{prefix}_n": est.n, f"{prefix}_final": final, f"{prefix}_lo": lo, f"{prefix}_hi": hi}


def start_summary(starts: dict[str, dict], runs: pd.DataFrame, expected: dict[str, tuple]) -> pd.DataFrame:
    """system_starts: per task and start of `starts` (per task, `warmup_starts`) with runs in `runs`
    (system_start_runs): its warm-ups (`start_columns`), whether it is picked, the task's expected range (`expected`:
    per task, its low and high end), REINFORCE's and the supervised control's final accuracy (a warm-up's mean over its
    runs; 95% t intervals over warm-ups) and RL − control (paired by warm-up)."""
    rows = []
    for task, found in starts.items():
        table = pd.DataFrame(found["starts"])
        for name, group in table.groupby("start", sort=False) if len(table) else []:
            d = runs[(runs["task"] == task) & (runs["start"] == name)]
            rl, sup = (
                g.groupby("warmup")["final_eval"].mean().to_dict()  # a warm-up's mean over its runs
                for g in (d[d["algorithm"] == a] for a in ("reinforce", SUPERVISED))
            )
            if not rl and not sup:
                continue
            diff = difference(rl, sup) if rl and sup else NO_DIFFERENCE  # one warm-up each: no interval
            rows.append(
                {
                    "task": task,
                    "start": name,
                    **start_columns(group),
                    "picked": (d["picked"] == "yes").any(),
                    "expected_low": expected[task][0],
                    "expected_high": expected[task][1],
                    "rl_minus_sup": diff.estimate,
                    "rl_minus_sup_lo": diff.lo,
                    "rl_minus_sup_hi": diff.hi,
                    **accuracy_columns("rl", rl),
                    **accuracy_columns("sup", sup),
                }
            )
    return pd.DataFrame(rows)


# The table claims read whose rows are not all runs: beside the runs of the `system` experiment it holds the
# supervised controls (each warm-up's starts.json). Its columns are stated once: `start_runs` makes the table with
# them, and mathrl.analysis.claim_names reads this assignment from the source.
CLAIM_TABLES = {
    "system_start_runs": [
        "task",
        "start",
        "cell",
        "algorithm",
        "seed",
        "warmup",
        "initial_eval",
        "final_eval",
        "gain",
        "lowest_change",
        "roughness",
        "start_val",
        "picked",
    ],
}
