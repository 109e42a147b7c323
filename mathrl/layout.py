"""Where every result lives, stated once.

Paths are relative to the configured results directory (`results`, default results/),
with Snakemake-style {wildcards}. The CLI, the trainer, the Snakemake rules
(rules/common.smk) and the DVC generator (mathrl.dvcgen) all take them from here, and the
pipeline's stages too (`STAGES`: each stage's command, outputs, log and benchmark). Torch-free:
the Snakefile reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PROBLEMS = "problems/{task}/{split}.txt"  # split: one of PROBLEM_SPLITS; one problem per line
PROBLEM_SPLITS = ("train", "val", "test")  # val: the warm-up's stopping rule; test: every score
PROBLEMS_META = "problems/{task}/meta.json"
METRICS_FILE, SUMMARY_FILE, SNAPSHOT_FILE = (
    "metrics.csv",
    "summary.json",
    "snapshot.pt",
)  # the files of a run's directory
SFT_DIR = "sft/{task}"
SFT_MODEL = SFT_DIR + "/model.pt"  # the warm-up checkpoint, every RL run's default start
SFT_SUMMARY = SFT_DIR + "/" + SUMMARY_FILE
# metrics.csv's columns fixed by DESIGN.md, in their order (mathrl.metrics adds the trainer's own after them)
METRIC_COLUMNS = [
    "step", "samples", "reward_mean", "reward_std", "accuracy", "eval_accuracy", "entropy", "kl",
    "kl_coef", "grad_norm", "policy_loss", "value_loss", "clip_frac", "frac_zero_std", "lr", "seconds",
]  # fmt: skip
RUNS = "runs"
RUN_DIR = RUNS + "/{run_id}"
RUN_METRICS = RUN_DIR + "/" + METRICS_FILE
RUN_SUMMARY = RUN_DIR + "/" + SUMMARY_FILE
RUN_SNAPSHOT = RUN_DIR + "/" + SNAPSHOT_FILE
SFT_STARTS = SFT_DIR + "/starts/starts.json"  # the further starts and their supervised controls (mathrl sft --starts)
SFT_START_MODEL = SFT_DIR + "/starts/{start}.pt"  # one start's checkpoint, named start_PCT (a run's `init: start_70`)
GRADVAR = "gradvar/{task}.json"
BANDIT = "bandit/{study}/" + METRICS_FILE
TABLES = "tables"
TABLES_COMPLETE = TABLES + ".complete"  # written only when no table input was missing (results.complete_marker)
FIGURES = "figures"
REPORT = "report.html"
IMPORTED = "imported/{name}"  # a set of other frameworks' logs (`mathrl import`): runs/, tables/, report.html
COMPARE = "compare/{name}.csv"  # `mathrl compare`'s table (its figure beside it, .png)
LOGS = "logs"
BENCHMARKS = "benchmarks"
CLAIMS_FILE = (  # the declared claims (relative to the repository, not to results); an input of the tables
    "config/claims.yaml"
)
DOCUMENTS_FILE = "config/documents.yaml"  # the documents' numbers set beside ours in the tables; an input of the tables
CLAIMS = TABLES + "/claims.csv"  # every verdict the report prints, one row per claim (mathrl.claims)


def path(results: str | Path, pattern: str, **wildcards) -> Path:
    """`pattern` with its wildcards filled, under `results`."""
    return Path(results) / pattern.format(**wildcards)


def at(cfg: dict, pattern: str, **wildcards) -> Path:
    """`pattern` with its wildcards filled, under the config's results directory."""
    return path(cfg["results"], pattern, **wildcards)


def problems_file(cfg: dict, task: str, split: str) -> Path:
    return path(cfg["results"], PROBLEMS, task=task, split=split)


def problems_dir(cfg: dict, task: str) -> Path:
    return problems_file(cfg, task, "train").parent


def sft_checkpoint(cfg: dict, task: str) -> Path:
    return path(cfg["results"], SFT_MODEL, task=task)


def is_start(init: str | None) -> bool:
    """Does a run's `init` name one of its task's warm-up starts (`start_70`)?"""
    return bool(init) and re.fullmatch(r"start_\d+", init) is not None


def starts_tasks(cfg: dict) -> list[str]:
    """The tasks whose warm-up has further starts or supervised controls (`mathrl sft --starts`)."""
    return [task for task, s in cfg["sft"].items() if s.get("starts") or s.get("control_seeds")]


