"""The lab-04 study (lab04-training-challenges.md) on a hand-made results tree."""

import copy
import math
import re

import matplotlib
import numpy as np
import pandas as pd
import pytest

from mathrl.analysis.kit import seed_band
from mathrl.analysis.measures.bandit_seeds import local_optima
from mathrl.analysis.report import environment
from mathrl.analysis.results import curves
from mathrl.analysis.studies import lab04
from mathrl.analysis.study_inputs import Context, Tables
from mathrl.pipeline.config import load_config
from tests.conftest import TINY, write_config
from tests.synthetic import verdicts, with_claims, write_bandit, write_run

matplotlib.use("Agg")

VARIANTS = {"normal": {"lr": 1.0e-4, "entropy_coef": 0.01}, "aggressive": {"lr": 5.0e-4, "entropy_coef": 0.001},
            "clip_higher": {"lr": 5.0e-4, "entropy_coef": 0.001, "ppo_epochs": 2, "clip_eps_high": 0.28},
            "dapo_aggressive": {"algorithm": "dapo", "lr": 5.0e-4, "entropy_coef": 0.001},
            "proxy_reward": {"reward": "proxy"},
            "random_init": {"init": "random"}, "near_perfect": {"group_size": 4},
            "clip_cov": {"lr": 5.0e-4, "entropy_coef": 0.001, "ppo_epochs": 2, "policy_loss": "clip_cov"}}  # fmt: skip
ROLES = {"normal": "normal", "aggressive": "aggressive", "entropy_failing": "aggressive", "clip_higher": "clip_higher",
         "remedy": "dapo_aggressive",
         "proxy": "proxy_reward", "random_policy": "random_init",
         # an optional role: the study judges Clip-Cov because it is named
         "perfect_policy": "near_perfect", "clip_cov": "clip_cov",
         "reference": "normal"}  # the calibration's role on the normal variant, as in config/config.yaml  # fmt: skip
BANDIT = {"seeds": [0, 1], "studies": {"gradient_vanishing": {"phase_steps": 2}}}

# entropy_collapse: (setting, seed) -> entropy per step, probabilities at the last step; normal seed 1 is missing.
ENTROPY = {("aggressive", 0): ([1.1, 0.8, 0.4, 0.1], (0.02, 0.95, 0.03)),  # global
           ("aggressive", 1): ([1.1, 0.9, 0.5, 0.2], (0.94, 0.03, 0.03)),  # local
           ("normal", 0): ([1.1, 1.0, 0.9, 0.8], (0.3, 0.4, 0.3))}  # none  # fmt: skip
# gradient_vanishing, 8 steps, phases d d h h d d h h: grad norm per phase per seed
VANISH = {
    0: {"diverse": [0.2, 0.4], "homogeneous": [0.0, 0.0]},
    1: {"diverse": [0.01, 0.01], "homogeneous": [0.005, 0.005]},
}
PHASES = ["diverse", "diverse", "homogeneous", "homogeneous"] * 2


def bandit_rows(study, setting, seed, n, **cols):
    return pd.DataFrame({"study": study, "setting": setting, "seed": seed, "step": range(n), "phase": "", **cols})


def write_bandits(cfg):
    frames = []
    for (setting, seed), (ent, last) in ENTROPY.items():
        p = {f"p{i}": [1 / 3] * 3 + [last[i]] for i in range(3)}
        frames.append(
            bandit_rows("entropy_collapse", setting, seed, 4, entropy=ent, **p, loss=0.1, grad_norm=0.1, reward_std=0.2)
        )
    write_bandit(cfg, "entropy_collapse", pd.concat(frames))
    frames = []
    for seed, g in VANISH.items():
        grad = [g[ph][i % 2] for i, ph in enumerate(PHASES)]
        frames.append(bandit_rows("gradient_vanishing", "default", seed, 8, entropy=1.0, p0=0.3, p1=0.4, p2=0.3,
                                  loss=0.0,
                                  grad_norm=grad, reward_std=[2 * x for x in grad]).assign(phase=PHASES))  # fmt: skip
    write_bandit(cfg, "gradient_vanishing", pd.concat(frames))
    frames = []
    for seed, share in (
        (0, 0.97),
        (1, 0.95),
    ):  # true reward: 0.5, then 1.0, then -0.5 (10 steps each); the proxy climbs
        frames.append(bandit_rows("reward_hacking", "default", seed, 30, entropy=1.0, p0=0.0, p1=0.0, p2=1 - share,
                                  p3=share, loss=0.0,
                                  grad_norm=0.1, reward_std=0.1, proxy_reward=[0.6] * 10 + [1.0] * 10 + [3.0] * 10,
                                  true_reward=[0.5] * 10 + [1.0] * 10 + [-0.5] * 10))  # fmt: skip
    write_bandit(cfg, "reward_hacking", pd.concat(frames))


