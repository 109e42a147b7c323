"""The policy-losses part of the diagnostics study on a hand-made results tree: its tables, claims, figure and
section."""

import matplotlib
import numpy as np
import pytest

from mathrl.analysis import claims
from mathrl.analysis.report import environment
from mathrl.analysis.studies import diagnostics, loss_comparison
from mathrl.analysis.study_inputs import Context
from tests import synthetic
from tests.synthetic import write_run, write_tables

matplotlib.use("Agg")

SEEDS = (0, 1, 2)
LOSSES = ("vanilla", "gspo", "cispo", "dual_clip")
# per loss: entropy at the last of 4 steps (from 0.5 at the first; seed s adds 0.01 s), final held-out accuracy
# (start 0.4, seed s adds 0.01 s), and the step value of its clip diagnostics (the others NaN)
END = {"vanilla": 0.20, "gspo": 0.45, "cispo": 0.30, "dual_clip": 0.21}  # the clipped surrogate loses over half
FINAL = {"vanilla": 0.50, "gspo": 0.44, "cispo": 0.52, "dual_clip": 0.50}
OWN = {
    "vanilla": {"clip_frac": 0.05, "clip_frac_low": 0.04, "clip_frac_high": 0.01},
    "gspo": {"clip_frac": 0.30, "clip_frac_low": 0.10, "clip_frac_high": 0.20, "seq_clip_frac": 0.30},
    "cispo": {"is_clip_frac": 0.001},
    "dual_clip": {"clip_frac": 0.05, "clip_frac_low": 0.04, "clip_frac_high": 0.01, "dual_clip_frac": 0.002},
}


def rows(loss: str, seed: int) -> list[dict]:
    end = END[loss] + 0.01 * seed
    out = []
    for step in range(1, 5):
        row = {"step": step, "samples": 16 * step, "entropy": 0.5 + (end - 0.5) * (step - 1) / 3, "accuracy": 0.3,
               "reward_mean": 0.3, "seconds": 1.0, "ppo_kl": 0.02, **OWN[loss]}  # fmt: skip
        if step == 4:
            row["eval_accuracy"] = FINAL[loss] + 0.01 * seed
        out.append(row)
    return out


@pytest.fixture(scope="module")
def cfg(study_config):
    experiments = {
        "policy_losses": {
            "fixed": {"steps": 4, "ppo_epochs": 4, "eval_every": 4},
            "variants": {name: {"policy_loss": name} for name in LOSSES},
            "roles": {"baseline": "vanilla", "gspo": "gspo", "cispo": "cispo", "dual_clip": "dual_clip"},
            "seeds": list(SEEDS),
        }
    }
    return study_config("losses", experiments)


@pytest.fixture(scope="module")
def results(cfg):
    for loss in LOSSES:
        for s in SEEDS:
            write_run(cfg, f"policy_losses__{loss}__s{s}", rows(loss, s), 0.4 + 0.01 * s)
    tabs = synthetic.with_claims(cfg, diagnostics.tables(Context(cfg)))
    return tabs, write_tables(cfg, tabs)


def test_per_run_values_by_hand(results):
    r = results[0]["diagnostics_policy_losses_runs"].set_index(["setting", "seed"])
    assert len(r) == len(LOSSES) * len(SEEDS)
    v = r.loc[("vanilla", 2)]
    assert v.policy_loss == "vanilla" and v.role == "baseline"
    assert v.entropy_first == pytest.approx(0.5) and v.entropy_last == pytest.approx(0.22)
    assert v.entropy_reduction == pytest.approx(1 - 0.22 / 0.5)
    assert (
        v.initial_eval == pytest.approx(0.42) and v.final_eval == pytest.approx(0.52) and v.gain == pytest.approx(0.10)
    )
    assert v.clip_frac == pytest.approx(0.05) and np.isnan(v.is_clip_frac) and v.samples == 64
    c = r.loc[("cispo", 0)]
    assert np.isnan(c.clip_frac) and c.is_clip_frac == pytest.approx(0.001)  # CISPO cuts no token's gradient
    assert r.loc[("gspo", 1)].seq_clip_frac == pytest.approx(0.30)


