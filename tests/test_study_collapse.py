"""The collapse study (training-collapse-analysis.md) on a hand-made results tree."""

import copy
import math
from pathlib import Path

import matplotlib
import pytest
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from mathrl.config import expand_runs, load_config
from mathrl.report import TEMPLATES, fmt, html_table, pct
from mathrl.studies import collapse
from mathrl.studies.context import Context, Tables
from tests import synthetic
from tests.conftest import TINY, write_config
from tests.synthetic import write_run

matplotlib.use("Agg")

VARIANTS = {
    "exact": {}, "shaped": {"reward": "shaped"}, "shaped_penalty": {"reward": "shaped_penalty"},
    "reward_norm": {"reward_norm": True}, "adv_norm_clip": {"adv_norm": True, "adv_clip": 5.0},
    "entropy_schedule": {"entropy_coef": 0.01, "entropy_schedule": "cosine", "entropy_coef_end": 0.0},
    "cosine_lr": {"lr_schedule": "cosine"}, "curriculum": {"curriculum_start": 1, "curriculum_every": 4},
    "huge_lr": {"lr": 1.0, "grad_clip": None},
}  # fmt: skip
FLAT = [0.40, 0.42, 0.44, 0.46, 0.48]
# Held-out accuracy at steps 0 (before RL), 2, 4, 6, 8, per (variant, seed); absent: not written.
EVALS = {
    ("exact", 0): [0.40, 0.42, 0.44, 0.30, 0.48], ("exact", 1): [0.40, 0.44, 0.46, 0.46, 0.50],
    ("shaped", 0): [0.40, 0.46, 0.52, 0.56, 0.60],  # seed 1 missing
    ("shaped_penalty", 0): [0.40, 0.44, 0.48, 0.52, 0.56], ("shaped_penalty", 1): [0.40, 0.44, 0.48, 0.52, 0.56],
    ("reward_norm", 0): [0.40, 0.10, 0.30, 0.40, 0.45], ("reward_norm", 1): FLAT,  # seed 0 collapses (0.10 < 0.20)
    ("adv_norm_clip", 0): FLAT, ("adv_norm_clip", 1): FLAT,
    ("entropy_schedule", 0): FLAT, ("entropy_schedule", 1): FLAT,
    ("cosine_lr", 0): FLAT, ("cosine_lr", 1): FLAT,
    ("curriculum", 0): [0.40] * 5, ("curriculum", 1): [0.40] * 5,
}  # fmt: skip
FORMAT = {"exact": 0.8, "shaped": 0.9, "shaped_penalty": 0.95}