# GPT runs of 12 steps, evaluating every 4: per variant the per-step accuracy, entropy, frac_zero_std and training
# reward.
GPT = {
    "normal": (lambda s: 0.5 + 0.01 * s, lambda s: 0.3 - 0.01 * s, 0.3, None),
    "aggressive": (lambda s: 0.5 - 0.01 * s, lambda s: 0.3 - 0.02 * s, 0.3, None),
    "clip_higher": (lambda s: 0.5 + 0.01 * s, lambda s: 0.3 - 0.01 * s, 0.3, None),
    "dapo_aggressive": (lambda s: 0.5 + 0.01 * s, lambda s: 0.3 - 0.005 * s, 0.3, None),
    "proxy_reward": (lambda s: 0.5 - 0.02 * s, lambda s: 0.3, 0.3, lambda s: 0.6 + 0.01 * s),
    "random_init": (lambda s: 0.0, lambda s: 0.5, 1.0, None),
    "near_perfect": (lambda s: 0.98, lambda s: 0.1, 0.8, None),
    "clip_cov": (lambda s: 0.5 + 0.01 * s, lambda s: 0.3 - 0.01 * s, 0.3, None),
}


def write_gpt(cfg):
    for variant, (acc, ent, fzs, reward) in GPT.items():
        for seed in (0, 1):
            if (variant, seed) == ("dapo_aggressive", 1):
                continue  # a missing run
            rows = []
            for s in range(1, 13):
                a = acc(s) + 0.01 * seed
                row = {"step": s, "accuracy": a, "reward_mean": reward(s) if reward else a, "entropy": ent(s),
                       "frac_zero_std": fzs,
                       "grad_norm": 0.5, "seconds": 1.0,
                       "clip_frac": 0.05 if variant in ("clip_higher", "dapo_aggressive") else 0.0,
                       "clip_frac_high": 0.03 if variant in ("clip_higher", "dapo_aggressive") else 0.0,
                       "clip_higher_freed": 0.01 if variant in ("clip_higher", "dapo_aggressive") else 0.0,
                       "kl": 0.01 * s,
                       "ppo_kl": 0.02 if variant == "aggressive" else 0.01,
                       "samples": 16 * s * (2 if variant == "dapo_aggressive" else 1),
                       **({"eval_accuracy": a} if s % 4 == 0 else {}),
                       **({"cov_frac": 0.002} if variant == "clip_cov" else {})}  # fmt: skip
                rows.append(row)
            write_run(cfg, f"lab04_gpt__{variant}__s{seed}", rows, initial_eval=0.5)


pytestmark = pytest.mark.usefixtures("schema_parsed_once")


def make_cfg(tmp_path):
    d = copy.deepcopy(TINY)
    d["results"] = str(tmp_path / "results")
    d["bandit"] = BANDIT
    d["experiments"] = {
        "lab04_gpt": {"fixed": {"steps": 12, "eval_every": 4}, "variants": VARIANTS, "roles": ROLES, "seeds": [0, 1]}
    }
    return load_config(write_config(tmp_path / "config.yaml", d))


def write_tables(cfg):
    ctx = Context(cfg)
    tabs = with_claims(cfg, lab04.tables(ctx))
    t = Tables(cfg)
    t.dir.mkdir(parents=True, exist_ok=True)
    for name, df in {**tabs, "curves": curves(ctx.runs)}.items():
        (t.dir / f"{name}.csv").write_text(
            df.to_csv(index=False) if len(df.columns) else ""
        )  # no columns: an empty file
    return tabs, t


@pytest.fixture(scope="module")
def results(tmp_path_factory, schema_parsed_once):
    cfg = make_cfg(tmp_path_factory.mktemp("lab04"))
    write_bandits(cfg)
    write_gpt(cfg)
    return write_tables(cfg)


def pooled(df, setting):
    return df[(df["setting"] == setting) & (df["seed"].astype(str) == "all")].iloc[0]


