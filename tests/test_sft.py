"""The warm-up's stopping rule reads the validation split, never the test set it is scored on."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from mathrl.engine.sft import first_in_band, load_policy
from mathrl.pipeline.cli import main
from tests.conftest import TINY, write_config


def warm_up(tmp_path, **task):
    d = copy.deepcopy(TINY)
    d["results"] = str(tmp_path / "results")
    d["tasks"]["mul"].update(task)
    d["sft"]["mul"] = {"preset": "small", "max_steps": 30, "eval_every": 10, "band": [0.0, 1.0], "device": "cpu"}
    path = write_config(tmp_path / "c.yaml", d)
    assert main(["problems", "--config", str(path), "--task", "mul"]) == 0
    assert main(["sft", "--config", str(path), "--task", "mul"]) == 0
    return json.loads((tmp_path / "results" / "sft" / "mul" / "w0" / "summary.json").read_text())


def test_the_band_is_read_on_the_validation_split(tmp_path, capsys):
    s = warm_up(tmp_path, n_val=20)  # band low 0: the first reading enters it, and so does the first stored state
    first = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("sft mul w0 step 10 | "))
    assert " | at most " in first and "more (max_steps 30;" in first  # how long it may still take, said at once
    assert s["steps"] == 5 and s["n_val"] == 20 and s["n_test"] == 20  # back to step 5, fine_every's first state
    assert [h["step"] for h in s["history"]] == [10, 5] and s["history"][1]["fine"]
    assert 0 <= s["eval_accuracy"] <= 1  # the test set, scored once after the stop


def test_without_a_validation_split_the_warm_up_runs_to_its_cap(tmp_path):
    s = warm_up(tmp_path, n_val=0)
    assert s["steps"] == 30 and s["n_val"] == 0 and s["history"] == [] and s["val_accuracy"] != s["val_accuracy"]  # NaN


def test_starts_and_controls_then_a_run_from_a_start(tmp_path):
    """`--starts` saves a checkpoint per threshold (where the cap leaves it when never reached) and
    one supervised control per start and seed; a run's `init: start_PCT` trains from that checkpoint
    and `eval_split: val` scores the validation split."""
    d = copy.deepcopy(TINY)
    d["results"] = str(tmp_path / "results")
    d["tasks"]["mul"]["n_val"] = 20
    d["sft"]["mul"] = {"preset": "small", "max_steps": 20, "eval_every": 10, "band": [0.0, 1.0], "device": "cpu",
                       "starts": [0.99], "starts_max_steps": 20, "control_steps": 2, "control_batch_size": 8,
                       "control_seeds": [0, 1]}  # fmt: skip
    path = write_config(tmp_path / "c.yaml", d)
    assert main(["problems", "--config", str(path), "--task", "mul"]) == 0
    assert main(["sft", "--config", str(path), "--task", "mul"]) == 0
    assert main(["sft", "--config", str(path), "--task", "mul", "--starts"]) == 0
    out = tmp_path / "results" / "sft" / "mul" / "w0" / "starts"
    s = json.loads((out / "starts.json").read_text())
    assert [x["start"] for x in s["starts"]] == ["start_0", "start_99"] and (out / "start_99.pt").is_file()
    band, far = s["starts"]
    assert band["continued_steps"] == 0 and far["continued_steps"] == 20 and far["sft_steps"] == band["sft_steps"] + 20
    assert far["reached"] == (far["val_accuracy"] >= 0.99)  # 20 steps: saved where the cap left it, said so
    assert [(c["start"], c["seed"]) for c in s["controls"]] == [
        ("start_0", 0),
        ("start_0", 1),
        ("start_99", 0),
        ("start_99", 1),
    ]
    assert all(
        c["samples"] == 16
        and c["initial_test"] == next(x["test_accuracy"] for x in s["starts"] if x["start"] == c["start"])
        for c in s["controls"]
    )
    argv = ["train", "--config", str(path), "--run-id", "from_start", "task=mul", "init=start_99", "eval_split=val",
            "steps=1",
            "batch_size=8", "group_size=4", "eval_every=1", "eval_size=0"]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads((tmp_path / "results" / "runs" / "from_start" / "summary.json").read_text())
    assert summary["resolved"]["init"].endswith("sft/mul/w0/starts/start_99.pt") and summary["resolved"]["n_eval"] == 20
    assert summary["initial"]["eval_accuracy"] == pytest.approx(
        far["val_accuracy"]
    )  # the checkpoint, on the validation split


def test_a_warm_up_by_hand_runs_on_the_pipelines_thread_count(tmp_path, monkeypatch):
    """The thread count changes float sums: `mathrl sft` without --threads trains on pipeline.threads_sft, as the
    pipeline's job does, and gives the calling process its own thread count back."""
    import torch

    import mathrl.engine.sft
    import mathrl.pipeline.cli

    seen = []
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # a launcher's share would stand instead
    monkeypatch.setattr(mathrl.engine.sft, "run_sft", lambda cfg, task, out, k: seen.append(torch.get_num_threads()))
    monkeypatch.setattr(
        mathrl.pipeline.cli, "_check_problems", lambda cfg, task: None
    )  # no problem files: run_sft reads none
    d = copy.deepcopy(TINY)
    d["results"] = str(tmp_path / "results")
    before = torch.get_num_threads()
    path = write_config(tmp_path / "c.yaml", {**d, "pipeline": {"threads_sft": 1}})
    assert main(["sft", "--config", str(path), "--task", "mul"]) == 0
    assert main(["sft", "--config", str(path), "--task", "mul", "--threads", "2"]) == 0
    assert seen == [1, 2] and torch.get_num_threads() == before


