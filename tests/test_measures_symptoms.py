"""The symptoms of the document's diagnosis table on hand-made runs: a run's signals and the run that gives each
symptom's evidence, derived by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd

from mathrl.analysis.measures import symptoms as sy


def run(evals, settings=None, status="completed", ok=True, **metrics) -> SimpleNamespace:
    """A run: its held-out accuracy at steps 0, 2, 4, ... and its logged metrics at steps 1, 2, ..."""
    n = len(next(iter(metrics.values())))
    return SimpleNamespace(
        ok=ok,
        status=status,
        settings=settings or {},
        evals=pd.DataFrame({"step": range(0, 2 * len(evals), 2), "eval_accuracy": evals}),
        metrics=pd.DataFrame({"step": range(1, n + 1), **metrics}),
    )


def logged(n=4, **over) -> dict:
    return {"entropy": [1.0, 0.9, 0.6, 0.5][:n], "kl": [0.01, 0.3, 0.05, 0.02][:n], "frac_zero_std": 0.25,
            "skipped": [0, 0, 1, float("nan")][:n], **over}  # fmt: skip


def test_a_runs_signals():
    g = sy.run_signals(run([0.5, 0.6, 0.3], {"monitor_kl_max": 0.2}, status="stopped_nonfinite", **logged()))
    assert g["zero_std"] == 0.25 and g["drop"] == 0.3 and g["drop_at"] == (2, 4, 0.6, 0.3)  # 0.6 at 2 -> 0.3 at 4
    assert (g["ent_ratio"], g["ent"]) == (0.5, (1.0, 0.5))
    assert (g["kl"], g["kl_at"], g["kl_max"]) == (0.3, 2, 0.2)
    assert g["skipped"] == 2  # one update skipped, and the guard stopped the run
    calm = sy.run_signals(run([0.5], **logged()))
    assert calm["drop_at"] is None and calm["kl_max"] == math.inf and calm["skipped"] == 1


def test_the_evidence_is_the_most_extreme_run_with_the_cause():
    unclipped = {"grad_clip": None}
    runs = {
        "small": run([0.5, 0.45], unclipped, **logged()),
        "big": run([0.6, 0.3], unclipped, **logged()),
        "clipped": run([0.9, 0.1], {"grad_clip": 1.0}, **logged()),  # the largest fall, but not the cause
        "failed": run([0.9, 0.0], unclipped, ok=False, **logged()),  # no result: never the evidence
    }
    found = sy.symptom_evidence(runs)
    assert len(found) == len(sy.SYMPTOM_TESTS)
    assert found[1] == ("big", "eval accuracy 60.0% at step 0 -> 30.0% at step 2")
    assert found[0] == ("", "no run of this pipeline has this cause") and found[4] == (
        "",
        "not observed in this pipeline",
    )
    signals = {"small": sy.run_signals(runs["small"])}
    rid, text = sy.evidence({"small": runs["small"]}, signals, sy.SYMPTOM_TESTS[1])  # a fall of 0.05 is no drop
    assert rid == "" and text.startswith("not observed in this pipeline (most extreme run with this cause, small:")


def test_the_diagnosis_table_sets_each_symptoms_evidence_beside_the_documents_row():
    doc = [{"symptom": f"s{k}", "cause": "c", "fix": "f", "rule": "r", "cause_shown": "shown"} for k in range(6)]
    runs = {"big": run([0.6, 0.3], {"grad_clip": None}, **logged())}
    t = sy.diagnosis_table(doc, runs)
    assert list(t.columns) == ["symptom", "cause", "fix", "rule", "cause_shown", "evidence_run", "evidence"]
    assert t["symptom"].tolist() == [f"s{k}" for k in range(6)] and t["evidence_run"].tolist()[:2] == ["", "big"]
