"""The diagnostics study on a hand-made results tree: pass@k, the entropy law,
advantage scaling by carries, the noise scale beside the batch study, the update diagnostics."""

import math

import matplotlib
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mathrl.analysis import claims
from mathrl.analysis.measures import run_measures
from mathrl.analysis.report import environment
from mathrl.analysis.studies import diagnostics
from mathrl.analysis.study_inputs import Context
from tests.synthetic import verdicts, with_claims, write_json, write_run, write_tables

matplotlib.use("Agg")

# held-out problems (2-digit addition): carries 0, 0, 1, 1
PROBLEMS = [(12, 13), (40, 50), (15, 15), (19, 1)]


def law_rows(seed: int, a: float = 0.5, b: float = 1.2, steps: int = 12) -> list[dict]:
    """Entropy falls, faster after steps of larger covariance (dH = -0.02 - 0.01 cov);
    training accuracy follows the law exactly."""
    rows, h = [], 0.6
    for step in range(1, steps + 1):
        if step > 1:
            h -= 0.02 + 0.01 * ((step - 1) % 3)
        rows.append({"step": step, "samples": 16 * step, "entropy": h, "accuracy": -a * math.exp(h) + b,
                     "reward_mean": 0.5,
                     "seconds": 1.0, "clip_frac_low": 0.01, "clip_frac_high": 0.03, "ppo_kl": 0.002,
                     "adv_std": 0.9 + 0.01 * seed,
                     "adv_abs_max": 2.0, "logp_adv_cov": float(step % 3),
                     **({"eval_accuracy": 0.6} if step == steps else {})})  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def cfg(study_config):
    gradvar = {"tasks": ["add"], "batch_sizes": [8, 16]}
    experiments = {
        "batch": {"fixed": {"steps": 12}, "grid": {"batch_size": [8, 16]}, "seeds": [0, 1]},
        "adv_scaling": {"fixed": {"steps": 12},
                        "variants": {"group_std": {"algorithm": "grpo", "pass_at_k": True},
                                     "none": {"algorithm": "dr_grpo"}},
                        "roles": {"baseline": "group_std", "none": "none"}, "seeds": [0, 1]},
        "clipping": {"fixed": {"steps": 12, "fault_grad_spike_step": 3}, "seeds": [0]},
    }  # fmt: skip
    return study_config("diag", experiments, gradvar=gradvar)


@pytest.fixture(scope="module")
def results(cfg):
    # batch: gains 0.1 (batch 8) and 0.3 (batch 16) over an initial 0.5 (final eval 0.6 or 0.8)
    for b, final in [(8, 0.6), (16, 0.8)]:
        for s in (0, 1):
            rows = law_rows(s)
            rows[-1]["eval_accuracy"] = final
            write_run(cfg, f"batch__batch_size-{b}__s{s}", rows, 0.5)
    for name in ("group_std", "none"):
        for s in (0, 1):
            d = write_run(cfg, f"adv_scaling__{name}__s{s}", law_rows(s), 0.5)
            # held-out: group_std ends right on all four, none only on the 0-carry two; both start at 0,1,0,1
            final = [1, 1, 1, 1] if name == "group_std" else [1, 1, 0, 0]
            (d / "heldout.csv").write_text(
                "a,b,initial,final\n"
                + "".join(f"{a},{b},{i % 2},{f}\n" for (a, b), i, f in zip(PROBLEMS, range(4), final))
            )
            if name == "group_std":  # 4 samples per problem: initial 1 correct each, final 2 (seed 0) or 3 (seed 1)
                lines = (
                    ["phase,a,b,samples,correct"]
                    + [f"initial,{a},{b},4,1" for a, b in PROBLEMS]
                    + [f"final,{a},{b},4,{2 + s}" for a, b in PROBLEMS]
                )
                (d / "pass_at_k.csv").write_text("\n".join(lines) + "\n")
    # an injected spike: entropy rises after the steps of larger covariance (the fault's dynamics, left out)
    spiked = law_rows(0)
    for row in spiked:
        row["entropy"] = 1.2 - row["entropy"]
    write_run(cfg, "clipping__base__s0", spiked, 0.5)
    write_json(
        cfg,
        "gradvar/add.json",
        {"noise_scale": {"small": 8, "big": 16, "grad_sq": 2.0, "trace_sigma": 32.0, "noise_scale": 16.0}},
    )
    tabs = with_claims(cfg, {**diagnostics.tables(Context(cfg)), "run_measures": run_measures(Context(cfg).runs)})
    return tabs, write_tables(cfg, tabs)


