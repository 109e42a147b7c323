"""The collapse study (training-collapse-analysis.md) on a hand-made results tree."""

import copy
import math
from pathlib import Path

import matplotlib
import pytest

from mathrl.config import expand_runs, load_config
from mathrl.report import environment
from mathrl.studies import collapse
from mathrl.studies.context import Context, Tables
from tests import synthetic
from tests.conftest import TINY, write_config
from tests.synthetic import verdicts, with_claims, write_run

matplotlib.use("Agg")

VARIANTS = {
    "exact": {"grad_clip": None}, "lr_tenth": {"grad_clip": None, "lr": 3e-5},
    "kl": {"grad_clip": None, "kl_coef": 0.1}, "clip": {"grad_clip": 0.5},
    "random_exact": {"init": "random"}, "shaped": {"init": "random", "reward": "shaped"},
    "shaped_penalty": {"init": "random", "reward": "shaped_penalty"},
    "adv_norm_clip": {"adv_norm": True, "adv_clip": 1.0},
    "entropy_schedule": {"entropy_coef": 0.01, "entropy_schedule": "cosine", "entropy_coef_end": 0.0},
    "cosine_lr": {"lr_schedule": "cosine"},
    "curriculum": {"init": "random", "reward": "shaped", "curriculum_start": 1, "curriculum_every": 4},
    "huge_lr": {"lr": 1.0, "grad_clip": None},
}  # fmt: skip
ROLES = {"baseline": "exact", "lr_tenth": "lr_tenth", "kl": "kl", "grad_clip": "clip",
         "random_baseline": "random_exact", "shaped": "shaped", "penalty": "shaped_penalty",
         "adv_norm_clip": "adv_norm_clip",
         "entropy_schedule": "entropy_schedule", "cosine_lr": "cosine_lr", "curriculum": "curriculum",
         "nonfinite": "huge_lr",
         "reference": "lr_tenth"}  # the calibration's role on a remedy's variant, as in config/config.yaml  # fmt: skip
FLAT = [0.40, 0.42, 0.44, 0.46, 0.48]
FLAT2 = [0.40, 0.42, 0.44, 0.46, 0.485]
# Held-out accuracy at steps 0 (before RL), 2, 4, 6, 8, per (variant, seed); absent: not written.
EVALS = {
    # the failure: -16 and -15 points
    ("exact", 0): [0.40, 0.30, 0.34, 0.22, 0.24], ("exact", 1): [0.40, 0.36, 0.30, 0.26, 0.25],
    # gains of 8 and 8.5 points: no fall
    ("lr_tenth", 0): FLAT, ("lr_tenth", 1): FLAT2, ("clip", 0): FLAT, ("clip", 1): FLAT2,
    ("kl", 0): FLAT, ("kl", 1): [0.40, 0.30, 0.20, 0.10, 0.05],  # +8 and -35 points: inconclusive
    ("shaped", 0): [0.40, 0.46, 0.52, 0.56, 0.60],  # seed 1 missing
    ("shaped_penalty", 0): [0.40, 0.44, 0.48, 0.52, 0.56], ("shaped_penalty", 1): [0.40, 0.44, 0.48, 0.52, 0.56],
    # seed 0: one low reading (0.10 < 0.20), then recovers
    ("random_exact", 0): [0.40, 0.10, 0.30, 0.40, 0.45], ("random_exact", 1): FLAT,
    ("adv_norm_clip", 0): FLAT, ("adv_norm_clip", 1): FLAT,
    ("entropy_schedule", 0): FLAT, ("entropy_schedule", 1): FLAT2,
    ("cosine_lr", 0): FLAT, ("cosine_lr", 1): FLAT2,
    ("curriculum", 0): [0.40] * 5, ("curriculum", 1): [0.40] * 5,
}  # fmt: skip
FORMAT = {"exact": 0.8, "random_exact": 0.8, "shaped": 0.9, "shaped_penalty": 0.95}


