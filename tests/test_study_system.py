"""The system study (math-rl-training-system.md) on a hand-made results tree."""

import math
import re
from pathlib import Path

import matplotlib
import pytest

from mathrl.analysis.measures import training_system
from mathrl.analysis.report import environment
from mathrl.analysis.studies import system
from mathrl.analysis.study_inputs import Context, Tables
from mathrl.pipeline.config import expand_runs, load_config
from tests.synthetic import verdicts, with_claims, write_json, write_run, write_tables

matplotlib.use("Agg")

# Held-out accuracy at steps 0 (before RL), 2 and 4 per (task, algorithm, seed); absent: not written.
EVALS = {
    ("add", "reinforce", 0): [0.4, 0.5, 0.6], ("add", "reinforce", 1): [0.4, 0.6, 0.8],
    ("add", "ppo", 0): [0.4, 0.95, 0.96], ("add", "ppo", 1): [0.4, 0.95, 0.96],
    ("add", "grpo", 0): [0.4, 0.1, 0.5],  # one low reading (0.1 < 0.2), then recovers: no collapse; seed 1 missing
    ("mul", "reinforce", 0): [0.3, 0.85, 0.9], ("mul", "reinforce", 1): [0.3, 0.85, 0.9],
}  # fmt: skip
CONST = {"policy_loss": 0.1234, "reward_mean": 0.5, "accuracy": 0.5, "lr": 1e-4, "entropy": 0.3, "kl": 0.01}


