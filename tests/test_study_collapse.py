"""The collapse study (training-collapse-analysis.md) on a hand-made results tree."""

import copy
import math
from pathlib import Path

import matplotlib
import pytest

from mathrl.analysis.measures import collapse_remedies
from mathrl.analysis.report import environment
from mathrl.analysis.studies import collapse
from mathrl.analysis.study_inputs import Context, Tables
from tests.conftest import TINY
from tests.synthetic import verdicts, with_claims, write_run, write_tables

matplotlib.use("Agg")

VARIANTS = {
    "exact": {"grad_clip": None}, "lr_tenth": {"grad_clip": None, "lr": 3e-5},
    "offset": {"algorithm": "reinforce_no_baseline", "reward_offset": 10.0},
    "offset_norm": {"algorithm": "reinforce_no_baseline", "reward_offset": 10.0, "reward_norm": True},
    "offset_adv": {"algorithm": "reinforce_no_baseline", "reward_offset": 10.0, "adv_norm": True, "adv_clip": 5.0},
    "binary": {"algorithm": "reinforce_no_baseline"},
    "signed": {"algorithm": "reinforce_no_baseline", "reward": "signed"},
    "few": {"train_subset": 4}, "all": {"train_subset": 0},
    "random_exact": {"init": "random"}, "shaped": {"init": "random", "reward": "shaped"},
    "shaped_penalty": {"init": "random", "reward": "shaped_penalty"},
    "curriculum": {"init": "random", "reward": "shaped", "curriculum_start": 1, "curriculum_every": 4},
    "huge_lr": {"lr": 1.0, "grad_clip": None},
}  # fmt: skip
ROLES = {"baseline": "exact", "lr_tenth": "lr_tenth", "scale_failing": "offset", "reward_norm": "offset_norm",
         "adv_norm_clip": "offset_adv", "binary": "binary", "signed": "signed", "few_problems": "few",
         "all_problems": "all", "random_baseline": "random_exact", "shaped": "shaped", "penalty": "shaped_penalty",
         "curriculum": "curriculum", "nonfinite": "huge_lr",
         "reference": "lr_tenth"}  # the calibration's role on a remedy's variant, as in config/config.yaml  # fmt: skip
FLAT = [0.40, 0.42, 0.44, 0.46, 0.48]
FLAT2 = [0.40, 0.42, 0.44, 0.46, 0.485]
STUCK = [0.40, 0.40, 0.39, 0.40, 0.40]
# Held-out accuracy at steps 0 (before RL), 2, 4, 6, 8, per (variant, seed); absent: not written.
EVALS = {
    # the failure: -16 and -15 points
    ("exact", 0): [0.40, 0.30, 0.34, 0.22, 0.24], ("exact", 1): [0.40, 0.36, 0.30, 0.23, 0.25],
    # gains of 8 and 8.5 points: no fall
    ("lr_tenth", 0): FLAT, ("lr_tenth", 1): FLAT2,
    # large rewards do not learn; normalised they do
    ("offset", 0): STUCK, ("offset", 1): STUCK, ("offset_norm", 0): FLAT, ("offset_norm", 1): FLAT2,
    ("offset_adv", 0): FLAT, ("offset_adv", 1): FLAT2,
    ("binary", 0): FLAT, ("binary", 1): FLAT2, ("signed", 0): STUCK, ("signed", 1): [0.40, 0.41, 0.41, 0.42, 0.42],
    ("few", 0): STUCK, ("few", 1): STUCK, ("all", 0): FLAT, ("all", 1): FLAT2,
    ("shaped", 0): [0.40, 0.46, 0.52, 0.56, 0.60],  # seed 1 missing
    ("shaped_penalty", 0): [0.40, 0.44, 0.48, 0.52, 0.56], ("shaped_penalty", 1): [0.40, 0.44, 0.48, 0.52, 0.56],
    # seed 0: one low reading (0.10 < 0.20), then recovers
    ("random_exact", 0): [0.40, 0.10, 0.30, 0.40, 0.45], ("random_exact", 1): FLAT,
    ("curriculum", 0): [0.40] * 5, ("curriculum", 1): [0.40] * 5,
}  # fmt: skip
FORMAT = {"exact": 0.8, "random_exact": 0.8, "shaped": 0.9, "shaped_penalty": 0.95}
ADV_MEAN = {"offset": 10.4, "offset_norm": 0.0, "offset_adv": 0.01, "binary": 0.4, "signed": -0.2}


