"""`mathrl dvc-yaml`: dvc.yaml from the config, so DVC and Snakemake run one pipeline.

DVC cannot run Python to expand the experiments into runs, so the generator writes two files,
both committed, from the same config files Snakemake reads (`config/config.yaml`, plus any
later overrides); a test checks that they are what this module makes of config/config.yaml.
After editing the config, run `mathrl dvc-yaml`, then `dvc repro`.

- `dvc.yaml` is short: one templated stage per step (DVC's `foreach` over the lists below,
  `${item.x}` filled in per run or task), then aggregate, figures and report, the metrics and
  the plots.
- `dvc-params.yaml` is data: the lists the stages iterate over (the tasks that get problem
  sets and warm-ups, the trained runs, the gradient probe's tasks, the bandit studies) and,
  under `config`, the merged and completed config. dvc.yaml reads it through `vars:`, and every
  stage's `params` are keys of it (`config.tasks.add`, `config.experiments.batch`, ...), so a
  stage reruns when a setting it reads changes, whichever config file changed it.

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
- paths, commands and arguments come from `mathrl.layout` (its `STAGES`), which the
  Snakemake rules read too.
- `outs` are the rule's outputs. A run also tracks its snapshot, with `persist: true`: DVC
  deletes other outputs before it runs a stage, and the snapshot must survive so that a
  killed `dvc repro` resumes the run where it stopped (as a Snakemake rerun does; the
  trainer restarts, setting the old snapshot aside, when the run's settings changed). The
  flip side: a run whose snapshot reached its last step "reruns" (after a change under
  mathrl/) by writing its outputs from that snapshot again, without training; delete
  `results/runs/<run>/snapshot.pt*` to retrain it with new code.
- Runs start from their task's warm-up (`train`) or from a random model (`train-from-scratch`,
  whose params add the warm-up's block: the model takes its preset). Only the tasks some run
  or the gradient probe uses get problem and warm-up stages, as with `snakemake report`, so
  that both build the same report. A stage is named `train@<run id>` (a `.` in a run id
  becomes `p`: DVC's keys are dotted paths).

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
from collections.abc import Sequence
from pathlib import Path

import yaml

from mathrl import layout
from mathrl.config import ROOT, ConfigError, load_config, load_schema, trained_runs

DEFAULT_PYTHON = ".venv/bin/python"
SCHEMA = "config/config.schema.yaml"
PARAMS = "dvc-params.yaml"  # beside dvc.yaml: what its stages iterate over, and the params they read
CODE = "mathrl"  # the package, one directory dependency of every stage
TIMESTAMP = ".snakemake_timestamp"  # Snakemake's mtime carrier inside a directory output
# Config keys that are no setting of any result: scheduling, and where results go.
NOT_SETTINGS = ("pipeline", "results")

HEADER = """\
# Generated by `mathrl dvc-yaml` from {configs}: do not edit by hand.
# Edit the config, then run `mathrl dvc-yaml` and `dvc repro` (mathrl/dvcgen.py says why
# each stage looks the way it does; the README's DVC paragraph says how to use it).
"""
PARAMS_HEADER = """\
# Generated by `mathrl dvc-yaml` from {configs}: do not edit by hand.
# What dvc.yaml's stages iterate over (its `vars:`), and under `config` the merged, completed
# config whose keys are the stages' params.
"""


def run_key(run_id: str) -> str:
    """A run's key in dvc-params.yaml, and so in its stage's name `train@<key>`: DVC reads keys
    as dotted paths, so `batch__lr-0.5__s0` becomes `batch__lr-0p5__s0`."""
    return run_id.replace(".", "p")


def quote(path: str) -> str:
    """`shlex.quote` for a path that may hold DVC's `${...}`: left bare when the filled-in path
    needs no quotes for any value a stage key can take (letters, digits, `_`, `-`)."""
    bare = re.sub(r"\$\{[\w.]+\}", "x", path)
    return path if "${" in path and shlex.quote(bare) == bare else shlex.quote(path)


def pipeline_settings(cfg: dict) -> dict:
    """The `pipeline` block with the schema's defaults (as rules/common.smk reads it)."""
    props = load_schema()["definitions"]["pipeline"]["properties"]
    return {key: cfg.get("pipeline", {}).get(key, spec["default"]) for key, spec in props.items()}


