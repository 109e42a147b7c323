"""The token-selection part of the diagnostics study: the carry probe's pure functions by hand, and its tables, claims,
figure and section on a hand-made results tree."""

import json
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

from mathrl.analysis import estimators as analysis
from mathrl.analysis.studies import diagnostics
from mathrl.analysis.studies import high_entropy_tokens as ts
from mathrl.analysis.study_inputs import Context
from mathrl.engine import carry_probe
from tests import synthetic
from tests.synthetic import write_run, write_tables

matplotlib.use("Agg")

SEEDS = (0, 1, 2)
ARMS = {"all_tokens": "all", "top_20": "top_entropy", "bottom_80": "bottom_entropy"}
FINAL = {"all_tokens": 0.50, "top_20": 0.49, "bottom_80": 0.40}
SHARE = {"all_tokens": np.nan, "top_20": 0.2, "bottom_80": 0.8}


def test_carry_frame_and_means_by_hand():
    entropy = np.array([[0.1, 0.8, 0.2, 0.0], [0.3, 0.4, 0.6, 0.0], [0.2, 0.6, 1.0, 0.0]])
    carry = np.array([[False, True, False, False], [False, False, True, False], [False, True, False, False]])
    written = carry_probe.carry_entropy(entropy, carry)
    frame = pd.DataFrame(written).set_index(["position", "carry"])
    assert frame.loc[(0, False), "entropy"] == pytest.approx(0.2) and frame.loc[(0, False), "tokens"] == 3
    assert (0, True) not in frame.index  # no carry enters the lowest digit
    assert frame.loc[(1, True), "entropy"] == pytest.approx(0.7)
    assert frame.loc[(1, False), "entropy"] == pytest.approx(0.4)
    assert frame.loc[(2, True), "entropy"] == pytest.approx(0.6) and frame.loc[(2, False), "entropy"] == pytest.approx(
        0.6
    )
    means = analysis.carry_means(written)
    # positions 1 and 2 hold both kinds; carry: 0.7 and 0.6, no carry: 0.4 and 0.6, each position weighing the same
    # (pooling the tokens would give 0.667 against 0.533)
    assert means["entropy_carry"] == pytest.approx(0.65) and means["entropy_nocarry"] == pytest.approx(0.5)
    assert means["carry_gap"] == pytest.approx(0.15)
    read_back = pd.DataFrame(written).assign(carry=lambda f: f["carry"].map(str))  # as CSV gives the flags back
    assert analysis.carry_means(read_back) == means
    no_carry = carry_probe.carry_entropy(entropy, np.zeros_like(carry))
    assert np.isnan(analysis.carry_means(no_carry)["carry_gap"])  # no position holds both


def rows(arm: str, seed: int) -> list[dict]:
    out = []
    for step in range(1, 5):
        row = {"step": step, "samples": 16 * step, "entropy": 0.5, "accuracy": 0.3, "reward_mean": 0.3, "seconds": 1.0}
        if arm != "all_tokens":
            row.update(token_selected_frac=SHARE[arm], entropy_selected=0.9 if arm == "top_20" else 0.3,
                       entropy_unselected=0.3 if arm == "top_20" else 0.9)  # fmt: skip
        if step in (2, 4):
            row["eval_accuracy"] = FINAL[arm] + 0.01 * seed - (0.05 if step == 2 else 0.0)
        out.append(row)
    return out


@pytest.fixture(scope="module")
def results(study_config):
    experiments = {
        "token_selection": {
            "fixed": {"steps": 4, "eval_every": 2},
            "variants": {name: {"token_selection": sel} for name, sel in ARMS.items()},
            "roles": {"baseline": "all_tokens", "top": "top_20", "bottom": "bottom_80"},
            "seeds": list(SEEDS),
        }
    }
    cfg = study_config("tokens", experiments)
    for arm in ARMS:
        for s in SEEDS:
            write_run(cfg, f"token_selection__{arm}__s{s}", rows(arm, s), 0.4 + 0.01 * s)
    tabs = synthetic.with_claims(cfg, diagnostics.tables(Context(cfg)))
    return tabs, write_tables(cfg, tabs)


def test_per_run_and_per_arm_values(results):
    r = results[0]["diagnostics_token_selection_runs"].set_index(["setting", "seed"])
    assert len(r) == 9
    top = r.loc[("top_20", 2)]
    assert top.role == "top" and top.token_selection == "top_entropy"
    assert top.initial_eval == pytest.approx(0.42) and top.final_eval == pytest.approx(0.51)
    assert top.gain == pytest.approx(0.09)
    assert top.token_selected_frac == pytest.approx(0.2) and top.entropy_selected == pytest.approx(0.9)
    assert np.isnan(r.loc[("all_tokens", 0)].token_selected_frac)  # every token: nothing selected, nothing logged
    assert r["carry_gap"].isna().all()  # no run of this tree wrote a carry probe
    s = results[0]["diagnostics_token_selection"].set_index("setting")
    assert s.loc["bottom_80", "final_eval_mean"] == pytest.approx(0.41) and s.loc["bottom_80", "n"] == 3
    steps = results[0]["diagnostics_token_selection_steps"]
    assert sorted(steps["step"].unique()) == [0, 2, 4]