def test_entropy_table(results):
    e = results[0]["lab04_entropy"]
    s0 = e[(e.setting == "aggressive") & (e.seed.astype(str) == "0")].iloc[0]
    # 4-step runs: start = mean of steps 0-1, end = mean of steps 2-3 (the window is at most half the run)
    assert s0.initial_entropy == pytest.approx(0.95) and s0.final_policy_entropy == pytest.approx(0.25)
    assert s0.policy_entropy_reduction == pytest.approx(1 - 0.25 / 0.95) and s0.initial_best_prob == pytest.approx(
        1 / 3
    )
    assert s0.dominant_action == 1 and s0.dominant_prob == pytest.approx(0.95) and s0.converged_to == "global"
    s1 = e[(e.setting == "aggressive") & (e.seed.astype(str) == "1")].iloc[0]
    assert s1.dominant_action == 0 and s1.converged_to == "local"
    a = pooled(e, "aggressive")
    assert (
        a.n == 2
        and a.final_policy_entropy == pytest.approx(0.30)
        and a.final_policy_entropy_std == pytest.approx(np.std([0.25, 0.35], ddof=1))
    )
    assert a.global_share == 0.5 and a.converged_to == "global 1, local 1" and math.isnan(a.dominant_action)
    missing = e[(e.setting == "normal") & (e.seed.astype(str) == "1")].iloc[0]  # not in the CSV: shown, not invented
    assert missing.n == 0 and missing.converged_to == "missing" and math.isnan(missing.final_policy_entropy)
    n = pooled(e, "normal")
    assert (
        n.n == 1
        and n.final_policy_entropy == pytest.approx(0.85)
        and n.converged_to == "none 1"
        and math.isnan(n.final_policy_entropy_std)
    )


def test_vanishing_table(results):
    v = results[0]["lab04_vanishing"]
    s0, s1, p = (v[v.seed.astype(str) == k].iloc[0] for k in ("0", "1", "all"))
    assert (
        s0.grad_norm_diverse == pytest.approx(0.3)
        and s0.grad_norm_homogeneous == 0
        and s0.grad_norm_reduction == 1
        and s0.severity == "severe"
    )
    assert s1.grad_norm_reduction == pytest.approx(0.5) and s1.severity == "moderate"
    assert s0.reward_std_diverse == pytest.approx(0.6) and s0.corr_grad_reward_std == pytest.approx(1.0)
    assert p.n == 2 and p.grad_norm_homogeneous == pytest.approx(0.0025) and p.grad_norm_diverse == pytest.approx(0.155)
    assert (
        p.grad_norm_reduction == pytest.approx(0.75)
        and p.grad_norm_reduction_std == pytest.approx(np.std([1, 0.5], ddof=1))
        and p.severity == "moderate"
    )
    grads = [VANISH[s][ph][i % 2] for s in (0, 1) for i, ph in enumerate(PHASES)]
    assert p.corr_grad_reward_std == pytest.approx(1.0)  # reward std is twice the gradient norm at every step
    assert len(results[0]["lab04_vanishing_points"]) == len(grads) == 16


def test_hacking_table(results):
    h = results[0]["lab04_hacking"]
    s0 = h[h.seed.astype(str) == "0"].iloc[0]
    assert s0.hack_arm == 3 and s0.proxy_start == pytest.approx(0.6) and s0.proxy_end == pytest.approx(3.0)
    assert s0.true_start == pytest.approx(0.5) and s0.true_peak == pytest.approx(1.0) and s0.true_peak_step == 19
    assert s0.true_at_others_peak == pytest.approx(1.0)  # seed 1's rolling mean peaks at step 19 too
    assert s0.true_end == pytest.approx(-0.5) and s0.hack_share_end == pytest.approx(0.97) and s0.hacked
    p = h[h.seed.astype(str) == "all"].iloc[0]
    assert p.n == 2 and p.hack_share_end == pytest.approx(0.96) and p.hacked