def test_pass_at_k_tables_and_verdicts(results):
    tabs = results[0]
    s = tabs["diagnostics_pass_at_k"].set_index(["phase", "k"])
    assert list(s.loc["initial"].index) == [1, 2, 4]  # k up to the 4 samples
    assert s.loc[("initial", 1)].pass_at_k_mean == pytest.approx(0.25)
    assert s.loc[("initial", 2)].pass_at_k_mean == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert s.loc[("final", 1)].pass_at_k_mean == pytest.approx((0.5 + 0.75) / 2)
    assert s.loc[("final", 4)].pass_at_k_mean == pytest.approx(1.0) and s.loc[("final", 4)].pass_at_k_hi <= 1.0
    v = verdicts(tabs, "diagnostics")
    assert (
        v.loc["pass_at_1_group_std"]["diff"] == pytest.approx(0.375) and v.loc["pass_at_1_group_std"].kind == "beyond"
    )
    assert (
        v.loc["pass_at_kmax_group_std"]["diff"] == pytest.approx(0.0)
        and "pass@4" in v.loc["pass_at_kmax_group_std"].claim
    )
    runs = tabs["diagnostics_pass_at_k_runs"]
    one = runs[(runs.seed == 0) & (runs.phase == "final") & (runs.k == 1)].iloc[0]
    assert one.pass_at_k == pytest.approx(0.5) and one.boot_lo == one.boot_hi == pytest.approx(
        0.5
    )  # every problem the same


def test_entropy_law_fits_the_hand_made_law(results):
    law = results[0]["diagnostics_entropy_law_runs"].query(
        "experiment != 'clipping'"
    )  # the spiked run fits its own law
    assert len(law) == 8 and law["a"].tolist() == pytest.approx([0.5] * 8, abs=1e-6)
    assert law["ceiling"].tolist() == pytest.approx([0.7] * 8, abs=1e-6) and law["holds"].all()
    s = results[0]["diagnostics_entropy_law"].set_index(["experiment", "setting"])
    r = s.loc[("adv_scaling", "none")]
    assert r.n == 2 and r.holds == 2 and r.r2_mean == pytest.approx(1.0)
    rows = law_rows(0)
    assert r.reached_mean == pytest.approx(np.mean([row["accuracy"] for row in rows[-5:]]))


def test_adv_scaling_by_carries(results):
    tabs = results[0]
    a = tabs["diagnostics_adv_scaling"].set_index(["setting", "carries"])
    assert a.loc[("group_std", "all")].final_mean == 1.0 and a.loc[("none", "all")].final_mean == 0.5
    assert a.loc[("none", "0")].final_mean == 1.0 and a.loc[("none", "1")].final_mean == 0.0
    assert a.loc[("group_std", "1")].gain_mean == 0.5  # from 0, 1 to 1, 1
    v = verdicts(tabs, "diagnostics")
    assert v.loc["adv_none_vs_group_std_c1"]["diff"] == pytest.approx(-1.0)
    assert v.loc["adv_none_vs_group_std_c1"].outcome == "disagrees"  # outside the ±3-point equivalence margin
    assert v.loc["adv_none_vs_group_std_c0"].outcome == "agrees"  # both right on every 0-carry problem
    # a reference whose gain interval includes 0: the variants are shown but not judged
    runs = results[0]["diagnostics_adv_scaling_runs"].copy()
    runs.loc[(runs.setting == "group_std") & (runs.seed == 1), "gain"] = -0.4
    roles = {"baseline": "group_std", "reference": "group_std", "none": "none"}
    later = verdicts({"claims": claims.judge_all({"experiments": {"adv_scaling": {"seeds": [0, 1], "roles": roles}}},
                                                 {"diagnostics_adv_scaling_runs": runs})}, "diagnostics")  # fmt: skip
    c1 = later.loc["adv_none_vs_group_std_c1"]
    assert c1.outcome == "not judged" and c1.reason.startswith(
        "precondition not met: RL learns in the reference not met"
    )
    # the baseline is never compared with itself, also when another role (the experiment's reference) names it
    assert (
        not any(k.startswith("adv_group_std_vs_") for k in later.index) and "adv_none_vs_group_std_call" in later.index
    )