def rows(evals, seconds):
    out = []
    for step in range(1, 5):
        row = {"step": step, "samples": 16 * step, "seconds": seconds, "skipped": 0, **CONST}
        if step % 2 == 0:
            row["eval_accuracy"] = evals[step // 2]
        out.append(row)
    return out


def run_id(task, algorithm, seed):
    return f"system__algorithm-{algorithm}_task-{task}__s{seed}"  # grid keys sort in run ids


@pytest.fixture(scope="module")
def cfg(study_config):
    system = {"fixed": {"steps": 4, "eval_every": 2, "kl_coef": 0.0, "weight_decay": 0.01},
              "grid": {"task": ["add", "mul"], "algorithm": ["reinforce", "ppo", "grpo"]},
              "seeds": [0, 1]}  # fmt: skip
    return study_config("system", {"system": system})


@pytest.fixture(scope="module")
def results(cfg):
    return build(cfg)


def build(cfg):
    for (task, algorithm, seed), evals in EVALS.items():
        write_run(cfg, run_id(task, algorithm, seed), rows(evals, 1.0 + seed), evals[0])
    write_json(cfg, "sft/add/w0/summary.json", {
        "settings": {"preset": "small"}, "model": {"n_layer": 2, "n_head": 4, "n_embd": 128},
        "n_params": 400256, "steps": 425, "eval_accuracy": 0.464, "band": [0.3, 0.6], "in_band": True,
        "wall_seconds": 12.0})  # fmt: skip
    log = Path(cfg["results"]) / "logs" / "train" / f"{run_id('add', 'reinforce', 0)}.log"
    log.parent.mkdir(parents=True)
    log.write_text("Step 1/4 | Loss 0.100\nalert: something\nStep 4/4 | Loss 0.123 | Acc 0.500 | Eval 0.600\n")
    tabs = with_claims(cfg, system.tables(Context(cfg)))
    return tabs, write_tables(cfg, tabs)


def test_configs_table(results):
    c = results[0]["system_configs"].set_index(["task", "key"])
    assert c.loc[("add", "n_layer")].ours == 2 and c.loc[("add", "n_layer")].document == 4
    assert c.loc[("mul", "n_layer")].document == 6 and math.isnan(
        c.loc[("mul", "n_layer")].ours
    )  # no mul warm-up: missing
    assert c.loc[("add", "n_params")].ours == 400256 and math.isnan(c.loc[("add", "n_params")].document)
    assert c.loc[("add", "sft_accuracy")].ours == pytest.approx(0.464) and c.loc[("add", "sft_steps")].ours == 425
    assert c.loc[("add", "steps")].ours == 4 and c.loc[("add", "steps")].document == 200
    assert c.loc[("add", "lr")].document == 1e-4 and c.loc[("mul", "baseline_decay")].ours == 0.9
    assert c.loc[("add", "batch_size")].ours == 16 and c.loc[("add", "grad_clip")].ours == 1.0
    assert c.loc[("add", "micro_batch_size")].ours == 16  # micro_batch_size 0 (no accumulation): the whole batch
    assert set(results[0]["system_configs"].query("task == 'add'").preset) == {"small"}
    assert set(results[0]["system_configs"].query("task == 'mul'").preset) == {"missing"}


def test_results_table(results):
    res = results[0]["system_results"]
    r = res.set_index(["task", "algorithm"])
    reached = dict(zip(zip(res.task, res.algorithm), res.reached.tolist()))
    a = r.loc[("add", "reinforce")]
    assert a.n == 2 and a.n_runs == 2 and a.rl_steps == 4
    assert a.final_eval_mean == pytest.approx(0.7) and a.final_eval_std == pytest.approx(0.1 * math.sqrt(2))
    assert a.gain_mean == pytest.approx(0.3) and a.peak_eval_mean == pytest.approx(0.7)
    assert a.seq_per_s_mean == pytest.approx(12.0) and a.seq_per_s_std == pytest.approx(math.sqrt(32))  # 64/4 and 64/8
    assert a.wall_seconds_mean == pytest.approx(6.0)
    assert a.expected_low == 0.9 and a.expected_high == 0.95 and reached[("add", "reinforce")] is False
    assert reached[("add", "ppo")] is True and reached[("mul", "reinforce")] is True
    assert r.loc[("mul", "reinforce")].expected_low == 0.8
    g = r.loc[("add", "grpo")]
    assert (
        g.n == 1
        and g.n_runs == 2
        and g.collapses == 0
        and g.collapse_rate_hi == pytest.approx(3.8415 / 4.8415, rel=1e-3)
    )  # Wilson, 0 of 1
    assert a.final_eval_lo == 0 and a.final_eval_hi == 1  # 0.7 -/+ t(1) x 0.1414 / sqrt(2) = 1.27, clipped to [0, 1]
    assert a.gain_lo == pytest.approx(0.3 - 12.7062 * 0.1, rel=1e-4)  # a gain is a difference: not clipped
    m = r.loc[("mul", "ppo")]  # never written: shown, with nothing invented
    assert m.n == 0 and m.n_runs == 2 and math.isnan(m.final_eval_mean) and reached[("mul", "ppo")] is None


def test_a_runs_log_is_read_as_text_where_it_was_trained_and_empty_where_none_was_written(tmp_path):
    from mathrl.analysis.results import Run
    from mathrl.pipeline import layout
    from mathrl.pipeline.config import RunSpec

    ctx, log = Context({"results": str(tmp_path)}), layout.STAGES["train"].log
    own = Run(RunSpec("a__x__s0", "a", "x", {}, 0, {}), "complete")
    shared = Run(RunSpec("b__y__s0", "b", "y", {}, 0, {}, same_as="a__x__s0"), "complete")
    assert ctx.run_text(own, log) == ""
    path = ctx.run_file(own, log)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"Step 1/2 | Loss \xff\n")
    assert ctx.run_text(shared, log) == ctx.run_text(own, log) == "Step 1/2 | Loss \ufffd\n"


