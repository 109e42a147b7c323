"""`mathrl dvc-yaml`: dvc.yaml from the config, so DVC and Snakemake run one pipeline.

DVC cannot run Python to expand the experiments into runs, so the generator writes two files,
both committed, from the same config files Snakemake reads (`config/config.yaml`, plus any
later overrides); a test checks that they are what this module makes of config/config.yaml.
After editing the config, run `mathrl dvc-yaml`, then `dvc repro`.

- `dvc.yaml` holds a templated stage per step that runs once per task or study (DVC's
  `foreach` over its jobs, `${item.<wildcard>}` filled in per job: whatever {wildcards} the
  step's paths in `mathrl.pipeline.layout` have), a stage per task that trains its warm-ups and one
  that trains their further starts, a stage per setting that trains its seeds, then
  aggregate, figures and report, the metrics and the plots; a stage is a few lines.
- `dvc-params.yaml` is data: under `jobs` what each templated stage iterates over (the tasks
  that get problem sets, the gradient probe's tasks, the bandit studies),
  under `groups` each training stage's rerun trigger, and under `config` the merged and
  completed config. dvc.yaml reads it through `vars:`, and every stage's `params` are keys of
  it (`config.tasks.add`, `groups.train_batch__b64`, ...), so a stage reruns when a setting it
  reads changes, whichever config file changed it.

What each stage is:
- `cmd` is the `mathrl` subcommand the Snakemake rule runs (rules/*.smk), with the config
  files themselves in place of Snakemake's merged copy, run by `.venv/bin/python` (what
  `make setup` creates; DVC runs a cmd through the shell in the repository root, so this
  works whether or not the venv is activated; `--python python` writes a file for an
  interpreter on PATH instead, e.g. a conda environment).
- `deps` are the inputs the rule declares, `config/config.schema.yaml` (it fills every
  default) and the `mathrl/` directory; `.dvcignore` leaves `__pycache__/` (which changes
  whenever Python recompiles something) and this module (it changes no result) out of its
  hash. The aggregate stage depends on the directories its inputs live in (so a run of your
  own written there, `mathrl train --run-id mine`, reruns it too).
- paths, commands and arguments come from `mathrl.pipeline.layout` (its `STAGES`), which the
  Snakemake rules read too.
- `outs` are the rule's outputs. A run also tracks its snapshot, with `persist: true`: DVC
  deletes other outputs before it runs a stage, and the snapshot must survive so that a
  killed `dvc repro` resumes the run where it stopped (as a Snakemake rerun does; the
  trainer restarts, setting the old snapshot aside, when the run's settings changed). The
  flip side: a run whose snapshot reached its last step "reruns" (after a change under
  mathrl/) by writing its outputs from that snapshot again, without training; delete
  `results/runs/<run>/snapshot.pt*` to retrain it with new code.
- The warm-ups: a stage per task (`sft-<task>`, and `sft_starts-<task>` for their further
  starts and supervised controls), `mathrl sft --parallel auto` dealing the task's warm-ups
  out to as many processes as the cores give `pipeline.threads_sft` threads each: the
  machine's cores are used and every warm-up has the thread count, hence the checkpoint, of
  its Snakemake job (one per warm-up). Its params are the task's blocks, so a changed
  `sft.<task>` reruns that task's stages only.
- The runs: a stage per group (`config.run_groups`: a setting's seeds), named as its
  Snakemake rule (`train_<group>`, `layout.group_job`), as Snakemake's jobs are; each run
  keeps its own outputs, snapshot and log. Its params are the hash of its runs' settings
  (`groups.<stage>`, `config.group_hash`, the trigger Snakemake's job has), so a changed
  setting reruns its own stage and no other, and its task's block (a run from a random model
  also the warm-up's, whose preset the model takes). DVC runs one stage at a time, so the
  stage's `mathrl launch --parallel auto` deals the seeds out to as many launches as the
  cores give `pipeline.threads_per_run` threads each, each launch training its share one
  after another: the machine's cores are used, and every run has the thread count, hence the
  float sums, of Snakemake's job (a run on more threads gives other numbers). Only the tasks
  some run or the gradient probe uses get problem and warm-up stages, as with `snakemake
  report`, so that both build the same report.

Snakemake after DVC: Snakemake reruns a job when an input is newer than an output (DVC
writes, and `dvc checkout` restores, files in an order of its own), when a job of the target
rule lacks an output or its benchmark, and, from its metadata, when a job's params or code
changed; files DVC wrote have no metadata, so without it Snakemake would not even notice a
config edit. So the last stage, the report, is Snakemake's own report job run inside DVC:
`snakemake figures --touch --forceall` first touches every job's outputs up to the figures
in dependency order and records their metadata (contents unchanged, so DVC sees nothing
new), then `snakemake report --forcerun report` runs the report rule itself, i.e. `mathrl
report` with Snakemake's copy of the same config, writing its log, benchmark and
metadata. Afterwards `snakemake report` has nothing to do, whatever order DVC wrote the
files in; the alternatives (changing the rules' rerun triggers, or `ancient()` inputs)
would weaken Snakemake's own checks. Snakemake marks a directory output's time with an
empty `.snakemake_timestamp` file inside it, as it does after every job it runs; the
aggregate and figures stages create that file themselves, so the touch changes no
DVC-tracked content and a second `dvc repro` has nothing to do. After `dvc checkout` or
`dvc pull` (which run no stage) run the report stage's commands yourself
(`dvc repro --force report`).
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import string
from collections.abc import Sequence
from pathlib import Path

import yaml

from mathrl.pipeline import layout
from mathrl.pipeline.config import ROOT, ConfigError, group_hash, load_config, load_schema, run_groups, trained_runs

DEFAULT_PYTHON = ".venv/bin/python"
SCHEMA = "config/config.schema.yaml"
PARAMS = "dvc-params.yaml"  # beside dvc.yaml: what its stages iterate over, and the params they read
JOBS = "jobs"  # dvc-params.yaml's {stage: its jobs}, what each `foreach` stage iterates over
GROUPS = "groups"  # dvc-params.yaml's {training stage: its runs' settings' hash}, the stage's rerun trigger
YAML_SEQ, YAML_MAP = "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"
CODE = "mathrl"  # the package, one directory dependency of every stage
TIMESTAMP = ".snakemake_timestamp"  # Snakemake's mtime carrier inside a directory output
# Config keys that are no setting of any result: scheduling, and where results go.
NOT_SETTINGS = ("pipeline", "results")

HEADER = """\
# Generated by `mathrl dvc-yaml` from {configs}: do not edit by hand.
# Edit the config, then run `mathrl dvc-yaml` and `dvc repro` (mathrl/pipeline/dvcgen.py says why
# each stage looks the way it does; docs/guide/dvc.md says how to use it).
"""
PARAMS_HEADER = """\
# Generated by `mathrl dvc-yaml` from {configs}: do not edit by hand.
# What dvc.yaml's stages iterate over (its `vars:`), and under `config` the merged, completed
# config whose keys are the stages' params.
"""


class _Flow(list):
    """A list dvc.yaml writes on one line whatever it holds (a training stage's outputs: a run's
    snapshot is a mapping, `{path: {persist: true}}`), so that a stage reads as a few lines."""


class _Block(dict):
    """A mapping written a line per key whatever it holds (dvc-params.yaml's `groups`: one stage's hash a line)."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Flow, lambda dumper, data: dumper.represent_sequence(YAML_SEQ, data, flow_style=True))