def test_gpt_tables(results):
    runs, g = results[0]["lab04_gpt_runs"], results[0]["lab04_gpt"].set_index("variant")
    assert runs.set_index("run_id").loc["lab04_gpt__dapo_aggressive__s1", "status"] == "missing"
    assert math.isnan(runs.set_index("run_id").loc["lab04_gpt__dapo_aggressive__s1", "final_eval"])
    assert (
        g.loc["dapo_aggressive", "n"] == 1 and g.loc["dapo_aggressive", "expected"] == 2 and g.loc["normal", "n"] == 2
    )
    # token entropy at points: step 1 and the last step (12)
    assert g.loc["aggressive", "entropy_first_mean"] == pytest.approx(0.28) and g.loc[
        "aggressive", "entropy_last_mean"
    ] == pytest.approx(0.06)
    assert g.loc["aggressive", "entropy_reduction_mean"] == pytest.approx(1 - 0.06 / 0.28)
    # equal samples: 12 steps of 16 rollouts = 192; DAPO draws 32 a step, so step 6 (192), its last evaluation by then
    # step 4
    assert (
        g.loc["aggressive", "equal_samples_step_mean"] == 12
        and g.loc["dapo_aggressive", "equal_samples_step_mean"] == 6
    )
    assert g.loc["dapo_aggressive", "samples_at_equal_mean"] == 192 and g.loc[
        "dapo_aggressive", "entropy_equal_samples_mean"
    ] == pytest.approx(0.27)
    assert g.loc["dapo_aggressive", "eval_equal_samples_step_mean"] == 4 and g.loc[
        "dapo_aggressive", "eval_equal_samples_mean"
    ] == pytest.approx(0.54)
    assert g.loc["aggressive", "eval_equal_samples_mean"] == pytest.approx(0.385) and g.loc[
        "aggressive", "kl_max_mean"
    ] == pytest.approx(0.12)
    assert (
        g.loc["clip_higher", "clip_higher_freed_mean"] == pytest.approx(0.01)
        and g.loc["aggressive", "clip_higher_freed_mean"] == 0
    )
    assert g.loc["aggressive", "initial_eval_mean"] == 0.5 and g.loc["aggressive", "final_eval_mean"] == pytest.approx(
        0.385
    )
    assert g.loc["aggressive", "final_eval_std"] == pytest.approx(np.std([0.38, 0.39], ddof=1))
    assert g.loc["proxy_reward", "reward_start_mean"] == pytest.approx(0.63) and g.loc[
        "proxy_reward", "reward_end_mean"
    ] == pytest.approx(0.7)
    assert g.loc["proxy_reward", "accuracy_start_mean"] == pytest.approx(0.445) and g.loc[
        "proxy_reward", "accuracy_end_mean"
    ] == pytest.approx(0.305)
    assert g.loc["random_init", "frac_zero_std_mean"] == 1.0 and g.loc["near_perfect", "grad_norm_mean"] == 0.5