def test_curves_console_criteria(results):
    tabs = results[0]
    c = tabs["system_curves"].query("task == 'add' and algorithm == 'reinforce'").set_index("step")
    assert list(c.index) == [0, 2, 4]
    assert c.loc[2].eval_accuracy_mean == pytest.approx(0.55) and c.loc[2].n == 2
    con = tabs["system_console"].set_index(["task", "algorithm"])
    assert con.loc[("add", "reinforce")].source == "log" and con.loc[("add", "reinforce")].line.startswith(
        "Step 4/4 | Loss 0.123"
    )
    assert con.loc[("add", "ppo")].source == "metrics.csv"
    assert (
        con.loc[("add", "ppo")].line
        == "Step 4/4 | Loss 0.123 | Acc 0.500 | Reward 0.500 | LR 1.00e-04 | Ent 0.300 | KL 0.0100 | Eval 0.960"
    )
    assert ("mul", "ppo") not in con.index
    k = verdicts(tabs, "system")
    acc = k.loc["add_accuracy"]  # finals 0.6 and 0.8, minus 90%: -0.2 with t(1) x 0.1
    assert (
        acc["diff"] == pytest.approx(-0.2)
        and acc.ci_low == pytest.approx(-0.2 - 12.7062 * 0.1, rel=1e-4)
        and acc.outcome == "inconclusive"
    )
    assert k.loc["add_gain"]["diff"] == pytest.approx(0.3) and k.loc["add_stable"].outcome == "inconclusive"
    # stability reads the lowest evaluation after the start, not the last: 0.5 - 0.4 and 0.6 - 0.4
    assert k.loc["add_stable"]["diff"] == pytest.approx(0.15) and k.loc["add_stable"].measure.startswith(
        "lowest held-out"
    )
    assert (k.loc[["mul_accuracy", "mul_gain", "mul_stable"], "outcome_unadjusted"] == "agrees").all()
    assert k.loc["mul_accuracy"].kind == "document" and k.loc["add_accuracy"].p_holm >= k.loc["add_accuracy"].p_value


def test_verdict_functions():
    assert (
        system.reached(0.9, 0.9) is True
        and system.reached(0.89, 0.9) is False
        and system.reached(math.nan, 0.9) is None
    )


def render(section_ctx, figures=None):
    env = environment()
    return env.get_template("sections/system.html.j2").render(ctx=section_ctx, figures=figures or {})


def test_figures_and_section(results):
    t = results[1]
    figs = system.figures(t)
    assert set(figs) == {"system_curves", "system_throughput"}
    for fig in figs.values():
        for ax in fig.axes:
            assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
            assert ax.get_legend() is not None
    for ax in figs["system_curves"].axes:
        # the document's range belongs to its step 200: a bar beside these 4-step runs, labelled so, not a band over
        # them
        target = [line for line in ax.get_lines() if line.get_label().startswith("document:")]
        assert len(target) == 1 and "at step 200 (beyond these 4 steps)" in target[0].get_label() and not ax.patches
        assert ax.get_xlim()[1] < 10
        ys = [y for c in ax.collections for p in c.get_paths() for y in p.vertices[:, 1]]  # add: 0.7 ± 1.27 unclipped
        assert ys and 0 <= min(ys) and max(ys) <= 1
    for fig in figs.values():
        matplotlib.pyplot.close(fig)
    s = system.section(t)
    add, mul = s["tasks"]
    assert [r["outcome"] for r in add["rows"]] == ["inconclusive"] * 3 + [
        "not judged"
    ]  # no supervised control in this tree
    measured = [" ".join(re.sub(r"<[^>]+>", " ", p).split()) for p in render(s).split("<strong>Measured.</strong>")[1:]]
    assert (
        "70.0% [0.0%, 100.0%] (n=2)" in measured[0]
        and "90%–95%" in measured[0]
        and "from start_30, the start picked" in measured[0]
    )
    assert [r["outcome"] for r in mul["rows"]] == ["agrees"] * 3 + ["not judged"]
    assert "; ppo no data" in measured[1]  # planned, not written
    alone = system.task_view(t["system_results"].query("algorithm == 'reinforce'"), t["system_configs"],
                             t["system_starts"], "mul", {})  # fmt: skip
    text = " ".join(re.sub(r"<[^>]+>", " ", render({**s, "tasks": [alone]})).split())
    assert "before RL), against" in text and "no data" not in text.split("Measured.")[1]  # PPO, GRPO not in the config
    assert s["baseline_decay"] == "0.9" and s["presets"][0]["preset"] == "small"
    w = s["configs"].set_index("key")
    assert (
        w.loc["n_layer", "add_ours"] == 2
        and w.loc["n_layer", "mul_document"] == 6
        and math.isnan(w.loc["n_layer", "mul_ours"])
    )
    assert list(w.index[:3]) == ["n_layer", "n_head", "n_embd"]
    html = render(s, {"system_curves": "data:image/png;base64,AA=="})
    assert "Step 50/200" in html and "inconclusive" in html and "95% CI [" in html and "system_throughput" in html
    assert "Beside it this experiment runs PPO (a value head" in html
    alone = render({**s, "beside": []})
    assert "runs REINFORCE alone" in alone and "Beside it" not in alone


