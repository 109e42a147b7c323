"""Shared by every rule: the validated config, the runs it expands into, output paths,
resources and the small input functions. The logic lives in `mathrl`; this is glue."""

import copy
import hashlib
import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, update_config, validate
from snakemake_interface_executor_plugins.settings import DeploymentMethod

import mathrl.pipeline.config
from mathrl.pipeline import layout
from mathrl.pipeline.atomic import atomic_write
from mathrl.pipeline.config import ConfigError, config_hash

min_version("8.0")


# ---- configuration ----------------------------------------------------------------------
def typed(value):
    """A --config value with YAML types, as `mathrl --set` reads it: Snakemake reads the
    values inside a mapping as strings (`--config train='{steps: 6}'` gives '6')."""
    if isinstance(value, Mapping):
        return {key: typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [typed(item) for item in value]
    return (
        mathrl.pipeline.config.parse_value(value) if isinstance(value, str) else value
    )


def config_source() -> str:
    """Where `config` came from, for error messages."""
    parts = [str(path) for path in workflow.configfiles]
    return ", ".join(parts + (["--config"] if workflow.config_settings.config else []))


# `config` is what Snakemake merged: config/config.yaml, any --configfile, then --config.
# mathrl checks it first, because its messages name the key, the value and what is
# allowed in one line; it also fills the defaults (Snakemake must not: experiments'
# settings are overrides) and checks what a schema cannot, e.g. that a run's task exists.
# A bad config stops here, before any job starts or anything is written under results/.
# A --configfile that says `standalone: true` is a whole configuration, as it is to
# `mathrl --config`: Snakemake has merged it over config/config.yaml (and any --configfile
# before it), so the config is read again from the command line's files, without those.
_CLI_FILES = list(workflow.config_settings.configfiles)
try:
    # Each file read strictly, as mathrl reads it: Snakemake's reader keeps the second of a key given twice
    # (the workflow's config/config.yaml and the command line's files).
    for _path in workflow.configfiles:
        mathrl.pipeline.config.read_yaml(_path)
    if any(
        mathrl.pipeline.config.read_yaml(path).get("standalone") for path in _CLI_FILES
    ):
        config.clear()
        config.update(mathrl.pipeline.config.read_layers(_CLI_FILES)[0])
except ConfigError as exc:
    raise WorkflowError(str(exc)) from None
# Snakemake reads --configfile as YAML 1.1 (`1e-3` is text there); mathrl reads YAML 1.2 numbers.
config.update(mathrl.pipeline.config.yaml12_numbers(dict(config)))
update_config(config, typed(workflow.config_settings.config))
try:
    # Validated and expanded once per configuration and code (mathrl.pipeline.config.completed's cache):
    # every Snakemake call, and every cluster job's, reads the workflow again.
    CFG, ALL_RUNS = mathrl.pipeline.config.completed(
        copy.deepcopy(config), source=config_source()
    )
except ConfigError as exc:
    raise WorkflowError(str(exc)) from None
validate(config, "../config/config.schema.yaml", set_default=False)


def write_config_file(cfg: dict) -> Path:
    """`cfg` as `.snakemake/mathrl/config-<hash>.yaml`, the file every mathrl command gets.

    The CLI thus sees exactly the config Snakemake has, whatever the config files and
    --config said. The name is the content's hash and an existing file is never rewritten,
    so a running job never sees its config change; the write is atomic because cluster
    jobs parse the workflow (and reach this line) concurrently. Keys keep their order:
    experiments and variants are expanded, tabled and drawn in the order the config gives
    them (batch 64 before 512), as `mathrl` reads the config files themselves.
    """
    text = yaml.safe_dump({**cfg, "standalone": True}, sort_keys=False)  # read alone
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = Path(".snakemake", "mathrl", f"config-{digest}.yaml")
    if not path.exists():
        atomic_write(path, text)
    return path


# Both go to the rules as params, as Path objects: Snakemake leaves values that are not
# builtins out of its params rerun trigger, and which file holds the config or which
# interpreter runs must rerun nothing. What must rerun a job is its own settings' hash,
# a params value of its rule (a run reruns when its settings change, and only then).
# The declared claims (in the repository, wherever the workflow runs): the tables are judged against them.
CLAIMS_FILE = str(mathrl.pipeline.config.ROOT / layout.CLAIMS_FILE)
# The documents' numbers the tables set beside ours (in the repository too).
DOCUMENTS_FILE = str(mathrl.pipeline.config.ROOT / layout.DOCUMENTS_FILE)
CONFIG_FILE = write_config_file(copy.deepcopy(config))

# Every rule names envs/mathrl.yaml. Under --use-conda a job runs in that environment with
# the package from this source tree; otherwise in the interpreter that runs Snakemake
# (make setup's .venv, activated or not).
if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
    PY = Path("python")
    shell.prefix(
        f"set -euo pipefail; export PYTHONPATH={shlex.quote(workflow.basedir)}; "
    )
else:
    PY = Path(sys.executable)

RESULTS = CFG["results"]
RUNS = mathrl.pipeline.config.trained(
    ALL_RUNS
)  # runs that reuse another's identical settings are read, not trained
# One job per group: a setting's seeds, trained one after another (Snakemake's own time per
# job grows with the number of jobs waiting, and a short run costs less than its job).
RUN_GROUPS = mathrl.pipeline.config.run_groups(RUNS)


def results(path: str) -> str:
    """A path under the configured results directory."""
    return os.path.join(RESULTS, path)


# ---- the stages: outputs, logs, benchmarks and commands from mathrl.pipeline.layout ---------------
def outputs(stage: str) -> dict:
    """The rule's named outputs (patterns under the results directory)."""
    return {
        name: results(pattern) for name, pattern in layout.STAGES[stage].outputs.items()
    }


def log_of(stage: str) -> str:
    return results(layout.STAGES[stage].log)


def benchmark_of(stage: str) -> str:
    return results(layout.STAGES[stage].benchmark)


def mathrl_shell(stage: str, group: bool = False) -> str:
    """`mathrl <command> --config <the config file> <args> > <log>`: a rule's whole command
    (the train stage's for a group of runs, named by params.runs)."""
    return layout.snakemake_shell(stage, group)


class LaunchSetting:
    """A params value that reaches a shell command (quoted) but is no rerun trigger:
    Snakemake hashes builtin-typed params only, and how a run is started (torchrun or
    not, forked or not) changes none of its results."""

    def __init__(self, value):
        self.value = value

    def __str__(self):
        return str(self.value)


# ---- resources: the `pipeline` block, defaults from the schema --------------------------
PIPELINE = {
    key: CFG["pipeline"].get(key, spec["default"])
    for key, spec in mathrl.pipeline.config.load_schema()["definitions"]["pipeline"][
        "properties"
    ].items()
}


@lru_cache
def visible_gpus() -> int:
    """GPUs this machine shows; torch (slow to import) is asked only where nvidia-smi is."""
    if "MATHRL_FAKE_GPUS" not in os.environ and shutil.which("nvidia-smi") is None:
        return 0
    from mathrl.pipeline.gpus import visible_gpu_count

    return visible_gpu_count()


def gpus(setting) -> int:
    """A `pipeline` GPU count: an int as it is, auto as 1 if a GPU is visible, else 0."""
    return (1 if visible_gpus() > 0 else 0) if setting == "auto" else setting


GPUS_PER_RUN = gpus(PIPELINE["gpus_per_run"])
GPUS_SFT = gpus(PIPELINE["gpus_sft"])

# One torchrun worker per GPU splits each run's batch: check every run for that world
# size now, rather than let jobs fail one by one.
if GPUS_PER_RUN > 1:
    try:
        for run_id, spec in RUNS.items():
            mathrl.pipeline.config.check_train(
                CFG,
                spec.settings.as_dict(),
                f"experiments.{spec.experiment} (run {run_id}, {GPUS_PER_RUN} GPUs)",
                world_size=GPUS_PER_RUN,
            )
    except ConfigError as exc:
        raise WorkflowError(str(exc)) from None


wildcard_constraints:
    task="|".join(map(re.escape, CFG["tasks"])),
    warmup=r"\d+",
    study="[A-Za-z0-9_]+",


# ---- what each rule reads ---------------------------------------------------------------
@lru_cache
def bandit_studies() -> tuple:
    """The bandit studies (from the torch-free half of mathrl.engine.bandit)."""
    from mathrl.pipeline.bandit_config import BANDIT_STUDIES

    return tuple(BANDIT_STUDIES)


def problem_files(task: str) -> dict:
    return {
        split: results(layout.PROBLEMS.format(task=task, split=split))
        for split in layout.PROBLEM_SPLITS
    }


def sft_checkpoint(task: str, warmup) -> str:
    return results(layout.SFT_MODEL.format(task=task, warmup=warmup))


def warmup_models() -> list:
    """Every task's warm-up checkpoints (sft.TASK.warmups of each)."""
    return [
        sft_checkpoint(task, k)
        for task in CFG["sft"]
        if task in CFG["tasks"]
        for k in range(layout.warmups(CFG, task))
    ]


def starts_files() -> list:
    """starts.json of each warm-up of each task with starts or supervised controls."""
    return [
        results(layout.SFT_STARTS.format(task=task, warmup=k))
        for task in layout.starts_tasks(CFG)
        for k in range(layout.warmups(CFG, task))
    ]


def get_sft_inputs(wildcards):
    """A task's warm-up trains on its problem sets."""
    return problem_files(wildcards.task)


def run_inputs(run_id: str) -> list:
    """A run's problem sets and the checkpoint it starts from (its warm-up's model, a start
    of its warm-up, the `init` file it names, or nothing for `init: random`)."""
    settings = RUNS[run_id].settings
    inputs = list(problem_files(settings.task).values())
    task, init, warmup = settings.task, settings.init, settings.warmup
    if layout.is_start(init):  # a start's checkpoint: the starts job writes it
        inputs.append(results(layout.SFT_STARTS.format(task=task, warmup=warmup)))
    elif init != "random":
        inputs.append(str(layout.init_checkpoint(RESULTS, task, init, warmup)))
    return inputs


def group_inputs(run_ids: list) -> list:
    """What a group's runs read (they differ by seed alone, so this is one run's)."""
    return sorted({path for run_id in run_ids for path in run_inputs(run_id)})


def group_outputs(run_ids: list) -> list:
    """Every run's metrics and summary (`train` stage outputs)."""
    return [results(pattern.format(run_id=run_id)) for run_id in run_ids
            for pattern in layout.STAGES["train"].outputs.values()]  # fmt: skip


def get_gradvar_inputs(wildcards):
    """The probe reads a task's problem sets and its first warm-up's model."""
    return {**problem_files(wildcards.task), "init": sft_checkpoint(wildcards.task, 0)}


def run_outputs(pattern: str) -> list:
    """`pattern` (layout.RUN_SUMMARY or RUN_METRICS) of every run."""
    return [results(pattern.format(run_id=run_id)) for run_id in RUNS]


def experiment_outputs(name: str) -> list:
    """The run summaries of one experiment (a run shared with another experiment is read
    from the run that trains it)."""
    return sorted(
        {
            results(layout.RUN_SUMMARY.format(run_id=spec.trained_as))
            for spec in ALL_RUNS.values()
            if spec.experiment == name
        }
    )


def bandit_outputs() -> list:
    return [results(layout.BANDIT.format(study=study)) for study in bandit_studies()]


def get_runs_targets(wildcards):
    """Target `runs`: every RL run and every bandit study."""
    return run_outputs(layout.RUN_SUMMARY) + bandit_outputs()


def get_aggregate_inputs(wildcards):
    """The tables read every run, bandit study and gradient-variance probe."""
    from mathrl.analysis.results import aggregate_inputs

    return aggregate_inputs(CFG, RUNS)


# ---- params rerun triggers: the hash of the settings a job's output depends on ----------
def get_task_hash(wildcards):
    return config_hash(CFG["tasks"][wildcards.task])


def get_sft_hash(wildcards):
    """One warm-up's own settings and its index (the starts job's keys do not change its checkpoint)."""
    from mathrl.engine.sft import warmup_settings

    return config_hash(
        [warmup_settings(CFG["sft"][wildcards.task]), int(wildcards.warmup)]
    )


def get_starts_hash(wildcards):
    return config_hash([CFG["sft"][wildcards.task], int(wildcards.warmup)])


def group_hash(run_ids: list) -> str:
    """The hash of the group's runs' settings (mathrl.pipeline.config.group_hash, DVC's trigger too)."""
    return mathrl.pipeline.config.group_hash(RUNS, run_ids)


def get_bandit_hash(wildcards):
    """The shared bandit keys and this study's own block (other studies' edits aside)."""
    block = CFG.get("bandit") or {}
    shared = {key: value for key, value in block.items() if key != "studies"}
    return config_hash([shared, block.get("studies", {}).get(wildcards.study)])


def get_gradvar_hash(wildcards):
    return config_hash({k: v for k, v in CFG["gradvar"].items() if k != "tasks"})


def get_summary_hash(wildcards):
    """Tables, figures and report: everything but the scheduling and the results path."""
    return config_hash(
        {k: v for k, v in CFG.items() if k not in ("pipeline", "results")}
    )


# ---- the Snakemake report (--report) -----------------------------------------------------
def get_report_section(wildcards):
    """The report section of a table or figure: its study's title, from the `{study}_`
    prefix of its name (mathrl.analysis.studies, imported only when a report is built).
    """
    from mathrl.analysis.studies import STUDIES

    for study in STUDIES:
        if wildcards.name.startswith(f"{study.NAME}_"):
            return study.TITLE
    return "Overview"