def test_criteria_and_template(results):
    v = verdicts(results[0], "lab04")
    assert {"part", "outcome", "diff", "ci_low", "ci_high", "n", "p_value", "kind"} <= set(v.columns)
    fe = v.loc["bandit_final_entropy"]  # final entropies 0.25 and 0.35, minus 0.2: 0.1, t(1) x 0.05
    assert (
        fe["diff"] == pytest.approx(0.1)
        and fe.ci_high == pytest.approx(0.1 + 12.7062 * 0.05, rel=1e-4)
        and fe.outcome == "inconclusive"
    )
    assert (
        v.loc["bandit_global"]["diff"] == 0 and v.loc["bandit_global"].outcome == "inconclusive"
    )  # one seed found a local optimum
    assert (
        v.loc["bandit_homogeneous"]["diff"] == pytest.approx(0.0025 - 1e-4)
        and v.loc["bandit_homogeneous"].outcome == "inconclusive"
    )  # seed 1 keeps 0.005
    assert v.loc["bandit_true_falls"]["diff"] == pytest.approx(-1.0)
    assert v.loc["gpt_proxy_rises"]["diff"] == pytest.approx(0.07) and v.loc["gpt_accuracy_falls"][
        "diff"
    ] == pytest.approx(-0.14)
    assert v.loc["gpt_dapo_entropy"].outcome == "not judged"  # DAPO seed 1 is missing: one value, no interval
    ch = v.loc["gpt_clip_higher_entropy"]  # the failing setting's entropy falls by 79% in both seeds: the failure shown
    assert "entropy collapse (entropy_failing) established" in ch.engaged
    assert ch.failure_established is True or ch.failure_established == "True"
    assert (
        "clip-higher engaged: share of tokens clip-higher freed" in ch.engaged and "0.01 (needs >= 0.001)" in ch.engaged
    )
    assert ch.outcome_unadjusted == "agrees" and ch["diff"] == pytest.approx(0.12)  # 0.18 against 0.06 at step 12
    assert "dynamic sampling engaged: rollouts drawn per rollout kept" in v.loc["gpt_dapo_entropy"].engaged
    cc = v.loc["gpt_clip_cov_entropy"]  # judged on the same failure, where its rule acted
    assert "covariance rule (clip_cov) engaged: share of answer tokens the rule acted on 0.002" in cc.engaged
    assert "gpt_kl_cov_entropy" not in v.index  # no variant has the role: no row
    kl = v.loc["gpt_kl_clip_kl"]  # no exploding-KL setting in this tree: not judged, saying which role is missing
    assert kl.outcome == "not judged" and "declares no role 'kl_clip'" in kl.reason
    assert v.loc["gpt_random_no_signal"].outcome == "agrees" and v.loc["gpt_random_no_signal"]["diff"] == pytest.approx(
        0.05
    )
    t = results[1]
    assert macro(t, "global_found", ["global", "global"]) == "yes (2 of 2 seeds)"
    assert macro(t, "global_found", ["global", "local", "missing"]) == "partly (1 of 2 seeds)"
    assert macro(t, "global_found", ["none"]) == "no (0 of 1 seeds)"
    assert macro(t, "global_found", []) == "no data (0 of 0 seeds)"
    html = text(render(t))
    assert "Global optimum found partly (1 of 2 seeds)" in html and "Severity moderate" in html
    assert "Final entropy 0.300 ± 0.071 (n=2)" in html
    dominant = "action 0 (p = 0.940) in 1 of 2 seeds; action 1 (p = 0.950) in 1 of 2 seeds"
    assert f"Final dominant action (probability) {dominant}" in html
    many = pd.DataFrame(
        {
            "dominant_action": [1.0] * 99 + [2.0, math.nan],
            "dominant_prob": [0.993, 0.997] + [0.995] * 97 + [0.91, math.nan],
        }
    )
    want = "action 1 (p = 0.993 to 0.997) in 99 of 100 seeds; action 2 (p = 0.910) in 1 of 100 seeds"
    assert macro(t, "dominant_actions", many) == want
    findings = html.split("Key findings 1 ")[1]
    assert "0.3 ± 0.0707" in findings and "the normal setting kept more entropy" in findings
    assert "75.0% lower (moderate)" in findings and findings.split("Verdicts")[0].count(": exploited") == 2


