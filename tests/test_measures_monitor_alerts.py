"""The stability monitor's detectors replayed on a hand-made run and scored against its sustained drop: every number
derived by hand."""

from __future__ import annotations

import pandas as pd

from mathrl.analysis.measures import monitor_alerts as ma


class _Run:
    """The little of a run that the alert scoring reads."""

    ok = True

    def __init__(self, metrics: pd.DataFrame, evals: pd.DataFrame | None = None, run_id: str = "x"):
        self.metrics, self.evals = metrics, evals
        self.spec = type("Spec", (), {"run_id": run_id})()


def dropping_run(reward=0.5) -> _Run:
    """Accuracy 0.6 at steps 0-4, then 0.5 from step 6 to the end (24): a sustained drop whose onset is step 6; token
    entropy below the minimum (0.1) at steps 2 and 20."""
    evals = pd.DataFrame({"step": range(0, 25, 2), "eval_accuracy": [0.6] * 3 + [0.5] * 10})
    entropy = [1.0, 0.05] + [1.0] * 17 + [0.05] + [1.0] * 4
    metrics = pd.DataFrame({"step": range(1, 25), "entropy": entropy, "kl": 0.0, "reward_mean": reward})
    run = _Run(metrics, evals, "r")
    run.settings = {"monitor_window": 3, "batch_size": 64, "monitor_kl_max": 0.5, "monitor_entropy_min": 0.1}
    return run


def test_each_detector_replays_the_monitor_with_its_threshold_alone():
    alerts = ma.detectors(dropping_run())
    assert list(alerts) == list(ma.DETECTORS) and alerts["low_entropy"] == [2, 20]
    assert alerts["high_kl"] == [] and alerts["fixed_swing"] == []  # KL 0 throughout, a flat reward
    swung = dropping_run(reward=[0.1] * 12 + [0.9] * 12)  # the reward jumps by 0.8 at step 13
    assert 13 in ma.replay(swung, reward_swing=ma.FIXED_SWING, window=3)
    assert ma.followed_by_drop(2, [6]) == 1.0 and ma.followed_by_drop(6, [6]) == 0.0  # after the step, within 10
    assert ma.followed_by_drop(0, [11]) == 0.0  # beyond the horizon


def test_alert_events_score_the_watched_steps_against_the_base_rate():
    run = dropping_run()
    # a drop is seen at its second low evaluation, so an onset must come by the second-to-last one (22): steps up to
    # 12 have their whole 10-step horizon watched; the alert at step 20 is censored, not counted as 'no drop'
    seen = ma.watched(run)
    assert seen(12) and not seen(13)
    ev, counts = ma.alert_events([run])
    low = ev[(ev["detector"] == "low_entropy") & (ev["source"] == "alert")]
    assert list(low["step"]) == [2] and list(low["followed_by_drop"]) == [1.0]  # step 2, a drop within 10 steps
    base = ev[(ev["detector"] == "low_entropy") & (ev["source"] == "step")]
    assert len(base) == 12 and base["followed_by_drop"].sum() == 5  # steps 1-5 precede the onset at 6; 6-12 do not
    assert set(ev["detector"]) == set(ma.DETECTORS)
    # precision over the watched alert (step 2, followed by the drop); recall over both (the drop announced)
    c = counts.set_index("detector")
    assert c.loc["low_entropy"].tolist() == [1, 1, 1, 1] and c.loc["high_kl"].tolist() == [0, 0, 0, 1]
    per_run = ma.alert_runs(ev).set_index(["detector", "source"])  # one row per run: the unit the claims compare
    assert per_run.loc[("low_entropy", "alert"), ["followed_by_drop", "events"]].tolist() == [1.0, 1]
    assert per_run.loc[("low_entropy", "step"), ["followed_by_drop", "events"]].tolist() == [5 / 12, 12]
    assert ("high_kl", "alert") not in per_run.index  # no alert in this run: it adds no pair
    assert list(ma.alert_runs(ev.iloc[:0]).columns) == ma.CLAIM_TABLES["stability_alert_runs"]


def test_the_scores_per_detector_set_precision_beside_the_base_rate():
    sc = ma.alert_scores(*ma.alert_events([dropping_run()])).set_index("detector")
    low = sc.loc["low_entropy"]
    assert (low.alerts, low.followed_by_drop, low.precision, low.drops, low.announced, low.recall) == (1, 1, 1, 1, 1, 1)
    assert low.base_rate == 5 / 12 and sc.loc["high_kl"].alerts == 0 and sc.loc["high_kl"].recall == 0.0
    assert list(sc.index) == list(ma.DETECTORS.values())


def test_a_run_two_experiments_share_is_counted_once_among_the_alerts_raised():
    from types import SimpleNamespace as NS

    def run(exp, same_as=None):
        return NS(
            ok=True, spec=NS(experiment=exp, same_as=same_as), summary={"alerts": [{"step": 3, "kind": "high_kl"}]}
        )

    runs = {
        "batch__b512__s0": run("batch"),
        "fvd__A__s0": run("fvd", same_as="batch__b512__s0"),
        "fvd__B__s0": run("fvd"),
    }
    t = ma.alerts_raised({e: [r for r in runs.values() if r.spec.experiment == e] for e in ("batch", "fvd")})
    high = t[t["kind"] == "high_kl"].set_index("experiment")
    assert high["runs"].to_dict() == {"batch": 1, "fvd": 1} and high["expected"].sum() == 2  # three ids, two runs
