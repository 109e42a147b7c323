"""The stability monitor's alerts scored against later drops (rl-stability-batch-and-hyperparameters.md, section 8):
each detector replayed over a run's logged metrics, whether a sustained drop of held-out accuracy followed an alert
within HORIZON steps, and the tables the monitor's claims and the report read.

A detector's alert steps on a run (`detectors`) come from `mathrl.engine.monitor`'s own rules, replayed with one
threshold on and the others off; a sustained drop is `sustained_drops`' (a fall of at least DROP that the next
evaluation confirms). The run is the unit the precision claims compare (`stability_alert_runs`): a run's steps, and
the alerts around one drop, are not independent draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from mathrl.analysis.measures.series import NAN
from mathrl.analysis.verdict import wilson_columns
from mathrl.engine.monitor import ALERT_KINDS, StabilityMonitor, precision_recall, sustained_drops

DROP, HORIZON = 0.05, 10  # an alert should precede a sustained 5-point drop of held-out accuracy within 10 steps
# the document's fixed reward-swing threshold, and ours in standard errors of the batch mean
FIXED_SWING, SWING_SIGMAS = 0.3, 6.0

# the columns of the detectors' scores (`alert_scores`)
SCORES = (
    "detector alerts followed_by_drop precision precision_lo precision_hi drops announced recall recall_lo recall_hi"
)
SCORES = [*SCORES.split(), "base_rate"]
DETECTORS = {
    "fixed_swing": f"reward_swing, fixed {FIXED_SWING:g}",
    "scaled_swing": f"reward_swing, {SWING_SIGMAS:g} standard errors of the batch mean",
    "high_kl": "high_kl",
    "low_entropy": "low_entropy",
}


def replay(run, **monitor) -> list[int]:
    """The alert steps of a monitor with these thresholds (the others off) replayed over a run's logged metrics."""
    mon = StabilityMonitor(**{"entropy_min": None, "kl_max": None, "reward_swing": None, **monitor})
    m = run.metrics
    for step, entropy, kl, reward_mean in zip(m["step"], m["entropy"], m["kl"], m["reward_mean"]):
        mon.check(step, entropy, kl, reward_mean)
    return [a["step"] for a in mon.alerts]


def detectors(run) -> dict[str, list[int]]:
    """Alert steps per detector on one run: the document's fixed reward swing, the noise-scaled one,
    and the run's own KL and entropy thresholds."""
    st = run.settings
    return {
        "fixed_swing": replay(run, reward_swing=FIXED_SWING, window=st["monitor_window"]),
        "scaled_swing": replay(
            run, window=st["monitor_window"], swing_sigmas=SWING_SIGMAS, batch_size=st["batch_size"]
        ),
        "high_kl": replay(run, kl_max=st["monitor_kl_max"]),
        "low_entropy": replay(run, entropy_min=st["monitor_entropy_min"]),
    }


def followed_by_drop(step, drops: list) -> float:
    """1.0 when a sustained drop (`drops`: their onsets) starts within HORIZON steps after `step`, else 0."""
    return float(any(step < d <= step + HORIZON for d in drops))


def watched(run) -> Callable[[int], bool]:
    """Whether the HORIZON after a step lies wholly where a drop could still be seen: a sustained drop is known at
    its second low evaluation, so its onset must come by the run's second-to-last evaluation. Later steps (most of
    a short run) are censored: scoring them would count as 'no drop' what the run ended too soon to show."""
    evals = list(run.evals["step"])
    last_onset = evals[-2] if len(evals) >= 2 else -math.inf
    return lambda step: step + HORIZON <= last_onset


def scored(run) -> tuple[list[tuple], list[tuple]]:
    """One run's detectors scored against its sustained drops: its events (detector, source, run_id, step,
    followed_by_drop) and its counts per detector (detector, hit, alerts, caught, drops: `precision_recall`'s, hit and
    alerts over the alerts whose HORIZON is watched, caught and drops over every alert)."""
    drops, seen = sustained_drops(run.evals["step"], run.evals["eval_accuracy"], DROP), watched(run)
    steps = [("step", s, followed_by_drop(s, drops)) for s in run.metrics["step"] if seen(s)]
    events, counts = [], []
    for name, alerts in detectors(run).items():
        kept = [a for a in alerts if seen(a)]
        marks = [("alert", a, followed_by_drop(a, drops)) for a in kept] + steps
        events += [(name, source, run.spec.run_id, s, hit) for source, s, hit in marks]
        hit, n = precision_recall(kept, drops, HORIZON)[:2]  # precision: the watched alerts; recall: every one
        counts.append((name, hit, n, *precision_recall(alerts, drops, HORIZON)[2:]))
    return events, counts