def test_an_absent_experiment_gives_empty_tables_with_the_same_columns(results, study_config):
    empty = ts.tables(Context(study_config("no_tokens", {})))
    assert all(df.empty for df in empty.values())
    summary = empty["diagnostics_token_selection"]
    assert list(summary.columns) == list(results[0]["diagnostics_token_selection"].columns)


def test_claims_read_the_runs_table(results):
    judged = results[0]["claims"].set_index("claim_id")
    top = judged.loc["tokens_top20_accuracy"]
    assert top.difference == pytest.approx(-0.01) and top.n == 3 and top.outcome == "agrees"  # within 3 points
    bottom = judged.loc["tokens_bottom80_accuracy"]
    assert bottom.difference == pytest.approx(-0.10) and bottom.outcome == "agrees"
    assert judged.loc["tokens_carry_entropy"].outcome == "not judged"  # no probe values


def test_figure_and_section_render(results):
    from mathrl.analysis.report import environment

    t = results[1]
    fig = diagnostics.figures(t)["diagnostics_token_selection"]
    left, right = fig.axes[:2]
    assert left.get_ylabel() == "token entropy (nats)" and right.get_ylabel() == "held-out accuracy (%)"
    assert right.get_xlabel() == "RL step"
    html = (
        environment()
        .get_template("sections/diagnostics.html.j2")
        .render(ctx=diagnostics.section(t), figures={"diagnostics_token_selection": "x.png"})
    )
    assert "Which tokens carry the learning" in html and "arXiv 2506.01939" in html and "x.png" in html
    assert "20% highest-entropy answer tokens is at least as accurate" in html  # the view of claims.csv


def test_carry_probe_runs_in_float64_and_is_the_same_at_any_thread_count():
    import torch

    from mathrl.engine.model import GPT, GPTConfig
    from mathrl.engine.tasks import VOCAB, Task

    task = Task(op="add", ndigit=2, reverse=True)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=len(VOCAB), block_size=task.seq_len, n_layer=1, n_head=2, n_embd=16)).eval()
    pairs = torch.randint(0, 100, (64, 2))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = carry_probe.answer_entropy(model, task, pairs)
        torch.set_num_threads(2)
        two = carry_probe.answer_entropy(model, task, pairs)
    finally:
        torch.set_num_threads(threads)
    assert next(model.parameters()).dtype == torch.float32  # a float64 copy ran, the model is left as it was
    assert one.shape == (64, task.answer_len) and bool((one > 0).all()) and torch.equal(one, two)


def test_a_run_with_the_probe_writes_what_its_start_and_final_policies_give_bit_for_bit(run_env):
    """carry_probe.csv of a trained run is the probe of the run's warm-up and of its final snapshot, read back bit
    for bit, and the per-run means the study takes from it are those of the policies themselves."""
    from mathrl.engine import snapshot
    from mathrl.engine.model import GPT, GPTConfig
    from mathrl.engine.sft import load_policy
    from mathrl.engine.tasks import read_problems, task_of
    from mathrl.engine.token_selection import carry_in
    from mathrl.pipeline import layout
    from mathrl.pipeline.cli import main
    from mathrl.pipeline.config import load_config

    path = run_env["config"]
    cfg = load_config(path)
    assert main(["train", "--config", str(path), "--run-id", "probed", "carry_probe=true", "steps=2"]) == 0
    run_dir = Path(cfg["results"]) / "runs" / "probed"
    written = pd.read_csv(run_dir / layout.CARRY_PROBE_FILE)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert layout.CARRY_PROBE_FILE in summary["files"]  # checked whole when read, as heldout.csv is
    task = task_of(cfg, "add")
    pairs = read_problems(layout.problems_file(cfg, "add", "test"), task)[: carry_probe.PROBE_PROBLEMS]
    carry = carry_in(pairs[:, 0], pairs[:, 1], task.answer_width).numpy()
    state = snapshot.decode((run_dir / "snapshot.pt").read_bytes(), "snapshot")
    final = GPT(GPTConfig(**state["model_config"]))
    final.load_state_dict({k.removeprefix("policy."): v for k, v in state["net"].items() if k.startswith("policy.")})
    start, _ = load_policy(layout.sft_checkpoint(cfg, "add", 0))
    for name, model in (("start", start), ("final", final)):
        expected = carry_probe.carry_entropy(carry_probe.answer_entropy(model, task, pairs).numpy(), carry)
        got = written[written["checkpoint"] == name]
        assert got["entropy"].tolist() == [row["entropy"] for row in expected]  # bit for bit
        assert got["tokens"].tolist() == [row["tokens"] for row in expected]
    assert analysis.carry_means(written[written["checkpoint"] == "final"])["carry_gap"] == pytest.approx(
        analysis.carry_means(expected)["carry_gap"], abs=0
    )