def init_checkpoint(results: str | Path, task: str, init: str | None) -> Path | None:
    """The checkpoint a run's `init` names: the warm-up's (None), a start's (`start_70`), a
    file, or None for a random policy."""
    if init == "random":
        return None
    if init is None:
        return path(results, SFT_MODEL, task=task)
    return path(results, SFT_START_MODEL, task=task, start=init) if is_start(init) else Path(init)


# ---------------------------------------------------------------------- the stages
@dataclass(frozen=True)
class Stage:
    """One pipeline step, as the Snakemake rule of the same name and the DVC stages run it.

    `command` is the `mathrl` subcommand; `outputs` maps output names to patterns above;
    `wildcard` is what its jobs differ by (None: one job); `args` follow `--config` with
    {wildcard} filled in, and `out` names the output a command is told with `--out`."""

    name: str
    command: str
    outputs: dict[str, str]
    wildcard: str | None = None
    args: str = ""
    out: str | None = None
    launched: bool = False  # run through `mathrl launch` (GPU slots, torchrun, the fork server)

    @property
    def log(self) -> str:
        return f"{LOGS}/{self.name}/{{{self.wildcard}}}.log" if self.wildcard else f"{LOGS}/{self.name}.log"

    @property
    def benchmark(self) -> str:
        return (
            f"{BENCHMARKS}/{self.name}/{{{self.wildcard}}}.tsv"
            if self.wildcard
            else f"{BENCHMARKS}/{self.name}/{self.name}.tsv"
        )


def _problems(split: str) -> str:
    return PROBLEMS.replace("{split}", split)


STAGES = {stage.name: stage for stage in [
    Stage("problems", "problems", {**{split: _problems(split) for split in PROBLEM_SPLITS}, "meta": PROBLEMS_META},
          "task", "--task {task}"),
    Stage("sft", "sft", {"model": SFT_MODEL, "summary": SFT_SUMMARY}, "task", "--task {task}"),
    Stage("sft_starts", "sft", {"starts": SFT_STARTS}, "task", "--task {task} --starts"),
    # run by `mathrl launch` (GPU slots, the fork server); a run's snapshot is deliberately no output
    Stage("train", "train", {"metrics": RUN_METRICS, "summary": RUN_SUMMARY}, "run_id",
          "--experiment-run {run_id} --on-mismatch restart",
          launched=True),
    Stage("gradvar", "gradvar", {"json": GRADVAR}, "task", "--task {task}", out="json"),
    Stage("bandit", "bandit", {"metrics": BANDIT}, "study", "--study {study}", out="metrics"),
    Stage("aggregate", "aggregate", {"tables": TABLES, "complete": TABLES_COMPLETE}),
    Stage("figures", "figures", {"figures": FIGURES}),
    Stage("report", "report", {"report": REPORT}),
]}  # fmt: skip


def group_args(run_ids: list[str]) -> list[str]:
    """Each run's `--experiment-run` (as words), for the `train` stage of a group of runs trained by one job one
    after another (Snakemake's `{params.runs:q}` quotes each word)."""
    return [word for run_id in run_ids for word in ("--experiment-run", run_id)]


def snakemake_shell(stage: str, group: bool = False) -> str:
    """The stage's command in a Snakemake rule's `shell:` syntax: wildcards, outputs, params
    and the log quoted or constrained (rules/*.smk; tests/test_faults_security.py checks)."""
    s = STAGES[stage]
    if group:  # the train stage for a group of runs: their --experiment-run arguments are a param (group_args)
        args = s.args.replace(f"--experiment-run {{{s.wildcard}}}", "{params.runs:q} --run-logs")
    else:
        args = s.args.replace(f"{{{s.wildcard}}}", f"{{wildcards.{s.wildcard}}}") if s.wildcard else s.args
    if s.out:
        args += f" --out {{output.{s.out}:q}}"
    head = f"{{params.py:q}} -m mathrl {s.command}"
    if s.launched:
        head = ("{params.py:q} -m mathrl launch --gpus {resources.gpu} --runs-per-gpu {params.runs_per_gpu:q}"
                " --threads {threads} --torchrun "
                "{params.torchrun:q}"
                " --fork-server {params.fork_server:q} --")  # fmt: skip
    return " ".join(part for part in (head, "--config {params.config:q}", args, "> {log:q} 2>&1") if part)
