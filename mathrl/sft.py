"""Supervised warm-up: teach the task until held-out greedy accuracy enters a band.

RL from a random policy sees only zero rewards (every group homogeneous, every advantage
zero: lab 04's vanishing gradient), so each task is first trained with cross-entropy on its
answer tokens (prompt positions masked out of the loss) and stopped as soon as greedy
accuracy on the validation split reaches the lower end of the band, or at the step cap.
The stopping rule never reads the test set that every RL run is later scored on (it would
stop on a lucky draw of exactly those problems); the test accuracy is measured once, at
the end. The checkpoint is where RL starts and the reference policy of the KL penalty.

`run_starts` continues a task's warm-up past its band and saves a checkpoint each time
validation accuracy first reaches one of the configured `starts` (the system study's RL runs
start from each), and from every start it trains the supervised control: the same
cross-entropy, continued for as many problems as an RL run samples, once per control seed.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

import mathrl
from mathrl import snapshot
from mathrl.atomic import atomic_write
from mathrl.console import duration
from mathrl.distributed import pick_device
from mathrl.errors import ConfigError
from mathrl.evaluation import first_mistakes, greedy_correct
from mathrl.layout import problems_file, sft_checkpoint
from mathrl.model import GPT, GPTConfig, gpt_config
from mathrl.optim import make_optimizer
from mathrl.tasks import VOCAB_SIZE, Task, read_problems, task_of


def load_policy(path: Path) -> tuple[GPT, dict]:
    """A policy from a warm-up checkpoint (written by `run_sft`), and the checkpoint."""
    if not Path(path).is_file():
        raise ConfigError(f"init: checkpoint {path} does not exist (run `mathrl sft` for the task first)")
    ckpt = snapshot.decode(Path(path).read_bytes(), str(path))
    model = GPT(GPTConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    return model, ckpt


def sft_batch(task: Task, pairs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets for teacher forcing; only answer tokens carry a loss."""
    seq = torch.cat([task.encode_prompts(pairs[:, 0], pairs[:, 1]), task.encode_answers(pairs[:, 0], pairs[:, 1])], 1)
    x, y = seq[:, :-1], seq[:, 1:].clone()  # (B, T-1)
    y[:, : task.prompt_len - 1] = -100  # targets before the '=' are prompt tokens
    return x, y


def answer_loss(model, task: Task, pairs: torch.Tensor, device) -> torch.Tensor:
    """The cross-entropy of `sft_batch`'s teacher forcing on `pairs`, equal up to float rounding, computing the last
    block only at the positions that predict answer tokens (`GPT.forward_shared` with one answer per prompt): about
    a fifth fewer FLOPs on this project's tasks, whose prompts are most of each sequence."""
    answers = task.encode_answers(pairs[:, 0], pairs[:, 1]).to(device)
    logits = model.forward_shared(task.encode_prompts(pairs[:, 0], pairs[:, 1]).to(device), answers, 1)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), answers.reshape(-1))


