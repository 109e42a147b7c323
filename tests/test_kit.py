"""The study kit: the view of claims.csv a section shows, roles and bands."""

from __future__ import annotations

import copy
import io

import pandas as pd
import pytest

import mathrl.analysis.kit as kit
from mathrl.analysis import claims
from mathrl.analysis.figure_style import (
    band_limits,
    band_panels,
    bands,
    bounds,
    interval_bars,
    interval_points,
    offsets,
    plt,
    png,
)
from mathrl.analysis.kit import (
    StudyTables,
    add_intervals,
    first_settings,
    parts,
    role_settings,
    section_context,
    seed_band,
)
from mathrl.analysis.measures.tables import role_of
from mathrl.analysis.report import pm, power_note
from mathrl.analysis.section_verdicts import claim_frame, verdict_rows
from mathrl.analysis.verdict import mean_interval
from mathrl.pipeline.config import load_config
from tests.conftest import TINY, write_config


def test_a_sections_claims_as_verdict_rows():
    runs = pd.DataFrame(
        {"variant": ["a"] * 3 + ["b"] * 3, "seed": [0, 1, 2] * 2, "acc": [0.3, 0.4, 0.35, 0.1, 0.22, 0.15], "fall": 0.0}
    )
    decl = [{"id": "helps", "kind": "document", "statement": "a beats b", "measure": "acc", "table": "t",
             "section": "s",
             "a": {"variant": "a"}, "b": {"variant": "b"}},
            {"id": "waits", "kind": "document", "statement": "a beats b after a fall", "measure": "acc", "table": "t",
             "section": "s",
             "a": {"variant": "a"}, "b": {"variant": "b"},
             "checks": [{"type": "failure", "label": "fall (b)", "measure": "fall", "arm": "b", "at_least": 0.5}]},
            {"id": "elsewhere", "kind": "document", "statement": "x", "measure": "acc", "table": "t",
             "section": "other", "a": {}}]  # fmt: skip
    rows = [claims.judge_claim(claims.parse(d, d["id"]), {"t": runs}, {}) for d in decl]
    t = {"claims": claims.adjust(pd.DataFrame(rows, columns=claims.COLUMNS + claims.EXTRA))}
    view = claim_frame(t, "s")
    assert list(view["key"]) == ["helps", "waits"]
    out = verdict_rows(view)
    assert (
        out[0]["outcome"] == "agrees" and "95% CI [" in out[0]["sentence"] and "n=3 seeds, paired" in out[0]["sentence"]
    )
    assert out[1]["sentence"].startswith(
        "Not judged: failure not established: fall (b) not established: fall 0 (needs >= 0.5)"
    )
    assert "1 agrees" in power_note(out) and "1 not judged" in power_note(out)
    from mathrl.analysis.report import claims_summary

    summary = claims_summary({**t, "claims_counts": claims.counts(t["claims"])})
    assert summary["family"] == 2 and "waits" not in set(summary["family_rows"]["claim_id"])  # not judged: no member


def test_band_is_a_clipped_t_interval_by_hand():
    # mean 0.05, std 0.1, n 3: t(2) = 4.3027, half-width 4.3027 x 0.1 / sqrt(3) = 0.2484
    lo, hi = band_limits([0.05, 0.5], [0.1, 0.1], [3, 1])
    assert abs(lo[0] - (0.05 - 0.24841)) < 1e-4 and abs(hi[0] - (0.05 + 0.24841)) < 1e-4
    assert lo[1] == hi[1] == 0.5  # one seed: no interval, the band is the line
    lo, hi = band_limits([0.05, 0.97], [0.1, 0.1], 3, bounds=bounds("eval_accuracy"))
    assert lo[0] == 0.0 and hi[1] == 1.0 and abs(hi[0] - 0.29841) < 1e-4
    lo, hi = band_limits([0.05], [0.1], 3, bounds=bounds("entropy"))  # bounded below only
    assert lo[0] == 0.0 and hi[0] > 0.29
    assert bounds("loss") is None


def test_a_variant_with_two_roles_is_named_by_the_studys_own():
    role = {"baseline": "exact", "shaped": "shaped", "reference": "exact"}
    assert role_of(role, ("baseline", "shaped")) == {"exact": "baseline", "shaped": "shaped"}
    assert role_of({"reference": "exact"}, ("baseline",)) == {"exact": "reference"}  # none of the study's: the other


