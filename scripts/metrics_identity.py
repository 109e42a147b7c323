"""Short training runs whose metrics.csv two versions of the trainer must agree on, bit for bit.

A refactoring of the trainer's loss and metrics code must not change a single number. This
script trains a few steps of every algorithm and policy loss on a tiny warmed-up task and keeps
each run's metrics.csv; `compare` then checks two such sets column by column, exactly, except
the wall-clock columns (`seconds`, `*_seconds`). Run it with each version of the package first
on the import path:

    PYTHONPATH=/path/to/old/checkout python scripts/metrics_identity.py run --out /tmp/old
    PYTHONPATH=. python scripts/metrics_identity.py run --out /tmp/new --warm /tmp/old/warm
    python scripts/metrics_identity.py compare /tmp/old /tmp/new

`--warm` reuses the problem sets and the warm-up checkpoint of an earlier `run`, so both
versions start from the same bytes. Columns present in one set only (a metric added since)
are listed, not compared; a case whose settings a version refuses (a policy loss added since)
is skipped there, and only the cases of the first set are compared.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from pathlib import Path

TINY = {
    "standalone": True,
    "tasks": {"add": {"op": "add", "ndigit": 2, "n_train": 2000, "n_test": 100, "n_val": 100, "seed": 1}},
    "sft": {"add": {"preset": "small", "lr": 2.0e-3, "batch_size": 128, "max_steps": 400, "eval_every": 20,
                    "band": [0.3, 0.9]}},
    "train": {"task": "add", "algorithm": "grpo", "steps": 4, "batch_size": 16, "group_size": 4, "lr": 3.0e-4,
              "eval_every": 2, "eval_size": 50, "snapshot_every": 100, "device": "cpu"},
    "algorithms": {"dapo": {"clip_eps_high": 0.28, "dynamic_sampling": True, "loss_agg": "token", "kl_coef": 0.0},
                   "ppo": {"ppo_epochs": 2}},
    "experiments": {},
}  # fmt: skip

ALGORITHMS = ["reinforce", "ppo", "grpo", "rloo", "dapo", "dr_grpo", "grpo_batch_std", "reinforce_pp_baseline"]
TWO_EPOCHS = ["ppo_epochs=2", "clip_eps=0.05", "clip_eps_high=0.1"]  # clipping binds on the second epoch
CASES: dict[str, list[str]] = {
    **{name: [f"algorithm={name}"] for name in ALGORITHMS},
    "grpo_two_epochs": TWO_EPOCHS,
    "grpo_sequence_micro": [*TWO_EPOCHS, "loss_agg=sequence", "micro_batch_size=8"],
    "ppo_value_clip": ["algorithm=ppo", "value_clip=0.2", "micro_batch_size=8", "critic_warmup_steps=1"],
    "clip_cov": ["policy_loss=clip_cov", "cov_ratio=0.1", "ppo_epochs=2", "clip_cov_lower=-1"],
    "kl_cov": ["policy_loss=kl_cov", "cov_ratio=0.1", "ppo_epochs=2"],
    "clip_cov_micro": [
        "policy_loss=clip_cov",
        "cov_ratio=0.1",
        "ppo_epochs=2",
        "clip_cov_lower=-1",
        "micro_batch_size=8",
    ],
    "gspo": ["policy_loss=gspo", "ppo_epochs=2", "loss_agg=sequence"],
    "cispo": ["policy_loss=cispo", "ppo_epochs=2", "cispo_clip_high=0.001", "loss_agg=token"],
    "dual_clip": ["policy_loss=dual_clip", "ppo_epochs=2", "clip_ratio_c=1.0001"],
    "noise_scale": ["grad_noise_scale=true", "micro_batch_size=4"],
    "reward_norm_adv_clip": ["reward=shaped", "reward_norm=true", "adv_norm=true", "adv_clip=1.0", "kl_estimator=k2"],
    "top_entropy_tokens": ["token_selection=top_entropy", "token_fraction=0.2"],
    "bottom_entropy_dapo": ["algorithm=dapo", "token_selection=bottom_entropy", "token_fraction=0.2"],
    "rollout_correction": ["sampler_dtype=bfloat16", "rollout_staleness=1", "tis_cap=2.0", "micro_batch_size=8"],
    "injected_spike": ["fault_grad_spike_step=2", "fault_grad_spike_scale=100", "grad_clip=1.0"],
    "injected_nan": ["fault_nan_step=2"],
    "schedules": [
        "lr_schedule=cosine",
        "warmup_steps=1",
        "entropy_schedule=linear",
        "entropy_coef=0.01",
        "entropy_coef_end=0.001",
        "curriculum_start=1",
        "curriculum_every=2",
    ],
}


def wall_clock(column: str) -> bool:
    return column == "seconds" or column.endswith("_seconds")


def run(out: Path, warm: Path | None, only: list[str] | None) -> None:
    import torch
    import yaml

    import mathrl
    from mathrl.pipeline.cli import main

    torch.set_num_threads(1)
    results = out / "warm"
    if warm is not None and warm.resolve() != results.resolve():
        shutil.copytree(warm, results, dirs_exist_ok=True)
    config = out / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump({**TINY, "results": str(results)}, sort_keys=False))
    warmed = ("sft/add/w0/model.pt", "sft/add/model.pt")  # warm-up 0, or the one warm-up of an older layout
    if not any((results / path).is_file() for path in warmed):
        assert main(["problems", "--config", str(config)]) == 0
        assert main(["sft", "--config", str(config), "--task", "add"]) == 0
    print(f"mathrl from {Path(mathrl.__file__).parent}", file=sys.stderr)
    for case, settings in CASES.items():
        if only and case not in only:
            continue
        shutil.rmtree(results / "runs" / case, ignore_errors=True)
        status = main(["train", "--config", str(config), "--run-id", case, *settings])
        if status == 2:  # a setting this version does not know (a loss added since): nothing to compare
            print(f"case {case}: settings refused by this version, skipped", file=sys.stderr)
            continue
        if status != 0:
            raise SystemExit(f"case {case}: mathrl train failed")
        shutil.copy(results / "runs" / case / "metrics.csv", out / f"{case}.csv")


def same(a: str, b: str) -> bool:
    """Equal as written: the same text, or both NaN."""
    if a == b:
        return True
    try:
        return math.isnan(float(a)) and math.isnan(float(b))
    except ValueError:
        return False


def compare(old: Path, new: Path) -> int:
    import csv

    failures = 0
    for path in sorted(old.glob("*.csv")):
        other = new / path.name
        if not other.is_file():
            print(f"{path.stem}: missing in {new}")
            failures += 1
            continue
        rows_a, rows_b = (list(csv.DictReader(p.open())) for p in (path, other))
        cols_a, cols_b = list(rows_a[0]), list(rows_b[0])
        shared = [c for c in cols_a if c in cols_b]
        order_kept = [c for c in cols_b if c in cols_a] == shared
        checked = [c for c in shared if not wall_clock(c)]
        differing = sorted({c for ra, rb in zip(rows_a, rows_b) for c in checked if not same(ra[c], rb[c])})
        ok = len(rows_a) == len(rows_b) and not differing and order_kept
        extra = [c for c in cols_b if c not in cols_a] + [f"-{c}" for c in cols_a if c not in cols_b]
        note = f"; columns in one set only: {', '.join(extra)}" if extra else ""
        verdict = "identical" if ok else f"DIFFERENT ({', '.join(differing) or 'rows or column order'})"
        print(f"{path.stem}: {len(rows_a)} rows x {len(checked)} columns {verdict}{note}")
        failures += not ok
    print(f"{failures} case(s) differ" if failures else "every case identical (wall-clock columns aside)")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train the cases and keep their metrics.csv as OUT/{case}.csv")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--warm", type=Path, help="a results tree with the problem sets and warm-up to reuse")
    r.add_argument("--only", nargs="*", choices=list(CASES), help="these cases alone")
    c = sub.add_parser("compare", help="compare two `run` outputs, exactly, wall-clock columns aside")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    args = p.parse_args(argv)
    if args.cmd == "run":
        run(args.out, args.warm, args.only)
        return 0
    return compare(args.old, args.new)


if __name__ == "__main__":
    sys.exit(main())
