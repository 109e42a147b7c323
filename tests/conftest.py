"""Shared fixtures: a tiny configuration and a warmed-up tiny task, built once per session."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parent.parent

TINY = {
    "standalone": True,  # a whole configuration, not layered over config/config.yaml
    "tasks": {
        "add": {"op": "add", "ndigit": 2, "n_train": 2000, "n_test": 100, "seed": 1},
        "mul": {"op": "mul", "ndigit": 1, "n_train": 0, "n_test": 20, "seed": 1},
    },
    "sft": {
        "add": {"preset": "small", "lr": 2.0e-3, "batch_size": 128, "max_steps": 400, "eval_every": 20, "band": [0.3, 0.9]},
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


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.fixture
def tiny_cfg_dict(tmp_path) -> dict:
    cfg = copy.deepcopy(TINY)
    cfg["results"] = str(tmp_path / "results")
    return cfg


@pytest.fixture(scope="session")
def warm(tmp_path_factory) -> dict:
    """Problem sets and a warm-up checkpoint for the tiny add task (built once, then copied)."""
    from mathrl.cli import main

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