def test_table_and_text_intervals_of_an_accuracy_stay_within_its_range():
    import pandas as pd

    df = pd.DataFrame({"final_mean": [0.006], "final_std": [0.01], "gain_mean": [0.006], "gain_std": [0.01], "n": [3]})
    out = add_intervals(df, ["final", "gain"], bounds={"final": bounds("eval_accuracy")})
    assert out["final_lo"][0] == 0.0 and abs(out["final_hi"][0] - (0.006 + 0.024841)) < 1e-5  # t(2) x 0.01 / sqrt(3)
    assert abs(out["gain_lo"][0] - (0.006 - 0.024841)) < 1e-5  # a difference: not clipped
    assert pm(0.006, 0.01, 3, "pct", bounds=bounds("eval_accuracy")) == "0.6% [0.0%, 3.1%] (n=3)"
    assert pm(0.006, 0.01, 3, "pct") == "0.6% [-1.9%, 3.1%] (n=3)"


def test_a_panel_draws_a_clipped_band_per_group_with_rows_and_its_labels():
    table = pd.DataFrame({"step": [1, 2], "eval_accuracy_mean": [0.5, 0.98], "eval_accuracy_std": [0.1, 0.1], "n": 3})
    accuracy = dict(groups=[("a", table), ("b", table.iloc[:0])], metric="eval_accuracy", empty="none", scale=100)
    labels = dict(ylabel="accuracy (%)", title="A")
    fig = band_panels([{**accuracy, **labels}, dict(groups=[], metric="entropy", empty="no runs")], 2, 2, (6, 4))
    assert len(fig.axes) == 2  # the cells beyond the panels are removed
    curves, empty = fig.axes
    assert [line.get_label() for line in curves.get_lines()] == ["a"]  # the group without rows is left out
    assert curves.get_lines()[0].get_ydata().tolist() == [50.0, 98.0]
    (band,) = curves.collections  # two measured steps: a bar per point, no band between them
    assert max(path.vertices[:, 1].max() for path in band.get_paths()) == 100.0  # the scaled share stays within 100
    assert (curves.get_xlabel(), curves.get_ylabel(), curves.get_title()) == ("RL step", "accuracy (%)", "A")
    assert [t.get_text() for t in curves.get_legend().get_texts()] == ["a"]
    assert [t.get_text() for t in empty.texts] == ["no runs"] and empty.get_legend() is None
    plt.close(fig)


def test_png_lays_a_figure_out_inside_its_canvas_and_draws_it_once():
    for layout in (None, "constrained"):
        fig, axes = plt.subplots(1, 2, figsize=(6, 3), layout=layout)
        for ax in axes:
            ax.plot([0, 1], [0, 1e6])
            ax.set(ylabel="a y label that needs room", xlabel="step", title="a title")
        fig.suptitle("a suptitle")
        data = png(fig)
        assert data.startswith(b"\x89PNG") and fig.get_layout_engine() is None  # savefig had no layout to redo
        width, height = fig.get_size_inches()
        box = fig.get_tightbbox(fig.canvas.get_renderer())
        assert 0 <= box.x0 and 0 <= box.y0 and box.x1 <= width and box.y1 <= height, (layout, box)
        plt.close(fig)


def test_sparse_measurements_are_points_at_their_steps_and_dense_ones_a_line():
    """Three evaluations are drawn where they were measured, never as a line through them; a second series measured
    at the same steps is moved a little aside; twelve steps make a line with its band."""
    sparse = pd.DataFrame(
        {"step": [0, 6, 12], "eval_accuracy_mean": [0.4, 0.1, 0.5], "eval_accuracy_std": 0.05, "n": 5}
    )
    dense = pd.DataFrame({"step": range(12), "eval_accuracy_mean": 0.5, "eval_accuracy_std": 0.05, "n": 5})
    fig, (ax, bx) = plt.subplots(1, 2)
    bands(ax, [("a", sparse), ("b", sparse)], "eval_accuracy", "none")
    a, b = ax.get_lines()
    assert a.get_linestyle() == "None" and a.get_marker() == "o" and list(a.get_ydata()) == [0.4, 0.1, 0.5]
    shift = a.get_xdata() - sparse["step"].to_numpy()
    assert (
        abs(shift[0]) > 0
        and abs(shift[0]) <= 0.5 * 6 / 2
        and list(b.get_xdata() - a.get_xdata()) == [-2 * shift[0]] * 3
    )
    assert all(len(c.get_paths()) == 3 for c in ax.collections)  # one interval bar per measured step
    bands(bx, [("a", dense)], "eval_accuracy", "none")
    (line,) = bx.get_lines()
    assert line.get_linestyle() == "-" and list(line.get_xdata()) == list(range(12))
    plt.close(fig)


