"""The stability study on a hand-made results tree: every table number checked by hand."""

from __future__ import annotations

import copy
import math
import re

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")

from mathrl.analysis.measures.hyperparameters import final_eval_absdev  # noqa: E402
from mathrl.analysis.measures.monitor_alerts import DROP, HORIZON  # noqa: E402
from mathrl.analysis.results import COLLAPSE_DEFINITION  # noqa: E402
from mathrl.analysis.studies import stability as st  # noqa: E402
from mathrl.analysis.study_inputs import Context, Tables  # noqa: E402
from mathrl.pipeline.config import load_config  # noqa: E402
from tests import synthetic  # noqa: E402
from tests.conftest import TINY, write_config  # noqa: E402
from tests.synthetic import write_json, write_run  # noqa: E402

STEPS = 10  # evaluations at steps 2, 4, 6, 8, 10 (and 0, before RL)


def rows(evals, reward=0.5, entropy=lambda s: 1.0 - 0.05 * s, kl=0.01, skipped_at=None, upto=STEPS, **const):
    out = []
    for step in range(1, upto + 1):
        r = {"step": step, "samples": 16 * step, "reward_mean": reward if step == upto else 0.3, "accuracy": 0.5,
             "entropy": entropy(step),
             "kl": kl(step) if callable(kl) else kl, "frac_zero_std": 0.2, "seconds": 1.0,
             "skipped": int(step == skipped_at),
             **{k: v(step) if callable(v) else v for k, v in const.items()}}  # fmt: skip
        if step % 2 == 0:
            r["eval_accuracy"] = evals[step // 2 - 1]
        out.append(r)
    return out


pytestmark = pytest.mark.usefixtures("schema_parsed_once")


@pytest.fixture(scope="module")
def built(study_config, schema_parsed_once):
    """The config and the tables of a hand-made tree, built once for the module."""
    train = {**TINY["train"], "steps": STEPS, "eval_every": 2}
    gradvar = {"tasks": ["add", "mul"], "batch_sizes": [64, 512], "accumulation": [512, 128]}
    experiments = {
        "lab04_gpt": {"variants": {"random_init": {"init": "random"}}, "seeds": [0]},
        "batch": {"grid": {"batch_size": [64, 512]}, "seeds": [0, 1]},
        "fixed_vs_dynamic": {"fixed": {"log_every": 7},  # not the batch study's settings: no run shared with it here
                             "variants": {"A_fixed_512": {"batch_size": 512},
                                          "B_step_lr_128": {"batch_size": 128, "lr_schedule": "step",
                                                            "lr_decay_every": 2},
                                          "C_adaptive_kl_128": {"batch_size": 128, "kl_controller": "threshold",
                                                                "kl_target": 0.05}},
                             "roles": {"A": "A_fixed_512", "B": "B_step_lr_128", "C": "C_adaptive_kl_128"},
                             "seeds": [0, 1]},
        "clipping": {"fixed": {"fault_grad_spike_step": 3}, "seeds": [0, 1],
                     "variants": {"spike_no_clip": {"optimizer": "sgd", "lr": 0.01, "grad_clip": None},
                                  "spike_clip1": {"optimizer": "sgd", "lr": 0.01, "grad_clip": 1.0},
                                  "adamw_spike": {"grad_clip": None},
                                  "adamw_no_clip": {"grad_clip": None, "fault_grad_spike_step": None}}},
        "value_clip": {"fixed": {"algorithm": "ppo"}, "grid": {"value_clip": [None, 0.2], "value_coef": [0.5, 1.0]},
                       "seeds": [0]},
        "collapse": {"variants": {"huge_lr": {"lr": 1.0, "grad_clip": None}}, "seeds": [0]},
    }  # fmt: skip
    cfg = study_config("stability", experiments, train=train, gradvar=gradvar)
    write_tree(cfg)
    return cfg, synthetic.with_claims(cfg, st.tables(Context(cfg)))


@pytest.fixture
def cfg(built):
    return built[0]


@pytest.fixture
def tree(built):
    return built[1]


def write_tree(cfg):
    w = lambda rid, r, init=0.5, **kw: write_run(cfg, rid, r, init, **kw)  # noqa: E731
    w("lab04_gpt__random_init__s0", [{**r, "frac_zero_std": 1.0} for r in rows([0.0] * 5)], init=0.0)
    w(
        "batch__batch_size-64__s0",
        rows([0.6, 0.45, 0.7, 0.5, 0.65], reward=0.2),
        alerts=[
            {"step": 4, "kind": "reward_swing", "value": 0.4, "threshold": 0.3, "message": "m"},
            {"step": 8, "kind": "reward_swing", "value": 0.4, "threshold": 0.3, "message": "m"},
        ],
    )
    w(
        "batch__batch_size-64__s1",
        rows([0.2, 0.5, 0.4, 0.6, 0.55], reward=0.4),
        alerts=[{"step": 6, "kind": "high_kl", "value": 0.7, "threshold": 0.5, "message": "m"}],
    )
    w(
        "batch__batch_size-512__s0", rows([0.52, 0.54, 0.56, 0.58, 0.6], reward=0.5, seconds=2.0)
    )  # batch 512 seed 1 is missing
    for v, finals in [
        ("A_fixed_512", [0.7, 0.6]),
        ("B_step_lr_128", [0.5, 0.55]),
        ("C_adaptive_kl_128", [0.6]),
    ]:  # C seed 1 missing
        for seed, f in enumerate(finals):
            w(f"fixed_vs_dynamic__{v}__s{seed}", rows([0.5, 0.5, 0.5, 0.5, f], lr=1e-4, kl_coef=0.05))

    def spiked(r, at=3, size=1000.0):  # the injected spike: the gradient norm of step `at`
        return [{**x, "grad_norm": size if x["step"] == at else 1.0} for x in r]

    w(
        "clipping__spike_no_clip__s0",
        spiked(
            rows(
                [0.6, 0.1, 0.1, 0.1, 0.1],
                entropy=lambda s: 1.0 if s == 1 else 0.1,
                kl=lambda s: 2.0 if s == 5 else 0.01,
            )
        ),
    )
    w("clipping__spike_no_clip__s1", spiked(rows([0.2, 0.1, 0.1, 0.1, 0.1])))
    w("clipping__spike_clip1__s0", spiked(rows([0.5] * 5)))
    w("clipping__spike_clip1__s1", spiked(rows([0.5, 0.5, 0.5, 0.5, 0.56])))
    w("clipping__adamw_spike__s0", spiked(rows([0.5, 0.45, 0.5, 0.5, 0.5])))
    w("clipping__adamw_spike__s1", spiked(rows([0.5] * 5)))
    w("clipping__adamw_no_clip__s0", rows([0.5] * 5, grad_norm=1.0))
    w("clipping__adamw_no_clip__s1", rows([0.5] * 5, grad_norm=1.0))
    for clip, coef, rmse in [("none", 0.5, 0.3), ("none", 1.0, 0.25), ("0.2", 0.5, 0.2), ("0.2", 1.0, 0.15)]:
        r = rows(
            [0.5] * 5,
            value_rmse=rmse,
            explained_variance=lambda s: -1.5 if s == 2 else 0.4,
            value_delta=lambda s: 0.45 if s == 1 else 0.05,
            value_clip_frac=lambda s, clip=clip: (0.7 if s == 1 else 0.0) if clip != "none" else 0.0,
        )
        if clip == "0.2" and coef == 1.0:
            r[-1]["value_rmse"] = 0.1
        w(f"value_clip__value_clip-{clip}_value_coef-{coef:g}__s0", r)
    w("collapse__huge_lr__s0", rows([0.5], upto=3, skipped_at=3), status="stopped_nonfinite")
    write_json(cfg, "gradvar/add.json",
               {"variance": [{"batch_size": 64, "variance": 8e-4}, {"batch_size": 512, "variance": 1e-4}],
                                         "accumulation": {"batch_size": 512, "micro_batch_size": 128, "steps": 4,
                                                          "max_abs_difference": 1e-8, "max_abs_gradient": 0.1,
                                                          "relative": 1e-7}})  # fmt: skip


def one(df, **keys):
    r = df
    for k, v in keys.items():
        r = r[r[k].astype(str) == str(v)]
    assert len(r) == 1, keys
    return r.iloc[0]


def test_curve_statistics():
    from mathrl.analysis.results import max_drawdown, roughness

    s = pd.Series([0.5, 0.6, 0.45, 0.7, 0.5, 0.65])
    # residuals of 0, 1, 0, 1 around its fitted line 0.2 + 0.2 x: -0.2, 0.6, -0.6, 0.2; sqrt(0.8 / 2)
    assert roughness([0, 1, 2, 3], [0, 1, 0, 1]) == pytest.approx(math.sqrt(0.4))
    assert roughness([0, 5, 10], [0.1, 0.2, 0.3]) == pytest.approx(
        0.0, abs=1e-12
    )  # a steady rise is smooth, whatever the spacing
    assert roughness([0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 0, 1, 0, 1, 0, 1]) == pytest.approx(
        roughness([0, 2, 4, 6, 8, 10, 12, 14], [0, 1, 0, 1, 0, 1, 0, 1])
    )
    assert (
        max_drawdown(s) == pytest.approx(0.2)
        and max_drawdown([0.1, 0.2]) == 0.0
        and math.isnan(roughness([0, 1], [0, 1]))
    )
    from mathrl.analysis.report import ci  # the section's sentences print a row's mean with its interval

    assert (
        ci(pd.Series({"x_mean": 0.5, "x_std": 0.1, "n": 3}), "x") == "50.0% [25.2%, 74.8%] (n=3)"
    )  # t(2) x 0.1 / sqrt(3)
    assert ci(None, "x") == "no data"


def test_batch_tables(tree):
    b = tree["stability_batch"]
    r64, r512 = one(b, batch_size=64), one(b, batch_size=512)
    assert (r64["n"], r64["expected"], r512["n"], r512["expected"]) == (2, 2, 1, 2)  # the missing seed is not invented
    assert r64["roughness_mean"] > 0.05 and r64["drawdown_mean"] == pytest.approx((0.2 + 0.3) / 2)
    assert r64["largest_drop_mean"] == pytest.approx(0.25) and r64["final_eval_mean"] == pytest.approx(0.60)
    assert r64["share_above_10_mean"] == pytest.approx(0.7) and r64["share_below_3_mean"] == 0.0
    assert (r64["collapses"], r64["collapse_rate"]) == (
        0,
        0.0,
    )  # seed 1 fell to 0.2 < 0.5 x 0.5 once, then recovered: no collapse
    assert r512["roughness_mean"] == pytest.approx(0.0, abs=1e-9) and (
        r512["largest_drop_mean"],
        r512["share_below_3_mean"],
    ) == (0.0, 1.0)
    assert math.isnan(r512["roughness_std"]) and r512["collapses"] == 0
    c = tree["stability_batch_curve"]
    p1 = one(c, batch_size=64, point=1)
    assert (p1["step"], p1["eval_step"], p1["n"]) == (2, 2, 2) and p1["eval_accuracy_mean"] == pytest.approx(0.4)
    assert p1["entropy_mean"] == pytest.approx(0.9) and p1["doc_accuracy"] == 0.32
    assert (
        one(c, batch_size=512, point=5)["eval_accuracy_mean"] == pytest.approx(0.6)
        and one(c, batch_size=512, point=5)["doc_reward"] == 0.34
    )
    cs = tree["stability_case_study"]
    assert one(cs, batch_size=64)["final_reward_mean"] == pytest.approx(0.3) and one(cs, batch_size=64)[
        "final_reward_std"
    ] == pytest.approx(0.1 * 2**0.5)
    assert one(cs, batch_size=64)["alerts_mean"] == 1.5 and one(cs, batch_size=512)["wall_seconds_mean"] == 20.0
    assert one(cs, batch_size=512)["doc_collapses"] == 0


def test_fixed_vs_dynamic_and_clipping(tree):
    f = tree["stability_fixed_vs_dynamic"]
    assert one(f, role="A")["final_eval_mean"] == pytest.approx(0.65) and one(f, role="A")[
        "reproducibility_std"
    ] == pytest.approx(0.05 * 2**0.5)
    assert (one(f, role="C")["n"], one(f, role="C")["expected"], one(f, role="A")["rank"]) == (1, 2, 1)
    assert one(f, role="B")["doc_final_accuracy"] == 0.523 and one(f, role="B")["lr_last_mean"] == 1e-4
    c = tree["stability_clipping"]
    assert list(c["cell"]) == [
        "sgd at LR 0.01, clip none, spike",
        "sgd at LR 0.01, clip 1.0, spike",
        "adamw at LR 0.0003, clip none, spike",
        "adamw at LR 0.0003, clip none, no spike",
    ]
    assert list(c["collapses"]) == [2, 0, 0, 0] and list(c["collapse_rate"]) == [1.0, 0.0, 0.0, 0.0]
    assert one(c, cell="sgd at LR 0.01, clip 1.0, spike")["collapse_rate_hi"] == pytest.approx(
        3.8415 / 5.8415, rel=1e-3
    )  # Wilson, 0 of 2
    assert one(c, cell="sgd at LR 0.01, clip none, spike")["spike_ratio_mean"] == 1000.0 and math.isnan(
        one(c, cell="adamw at LR 0.0003, clip none, no spike")["spike_ratio_mean"]
    )
    assert one(c, cell="sgd at LR 0.01, clip none, spike")["drop_after_spike_mean"] == pytest.approx(
        0.4
    )  # from 0.5 to 0.1 after step 3
    assert one(c, cell="adamw at LR 0.0003, clip none, spike")["doc_collapse_rate"] == 0.35
    fr = tree["stability_fvd_runs"]  # the reproducibility claim reads each seed's distance from its median
    median = fr.groupby("role")["final_eval"].transform("median")
    assert fr["final_eval_absdev"].tolist() == pytest.approx((fr["final_eval"] - median).abs().tolist(), nan_ok=True)
    assert fr["final_eval_absdev"].max() > 0  # the tree's A seeds end apart
    runs = tree["stability_clipping_runs"]  # what clipping's speed claim reads: held-out accuracy, last − first
    assert (runs["gain"] == runs["final_eval"] - runs["initial_eval"]).all()
    s0 = one(runs, variant="spike_no_clip", seed=0)
    assert (s0["optimizer"], s0["max_norm"], s0["spike"], s0["gain"]) == ("sgd", "none", "yes", pytest.approx(-0.4))
    assert list(one(runs, variant="adamw_no_clip", seed=1)[["optimizer", "spike"]]) == ["adamw", "no"]


def test_value_gradvar_alerts(tree):
    v = tree["stability_value_clip"]
    r = one(v, value_clip="0.2", value_coef=1.0)
    assert (
        r["final_rmse_mean"] == pytest.approx(0.1)
        and r["mean_rmse_mean"] == pytest.approx(0.145)
        and r["doc_rmse"] == 0.12
    )
    assert one(v, value_clip="none", value_coef=0.5)["doc_rmse"] == 0.25
    # the critic's worst step (EV -1.5 at step 2), the largest move of one update (0.45 at step 1), the clip's busiest
    # step
    assert (r["ev_min_mean"], r["value_delta_max_mean"], r["clip_share_max_mean"]) == (
        pytest.approx(-1.5),
        pytest.approx(0.45),
        pytest.approx(0.7),
    )
    assert one(v, value_clip="none", value_coef=0.5)["clip_share_max_mean"] == 0.0
    g = tree["stability_gradvar"]
    assert (
        one(g, task="add", batch_size=64)["ratio_to_largest"] == pytest.approx(8.0)
        and one(g, task="add", batch_size=64)["theory_ratio"] == 8.0
    )
    assert one(g, task="mul", batch_size=64)["status"] == "missing" and math.isnan(
        one(g, task="mul", batch_size=64)["variance"]
    )
    a = tree["stability_accumulation"]
    assert one(a, task="add")["relative"] == 1e-7 and math.isnan(one(a, task="mul")["relative"])
    al = tree["stability_alerts"]
    sw = one(al, experiment="batch", kind="reward_swing")
    assert (sw["runs"], sw["expected"], sw["runs_with_alert"], sw["first_step_median"], sw["alerts"]) == (
        3,
        4,
        1,
        4.0,
        2,
    )
    assert one(al, experiment="batch", kind="low_entropy")["runs_with_alert"] == 0


def test_alert_scores(tree):
    sc = tree["stability_alert_scores"].set_index("detector")
    # Two sustained drops in the tree: clipping sgd_spike s0 (0.6 -> 0.1 at step 4) and s1 (0.5 start, 0.2 at step 2...
    # onset step 2).
    le = sc.loc["low_entropy"]  # sgd_spike s0's entropy falls below 0.5 at step 2, two steps before its drop
    # a 6-step run cannot watch a 10-step horizon (`watched`): the alert announces the drop (recall) but is not scored
    # for precision, and no step of these short runs gives a base rate
    assert (le.alerts, le.followed_by_drop, le.drops, le.announced) == (0, 0, 2, 1)
    assert sc.loc["reward_swing, fixed 0.3"].alerts == 0 and math.isnan(le.base_rate)


def test_troubleshooting_and_criteria(tree):
    t = tree["stability_troubleshooting"].set_index("symptom")
    assert t.loc["reward does not rise", "evidence_run"] == "lab04_gpt__random_init__s0"
    assert (
        t.loc["reward drops suddenly", "evidence_run"] == "clipping__spike_no_clip__s0"
        and "step 2 -> 10.0% at step 4" in t.loc["reward drops suddenly", "evidence"]
    )
    assert t.loc["reward drops suddenly", "cause_shown"] == "no gradient clipping (and an outsized gradient)"
    # sgd_spike s0's entropy falls tenfold, but it has no entropy bonus at all: no evidence for "bonus too weak"
    assert (
        t.loc["entropy collapses fast", "evidence_run"] == ""
        and t.loc["entropy collapses fast", "evidence"] == "no run of this pipeline has this cause"
    )
    # its KL of 2 is not from PPO epochs or a wider clip, and no run of this tree has those
    assert (
        t.loc["KL explodes", "evidence_run"] == ""
        and t.loc["KL explodes", "evidence"] == "no run of this pipeline has this cause"
    )
    assert t.loc["out of memory", "evidence"] == "not observed in this pipeline"
    assert t.loc["non-finite loss or gradient", "evidence_run"] == "collapse__huge_lr__s0"
    v = synthetic.verdicts(tree, "stability")
    assert (
        v.loc["gradvar"].outcome == "agrees"
        and v.loc["gradvar"]["diff"] == pytest.approx(8.0)
        and v.loc["accumulation"].outcome == "agrees"
    )
    b = v.loc["fixed_vs_B"]  # A − B per seed: 0.2, 0.05; t(1) = 12.706, se = 0.075
    assert (b.outcome, b.design, b.n) == ("inconclusive", "paired", 2) and b["diff"] == pytest.approx(0.125)
    assert b.ci_low == pytest.approx(0.125 - 12.7062 * 0.075, rel=1e-4) and b.seeds_needed > 2
    assert v.loc["fixed_vs_C"].outcome == "not judged"  # C has one seed: no interval
    clip = v.loc["clipping_bounds_spike"]  # SGD after a spike: 2 of 2 collapsed without clipping, 0 of 2 with it
    assert clip.kind == "setup" and clip.outcome == "agrees" and clip["diff"] == pytest.approx(1.0)
    assert clip.design == "rates" and clip.note == "2 of 2 runs against 0 of 2"  # the counts behind the rates
    assert clip.ci_low == pytest.approx(
        1 - math.sqrt(2) * 0.6576, abs=1e-3
    )  # Newcombe from Wilson (2 of 2: [0.3424, 1]; 0 of 2: [0, 0.6576])
    assert v.loc["clipping_adamw_1.0"].outcome == "not judged"  # no clipped AdamW cell in this tree
    assert v.loc["value_clip"].outcome == "not judged" and v.loc["batch_smoother"].outcome == "not judged"
    # one seed per cell: no interval, so the checks on an interval's lower end cannot be measured
    assert (
        "critic (unclipped, weight 0.5) not measured: ci_low of explained variance at step 20"
        in v.loc["value_clip"].engaged
    )
    swings = v.loc["batch_small_swings"]  # largest relative falls at batch 64 (0.7 -> 0.5; 0.5 -> 0.2), minus 10%
    assert swings["diff"] == pytest.approx((0.2 / 0.7 + 0.3 / 0.5) / 2 - 0.10) and swings.outcome == "inconclusive"


def save(cfg, tables) -> Tables:
    for name, df in tables.items():
        path = Tables(cfg).dir / f"{name}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(path, index=False)
    return Tables(cfg)


def render(ctx: dict, figures: dict) -> str:
    from mathrl.analysis.report import environment

    return environment().get_template("sections/stability.html.j2").render(ctx=ctx, figures=figures)


def check_figures(figs):
    import matplotlib.pyplot as plt

    assert set(figs) == {
        "stability_batch_curves",
        "stability_equal_samples",
        "stability_fixed_vs_dynamic",
        "stability_gradvar",
        "stability_clipping",
        "stability_value_clip",
    }
    for name, fig in figs.items():
        for ax in fig.axes:
            assert ax.get_title(), name
        plt.close(fig)


def test_figures_and_section_from_csv(cfg, tree):
    t = save(cfg, tree)
    figs = st.figures(t)
    ax = figs["stability_batch_curves"].axes[0]
    assert ax.get_xlabel() == "RL step" and len(ax.get_legend().get_texts()) == 2
    assert figs["stability_gradvar"].axes[0].get_yscale() == "log"
    styles = {line.get_label(): line.get_linestyle() for line in figs["stability_value_clip"].axes[0].get_lines()}
    assert len(styles) == 4 and all((s == "--") == ("value_clip=0.2" in k) for k, s in styles.items())  # clipped dashed
    names = {"value_clip=none, value_coef=0.5": "unclipped_w0.5", "value_clip=0.2, value_coef=1.0": "clipped_w1"}
    for name in ("stability_series", "stability_value_clip_runs"):
        t._cache[name] = t[name].assign(setting=t[name]["setting"].replace(names))
    named = st.figures(t)
    styles = {line.get_label(): line.get_linestyle() for line in named["stability_value_clip"].axes[0].get_lines()}
    assert styles["clipped_w1"] == "--" and styles["unclipped_w0.5"] == "-"
    check_figures(named)
    check_figures(figs)
    s = st.section(t)
    # B against A, C against A (one seed: no interval); C against B, its smoothness and reproducibility, not judged
    # where a schedule never acted (this tree's B and C hold their LR and KL coefficient)
    rows = s["parts"]["fixed_vs_dynamic"]["rows"]
    keys = [r["key"] for r in rows]
    assert keys[:2] == ["fixed_vs_B", "fixed_vs_C"] and [r["outcome"] for r in rows[:2]] == [
        "inconclusive",
        "not judged",
    ]
    for key in ("dynamic_C_vs_B", "dynamic_C_smoother_than_B", "dynamic_C_reproducible_B"):
        assert "mechanism not engaged" in rows[keys.index(key)]["reason"]
    # equal samples: both batches logged 16 rollouts per step here, so they share every evaluation; compared at the last
    # (160)
    es = t["stability_equal_samples"]
    assert (
        set(es["samples"]) == {32, 64, 96, 128, 160} and len(es) == 3 * 5
    )  # batch 64 (2 seeds) and 512 (1 seed), 5 evaluations each
    [eq] = s["parts"]["equal_samples"]["rows"]
    assert eq["key"] == "equal_samples_64" and eq["n"] == 1 and eq["outcome"] == "not judged"  # batch 512 has one seed
    html = render(s, {"stability_batch_curves": "data:image/png;base64,"})
    text = " ".join(re.sub(r"<[^>]+>", " ", html).replace("&#39;", "'").split())
    assert "Roughness (spread of held-out accuracy around its trend) was 0.0 pts (n=1) at batch 512" in text
    assert (
        "Of 22 runs with a result, the monitor raised high_kl in 1 run(s) (1 alerts); reward_swing in 1 run(s) (2"
        " alerts). Against" in text
    )
    # its runs are too short to watch a 10-step horizon: no alert scored for precision, the drop still announced
    assert "low_entropy: precision – (none), recall 1/2" in text
    assert "clipped at weight 1.0 0.145 (n=1)" in text
    batches = st.design(cfg)["gradvar_batches"]
    assert "It reads held-out accuracy every 2 steps on" in text and f"The probe draws {batches} independent" in text
    assert (
        "stability_fixed_vs_dynamic was not drawn" in html
        and "inconclusive" in html
        and "95% CI [" in html
        and COLLAPSE_DEFINITION in html
    )


def test_the_design_the_prose_names_comes_from_the_config(tmp_path):
    c = copy.deepcopy(TINY)
    c["train"].update(steps=50, eval_every=25, eval_size=0)
    c["gradvar"] = {"tasks": ["add"], "num_samples": 20}
    c["experiments"] = {"remedies": {"fixed": {"batch_size": 64, "steps": 100, "eval_every": 10}, "seeds": [0]}}
    d = st.design(load_config(write_config(tmp_path / "c.yaml", c)))
    assert d["remedies"] == {"batch_size": 64, "steps": 100, "eval_every": 10, "eval_size": 0}
    assert d["batch"]["eval_every"] == 25 and d["gradvar_batches"] == 20
    assert d["decay"] is None and d["kl_lr_ratio"] is None and d["kl_grid"] == []  # no such experiments, no numbers
    c["experiments"] = {
        "fixed_vs_dynamic": {"variants": {"B": {"lr_schedule": "step", "lr_decay_rate": 0.8, "lr_decay_every": 7}},
                             "roles": {"B": "B"}, "seeds": [0]},
        "remedies": {"fixed": {"batch_size": 64}, "variants": {"grid": {"kl_coef": 0.02, "lr_scale": 1.0}},
                     "roles": {"kl_default": "grid"}, "seeds": [0]},
        # the grid's LR is read against its batch's own: the batch study's at that batch
        "batch": {"variants": {"b64": {"batch_size": 64, "lr_scale": 0.25}, "b512": {"batch_size": 512}}, "seeds": [0]},
    }  # fmt: skip
    d = st.design(load_config(write_config(tmp_path / "c.yaml", c)))
    assert d["decay"] == {"rate": 0.8, "every": 7}
    assert d["kl_lr_ratio"] == pytest.approx(4.0) and d["kl_grid"] == ["0.02"]


def test_empty_results_render(cfg, tmp_path):
    cfg = {**cfg, "results": str(tmp_path / "empty")}
    tables = synthetic.with_claims(cfg, st.tables(Context(cfg)))  # nothing was run
    assert one(tables["stability_batch"], batch_size=64)["n"] == 0
    assert synthetic.verdicts(tables, "stability")["outcome"].eq("not judged").all()
    t = save(cfg, tables)
    check_figures(st.figures(t))
    s = st.section(t)
    assert all(r["outcome"] == "not judged" for p in s["parts"].values() for r in p["rows"])
    assert "No data" in render(s, {}) or "missing" in render(s, {})


def test_the_fixed_large_batch_is_judged_against_each_schedule_by_direction():
    """The document's table gives final accuracies of a 1.5B model (A 58.6%, B 52.3%, C 54.1%): a scale this testbed
    does not share, so A against B and C is judged by its direction alone, paired by seed."""
    finals = {"A": [0.56, 0.59, 0.57], "B": [0.50, 0.52, 0.51], "C": [0.62, 0.63, 0.64]}
    fr = pd.DataFrame([{"role": m, "seed": s, "final_eval": f, "schedule_moved": 1.0}
                       for m, fs in finals.items() for s, f in enumerate(fs)])  # fmt: skip
    from mathrl.analysis import claims

    v = synthetic.verdicts({"claims": claims.judge_all({}, {"stability_fvd_runs": fr})}, "stability")
    assert v.loc["fixed_vs_B"]["diff"] == pytest.approx(0.0633, abs=1e-3) and v.loc["fixed_vs_B"].outcome == "agrees"
    assert v.loc["fixed_vs_C"].outcome == "disagrees" and v.loc["fixed_vs_B"].note.startswith(
        "A differs from B and C in batch size"
    )
    far = fr.assign(final_eval=fr["final_eval"] + 0.2 * (fr["role"] == "A"))  # no size: far above still agrees
    assert (
        synthetic.verdicts({"claims": claims.judge_all({}, {"stability_fvd_runs": far})}, "stability")
        .loc["fixed_vs_B"]
        .outcome
        == "agrees"
    )


def test_the_schedules_are_ranked_against_each_other():
    """The document's table ranks C above B in final accuracy, smoothness and reproducibility: C − B paired by seed,
    the spread as each seed's distance from its method's median (Brown-Forsythe), unpaired."""
    rows = pd.DataFrame({"role": ["B"] * 3 + ["C"] * 3, "seed": [0, 1, 2] * 2, "schedule_moved": 1.0,
                         "final_eval": [0.50, 0.52, 0.54, 0.518, 0.539, 0.557],  # C − B: about the table's 1.8 points
                         "roughness": [0.010, 0.012, 0.011, 0.020, 0.021, 0.022]})  # fmt: skip
    rows["final_eval_absdev"] = final_eval_absdev(rows)
    assert rows["final_eval_absdev"].tolist() == pytest.approx([0.02, 0.0, 0.02, 0.021, 0.0, 0.018])
    from mathrl.analysis import claims

    v = synthetic.verdicts({"claims": claims.judge_all({}, {"stability_fvd_runs": rows})}, "stability")
    assert v.loc["dynamic_C_vs_B"]["diff"] == pytest.approx(0.054 / 3) and v.loc["dynamic_C_vs_B"].outcome == "agrees"
    assert v.loc["dynamic_C_smoother_than_B"]["diff"] == pytest.approx(0.01)  # C rougher: the other side
    assert v.loc["dynamic_C_smoother_than_B"].outcome == "disagrees"
    assert v.loc["dynamic_C_reproducible_B"]["diff"] == pytest.approx(0.039 / 3 - 0.04 / 3)


def test_stated_intervals_stay_within_the_range_of_their_quantity():
    """Roughness is a size (at least 0), accuracy a share: their t intervals (n=3, t(2) = 4.303) are clipped."""
    from mathrl.analysis.report import ci

    r = {"roughness_mean": 0.011, "roughness_std": 0.01, "final_eval_mean": 0.99, "final_eval_std": 0.01, "n": 3}
    assert ci(r, "roughness", "pts") == "1.1 pts [0.0 pts, 3.6 pts] (n=3)"  # unclipped: -1.4 pts
    assert ci(r, "final_eval") == "99.0% [96.5%, 100.0%] (n=3)"  # unclipped: 101.5%


def test_remedy_claims_need_their_symptom_and_their_mechanism():
    """kl_remedy: judged only where accuracy fell without a KL penalty while the policy drifted from the reference
    (its KL above the checklist's 0.1), and where the penalty held the KL down."""
    from mathrl.analysis import claims

    cfg = {
        "experiments": {
            "remedies": {
                "roles": {
                    "kl_none": "kl_0",
                    "kl_high": "kl_0.1",
                    "kl_default": "kl_0.05",
                    "low_lr": "low_lr",
                    "raised_lr": "low_lr_x10",
                    "plan_b": "plan_b",
                    "small_batch": "flat_b64",
                    "raised_batch": "flat_b512",
                }  # fmt: skip
            }
        }
    }

    def measures(fall_without, kl_ratio, drift=0.2):
        out = []
        for seed in range(5):
            out.append({"experiment": "remedies", "variant": "kl_0", "seed": seed,
                        "lowest_change": -fall_without - 0.01 * seed, "kl_end": drift})  # fmt: skip
            out.append({"experiment": "remedies", "variant": "kl_0.1", "seed": seed,
                        "lowest_change": -0.01 - 0.002 * seed, "kl_end": drift * kl_ratio})  # fmt: skip
        return pd.DataFrame(out)

    def judged(**kw):
        return claims.judge_all(cfg, {"run_measures": measures(**kw)}).set_index("claim_id").loc["kl_remedy"]

    ok = judged(fall_without=0.10, kl_ratio=0.5)
    assert ok.outcome == "agrees" and ok.difference == pytest.approx(-0.01 - 0.004 + 0.10 + 0.02)
    no_fall = judged(fall_without=-0.05, kl_ratio=0.5)  # the lowest point lies above the start: nothing fell
    assert no_fall.outcome == "not judged" and no_fall.failure_established in (False, "False")
    no_drift = judged(fall_without=0.10, kl_ratio=0.5, drift=0.05)  # the KL stayed within the healthy 0.1
    assert no_drift.outcome == "not judged" and "policy drifts (KL 0) not established" in no_drift.reason
    no_hold = judged(fall_without=0.10, kl_ratio=1.0)
    assert no_hold.outcome == "not judged" and no_hold.engaged in (False, "False")


def test_the_monitor_claims_state_the_horizon_and_drop_the_study_scores():
    import pathlib

    import yaml

    decls = yaml.safe_load((pathlib.Path(__file__).parents[1] / "config" / "claims.yaml").read_text())["claims"]
    (monitor,) = [d for d in decls if str(d.get("id", "")).startswith("monitor_precision_")]
    assert f"within {HORIZON} steps" in monitor["measure_text"]
    assert f"{HORIZON}-step horizon" in monitor["checks"][0]["text"]
    assert f"at least {DROP * 100:.0f} points below" in monitor["note"]
