"""Where every result lives, stated once.

Paths are relative to the configured results directory (`results`, default results/),
with Snakemake-style {wildcards}. The CLI, the trainer, the Snakemake rules
(rules/common.smk) and the DVC generator (mathrl.pipeline.dvcgen) all take them from here, and the
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
SFT_DIR = "sft/{task}/w{warmup}"  # warm-up k of a task (sft.TASK.warmups of them, each seeded seed + k)
SFT_MODEL = SFT_DIR + "/model.pt"  # the warm-up checkpoint, where the RL runs of its seeds start
SFT_SUMMARY = SFT_DIR + "/" + SUMMARY_FILE
# metrics.csv's columns fixed by DESIGN.md, in their order (mathrl.engine.metrics adds the trainer's own after them)
METRIC_COLUMNS = [
    "step",
    "samples",
    "reward_mean",
    "reward_std",
    "accuracy",
    "eval_accuracy",
    "entropy",
    "kl",
    "kl_coef",
    "grad_norm",
    "policy_loss",
    "value_loss",
    "clip_frac",
    "frac_zero_std",
    "lr",
    "seconds",
]
# metrics.csv's columns of the rollout/trainer mismatch (mathrl.engine.mismatch), in this order (NaN where one does not
# apply); here so that the tables read them without importing the tensor maths
MISMATCH_COLUMNS = [
    "mismatch_logp_diff_mean",
    "mismatch_logp_diff_max",
    "mismatch_kl_k3",
    "mismatch_chi2",
    "mismatch_ess",
    "mismatch_logp_corr",
    "mismatch_corrected_frac",
]
RUNS = "runs"
RUN_DIR = RUNS + "/{run_id}"
RUN_METRICS = RUN_DIR + "/" + METRICS_FILE
RUN_SUMMARY = RUN_DIR + "/" + SUMMARY_FILE
RUN_SNAPSHOT = RUN_DIR + "/" + SNAPSHOT_FILE
CARRY_PROBE_FILE = "carry_probe.csv"  # a run with carry_probe: its start and final policies' entropy by carry
RUN_CARRY_PROBE = RUN_DIR + "/" + CARRY_PROBE_FILE
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
CLAIMS = TABLES + "/claims.csv"  # every verdict the report prints, one row per claim (mathrl.analysis.claims)


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


def sft_checkpoint(cfg: dict, task: str, warmup: int = 0) -> Path:
    return path(cfg["results"], SFT_MODEL, task=task, warmup=warmup)


def warmups(cfg: dict, task: str) -> int:
    """How many independent warm-ups a task has (`sft.TASK.warmups`)."""
    return int(((cfg.get("sft") or {}).get(task) or {}).get("warmups", 1))


def warmup_of(cfg: dict, settings: dict) -> int | None:
    """The warm-up a run starts from: its `warmup` setting, else its seed's (seed mod the task's warm-ups); None for
    a run from a random policy, which starts from no warm-up."""
    if settings.get("init") == "random":
        return None
    if settings.get("warmup") is not None:
        return int(settings["warmup"])
    return int(settings.get("seed", 0)) % warmups(cfg, settings["task"])


def is_start(init: str | None) -> bool:
    """Does a run's `init` name one of its task's warm-up starts (`start_70`)?"""
    return bool(init) and re.fullmatch(r"start_\d+", init) is not None


def starts_tasks(cfg: dict) -> list[str]:
    """The tasks whose warm-up has further starts or supervised controls (`mathrl sft --starts`)."""
    return [task for task, s in cfg["sft"].items() if s.get("starts") or s.get("control_seeds")]


def init_checkpoint(results: str | Path, task: str, init: str | None, warmup: int | None = 0) -> Path | None:
    """The checkpoint a run's `init` names: its warm-up's (None), a start of its warm-up (`start_70`), a
    file, or None for a random policy."""
    if init == "random":
        return None
    if init is None:
        return path(results, SFT_MODEL, task=task, warmup=warmup)
    return path(results, SFT_START_MODEL, task=task, warmup=warmup, start=init) if is_start(init) else Path(init)


# ---------------------------------------------------------------------- the stages
@dataclass(frozen=True)
class Stage:
    """One pipeline step, as the Snakemake rule of the same name and the DVC stages run it.

    `command` is the `mathrl` subcommand; `outputs` maps output names to patterns above;
    `wildcards` are what its jobs differ by (empty: one job); `args` follow `--config` with
    the wildcards filled in, and `out` names the output a command is told with `--out`."""

    name: str
    command: str
    outputs: dict[str, str]
    wildcards: tuple[str, ...] = ()
    args: str = ""
    out: str | None = None
    launched: bool = False  # run through `mathrl launch` (GPU slots, torchrun, the fork server)

    @property
    def wildcard(self) -> str | None:
        """The first wildcard (the one a stage of a single wildcard differs by), None for one job."""
        return self.wildcards[0] if self.wildcards else None

    def _per_job(self, top: str, suffix: str) -> str:
        if not self.wildcards:
            return f"{top}/{self.name}/{self.name}{suffix}" if top == BENCHMARKS else f"{top}/{self.name}{suffix}"
        return f"{top}/{self.name}/" + "/".join(f"{{{w}}}" for w in self.wildcards) + suffix

    @property
    def log(self) -> str:
        return self._per_job(LOGS, ".log")

    @property
    def benchmark(self) -> str:
        return self._per_job(BENCHMARKS, ".tsv")


def _problems(split: str) -> str:
    return PROBLEMS.replace("{split}", split)


STAGES = {
    stage.name: stage
    for stage in [
        Stage(
            "problems",
            "problems",
            {**{split: _problems(split) for split in PROBLEM_SPLITS}, "meta": PROBLEMS_META},
            ("task",),
            "--task {task}",
        ),
        Stage(
            "sft",
            "sft",
            {"model": SFT_MODEL, "summary": SFT_SUMMARY},
            ("task", "warmup"),
            "--task {task} --warmup {warmup}",
        ),
        Stage(
            "sft_starts", "sft", {"starts": SFT_STARTS}, ("task", "warmup"), "--task {task} --warmup {warmup} --starts"
        ),
        # run by `mathrl launch` (GPU slots, the fork server); a run's snapshot is deliberately no output
        Stage(
            "train",
            "train",
            {"metrics": RUN_METRICS, "summary": RUN_SUMMARY},
            ("run_id",),
            "--experiment-run {run_id} --on-mismatch restart",
            launched=True,
        ),
        Stage("gradvar", "gradvar", {"json": GRADVAR}, ("task",), "--task {task}", out="json"),
        Stage("bandit", "bandit", {"metrics": BANDIT}, ("study",), "--study {study}", out="metrics"),
        Stage("aggregate", "aggregate", {"tables": TABLES, "complete": TABLES_COMPLETE}),
        Stage("figures", "figures", {"figures": FIGURES}),
        Stage("report", "report", {"report": REPORT}),
    ]
}


def group_args(run_ids: list[str]) -> list[str]:
    """Each run's `--experiment-run` (as words), for the `train` stage of a group of runs trained by one job one
    after another (Snakemake's `{params.runs:q}` quotes each word)."""
    return [word for run_id in run_ids for word in ("--experiment-run", run_id)]


def group_job(group: str) -> str:
    """The job that trains a group of runs (`config.run_groups`), Snakemake's rule and DVC's stage:
    `train_<group>`, each character that is no letter, digit or `_` written as `_`."""
    return "train_" + re.sub(r"\W", "_", group)


def group_train_args(runs: str) -> str:
    """The `train` stage's arguments for a group of runs, `runs` being their `--experiment-run` words (group_args,
    as Snakemake's `{params.runs:q}` or written out): the runs trained one after another, each logging to its own
    file."""
    s = STAGES["train"]
    return s.args.replace(f"--experiment-run {{{s.wildcard}}}", f"{runs} --run-logs")


def snakemake_shell(stage: str, group: bool = False) -> str:
    """The stage's command in a Snakemake rule's `shell:` syntax: wildcards, outputs, params
    and the log quoted or constrained (rules/*.smk; tests/test_faults_security.py checks)."""
    s = STAGES[stage]
    if group:  # the train stage for a group of runs: their --experiment-run arguments are a param (group_args)
        args = group_train_args("{params.runs:q}")
    else:
        args = s.args
        for w in s.wildcards:
            args = args.replace(f"{{{w}}}", f"{{wildcards.{w}}}")
    if s.out:
        args += f" --out {{output.{s.out}:q}}"
    head = f"{{params.py:q}} -m mathrl {s.command}"
    if s.launched:
        head = (
            "{params.py:q} -m mathrl launch --gpus {resources.gpu} --runs-per-gpu {params.runs_per_gpu:q}"
            " --threads {threads} --torchrun "
            "{params.torchrun:q}"
            " --fork-server {params.fork_server:q} --"
        )
    return " ".join(part for part in (head, "--config {params.config:q}", args, "> {log:q} 2>&1") if part)