def test_missing_everything(cfg, tmp_path):
    cfg = {**cfg, "results": str(tmp_path / "empty")}
    tabs = with_claims(cfg, system.tables(Context(cfg)))
    assert tabs["system_results"].n.eq(0).all() and tabs["system_results"].reached.isna().all()
    assert tabs["system_curves"].empty and tabs["system_console"].empty
    c = tabs["system_configs"].set_index(["task", "key"])
    assert c.loc[("add", "steps")].ours == 4 and math.isnan(c.loc[("add", "n_layer")].ours)  # settings known, model not
    assert verdicts(tabs, "system").outcome.eq("not judged").all()
    t = Tables(cfg)
    for fig in system.figures(t).values():
        matplotlib.pyplot.close(fig)
    html = render(system.section(t))
    assert "No data" in html and "No verdicts" in html


def test_no_experiment(cfg, tmp_path):
    tabs = with_claims(cfg, system.tables(Context({**cfg, "results": str(tmp_path), "experiments": {}})))
    assert tabs["system_results"].empty and tabs["system_curves"].empty and tabs["system_console"].empty
    assert tabs["system_configs"].ours.isna().all() and verdicts(tabs, "system").outcome.eq("not judged").all()


# ---- starts: RL and the supervised control from the warm-up's band and from a further start -------------------------
STARTS = {"starts": [
    {"start": "start_30", "threshold": 0.3, "sft_steps": 425, "val_accuracy": 0.32, "test_accuracy": 0.30,
     "reached": True},
    {"start": "start_85", "threshold": 0.85, "sft_steps": 1500, "val_accuracy": 0.86, "test_accuracy": 0.85,
     "reached": True}],
    "controls": [{"start": st, "seed": seed, "initial_test": start, "final_test": start + gain}
                 for st, start, gains in (("start_30", 0.30, (0.40, 0.42)), ("start_85", 0.85, (0.04, 0.06)))
                 for seed, gain in enumerate(gains)]}  # fmt: skip
FROM = {
    ("add", 0): [0.30, 0.40, 0.45],
    ("add", 1): [0.30, 0.42, 0.47],
    ("add_from_85", 0): [0.85, 0.90, 0.93],
    ("add_from_85", 1): [0.85, 0.91, 0.95],
}


@pytest.fixture(scope="module")
def starts_tables(study_config):
    starts = {"fixed": {"steps": 4, "eval_every": 2, "algorithm": "reinforce"},
              "variants": {"add": {"task": "add"}, "add_from_85": {"task": "add", "init": "start_85"}},
              "seeds": [0, 1]}  # fmt: skip
    cfg = study_config("starts", {"system": starts})
    for (variant, seed), evals in FROM.items():
        write_run(cfg, f"system__{variant}__s{seed}", rows(evals, 1.0), evals[0])
    write_json(cfg, "sft/add/w0/starts/starts.json", STARTS)
    return with_claims(cfg, system.tables(Context(cfg)))