class _Writer:
    """Builds dvc.yaml's stages from the layout (mathrl.layout.STAGES) for one config."""

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

    def problems(self, task: str) -> list[str]:
        """The problem sets a warm-up, run or probe of `task` reads (not the metadata file)."""
        return self.outs("problems", task=task)[: len(layout.PROBLEM_SPLITS)]

    def command(self, stage: str, **wildcards) -> str:
        """`mathrl <command> --config ... <args>`, as the rule's shell line (rules/common.smk)."""
        s = layout.STAGES[stage]
        parts = [self.mathrl, s.command, self.config_args, s.args.format(**wildcards)]
        if s.out:
            parts.append(f"--out {quote(self.res(s.outputs[s.out], **wildcards))}")
        return " ".join(part for part in parts if part)

    def launch(self) -> str:
        """`mathrl launch` with the pipeline's settings, as rules/train.smk runs it."""
        pipe = pipeline_settings(self.cfg)
        gpus = "" if pipe["gpus_per_run"] == "auto" else f" --gpus {pipe['gpus_per_run']}"  # auto: launch's own default
        fork = "auto" if pipe["fork_server"] else "off"
        threads, torchrun = pipe["threads_per_run"], pipe["torchrun"]
        gpus += f" --runs-per-gpu {pipe['runs_per_gpu']}" if pipe["runs_per_gpu"] != 1 else ""
        return f"{self.mathrl} launch{gpus} --threads {threads} --torchrun {torchrun} --fork-server {fork}"


def stage(cmd, deps: Sequence, params: Sequence[str], outs: Sequence) -> dict:
    """One stage; its params are keys of dvc-params.yaml. The package is one directory
    dependency (.dvcignore leaves __pycache__/ out of its hash)."""
    return {"cmd": cmd, "deps": [*deps, CODE, SCHEMA], "params": [{PARAMS: list(params)}], "outs": list(outs)}


def _step_stages(w: _Writer, lists: dict) -> dict:
    """The stages of the tasks, runs and probes, one `foreach` each (none over an empty list)."""

    def train_outs():  # a new list per stage: YAML would write a shared one as an anchor
        snapshot = w.res(layout.RUN_SNAPSHOT, run_id="${item.run_id}")
        return [*w.outs("train", run_id="${item.run_id}"), {snapshot: {"persist": True}}]

    train_cmd = f"{w.launch()} -- {w.config_args} {layout.STAGES['train'].args.format(run_id='${item.run_id}')}"
    run_params = [
        "config.train",
        "config.algorithms",
        "config.experiments.${item.experiment}",
        "config.tasks.${item.task}",
    ]
    steps = {  # stage name: (the list in dvc-params.yaml it iterates over, the stage)
        "problems": (
            "problem_tasks",
            stage(
                w.command("problems", task="${item}"), [], ["config.tasks.${item}"], w.outs("problems", task="${item}")
            ),
        ),
        "sft": (
            "warm_up_tasks",
            stage(
                w.command("sft", task="${item}"),
                w.problems("${item}"),
                ["config.tasks.${item}", "config.sft.${item}"],
                w.outs("sft", task="${item}"),
            ),
        ),
        "sft_starts": (
            "start_tasks",
            stage(
                w.command("sft_starts", task="${item}"),
                [*w.problems("${item}"), w.res(layout.SFT_MODEL, task="${item}")],
                ["config.tasks.${item}", "config.sft.${item}"],
                [w.res(os.path.dirname(layout.SFT_STARTS), task="${item}")],  # the starts' checkpoints and starts.json
            ),
        ),
        "train": ("runs", stage(train_cmd, [*w.problems("${item.task}"), "${item.init}"], run_params, train_outs())),
        "train-from-scratch": (
            "runs_from_scratch",
            stage(train_cmd, w.problems("${item.task}"), [*run_params, "config.sft.${item.task}"], train_outs()),
        ),
        "gradvar": (
            "gradvar_tasks",
            stage(
                w.command("gradvar", task="${item}"),
                [*w.problems("${item}"), w.res(layout.SFT_MODEL, task="${item}")],
                ["config.gradvar", "config.tasks.${item}"],
                w.outs("gradvar", task="${item}"),
            ),
        ),
        "bandit": (
            "bandit_studies",
            stage(w.command("bandit", study="${item}"), [], ["config.bandit"], w.outs("bandit", study="${item}")),
        ),
    }
    return {name: {"foreach": f"${{{over}}}", "do": do} for name, (over, do) in steps.items() if lists[over]}