_Dumper.add_representer(_Block, lambda dumper, data: dumper.represent_mapping(YAML_MAP, data, flow_style=False))


def fields(pattern: str) -> list[str]:
    """The {wildcards} of a layout pattern (or params key), in order, each once."""
    return list(dict.fromkeys(name for _, name, _, _ in string.Formatter().parse(pattern) if name))


def templated(pattern: str) -> str:
    """`pattern` with each {wildcard} as DVC's `${item.wildcard}`: a `foreach` stage's text, for every job."""
    return pattern.format(**{name: f"${{item.{name}}}" for name in fields(pattern)})


def job_key(job: dict) -> str:
    """A job's key in its `foreach` (the stage's name is `<stage>@<key>`): its wildcards' values, joined by `-`."""
    return "-".join(str(value) for value in job.values())


def quote(path: str) -> str:
    """`shlex.quote` for a path that may hold DVC's `${...}`: left bare when the filled-in path
    needs no quotes for any value a stage key can take (letters, digits, `_`, `-`)."""
    bare = re.sub(r"\$\{[\w.]+\}", "x", path)
    return path if "${" in path and shlex.quote(bare) == bare else shlex.quote(path)


def pipeline_settings(cfg: dict) -> dict:
    """The `pipeline` block with the schema's defaults (as rules/common.smk reads it)."""
    props = load_schema()["definitions"]["pipeline"]["properties"]
    return {key: cfg.get("pipeline", {}).get(key, spec["default"]) for key, spec in props.items()}


