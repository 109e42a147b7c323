"""Measures of math-rl-training-system.md's runs: how long a run trained and how fast it sampled, and the run table
of the `system` experiment (REINFORCE on each task, with and without its baseline, from each warm-up), whose runs the
system study sets beside the supervised control from the same start.
"""

from __future__ import annotations

from mathrl.analysis.measures.catalog import measure


@measure("steps_done", "RL steps the run logged")
def steps_done(run) -> float:
    return float(len(run.metrics))


@measure("seq_per_s", "sequences sampled per second of step time")
def seq_per_s(run) -> float:
    m = run.metrics
    return float(m["samples"].iloc[-1] / m["seconds"].sum())


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