def test_bands_take_a_metric_and_a_range_per_group_and_may_leave_the_legend_out():
    """Two metrics in one panel: each band is clipped to its own metric's range (an accuracy within [0, 1], a reward
    not at all) unless a range is given for its group; legend=False draws none."""
    t = pd.DataFrame({"step": range(12), "mean": 0.9, "std": 1.0, "n": 5})
    fig, (ax, bx) = plt.subplots(1, 2)
    bands(ax, [("acc", t), ("reward", t)], ["accuracy", "reward_mean"], "none", "")
    acc, reward = (c.get_paths()[0].vertices[:, 1] for c in ax.collections)
    assert acc.max() == 1.0 and reward.max() > 2.0 and ax.get_legend() is not None
    bands(bx, [("a", t), ("b", t)], "accuracy", "none", "", limits=[(0.0, 1.5), None], legend=False)
    wide, clipped = (c.get_paths()[0].vertices[:, 1] for c in bx.collections)
    assert wide.max() == 1.5 and clipped.max() == 1.0 and bx.get_legend() is None
    plt.close(fig)


def test_interval_bars_clip_their_intervals_and_say_where_a_value_is_missing():
    """Error bars reach from the mean to each edge of its interval, clipped to the range; a missing mean is a bar of
    height 0 with "missing" at its foot (or the note given for it), a missing edge no error bar on its side."""
    fig, (ax, bx) = plt.subplots(1, 2)
    interval_bars(ax, [0, 1, 2], [0.5, float("nan"), 0.1], [0.3, float("nan"), -0.2], [0.9, float("nan"), 0.4], (0, 1))
    assert [p.get_height() for p in ax.patches] == [0.5, 0.0, 0.1]
    (bars,) = ax.collections  # the vertical error bars: (mean - lo, hi - mean), the missing one of length 0
    lows, highs = zip(*[(seg[0][1], seg[1][1]) for seg in bars.get_segments()])
    assert lows == pytest.approx((0.3, 0.0, 0.0)) and highs == pytest.approx((0.9, 0.0, 0.4))
    assert [a.get_text() for a in ax.texts] == ["missing"] and ax.texts[0].xy == (1, 0)
    interval_bars(bx, [0, 1], [0.2, 0.4], [0.1, 0.3], [0.3, 0.5], notes=["n=3", None], note={"color": "0.2"})
    assert [(a.get_text(), a.get_color()) for a in bx.texts] == [("n=3", "0.2")]
    plt.close(fig)


def test_offsets_spread_series_over_half_the_smallest_gap():
    assert offsets([[0, 6, 12], [0, 6, 12]]) == [-0.75, 0.75]  # width 0.5 x gap 6 / 2 series, centred
    assert offsets([[0, 6, 12]]) == [0.0] and offsets([range(12), range(12)]) == [0.0, 0.0]


def test_png_is_a_palette_image_no_wider_than_the_page_shows():
    from PIL import Image

    from mathrl.analysis.figure_style import MAX_WIDTH_PX, STYLE

    with plt.rc_context(STYLE):
        for inches, width in ((16, MAX_WIDTH_PX), (6, 6 * STYLE["savefig.dpi"])):
            fig, ax = plt.subplots(figsize=(inches, 3))
            ax.plot([0, 1], [0, 1])
            with Image.open(io.BytesIO(png(fig))) as im:
                assert im.mode == "P" and abs(im.size[0] - width) <= 1, (inches, im.size)
            plt.close(fig)


def test_the_palette_keeps_white_and_every_plot_colour_exactly():
    from PIL import Image

    from mathrl.analysis.figure_style import COLORS, STYLE, palette

    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(4, 3))
        for i, color in enumerate(COLORS):
            ax.fill_between([0, 1], i, i + 0.8, color=color, linewidth=0)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        plt.close(fig)
    with Image.open(io.BytesIO(palette(buf.getvalue()))) as im:
        seen = {c for _, c in im.convert("RGB").getcolors(maxcolors=1 << 16)}
    assert (255, 255, 255) in seen
    assert {tuple(round(255 * c) for c in color) for color in COLORS} <= seen