# The stages DVC runs once per job, a `foreach` over their jobs' wildcards (`jobs.<stage>` in
# dvc-params.yaml): what each reads (layout patterns, as the Snakemake rule's inputs) and its
# params (keys of dvc-params.yaml), with the job's {wildcards} filled in by DVC.
PROBLEM_FILES = tuple(layout.STAGES["problems"].outputs[split] for split in layout.PROBLEM_SPLITS)
FOREACH = {
    "problems": ((), ("config.tasks.{task}",)),
    # the probe reads a task's first warm-up
    "gradvar": ((*PROBLEM_FILES, layout.SFT_MODEL.replace("{warmup}", "0")), ("config.gradvar", "config.tasks.{task}")),
    "bandit": ((), ("config.bandit",)),
}
# The stages that train a task's warm-ups (`sft`) and their further starts (`sft_starts`): a stage per task
# (`<step>-<task>`; a task's name has no `-`), its warm-ups dealt out to the cores (`mathrl sft --parallel auto`).
# What each reads besides the task's problem sets, per warm-up, and what it tracks per warm-up: the starts'
# directory (checkpoints and starts.json) in place of its declared files.
WARMUP_STAGES = {
    "sft": ((), tuple(layout.STAGES["sft"].outputs.values())),
    "sft_starts": ((layout.SFT_MODEL,), (os.path.dirname(layout.SFT_STARTS),)),
}


class _Writer:
    """Builds dvc.yaml's stages from the layout (mathrl.pipeline.layout.STAGES) for one config."""

    def __init__(self, cfg: dict, configs: Sequence[str], python: str):
        self.results = Path(cfg["results"])
        if self.results.is_absolute() or ".." in self.results.parts:
            raise ConfigError(f"results: {cfg['results']!r} must be a relative path inside the repository for DVC")
        self.cfg = cfg
        self.config_args = " ".join(f"--config {shlex.quote(path)}" for path in configs)
        self.configfiles = " ".join(shlex.quote(path) for path in configs)
        self.python = shlex.quote(python)
        self.mathrl = f"{self.python} -m mathrl"

    def res(self, pattern: str, **wildcards) -> str:
        """A layout pattern, filled in, under the results directory (posix, relative)."""
        return (self.results / pattern.format(**wildcards)).as_posix()

    def outs(self, stage: str, **wildcards) -> list[str]:
        return [self.res(p, **wildcards) for p in layout.STAGES[stage].outputs.values()]

    def item(self, pattern: str) -> str:
        """A layout pattern under the results directory, its wildcards DVC's `${item.*}`."""
        return (self.results / templated(pattern)).as_posix()

    def command(self, stage: str, **wildcards) -> str:
        """`mathrl <command> --config ... <args>`, as the rule's shell line (rules/common.smk)."""
        s = layout.STAGES[stage]
        parts = [self.mathrl, s.command, self.config_args, s.args.format(**wildcards)]
        if s.out:
            parts.append(f"--out {quote(self.res(s.outputs[s.out], **wildcards))}")
        return " ".join(part for part in parts if part)

    def launch(self) -> str:
        """`mathrl launch` with the pipeline's settings, as rules/train.smk runs it, and `--parallel auto`: DVC runs
        one stage at a time, so a group's runs share the machine's cores, each on the pipeline's threads."""
        pipe = pipeline_settings(self.cfg)
        gpus = "" if pipe["gpus_per_run"] == "auto" else f" --gpus {pipe['gpus_per_run']}"  # auto: launch's own default
        fork = "auto" if pipe["fork_server"] else "off"
        threads, torchrun = pipe["threads_per_run"], pipe["torchrun"]
        gpus += f" --runs-per-gpu {pipe['runs_per_gpu']}" if pipe["runs_per_gpu"] != 1 else ""
        return (
            f"{self.mathrl} launch{gpus} --threads {threads} --parallel auto --torchrun {torchrun} --fork-server {fork}"
        )


