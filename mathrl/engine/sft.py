"""Supervised warm-ups: teach the task until validation accuracy enters a band, several times over.

RL from a random policy sees only zero rewards (every group homogeneous, every advantage
zero: lab 04's vanishing gradient), so each task is first trained with cross-entropy on its
answer tokens and stopped as validation accuracy enters the band. Each task has
`sft.TASK.warmups` independent warm-ups (warm-up k: its own initialisation and batches,
seeded `seed + k`, in `results/sft/TASK/wK/`): every RL run starts from one of them (its
seed's, `seed mod warmups`), so a verdict over runs spread across warm-ups speaks of the
setting, not of one checkpoint.

The stopping rule reads the validation split, never the test set every RL run is later
scored on (the test accuracy is measured once, at the end). Where accuracy climbs fast
(addition: from 10% to 32% in 25 steps of 64), a reading every `eval_every` steps would
overshoot the band's lower end by a step function of the float path, so the warm-up keeps
its state every `fine_every` steps since the last reading, and when a reading enters the
band it goes back to the first of those states that is in the band: the checkpoint lies at
most `fine_every` steps past the crossing. A warm-up snapshots itself at each reading, so
after Ctrl-C or a kill the same command resumes it and ends on the same checkpoint.

`run_starts` continues one warm-up past its band and saves a checkpoint each time validation
accuracy first reaches one of the configured `starts`, and from every start it trains the
supervised control: the same cross-entropy, continued for as many problems as an RL run
samples, once per control seed.
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

import mathrl
from mathrl.engine import snapshot
from mathrl.engine.distributed import pick_device
from mathrl.engine.evaluation import first_mistakes, greedy_correct
from mathrl.engine.model import GPT, GPTConfig, gpt_config
from mathrl.engine.optim import make_optimizer
from mathrl.engine.tasks import VOCAB_SIZE, Task, read_problems, task_of
from mathrl.pipeline.atomic import atomic_write
from mathrl.pipeline.config import config_hash
from mathrl.pipeline.console import duration
from mathrl.pipeline.errors import ConfigError
from mathrl.pipeline.layout import SNAPSHOT_FILE, problems_file, sft_checkpoint

# the keys of a task's sft block that its warm-ups' checkpoints do not depend on (the starts job's)
STARTS_KEYS = (
    "starts",
    "starts_max_steps",
    "starts_eval_every",
    "control_steps",
    "control_batch_size",
    "control_seeds",
)


def warmup_seed(s: dict, warmup: int) -> int:
    """The seed of a task's warm-up k (initialisation and batches): the block's seed + k."""
    return int(s["seed"]) + int(warmup)


def warmup_settings(s: dict) -> dict:
    """The settings a warm-up's checkpoint depends on (a change to any retrains it; the starts' keys do not)."""
    return {key: value for key, value in s.items() if key not in STARTS_KEYS and key != "warmups"}


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
    model, opt, task: Task, train: torch.Tensor, batch_size: int, gen: torch.Generator, device
) -> float:
    """One cross-entropy step (`answer_loss`) on `batch_size` training problems drawn with `gen`; its loss."""
    pairs = train[torch.randint(len(train), (batch_size,), generator=gen)]
    loss = answer_loss(model, task, pairs, device)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def first_in_band(states: list[tuple[int, dict]], accuracy, low: float) -> tuple[int, dict, float] | None:
    """The earliest (step, state, accuracy) of `states` (in step order) whose accuracy reaches `low`; None if none
    does. `accuracy(state)` measures one state; states after the first in the band are never measured."""
    for step, state in states:
        acc = accuracy(state)
        if acc >= low:
            return step, state, acc
    return None


class Warmup:
    """One warm-up's training state: what a snapshot holds, and the loop that advances it."""

    def __init__(self, cfg: dict, task_name: str, warmup: int, out_dir: Path, log=print):
        s = cfg["sft"][task_name]
        self.s, self.task_name, self.warmup, self.log = s, task_name, int(warmup), log
        self.task = task_of(cfg, task_name)
        self.train_pairs = read_problems(problems_file(cfg, task_name, "train"), self.task)
        val = torch.zeros((0, 2), dtype=torch.long)
        if cfg["tasks"][task_name]["n_val"]:
            val = read_problems(problems_file(cfg, task_name, "val"), self.task)
        self.val = val[: s["eval_size"]] if s["eval_size"] else val
        self.test = read_problems(problems_file(cfg, task_name, "test"), self.task)
        self.device = pick_device(s["device"])
        self.seed = warmup_seed(s, warmup)
        self.identity = config_hash({"task": cfg["tasks"][task_name], "sft": warmup_settings(s), "warmup": warmup})
        torch.manual_seed(self.seed)
        self.gen = torch.Generator().manual_seed(self.seed)
        self.model = GPT(gpt_config(s["preset"], VOCAB_SIZE, self.task.seq_len)).to(self.device)
        self.opt = make_optimizer(
            self.model.parameters(), "adamw", lr=s["lr"], weight_decay=s["weight_decay"], betas=(0.9, 0.99)
        )
        self.step, self.history, self.seconds = 0, [], 0.0
        self.out_dir = Path(out_dir)
        self.snapshot_path = self.out_dir / SNAPSHOT_FILE

    # ---- snapshots ----------------------------------------------------------------------
    def state(self) -> dict:
        return {
            "run_id": f"warm-up {self.warmup} of {self.task_name}",
            "identity": self.identity,
            "step": self.step,
            "model": self.model.state_dict(),
            "opt": self.opt.state_dict(),
            "gen": self.gen.get_state(),
            "history": self.history,
            "seconds": self.seconds,
        }

    def resume(self) -> bool:
        """Continue from this warm-up's snapshot, if it has one of these settings (else an error naming it)."""
        st = snapshot.load(self.snapshot_path)
        if st is None:
            return False
        if st.get("identity") != self.identity:
            raise ConfigError(
                f"{self.snapshot_path}: a snapshot of warm-up {self.warmup} of {self.task_name} trained with other "
                "settings; remove it (or the warm-up's directory) to start over"
            )
        self.model.load_state_dict(st["model"])
        self.opt.load_state_dict(st["opt"])
        self.gen.set_state(st["gen"])
        self.step, self.history, self.seconds = int(st["step"]), list(st["history"]), float(st["seconds"])
        self.log(f"sft {self.task_name} w{self.warmup}: resuming from its snapshot at step {self.step}")
        return True

    # ---- the loop -------------------------------------------------------------------------
    def accuracy(self, pairs: torch.Tensor) -> float:
        return float(greedy_correct(self.model, self.task, pairs, self.device).float().mean())

    def state_accuracy(self, state: dict) -> float:
        """Validation accuracy of a stored model state (the current weights put back afterwards)."""
        current = copy.deepcopy(self.model.state_dict())
        self.model.load_state_dict(state)
        try:
            return self.accuracy(self.val)
        finally:
            self.model.load_state_dict(current)

    def train(self) -> float:
        """Train until a validation reading enters the band (then back to the first stored state in it) or to the
        step cap; returns the validation accuracy of the weights it ends on (NaN without a validation split)."""
        s, low = self.s, self.s["band"][0]
        window: list[tuple[int, dict]] = []  # the states every fine_every steps since the last reading
        t0 = time.perf_counter() - self.seconds
        while self.step < s["max_steps"]:
            self.step += 1
            loss = supervised_step(
                self.model, self.opt, self.task, self.train_pairs, s["batch_size"], self.gen, self.device
            )
            reading = self.step % s["eval_every"] == 0 or self.step == s["max_steps"]
            if len(self.val) and not reading and self.step % s["fine_every"] == 0:
                window.append((self.step, copy.deepcopy(self.model.state_dict())))
            if not reading:
                continue
            self.seconds = time.perf_counter() - t0
            if not len(self.val):
                self.save()
                continue
            val_acc = self.accuracy(self.val)
            self.history.append({"step": self.step, "loss": loss, "val_accuracy": val_acc})
            self.log(
                f"sft {self.task_name} w{self.warmup} step {self.step} | loss {loss:.4f} | validation accuracy "
                f"{val_acc:.3f}{self.pace(t0)}"
            )
            if val_acc >= low:
                found = first_in_band(window, self.state_accuracy, low)
                if found is not None:
                    self.step, state, val_acc = found
                    self.model.load_state_dict(state)
                    self.history.append({"step": self.step, "loss": math.nan, "val_accuracy": val_acc, "fine": True})
                    self.log(
                        f"sft {self.task_name} w{self.warmup}: back to step {self.step}, the first state every "
                        f"{s['fine_every']} steps in the band (validation accuracy {val_acc:.3f})"
                    )
                self.seconds = time.perf_counter() - t0
                return val_acc
            window = []
            self.save()
        self.seconds = time.perf_counter() - t0
        return self.history[-1]["val_accuracy"] if self.history else math.nan

    def pace(self, t0: float) -> str:
        """At the first reading: how long the warm-up may still take."""
        if len(self.history) != 1 or self.step >= self.s["max_steps"]:
            return ""
        left = (time.perf_counter() - t0) / self.step * (self.s["max_steps"] - self.step)
        return f" | at most {duration(left)} more (max_steps {self.s['max_steps']}; it stops on entering the band)"

    def save(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        snapshot.save(self.snapshot_path, self.state())


def run_sft(cfg: dict, task_name: str, out_dir: Path, warmup: int = 0, log=print) -> dict:
    """Train warm-up `warmup` of a task (resuming from its snapshot); write model.pt and summary.json to out_dir."""
    s = cfg["sft"][task_name]
    if not 0 <= warmup < s["warmups"]:
        raise ConfigError(
            f"--warmup {warmup}: sft.{task_name}.warmups is {s['warmups']}; allowed: 0..{s['warmups'] - 1}"
        )
    w = Warmup(cfg, task_name, warmup, out_dir, log)
    lo, hi = s["band"]
    rule = (
        f"until validation accuracy >= {lo:.2f}" if len(w.val) else f"for {s['max_steps']} steps (no validation split)"
    )
    if not w.resume():
        log(
            f"sft {task_name} w{warmup}: {w.model.num_params() / 1e6:.2f}M parameters, preset {s['preset']}, seed "
            f"{w.seed}, {rule}"
        )
    val_acc = w.train()
    acc = w.accuracy(w.test)
    log(
        f"sft {task_name} w{warmup} stopped at step {w.step} | test accuracy {acc:.3f} "
        f"({len(w.test)} held-out problems)"
    )
    mistakes = first_mistakes(w.model, w.task, w.test, w.device)
    judged = val_acc if len(w.val) else acc
    summary = {
        "task": task_name,
        "warmup": warmup,
        "seed": w.seed,
        "task_config": cfg["tasks"][task_name],
        "settings": warmup_settings(s),
        "steps": w.step,
        "eval_accuracy": acc,
        "val_accuracy": val_acc,
        "n_test": len(w.test),
        "n_val": len(w.val),
        "band": [lo, hi],
        "in_band": lo <= judged <= hi,
        "reached": judged >= lo,
        "n_params": w.model.num_params(),
        "model": asdict(w.model.config),
        "wall_seconds": w.seconds,
        "history": w.history,
        "first_mistakes": mistakes,
        "versions": mathrl.versions(),
    }
    if not summary["in_band"]:
        log(
            f"warning: sft {task_name} w{warmup} ended at {'validation' if len(w.val) else 'test'} accuracy "
            f"{judged:.3f}, outside the band [{lo}, {hi}]"
        )
    for line in mistakes:
        log(f"  mistake: {line}")
    state = {
        "model_config": asdict(w.model.config),
        "model": w.model.state_dict(),
        "task": task_name,
        "warmup": warmup,
        "eval_accuracy": acc,
        "steps": w.step,
    }
    atomic_write(w.out_dir / "model.pt", snapshot.encode(state))
    atomic_write(w.out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    for p in (w.snapshot_path, w.snapshot_path.with_name(w.snapshot_path.name + ".prev")):
        p.unlink(missing_ok=True)  # the checkpoint is written: nothing left to resume
    if math.isnan(acc):
        raise RuntimeError(f"sft {task_name} w{warmup}: evaluation returned NaN")
    return summary


# ----------------------------------------------------------------------------- starts and controls
def start_name(threshold: float) -> str:
    """A start's file stem: `start_70` for 0.70 validation accuracy."""
    return f"start_{round(100 * threshold)}"


def name_band(s: dict) -> str:
    return start_name(s["band"][0])


def start_row(
    name: str, threshold: float, path: Path, sft_steps: int, continued: int, val_acc: float, test_acc: float
) -> dict:
    """starts.json's record of one start: reached when its validation accuracy is at its threshold."""
    return {
        "start": name,
        "threshold": threshold,
        "path": str(path),
        "sft_steps": sft_steps,
        "continued_steps": continued,
        "val_accuracy": val_acc,
        "test_accuracy": test_acc,
        "reached": val_acc >= threshold,
    }


def run_starts(cfg: dict, task_name: str, out_dir: Path, warmup: int = 0, log=print) -> dict:
    """From warm-up `warmup`'s checkpoint (the band's start): the checkpoints at each configured
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
    band_path = sft_checkpoint(cfg, task_name, warmup)
    model, ckpt = load_policy(band_path)
    model.to(device)
    t0 = time.process_time()

    def accuracy(m, pairs) -> float:
        return float(greedy_correct(m, task, pairs, device).float().mean())

    band_val = accuracy(model, val)
    starts = [
        start_row(name_band(s), s["band"][0], band_path, ckpt.get("steps", 0), 0, band_val, accuracy(model, test))
    ]
    starts[0]["reached"] = True  # the warm-up's own checkpoint: in its band by construction
    # Continue the warm-up (its LR, batch and weight decay; a fresh optimizer, batches of a seed of their own).
    seed = warmup_seed(s, warmup)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(continuation_seed(seed))
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
        state = {"model_config": asdict(model.config), "model": model.state_dict(), "task": task_name}
        atomic_write(path, snapshot.encode({**state, "warmup": warmup, "steps": ckpt.get("steps", 0) + step}))
        row = start_row(
            start_name(threshold), threshold, path, ckpt.get("steps", 0) + step, step, val_acc, accuracy(model, test)
        )
        starts.append(row)
        log(
            f"sft {task_name} w{warmup} {row['start']}: step {row['sft_steps']} | validation accuracy {val_acc:.3f} |"
            f" test accuracy {row['test_accuracy']:.3f}"
            + ("" if row["reached"] else f" (starts_max_steps {s['starts_max_steps']} reached first)")
        )
    warm_seconds = time.process_time() - t0
    controls = [
        control_row(cfg, task_name, warmup, start, seed, train, val, test, device)
        for start in starts
        for seed in s["control_seeds"]
    ]
    log_controls(s, f"sft {task_name} w{warmup}", starts, controls, log)
    summary = {
        "task": task_name,
        "warmup": warmup,
        "settings": s,
        "starts": starts,
        "controls": controls,
        "n_val": len(val),
        "n_test": len(test),
        "warm_up_cpu_seconds": warm_seconds,
        "control_cpu_seconds": time.process_time() - t0 - warm_seconds,
        "versions": mathrl.versions(),
    }
    atomic_write(out_dir / "starts.json", json.dumps(summary, indent=2) + "\n")
    return summary


def log_controls(s: dict, name: str, starts: list[dict], controls: list[dict], log) -> None:
    """One line per start: its test accuracy, then the mean of its controls' final test accuracy."""
    for start in starts:
        finals = [c["final_test"] for c in controls if c["start"] == start["start"]]
        if finals:
            log(
                f"{name} control from {start['start']}: test accuracy {start['test_accuracy']:.3f}"
                f" -> {sum(finals) / len(finals):.3f} (mean of {len(finals)} seeds, {s['control_steps']} steps of"
                f" {s['control_batch_size']})"
            )


def continuation_seed(seed: int) -> int:
    """The batches' seed of a warm-up's continuation past its band: apart from every warm-up's own seed."""
    return 1_000_003 + seed


def control_seed(warmup: int, seed: int) -> int:
    """The batches' seed of control `seed` from a start of warm-up `warmup`: controls of different warm-ups draw
    different batches, as their RL runs draw different prompts."""
    return 2_000_003 + 1000 * warmup + seed


def control_row(cfg: dict, task_name: str, warmup: int, start: dict, seed: int, train, val, test, device) -> dict:
    """The supervised control from one start: the warm-up's cross-entropy at its LR, for the
    configured steps and batch (an RL run's samples), a fresh optimizer, batches drawn by `seed`."""
    s, task = cfg["sft"][task_name], task_of(cfg, task_name)
    model, _ = load_policy(Path(start["path"]))
    model.to(device)
    torch.manual_seed(control_seed(warmup, seed))
    gen = torch.Generator().manual_seed(control_seed(warmup, seed))
    opt = make_optimizer(model.parameters(), "adamw", lr=s["lr"], weight_decay=s["weight_decay"], betas=(0.9, 0.99))
    for _ in range(s["control_steps"]):
        supervised_step(model, opt, task, train, s["control_batch_size"], gen, device)
    final_test = float(greedy_correct(model, task, test, device).float().mean())
    final_val = float(greedy_correct(model, task, val, device).float().mean())
    return {
        "start": start["start"],
        "warmup": warmup,
        "seed": seed,
        "initial_test": start["test_accuracy"],
        "final_test": final_test,
        "initial_val": start["val_accuracy"],
        "final_val": final_val,
        "steps": s["control_steps"],
        "samples": s["control_steps"] * s["control_batch_size"],
    }
