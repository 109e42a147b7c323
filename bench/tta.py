"""Time to accuracy in a fresh process: `python -m bench.tta --task add --targets 0.95,0.99 --budget 600`.

The clock starts before anything exists: problem sets are generated, a warm-up model is
trained with cross-entropy until greedy accuracy on the validation split reaches
`--sft-until` (or its share of the budget runs out), then GRPO continues from it, evaluating every
`--eval-every` steps. For each target the record holds the wall second, phase and step of
the first evaluation at or above it, or null when the budget ended first; the accuracy
curve (seconds, phase, step, accuracy) comes with it, so a miss shows how far it got.

The warm-up's points are its validation readings (its stopping rule); GRPO's are on the
task's whole held-out test set (500 problems by default). Evaluation time counts, as a
user waiting for the figure would count it.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import tempfile
import time
from pathlib import Path

from bench.common import PRESETS, add_device_arg, add_threads_arg, apply_threads, emit, proc_info

NEVER = 10**9
TASKS = {"add": {"op": "add", "ndigit": 3, "n_train": 20000, "n_test": 500, "seed": 1234},
         "mul": {"op": "mul", "ndigit": 2, "n_train": 0, "n_test": 500, "seed": 1234}}  # fmt: skip
SFT_LINE = re.compile(r"step (\d+) \| loss \S+ \| validation accuracy ([0-9.]+)")


class OutOfTime(Exception):
    """The warm-up's share of the budget ran out (raised from its log callback)."""


def config(results: Path, task: str, args) -> dict:
    from mathrl.pipeline.config import complete

    return complete({
        "results": str(results),
        "tasks": {task: TASKS[task]},
        "sft": {task: {"preset": args.preset, "lr": args.sft_lr, "batch_size": args.sft_batch, "max_steps": NEVER,
                       "eval_every": args.sft_eval_every, "band": [args.sft_until, 1.0], "device": args.device}},
        "train": {"task": task, "algorithm": "grpo", "batch_size": args.batch, "group_size": 8, "lr": args.lr,
                  "kl_coef": args.kl_coef, "steps": NEVER, "eval_every": NEVER, "log_every": NEVER,
                  "snapshot_every": NEVER, "eval_size": 0, "device": args.device},
        "gradvar": {"tasks": [task]},
        "experiments": {},
    })  # fmt: skip


def run(args) -> dict:
    from mathrl.engine.distributed import Dist, pick_device
    from mathrl.engine.sft import run_sft
    from mathrl.engine.tasks import write_problem_splits
    from mathrl.engine.trainer import Trainer
    from mathrl.pipeline.config import run_settings
    from mathrl.pipeline.layout import sft_checkpoint
    from mathrl.pipeline.settings import RunSettings

    targets = sorted(args.targets)
    curve: list[dict] = []
    t0 = time.perf_counter()

    def elapsed() -> float:
        return time.perf_counter() - t0

    def record(phase: str, step: int, acc: float) -> None:
        curve.append({"seconds": elapsed(), "phase": phase, "step": step, "accuracy": acc})
        print(f"  {elapsed():7.1f} s  {phase} step {step}: held-out accuracy {acc:.3f}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="mathrl-bench-tta-") as tmp:
        results = Path(tmp) / "results"
        cfg = config(results, args.task, args)
        write_problem_splits(cfg, args.task)

        sft_deadline = args.budget * args.sft_share

        def sft_log(msg: str) -> None:
            m = SFT_LINE.search(msg)
            if m:
                record("warm-up", int(m[1]), float(m[2]))
                if elapsed() > sft_deadline and float(m[2]) < args.sft_until:  # a reading in the band ends it anyway
                    raise OutOfTime

        sft_done = True
        try:
            run_sft(cfg, args.task, sft_checkpoint(cfg, args.task).parent, log=sft_log)
        except OutOfTime:
            sft_done = False
        if sft_done and max(c["accuracy"] for c in curve) < targets[-1]:
            settings = run_settings(cfg, {"seed": 0})
            trainer = Trainer(
                cfg,
                "bench_tta",
                RunSettings.from_dict(settings),
                Path(tmp) / "run",
                Dist(device=pick_device(args.device)),
            )
            while elapsed() < args.budget:
                row = trainer.step()
                if trainer.step_no % args.eval_every == 0:
                    record("GRPO", trainer.step_no, trainer.evaluate(trainer.step_no, sampled=False)[0])
                    if curve[-1]["accuracy"] >= targets[-1]:
                        break
                if row.get("skipped"):
                    print("  warning: a non-finite update was skipped", file=sys.stderr)

    reached = {}
    for target in targets:
        hit = next((c for c in curve if c["accuracy"] >= target), None)
        reached[f"{target:g}"] = hit
    best = max(curve, key=lambda c: c["accuracy"]) if curve else None
    return {"task": args.task, "preset": args.preset, "device": args.device, "budget_s": args.budget,
            "targets": targets, "reached": reached, "best": best, "wall_s": elapsed(), "curve": curve,
            "warmup_finished": sft_done,
            "settings": {k: v for k, v in vars(args).items() if k != "targets"}}  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tta", description=__doc__.splitlines()[0])
    p.add_argument("--task", choices=sorted(TASKS), required=True)
    p.add_argument(
        "--targets", type=lambda s: [float(x) for x in s.split(",")], required=True, help="comma list, e.g. 0.95,0.99"
    )
    p.add_argument("--budget", type=float, default=600.0, help="wall seconds before giving up (default 600)")
    p.add_argument("--preset", choices=PRESETS, default="small")
    p.add_argument("--sft-until", type=float, default=0.9, help="warm-up until this held-out accuracy (default 0.9)")
    p.add_argument("--sft-share", type=float, default=0.8, help="share of the budget the warm-up may use (default 0.8)")
    p.add_argument("--sft-lr", type=float, default=1e-3)
    p.add_argument("--sft-batch", type=int, default=128)
    p.add_argument("--sft-eval-every", type=int, default=50)
    p.add_argument("--batch", type=int, default=512, help="GRPO rollouts per step (default 512)")
    p.add_argument("--lr", type=float, default=1e-4, help="GRPO learning rate (default 1e-4)")
    p.add_argument("--kl-coef", type=float, default=0.0)
    p.add_argument("--eval-every", type=int, default=5, help="GRPO steps between evaluations (default 5)")
    add_threads_arg(p)
    add_device_arg(p)
    args = p.parse_args(argv)
    apply_threads(args.threads)
    with contextlib.redirect_stdout(sys.stderr):  # the trainer's console lines; stdout carries the JSON
        rec = run(args)
    emit({**rec, **proc_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