def alert_events(runs: list) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The detectors scored over `runs` (`scored`). The events: one row per alert of each detector (source `alert`)
    and per logged step (source `step`, the base rate, repeated under each detector) whose HORIZON is watched
    (`watched`), with `followed_by_drop`: 1 when a sustained drop starts within HORIZON steps after it. The counts:
    one row per run and detector."""
    events, counts = [], []
    for run in runs:
        run_events, run_counts = scored(run)
        events += run_events
        counts += run_counts
    return (
        pd.DataFrame(events, columns=["detector", "source", "run_id", "step", "followed_by_drop"]),
        pd.DataFrame(counts, columns=["detector", "hit", "alerts", "caught", "drops"]),
    )


def alert_runs(events: pd.DataFrame) -> pd.DataFrame:
    """Per detector, source and run: the share of its events (`alert_events`) followed by a sustained drop, and their
    number. The run is the unit the monitor's precision claims compare: a run's steps, and the alerts around one
    drop, are not independent draws."""
    columns = CLAIM_TABLES["stability_alert_runs"]
    if events.empty:
        return pd.DataFrame(columns=columns)
    by_run = events.groupby(["detector", "source", "run_id"], sort=False)["followed_by_drop"]
    return by_run.agg(followed_by_drop="mean", events="size").reset_index()[columns]


def alert_scores(events: pd.DataFrame, counts: pd.DataFrame) -> pd.DataFrame:
    """Per detector (`alert_events`): how often an alert was followed by a sustained drop within HORIZON steps
    (precision, over the alerts whose HORIZON is watched, beside the base rate of such a step), and how many drops an
    alert announced (recall, over every alert); Wilson intervals."""
    steps = events.loc[events["source"] == "step", "followed_by_drop"]
    rows = [
        {
            "detector": DETECTORS[r.detector],
            "alerts": r.alerts,
            "followed_by_drop": r.hit,
            **wilson_columns("precision", r.hit, r.alerts),
            "drops": r.drops,
            "announced": r.caught,
            **wilson_columns("recall", r.caught, r.drops),
            "base_rate": steps.mean() if len(steps) else NAN,
        }
        for r in counts.groupby("detector", sort=False).sum().reset_index().itertuples()
    ]
    return pd.DataFrame(rows, columns=SCORES)


def alerts_raised(experiments: dict[str, list]) -> pd.DataFrame:
    """The alerts each run's own monitor raised (its summary), per experiment ({name: its runs}) and alert kind: the
    runs with a result and those the config asks for, how many raised the kind, the median of their first such
    alert's step and the alerts in all. A run two experiments share is counted under the one that trains it."""
    rows = []
    for exp, runs in experiments.items():
        runs = [r for r in runs if r.spec.same_as is None]
        ok = [r for r in runs if r.ok]
        for kind in ALERT_KINDS:
            steps = [[a["step"] for a in r.summary["alerts"] if a["kind"] == kind] for r in ok]
            firsts = [min(s) for s in steps if s]
            rows.append(
                {
                    "experiment": exp,
                    "kind": kind,
                    "runs": len(ok),
                    "expected": len(runs),
                    "runs_with_alert": len(firsts),
                    "first_step_median": float(pd.Series(firsts).median()) if firsts else NAN,
                    "alerts": sum(map(len, steps)),
                }
            )
    return pd.DataFrame(rows)


# The monitor's table that claims read, one row per detector, source and run (mathrl.analysis.claim_names reads this
# assignment from the source to check a claim's names when the config is read).
CLAIM_TABLES = {"stability_alert_runs": ["detector", "source", "run_id", "followed_by_drop", "events"]}
