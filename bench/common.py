"""Shared pieces of the benchmark: the throwaway results tree, trainers, statistics, machine info."""

from __future__ import annotations

import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRESETS = ("small", "adder", "multiplier")
TASK = "add"  # Task("add", 3): 3-digit addition
GROUP_SIZE = 8
NEVER = 10**9  # steps / eval_every: no evaluation or schedule end inside the timed steps


def bench_config(results: Path | str, preset: str = "small") -> dict:
    """A small config: the default config's task, warm-up, train and algorithm blocks for 3-digit
    addition, without its experiments (validating every experiment's runs takes seconds)."""
    from mathrl.pipeline.config import DEFAULT_CONFIG, read_yaml

    base = read_yaml(DEFAULT_CONFIG)
    task = {**base.get("tasks", {}).get(TASK, {}), "op": "add", "ndigit": 3}
    return {
        "standalone": True,  # without config/config.yaml's experiments, also through `mathrl --config`
        "results": str(results),
        "tasks": {TASK: task},
        "sft": {TASK: {**base.get("sft", {}).get(TASK, {}), "preset": preset}},
        "train": {**base.get("train", {}), "task": TASK},
        "algorithms": base.get("algorithms", {}),
        "gradvar": {"tasks": [TASK]},
        "experiments": {},
    }


def config_path(results: Path | str) -> Path:
    return Path(results).parent / "config.yaml"


def load_cfg(results: Path | str, preset: str = "small") -> dict:
    """`mathrl.pipeline.config.load_config` on the generated YAML next to the results tree (written if missing)."""
    import yaml

    from mathrl.pipeline.config import load_config

    path = config_path(results)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(bench_config(results, preset), sort_keys=False))
    return load_config([path])


def build_tree(root: Path | str, presets=PRESETS) -> dict[str, Path]:
    """Problem files and a random-init checkpoint per preset; returns {preset: results dir}.

    Each preset gets its own results tree so that its checkpoint sits where `mathrl sft`
    writes it (results/sft/add/model.pt) and the trainer finds it by default."""
    import shutil

    import torch

    from mathrl.engine import snapshot
    from mathrl.engine.model import GPT, gpt_config
    from mathrl.engine.tasks import VOCAB_SIZE, task_of, write_problem_splits
    from mathrl.pipeline.atomic import atomic_write
    from mathrl.pipeline.layout import problems_dir, sft_checkpoint

    root = Path(root)
    trees: dict[str, Path] = {}
    first: Path | None = None
    for preset in presets:
        results = root / preset / "results"
        cfg = load_cfg(results, preset)
        task = task_of(cfg, TASK)
        pdir = problems_dir(cfg, TASK)
        if first is None:
            write_problem_splits(cfg, TASK)
            first = pdir
        else:
            shutil.copytree(first, pdir, dirs_exist_ok=True)
        torch.manual_seed(0)
        model = GPT(gpt_config(preset, VOCAB_SIZE, task.seq_len))
        state = {"model_config": asdict(model.config), "model": model.state_dict(), "task": TASK,
                 "eval_accuracy": float("nan"), "steps": 0}  # fmt: skip
        path = sft_checkpoint(cfg, TASK)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, snapshot.encode(state))
        trees[preset] = results
    return trees


class TempTree:
    """`--root DIR` when given (built by the parent), else a private temp tree for one preset."""

    def __init__(self, root: str | None, preset: str):
        self.root, self.preset, self._tmp = root, preset, None

    def __enter__(self) -> Path:
        if self.root:
            return Path(self.root) / self.preset / "results"
        self._tmp = tempfile.TemporaryDirectory(prefix="mathrl-bench-")
        return build_tree(self._tmp.name, [self.preset])[self.preset]

    def __exit__(self, *exc):
        if self._tmp is not None:
            self._tmp.cleanup()


def make_trainer(results: Path, preset: str, batch: int, run_dir: Path, device: str = "cpu"):
    """A GRPO trainer on 3-digit addition, group size 8, on `device` (cpu or cuda), world of one."""
    from mathrl.engine.distributed import Dist, pick_device
    from mathrl.engine.trainer import Trainer
    from mathrl.pipeline.config import run_settings
    from mathrl.pipeline.settings import RunSettings

    cfg = load_cfg(results, preset)
    settings = run_settings(cfg, {
        "task": TASK, "algorithm": "grpo", "batch_size": batch, "group_size": GROUP_SIZE,
        "steps": NEVER, "eval_every": NEVER, "log_every": NEVER, "snapshot_every": NEVER, "device": device,
    })  # fmt: skip
    return Trainer(
        cfg, f"bench_{preset}_{batch}", RunSettings.from_dict(settings), run_dir, Dist(device=pick_device(device))
    )


def median(xs) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def summarise(xs) -> dict:
    """Median, min, max and the relative spread (IQR / median) of a list of seconds."""
    xs = sorted(xs)
    if not xs:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    q = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [xs[0]] * 3
    med = median(xs)
    return {
        "median": med,
        "min": xs[0],
        "max": xs[-1],
        "iqr_rel": (q[2] - q[0]) / med if med else float("nan"),
        "n": len(xs),
    }


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def add_threads_arg(p) -> None:
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's default)")


def add_device_arg(p) -> None:
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the model runs (default cpu)")


def synchronize(device: str) -> None:
    """Wait for the GPU's queued work, so that a wall-clock reading covers it (no-op on the CPU)."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def apply_threads(n: int | None) -> None:
    if n:
        import torch

        torch.set_num_threads(n)


def proc_info() -> dict:
    import torch

    info = {"torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads(),
            "peak_rss_mb": peak_rss_mb()}  # fmt: skip
    if torch.cuda.is_initialized():
        info["gpu"] = torch.cuda.get_device_name()
        info["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return info


def emit(record: dict) -> None:
    """The subprocess's one JSON line on the real stdout."""
    sys.__stdout__.write(json.dumps(record) + "\n")
    sys.__stdout__.flush()


def run_child(module: str, args: list[str], timeout: float = 1800) -> dict:
    """Run `python -m bench.<module> ARGS` in a fresh process and parse its JSON line."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    cmd = [sys.executable, "-m", f"bench.{module}", *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1])


def git_state() -> dict:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                               text=True, timeout=10).stdout.strip() != ""  # fmt: skip
        return {"commit": head or None, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict:
    import torch

    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(), "python": platform.python_version(), "cpu": cpu_model(),
        "cpu_count": os.cpu_count(), "cpus_usable": affinity, "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(), "cuda": torch.cuda.is_available(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "loadavg_start": list(os.getloadavg()), "git": git_state(),
    }  # fmt: skip


def table(headers: list[str], rows: list[list[str]], right_from: int = 1) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(c.ljust(w) if i < right_from else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])
