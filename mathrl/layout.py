"""Where every result lives, stated once.

Paths are relative to the configured results directory (`results`, default results/),
with Snakemake-style {wildcards}. The CLI, the trainer, the Snakemake rules
(rules/common.smk) and the DVC generator (mathrl.dvcgen) all take them from here, and so
do the pipeline's stages (`mathrl.stages`). Torch-free: the Snakefile reads it.
"""

from __future__ import annotations

from pathlib import Path

PROBLEMS = "problems/{task}/{split}.txt"  # split: train or test; one problem per line
PROBLEMS_META = "problems/{task}/meta.json"
SFT_MODEL = "sft/{task}/model.pt"  # the warm-up checkpoint, every RL run's default start
SFT_SUMMARY = "sft/{task}/summary.json"
RUN_DIR = "runs/{run_id}"
RUN_METRICS = RUN_DIR + "/metrics.csv"
RUN_SUMMARY = RUN_DIR + "/summary.json"
RUN_SNAPSHOT = RUN_DIR + "/snapshot.pt"
GRADVAR = "gradvar/{task}.json"
BANDIT = "bandit/{study}/metrics.csv"
TABLES = "tables"
FIGURES = "figures"
REPORT = "report.html"
LOGS = "logs"
BENCHMARKS = "benchmarks"


def path(results: str | Path, pattern: str, **wildcards) -> Path:
    """`pattern` with its wildcards filled, under `results`."""
    return Path(results) / pattern.format(**wildcards)


def problems_file(cfg: dict, task: str, split: str) -> Path:
    return path(cfg["results"], PROBLEMS, task=task, split=split)


def problems_dir(cfg: dict, task: str) -> Path:
    return problems_file(cfg, task, "train").parent


def sft_checkpoint(cfg: dict, task: str) -> Path:
    return path(cfg["results"], SFT_MODEL, task=task)