def test_starts_tables_and_claims(starts_tables):
    runs = starts_tables["system_start_runs"]
    assert set(runs.algorithm) == {"reinforce", "supervised"} and set(runs.cell) == {"add_start_30", "add_start_85"}
    assert runs.loc[runs.algorithm == "supervised", "lowest_change"].isna().all()  # a control has no evaluation path
    assert set(runs.loc[runs.picked == "yes", "start"]) == {
        "start_85"
    }  # validation 86% < 90%: the most-trained start below
    st = starts_tables["system_starts"].set_index("start")
    assert st.loc["start_85", "rl_final"] == pytest.approx(0.94) and st.loc["start_85", "sup_final"] == pytest.approx(
        0.90
    )
    assert st.loc["start_85", "rl_minus_sup"] == pytest.approx(0.04) and st.loc[
        "start_30", "rl_minus_sup"
    ] == pytest.approx(0.46 - 0.71)
    assert st.loc["start_85", "picked"] and not st.loc["start_30", "picked"] and st.loc["start_85", "start_val"] == 0.86
    k = verdicts(starts_tables, "system")
    assert (
        k.loc["add_accuracy"]["diff"] == pytest.approx(0.04) and k.loc["add_accuracy"].n == 2
    )  # the picked start's runs only
    assert k.loc["add_gain"]["diff"] == pytest.approx(0.09)
    vs = k.loc["add_start_30_rl_vs_supervised"]  # one warm-up: its runs are not paired with its controls by seed
    assert vs["diff"] == pytest.approx(-0.25) and vs.kind == "beyond" and vs.design == "unpaired"
    assert k.loc["add_start_85_rl_vs_supervised"]["diff"] == pytest.approx(0.04)


@pytest.mark.parametrize("files", [["config/config.yaml"], ["config/config.yaml", "config/full.yaml"]])
def test_the_control_sees_an_rl_runs_samples_and_every_start_is_saved(files):
    from mathrl.pipeline.config import ROOT

    cfg = load_config([ROOT / f for f in files])
    runs = [spec for spec in expand_runs(cfg).values() if spec.experiment == "system"]
    for spec in runs:
        s, sft = spec.settings.as_dict(), cfg["sft"][spec.settings.task]
        assert s["steps"] * s["batch_size"] == sft["control_steps"] * sft["control_batch_size"], spec.run_id
        controls = len(sft["control_seeds"]) * sft["warmups"]  # one control per warm-up and control seed
        assert controls >= 5 and len(cfg["experiments"]["system"]["seeds"]) >= 5
        if s["init"] is not None:
            assert s["init"] in {training_system.start_of(cfg, {"task": s["task"], "init": None})} | {
                f"start_{round(100 * x)}" for x in sft["starts"]
            }


def test_the_curves_figure_sets_each_start_s_supervised_control_beside_its_rl_lines(starts_tables):
    """The control trains for as many samples as an RL run draws: its final accuracy, with its interval, stands at the
    last RL step of the runs from the same start, in their colour."""
    fig = system.fig_curves(starts_tables)
    add = fig.axes[0]
    lines = {line.get_label(): line for line in add.get_lines()}
    controls = {c.get_label(): c.lines[0] for c in add.containers}  # an errorbar: its marker line and its bar
    for start, final in (("start_30", 0.71), ("start_85", 0.90)):
        control = controls[f"supervised control from {start} (as many samples)"]
        assert list(control.get_xdata()) == [4.0] and control.get_ydata()[0] == pytest.approx(final)
        assert control.get_color() == lines[f"reinforce from {start}"].get_color()
    assert "supervised control from start_30 (as many samples)" in [t.get_text() for t in add.get_legend().get_texts()]
    matplotlib.pyplot.close(fig)


def test_the_context_reads_each_warm_ups_starts_and_summary(study_config):
    cfg = study_config("warmup_starts", {}, sft={"add": {"band": [0.3, 0.9], "warmups": 3}})
    write_json(cfg, "sft/add/w0/starts/starts.json", STARTS)
    write_json(cfg, "sft/add/w1/summary.json", {"steps": 425})
    ctx = Context(cfg)
    assert ctx.sft_starts("add") == [(STARTS, None), (None, {"steps": 425}), (None, None)]
    assert ctx.sft_starts("sub") == []  # a task the config does not warm up