def per_run_rows() -> pd.DataFrame:
    """A per-run table: a reference `ref` and an arm `arm`, seeds 0-2 (the arm's seed 2 has no accuracy)."""
    return pd.DataFrame(
        {
            "setting": ["ref"] * 3 + ["arm"] * 3,
            "role": ["reference"] * 3 + ["control"] * 3,
            "seed": [0, 1, 2] * 2,
            "acc": [0.5, 0.6, 0.7, 0.2, 0.4, float("nan")],
            "clip": [0.1, 0.2, 0.3, 0.0, 0.0, 0.0],
        }
    )


def test_an_arm_summary_reads_its_declared_cells_in_order_by_hand():
    from mathrl.analysis.kit import arm_summary

    spec = [("mean", ["clip"]), ("interval", ["acc"]), ("versus", {"vs_ref": "acc"})]
    out = arm_summary(per_run_rows(), "ref", ["role"], "acc", spec, bounds={"acc": (0.0, 1.0)}).set_index("setting")
    versus = [f"vs_ref_{c}" for c in ("mean", "lo", "hi", "n")]
    assert list(out.columns) == ["role", "n", "clip_mean", "acc_mean", "acc_lo", "acc_hi", *versus]
    assert list(out.index) == ["ref", "arm"] and out.loc["arm", "role"] == "control" and out.loc["arm", "n"] == 2
    assert out.loc["ref", "clip_mean"] == pytest.approx(0.2) and out.loc["ref", "acc_mean"] == pytest.approx(0.6)
    # 0.5, 0.6, 0.7: sd 0.1, t(2) 4.303 -> half-width 0.248
    assert out.loc["ref", "acc_hi"] - 0.6 == pytest.approx(4.3027 * 0.1 / 3**0.5, rel=1e-4)
    assert out.loc["arm", "acc_lo"] == 0.0  # 0.3 ± 0.635 (two seeds) cut at 0
    # paired by seed on seeds 0 and 1: -0.3, -0.2
    assert out.loc["arm", "vs_ref_mean"] == pytest.approx(-0.25) and out.loc["arm", "vs_ref_n"] == 2
    assert pd.isna(out.loc["ref", "vs_ref_mean"]) and out.loc["ref", "vs_ref_n"] == 0  # not against itself
    empty = arm_summary(per_run_rows().iloc[:0], "ref", ["role"], "acc", spec)
    assert empty.empty and list(empty.columns) == ["setting", *out.reset_index().columns[1:]]


def test_differences_between_settings_and_changes_between_phases_are_paired_by_seed():
    from mathrl.analysis.kit import DIFFERENCES, phase_change, setting_differences

    d = setting_differences(per_run_rows(), [("arm", "ref"), ("ref", "missing")], "acc")
    assert list(d.columns) == DIFFERENCES and list(d["against"]) == ["ref", "missing"]
    assert d.loc[0, "difference"] == pytest.approx(-0.25) and d.loc[0, "n"] == 2
    assert pd.isna(d.loc[1, "difference"])  # no rows to take from
    assert setting_differences(per_run_rows().iloc[:0], [("arm", "ref")], "acc")["n"].tolist() == [0]
    pk = pd.DataFrame(
        {
            "setting": ["a"] * 4,
            "k": [1] * 4,
            "seed": [0, 1, 0, 1],
            "phase": ["initial", "initial", "final", "final"],
            "pass_at_k": [0.2, 0.4, 0.5, 0.5],
        }
    )
    out = phase_change(pk, ["setting", "k"], "pass_at_k").iloc[0]
    assert out["initial_mean"] == pytest.approx(0.3) and out["final_mean"] == pytest.approx(0.5)
    assert out["change_mean"] == pytest.approx(0.2) and out["n"] == 2  # +0.3 and +0.1
    # t(1) 12.706 × sd 0.1414 / √2
    assert out["change_hi"] - 0.2 == pytest.approx(12.7062 * 0.141421 / 2**0.5, rel=1e-4)