@pytest.mark.parametrize("task_name", ["add", "mul"])
def test_the_controls_answer_only_loss_is_the_warm_ups_loss(task_name):
    """Computing the last block only where answer tokens are predicted changes the loss and its gradient by float
    rounding alone, on both tasks (their prompts and answers differ in length)."""
    import torch
    import torch.nn.functional as F

    from mathrl.engine.model import GPT, gpt_config
    from mathrl.engine.sft import answer_loss, sft_batch
    from mathrl.engine.tasks import VOCAB_SIZE, task_of
    from mathrl.pipeline.config import load_config

    task = task_of(load_config(), task_name)
    torch.manual_seed(0)
    model = GPT(gpt_config("small", VOCAB_SIZE, task.prompt_len + task.answer_len))
    top = 10**task.ndigit
    pairs = torch.stack([torch.randint(top, (64,)), torch.randint(top, (64,))], 1)

    def loss_and_grads(fn):
        model.zero_grad()
        loss = fn()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    def full():
        x, y = sft_batch(task, pairs)
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), ignore_index=-100)

    loss_full, grads_full = loss_and_grads(full)
    loss_answers, grads_answers = loss_and_grads(lambda: answer_loss(model, task, pairs, "cpu"))
    assert loss_answers == pytest.approx(float(loss_full), rel=1e-6)
    for g_full, g_answers in zip(grads_full, grads_answers, strict=True):
        assert torch.allclose(g_answers, g_full, rtol=1e-4, atol=1e-7)
    assert any(g.abs().max() > 0 for g in grads_full)  # the comparison is not of zeros


def test_the_warm_up_goes_back_to_the_first_stored_state_in_the_band():
    """Of the states kept since the last reading, the first in the band is where the warm-up ends; later ones are
    never measured, and none in the band leaves the reading's own state."""
    measured = []

    def accuracy(state):
        measured.append(state["step"])
        return state["acc"]

    states = [(s, {"step": s, "acc": a}) for s, a in ((5, 0.1), (10, 0.25), (15, 0.31), (20, 0.4))]
    step, state, acc = first_in_band(states, accuracy, 0.3)
    assert (step, acc) == (15, 0.31) and measured == [5, 10, 15]
    assert first_in_band(states[:2], accuracy, 0.3) is None


def multi_warm_up_config(tmp_path, **sft) -> Path:
    d = copy.deepcopy(TINY)
    d["results"] = str(tmp_path / "results")
    d["tasks"]["mul"]["n_val"] = 20
    d["sft"]["mul"] = {"preset": "small", "max_steps": 40, "eval_every": 10, "fine_every": 5, "band": [0.99, 1.0],
                       "device": "cpu", "warmups": 2, **sft}  # fmt: skip
    path = write_config(tmp_path / "c.yaml", d)
    assert main(["problems", "--config", str(path), "--task", "mul"]) == 0
    return path


