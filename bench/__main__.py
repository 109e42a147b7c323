"""`python -m bench` (= `make bench`): RL-step, warm-up-step, naive-reference,
prefix-sharing, time-to-accuracy and end-to-end pipeline benchmarks.

Each configuration runs in a fresh subprocess (its ru_maxrss is its own peak); figures are
medians over the timed steps after warm-up steps. The naive reference alternates our
sampler and `generate_naive` step by step in one process, so its ratios share the load; the
sharing section alternates prefix sharing on and off (MATHRL_NO_PREFIX_SHARING=1) the same way.
Time to accuracy (bench.tta) starts from nothing (problem sets, warm-up, GRPO) with a wall
budget per task; the pipeline section (bench.pipeline) runs `make report`'s Snakemake
command into a fresh results directory and sums its benchmark files by rule.
Prints tables and writes one JSON per section, summary.json (targets) and table.md (the
performance table of docs/guide/performance.md) to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.common import GROUP_SIZE, PRESETS, build_tree, machine_info, run_child, table
from bench.pipeline import stages_table

SECTIONS = ("rl", "sft", "naive", "sharing", "tta", "pipeline")
DEFAULT_OUT = Path(__file__).resolve().parent / "results"
# Timed steps per preset (full run); the 64-rollout RL steps are cheap, so twice as many.
RL_STEPS = {"small": 20, "adder": 10, "multiplier": 6}
SFT_STEPS = {"small": 30, "adder": 15, "multiplier": 10}
NAIVE_PAIRS = {"small": 10, "adder": 6, "multiplier": 4}
NAIVE_PRESETS = ("small", "adder")
SFT_BATCH = 256
# Targets: (label, preset, batch, limit seconds, stretch seconds or None)
STEP_TARGETS = [
    ("GRPO step, small @512 rollouts", "small", 512, 0.25, None),
    ("GRPO step, adder @512 rollouts", "adder", 512, 1.0, None),
]
RSS_LIMIT_MB = 1.5 * 1024
# Time to accuracy: (task, targets) from a fresh start.
TTA = [("add", [0.95, 0.99]), ("mul", [0.90])]
TTA_SFT_UNTIL = 0.9  # bench.tta's default
# make report (default config) wall seconds: issue limit and target.
PIPELINE_LIMIT_S, PIPELINE_TARGET_S = 15 * 60, 5 * 60
# Targets that need a GPU (`--device cuda`): (label, section, key, limit seconds); the key is
# (preset, rollouts) of an RL record or (task, accuracy target) of a time-to-accuracy record.
GPU_TARGETS = [("adder GRPO step @512 rollouts on one GPU", "rl", ("adder", 512), 0.010),
               ("warm-up + RL to 99% on 3-digit addition on one GPU", "tta", ("add", "0.99"), 60.0),
               ("config/full.yaml grid on one GPU", None, None, 30 * 60.0)]  # fmt: skip


FILES = {"rl": "rl_step.json", "sft": "sft_step.json", "naive": "naive.json", "sharing": "sharing.json",
         "tta": "tta.json", "pipeline": "pipeline.json"}  # fmt: skip


class Sections(dict):
    """{section: records}; a section's JSON is written the moment it is set, so a failure in
    a later section (or in the summary) loses no measurement."""

    def __init__(self, out: Path, machine: dict, settings: dict):
        super().__init__()
        self.out, self.machine, self.settings = out, machine, settings

    def __setitem__(self, section: str, records: list[dict]) -> None:
        super().__setitem__(section, records)
        self.save(section)

    def save(self, section: str) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        doc = {"machine": self.machine, "settings": self.settings, "results": self[section]}
        (self.out / FILES[section]).write_text(json.dumps(doc, indent=2) + "\n")


def csv_list(kind):
    def parse(text: str):
        items = [kind(x) for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        return items

    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1 warm-up and 2 timed steps per configuration (smoke test)")
    p.add_argument("--only", action="append", choices=SECTIONS, help="run only this section (repeatable)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where the JSON goes (default {DEFAULT_OUT})")
    p.add_argument(
        "--presets", type=csv_list(str), default=list(PRESETS), help="comma list (default small,adder,multiplier)"
    )
    p.add_argument(
        "--batches", type=csv_list(int), default=[64, 512], help="RL rollouts per step, comma list (default 64,512)"
    )
    p.add_argument(
        "--naive-batch", type=int, help="rollouts of the naive reference (default 512, or the largest --batches)"
    )
    p.add_argument("--steps", type=int, help="timed steps of every configuration (overrides the per-preset defaults)")
    p.add_argument("--warmup", type=int, help="untimed warm-up steps (default 2, 1 with --quick)")
    p.add_argument(
        "--threads", type=int, help="torch intra-op threads in every configuration (default: torch's default)"
    )
    p.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="where RL steps and time to accuracy run (default cpu)"
    )
    p.add_argument(
        "--tta-tasks", type=csv_list(str), default=[task for task, _ in TTA], help="comma list (default add,mul)"
    )
    p.add_argument(
        "--tta-budget", type=float, default=600.0, help="wall seconds per time-to-accuracy task (default 600)"
    )
    p.add_argument(
        "--pipeline-existing",
        type=Path,
        metavar="RESULTS",
        help="summarise this finished results directory instead of running the pipeline",
    )
    args = p.parse_args(argv)
    bad = [x for x in args.tta_tasks if x not in dict(TTA)]
    if bad:
        p.error(f"--tta-tasks: unknown {', '.join(bad)}; allowed: {', '.join(dict(TTA))}")
    bad = [x for x in args.presets if x not in PRESETS]
    if bad:
        p.error(f"--presets: unknown {', '.join(bad)}; allowed: {', '.join(PRESETS)}")
    bad = [b for b in args.batches if b <= 0 or b % GROUP_SIZE]
    if bad:
        p.error(f"--batches: {bad} not positive multiples of the group size {GROUP_SIZE}")
    args.sections = [s for s in SECTIONS if s in (args.only or SECTIONS)]
    if args.naive_batch is None:
        args.naive_batch = 512 if 512 in args.batches else max(args.batches)
    if args.warmup is None:
        args.warmup = 1 if args.quick else 2
    if args.quick:
        args.tta_budget = min(args.tta_budget, 30.0)
    return args


def n_steps(args, table: dict, preset: str, factor: int = 1) -> int:
    if args.steps:
        return args.steps
    return 2 if args.quick else table[preset] * factor


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def child(module: str, label: str, argv: list[str]) -> dict:
    t0 = time.perf_counter()
    rec = run_child(module, argv)
    log(f"  {label}: done in {time.perf_counter() - t0:.1f} s")
    return rec


# ------------------------------------------------------------------------------ formatting
def fmt_s(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def spread(stat: dict) -> str:
    r = stat.get("iqr_rel", math.nan)
    return "-" if math.isnan(r) else f"{100 * r:.0f}%"


def rl_table(recs: list[dict]) -> str:
    rows = [[r["preset"], str(r["batch"]), str(r["total"]["n"]), fmt_s(r["sample"]["median"]),
             fmt_s(r["update"]["median"]),
             fmt_s(r["total"]["median"]), spread(r["total"]), f"{r['sequences_per_second']:.0f}",
             f"{r['peak_rss_mb']:.0f}"] for r in recs]  # fmt: skip
    return table(
        ["preset", "rollouts", "steps", "sample s", "update s", "step s", "IQR/med", "seq/s", "peak RSS MiB"], rows
    )


def sft_table(recs: list[dict]) -> str:
    rows = [[r["preset"], str(r["batch"]), str(r["total"]["n"]), fmt_s(r["total"]["median"]), spread(r["total"]),
             f"{r['sequences_per_second']:.0f}", f"{r['peak_rss_mb']:.0f}"] for r in recs]  # fmt: skip
    return table(["preset", "batch", "steps", "step s", "IQR/med", "seq/s", "peak RSS MiB"], rows)


def naive_table(recs: list[dict]) -> str:
    rows = []
    for r in recs:
        o, n = r["ours"], r["naive"]
        rows.append([r["preset"], str(r["batch"]), str(o["total"]["n"]), fmt_s(o["sample"]["median"]),
                     fmt_s(n["sample"]["median"]),
                     f"{r['ratio']['sample']:.2f}x", fmt_s(o["total"]["median"]), fmt_s(n["total"]["median"]),
                     f"{r['ratio']['total']:.2f}x", f"{r['peak_rss_mb']:.0f}"])  # fmt: skip
    return table(["preset", "rollouts", "pairs", "ours sample s", "naive sample s", "naive/ours", "ours step s",
                  "naive step s", "naive/ours", "peak RSS MiB"], rows)  # fmt: skip


def sharing_table(recs: list[dict]) -> str:
    rows = []
    for r in recs:
        on, off = r["shared"], r["unshared"]
        rows.append([r["preset"], str(r["batch"]), str(on["total"]["n"]), fmt_s(on["sample"]["median"]),
                     fmt_s(off["sample"]["median"]),
                     fmt_s(on["update"]["median"]), fmt_s(off["update"]["median"]), fmt_s(on["total"]["median"]),
                     fmt_s(off["total"]["median"]), f"{r['ratio']['total']:.2f}x",
                     f"{r['peak_rss_mb']:.0f}"])  # fmt: skip
    return table(["preset", "rollouts", "pairs", "sample on", "sample off", "update on", "update off", "step on",
                  "step off",
                  "off/on", "peak RSS MiB"], rows)  # fmt: skip


def tta_table(recs: list[dict]) -> str:
    rows = []
    for r in recs:
        best = r["best"] or {}
        for target, hit in r["reached"].items():
            at = (
                f"{hit['seconds']:.0f} s ({hit['phase']} step {hit['step']})"
                if hit
                else f"not in {r['budget_s']:.0f} s"
            )
            rows.append([r["task"], r["preset"], f"{100 * float(target):.0f}%", at,
                         f"{100 * best.get('accuracy', math.nan):.1f}% at {best.get('seconds', math.nan):.0f} "
                         "s"])  # fmt: skip
    return table(["task", "preset", "target", "first reached", "best held-out accuracy"], rows, right_from=3)


def on_gpu(record: dict) -> bool:
    return record.get("device") == "cuda"


def targets(results: dict) -> list[dict]:
    out = []
    rl = {(r["preset"], r["batch"]): r for r in results.get("rl", []) if not on_gpu(r)}
    for label, preset, batch, limit, stretch in STEP_TARGETS:
        r = rl.get((preset, batch))
        t = {"target": label, "limit_s": limit, "stretch_s": stretch, "value_s": None, "status": "NOT MEASURED"}
        if r is not None:
            v = r["total"]["median"]
            t.update(value_s=v, status="PASS" if v <= limit else "MISS")
            if stretch is not None:
                t["stretch_status"] = "PASS" if v <= stretch else "MISS"
        out.append(t)
    # Every record that measured a process (the pipeline's jobs are Snakemake's, not ours).
    procs = [(r["peak_rss_mb"], f"{sec} {r['preset']}@{r['batch'] if 'batch' in r else r.get('task')}")
             for sec in SECTIONS for r in results.get(sec, []) if "peak_rss_mb" in r]  # fmt: skip
    t = {"target": "training process peak RSS", "limit_mb": RSS_LIMIT_MB, "value_mb": None, "status": "NOT MEASURED"}
    if procs:
        mb, where = max(procs)
        t.update(value_mb=mb, where=where, status="PASS" if mb < RSS_LIMIT_MB else "MISS")
    out.append(t)
    pipe = results.get("pipeline")
    for label, limit in (
        ("make report, default config", PIPELINE_LIMIT_S),
        ("make report, default config (aim)", PIPELINE_TARGET_S),
    ):
        t = {"target": label, "limit_s": limit, "stretch_s": None, "value_s": None, "status": "NOT MEASURED"}
        if pipe and pipe[0].get("wall_s") is not None:
            t.update(value_s=pipe[0]["wall_s"], status="PASS" if pipe[0]["wall_s"] <= limit else "MISS")
        out.append(t)
    for r in results.get("tta", []):
        for target, hit in r["reached"].items():
            where = "GPU" if on_gpu(r) else "CPU"
            out.append({"target": f"{r['task']} to {100 * float(target):.0f}% from scratch ({where}, reported)",
                        "limit_s": None,
                        "stretch_s": None, "value_s": hit["seconds"] if hit else None,
                        "status": "REACHED" if hit else f"NOT REACHED in {r['budget_s']:.0f} s"})  # fmt: skip
    return out + gpu_targets(results)


def gpu_targets(results: dict) -> list[dict]:
    """The GPU targets from the records measured with --device cuda; NOT MEASURED without one."""
    out = []
    for label, section, key, limit in GPU_TARGETS:
        t = {"target": label, "limit_s": limit, "stretch_s": None, "value_s": None, "status": "NOT MEASURED (no GPU)"}
        for r in results.get(section, []) if section else []:
            if not on_gpu(r):
                continue
            if section == "rl" and (r["preset"], r["batch"]) == key:
                t["value_s"] = r["total"]["median"]
            elif section == "tta" and r["task"] == key[0]:
                hit = r["reached"].get(key[1])
                t["status"] = f"NOT REACHED in {r['budget_s']:.0f} s"
                t["value_s"] = hit["seconds"] if hit else None
            if t["value_s"] is not None:
                t["status"] = "PASS" if t["value_s"] <= limit else "MISS"
        out.append(t)
    return out


def targets_text(ts: list[dict]) -> str:
    lines = []
    for t in ts:
        if "limit_s" in t:
            goal = (
                "-"
                if t["limit_s"] is None
                else f"<= {t['limit_s']:.2f} s" + (f" (stretch {t['stretch_s']:.2f} s)" if t["stretch_s"] else "")
            )
            val = "-" if t["value_s"] is None else f"{t['value_s']:.3f} s"
            extra = f"  stretch {t['stretch_status']}" if "stretch_status" in t else ""
        else:
            goal = f"< {t['limit_mb'] / 1024:.1f} GiB"
            val = "-" if t["value_mb"] is None else f"{t['value_mb']:.0f} MiB ({t['where']})"
            extra = ""
        lines.append(f"  {t['target']:<44} {goal:<28} {val:<28} {t['status']}{extra}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ main
def main(argv=None) -> int:
    args = parse_args(argv)
    machine = machine_info()
    settings = {"quick": args.quick, "warmup": args.warmup, "presets": args.presets, "batches": args.batches,
                "naive_batch": args.naive_batch, "sections": args.sections, "algorithm": "grpo", "task": "add/3",
                "group_size": GROUP_SIZE, "sft_batch": SFT_BATCH,
                "threads": args.threads or "torch default", "device": args.device}  # fmt: skip
    log(f"mathrl bench: sections {', '.join(args.sections)}; presets {', '.join(args.presets)}; "
        f"load average {machine['loadavg_start'][0]:.2f} at start")  # fmt: skip
    results = Sections(args.out, machine, settings)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mathrl-bench-") as tmp:
        log("  building the throwaway results tree (problem files, random-init checkpoints)")
        build_tree(tmp, args.presets)
        common = ["--root", tmp, "--warmup", str(args.warmup)] + (
            ["--threads", str(args.threads)] if args.threads else []
        )
        rl_common = [*common, "--device", args.device]  # the warm-up step bench runs on the CPU only
        if "rl" in args.sections:
            results["rl"] = [
                child("rl_step", f"rl {p}@{b}", ["--preset", p, "--batch", str(b),
                                                 "--steps", str(n_steps(args, RL_STEPS, p, 2 if b < 512 else 1)),
                                                 *rl_common])
                for p in args.presets for b in args.batches
            ]  # fmt: skip
        if "sft" in args.sections:
            results["sft"] = [
                child("sft_step", f"sft {p}@{SFT_BATCH}", ["--preset", p, "--batch", str(SFT_BATCH),
                                                          "--steps", str(n_steps(args, SFT_STEPS, p)),
                                                          *common])
                for p in args.presets
            ]  # fmt: skip
        if "naive" in args.sections:
            presets = [p for p in args.presets if p in NAIVE_PRESETS]
            results["naive"] = [
                child("rl_step", f"naive {p}@{args.naive_batch}",
                      ["--preset", p, "--batch", str(args.naive_batch), "--compare-naive",
                                                                   "--steps", str(n_steps(args, NAIVE_PAIRS, p)),
                       *rl_common])
                for p in presets
            ]  # fmt: skip
        if "sharing" in args.sections:
            results["sharing"] = [
                child("rl_step", f"sharing {p}@{args.naive_batch}",
                      ["--preset", p, "--batch", str(args.naive_batch), "--compare-sharing",
                                                                     "--steps", str(n_steps(args, NAIVE_PAIRS, p)),
                       *rl_common])
                for p in args.presets
            ]  # fmt: skip
    if "tta" in args.sections:
        results["tta"] = [
            child("tta", f"time to accuracy, {task}",
                  ["--task", task, "--targets", ",".join(map(str, tg)), "--budget", str(args.tta_budget),
                   "--device", args.device] + (["--threads", str(args.threads)] if args.threads else []))
            for task, tg in TTA if task in args.tta_tasks
        ]  # fmt: skip
    if "pipeline" in args.sections:
        argv = ["--existing", str(args.pipeline_existing)] if args.pipeline_existing else []
        results["pipeline"] = [child("pipeline", "default pipeline (make report)", argv)]
    machine["loadavg_end"] = list(os.getloadavg())
    machine["bench_seconds"] = time.perf_counter() - t_start
    threads = sorted({r["torch_threads"] for recs in results.values() for r in recs if "torch_threads" in r})
    machine["torch_threads_children"] = threads
    ts = targets(results)

    # ---- the printed report
    m = machine
    where = m.get("gpu") or "GPU" if args.device == "cuda" else "CPU"
    print(
        f"mathrl benchmark  {m['date']}  git"
        f" {(m['git']['commit'] or '?')[:10]}{' (dirty)' if m['git']['dirty'] else ''}"
    )
    print(f"  {m['platform']}; {m['cpu']}; {m['cpu_count']} CPUs ({m['cpus_usable']} usable); torch {m['torch']}, "
          f"{'/'.join(map(str, threads)) or m['torch_threads']} intra-op threads "
          f"({'--threads' if args.threads else 'torch default'}); CUDA {'yes' if m['cuda'] else 'no'}")  # fmt: skip
    print(
        f"  load average (1 min) {m['loadavg_start'][0]:.2f} at start, {m['loadavg_end'][0]:.2f} at end; "
        f"{m['bench_seconds']:.0f} s in all{'; QUICK mode' if args.quick else ''}"
    )
    busy = max(m["loadavg_start"][0], m["loadavg_end"][0])
    if busy > 0.5 * (m["cpus_usable"] or 1):
        print(
            f"  WARNING: the machine was busy (load {busy:.1f} on {m['cpus_usable']} CPUs): other processes share the"
            " cores, so absolute timings are inflated; same-run ratios are the robust figures"
        )
    print("  figures: medians over the timed steps (after warm-up); IQR/med = interquartile range / median, the noise")
    if "rl" in results:
        sharing = (
            "off (MATHRL_NO_PREFIX_SHARING=1)"
            if not all(r.get("prefix_sharing", True) for r in results["rl"])
            else "on"
        )
        print(
            f"\nRL step: GRPO, 3-digit addition, group size {GROUP_SIZE}, one process on the {where}, {args.warmup}"
            f" warm-up steps, prefix sharing {sharing}"
        )
        print(
            "  step s = wall time of Trainer.step() (sample + update + bookkeeping; no evaluation); seq/s = rollouts /"
            " step s"
        )
        print(table_indent(rl_table(results["rl"])))
    if "sft" in results:
        print(f"\nSupervised warm-up step: batch {SFT_BATCH}, sft_batch + forward/backward + AdamW step")
        print(table_indent(sft_table(results["sft"])))
    if "naive" in results:
        print("\nNaive reference: the same GRPO step with generate_naive (full recomputation per token, no KV cache),")
        print("  alternating with our sampler step by step in one process; ratios = naive median / ours median")
        print(table_indent(naive_table(results["naive"])) if results["naive"] else "  (no small/adder preset selected)")
    if "sharing" in results:
        print("\nPrefix sharing: the same GRPO step with each group's prompt computed once (on) and with every forward")
        print("  over the full sequences (off, MATHRL_NO_PREFIX_SHARING=1), alternating step by step in one process;")
        print("  seconds are medians, off/on = the step-time ratio")
        print(table_indent(sharing_table(results["sharing"])))
    if "tta" in results:
        print(
            f"\nTime to accuracy from a fresh start (problem sets, warm-up to {TTA_SFT_UNTIL:.0%}, then GRPO @512), one"
            f" process on the {where},"
        )
        print("  held-out greedy accuracy on 500 problems; wall seconds include every evaluation")
        print(table_indent(tta_table(results["tta"])))
    if "pipeline" in results:
        rec = results["pipeline"][0]
        head = (
            f"wall {rec['wall_s']:.0f} s with --cores {rec['cores']}"
            if rec.get("wall_s") is not None
            else f"summary of {rec['results']}"
        )
        print(f"\nDefault pipeline (snakemake --profile profiles/default report, as make report): {head}")
        print(
            "  per rule, from Snakemake's benchmark files: summed job seconds (jobs run in parallel) and the"
            " longest job"
        )
        print(table_indent(stages_table(rec["stages"])))
    print("\nTargets")
    print(targets_text(ts))

    # ---- the JSON (each section's file was written when it ended; again with the end's machine info)
    for sec in results:
        results.save(sec)
    (args.out / "summary.json").write_text(
        json.dumps({"machine": machine, "settings": settings, "targets": ts}, indent=2) + "\n"
    )
    (args.out / "table.md").write_text(markdown_table(machine, results, ts))
    print(f"\nwrote {', '.join(FILES[s] for s in results)}, summary.json and table.md to {args.out}")
    return 0


def markdown_table(machine: dict, results: dict, ts: list[dict]) -> str:
    """The performance table (docs/guide/performance.md): every target with its measured value and verdict."""
    m = machine
    cuda = (m.get("gpu") or "yes") if m["cuda"] else "no"
    lines = [f"Measured by `make bench` on {m['date'][:10]}, git {(m['git']['commit'] or '?')[:10]}: {m['cpu']}, "
             f"{m['cpus_usable']} usable CPUs, torch {m['torch']}, CUDA {cuda}; "
             f"load average {m['loadavg_start'][0]:.1f} at start, {m['loadavg_end'][0]:.1f} at end.", "",
             "| figure | target | measured | verdict |", "| --- | --- | --- | --- |"]  # fmt: skip
    for t in ts:
        if "limit_mb" in t:
            goal, val = (
                f"< {t['limit_mb'] / 1024:.1f} GiB",
                "-" if t["value_mb"] is None else f"{t['value_mb']:.0f} MiB ({t['where']})",
            )
        else:
            goal = (
                "-"
                if t["limit_s"] is None
                else f"<= {t['limit_s']:g} s" + (f" (aim {t['stretch_s']:g} s)" if t["stretch_s"] else "")
            )
            val = (
                "-"
                if t["value_s"] is None
                else f"{t['value_s']:.3f} s"
                if t["value_s"] < 10
                else f"{t['value_s']:.0f} s"
            )
        verdict = t["status"] + (f", aim {t['stretch_status']}" if "stretch_status" in t else "")
        lines.append(f"| {t['target']} | {goal} | {val} | {verdict} |")
    for r in results.get("naive", []):
        lines.append(
            f"| naive reference / ours, {r['preset']} @{r['batch']} step | ratio | {r['ratio']['total']:.2f}x | - |"
        )
    for r in results.get("sharing", []):
        lines.append(
            f"| prefix sharing off / on, {r['preset']} @{r['batch']} step | ratio | {r['ratio']['total']:.2f}x | - |"
        )
    return "\n".join(lines) + "\n"


def table_indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


if __name__ == "__main__":
    sys.exit(main())