def test_setting_steps_averages_each_step_over_the_complete_runs():
    from mathrl.analysis.kit import setting_steps
    from mathrl.analysis.results import Run
    from mathrl.pipeline.config import RunSpec

    def run(variant: str, seed: int, metrics: dict, status: str = "complete") -> Run:
        spec = RunSpec(f"e__{variant}__s{seed}", "e", variant, {}, seed, {})
        return Run(spec, status, {"initial": {"eval_accuracy": 0.1}}, pd.DataFrame(metrics))

    runs = [
        run("a", 0, {"step": [1, 2], "gap": [1.0, 2.0], "eval_accuracy": [float("nan"), 0.5]}),
        run("a", 1, {"step": [1, 2], "gap": [3.0, 4.0], "eval_accuracy": [float("nan"), 0.7]}),
        run("a", 2, {"step": [1, 2], "gap": [9.0, 9.0]}, status="missing"),  # not complete: left out
        run("b", 0, {"step": [1, 2], "other": [0.0, 0.0]}),  # logged none of the values: left out
    ]
    steps = setting_steps(runs, ["gap"])
    assert list(steps["setting"]) == ["a", "a"] and list(steps["gap_mean"]) == [2.0, 3.0]
    assert list(steps["n"]) == [2, 2]
    evals = setting_steps(runs[:2], ["eval_accuracy"], evals=True)
    assert list(evals["step"]) == [0, 2] and evals["eval_accuracy_mean"].tolist() == pytest.approx([0.1, 0.6])


def test_collapse_columns_name_the_share_collapsed_and_count_it_per_group():
    """Setting a: two of three runs collapsed (one run without a result is not counted); b: none of one."""
    rows = pd.DataFrame({"setting": ["a", "a", "a", "a", "b"], "collapsed": [1.0, 0.0, 1.0, None, 0.0]})
    summary = kit.summarise(rows, ["setting"], ["collapsed"])
    out = kit.collapse_columns(summary, rows, "setting")
    assert list(out.columns) == ["setting", "n", "expected", "collapse_rate", "collapses"]
    assert out["collapse_rate"].tolist() == pytest.approx([2 / 3, 0.0]) and out["collapses"].tolist() == [2.0, 0.0]
    assert out["n"].tolist() == [3, 1] and out["expected"].tolist() == [4, 1]
    before = kit.collapse_columns(summary, rows, "setting", before="n")
    assert list(before.columns) == ["setting", "collapses", "n", "expected", "collapse_rate"]


def test_a_variants_band_across_seeds_from_the_curves_table():
    """Variant a of experiment e, two seeds of two steps (seed 1 misses step 2's value); variant b and experiment f are
    left out; held-out accuracy starts at step 0 with each run's accuracy before RL."""
    nan = float("nan")
    curves = pd.DataFrame(
        {
            "run_id": ["e_a0", "e_a0", "e_a1", "e_a1", "e_b0", "f_a0"],
            "experiment": ["e", "e", "e", "e", "e", "f"],
            "variant": ["a", "a", "a", "a", "b", "a"],
            "step": [1, 2, 1, 2, 1, 1],
            "initial_eval": [0.2, 0.2, 0.4, 0.4, 0.9, 0.9],
            "entropy": [1.0, 0.5, 3.0, nan, 9.0, 9.0],
            "eval_accuracy": [nan, 0.5, nan, 0.7, 0.9, 0.9],
        }
    )
    e = seed_band(curves, "e", "a", "entropy")
    assert e["step"].tolist() == [1, 2] and e["mean"].tolist() == [2.0, 0.5] and e["n"].tolist() == [2, 1]
    assert e["std"].iloc[0] == pytest.approx(2**0.5) and pd.isna(e["std"].iloc[1])
    acc = seed_band(curves, "e", "a", "eval_accuracy")
    assert acc["step"].tolist() == [0, 2] and acc["mean"].tolist() == pytest.approx([0.3, 0.6])
    assert acc["n"].tolist() == [2, 2]
    for absent in (seed_band(curves, "e", "a", "kl"), seed_band(pd.DataFrame(), "e", "a", "entropy")):
        assert absent.empty and list(absent.columns) == ["step", "mean", "std", "n"]


def test_a_sections_parts_with_their_verdicts_counted():
    """Part a: two verdicts and a setup check (counted apart); b: one setup check alone; c: none."""
    rows = [
        {"part": "a", "outcome": "agrees"},
        {"part": "b", "outcome": "agrees", "kind": "setup"},
        {"part": "a", "outcome": "not judged", "kind": "document"},
        {"part": "a", "outcome": "agrees", "kind": "setup"},
        {"part": "z", "outcome": "disagrees"},
    ]
    p = parts(rows, ("a", "b", "c"))
    assert list(p) == ["a", "b", "c"] and [r["outcome"] for r in p["a"]["rows"]] == ["agrees", "not judged", "agrees"]
    assert p["a"]["summary"] == "1 agrees, 1 not judged; and 1 setup check, not counted"
    assert p["b"]["summary"] == "no verdicts; and 1 setup check, not counted"
    assert p["c"] == {"rows": [], "summary": "no verdicts"}