def _report_stages(w: _Writer, lists: dict) -> dict:
    # Tables, figures and the report read every setting (as their Snakemake params hash).
    tables, figures = w.res(layout.TABLES), w.res(layout.FIGURES)
    # The aggregate reads files of every run, study, probe and warm-up: their directories.
    read = [
        (layout.RUN_DIR, lists["runs"] or lists["runs_from_scratch"]),
        (layout.BANDIT, lists["bandit_studies"]),
        (layout.GRADVAR, lists["gradvar_tasks"]),
        (layout.SFT_SUMMARY, lists["warm_up_tasks"]),
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


def stage_lists(cfg: dict, bandit_studies: Sequence[str]) -> dict:
    """What dvc.yaml's stages iterate over, for a completed config: tasks, runs (by stage key),
    the gradient probe's tasks and the bandit studies."""
    runs = trained_runs(cfg)
    if len({run_key(run_id) for run_id in runs}) < len(runs):
        raise ConfigError("experiments: two run ids that differ only in '.' against 'p' would share a DVC stage name")
    probe = list(cfg["gradvar"]["tasks"])
    used = {spec.settings["task"] for spec in runs.values()} | set(probe)
    starts = [t for t in layout.starts_tasks(cfg) if t in used]
    warm = {spec.settings["task"] for spec in runs.values() if spec.settings["init"] is None} | set(probe) | set(starts)
    results = Path(cfg["results"])
    lists: dict = {
        "problem_tasks": [t for t in cfg["tasks"] if t in used],
        "warm_up_tasks": [t for t in cfg["tasks"] if t in warm],
        "runs": {},
        "runs_from_scratch": {},
        "start_tasks": starts,
        "gradvar_tasks": probe,
        "bandit_studies": list(bandit_studies),
    }
    for run_id, spec in runs.items():
        s = spec.settings
        item = {"run_id": run_id, "experiment": spec.experiment, "task": s["task"]}
        if s["init"] == "random":  # the fresh model takes the warm-up's preset
            lists["runs_from_scratch"][run_key(run_id)] = item
        else:
            init = layout.init_checkpoint(results, s["task"], s["init"]).as_posix()
            lists["runs"][run_key(run_id)] = {**item, "init": init}
    return lists


def documents(
    cfg: dict, configs: Sequence[str], bandit_studies: Sequence[str], python: str = DEFAULT_PYTHON
) -> tuple[dict, dict]:
    """dvc.yaml and dvc-params.yaml (dicts) for a completed config read from `configs` (paths
    relative to dvc.yaml's directory, in merge order)."""
    w = _Writer(cfg, configs, python)
    lists = stage_lists(cfg, bandit_studies)
    stages = {**_step_stages(w, lists), **_report_stages(w, lists)}
    dvc = {"vars": [PARAMS], "stages": stages, "metrics": [w.res(layout.TABLES) + "/metrics.json"], "plots": _plots(w)}
    params = {**lists, "config": {key: value for key, value in cfg.items() if key not in NOT_SETTINGS}}
    return dvc, params


def dvc_files(
    config_paths: Sequence[str | Path] = (), root: Path = ROOT, python: str = DEFAULT_PYTHON
) -> dict[str, str]:
    """The texts of `root`/dvc.yaml and `root`/dvc-params.yaml for these config files (default
    config/config.yaml), by file name."""
    from mathrl.bandit import BANDIT_STUDIES  # imports torch: only here

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
        + yaml.safe_dump(dvc, sort_keys=False, default_flow_style=None, width=100_000),
        PARAMS: PARAMS_HEADER.format(**header)
        + yaml.safe_dump(params, sort_keys=False, default_flow_style=None, width=1000),
    }


def dvc_yaml(config_paths: Sequence[str | Path] = (), root: Path = ROOT, python: str = DEFAULT_PYTHON) -> str:
    """The text of `root`/dvc.yaml for these config files (default config/config.yaml)."""
    return dvc_files(config_paths, root, python)["dvc.yaml"]
