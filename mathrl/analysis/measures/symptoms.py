"""The symptoms of rl-stability-batch-and-hyperparameters.md's diagnosis table (section 8) as a run shows them: a
run's signals (`run_signals`), per symptom a test of a run's settings for the cause the document names and the signal
that shows it (`SYMPTOM_TESTS`), and the run that gives the evidence (`evidence`), picked among the runs that carry
the cause, never among arbitrary runs; and the diagnosis table with each symptom's evidence (`diagnosis_table`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mathrl.analysis.measures.hyperparameters import BIG_SWING, largest_drop
from mathrl.analysis.measures.series import NAN, end_over_start
from mathrl.analysis.measures.training_challenges import frac_zero_std, kl_max

# The calibrated reference (docs/notebook/2026-11-23-calibration-pilot.md); "too large" is a multiple of it.
REFERENCE_LR = 3.0e-4


def run_signals(run) -> dict:
    """What a run shows of each symptom: the share of groups with equal rewards, the largest fall of held-out
    accuracy (and its two evaluations), token entropy last over first, the largest KL (its step, and the monitor's
    threshold) and the updates the non-finite guard skipped (a run it stopped counts one more)."""
    m = run.metrics
    ev, ent = run.evals, m["entropy"].dropna()
    d = ev["eval_accuracy"].diff()
    i = d.idxmin() if d.notna().any() else None
    return {
        "zero_std": frac_zero_std(run),
        "drop": largest_drop(run),
        "drop_at": (ev["step"][i - 1], ev["step"][i], ev["eval_accuracy"][i - 1], ev["eval_accuracy"][i])
        if i is not None
        else None,
        "ent_ratio": end_over_start(ent),
        "ent": (ent.iloc[0], ent.iloc[-1]) if len(ent) else None,
        "kl": kl_max(run),
        "kl_at": m.loc[m["kl"].idxmax(), "step"] if m["kl"].notna().any() else NAN,
        "kl_max": run.settings.get("monitor_kl_max") or np.inf,
        "skipped": int(m["skipped"].fillna(0).sum()) + (run.status == "stopped_nonfinite"),
    }


# Per symptom of the document's diagnosis table (DOC["symptoms"], in its order): a test of a run's settings for the
# cause named in its `cause_shown` (the evidence is picked among the runs that carry it, never among arbitrary runs);
# the signal of `run_signals` that shows the symptom, and whether its largest value is the most extreme; whether the
# most extreme run shows the symptom; and its evidence as text. None: no run of this pipeline can show the symptom.
SYMPTOM_TESTS = [
    (
        lambda st: st.get("init") == "random" and st.get("reward") == "exact",
        "zero_std",
        True,
        lambda g: g["zero_std"] >= 0.9,
        lambda g: f"mean frac_zero_std {g['zero_std']:.2f}",
    ),
    (
        lambda st: st.get("grad_clip") is None,
        "drop",
        True,
        lambda g: g["drop"] > BIG_SWING,
        lambda g: (
            "eval accuracy {2:.1%} at step {0:g} -> {3:.1%} at step {1:g}".format(*g["drop_at"])
            if g["drop_at"]
            else "no drop"
        ),
    ),
    (
        lambda st: 0 < st.get("entropy_coef", 0.0) < 0.01 and st.get("init") != "random",
        "ent_ratio",
        False,
        lambda g: g["ent_ratio"] < 0.8,
        lambda g: f"entropy {g['ent'][0]:.3f} at the first step -> {g['ent'][1]:.3f} at the last",
    ),
    (
        lambda st: st.get("ppo_epochs", 1) > 1 or st.get("clip_eps_high") is not None,
        "kl",
        True,
        lambda g: g["kl"] > g["kl_max"],
        lambda g: f"KL {g['kl']:.3g} at step {g['kl_at']:g} (monitor threshold {g['kl_max']:g})",
    ),
    None,  # out of memory
    (
        lambda st: st.get("grad_clip") is None and st.get("lr", 0) > 1e3 * REFERENCE_LR,
        "skipped",
        True,
        lambda g: g["skipped"] > 0,
        lambda g: f"{g['skipped']} update(s) skipped by the non-finite guard",
    ),
]


def evidence(runs: dict, signals: dict, test) -> tuple[str, str]:
    """The run that shows a symptom (its SYMPTOM_TESTS entry), and the evidence: the most extreme run by the signal
    among those with the document's cause; "not observed" when it does not show the symptom."""
    if test is None:
        return "", "not observed in this pipeline"
    cause, col, largest, passes, text = test
    v = pd.Series({rid: signals[rid][col] for rid, r in runs.items() if cause(r.settings)}, dtype=float).dropna()
    if v.empty:
        return "", "no run of this pipeline has this cause"
    rid = v.idxmax() if largest else v.idxmin()
    if passes(signals[rid]):
        return rid, text(signals[rid])
    return "", f"not observed in this pipeline (most extreme run with this cause, {rid}: {text(signals[rid])})"


def symptom_evidence(runs: dict) -> list[tuple[str, str]]:
    """Per symptom (SYMPTOM_TESTS, in the document's order): the run that shows it and the evidence, among `runs`
    ({run_id: run}) with a result."""
    ok = {rid: r for rid, r in runs.items() if r.ok}
    signals = {rid: run_signals(r) for rid, r in ok.items()}
    return [evidence(ok, signals, test) for test in SYMPTOM_TESTS]


def diagnosis_table(symptoms: list[dict], runs: dict) -> pd.DataFrame:
    """The document's diagnosis table (`symptoms`, in SYMPTOM_TESTS' order: symptom, cause, fix, rule, the cause a run
    of this pipeline can show), each row with the run that shows it and the evidence (`symptom_evidence`)."""
    columns = ["symptom", "cause", "fix", "rule", "cause_shown"]
    return pd.DataFrame(
        [
            {**{c: row[c] for c in columns}, "evidence_run": run, "evidence": text}
            for row, (run, text) in zip(symptoms, symptom_evidence(runs))
        ]
    )