def test_summary_differences_are_paired_by_seed(results):
    s = results[0]["diagnostics_policy_losses"].set_index("setting")
    assert list(s.index) == list(LOSSES) and (s["n"] == 3).all()
    assert s.loc["vanilla", "entropy_last_mean"] == pytest.approx(0.21)
    assert np.isnan(s.loc["vanilla", "vs_baseline_entropy_last_mean"])  # not a difference from itself
    cispo = s.loc["cispo"]
    # the same seed offsets in both arms: a difference of exactly 0.10 in every pair, a zero-width interval
    assert cispo.vs_baseline_entropy_last_mean == pytest.approx(0.10)
    assert cispo.vs_baseline_entropy_last_lo == pytest.approx(0.10) and cispo.vs_baseline_entropy_last_n == 3
    assert cispo.vs_baseline_final_eval_mean == pytest.approx(0.02)
    assert np.isnan(cispo.vs_baseline_clip_frac_mean)  # CISPO reports no clip_frac
    assert s.loc["gspo", "vs_baseline_clip_frac_mean"] == pytest.approx(0.25)
    assert s.loc["vanilla", "clip_frac_lo"] >= 0.0  # a share's interval stays within [0, 1]


def test_claims_read_these_tables_and_their_checks(results):
    judged = results[0]["claims"].set_index("claim_id")
    r = judged.loc["pl_cispo_entropy"]
    assert r.difference == pytest.approx(0.10) and r.n == 3 and r.outcome == "agrees"
    assert r.failure_established and "CISPO's weight cap binds engaged" in r.checks
    assert judged.loc["pl_gspo_clip_share"].difference == pytest.approx(0.25)
    assert judged.loc["pl_gspo_accuracy"].difference == pytest.approx(-0.06)
    assert judged.loc["pl_gspo_accuracy"].outcome == "disagrees"  # 6 points below, beyond the 3-point margin
    dual = judged.loc["pl_dual_clip_entropy"]
    assert dual.difference == pytest.approx(0.01) and dual.outcome == "agrees"  # within ±0.02
    assert judged.loc["pl_cispo_accuracy"].outcome == "agrees"
    assert not judged.index.str.startswith("pl_ref_").any()  # the reference setting's roles are config/full.yaml's


def test_claims_need_the_failure_and_the_clip(cfg, results):
    tabs = dict(results[0])
    runs = tabs["diagnostics_policy_losses_runs"].copy()
    gentle = runs["setting"] == "vanilla"
    runs.loc[gentle, "entropy_reduction"] = 0.05  # the clipped surrogate kept its entropy: no failure to remedy
    runs.loc[runs["setting"] == "cispo", "is_clip_frac"] = 0.0  # the cap never bound
    tabs["diagnostics_policy_losses_runs"] = runs
    judged = claims.judge_all(cfg, tabs).set_index("claim_id")
    r = judged.loc["pl_cispo_entropy"]
    assert r.outcome == "not judged" and "entropy falls under the clipped surrogate" in r.reason
    assert judged.loc["pl_gspo_clip_share"].outcome != "not judged"  # it needs no failure, only both clips


def test_figure_and_section_render(results):
    t = results[1]
    fig = diagnostics.figures(t)["diagnostics_policy_losses"]
    left, right = fig.axes[:2]
    assert left.get_xlabel() == "RL step" and left.get_ylabel() == "token entropy (nats)"
    assert right.get_ylabel() == "tokens whose gradient the clip cut (%)"
    assert {line.get_label() for line in left.get_lines()} == set(LOSSES)
    assert "cispo" not in {line.get_label() for line in right.get_lines()}  # CISPO cuts no token's gradient
    steps = t["diagnostics_policy_losses_steps"]
    assert (steps["n"] == 3).all() and len(steps) == 4 * len(LOSSES)
    html = environment().get_template("sections/diagnostics.html.j2").render(ctx=diagnostics.section(t), figures={})
    assert "Policy losses of 2025" in html and "arXiv 2506.13585" in html
    assert "CISPO, which drops no token" in html  # the view of claims.csv


def test_an_absent_experiment_gives_empty_tables(study_config):
    tabs = loss_comparison.tables(Context(study_config("no_losses", {})), {})
    assert all(df.empty for df in tabs.values())
    fig = loss_comparison.figure(tabs)
    assert fig.axes[0].get_xlabel() == "RL step"
