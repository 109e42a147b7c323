"""The Snakemake workflow: lint and format, planning, refusing a bad config, a tiny grid end
to end, rerunning exactly the runs whose settings changed, and resuming an interrupted grid.

Every call runs the venv's Snakemake on the repository's Snakefile with `--directory` a
temporary directory, so the tests' `.snakemake` metadata and results never mix with a
user's; the configs are written there too (config/config.yaml, the Snakefile's default,
is then absent and the `--configfile` given is the whole config).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from conftest import SNAKEFILE, finished_runs, planned_runs, snakemake, tiny_config

from mathrl.pipeline.config import load_config, run_group, trained_runs

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = ROOT / "config" / "config.yaml"


# --- static checks -------------------------------------------------------------------------


def test_lint_passes_on_the_default_config(tmp_path):
    res = snakemake(tmp_path, "--lint", "--configfile", str(DEFAULT_CONFIG))
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout + res.stderr
    assert "Lints for" not in out, out
    assert "Congratulations, your workflow is in a good condition" in out


def test_snakefmt_leaves_the_workflow_unchanged():
    res = subprocess.run([sys.executable, "-m", "snakefmt", "--check", "Snakefile", "rules/"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr


def test_dry_run_plans_a_train_job_per_run_of_the_default_config(tmp_path):
    start = time.monotonic()
    res = snakemake(tmp_path, "-n", "runs", "--configfile", str(DEFAULT_CONFIG))
    elapsed = time.monotonic() - start
    assert res.returncode == 0, res.stdout + res.stderr
    expected = set(trained_runs(load_config(DEFAULT_CONFIG)))
    assert expected and planned_runs(res.stdout) == expected
    assert elapsed < 60, f"planning took {elapsed:.0f}s"
    assert not (tmp_path / "results").exists()  # a dry run writes no results
    # the config every job reads keeps the file's order: the tables list batch 64 to 512, not 128, 256, 512, 64
    (written,) = (tmp_path / ".snakemake" / "mathrl").glob("config-*.yaml")
    ours, default = load_config(written), load_config(DEFAULT_CONFIG)
    assert list(ours["experiments"]) == list(default["experiments"])
    assert list(ours["experiments"]["batch"]["variants"]) == ["b64", "b128", "b256", "b512"]


def test_tables_made_by_hand_before_the_runs_do_not_pass_for_the_pipelines(tmp_path):
    """The hand commands of docs/guide/outputs.md first (`mathrl aggregate && mathrl figures && mathrl report`,
    every run missing), then the pipeline: it still plans every run, and the tables again."""
    tiny = tiny_config(tmp_path)
    for command in ("aggregate", "figures", "report"):
        done = subprocess.run([sys.executable, "-m", "mathrl", command, "--config", str(tiny)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "results" / "report.html").exists() and not (tmp_path / "results" / "tables.complete").exists()
    for target in ("report", "figures", "all"):
        res = snakemake(tmp_path, "-n", target, "--configfile", str(tiny))
        assert res.returncode == 0, res.stdout + res.stderr
        assert planned_runs(res.stdout) == set(trained_runs(load_config(tiny))), target
        assert re.search(r"^aggregate\s+1$", res.stdout, re.M), target


# --- a bad config is refused before anything runs ------------------------------------------


@pytest.mark.parametrize(
    "override, names",
    [
        (["--config", "train={batch_size: -1}"], ["train.batch_size", "-1", "minimum"]),
        (["BAD"], ["train.bacth_size", "unknown key", "batch_size"]),
        (["--config", "experiments={tiny: {seeds: [0], fixed: {task: mull}}}"], ["task", "'mull'", "mul"]),
    ],
    ids=["value", "key", "task"],
)
def test_a_bad_config_is_refused_before_any_job(tmp_path, override, names):
    tiny = tiny_config(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  bacth_size: 8\n")
    args = [str(bad) if a == "BAD" else a for a in override]
    res = snakemake(tmp_path, "--cores", "1", "runs", "--configfile", str(tiny), *args)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    for name in names:
        assert name in out, out
    assert "rule " not in out  # no job was even planned
    assert not (tmp_path / "results").exists()
    assert not (tmp_path / ".snakemake" / "mathrl").exists()  # not even the config copy


# --- end to end ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> dict:
    """The tiny two-run grid run from scratch: `snakemake --cores 2 runs`."""
    workdir = tmp_path_factory.mktemp("grid")
    tiny = tiny_config(workdir)
    res = snakemake(workdir, "--cores", "2", "runs", "--configfile", str(tiny))
    return {"workdir": workdir, "config": tiny, "result": res, "runs": {"tiny__a__s0", "tiny__b__s0"}}


@pytest.mark.slow
def test_tiny_grid_end_to_end(grid):
    res = grid["result"]
    assert res.returncode == 0, res.stdout + res.stderr
    results = grid["workdir"] / "results"
    for run_id in grid["runs"]:
        for name in ("summary.json", "metrics.csv", "snapshot.pt"):
            assert (results / "runs" / run_id / name).is_file(), name
        assert (results / "logs" / "train" / f"{run_id}.log").is_file()
        assert (results / "benchmarks" / "train" / f"{run_group(run_id)}.tsv").is_file()  # one job per setting
    for study in ("entropy_collapse", "gradient_vanishing", "reward_hacking"):
        assert (results / "bandit" / study / "metrics.csv").is_file()
    assert planned_runs(res.stdout + res.stderr) == grid["runs"]


@pytest.mark.slow
def test_a_finished_grid_has_nothing_to_do_and_a_changed_setting_reruns_only_its_runs(grid):
    workdir, tiny = grid["workdir"], str(grid["config"])
    assert grid["result"].returncode == 0
    again = snakemake(workdir, "-n", "runs", "--configfile", tiny)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Nothing to be done" in again.stdout + again.stderr and not planned_runs(again.stdout)

    # Run a takes its steps from `train`; b pins its own.
    changed = snakemake(workdir, "-n", "runs", "--configfile", tiny, "--config", "train={steps: 6}")
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert planned_runs(changed.stdout) == {"tiny__a__s0"}
    assert "params have changed" in changed.stdout.lower()
    assert "rule sft" not in changed.stdout and "rule bandit" not in changed.stdout

    # Scheduling is no setting: other threads, memory or launch mode rerun nothing.
    moved = snakemake(workdir, "-n", "runs", "--configfile", tiny, "--config",
                      "pipeline={threads_per_run: 2, mem_mb_per_run: 1000, torchrun: always, fork_server: "
                      "false}")  # fmt: skip
    assert moved.returncode == 0 and "Nothing to be done" in moved.stdout + moved.stderr


@pytest.mark.slow
def test_an_interrupted_grid_reruns_only_the_missing_runs_and_resumes_the_cut_one(grid, tmp_path):
    # The finished grid's copy, metadata included: problems, warm-up and bandit studies are
    # up to date, so only the train jobs of three new runs are left (three settings of one
    # seed: a job each). 60 steps with a snapshot every 2: each run is snapshotted but
    # unfinished for a second or more.
    assert grid["result"].returncode == 0
    shutil.copytree(grid["workdir"], tmp_path, dirs_exist_ok=True)
    variants = {"u": {}, "v": {"lr": 2.0e-4}, "w": {"lr": 1.0e-4}}
    tiny = tiny_config(tmp_path, {"tiny": {"fixed": {"steps": 60}, "variants": variants, "seeds": [0]}})
    runs = {f"tiny__{name}__s0" for name in variants}
    run_dir = tmp_path / "results" / "runs"
    first_log = tmp_path / "first.log"

    def cut_short(finished: set[str]) -> set[str]:
        return {run_id for run_id in runs - finished if (run_dir / run_id / "snapshot.pt").exists()}

    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(tmp_path),
           "--cores", "1", "runs", "--configfile", str(tiny)]  # fmt: skip
    with open(first_log, "w") as log:
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while not ((finished := finished_runs(first_log.read_text())) and cut_short(finished)):
                assert proc.poll() is None, first_log.read_text()
                assert time.monotonic() < deadline, "no run was cut short in time"
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: to the whole process group
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    done = finished_runs(first_log.read_text())
    cut = cut_short(done)  # the snapshot is no output: Snakemake's clean-up keeps it
    assert done and cut, first_log.read_text()
    mtimes = {run_id: (run_dir / run_id / "summary.json").stat().st_mtime_ns for run_id in done}

    res = snakemake(tmp_path, "--cores", "1", "--rerun-incomplete", "runs", "--configfile", str(tiny))
    assert res.returncode == 0, res.stdout + res.stderr
    assert planned_runs(res.stdout + res.stderr) == runs - done
    assert all((run_dir / run_id / "summary.json").exists() for run_id in runs)
    assert {run_id: (run_dir / run_id / "summary.json").stat().st_mtime_ns for run_id in done} == mtimes
    for run_id in cut:
        assert "resuming" in (tmp_path / "results" / "logs" / "train" / f"{run_id}.log").read_text()


@pytest.mark.slow
def test_the_report_and_the_snakemake_report_from_the_finished_runs(grid, tmp_path):
    assert grid["result"].returncode == 0
    shutil.copytree(grid["workdir"], tmp_path, dirs_exist_ok=True)
    tiny = str(tmp_path / "tiny.yaml")
    res = snakemake(tmp_path, "--cores", "2", "all", "--configfile", tiny)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not planned_runs(res.stdout + res.stderr)  # the runs were done already
    results = tmp_path / "results"
    assert (results / "report.html").stat().st_size > 0
    assert list((results / "tables").glob("*.csv")) and list((results / "figures").glob("*.png"))
    for rule in ("gradvar", "aggregate", "figures", "report"):
        assert list((results / "benchmarks" / rule).glob("*.tsv")), rule

    rep = snakemake(tmp_path, "--report", "results/snakemake-report.zip", "--configfile", tiny)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert zipfile.is_zipfile(results / "snakemake-report.zip")


def test_a_standalone_configfile_is_read_without_the_snakefiles_default(tmp_path):
    """With config/config.yaml where the Snakefile reads it, `--configfile config/examples/tiny.yaml`
    (`standalone: true`) plans the tiny layer's runs alone, as `mathrl --config` reads it: Snakemake
    merges it over the default, whose experiments then fail its smaller batch."""
    (tmp_path / "config" / "examples").mkdir(parents=True)
    shutil.copy2(DEFAULT_CONFIG, tmp_path / "config" / "config.yaml")
    tiny = shutil.copy2(ROOT / "config" / "examples" / "tiny.yaml", tmp_path / "config" / "examples" / "tiny.yaml")
    res = snakemake(tmp_path, "-n", "report", "--configfile", "config/examples/tiny.yaml")
    assert res.returncode == 0, res.stdout + res.stderr
    expected = {f"grpo_vs_rloo__{arm}__s{seed}" for arm in ("grpo", "rloo") for seed in range(5)}
    assert planned_runs(res.stdout) == set(trained_runs(load_config(tiny))) == expected
    assert "results/tiny/report.html" in res.stdout and not (tmp_path / "results").exists()


def test_one_experiment_has_a_target_of_its_own_with_a_users_config_file(tmp_path):
    """`snakemake -n --configfile base.yaml mine.yaml -- experiment_mine`: only that experiment's runs
    (its `1e-3`, text to Snakemake's YAML 1.1 reader, is a number)."""
    tiny = tiny_config(tmp_path)
    (tmp_path / "mine.yaml").write_text("experiments:\n  mine:\n    fixed: {steps: 2, lr: 1e-3}\n"
                                        "    variants: {a: {}, b: {lr_scale: 2}}\n    seeds: [0, 1]\n")  # fmt: skip
    res = snakemake(tmp_path, "-n", "--configfile", str(tiny), "mine.yaml", "--", "experiment_mine")
    assert res.returncode == 0, res.stdout + res.stderr
    assert planned_runs(res.stdout) == {f"mine__{v}__s{s}" for v in "ab" for s in (0, 1)}
    assert not (tmp_path / "results").exists()
