"""Two parts of the diagnostics study on a hand-made results tree: compute-performance curves (the batch study
restated as ceiling against efficiency) and the negative controls."""

import matplotlib
import numpy as np
import pytest

from mathrl.analysis.curves import sigmoid_curve
from mathrl.analysis.report import environment
from mathrl.analysis.studies import diagnostics
from mathrl.analysis.study_inputs import Context
from tests.synthetic import with_claims, write_run, write_tables

matplotlib.use("Agg")

R0 = 0.3
# batch 16 climbs to a ceiling of 0.8, batch 8 to 0.5: the same B, so batch 8 moves the ceiling only
CURVE = {8: (0.5, 2.0, 40.0), 16: (0.8, 2.0, 80.0)}  # A, B, C_mid
PROBLEMS = [(12, 13), (40, 50), (15, 15), (19, 1)]
# negative controls: held-out greedy accuracy at the end (start 0.5) and correct samples of 4 per problem after RL
FINAL = {"reference": (0.6, 0.7), "random_reward": (0.5, 0.4), "positive_only": (0.65, 0.75)}
CORRECT = {"reference": 2, "random_reward": 0, "positive_only": 3}


def batch_rows(b: int) -> list[dict]:
    """20 steps of batch b, evaluated every 2 steps on the exact curve (10 points: a first half of 5)."""
    a, slope, mid = CURVE[b]
    rows = []
    for step in range(1, 21):
        row = {"step": step, "samples": b * step, "entropy": 0.5, "accuracy": 0.5, "seconds": 1.0}
        if step % 2 == 0:
            row["eval_accuracy"] = float(sigmoid_curve(b * step, R0, a, slope, mid))
        rows.append(row)
    return rows


def control_rows(final: float, adv: float) -> list[dict]:
    return [
        {
            "step": s,
            "samples": 16 * s,
            "entropy": 0.5,
            "kl": 0.01 * s,
            "accuracy": 0.5,
            "reward_mean": 0.5,
            "seconds": 1.0,
            "clip_frac": 0.02,
            "adv_mean": adv,
            **({"eval_accuracy": final} if s == 4 else {}),
        }
        for s in range(1, 5)
    ]


@pytest.fixture(scope="module")
def cfg(study_config):
    experiments = {
        "batch": {
            "fixed": {"steps": 20, "eval_every": 2},
            "grid": {"batch_size": [8, 16]},
            "roles": {"reference": "batch_size=16"},
            "seeds": [0, 1, 2],
        },
        "negative_controls": {
            "fixed": {"steps": 4, "pass_at_k": True},
            "variants": {
                "reference": {},
                "random_reward": {"reward": "random"},
                "positive_only": {"sample_filter": "positive"},
            },
            "roles": {"reference": "reference", "random_reward": "random_reward", "positive_only": "positive_only"},
            "seeds": [0, 1],
        },
    }
    return study_config("curves", experiments)


@pytest.fixture(scope="module")
def results(cfg):
    for b in (8, 16):
        for s in (0, 1, 2):
            write_run(cfg, f"batch__batch_size-{b}__s{s}", batch_rows(b), R0)
    for name, finals in FINAL.items():
        for s, final in enumerate(finals):
            d = write_run(
                cfg,
                f"negative_controls__{name}__s{s}",
                control_rows(final, 0.2 if name == "positive_only" else 0.0),
                0.5,
            )
            lines = ["phase,a,b,samples,correct"] + [f"initial,{a},{b},4,1" for a, b in PROBLEMS]
            lines += [f"final,{a},{b},4,{CORRECT[name]}" for a, b in PROBLEMS]
            (d / "pass_at_k.csv").write_text("\n".join(lines) + "\n")
    tabs = with_claims(cfg, diagnostics.tables(Context(cfg)))
    return tabs, write_tables(cfg, tabs)


def test_curves_recover_each_batch_size_and_forecast_the_second_half(results):
    s = results[0]["diagnostics_curves"].set_index(["experiment", "setting"])
    for b, (a, slope, mid) in CURVE.items():
        r = s.loc[("batch", f"batch_size={b}")]
        assert r.n == 3 and r.points == 10 and r.R0 == pytest.approx(R0)
        assert r.A_mean == pytest.approx(a, abs=1e-3) and r.B_mean == pytest.approx(slope, rel=1e-2)
        assert r.C_mid == pytest.approx(mid, rel=1e-2)
        assert r.half_n == 3 and r.half_mae_mean < 1e-3  # exact data: the first half's fit predicts the second
        # each evaluation read eval_size (50) problems: the floor a perfect forecast would show from that sample
        assert 0.01 < r.half_noise < 0.07
    nc = s.loc[("negative_controls", "reference")]
    assert nc.n == 0 and not nc.fitted and nc.note.startswith("not fitted: 1 point after the start")