def rows(evals, variant):
    out = []
    for step in range(1, 9):
        row = {"step": step, "samples": 16 * step, "seconds": 1.0, "accuracy": 0.5, "reward_mean": 0.5, "skipped": 0,
               "format_rate": FORMAT.get(variant, 0.85), "lr": 3e-4, "entropy_coef": 0.0, "ndigit": 2,
               "entropy": 0.3, "frac_zero_std": 0.75 if step == 1 else 0.5, "grad_norm": 2.0, "kl": 0.01,
               "kl_coef": 0.1 if variant == "kl" else 0.05}  # fmt: skip
        if variant == "lr_tenth":
            row["lr"] = 3e-5
        if variant == "entropy_schedule":
            row.update(entropy=0.5 if step <= 4 else 0.2, entropy_coef=0.01 * (8 - step) / 8)
        if variant == "curriculum":
            row["ndigit"] = 1 if step <= 4 else 2
        if variant == "random_exact":
            row["frac_zero_std"] = 1.0  # every reward of a random policy is 0: no signal anywhere
        if variant == "exact" and step == 8:
            row["entropy"] = 0.2  # the baseline's entropy falls by a third: the problem an entropy bonus addresses
        if variant == "cosine_lr":
            row["lr"] = 3e-4 * (9 - step) / 8  # decays to an eighth
        if step % 2 == 0:
            row["eval_accuracy"] = evals[step // 2]
        out.append(row)
    return out


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("collapse")
    d = copy.deepcopy(TINY)
    d["results"] = str(tmp_path / "results")
    d["tasks"]["mul"] = {"op": "mul", "ndigit": 2, "n_train": 0, "n_test": 20, "n_val": 20, "seed": 1}
    d["experiments"] = {
        "collapse": {
            "fixed": {"task": "mul", "steps": 8, "eval_every": 2},
            "variants": VARIANTS,
            "roles": ROLES,
            "seeds": [0, 1],
        }
    }
    return load_config(write_config(tmp_path / "config.yaml", d))


@pytest.fixture(scope="module")
def results(cfg):
    specs = expand_runs(cfg)  # once: write_run would expand (and validate) every run for every run written
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(synthetic, "expand_runs", lambda _: specs)
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
    (Path(cfg["results"]) / "runs" / "collapse__adv_norm_clip__s1" / "summary.json").write_text(
        "{truncated"
    )  # a failed run
    tabs = with_claims(cfg, collapse.tables(Context(cfg)))
    out = Tables(cfg)
    out.dir.mkdir(parents=True, exist_ok=True)
    for name, df in tabs.items():
        df.to_csv(out.dir / f"{name}.csv", index=False)
    return tabs, out


def by_variant(df):
    return df.set_index("variant")


def test_variants_table(results):
    v = by_variant(results[0]["collapse_variants"])
    e = v.loc["exact"]
    assert e.n == 2 and e.n_runs == 2 and e.settings == "grad_clip=None" and e.role == "baseline"
    assert e.final_eval_mean == pytest.approx(0.245) and e.final_eval_std == pytest.approx(0.01 / math.sqrt(2))
    # drawdown: seed 0 falls 0.40 -> 0.22 (0.18, late 0.34 -> 0.22), seed 1 0.40 -> 0.25 (0.15, late 0.30 -> 0.25)
    assert (
        e.mid_gain_mean == pytest.approx(-0.08)
        and e.drawdown_mean == pytest.approx(0.165)
        and e.late_drawdown_mean == pytest.approx(0.085)
    )
    assert e.gain_mean == pytest.approx(-0.155) and e.gain_hi == pytest.approx(-0.155 + 12.7062 * 0.005, abs=1e-5)
    assert e.final_format_rate_mean == pytest.approx(0.8) and e.collapses == 0 and math.isnan(e.diff_vs_baseline)
    s = v.loc["shaped"]  # seed 1 was never written: n 1 of 2, no interval, nothing invented
    assert s.n == 1 and s.n_runs == 2 and math.isnan(s.final_eval_std) and s.final_eval_mean == pytest.approx(0.60)
    assert (
        s.diff_vs_baseline == pytest.approx(0.60 - 0.245)
        and math.isnan(s.diff_lo)
        and s.settings == "init=random, reward=shaped"
    )
    c = v.loc["curriculum"]  # paired by seed: 0.16 and 0.15; t(1) = 12.706, se = 0.005
    assert c.diff_vs_baseline == pytest.approx(0.155) and c.diff_lo == pytest.approx(0.155 - 0.063531, abs=1e-5)
    assert c.diff_hi == pytest.approx(0.155 + 0.063531, abs=1e-5)
    assert v.loc["random_exact"].collapses == 0  # a single reading below half the start is not a collapse
    assert v.loc["huge_lr"].collapses == 2 and v.loc["huge_lr"].role == "nonfinite"
    assert v.loc["adv_norm_clip"].n == 1 and v.loc["adv_norm_clip"].n_runs == 2  # the failed run is not counted
    assert v.loc["entropy_schedule"].early_entropy_mean == pytest.approx(0.5)
    assert v.loc["huge_lr"].skipped_mean == pytest.approx(3.5)
    # what each remedy changes, as logged: the clip bound at every step; the entropy weight decayed to 0; a tenth of the
    # LR
    assert v.loc["clip"].clip_binding_mean == 1.0 and math.isnan(v.loc["exact"].clip_binding_mean)
    assert v.loc["entropy_schedule"].entropy_coef_ratio_mean == 0.0 and v.loc["lr_tenth"].mean_lr_mean == pytest.approx(
        3e-5
    )
    assert v.loc["kl"].mean_kl_coef_mean == pytest.approx(0.1) and v.loc[
        "random_exact"
    ].format_gain_mean == pytest.approx(0.0)


def test_reward_design_table(results):
    d = results[0]["collapse_reward_design"]
    assert set(d.role) == set(collapse.REWARD_DESIGNS) and sorted(d.point.unique()) == [0, 1, 2, 3, 4]
    ex = d[d.variant == "random_exact"].set_index("point")
    assert list(ex.step) == [0, 2, 4, 6, 8]
    assert ex.loc[2].eval_accuracy_mean == pytest.approx(0.37) and ex.loc[2].n == 2  # 0.30 and 0.44 at step 4
    assert ex.loc[0].frac_zero_std_mean == pytest.approx(1.0) and ex.loc[1].frac_zero_std_mean == pytest.approx(
        1.0
    )  # a random policy: no signal
    assert ex.loc[4].format_rate_mean == pytest.approx(0.8)
    assert d[d.variant == "shaped"].n.eq(1).all()


def test_an_evaluation_nearest_two_points_is_one_row():
    """15 steps evaluated every 5: the quarter (3.75) and the half (7.5) are both nearest to step 5,
    which is one row (point 1), not two."""
    from types import SimpleNamespace

    import pandas as pd

    evals = pd.DataFrame({"step": [0, 5, 10, 15], "eval_accuracy": [0.1, 0.2, 0.3, 0.4]})
    metrics = pd.DataFrame({"step": range(1, 16), "format_rate": [0.5] * 15, "frac_zero_std": [0.9] * 15})
    spec = SimpleNamespace(variant="v", seed=0)
    run = SimpleNamespace(evals=evals, metrics=metrics, settings={"steps": 15}, spec=spec)
    rows = collapse.segment_rows(run, "shaped")
    assert [r["step"] for r in rows] == [0, 5, 10, 15] and [r["point"] for r in rows] == [0, 1, 3, 4]
    assert all(r["format_rate"] == 0.5 for r in rows)  # no empty segment behind a repeated step


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
    # the baseline lost 16 and 15 points (upper end of the interval -9.1): every remedy's failure is established
    for key in ("lr_tenth", "kl", "grad_clip", "normalisation", "entropy", "lr"):
        assert "held-out accuracy lost (baseline) established" in c.loc[key].engaged
    for key, text in (("entropy", "entropy bonus decayed (entropy_schedule) engaged: last entropy weight / first 0"),
                      ("lr", "LR decay (cosine_lr) engaged: last LR / first LR 0.125"),
                      ("lr_tenth", "LR lowered (lr_tenth) engaged: mean LR / the baseline's 0.1"),
                      ("grad_clip",
                       "gradient clip (grad_clip) engaged: share of steps whose gradient norm exceeded the clip "
                       "1")):  # fmt: skip
        # the remedy's own change, +8 and +8.5 points: no loss beyond the 2-point margin (before Holm's correction,
        # which two seeds cannot survive)
        assert (
            c.loc[key].outcome_unadjusted == "agrees"
            and c.loc[key]["diff"] == pytest.approx(0.0825)
            and text in c.loc[key].engaged
        )
    kl = c.loc["kl"]  # +8 and -35 points: the interval is wide
    assert kl.outcome == "inconclusive" and kl["diff"] == pytest.approx(-0.135) and kl.ci_low < -0.02 < kl.ci_high
    cur = c.loc["curriculum"]  # against shaped (the same random start), which has one seed
    assert (
        cur.outcome == "not judged"
        and cur.n == 1
        and "first stage unsolved (curriculum) met: sampled accuracy on the first stage 0.5" in cur.engaged
    )
    norm = c.loc["normalisation"]  # the failure is there, but the clip's binding was not logged by this tree
    assert norm.outcome == "not judged" and "advantage clip (adv_norm_clip) not measured" in norm.reason
    pen = c.loc["penalty"]  # malformed answers exist (format rate 0.95 at step 1), but shaped has one seed
    assert pen.outcome == "not judged" and "malformed answers (penalty) established" in pen.engaged
    guard = c.loc["guard"]  # 2 of 2, Wilson interval [0.342, 1]
    assert guard.outcome == "agrees" and guard.ci_low == pytest.approx(0.3424, abs=1e-3) and guard.n == 2


def test_settings_come_from_the_runs_summary(cfg, results):
    """A run's settings are the ones it recorded in summary.json (a key the config's expansion lacks is read
    from there); a run that recorded a value other than the config's is stale: no result, and named."""
    import json

    from mathrl.results import load_runs

    path = Path(cfg["results"]) / "runs" / "collapse__exact__s0" / "summary.json"
    summary = json.loads(path.read_text())
    try:
        path.write_text(json.dumps({**summary, "config": {**summary["config"], "recorded_only": 7}}))
        run = load_runs(cfg)["collapse__exact__s0"]
        assert run.ok and run.settings["recorded_only"] == 7 and "recorded_only" not in run.spec.settings
        path.write_text(json.dumps({**summary, "config": {**summary["config"], "lr": 0.123}}))
        run = load_runs(cfg)["collapse__exact__s0"]
        assert run.status == "stale" and not run.ok and "lr 0.123 -> " in run.problem
    finally:
        path.write_text(json.dumps(summary))


def test_renamed_variants(cfg, tmp_path):
    """Renaming the baseline in the YAML (and its role) keeps every table filled; a role
    naming no variant, or a missing role, is an error naming the experiment."""
    from mathrl.errors import ConfigError

    d = copy.deepcopy(cfg)
    exp = d["experiments"]["collapse"]
    exp["variants"]["binary"] = exp["variants"].pop("exact")
    exp["roles"] = {**ROLES, "baseline": "binary"}
    d["results"] = str(tmp_path / "r")
    specs = expand_runs(d)
    for seed, evals in ((0, EVALS[("exact", 0)]), (1, EVALS[("exact", 1)])):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(synthetic, "expand_runs", lambda _: specs)
            write_run(d, f"collapse__binary__s{seed}", rows(evals, "exact"), 0.4)
            write_run(d, f"collapse__entropy_schedule__s{seed}", rows(FLAT, "entropy_schedule"), 0.4)
    tabs = with_claims(d, collapse.tables(Context(d)))
    v = verdicts(tabs, "collapse")
    # the failure check found the renamed baseline through its role
    assert (
        v.loc["entropy"].outcome == "agrees"
        and "held-out accuracy lost (baseline) established" in v.loc["entropy"].engaged
    )
    assert by_variant(tabs["collapse_variants"]).loc["binary"].role == "baseline"
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
        "collapse_schedules",
        "collapse_nonfinite",
    }
    for fig in figs.values():
        axes = [ax for ax in fig.axes if ax.get_title()]
        assert axes and all(ax.get_xlabel() and ax.get_ylabel() for ax in axes)
        assert all(ax.get_legend() is not None for ax in axes if len(ax.get_lines()) > 1)
    # the caption's dashed baseline is drawn
    labels = [line.get_label() for line in figs["collapse_variants"].axes[0].get_lines()]
    assert "baseline" in labels
    for ax in figs[
        "collapse_reward_design"
    ].axes:  # accuracy, format rate: bands within [0, 1] (0.30 and 0.44 at step 6)
        lo, hi = band_extent(ax)
        assert 0 <= lo and hi <= 1
    for name in ("collapse_schedules", "collapse_nonfinite"):
        assert "95% t interval" in figs[name]._suptitle.get_text()
    for fig in figs.values():
        matplotlib.pyplot.close(fig)
    s = collapse.section(t)
    assert s["verdicts"]["normalisation"]["outcome"] == "not judged"
    assert "n=2" in s["verdicts"]["kl"]["sentence"] and s["verdicts"]["kl"]["outcome"] == "inconclusive"
    assert s["verdicts"]["shaping"]["sentence"].startswith("Not judged: n=1")
    html = render(s, {"collapse_variants": "data:image/png;base64,AA=="})
    failure = " ".join(html.split()).split("The failure to remedy (exact):</strong> ")[1]
    assert failure.startswith(
        "held-out accuracy 40.0% before RL; its change by the end -15.5 pts [-21.9 pts, -9.1 pts] (n=2)"
    )
    assert "collapsed in 0 of 2 runs" in failure.split("</p>")[0]
    assert "inconclusive" in html and "agrees" in html and "Causes of collapse" in html and "data:image/png" in html
    assert "n per arm: 2" in html


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