def stage(cmd, deps: Sequence, params: Sequence[str], outs: Sequence) -> dict:
    """One stage; its params are keys of dvc-params.yaml. The package is one directory
    dependency (.dvcignore leaves __pycache__/ out of its hash)."""
    return {"cmd": cmd, "deps": [*deps, CODE, SCHEMA], "params": [{PARAMS: list(params)}], "outs": _Flow(outs)}


def _foreach_stages(w: _Writer, jobs: dict) -> dict:
    """A templated stage per step that runs once per job (FOREACH), none for a step without jobs."""
    stages = {}
    for name, (reads, params) in FOREACH.items():
        if not jobs[name]:
            continue
        s = layout.STAGES[name]
        wildcards = {f: f"${{item.{f}}}" for p in (*s.outputs.values(), s.args) for f in fields(p)}
        outs = [w.item(p) for p in s.outputs.values()]
        do = stage(w.command(name, **wildcards), [w.item(p) for p in reads], [templated(k) for k in params], outs)
        stages[name] = {"foreach": f"${{{JOBS}.{name}}}", "do": do}
    return stages


def _warmup_stages(w: _Writer, jobs: dict) -> dict:
    """A stage per task and WARMUP_STAGES step: `mathrl sft --parallel auto` trains the task's warm-ups (or their
    starts) in as many processes as the cores give `pipeline.threads_sft` each, so every warm-up has the thread count,
    hence the checkpoint, of Snakemake's job. A changed `sft.TASK` block reruns that task's stage, as it reruns each of
    the task's warm-up jobs in Snakemake."""
    stages = {}
    for name, (reads, tracked) in WARMUP_STAGES.items():
        warmups: dict[str, list[int]] = {}
        for job in jobs[name].values():
            warmups.setdefault(job["task"], []).append(job["warmup"])
        for task, ks in warmups.items():
            deps = [w.res(p, task=task) for p in PROBLEM_FILES] + [
                w.res(p, task=task, warmup=k) for k in ks for p in reads
            ]
            outs = [w.res(p, task=task, warmup=k) for k in ks for p in tracked]
            args = f"--task {task}" + (" --starts" if name == "sft_starts" else "")
            cmd = f"{w.mathrl} sft {w.config_args} {args} --parallel auto"
            stages[f"{name}-{task}"] = stage(cmd, deps, [f"config.tasks.{task}", f"config.sft.{task}"], outs)
    return stages


def _train_stages(w: _Writer, runs: dict, groups: dict[str, list[str]]) -> dict:
    """A stage per group of runs (a setting's seeds, `config.run_groups`), named as its Snakemake rule: `mathrl
    launch --parallel auto` trains them, each run with its own outputs and persistent snapshot. It reads its runs'
    problem sets and start checkpoints; its params are its runs' settings' hash (`groups.<stage>`, the rerun trigger
    Snakemake's job has) and their task's block (a run from a random model also its warm-up's, for the preset)."""
    stages = {}
    for group, run_ids in groups.items():
        settings = [runs[run_id].settings for run_id in run_ids]
        tasks = list(dict.fromkeys(s.task for s in settings))
        inits = dict.fromkeys(layout.init_checkpoint(w.results, s.task, s.init, s.warmup) for s in settings)
        reads = [w.res(p, task=task) for task in tasks for p in PROBLEM_FILES]
        reads += [init.as_posix() for init in inits if init is not None]
        params = [f"{GROUPS}.{layout.group_job(group)}", *(f"config.tasks.{task}" for task in tasks)]
        params += list(dict.fromkeys(f"config.sft.{s.task}" for s in settings if s.init == "random"))
        outs = []
        for run_id in run_ids:
            outs += w.outs("train", run_id=run_id)
            outs.append({w.res(layout.RUN_SNAPSHOT, run_id=run_id): {"persist": True}})
        args = layout.group_train_args(shlex.join(layout.group_args(run_ids)))
        stages[layout.group_job(group)] = stage(f"{w.launch()} -- {w.config_args} {args}", reads, params, outs)
    return stages