def test_batch_restated_as_ceiling_against_efficiency(results):
    tabs = results[0]
    batch = tabs["diagnostics_curves_batch"].set_index("setting")
    small = batch.loc["batch_size=8"]
    assert small.dA == pytest.approx(-0.3, abs=1e-3) and small.dA_hi < 0  # identical seeds: a zero-width interval
    assert small.dB == pytest.approx(0.0, abs=1e-2) and small.dB_n == 3
    assert batch.loc["batch_size=16"].reference and np.isnan(batch.loc["batch_size=16"].dA)
    drawn = tabs["diagnostics_curves_fit"]
    assert set(drawn["setting"]) == {"batch_size=8", "batch_size=16"} and (drawn["n"] == 3).all()
    pts = tabs["diagnostics_curves_points"]
    assert len(pts[pts["setting"] == "batch_size=8"]) == 11  # the start and 10 evaluations


def test_negative_control_tables(results):
    tabs = results[0]
    r = tabs["diagnostics_negative_controls_runs"]
    assert list(r["setting"]) == [name for name in FINAL for _ in (0, 1)] and list(r["role"]) == list(r["setting"])
    assert list(r["final_eval"]) == pytest.approx([f for finals in FINAL.values() for f in finals])
    c = tabs["diagnostics_negative_controls"].set_index("setting")
    assert c.loc["reference"].gain_mean == pytest.approx(0.15) and c.loc["reference"].n == 2
    assert np.isnan(c.loc["reference"].vs_reference_mean)
    rnd = c.loc["random_reward"]
    assert rnd.gain_mean == pytest.approx(-0.05)
    assert rnd.vs_reference_mean == pytest.approx(-0.2)  # (0.5 - 0.6, 0.4 - 0.7) paired by seed
    assert rnd.clip_frac_mean == pytest.approx(0.02) and c.loc["positive_only"].adv_mean_mean == pytest.approx(0.2)
    pk = tabs["diagnostics_negative_controls_pass_at_k"].set_index(["setting", "k"])
    assert sorted(set(tabs["diagnostics_negative_controls_pass_at_k"]["k"])) == [1, 4]
    at_1 = tabs["diagnostics_negative_controls_pass_at_k"].query("k == 1")["setting"].tolist()
    assert at_1 == ["reference", "random_reward", "positive_only"]  # the config's order within each k
    assert pk.loc[("random_reward", 1)].change_mean == pytest.approx(-0.25)  # 1 of 4 right before, none after
    assert pk.loc[("random_reward", 4)].change_mean == pytest.approx(-1.0)
    assert pk.loc[("positive_only", 1)].final_mean == pytest.approx(0.75)
    assert pk.loc[("positive_only", 4)].change_mean == 0.0


def test_section_and_figure_render(results):
    t = results[1]
    figs = diagnostics.figures(t)
    assert (
        "diagnostics_curves" in figs
        and figs["diagnostics_curves"].axes[0].get_xlabel() == "rollouts sampled (compute C)"
    )
    html = environment().get_template("sections/diagnostics.html.j2").render(ctx=diagnostics.section(t), figures={})
    assert "Compute-performance curves" in html and "ceiling against efficiency" in html and "Negative controls" in html
    assert "batch 10" in html and "negative_controls 1" in html  # evaluations after the start per run
    assert "random_reward" in html
    text = " ".join(html.split())
    assert "Against batch_size=16: the 95% interval of the paired difference in A excludes 0 for batch_size=8" in text


def test_negative_control_claims_read_these_tables(results, cfg):
    from mathrl.analysis import claims

    judged = claims.judge_all(cfg, results[0]).set_index("claim_id")
    r = judged.loc["nc_random_reward_no_gain"]
    assert r.difference == pytest.approx(-0.05) and r.n == 2 and "the ratio clip binds engaged" in r.checks
    psr = judged.loc["nc_positive_only_pass_at_1"]
    assert psr.difference == pytest.approx(0.5) and psr.outcome == "agrees"  # 0.25 -> 0.75 in both seeds
    assert judged.loc["nc_positive_only_pass_at_max"].difference == pytest.approx(0.0)
    # this experiment declares no random_reward_noclip or negative_only: those claims are shown, not judged
    assert judged.loc["nc_clip_under_random_reward"].outcome == "not judged"
    assert judged.loc["nc_negative_only_pass_at_1"].outcome == "not judged"
    # the controls' pass@k is not read by the claims that RL raises pass@1
    assert not judged.index.str.startswith("pass_at_").any()
    assert results[0]["diagnostics_pass_at_k_runs"].empty


def test_the_efficiency_interval_stays_within_the_fit_bounds():
    """Three efficiencies, one at the fit's bound of 20: the t interval reaches below 0, which no fit can give."""
    import pandas as pd

    from mathrl.analysis import curves
    from mathrl.analysis.measures.curve_fits import ceiling_and_efficiency

    fits = pd.DataFrame({"A": [0.5, 0.6, 0.55], "B": [0.5, 1.0, 20.0], "a_at_bound": [0, 0, 0]})
    out = ceiling_and_efficiency(fits)
    assert out["B_lo"] == curves.B_BOUNDS[0] and out["B_hi"] < 40 and out["B_n"] == 3