def test_mechanisms_read_what_each_remedy_changes():
    """Clip binding over the steps logged before the clip; the advantage clip over steps that had an advantage."""
    import pandas as pd

    m = pd.DataFrame({"grad_norm": [0.4, 0.6, 2.0, 0.5], "adv_abs_max": [1.0, 0.0, 1.0, 0.7],
                      "entropy_coef": [0.01, 0.005, 0.002, 0.0],
                      "lr": [1e-3] * 4, "kl_coef": [0.1] * 4, "kl": [0.0, 0.2, 0.4, 0.2],
                      "format_rate": [0.1, 0.2, 0.5, 0.9]})  # fmt: skip
    out = collapse.mechanisms(m, {"grad_clip": 0.5, "adv_clip": 1.0})
    assert out["clip_binding"] == 0.5  # 0.6 and 2.0 exceed 0.5; 0.5 itself does not
    assert out["adv_clip_binding"] == pytest.approx(2 / 3)  # the step with no advantage (0.0) is left out
    assert (
        out["entropy_coef_ratio"] == 0.0
        and out["mean_kl"] == pytest.approx(0.2)
        and out["mean_kl_coef"] == pytest.approx(0.1)
    )
    assert out["late_format_rate"] == pytest.approx(0.9) and out["format_gain"] == pytest.approx(
        0.8
    )  # last quarter: one step of four
    none = collapse.mechanisms(m, {"grad_clip": None, "adv_clip": None})
    assert math.isnan(none["clip_binding"]) and math.isnan(none["adv_clip_binding"])