def _report_stages(w: _Writer, jobs: dict, trains: bool) -> dict:
    # Tables, figures and the report read every setting (as their Snakemake params hash).
    tables, figures = w.res(layout.TABLES), w.res(layout.FIGURES)
    # The aggregate reads files of every run, study, probe and warm-up: their directories.
    read = [
        (layout.RUN_DIR, trains),
        (layout.BANDIT, jobs["bandit"]),
        (layout.GRADVAR, jobs["gradvar"]),
        (layout.SFT_SUMMARY, jobs["sft"]),
    ]
    inputs = [w.res(pattern.split("/")[0]) for pattern, present in read if present] + [
        layout.CLAIMS_FILE,
        layout.DOCUMENTS_FILE,
    ]  # and the declared claims, and the documents' numbers
    snakemake = f"{w.python} -m snakemake"
    return {
        "aggregate": stage(
            [w.command("aggregate"), f"touch {shlex.quote(f'{tables}/{TIMESTAMP}')}"],
            inputs,
            ["config"],
            w.outs("aggregate"),
        ),
        "figures": stage(
            [w.command("figures"), f"touch {shlex.quote(f'{figures}/{TIMESTAMP}')}"], [tables], ["config"], [figures]
        ),
        # Snakemake's report job, after Snakemake has taken in what DVC built (module docstring).
        "report": stage(
            [
                f"{snakemake} figures --touch --forceall --cores 1 --quiet all --configfile {w.configfiles}",
                f"{snakemake} report --forcerun report --cores 1 --configfile {w.configfiles}",
            ],
            [tables, figures, "report/templates", "Snakefile", "rules"],
            ["config"],
            w.outs("report"),
        ),
    }


def _plots(w: _Writer) -> list:
    """Held-out accuracy and entropy per step from the aggregate's curves table: a panel per
    experiment and a line per run (the template .dvc/plots/runs.json), so every run is drawn
    without naming its file here."""
    curves = w.res(layout.TABLES) + "/curves.csv"
    return [
        {
            metric: {
                "template": "runs",
                "title": f"{what} per RL step (a panel per experiment, a line per run)",
                "x": "step",
                "y": {curves: metric},
            }
        }
        for metric, what in (("eval_accuracy", "held-out accuracy"), ("entropy", "policy entropy"))
    ]


def stage_jobs(cfg: dict, runs: dict, bandit_studies: Sequence[str]) -> dict[str, dict]:
    """Each `foreach` stage's jobs, {key: {wildcard: value}} (`jobs` in dvc-params.yaml): problem sets,
    warm-ups and starts for the tasks some run or the gradient probe uses (as `snakemake report`
    builds them), the probe's tasks and the bandit studies."""
    probe = list(cfg["gradvar"]["tasks"])
    used = {spec.settings.task for spec in runs.values()} | set(probe)
    starts = {task for task in layout.starts_tasks(cfg) if task in used}
    warm = {spec.settings.task for spec in runs.values() if spec.settings.init is None} | set(probe) | starts
    listed = {
        "problems": [{"task": task} for task in cfg["tasks"] if task in used],
        "sft": [
            {"task": task, "warmup": k}
            for task in cfg["tasks"]
            if task in warm
            for k in range(layout.warmups(cfg, task))
        ],
        "sft_starts": [
            {"task": task, "warmup": k}
            for task in cfg["tasks"]
            if task in starts
            for k in range(layout.warmups(cfg, task))
        ],
        "gradvar": [{"task": task} for task in probe],
        "bandit": [{"study": study} for study in bandit_studies],
    }
    return {name: {job_key(job): job for job in jobs} for name, jobs in listed.items()}


