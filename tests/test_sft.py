"""The warm-up's stopping rule reads the validation split, never the test set it is scored on."""

from __future__ import annotations

import copy
import json

import pytest

from mathrl.cli import main
from tests.conftest import TINY, write_config


def warm_up(tmp_path, **task):
    d = copy.deepcopy(TINY)
    d["results"] = str(tmp_path / "results")
    d["tasks"]["mul"].update(task)
    d["sft"]["mul"] = {"preset": "small", "max_steps": 30, "eval_every": 10, "band": [0.0, 1.0], "device": "cpu"}
    path = write_config(tmp_path / "c.yaml", d)
    assert main(["problems", "--config", str(path), "--task", "mul"]) == 0
    assert main(["sft", "--config", str(path), "--task", "mul"]) == 0
    return json.loads((tmp_path / "results" / "sft" / "mul" / "summary.json").read_text())


def test_the_band_is_read_on_the_validation_split(tmp_path, capsys):
    s = warm_up(tmp_path, n_val=20)  # band low 0: the first validation reading stops it
    first = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("sft mul step 10 | "))
    assert " | at most " in first and "more (max_steps 30;" in first  # how long it may still take, said at once
    assert s["steps"] == 10 and s["n_val"] == 20 and s["n_test"] == 20
    assert [h["step"] for h in s["history"]] == [10] and "val_accuracy" in s["history"][0]
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
    out = tmp_path / "results" / "sft" / "mul" / "starts"
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
    assert summary["resolved"]["init"].endswith("sft/mul/starts/start_99.pt") and summary["resolved"]["n_eval"] == 20
    assert summary["initial"]["eval_accuracy"] == pytest.approx(
        far["val_accuracy"]
    )  # the checkpoint, on the validation split


def test_a_warm_up_by_hand_runs_on_the_pipelines_thread_count(tmp_path, monkeypatch):
    """The thread count changes float sums: `mathrl sft` without --threads trains on pipeline.threads_sft, as the
    pipeline's job does, and gives the calling process its own thread count back."""
    import torch

    import mathrl.sft

    seen = []
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # a launcher's share would stand instead
    monkeypatch.setattr(mathrl.sft, "run_sft", lambda cfg, task, out: seen.append(torch.get_num_threads()))
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

    from mathrl.config import load_config
    from mathrl.model import GPT, gpt_config
    from mathrl.sft import answer_loss, sft_batch
    from mathrl.tasks import VOCAB_SIZE, task_of

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