def supervised_step(
    model, opt, task: Task, train: torch.Tensor, batch_size: int, gen: torch.Generator, device,
    answers_only: bool = False,
) -> float:  # fmt: skip
    """One cross-entropy step on `batch_size` training problems drawn with `gen`; its loss. answers_only: the loss
    by `answer_loss` (the supervised controls); the warm-ups keep the full forward, so that their checkpoints, where
    every RL run starts, stay bit for bit what they were."""
    pairs = train[torch.randint(len(train), (batch_size,), generator=gen)]
    if answers_only:
        loss = answer_loss(model, task, pairs, device)
    else:
        x, y = sft_batch(task, pairs)
        logits = model(x.to(device))
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.to(device).reshape(-1), ignore_index=-100)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def run_sft(cfg: dict, task_name: str, out_dir: Path, log=print) -> dict:
    """Train the warm-up model for a task; write model.pt and summary.json to out_dir."""
    s, task = cfg["sft"][task_name], task_of(cfg, task_name)
    train = read_problems(problems_file(cfg, task_name, "train"), task)
    no_val = torch.zeros((0, 2), dtype=torch.long)
    val = read_problems(problems_file(cfg, task_name, "val"), task) if cfg["tasks"][task_name]["n_val"] else no_val
    val = val[: s["eval_size"]] if s["eval_size"] else val
    test = read_problems(problems_file(cfg, task_name, "test"), task)
    device = pick_device(s["device"])
    torch.manual_seed(s["seed"])
    gen = torch.Generator().manual_seed(s["seed"])
    model = GPT(gpt_config(s["preset"], VOCAB_SIZE, task.seq_len)).to(device)
    opt = make_optimizer(model.parameters(), "adamw", lr=s["lr"], weight_decay=s["weight_decay"], betas=(0.9, 0.99))
    lo, hi = s["band"]
    history, val_acc, step, t0 = [], math.nan, 0, time.perf_counter()
    rule = f"until validation accuracy >= {lo:.2f}" if len(val) else f"for {s['max_steps']} steps (no validation split)"
    log(f"sft {task_name}: {model.num_params() / 1e6:.2f}M parameters, preset {s['preset']}, {rule}")
    while step < s["max_steps"]:
        step += 1
        loss = supervised_step(model, opt, task, train, s["batch_size"], gen, device)
        if len(val) and (step % s["eval_every"] == 0 or step == s["max_steps"]):
            val_acc = float(greedy_correct(model, task, val, device).float().mean())
            history.append({"step": step, "loss": loss, "val_accuracy": val_acc})
            pace = ""
            if len(history) == 1 and step < s["max_steps"]:  # the first reading: how long it may still take
                left = (time.perf_counter() - t0) / step * (s["max_steps"] - step)
                pace = f" | at most {duration(left)} more (max_steps {s['max_steps']}; it stops on entering the band)"
            log(f"sft {task_name} step {step} | loss {loss:.4f} | validation accuracy {val_acc:.3f}{pace}")
            if val_acc >= lo:
                break
    wall = time.perf_counter() - t0
    acc = float(greedy_correct(model, task, test, device).float().mean())
    log(f"sft {task_name} stopped at step {step} | test accuracy {acc:.3f} ({len(test)} held-out problems)")
    mistakes = first_mistakes(model, task, test, device)
    judged = val_acc if len(val) else acc
    summary = {
        "task": task_name, "task_config": cfg["tasks"][task_name], "settings": s, "steps": step,
        "eval_accuracy": acc, "val_accuracy": val_acc, "n_test": len(test), "n_val": len(val),
        "band": [lo, hi], "in_band": lo <= judged <= hi, "reached": judged >= lo, "n_params": model.num_params(),
        "model": asdict(model.config),
        "wall_seconds": wall, "history": history, "first_mistakes": mistakes, "versions": mathrl.versions(),
    }  # fmt: skip
    if not summary["in_band"]:
        log(
            f"warning: sft {task_name} ended at {'validation' if len(val) else 'test'} accuracy {judged:.3f}, outside"
            f" the band [{lo}, {hi}]"
        )
    for line in mistakes:
        log(f"  mistake: {line}")
    out_dir = Path(out_dir)
    state = {
        "model_config": asdict(model.config),
        "model": model.state_dict(),
        "task": task_name,
        "eval_accuracy": acc,
        "steps": step,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(out_dir / "model.pt", snapshot.encode(state))
    atomic_write(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    if math.isnan(acc):
        raise RuntimeError(f"sft {task_name}: evaluation returned NaN")
    return summary


# ----------------------------------------------------------------------------- starts and controls
def start_name(threshold: float) -> str:
    """A start's file stem: `start_70` for 0.70 validation accuracy."""
    return f"start_{round(100 * threshold)}"


def run_starts(cfg: dict, task_name: str, out_dir: Path, log=print) -> dict:
    """From the warm-up checkpoint (the band's start): the checkpoints at each configured
    validation accuracy, then per start and control seed the supervised control; starts.json."""
    s, task = cfg["sft"][task_name], task_of(cfg, task_name)
    if not cfg["tasks"][task_name]["n_val"]:
        raise ConfigError(
            f"sft.{task_name}.starts: task {task_name} has no validation split (n_val 0) to pick starts on"
        )
    train = read_problems(problems_file(cfg, task_name, "train"), task)
    val = read_problems(problems_file(cfg, task_name, "val"), task)
    val = val[: s["eval_size"]] if s["eval_size"] else val
    test = read_problems(problems_file(cfg, task_name, "test"), task)
    device = pick_device(s["device"])
    band_path = sft_checkpoint(cfg, task_name)
    model, ckpt = load_policy(band_path)
    model.to(device)
    t0 = time.process_time()

    def accuracy(m, pairs) -> float:
        return float(greedy_correct(m, task, pairs, device).float().mean())

    starts = [{"start": name_band(s), "threshold": s["band"][0], "path": str(band_path),
               "sft_steps": ckpt.get("steps", 0),
               "continued_steps": 0, "val_accuracy": accuracy(model, val), "test_accuracy": accuracy(model, test),
               "reached": True}]  # fmt: skip
    # Continue the warm-up (its LR, batch and weight decay; a fresh optimizer, seeded batches) through each threshold.
    torch.manual_seed(s["seed"])
    gen = torch.Generator().manual_seed(s["seed"] + 1)
    opt = make_optimizer(model.parameters(), "adamw", lr=s["lr"], weight_decay=s["weight_decay"], betas=(0.9, 0.99))
    step, out_dir = 0, Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for threshold in sorted(s["starts"]):
        val_acc = math.nan
        while step < s["starts_max_steps"]:
            step += 1
            supervised_step(model, opt, task, train, s["batch_size"], gen, device)
            if step % s["starts_eval_every"] == 0:
                val_acc = accuracy(model, val)
                if val_acc >= threshold:
                    break
        val_acc = accuracy(model, val) if math.isnan(val_acc) else val_acc
        path = out_dir / f"{start_name(threshold)}.pt"
        state = {
            "model_config": asdict(model.config),
            "model": model.state_dict(),
            "task": task_name,
            "steps": ckpt.get("steps", 0) + step,
        }
        atomic_write(path, snapshot.encode(state))
        row = {"start": start_name(threshold), "threshold": threshold, "path": str(path),
               "sft_steps": ckpt.get("steps", 0) + step,
               "continued_steps": step, "val_accuracy": val_acc, "test_accuracy": accuracy(model, test),
               "reached": val_acc >= threshold}  # fmt: skip
        starts.append(row)
        log(
            f"sft {task_name} {row['start']}: step {row['sft_steps']} | validation accuracy {val_acc:.3f} | test"
            f" accuracy {row['test_accuracy']:.3f}"
            + ("" if row["reached"] else f" (starts_max_steps {s['starts_max_steps']} reached first)")
        )
    warm_seconds = time.process_time() - t0
    controls = [
        control_row(cfg, task_name, start, seed, train, val, test, device)
        for start in starts
        for seed in s["control_seeds"]
    ]
    for start in starts:
        finals = [c["final_test"] for c in controls if c["start"] == start["start"]]
        if finals:
            log(
                f"sft {task_name} control from {start['start']}: test accuracy {start['test_accuracy']:.3f} ->"
                f" {sum(finals) / len(finals):.3f} (mean of {len(finals)} seeds, {s['control_steps']} steps of"
                f" {s['control_batch_size']})"
            )
    summary = {"task": task_name, "settings": s, "starts": starts, "controls": controls, "n_val": len(val),
               "n_test": len(test),
               "warm_up_cpu_seconds": warm_seconds, "control_cpu_seconds": time.process_time() - t0 - warm_seconds,
               "versions": mathrl.versions()}  # fmt: skip
    atomic_write(out_dir / "starts.json", json.dumps(summary, indent=2) + "\n")
    return summary


def name_band(s: dict) -> str:
    return start_name(s["band"][0])


def control_row(cfg: dict, task_name: str, start: dict, seed: int, train, val, test, device) -> dict:
    """The supervised control from one start: the warm-up's cross-entropy at its LR, for the
    configured steps and batch (an RL run's samples), a fresh optimizer, batches drawn by `seed`."""
    s, task = cfg["sft"][task_name], task_of(cfg, task_name)
    model, _ = load_policy(Path(start["path"]))
    model.to(device)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = make_optimizer(model.parameters(), "adamw", lr=s["lr"], weight_decay=s["weight_decay"], betas=(0.9, 0.99))
    for _ in range(s["control_steps"]):
        supervised_step(model, opt, task, train, s["control_batch_size"], gen, device, answers_only=True)
    final_test = float(greedy_correct(model, task, test, device).float().mean())
    final_val = float(greedy_correct(model, task, val, device).float().mean())
    return {"start": start["start"], "seed": seed, "initial_test": start["test_accuracy"], "final_test": final_test,
            "initial_val": start["val_accuracy"], "final_val": final_val, "steps": s["control_steps"],
            "samples": s["control_steps"] * s["control_batch_size"]}  # fmt: skip
