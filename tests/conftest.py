"""Shared fixtures and helpers: a tiny configuration and a warmed-up tiny task, built once
per session; running Snakemake on the repository's Snakefile (test_pipeline, the fault
tests); the fault tests' processes, run directories and metrics (tests/test_faults_*.py)."""

from __future__ import annotations

import copy
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parent.parent
SNAKEFILE = ROOT / "Snakefile"
DEFAULT_CONFIG = ROOT / "config" / "config.yaml"
PY = sys.executable

TINY = {
    "standalone": True,  # a whole configuration, not layered over config/config.yaml
    "tasks": {
        "add": {"op": "add", "ndigit": 2, "n_train": 2000, "n_test": 100, "n_val": 100, "seed": 1},
        "mul": {"op": "mul", "ndigit": 1, "n_train": 0, "n_test": 20, "n_val": 20, "seed": 1},
    },
    "sft": {
        "add": {"preset": "small", "lr": 2.0e-3, "batch_size": 128, "max_steps": 400, "eval_every": 20,
                "band": [0.3, 0.9]},
        "mul": {"preset": "small", "max_steps": 40, "eval_every": 20},
    },
    "train": {"task": "add", "algorithm": "grpo", "steps": 4, "batch_size": 16, "group_size": 4, "lr": 3.0e-4,
              "eval_every": 2, "eval_size": 50, "snapshot_every": 2, "device": "cpu"},
    "algorithms": {"dapo": {"clip_eps_high": 0.28, "dynamic_sampling": True, "loss_agg": "token", "kl_coef": 0.0}},
    "experiments": {"tiny": {"grid": {"batch_size": [8, 16]}, "seeds": [0, 1]}},
}  # fmt: skip


@pytest.fixture(autouse=True, scope="session")
def _threads():
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(autouse=True)
def _close_figures():
    """Each test's matplotlib figures are closed after it, so that they do not pile up across the test run."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def schema_parsed_once():
    """The config schema parsed once for a module: `load_schema` parses the YAML on every call, once per
    run a configuration expands into, which would dominate building a hand-made tree of many runs."""
    import functools

    import mathrl.pipeline.config

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mathrl.pipeline.config, "load_schema", functools.cache(mathrl.pipeline.config.load_schema))
        yield


@pytest.fixture(scope="session")
def study_config(tmp_path_factory):
    """The study tests' configurations: `study_config(name, experiments, **keys)` is TINY with
    those experiments (and any other top-level keys given), its results in a folder of its own
    named after `name`, read as the CLI reads it."""
    from mathrl.pipeline.config import load_config

    def make(name: str, experiments: dict, **keys) -> dict:
        tmp_path = tmp_path_factory.mktemp(name)
        d = {**copy.deepcopy(TINY), **copy.deepcopy(keys)}
        d.update(results=str(tmp_path / "results"), experiments=experiments)
        return load_config(write_config(tmp_path / "config.yaml", d))

    return make


@pytest.fixture
def tiny_cfg_dict(tmp_path) -> dict:
    cfg = copy.deepcopy(TINY)
    cfg["results"] = str(tmp_path / "results")
    return cfg


@pytest.fixture(scope="session")
def warm(tmp_path_factory) -> dict:
    """Problem sets and a warm-up checkpoint for the tiny add task (built once, then copied)."""
    from mathrl.pipeline.cli import main

    base = tmp_path_factory.mktemp("warm")
    cfg = copy.deepcopy(TINY)
    cfg["results"] = str(base / "results")
    path = write_config(base / "config.yaml", cfg)
    assert main(["problems", "--config", str(path)]) == 0
    assert main(["sft", "--config", str(path), "--task", "add"]) == 0
    return {"config": path, "results": Path(cfg["results"]), "cfg": cfg}


@pytest.fixture
def run_env(warm, tmp_path) -> dict:
    """A private copy of the warmed-up results tree and its config, for one test."""
    import shutil

    cfg = copy.deepcopy(warm["cfg"])
    cfg["results"] = str(tmp_path / "results")
    shutil.copytree(warm["results"], cfg["results"])
    return {"config": write_config(tmp_path / "config.yaml", cfg), "results": Path(cfg["results"]), "cfg": cfg}


# --- Snakemake on the repository's Snakefile (test_pipeline, the fault tests) --------------


def snakemake(workdir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`snakemake -s Snakefile --directory workdir ARGS`, output and errors together."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(workdir), *args]
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip


def planned_runs(output: str) -> set[str]:
    """Run ids of the train jobs a Snakemake log (dry run or real) lists: the runs whose summary a job outputs."""
    lines = re.findall(r"^\s*output: (.*)$", output, re.M)
    return {run for line in lines for run in re.findall(r"runs/([^/\s,]+)/summary\.json", line)}


def tiny_config(workdir: Path, experiments: dict | None = None) -> Path:
    """conftest's TINY at pipeline scale: a 20-step warm-up (its accuracy does not matter
    here), short bandit studies and gradient probe, CPU jobs; results under workdir."""
    cfg = copy.deepcopy(TINY)
    cfg["results"] = "results"  # relative: under --directory workdir
    cfg["sft"]["add"].update(max_steps=20, eval_every=10)
    cfg["bandit"] = {"steps": 10, "seeds": [0]}
    cfg["gradvar"] = {"batch_sizes": [8, 16], "num_samples": 2, "group_size": 4, "accumulation": [16, 8]}
    cfg["pipeline"] = {"gpus_per_run": 0, "gpus_sft": 0}
    # Run a takes its steps from `train`, run b pins its own: a change of train.steps
    # touches a only.
    cfg["experiments"] = experiments or {"tiny": {"variants": {"a": {}, "b": {"steps": 3}}, "seeds": [0]}}
    path = workdir / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def pipeline_dir(tree: Path, workdir: Path, experiments: dict) -> Path:
    """A Snakemake directory (the fault tests') holding the warmed-up tree (problem sets and warm-up are there,
    so only train jobs run) and test_pipeline's tiny config with `experiments`."""
    shutil.copytree(tree, workdir / "results")
    return tiny_config(workdir, experiments)