def test_estimate_columns_cut_the_interval_and_name_the_estimate():
    est = mean_interval([0.9, 1.0, 1.0])
    cut = kit.estimate_columns("A", est, (0.0, 1.0))
    assert list(cut) == ["A_mean", "A_lo", "A_hi"] and cut["A_hi"] == 1.0 and cut["A_lo"] == pytest.approx(est.lo)
    bare = kit.estimate_columns("dA", est, n=True, mean="")
    assert bare == pytest.approx({"dA": est.estimate, "dA_lo": est.lo, "dA_hi": est.hi, "dA_n": 3})


def test_a_roles_settings_are_its_variants_first_run_as_the_config_resolves_them(tmp_path):
    c = copy.deepcopy(TINY)
    c["train"].update(batch_size=32, steps=50)
    variants = {"v": {"batch_size": 64}, "w": {"batch_size": 128, "steps": 5}}
    c["experiments"] = {"e": {"fixed": {"steps": 20}, "variants": variants, "roles": {"wide": "w"}, "seeds": [0, 1]}}
    cfg = load_config(write_config(tmp_path / "c.yaml", c))
    wide, first = role_settings(cfg, "e", "wide"), role_settings(cfg, "e")
    assert (wide["batch_size"], wide["steps"]) == (128, 5) and (first["batch_size"], first["steps"]) == (64, 20)
    assert role_settings(cfg, "e", "narrow") is None and role_settings(cfg, "absent") is None
    by_setting = first_settings(cfg, "e")  # each variant's first run, in run order; a setting named another way
    assert list(by_setting) == ["v", "w"] and by_setting["w"] == wide and by_setting["v"] == first
    assert list(first_settings(cfg, "e", lambda spec: spec.variant.upper())) == ["V", "W"]
    assert first_settings(cfg, "absent") == {}


def test_a_sections_context_reads_its_studys_tables_and_verdicts_by_name():
    runs = pd.DataFrame(
        {"variant": ["a"] * 3 + ["b"] * 3, "seed": [0, 1, 2] * 2, "acc": [0.3, 0.4, 0.35, 0.1, 0.2, 0.15]}
    )
    claim = {"kind": "document", "statement": "a beats b", "measure": "acc", "table": "t", "section": "s"}
    arms = {"a": {"variant": "a"}, "b": {"variant": "b"}}
    decl = [{"id": i, **claim, "part": part, **arms} for i, part in (("first", "p"), ("second", "q"), ("third", "p"))]
    rows = [claims.judge_claim(claims.parse(d, d["id"]), {"t": runs}, {}) for d in decl]
    t = {"claims": claims.adjust(pd.DataFrame(rows, columns=claims.COLUMNS + claims.EXTRA)), "s_batch": runs}
    ctx = section_context(t, "s")
    assert ctx["tables"]["batch"] is runs
    assert [r["key"] for r in ctx["verdict_list"]] == ["first", "second", "third"]
    assert ctx["verdicts"]["second"]["part"] == "q"
    assert list(ctx["parts"]) == ["p", "q"] and [r["key"] for r in ctx["parts"]["p"]["rows"]] == ["first", "third"]
    assert ctx["parts"]["p"]["summary"] == "2 agrees"
    assert list(section_context(t, "s", ("q", "r"))["parts"]) == ["q", "r"]
    with pytest.raises(KeyError):
        StudyTables(t, "s")["absent"]  # a plain dict of tables; `Tables` reads one not written as an empty frame


def test_interval_points_reach_each_edge_of_their_interval_scaled():
    fig, ax = plt.subplots()
    interval_points(ax, [1, 2], [0.5, 0.2], [0.4, 0.1], [0.7, 0.2], scale=100, fmt="o")
    (bars,) = ax.containers[0].lines[2]  # the vertical error segments
    assert [tuple(seg[:, 1]) for seg in bars.get_segments()] == [pytest.approx((40, 70)), pytest.approx((10, 20))]
    assert list(ax.containers[0].lines[0].get_ydata()) == pytest.approx([50, 20])
    plt.close(fig)