def test_each_warm_up_is_seeded_apart_and_a_run_starts_from_its_seeds(tmp_path):
    path = multi_warm_up_config(tmp_path)
    assert main(["sft", "--config", str(path), "--task", "mul"]) == 0  # both warm-ups, one after the other
    root = tmp_path / "results" / "sft" / "mul"
    s0, s1 = (json.loads((root / f"w{k}" / "summary.json").read_text()) for k in (0, 1))
    assert (s0["warmup"], s0["seed"], s1["warmup"], s1["seed"]) == (0, 0, 1, 1)
    assert (root / "w0" / "model.pt").read_bytes() != (root / "w1" / "model.pt").read_bytes()
    assert not (root / "w0" / "snapshot.pt").exists()  # the checkpoint is written: nothing left to resume
    argv = ["train", "--config", str(path), "--run-id", "odd", "task=mul", "seed=3", "steps=1", "batch_size=8",
            "group_size=4", "eval_every=1", "eval_size=0"]  # fmt: skip
    assert main(argv) == 0
    summary = json.loads((tmp_path / "results" / "runs" / "odd" / "summary.json").read_text())
    assert summary["config"]["warmup"] == 1 and summary["resolved"]["init"].endswith("sft/mul/w1/model.pt")
    assert main(["sft", "--config", str(path), "--task", "mul", "--warmup", "2"]) == 2  # no third warm-up


def test_warm_ups_dealt_to_parallel_processes_end_on_the_checkpoints_of_one_process(tmp_path):
    """`--parallel 2` (DVC's stage of a task) trains each warm-up in a process of its own share, on the threads one
    process would use: the same checkpoints as one after the other (Snakemake's jobs)."""
    import torch

    checkpoints = {}
    for how in ("one", "two"):
        (tmp_path / how).mkdir()
        path = multi_warm_up_config(tmp_path / how)
        argv = ["sft", "--config", str(path), "--task", "mul", "--warmup", "1", "--warmup", "0"]
        assert main([*argv, *(["--parallel", "2"] if how == "two" else [])]) == 0
        root = tmp_path / how / "results" / "sft" / "mul"
        checkpoints[how] = [load_policy(root / f"w{k}" / "model.pt")[1] for k in (0, 1)]
    for one, two in zip(checkpoints["one"], checkpoints["two"], strict=True):
        assert one["model"].keys() == two["model"].keys()
        assert all(torch.equal(one["model"][key], two["model"][key]) for key in one["model"])
    assert main(["sft", "--config", str(path), "--task", "mul", "--parallel", "some"]) == 2  # neither K nor auto


def test_parallel_warm_ups_are_dealt_out_in_turn_with_the_same_arguments(tmp_path):
    from mathrl.pipeline.cli import build_parser, sft_shares

    args = build_parser().parse_args(["sft", "--config", "c.yaml", "--set", "x=1", "--task", "mul", "--parallel", "2"])
    cfg = {"pipeline": {"threads_sft": 1, "gpus_sft": 0}}
    shares = sft_shares(args, cfg, [0, 1, 2, 3, 4])
    head = [sys.executable, "-m", "mathrl", "sft", "--config=c.yaml", "--set=x=1", "--task", "mul", "--threads", "0"]
    assert shares == [[*head, "--warmup=0", "--warmup=2", "--warmup=4"], [*head, "--warmup=1", "--warmup=3"]]
    assert sft_shares(args, cfg, [3]) == []  # one warm-up: trained here
    args.parallel = "1"
    assert sft_shares(args, cfg, [0, 1]) == []


def test_a_killed_warm_up_resumes_to_the_same_checkpoint(tmp_path, monkeypatch):
    """A warm-up snapshots itself at each reading: stopped after its second, the same command resumes there and ends
    on the checkpoint an uninterrupted warm-up ends on, bit for bit."""
    import mathrl.engine.sft

    path = multi_warm_up_config(tmp_path, warmups=1)
    assert main(["sft", "--config", str(path), "--task", "mul"]) == 0
    w0 = tmp_path / "results" / "sft" / "mul" / "w0"
    whole = (w0 / "model.pt").read_bytes()
    for name in ("model.pt", "summary.json"):
        (w0 / name).unlink()
    saves, save = [], mathrl.engine.sft.Warmup.save

    def killed_after_two(self):
        save(self)
        saves.append(self.step)
        if len(saves) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(mathrl.engine.sft.Warmup, "save", killed_after_two)
    assert main(["sft", "--config", str(path), "--task", "mul"]) == 130  # Ctrl-C's exit status
    assert saves == [10, 20] and (w0 / "snapshot.pt").is_file() and not (w0 / "model.pt").exists()
    monkeypatch.setattr(mathrl.engine.sft.Warmup, "save", save)
    assert main(["sft", "--config", str(path), "--task", "mul"]) == 0
    assert (w0 / "model.pt").read_bytes() == whole
    summary = json.loads((w0 / "summary.json").read_text())
    assert [h["step"] for h in summary["history"]] == [10, 20, 30, 40]