def test_noise_scale_beside_the_batch_study(results):
    ns = results[0]["diagnostics_noise_scale"].set_index("batch_size")
    assert (
        ns.loc[8].noise_scale == 16.0
        and ns.loc[8].gain_mean == pytest.approx(0.1)
        and ns.loc[16].gain_mean == pytest.approx(0.3)
    )
    assert ns.loc[8].lr_scale == pytest.approx((8 / 24) / (16 / 32)) and ns.loc[16].lr_scale == pytest.approx(1.0)


def test_update_diagnostics_and_the_covariance_correlation(results):
    u = results[0]["diagnostics_update"].set_index(["experiment", "setting"])
    r = u.loc[("adv_scaling", "group_std")]
    assert r.clip_frac_high_mean == pytest.approx(0.03) and r.adv_std_mean == pytest.approx(0.905)
    assert r.cov_entropy_corr_mean < -0.9  # entropy falls more after each larger covariance (float noise breaks ties)
    runs = results[0]["diagnostics_update_runs"].set_index("experiment")
    assert runs.loc["clipping", "fault_injected"] == "yes" and runs.loc["clipping", "cov_entropy_corr"] > 0.9
    assert set(runs.drop(index="clipping")["fault_injected"]) == {"no"}
    v = verdicts(results[0], "diagnostics").loc["cov_drives_entropy"]
    assert v["diff"] < -0.9 and v["n"] == 8 and v["outcome"] == "agrees"  # the spiked run is not among the 8


def test_update_summary_counts_runs_whose_loss_has_no_ppo_clip():
    """Under CISPO no PPO clip is logged: its runs still count, and its other columns get their intervals."""
    runs = pd.DataFrame(
        {"experiment": "policy_losses", "setting": "cispo", "seed": [0, 1, 2], "fault_injected": "no",
         **{c: [0.1, 0.2, 0.3] for c in diagnostics.UPDATE}, "clip_frac_low": math.nan, "clip_frac_high": math.nan}
    )  # fmt: skip
    r = diagnostics.update_summary(runs).iloc[0]
    assert r.n == 3 and math.isnan(r.clip_frac_low_mean) and math.isnan(r.clip_frac_low_lo)
    assert r.ppo_kl_mean == pytest.approx(0.2) and r.ppo_kl_lo < 0.2 < r.ppo_kl_hi


def test_an_update_value_a_run_did_not_log_takes_its_interval_over_the_runs_that_did():
    runs = pd.DataFrame({"experiment": "e", "setting": "s", "seed": [0, 1, 2], **{c: 0.2 for c in diagnostics.UPDATE}})
    runs["ppo_kl"] = [0.1, 0.3, math.nan]  # two runs logged it: a t interval with 1 degree of freedom
    r = diagnostics.update_summary(runs).iloc[0]
    half = stats.t.ppf(0.975, 1) * np.std([0.1, 0.3], ddof=1) / np.sqrt(2)
    assert r.n == 3 and r.ppo_kl_lo == pytest.approx(0.2 - half) and r.ppo_kl_hi == pytest.approx(0.2 + half)