def text(html: str) -> str:
    """A rendered section's words, tags stripped and whitespace collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).replace("&#39;", "'").split())


def macro(t, name: str, *args) -> str:
    """One macro of the lab04 template, called with `args` (the template imported with the section's context)."""
    source = '{% import "sections/lab04.html.j2" as m with context %}{{ m[name](*args) }}'
    return environment().from_string(source).render(ctx=lab04.section(t), figures={}, name=name, args=args).strip()


def render(t):
    env = environment()
    return env.get_template("sections/lab04.html.j2").render(
        ctx=lab04.section(t), figures={"lab04_six_panel": "data:x"}
    )


def test_figures_and_section(results):
    t = results[1]
    figs = lab04.figures(t)
    assert set(figs) == {"lab04_six_panel", "lab04_hacking", "lab04_gpt"}
    for fig in figs.values():
        assert fig._suptitle.get_text()
        for ax in fig.axes:
            assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
            assert len(ax.get_lines()) < 2 or ax.get_legend() is not None
    band = seed_band(t["curves"], "lab04_gpt", "aggressive", "eval_accuracy")
    assert (
        band.step.tolist() == [0, 4, 8, 12] and band["mean"].iloc[-1] == pytest.approx(0.385) and band["n"].iloc[0] == 2
    )
    s = lab04.section(t)
    assert (
        s["normal_keeps_more"] is True and s["normal"]["final_policy_entropy"] > s["aggressive"]["final_policy_entropy"]
    )
    assert s["bandit_hacked"] and s["gpt_hacked"]
    assert "inconclusive" in s["parts"]["entropy"]["summary"] and len(s["parts"]["entropy"]["rows"]) == 10
    assert s["parts"]["entropy"]["summary"].endswith("and 2 setup checks, not counted")
    html = render(t)
    assert "n=2 of 2" in text(html).split("The same on the GPT")[1] and "n per arm: 2" in text(html)
    assert "inconclusive" in html and "95% CI [" in html and "partly (1 of 2 seeds)" in html


def band_extent(ax):
    """The lowest and highest y of every band (fill_between) of an axes."""
    ys = [y for c in ax.collections for p in c.get_paths() for y in p.vertices[:, 1]]
    return (min(ys), max(ys)) if ys else (0.0, 0.0)


def test_the_normal_setting_is_found_beside_a_second_role(results):
    """`normal` also holds the calibration's `reference` role: the table names it by the study's
    role, and the measured sentence prints its values, not dashes."""
    gpt = results[0]["lab04_gpt"].set_index("variant")
    assert gpt.loc["normal", "role"] == "normal"
    measured = text(render(results[1])).split("The same on the GPT")[1]
    assert "– ±" not in measured and "n=– of –" not in measured
    assert "under the normal one (n=2 of 2;" in measured


def test_figures_are_readable_and_their_bands_bounded(results):
    t = results[1]
    six, gpt = lab04.six_panel(t), lab04.gpt_figure(t)
    probs = [ax for ax in six.axes if ax.get_title().startswith("Action probabilities")]
    assert len(probs) == 2  # one small panel per entropy-collapse setting (aggressive, normal)
    for ax in probs:
        legend = [text.get_text() for text in ax.get_legend().get_texts()]
        assert len(ax.get_lines()) == 3 and legend == ["action 0", "action 1", "action 2"]
        lo, hi = band_extent(ax)  # aggressive p0: 0.02 and 0.94 over two seeds, t(1) = 12.7 unclipped
        assert 0 <= lo and hi <= 1
    entropy = next(ax for ax in six.axes if ax.get_title().startswith("Policy entropy"))
    assert band_extent(entropy)[0] >= 0
    compared, starts = gpt.axes[0], gpt.axes[4]
    assert gpt.axes[2].get_title().startswith("KL to the warm-up") and len(gpt.axes) == 5
    labels = {line.get_label() for line in compared.get_lines()}
    assert labels == {"normal", "aggressive", "clip_higher", "dapo_aggressive", "clip_cov"}
    assert {line.get_label() for line in starts.get_lines()} == {"random_init", "near_perfect"}
    assert compared.get_ylim()[1] < 0.5  # the random start's entropy (0.5) is drawn apart
    for fig in (six, gpt, lab04.hacking_figure(t)):
        assert "95% t interval" in fig._suptitle.get_text()
        matplotlib.pyplot.close(fig)


def test_missing_everything(tmp_path):
    tabs, t = write_tables(make_cfg(tmp_path))  # no bandit CSVs and no runs
    assert (tabs["lab04_entropy"]["converged_to"] == "missing").all() and tabs["lab04_entropy"][
        "final_policy_entropy"
    ].isna().all()
    assert tabs["lab04_gpt_runs"]["status"].eq("missing").all() and (tabs["lab04_gpt"]["n"] == 0).all()
    assert verdicts(tabs, "lab04")["outcome"].eq("not judged").all()
    assert len(lab04.figures(t)) == 3
    s = lab04.section(t)
    assert all(r["outcome"] == "not judged" for p in s["parts"].values() for r in p["rows"])
    assert s["normal_keeps_more"] is None and s["bandit_hacked"] is None and s["gpt_hacked"] is None
    assert "Not judged" in render(t)


def test_a_short_runs_start_and_end_windows_do_not_overlap(tmp_path):
    """An 8-step run: sampled accuracy's start = steps 1-4, end = steps 5-8 (not 1-5 and 4-8); entropy at step 1 and
    step 8."""
    cfg = make_cfg(tmp_path)
    rows = [{"step": s, "accuracy": float(s), "reward_mean": 0.5, "entropy": float(s), "frac_zero_std": 0.3,
             "grad_norm": 0.5, "seconds": 1.0,
             "clip_frac": 0.0, "samples": 16 * s, **({"eval_accuracy": 0.5} if s % 4 == 0 else {})}
            for s in range(1, 9)]  # fmt: skip
    write_run(cfg, "lab04_gpt__normal__s0", rows, initial_eval=0.5)
    run = Context(cfg).run_table("lab04_gpt_runs").set_index("run_id").loc["lab04_gpt__normal__s0"]
    assert run["accuracy_start"] == pytest.approx(2.5) and run["accuracy_end"] == pytest.approx(6.5)
    assert run["entropy_first"] == 1 and run["entropy_last"] == 8


def lab04_claims(tables: dict, roles: dict) -> pd.DataFrame:
    """The lab-04 claims judged over hand-made tables, for an experiment with these roles."""
    from mathrl.analysis import claims

    cfg = {"experiments": {"lab04_gpt": {"seeds": [0, 1, 2], "roles": roles}}}
    c = claims.judge_all(cfg, tables)
    return verdicts({"claims": c}, "lab04")


def test_covariance_remedies_are_judged_only_where_their_rule_acted():
    """Clip-Cov against the failing setting, by hand: three seeds, the problem shown (entropy falls by 60-62%, the
    interval above half); judged where cov_frac > 0, not judged where it is 0."""
    rows = [{"variant": "aggressive", "seed": s, "entropy_reduction": 0.6 + 0.01 * s, "accuracy_gain": 0.05,
             "entropy_last": 0.40 + 0.01 * s,
             "final_eval": 0.50, "cov_frac": math.nan} for s in range(3)]  # fmt: skip
    rows += [
        {
            "variant": "cc",
            "seed": s,
            "entropy_last": 0.45 + 0.01 * s + 0.001 * (s == 2),
            "final_eval": 0.50,
            "cov_frac": 0.002,
        }
        for s in range(3)
    ]
    runs = pd.DataFrame(rows)
    role = {"aggressive": "aggressive", "entropy_failing": "aggressive", "clip_cov": "cc"}
    v = lab04_claims({"lab04_gpt_runs": runs}, role)
    cc = v.loc["gpt_clip_cov_entropy"]
    assert (
        cc.outcome == "agrees" and cc["diff"] == pytest.approx(0.05 + 0.001 / 3) and cc.n == 3 and cc.kind == "beyond"
    )
    assert "gpt_kl_cov_entropy" not in v.index
    idle = lab04_claims(
        {"lab04_gpt_runs": runs.assign(cov_frac=runs["cov_frac"].where(runs["variant"] != "cc", 0.0))}, role
    )
    cc = idle.loc["gpt_clip_cov_entropy"]
    assert cc.outcome == "not judged" and "covariance rule (clip_cov) did not engage" in cc.reason
    mild = lab04_claims({"lab04_gpt_runs": runs.assign(entropy_reduction=runs["entropy_reduction"] - 0.3)}, role)
    cc = mild.loc["gpt_clip_cov_entropy"]  # entropy falls by 30-32%: no collapse to remedy
    assert cc.outcome == "not judged" and "entropy collapse (entropy_failing) not established" in cc.reason


def test_local_optima_rates_and_verdicts_by_hand():
    """Per setting: counts of global/local/neither and the Wilson interval of the local rate;
    the biased-start verdicts are judged only where the start was biased."""
    per = [("aggressive_biased", s, "local" if s < 3 else "global", 0.005) for s in range(10)]
    per += [("normal_biased", s, "none", 0.005) for s in range(10)]
    ent = pd.DataFrame(per, columns=["setting", "seed", "converged_to", "initial_best_prob"])
    t = local_optima(ent).set_index("setting")
    a = t.loc["aggressive_biased"]
    assert (a["n"], a["global"], a["local"], a["none"], a["local_rate"]) == (10, 7, 3, 0, 0.3)
    assert (a["local_rate_lo"], a["local_rate_hi"]) == pytest.approx((0.1078, 0.6032), abs=1e-4)  # Wilson, 3 of 10
    ent = ent.assign(local_share=(ent["converged_to"] == "local").astype(float), moving=0.0)
    v = lab04_claims({"lab04_entropy": ent}, {})
    assert v.loc["bandit_local_reached"].outcome == "agrees"  # the Wilson interval of 3/10 excludes 0
    assert v.loc["bandit_local_aggressive"]["diff"] == pytest.approx(0.3)
    v = lab04_claims({"lab04_entropy": ent.assign(initial_best_prob=1 / 3)}, {})
    assert (
        v.loc["bandit_local_aggressive"].outcome == "not judged"
        and "initial probability of the global arm 0.333" in v.loc["bandit_local_aggressive"].reason
    )
    v = lab04_claims({"lab04_entropy": ent.assign(moving=(ent["setting"] == "normal_biased").astype(float))}, {})
    assert (
        v.loc["bandit_local_aggressive"].outcome == "not judged"
    )  # the normal seeds still move: the rate would measure the horizon
    assert (
        "settled (normal_biased) not met: share of seeds still moving at the end 1"
        in v.loc["bandit_local_aggressive"].reason
    )


def test_differences_table_and_sentence(results):
    d = results[0]["lab04_gpt_differences"]
    ch = d[d.role == "clip_higher"].set_index("setting")
    assert set(ch.index) == {"clip_eps_high", "ppo_epochs"} and ch.loc["clip_eps_high", "value"] == "0.28"
    assert ch.loc["clip_eps_high", "failing"] == "unset" and set(ch["against"]) == {"aggressive"}
    assert "algorithm" in set(d[d.role == "remedy"]["setting"])
    assert "clip_higher (clip_higher) changes clip_eps_high (0.28, not unset)" in text(render(results[1]))


def test_bandit_settings_keep_the_config_order_in_the_figures():
    """The six-panel figure draws settings in the order the study's table gives them (the config's), not sorted."""
    curves = pd.DataFrame({"study": "entropy_collapse", "setting": ["normal", "aggressive"] * 2, "step": [0, 0, 1, 1]})
    c = lab04._bandit({"lab04_bandit_curves": curves}, "entropy_collapse")
    assert list(dict.fromkeys(c["setting"])) == ["normal", "aggressive"] and list(c["step"]) == [0, 0, 1, 1]


def test_the_gpt_accuracy_panel_marks_its_few_evaluations_and_draws_no_line_between_them():
    """Held-out accuracy measured at steps 0, 6 and 12 is drawn there alone: a marker and its interval per variant
    and step (the variants a little apart), no line through the steps between, where a fall would hide."""
    gpt = pd.DataFrame({"variant": ["normal", "aggressive"], "role": ["normal", "aggressive"]})
    rows = []
    for variant, fall in (("normal", 0.0), ("aggressive", 0.3)):
        for seed in (0, 1, 2):
            run = f"lab04_gpt__{variant}__s{seed}"
            for step in range(1, 13):
                rows.append(
                    {
                        "experiment": "lab04_gpt",
                        "variant": variant,
                        "run_id": run,
                        "step": step,
                        "initial_eval": 0.5,
                        "entropy": 0.3,
                        "kl": 0.01 * step,
                        "frac_zero_std": 0.2,
                        "eval_accuracy": 0.5 - fall * step / 12 + 0.01 * seed if step % 6 == 0 else math.nan,
                    }
                )
    fig = lab04.gpt_figure({"lab04_gpt": gpt, "curves": pd.DataFrame(rows)})
    accuracy = fig.axes[1]
    assert accuracy.get_title().startswith("Held-out accuracy")
    for line in accuracy.get_lines():
        assert line.get_linestyle() == "None" and line.get_marker() == "o", line.get_label()
        shift = line.get_xdata() - np.array([0, 6, 12])  # each point at its step, moved aside by one shift
        assert len(set(np.round(shift, 9))) == 1 and 0 < abs(shift[0]) < 3
    xs = [tuple(line.get_xdata()) for line in accuracy.get_lines()]
    assert xs[0] != xs[1]  # moved apart, each by less than a step
    entropy = fig.axes[0]  # twelve steps logged: a line with its band
    assert all(line.get_linestyle() == "-" for line in entropy.get_lines())
    matplotlib.pyplot.close(fig)


def test_each_bandit_panel_has_one_time_axis():
    """The document's 200-step settings and the 1,500-step biased ones are drawn on panels of their own."""
    rows = [
        {
            "study": "entropy_collapse",
            "setting": setting,
            "step": step,
            "phase": "",
            "n": 3,
            **{f"{m}_{s}": 0.1 for m in ("entropy", "loss", "p0", "p1", "p2") for s in ("mean", "std")},
        }
        for setting, steps in (("aggressive", 20), ("normal", 20), ("aggressive_biased", 150))
        for step in range(steps + 1)
    ]
    t = {"lab04_bandit_curves": pd.DataFrame(rows), "lab04_vanishing_points": pd.DataFrame()}
    fig = lab04.six_panel(t)
    panels = [ax for ax in fig.axes if ax.get_title().startswith(("Policy entropy", "Training loss"))]
    assert len(panels) == 4 and sum("20-step" in ax.get_title() for ax in panels) == 2
    for ax in panels:
        ends = {max(line.get_xdata()) for line in ax.get_lines()}
        assert len(ends) == 1 and f"the {int(ends.pop()):,}-step settings" in ax.get_title()
    matplotlib.pyplot.close(fig)