def snakemake_cmd(workdir: Path, config: Path, *args: str) -> list[str]:
    return [
        PY,
        "-m",
        "snakemake",
        "-s",
        str(SNAKEFILE),
        "--directory",
        str(workdir),
        *args,
        "--configfile",
        str(config),
    ]


def finished_runs(log: str) -> set[str]:
    """Run ids of the train jobs a Snakemake log reports finished (recorded as complete): a job's runs are those
    whose summary it outputs."""
    runs_of_job = {
        job: set(re.findall(r"runs/([^/\s,]+)/summary\.json", outputs))
        for outputs, job in re.findall(r"^\s*output: (.*)\n(?:\s+\w+: .*\n)*?\s*jobid: (\d+)", log, re.M)
    }
    return {run for j in re.findall(r"Finished job(?:id)?:? (\d+)", log) for run in runs_of_job.get(j, ())}


# --- the fault tests: processes, run directories, metrics -----------------------------------

VOLATILE = ["seconds", "sample_seconds", "update_seconds", "eval_seconds"]  # wall-clock columns
# Every step snapshotted, so a kill in step 3 has a complete snapshot of step 2 behind it.
KILL_SETTINGS = ["steps=4", "snapshot_every=1", "reward=shaped"]


def child_env(**extra: str) -> dict:
    """The environment of a command under test: one thread, no fault hook unless given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MATHRL_FAULT_", "TORCHELASTIC_"))}
    return {**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **extra}


def train_cmd(env: dict, run_id: str, *settings: str) -> list[str]:
    return [
        PY,
        "-m",
        "mathrl",
        "train",
        "--config",
        str(env["config"]),
        "--run-id",
        run_id,
        "--threads",
        "1",
        *settings,
    ]


def torchrun_cmd(env: dict, run_id: str, *settings: str, extra: tuple = ()) -> list[str]:
    return [PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *extra,
            "-m", "mathrl", "train", "--config", str(env["config"]), "--run-id", run_id, *settings]  # fmt: skip


def run(cmd: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("env", child_env())
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def run_dir(env: dict, run_id: str) -> Path:
    return env["results"] / "runs" / run_id


def run_files(directory: Path) -> dict[str, bytes]:
    """Every file of a run directory by name, but its lock (mathrl.pipeline.rundir: each process that takes it writes
    its pid
    there)."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name != ".lock"}