def rows(evals, variant):
    out = []
    for step in range(1, 9):
        row = {"step": step, "samples": 16 * step, "seconds": 1.0, "accuracy": 0.5, "reward_mean": 0.5, "skipped": 0,
               "format_rate": FORMAT.get(variant, 0.85), "lr": 3e-4, "entropy_coef": 0.0, "ndigit": 2,
               "entropy": 0.3, "frac_zero_std": 0.75 if step == 1 else 0.5}  # fmt: skip
        if variant == "entropy_schedule":
            row.update(entropy=0.5 if step <= 4 else 0.2, entropy_coef=0.01 * (8 - step) / 8)
        if variant == "curriculum":
            row["ndigit"] = 1 if step <= 4 else 2
        if step % 2 == 0:
            row["eval_accuracy"] = evals[step // 2]
        out.append(row)
    return out


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("collapse")
    d = copy.deepcopy(TINY)
    d["results"] = str(tmp_path / "results")
    d["tasks"]["mul"] = {"op": "mul", "ndigit": 2, "n_train": 0, "n_test": 20, "seed": 1}
    d["experiments"] = {"collapse": {"fixed": {"task": "mul", "steps": 8, "eval_every": 2}, "variants": VARIANTS, "seeds": [0, 1]}}
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
    (Path(cfg["results"]) / "runs" / "collapse__adv_norm_clip__s1" / "summary.json").write_text("{truncated")  # a failed run
    tabs = collapse.tables(Context(cfg))
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
    assert e.n == 2 and e.n_runs == 2 and e.settings == "defaults"
    assert e.final_eval_mean == pytest.approx(0.49) and e.final_eval_std == pytest.approx(0.02 / math.sqrt(2))
    assert e.mid_gain_mean == pytest.approx(0.05) and e.drops_mean == pytest.approx(0.07) and e.late_drops_mean == pytest.approx(0.07)
    assert e.final_format_rate_mean == pytest.approx(0.8) and e.collapses == 0 and e.effect == "baseline"
    s = v.loc["shaped"]  # seed 1 was never written: n 1 of 2, std unknown, nothing invented
    assert s.n == 1 and s.n_runs == 2 and math.isnan(s.final_eval_std) and s.final_eval_mean == pytest.approx(0.60)
    assert s.diff_vs_exact == pytest.approx(0.11) and s.effect == "higher" and s.settings == "reward=shaped"
    assert v.loc["curriculum"].effect == "lower"  # -0.09 against a noise of 2 x 0.01
    assert v.loc["cosine_lr"].effect == "no clear difference"  # -0.01
    assert v.loc["reward_norm"].collapses == 1 and v.loc["huge_lr"].collapses == 2
    assert v.loc["adv_norm_clip"].n == 1 and v.loc["adv_norm_clip"].n_runs == 2  # the failed run is not counted
    assert v.loc["entropy_schedule"].early_entropy_mean == pytest.approx(0.5)
    assert v.loc["huge_lr"].skipped_mean == pytest.approx(3.5)


def test_reward_design_table(results):
    d = results[0]["collapse_reward_design"]
    assert set(d.variant) == set(collapse.REWARD_DESIGNS) and sorted(d.point.unique()) == [0, 1, 2, 3, 4]
    ex = d[d.variant == "exact"].set_index("point")
    assert list(ex.step) == [0, 2, 4, 6, 8]
    assert ex.loc[2].eval_accuracy_mean == pytest.approx(0.45) and ex.loc[2].n == 2
    assert ex.loc[0].frac_zero_std_mean == pytest.approx(0.75)  # step 1: the warm-up policy's rollouts
    assert ex.loc[1].frac_zero_std_mean == pytest.approx(0.625)  # steps 1-2
    assert ex.loc[4].format_rate_mean == pytest.approx(0.8)
    assert d[d.variant == "shaped"].n.eq(1).all()


def test_nonfinite_table(results):
    nf = results[0]["collapse_nonfinite"].set_index("seed")
    assert nf.loc[0].skipped == 6 and nf.loc[0].first_skipped_step == 3 and nf.loc[0].weights_finite
    assert nf.loc[1].status == "stopped_nonfinite" and nf.loc[1].skipped == 1 and nf.loc[1].final_eval == pytest.approx(0.38)
    broken = nf.reset_index().assign(weights_finite=[True, False])
    assert collapse.guard_works(broken) is False
    assert collapse.guard_works(broken.assign(status="missing")) is None


def test_criteria(results):
    c = results[0]["collapse_criteria"].set_index("key")
    passed = dict(zip(c.index, c.passed.tolist()))  # Python bools or None
    assert list(results[0]["collapse_criteria"].columns[1:]) == ["criterion", "expected", "measured", "passed"]
    assert c.loc["shaping"].measured == pytest.approx(0.12 - 0.05) and passed["shaping"] is True
    assert c.loc["penalty"].measured == pytest.approx(0.05) and passed["penalty"] is True
    assert c.loc["normalisation"].measured == 1 and passed["normalisation"] is False
    assert c.loc["entropy"].measured == pytest.approx(0.2) and passed["entropy"] is True
    assert c.loc["lr"].measured == pytest.approx(0.07) and passed["lr"] is True
    assert c.loc["curriculum"].measured == pytest.approx(-0.09) and passed["curriculum"] is False
    assert c.loc["guard"].measured == 1 and passed["guard"] is True


def test_verdict_functions():
    assert collapse.effect(0.05, 0.01) == "higher" and collapse.effect(-0.05, 0.01) == "lower"
    assert collapse.effect(0.015, 0.01) == "no clear difference" and collapse.effect(0.005, math.nan) == "no clear difference"
    assert collapse.effect(math.nan, 0.01) == "no data"
    assert collapse.compare(0.3, 0.3) == (0.0, True) and collapse.compare(0.3, 0.3, strict=True)[1] is False
    assert collapse.compare(0.2, 0.3)[1] is False and collapse.compare(math.nan, 1)[1] is None
    assert collapse.no_collapse(0, 4) is True and collapse.no_collapse(1, 4) is False and collapse.no_collapse(math.nan, 0) is None
    assert collapse.verdict("True", "x")["cls"] == "agrees" and collapse.verdict(False, "x")["text"].startswith("x: disagrees")
    assert collapse.verdict(float("nan"), "x")["cls"] == ""


def render(section_ctx, figures=None):
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True, undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(fmt=fmt, pct=pct)
    env.globals.update(table=html_table)
    return env.get_template("sections/collapse.html.j2").render(ctx=section_ctx, figures=figures or {})


def test_figures_and_section(results):
    t = results[1]
    figs = collapse.figures(t)
    assert set(figs) == {"collapse_reward_design", "collapse_variants", "collapse_schedules", "collapse_nonfinite"}
    for fig in figs.values():
        axes = [ax for ax in fig.axes if ax.get_title()]
        assert axes and all(ax.get_xlabel() and ax.get_ylabel() for ax in axes)
        assert all(ax.get_legend() is not None for ax in axes if len(ax.get_lines()) > 1)
        matplotlib.pyplot.close(fig)
    s = collapse.section(t)
    assert s["verdicts"]["normalisation"]["cls"] == "disagrees" and "reward_norm 1 of 2" in s["verdicts"]["normalisation"]["text"]
    assert "60.0% ± – (n=1)" not in s["verdicts"]["shaping"]["text"]  # mid-run gain, not final
    assert "12.0% ± – (n=1)" in s["verdicts"]["shaping"]["text"] and s["verdicts"]["shaping"]["cls"] == "agrees"
    assert "2 of 2 huge_lr runs" in s["verdicts"]["guard"]["text"] and "first at step 3" in s["verdicts"]["guard"]["text"]
    html = render(s, {"collapse_variants": "data:image/png;base64,AA=="})
    assert "disagrees" in html and "Causes of collapse" in html and "data:image/png" in html


def test_missing_everything(cfg, tmp_path):
    cfg = {**cfg, "results": str(tmp_path / "empty")}
    """No run written: every table exists but says nothing; figures and section still render."""
    tabs = collapse.tables(Context(cfg))
    assert tabs["collapse_variants"].n.eq(0).all() and tabs["collapse_variants"].final_eval_mean.isna().all()
    assert tabs["collapse_reward_design"].empty and tabs["collapse_curves"].empty
    assert (tabs["collapse_nonfinite"].status == "missing").all()
    assert tabs["collapse_criteria"].passed.isna().all()
    t = Tables(cfg)  # nothing written at all: empty frames
    for fig in collapse.figures(t).values():
        matplotlib.pyplot.close(fig)
    html = render(collapse.section(t))
    assert "No data" in html and "not enough data" in html


def test_no_experiment(cfg, tmp_path):
    """A configuration without the experiment: empty tables, no error."""
    tabs = collapse.tables(Context({**cfg, "results": str(tmp_path), "experiments": {}}))
    assert all(df.empty for name, df in tabs.items() if name != "collapse_criteria")
    assert tabs["collapse_criteria"].passed.isna().all()
