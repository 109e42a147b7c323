"""One RL-step configuration in a fresh process: `python -m bench.rl_step --preset small --batch 512 --steps 20`.

GRPO on 3-digit addition, group size 8, one process, torch's default thread count, on the CPU
or (`--device cuda`) one GPU, where each reading waits for the GPU's queued work.
Times `Trainer.step()` (evaluation and snapshots are pushed beyond the timed steps), split
into its own `sample_seconds` and `update_seconds`, after `--warmup` untimed steps, and
prints one JSON line with the per-step times, their medians and the process's peak RSS.

`--compare-naive` times the same trainer alternately with our KV-cache sampler and with
`GPT.generate_naive` (full recomputation at every token), step by step, so both see the
same load; the update half is identical code, so the step ratio isolates the sampler.

`--compare-sharing` times the same trainer alternately with prefix sharing on (each group's
prompt computed once, `GPT.forward_shared` and `generate(group_size=G)`) and off (every
forward over the full sequences, as `MATHRL_NO_PREFIX_SHARING=1` runs it), in the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

from bench.common import (
    PRESETS,
    TempTree,
    add_device_arg,
    add_threads_arg,
    apply_threads,
    emit,
    make_trainer,
    median,
    proc_info,
    summarise,
    synchronize,
)


def timed_step(trainer) -> dict:
    device = trainer.d.device.type
    synchronize(device)
    t0 = time.perf_counter()
    row = trainer.step()
    synchronize(device)
    wall = time.perf_counter() - t0
    return {"sample": row["sample_seconds"], "update": row["update_seconds"], "total": wall}


def series(steps: list[dict], batch: int) -> dict:
    out = {k: summarise([s[k] for s in steps]) for k in ("sample", "update", "total")}
    out["sequences_per_second"] = batch / out["total"]["median"]
    out["sampled_sequences_per_second"] = batch / out["sample"]["median"]
    out["steps"] = steps
    return out


def set_sampler(trainer, naive: bool) -> None:
    policy = trainer.net.policy
    if naive:
        policy.generate = policy.generate_naive  # instance attribute shadows the KV-cache method
    else:
        policy.__dict__.pop("generate", None)


def alternate(trainer, variants: dict, warmup: int, steps: int) -> dict:
    """Time trainer.step() under each variant (a callable that switches to it), step by step, ABBA."""
    names = list(variants)
    runs = {name: [] for name in names}
    for _ in range(warmup):
        for name in names:
            variants[name]()
            trainer.step()
    for i in range(steps):
        for name in names if i % 2 == 0 else names[::-1]:  # ABBA: no order bias
            variants[name]()
            runs[name].append(timed_step(trainer))
    return runs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.rl_step", description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=PRESETS, required=True)
    p.add_argument("--batch", type=int, required=True, help="rollouts per step (a multiple of the group size 8)")
    p.add_argument("--steps", type=int, default=5, help="timed steps (per sampler with --compare-naive)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--compare-naive", action="store_true", help="alternate our sampler and generate_naive")
    p.add_argument("--compare-sharing", action="store_true", help="alternate prefix sharing on and off")
    p.add_argument("--root", help="results trees built by the parent (default: build a private one)")
    add_threads_arg(p)
    add_device_arg(p)
    args = p.parse_args(argv)
    apply_threads(args.threads)

    with (
        TempTree(args.root, args.preset) as results,
        tempfile.TemporaryDirectory(prefix="mathrl-bench-run-") as run_dir,
    ):
        t0 = time.perf_counter()
        # The trainer prints alerts on stdout; keep stdout for the one JSON line.
        with contextlib.redirect_stdout(sys.stderr):
            trainer = make_trainer(results, args.preset, args.batch, Path(run_dir), args.device)
            setup = time.perf_counter() - t0
            kind = "rl_naive" if args.compare_naive else "rl_sharing" if args.compare_sharing else "rl"
            record = {"kind": kind, "preset": args.preset, "batch": args.batch, "device": trainer.d.device.type,
                      "group_size": trainer.s.group_size, "algorithm": trainer.s.algorithm, "task": "add/3",
                      "params": trainer.net.policy.num_params(), "warmup": args.warmup, "setup_seconds": setup,
                      "prefix_sharing": trainer.share_prefix}  # fmt: skip
            if args.compare_sharing:

                def sharing(on: bool):
                    return lambda: setattr(trainer, "share_prefix", on)

                runs = alternate(
                    trainer, {"shared": sharing(True), "unshared": sharing(False)}, args.warmup, args.steps
                )
                trainer.share_prefix = True
                record["shared"] = series(runs["shared"], args.batch)
                record["unshared"] = series(runs["unshared"], args.batch)
                record["ratio"] = {
                    k: record["unshared"][k]["median"] / record["shared"][k]["median"]
                    for k in ("sample", "update", "total")
                }
                record["ratio_paired"] = {  # median over steps i of unshared_i / shared_i
                    k: median([u[k] / s[k] for u, s in zip(runs["unshared"], runs["shared"])])
                    for k in ("sample", "update", "total")
                }
            elif not args.compare_naive:
                for _ in range(args.warmup):
                    trainer.step()
                steps = [timed_step(trainer) for _ in range(args.steps)]
                record.update(series(steps, args.batch))
            else:
                runs = {"ours": [], "naive": []}
                for _ in range(args.warmup):
                    for naive in (False, True):
                        set_sampler(trainer, naive)
                        trainer.step()
                for i in range(args.steps):
                    order = ("ours", "naive") if i % 2 == 0 else ("naive", "ours")  # ABBA: no order bias
                    for name in order:
                        set_sampler(trainer, name == "naive")
                        runs[name].append(timed_step(trainer))
                set_sampler(trainer, False)
                record["ours"] = series(runs["ours"], args.batch)
                record["naive"] = series(runs["naive"], args.batch)
                record["ratio"] = {
                    k: record["naive"][k]["median"] / record["ours"][k]["median"] for k in ("sample", "update", "total")
                }
                record["ratio_paired"] = {  # median over steps i of naive_i / ours_i
                    k: median([n[k] / o[k] for n, o in zip(runs["naive"], runs["ours"])]) for k in ("sample", "total")
                }
    record.update(proc_info())
    emit(record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