def test_section_renders(results, cfg):
    t = results[1]
    env = environment()
    figs = diagnostics.figures(t)
    expected = {
        "diagnostics_pass_at_k",
        "diagnostics_entropy_law",
        "diagnostics_adv_scaling",
        "diagnostics_mismatch",
        "diagnostics_curves",
        "diagnostics_policy_losses",
        "diagnostics_token_selection",
    }
    assert set(figs) == expected
    html = env.get_template("sections/diagnostics.html.j2").render(ctx=diagnostics.section(t), figures={})
    assert "pass@k before and after RL" in html and "adv_scaling" in html and "B_noise" in html


def test_entropy_law_intervals_stay_within_their_range():
    """R² is at most 1, the half-run error at least 0, reached accuracy within [0, 1]: their t intervals (two seeds,
    t(1) = 12.7) are clipped there; the fitted ceiling is not (above 1 it reads as the extrapolation it is)."""
    runs = pd.DataFrame({"experiment": "e", "setting": "s", "seed": [0, 1], "r2": [0.90, 0.99], "a": 0.5,
                         "b": [1.0, 1.2], "ceiling": [0.5, 0.7], "reached": [0.02, 0.04], "final_eval": [0.97, 0.99],
                         "ceiling_minus_reached": 0.5, "half_rmse": [0.01, 0.03], "entropy_start": 1.0,
                         "entropy_end": 0.5,
                         "holds": True})  # fmt: skip
    r = diagnostics.entropy_law_summary(runs).iloc[0]
    assert r.r2_hi == 1.0 and r.half_rmse_lo == 0.0 and r.reached_lo == 0.0 and r.final_eval_hi == 1.0
    assert r.ceiling_hi > 1.0 and r.r2_lo == pytest.approx(0.945 - 12.7062 * 0.045, rel=1e-4)


def test_a_run_without_an_r2_still_counts_among_the_runs_fitted():
    """Constant data (a random policy) has no R², a or b, yet its reached accuracy counts: n is the runs fitted, and
    each value's interval uses its own count (R² over two runs, t(1); reached over three, t(2))."""
    runs = pd.DataFrame({"experiment": "e", "setting": "s", "seed": [0, 1, 2], "r2": [0.90, 0.99, None],
                         "a": [0.5, 0.5, None], "b": [1.0, 1.2, None], "ceiling": [0.5, 0.7, None],
                         "reached": [0.30, 0.40, 0.50], "final_eval": [0.3, 0.4, 0.5], "ceiling_minus_reached": 0.1,
                         "half_rmse": [0.01, 0.03, None], "entropy_start": 1.0, "entropy_end": 0.5,
                         "holds": [True, True, None]})  # fmt: skip
    r = diagnostics.entropy_law_summary(runs).iloc[0]
    assert r.n == 3 and r.r2_lo == pytest.approx(0.945 - 12.7062 * 0.045, rel=1e-4)
    assert r.reached_lo == pytest.approx(0.40 - 4.3027 * 0.1 / 3**0.5, rel=1e-4)


def test_a_shared_runs_files_are_read_where_it_was_trained(tmp_path):
    from mathrl.analysis.results import Run
    from mathrl.pipeline import layout
    from mathrl.pipeline.config import RunSpec

    ctx = Context({"results": str(tmp_path)})
    own = Run(RunSpec("a__x__s0", "a", "x", {}, 0, {}), "complete")
    shared = Run(RunSpec("b__y__s0", "b", "y", {}, 0, {}, same_as="a__x__s0"), "complete")
    assert ctx.run_file(own, layout.RUN_DIR) == tmp_path / "runs" / "a__x__s0"
    assert ctx.run_file(shared, layout.RUN_SNAPSHOT) == ctx.run_file(own, layout.RUN_SNAPSHOT)
    assert ctx.run_file(shared, layout.STAGES["train"].log).name == "a__x__s0.log"
