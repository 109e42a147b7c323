"""One supervised warm-up configuration in a fresh process: `python -m bench.sft_step --preset small --batch 256`.

The step of `mathrl sft` (mathrl/engine/sft.py: run_sft): draw a batch of training problems,
`sft_batch`, forward, cross-entropy on the answer tokens, backward, AdamW step; with the
warm-up's own optimizer settings from the default config. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

from bench.common import PRESETS, TASK, TempTree, add_threads_arg, apply_threads, emit, load_cfg, proc_info, summarise


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.sft_step", description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=PRESETS, required=True)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--root")
    add_threads_arg(p)
    args = p.parse_args(argv)
    apply_threads(args.threads)

    import torch
    import torch.nn.functional as F

    from mathrl.engine.model import GPT, gpt_config
    from mathrl.engine.optim import make_optimizer
    from mathrl.engine.sft import sft_batch
    from mathrl.engine.tasks import VOCAB_SIZE, read_problems, task_of
    from mathrl.pipeline.layout import problems_file

    with TempTree(args.root, args.preset) as results, contextlib.redirect_stdout(sys.stderr):
        cfg = load_cfg(results, args.preset)
        s, task = cfg["sft"][TASK], task_of(cfg, TASK)
        train = read_problems(problems_file(cfg, TASK, "train"), task)
        torch.manual_seed(s["seed"])
        gen = torch.Generator().manual_seed(s["seed"])
        model = GPT(gpt_config(args.preset, VOCAB_SIZE, task.seq_len))
        opt = make_optimizer(
            model.parameters(), "adamw", lr=s["lr"], weight_decay=s["weight_decay"], betas=(0.9, 0.99)
        )  # as mathrl.engine.sft

        def step() -> float:
            t0 = time.perf_counter()
            x, y = sft_batch(task, train[torch.randint(len(train), (args.batch,), generator=gen)])
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), ignore_index=-100)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return time.perf_counter() - t0

        for _ in range(args.warmup):
            step()
        times = [step() for _ in range(args.steps)]
    total = summarise(times)
    record = {"kind": "sft", "preset": args.preset, "batch": args.batch, "task": "add/3", "params": model.num_params(),
              "warmup": args.warmup, "total": total, "sequences_per_second": args.batch / total["median"],
              "steps": times}  # fmt: skip
    record.update(proc_info())
    emit(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