def train_groups(runs: dict) -> dict[str, list[str]]:
    """The groups of runs (`config.run_groups`) by their stage's name, `layout.group_job`."""
    groups = run_groups(runs)
    named: dict[str, str] = {}
    for group in groups:
        job = layout.group_job(group)
        if job in named:
            raise ConfigError(
                f"experiments: the runs {named[job]}__s* and {group}__s* would share the job name {job} (DVC's "
                "stage, Snakemake's rule); rename one so that they differ in a letter, digit or _"
            )
        named[job] = group
    return groups


def documents(
    cfg: dict, configs: Sequence[str], bandit_studies: Sequence[str], python: str = DEFAULT_PYTHON
) -> tuple[dict, dict]:
    """dvc.yaml and dvc-params.yaml (dicts) for a completed config read from `configs` (paths
    relative to dvc.yaml's directory, in merge order)."""
    w = _Writer(cfg, configs, python)
    runs = trained_runs(cfg)
    jobs, groups = stage_jobs(cfg, runs, bandit_studies), train_groups(runs)
    stages = {**_foreach_stages(w, jobs), **_warmup_stages(w, jobs), **_train_stages(w, runs, groups)}
    stages |= _report_stages(w, jobs, bool(runs))
    dvc = {"vars": [PARAMS], "stages": stages, "metrics": [w.res(layout.TABLES) + "/metrics.json"], "plots": _plots(w)}
    params = {
        JOBS: {name: listed for name, listed in jobs.items() if name in FOREACH},
        GROUPS: _Block({layout.group_job(group): group_hash(runs, run_ids) for group, run_ids in groups.items()}),
        "config": {key: value for key, value in cfg.items() if key not in NOT_SETTINGS},
    }
    return dvc, params


def dvc_files(
    config_paths: Sequence[str | Path] = (), root: Path = ROOT, python: str = DEFAULT_PYTHON
) -> dict[str, str]:
    """The texts of `root`/dvc.yaml and `root`/dvc-params.yaml for these config files (default
    config/config.yaml), by file name."""
    from mathrl.engine.bandit import BANDIT_STUDIES  # imports torch: only here

    root = Path(root).resolve()
    default = root / "config" / "config.yaml"  # every other file is layered over it, as in Snakemake and the CLI
    paths = [Path(p) for p in config_paths]
    first = (paths[0] if paths[0].is_absolute() else Path.cwd() / paths[0]).resolve() if paths else None
    paths = paths if first == default else [default, *paths]
    configs = []
    for path in paths:
        absolute = (path if path.is_absolute() else Path.cwd() / path).resolve()
        if not absolute.is_relative_to(root):
            raise ConfigError(f"--config {path}: DVC reads params only from files inside {root}")
        configs.append(absolute.relative_to(root).as_posix())
    cfg = load_config([root / p for p in configs])
    if not (root / CODE).is_dir():
        raise ConfigError(f"{root / CODE}: no mathrl sources next to the dvc.yaml to write")
    dvc, params = documents(copy.deepcopy(cfg), configs, list(BANDIT_STUDIES), python)
    header = {"configs": ", ".join(configs)}
    # Lists of plain values (deps, params keys) on one line each: a stage reads as a few lines.
    return {
        "dvc.yaml": HEADER.format(**header)
        + yaml.dump(dvc, Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=100_000),
        PARAMS: PARAMS_HEADER.format(**header)
        + yaml.dump(params, Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=1000),
    }


def dvc_yaml(config_paths: Sequence[str | Path] = (), root: Path = ROOT, python: str = DEFAULT_PYTHON) -> str:
    """The text of `root`/dvc.yaml for these config files (default config/config.yaml)."""
    return dvc_files(config_paths, root, python)["dvc.yaml"]