def metrics(directory: Path) -> pd.DataFrame:
    return pd.read_csv(directory / "metrics.csv").drop(columns=VOLATILE)


def snapshot_files(directory: Path) -> dict[str, bytes]:
    """Every snapshot-related file of a run directory (temporary ones included) by name."""
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*snapshot*"))}


class Background:
    """Commands started in the background, output to a file, killed (group) at teardown."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def start(
        self, cmd: list[str], log: Path, env: dict, cwd: Path | None = None, err: Path | None = None
    ) -> subprocess.Popen:
        """Start `cmd` in a session of its own: stdout to `log`, stderr to `err` (or `log`)."""
        out = open(log, "w")
        errors = open(err, "w") if err else subprocess.STDOUT
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=errors, env=env, cwd=cwd, start_new_session=True)
        finally:
            out.close()
            if err:
                errors.close()
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def background():
    bg = Background()
    yield bg
    bg.close()


def wait_for(proc: subprocess.Popen, log: Path, pattern: str, timeout: float = 180, until=None) -> re.Match:
    """The first match of `pattern` in the growing file `log` (and `until()` true)."""
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text() if log.exists() else ""
        m = re.search(pattern, text)
        if m and (until is None or until()):
            return m
        assert proc.poll() is None, f"exited with {proc.returncode} before {pattern!r}:\n{text[-4000:]}"
        assert time.monotonic() < deadline, f"no {pattern!r} in {timeout}s:\n{text[-4000:]}"
        time.sleep(0.05)


def gone(pid: int, timeout: float = 30) -> bool:
    """Whether process `pid` has ended (a zombie counts) within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False


# --- the fault tests: one warm-up per session ------------------------------------------


def tiny_cfg(results: Path) -> dict:
    """conftest's TINY with test_pipeline's 20-step warm-up (same files as its tiny_config)."""
    cfg = copy.deepcopy(TINY)
    cfg["results"] = str(results)
    cfg["sft"]["add"].update(max_steps=20, eval_every=10)
    return cfg


@pytest.fixture(scope="session")
def tree(tmp_path_factory) -> Path:
    """The add task's problem sets and a 20-step warm-up checkpoint, built once per session: a results tree."""
    from mathrl.pipeline.cli import main

    base = tmp_path_factory.mktemp("faults_tree")
    path = write_config(base / "config.yaml", tiny_cfg(base / "results"))
    assert main(["problems", "--config", str(path), "--task", "add"]) == 0
    assert main(["sft", "--config", str(path), "--task", "add"]) == 0
    return base / "results"


def copy_tree(tree: Path, where: Path, **changes) -> dict:
    """A private copy of the warmed-up tree and its config (with `changes` at the top level)."""
    cfg = {**tiny_cfg(where / "results"), **changes}
    shutil.copytree(tree, where / "results")
    return {"config": write_config(where / "config.yaml", cfg), "results": where / "results", "cfg": cfg, "dir": where}


@pytest.fixture
def env(tree, tmp_path) -> dict:
    return copy_tree(tree, tmp_path)


@pytest.fixture(scope="session")
def reference(tree, tmp_path_factory) -> pd.DataFrame:
    """metrics.csv of an uninterrupted single-process run with KILL_SETTINGS."""
    e = copy_tree(tree, tmp_path_factory.mktemp("reference"))
    done = run(train_cmd(e, "r", *KILL_SETTINGS))
    assert done.returncode == 0, done.stderr
    return metrics(run_dir(e, "r"))