def rows(evals, variant):
    out = []
    for step in range(1, 9):
        row = {"step": step, "samples": 16 * step, "seconds": 1.0, "accuracy": 0.5, "reward_mean": 0.5, "skipped": 0,
               "format_rate": FORMAT.get(variant, 0.85), "lr": 3e-4, "entropy_coef": 0.0, "ndigit": 2,
               "entropy": 0.3, "frac_zero_std": 0.75 if step == 1 else 0.5, "grad_norm": 2.0, "kl": 0.01,
               "kl_coef": 0.05, "adv_mean": ADV_MEAN.get(variant, 0.0)}  # fmt: skip
        if variant == "lr_tenth":
            row["lr"] = 3e-5
        if variant == "curriculum":
            row["ndigit"] = 1 if step <= 4 else 2
        if variant == "random_exact":
            row["frac_zero_std"] = 1.0  # every reward of a random policy is 0: no signal anywhere
        if step % 2 == 0:
            row["eval_accuracy"] = evals[step // 2]
        out.append(row)
    return out


@pytest.fixture(scope="module")
def cfg(study_config):
    mul = {"op": "mul", "ndigit": 2, "n_train": 0, "n_test": 20, "n_val": 20, "seed": 1}
    collapse = {
        "fixed": {"task": "mul", "steps": 8, "eval_every": 2},
        "variants": VARIANTS,
        "roles": ROLES,
        "seeds": [0, 1],
    }
    return study_config("collapse", {"collapse": collapse}, tasks={**TINY["tasks"], "mul": mul})


@pytest.fixture(scope="module")
def results(cfg):
    return build(cfg)


def build(cfg):
    for (variant, seed), evals in EVALS.items():
        write_run(cfg, f"collapse__{variant}__s{seed}", rows(evals, variant), evals[0])
    huge = rows(FLAT, "huge_lr")
    for r in huge[2:]:
        r["skipped"] = 1  # the guard skipped every update from step 3 on
    write_run(cfg, "collapse__huge_lr__s0", huge, 0.40)
    stopped = rows(FLAT, "huge_lr")[:3]
    stopped[2].update(skipped=1, eval_accuracy=0.38)
    write_run(cfg, "collapse__huge_lr__s1", stopped, 0.40, status="stopped_nonfinite")
    (Path(cfg["results"]) / "runs" / "collapse__offset_adv__s1" / "summary.json").write_text(
        "{truncated"
    )  # a failed run
    tabs = with_claims(cfg, collapse.tables(Context(cfg)))
    return tabs, write_tables(cfg, tabs)


def by_variant(df):
    return df.set_index("variant")


def test_variants_table(results):
    v = by_variant(results[0]["collapse_variants"])
    e = v.loc["exact"]
    assert e.n == 2 and e.n_runs == 2 and e.settings == "grad_clip=None" and e.role == "baseline"
    assert e.final_eval_mean == pytest.approx(0.245) and e.final_eval_std == pytest.approx(0.01 / math.sqrt(2))
    # drawdown: seed 0 falls 0.40 -> 0.22 (0.18, late 0.34 -> 0.22), seed 1 0.40 -> 0.23 (0.17, late 0.30 -> 0.23)
    assert (
        e.mid_gain_mean == pytest.approx(-0.08)
        and e.drawdown_mean == pytest.approx(0.175)
        and e.late_drawdown_mean == pytest.approx(0.095)
    )
    assert e.gain_mean == pytest.approx(-0.155) and e.gain_hi == pytest.approx(-0.155 + 12.7062 * 0.005, abs=1e-5)
    # the failing settings are compared with nothing; each remedy with the failing setting of its own cause
    assert e.final_format_rate_mean == pytest.approx(0.8) and e.collapses == 0 and math.isnan(e.diff_vs_failing)
    t = v.loc["lr_tenth"]  # paired by seed: 0.24 and 0.235 higher; t(1) = 12.706, se = 0.0025
    assert t.against == "exact" and t.diff_vs_failing == pytest.approx(0.2375)
    assert t.diff_lo == pytest.approx(0.2375 - 12.7062 * 0.0025, abs=1e-5)
    assert v.loc["offset_norm"].against == "offset" and v.loc["offset_norm"].diff_vs_failing == pytest.approx(0.0825)
    assert v.loc["few"].against == "all" and v.loc["signed"].against == "binary"
    s = v.loc["shaped"]  # seed 1 was never written: n 1 of 2, no interval, nothing invented
    assert s.n == 1 and s.n_runs == 2 and math.isnan(s.final_eval_std) and s.final_eval_mean == pytest.approx(0.60)
    assert s.settings == "init=random, reward=shaped" and s.against == ""
    assert v.loc["random_exact"].collapses == 0  # a single reading below half the start is not a collapse
    assert v.loc["huge_lr"].collapses == 2 and v.loc["huge_lr"].role == "nonfinite"
    assert v.loc["offset_adv"].n == 1 and v.loc["offset_adv"].n_runs == 2  # the failed run is not counted
    assert v.loc["huge_lr"].skipped_mean == pytest.approx(3.5)
    # what each remedy changes, as logged: a tenth of the LR; the advantages brought to about 0
    assert v.loc["lr_tenth"].mean_lr_mean == pytest.approx(3e-5) and math.isnan(v.loc["exact"].clip_binding_mean)
    assert v.loc["offset"].adv_mean_mean == pytest.approx(10.4) and v.loc["offset_norm"].adv_mean_abs_mean == 0.0
    assert v.loc["random_exact"].format_gain_mean == pytest.approx(0.0)
    assert v.loc["exact"].lowest_change_mean == pytest.approx(-0.175)


def test_reward_design_table(results):
    d = results[0]["collapse_reward_design"]
    assert set(d.role) == set(collapse_remedies.REWARD_DESIGNS) and sorted(d.point.unique()) == [0, 1, 2, 3, 4]
    ex = d[d.variant == "random_exact"].set_index("point")
    assert list(ex.step) == [0, 2, 4, 6, 8]
    assert ex.loc[2].eval_accuracy_mean == pytest.approx(0.37) and ex.loc[2].n == 2  # 0.30 and 0.44 at step 4
    assert ex.loc[0].frac_zero_std_mean == pytest.approx(1.0) and ex.loc[1].frac_zero_std_mean == pytest.approx(
        1.0
    )  # a random policy: no signal
    assert ex.loc[4].format_rate_mean == pytest.approx(0.8)
    assert d[d.variant == "shaped"].n.eq(1).all()


def band_extent(ax):
    """The lowest and highest y of every band (fill_between) of an axes."""
    ys = [y for c in ax.collections for p in c.get_paths() for y in p.vertices[:, 1]]
    return (min(ys), max(ys)) if ys else (0.0, 0.0)


def test_nonfinite_table(results):
    nf = results[0]["collapse_nonfinite"].set_index("seed")
    assert nf.loc[0].skipped == 6 and nf.loc[0].first_skipped_step == 3 and nf.loc[0].weights_finite
    assert (
        nf.loc[1].status == "stopped_nonfinite"
        and nf.loc[1].skipped == 1
        and nf.loc[1].final_eval == pytest.approx(0.38)
    )


def test_verdicts(results):
    c = verdicts(results[0], "collapse")
    assert c.loc["shaping"].outcome == "not judged" and c.loc["shaping"].n == 1  # shaped has one seed: no interval
    # too high an LR: the failing setting's lowest held-out accuracy fell 18 and 17 points below its start
    lr = c.loc["lr_tenth"]
    assert "accuracy falls (LR too high) established" in lr.engaged and "LR lowered (lr_tenth) engaged" in lr.engaged
    assert lr.outcome_unadjusted == "agrees" and lr["diff"] == pytest.approx(0.195)  # its own lowest is 2 points up
    # large rewards: no gain (the upper end of its interval below 3 points), a mean advantage of 10.4
    norm = c.loc["reward_normalisation"]
    assert "no learning under large rewards established" in norm.engaged
    assert (
        "rewards large against their spread established: mean advantage over answer tokens (the rewards' common part)"
        " 10.4" in norm.engaged
    )
    assert "advantages centred (normalised) engaged" in norm.engaged and norm.outcome_unadjusted == "agrees"
    adv = c.loc["advantage_normalisation"]  # its seed 1 failed: one pair, no interval
    assert adv.outcome == "not judged" and adv.n == 1
    signed = c.loc["signed_reward"]  # +1/-1 learns less than 0/1; its mean advantage is below 0
    assert "advantages mostly negative (+1/−1) engaged" in signed.engaged and signed["diff"] < 0
    assert c.loc["training_set_small"]["diff"] == pytest.approx(-0.0825)
    cur = c.loc["curriculum"]  # against shaped (the same random start), which has one seed
    assert (
        cur.outcome == "not judged"
        and cur.n == 1
        and "first stage unsolved (curriculum) met: sampled accuracy on the 1-digit stage" in cur.engaged
    )
    pen = c.loc["penalty"]  # malformed answers exist (format rate 0.95 at step 1), but shaped has one seed
    assert pen.outcome == "not judged" and "malformed answers (penalty) established" in pen.engaged
    guard = c.loc["guard"]  # 2 of 2, Wilson interval [0.342, 1]
    assert guard.outcome == "agrees" and guard.ci_low == pytest.approx(0.3424, abs=1e-3) and guard.n == 2


def test_settings_come_from_the_runs_summary(cfg, results):
    """A run's settings are the ones it recorded in summary.json (a key the config's expansion lacks is read
    from there); a run that recorded a value other than the config's is stale: no result, and named."""
    import json

    from mathrl.analysis.results import load_runs

    path = Path(cfg["results"]) / "runs" / "collapse__exact__s0" / "summary.json"
    summary = json.loads(path.read_text())
    try:
        path.write_text(json.dumps({**summary, "config": {**summary["config"], "recorded_only": 7}}))
        run = load_runs(cfg)["collapse__exact__s0"]
        assert run.ok and run.settings["recorded_only"] == 7 and not hasattr(run.spec.settings, "recorded_only")
        path.write_text(json.dumps({**summary, "config": {**summary["config"], "lr": 0.123}}))
        run = load_runs(cfg)["collapse__exact__s0"]
        assert run.status == "stale" and not run.ok and "lr 0.123 -> " in run.problem
    finally:
        path.write_text(json.dumps(summary))


def test_renamed_variants(cfg, tmp_path):
    """Renaming the failing setting in the YAML (and its role) keeps every table filled; a role
    naming no variant, or a missing role, is an error naming the experiment."""
    from mathrl.pipeline.errors import ConfigError

    d = copy.deepcopy(cfg)
    exp = d["experiments"]["collapse"]
    exp["variants"]["too_fast"] = exp["variants"].pop("exact")
    exp["roles"] = {**ROLES, "baseline": "too_fast"}
    d["results"] = str(tmp_path / "r")
    for seed, evals in ((0, EVALS[("exact", 0)]), (1, EVALS[("exact", 1)])):
        write_run(d, f"collapse__too_fast__s{seed}", rows(evals, "exact"), 0.4)
        write_run(d, f"collapse__lr_tenth__s{seed}", rows(FLAT, "lr_tenth"), 0.4)
    tabs = with_claims(d, collapse.tables(Context(d)))
    v = verdicts(tabs, "collapse")
    # the failure check found the renamed failing setting through its role
    assert "accuracy falls (LR too high) established" in v.loc["lr_tenth"].engaged
    assert by_variant(tabs["collapse_variants"]).loc["too_fast"].role == "baseline"
    assert by_variant(tabs["collapse_variants"]).loc["lr_tenth"].against == "too_fast"
    with pytest.raises(ConfigError, match=r"experiments\.collapse\.roles\.baseline: 'exact' is not a variant"):
        exp["roles"] = ROLES
        collapse.tables(Context(d))
    with pytest.raises(ConfigError, match=r"experiments\.collapse\.roles: missing role\(s\) baseline"):
        exp["roles"] = {k: v for k, v in ROLES.items() if k != "baseline"}
        collapse.tables(Context(d))


def render(section_ctx, figures=None):
    env = environment()
    return env.get_template("sections/collapse.html.j2").render(ctx=section_ctx, figures=figures or {})


def test_figures_and_section(results):
    t = results[1]
    figs = collapse.figures(t)
    assert set(figs) == {
        "collapse_reward_design",
        "collapse_variants",
        "collapse_remedies",
        "collapse_curriculum",
        "collapse_nonfinite",
    }
    for fig in figs.values():
        axes = [ax for ax in fig.axes if ax.get_title()]
        assert axes and all(ax.get_xlabel() and ax.get_ylabel() for ax in axes)
        assert all(ax.get_legend() is not None for ax in axes if len(ax.get_lines()) > 1)
    titles = [ax.get_title() for ax in figs["collapse_remedies"].axes]
    assert "lr_tenth against baseline" in titles and "reward_norm against scale_failing" in titles
    for ax in figs[
        "collapse_reward_design"
    ].axes:  # accuracy, format rate: bands within [0, 1] (0.30 and 0.44 at step 6)
        lo, hi = band_extent(ax)
        assert 0 <= lo and hi <= 1
    for name in ("collapse_curriculum", "collapse_nonfinite"):
        assert "95% t interval" in figs[name]._suptitle.get_text()
    for fig in figs.values():
        matplotlib.pyplot.close(fig)
    s = collapse.section(t)
    assert s["verdicts"]["advantage_normalisation"]["outcome"] == "not judged"
    assert s["verdicts"]["shaping"]["sentence"].startswith("Not judged: n=1")
    html = render(s, {"collapse_variants": "data:image/png;base64,AA=="})
    text = " ".join(html.split())
    assert "Failing: <code>offset</code> (<code>algorithm=reinforce_no_baseline, reward_offset=10.0</code>)" in text
    assert "Causes of collapse" in html and "data:image/png" in html and "n per arm: 2" in html


def test_missing_everything(cfg, tmp_path):
    cfg = {**cfg, "results": str(tmp_path / "empty")}
    """No run written: every table exists but says nothing; figures and section still render."""
    tabs = with_claims(cfg, collapse.tables(Context(cfg)))
    assert tabs["collapse_variants"].n.eq(0).all() and tabs["collapse_variants"].final_eval_mean.isna().all()
    assert tabs["collapse_reward_design"].empty and tabs["collapse_curves"].empty
    assert (tabs["collapse_nonfinite"].status == "missing").all()
    assert verdicts(tabs, "collapse").outcome.eq("not judged").all()
    t = Tables(cfg)  # nothing written at all: empty frames
    for fig in collapse.figures(t).values():
        matplotlib.pyplot.close(fig)
    html = render(collapse.section(t))
    assert "No data" in html and "No verdicts" in html


def test_no_experiment(cfg, tmp_path):
    """A configuration without the experiment: empty tables, no error."""
    tabs = collapse.tables(Context({**cfg, "results": str(tmp_path), "experiments": {}}))
    assert all(df.empty for df in tabs.values())
