"""What a user meets at the command line: every bad name or meaningless setting exits 2
with one message naming it (no traceback), Ctrl-C says where the run resumes, and a closed
pipe ends a listing quietly."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from mathrl.engine import snapshot
from mathrl.pipeline.cli import main
from tests.conftest import ROOT, write_config


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["runs", "--experiment", "nope"], ["--experiment", "'nope'", "allowed: tiny"]),
        (["bandit", "--study", "nope"], ["--study", "'nope'", "entropy_collapse"]),
        (["problems", "--task", "sub"], ["--task", "'sub'", "allowed: add, mul"]),
        (["sft", "--task", "ad"], ["--task", "did you mean 'add'"]),
        (["gradvar", "--task", "nope"], ["--task", "'nope'"]),
        (["train", "--run", "tiny__nope"], ["--run", "'tiny__nope'"]),
        (
            ["train", "--run", "tiny__batch_size-8__s0", "lr=0.5"],
            ["--run tiny__batch_size-8__s0", "lr=0.5", "--run-id"],
        ),
        (["train", "learning_rate=1e-3"], ["run.learning_rate: unknown key", "did you mean 'lr'"]),
        (["runs", "--set", "train.batch_size=-64"], ["train.batch_size: -64", "(from --set train.batch_size=-64)"]),
        (["runs", "--set", "sft.add.band=[0.6,0.3]"], ["sft.add.band", "reversed"]),
        (["train", "group_size=1", "algorithm=grpo"], ["run.group_size", "grpo needs at least 2"]),
        (["train", "group_size=1", "algorithm=dapo"], ["run.group_size", "dapo needs at least 2"]),
        (["train", "group_size=1", "algorithm=rloo"], ["run.group_size", "rloo needs at least 2"]),
        (["train", "lr_schedule=cosine", "warmup_steps=4"], ["run.warmup_steps", "steps 4"]),
        (["train", "curriculum_start=3"], ["run.curriculum_start", "task add's 2"]),
        (["train", "lr=inf"], ["run.lr: inf is not a finite number"]),
        (["train", f"batch_size={2**36}"], ["run.batch_size: 68719476736 rollouts need about", "per step"]),
        (["train", "--run", "grpo_vs_rloo__rloo__s0"], ["no experiment 'grpo_vs_rloo'", "FILE that defines it"]),
    ],
)
def test_each_bad_name_or_meaningless_setting_exits_2_naming_it(tiny_cfg_dict, tmp_path, capsys, argv, needles):
    path = write_config(tmp_path / "c.yaml", tiny_cfg_dict)
    assert main([argv[0], "--config", str(path), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith(f"mathrl {argv[0]}: error:"), err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not (tmp_path / "results").exists()


def test_a_variant_of_an_experiments_run_trains_under_its_own_name(tiny_cfg_dict, tmp_path, monkeypatch):
    """`--run RUN --run-id NAME lr=...`: RUN's settings with the change, in results/runs/NAME
    (what the refusal of `--run RUN lr=...` suggests); an experiment's run id is not a free name."""
    from mathrl.pipeline import cli
    from mathrl.pipeline.config import load_config

    cfg = load_config([write_config(tmp_path / "c.yaml", tiny_cfg_dict)])
    run_id, experiment, settings = cli.resolve_run(cfg, "tiny__batch_size-16__s1", "hot", ["lr=0.5"])
    assert (run_id, experiment) == ("hot", None)
    assert settings.lr == 0.5 and settings.batch_size == 16 and settings.seed == 1
    with pytest.raises(cli.ConfigError, match="'tiny__batch_size-8__s0' is a run of experiment tiny"):
        cli.resolve_run(cfg, "tiny__batch_size-16__s1", "tiny__batch_size-8__s0", ["lr=0.5"])


def test_a_value_is_blamed_on_the_file_that_gave_it(tiny_cfg_dict, tmp_path, capsys):
    base = write_config(tmp_path / "c.yaml", tiny_cfg_dict)
    bad = write_config(tmp_path / "bad.yaml", {"train": {"batch_size": -64}})
    assert main(["runs", "--config", str(base), "--config", str(bad)]) == 2
    assert f"train.batch_size: -64 is less than the minimum of 1 (from {bad})" in capsys.readouterr().err


@pytest.mark.parametrize("listing", ["claims", "settings"])
def test_a_pipe_closed_before_a_listing_writes_ends_it_quietly(listing):
    """`true` reads nothing and exits at once: the listing's first write meets a closed pipe."""
    done = subprocess.run(f"set -o pipefail; {sys.executable} -m mathrl {listing} | true", shell=True, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, executable="/bin/bash")  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_a_closed_pipe_ends_a_listing_quietly():
    done = subprocess.run(f"{sys.executable} -m mathrl runs | head -1", shell=True, cwd=ROOT, capture_output=True,
                          text=True, timeout=120, executable="/bin/bash")  # fmt: skip
    assert done.stdout.count("\n") == 1 and done.stderr == "", done.stderr
    status = subprocess.run(f"set -o pipefail; {sys.executable} -m mathrl runs | head -1 >/dev/null", shell=True,
                            cwd=ROOT, timeout=120, executable="/bin/bash")  # fmt: skip
    assert status.returncode == 0


def test_ctrl_c_in_a_run_says_in_one_line_where_it_resumes(run_env):
    cmd = [sys.executable, "-m", "mathrl", "train", "--config", str(run_env["config"]), "--run-id", "c",
           "steps=400", "log_every=1", "snapshot_every=1", "eval_every=1000"]  # fmt: skip
    # SIGINT back to its default in the child: a shell's background job (`pytest &`) ignores
    # it, and Python installs its Ctrl-C handler only where SIGINT is not ignored.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "Step 3/" not in (proc.stdout.readline() or ""):
        pass
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "mathrl train: interrupted; the same command resumes c from its snapshot at step" in err
    step = int(re.search(r"at step (\d+)", err).group(1))
    assert step >= 2 and snapshot.load(run_env["results"] / "runs" / "c" / "snapshot.pt")["step"] == step


@pytest.mark.parametrize("command", ["figures", "report"])
def test_figures_and_report_before_aggregate_say_so_and_write_nothing(tiny_cfg_dict, tmp_path, capsys, command):
    path = write_config(tmp_path / "c.yaml", tiny_cfg_dict)
    assert main([command, "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run `mathrl aggregate`" in err and "Traceback" not in err, err
    assert not (tmp_path / "results").exists()


def test_a_report_from_tables_of_another_config_warns(tiny_cfg_dict, tmp_path, capsys):
    path = write_config(tmp_path / "c.yaml", tiny_cfg_dict)
    assert main(["aggregate", "--config", str(path)]) == 0
    assert main(["report", "--config", str(path)]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["report", "--config", str(path), "--set", "train.steps=9"]) == 0
    err = capsys.readouterr().err
    assert "mathrl report: warning: the tables" in err and "were made from config" in err, err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a machine without a GPU")
def test_cuda_without_a_gpu_is_one_line(tiny_cfg_dict, tmp_path, capsys):
    path = write_config(tmp_path / "c.yaml", tiny_cfg_dict)
    assert main(["train", "--config", str(path), "--run-id", "x", "device=cuda", "steps=2"]) == 2
    err = capsys.readouterr().err
    assert (
        err == "mathrl train: error: device: 'cuda' was asked for but torch sees no CUDA device; "
        "use device=auto or device=cpu\n"
    )
    assert not (tmp_path / "results").exists()


def test_under_torchrun_a_config_error_is_said_once_and_first(tiny_cfg_dict, tmp_path, capsys, monkeypatch):
    path = write_config(tmp_path / "c.yaml", tiny_cfg_dict)
    # batch 12 fits group_size 4 in one process, not in two
    locks = str(tmp_path / "locks")
    argv = ["launch", "--gpus", "2", "--lock-dir", locks, "--", "--config", str(path), "--run-id", "t", "batch_size=12"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run.batch_size: 12 is not a multiple of group_size x world size = 4 x 2 = 8" in err
    assert not (tmp_path / "locks").exists() and not (tmp_path / "results").exists()  # no slot taken, no worker started
    monkeypatch.setenv("RANK", "1")  # a worker other than rank 0: rank 0 says it
    assert main(["train", "--config", str(path), "algorithm=sarsa"]) == 2
    assert capsys.readouterr().err == ""


def test_finding_ones_way_settings_version_dry_run_and_run_status(tiny_cfg_dict, tmp_path, capsys):
    from mathrl import __version__

    path = write_config(tmp_path / "c.yaml", tiny_cfg_dict)
    assert main(["settings", "--config", str(path), "batch"]) == 0
    out = capsys.readouterr().out
    assert "batch_size = 16 (schema default 512)  [integer >= 1]" in out and "micro_batch_size = 0" in out
    assert "Rollouts per step over all ranks" in out and "lr =" not in out
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"mathrl {__version__}\n"
    run = ["train", "--config", str(path), "--run", "tiny__batch_size-8__s1", "--dry-run"]
    assert main([*run, "lr=0.01"]) == 2  # a variant needs --run-id
    capsys.readouterr()
    assert main(run) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("run tiny__batch_size-8__s1 of experiment tiny, in ") and "a step needs about" in out[0]
    assert {line.split("=")[0].strip(): line.split("=")[1].strip() for line in out[1:]}["batch_size"] == "8"
    assert not (tmp_path / "results").exists()
    run_dir = tmp_path / "results" / "runs"
    (run_dir / "tiny__batch_size-8__s1").mkdir(parents=True)
    (run_dir / "tiny__batch_size-8__s1" / "snapshot.pt").write_bytes(b"")
    (run_dir / "tiny__batch_size-16__s0").mkdir()
    (run_dir / "tiny__batch_size-16__s0" / "summary.json").write_text('{"status": "complete"}')
    (run_dir / "tiny__batch_size-16__s0" / "metrics.csv").write_text("step,eval_accuracy\n1,0.5\n")  # a whole result
    (run_dir / "tiny__batch_size-16__s1").mkdir()  # a result trained at another batch size than the config's
    (run_dir / "tiny__batch_size-16__s1" / "summary.json").write_text('{"config": {"batch_size": 32}}')
    (run_dir / "tiny__batch_size-16__s1" / "metrics.csv").write_text("step,eval_accuracy\n1,0.5\n")
    (run_dir / "mine").mkdir()  # `mathrl train --run-id mine`: no run of the config
    (run_dir / "mine" / "summary.json").write_text("{}")
    (run_dir / "mine" / "metrics.csv").write_text("step\n1\n")
    assert main(["runs", "--config", str(path), "--status"]) == 0
    statuses = [line.split(maxsplit=1) for line in capsys.readouterr().out.splitlines()]
    assert statuses == [
        ["tiny__batch_size-8__s0", "missing"],
        ["tiny__batch_size-8__s1", "partial"],
        ["tiny__batch_size-16__s0", "done"],
        ["tiny__batch_size-16__s1", "stale"],
        ["mine", "done, ad hoc (no run of the config)"],
    ]
    assert main(["runs", "--config", str(path), "--experiment", "tiny", "--status"]) == 0
    assert "mine" not in capsys.readouterr().out  # one experiment's runs alone


def test_every_subcommand_has_help(capsys):
    from mathrl.pipeline.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in ["", *sub.choices]:
        with pytest.raises(SystemExit) as done:
            main([name, "--help"] if name else ["--help"])
        assert done.value.code == 0, name
    assert "`mathrl settings` lists every KEY" in (capsys.readouterr().out)


def test_train_help_gives_every_run_setting_its_help(capsys):
    from mathrl.pipeline.settings import RunSettings

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # the help as one line, wrapping undone
    for name in ("lr", "kl_coef", "batch_size", "wandb"):
        assert f"{name}: {' '.join(RunSettings.help(name).split())}" in out, name


def test_a_negative_thread_count_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as done:
        main(["train", "--threads", "-1"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "argument --threads: '-1' is not allowed; use a whole number >= 0" in err


def test_building_the_parser_imports_no_heavy_module():
    """Every pipeline job starts `mathrl`, which builds the whole parser: a subcommand that imports
    pandas, scipy or torch to fill its choices makes every job pay for it."""
    import subprocess
    import sys

    code = ("import sys; from mathrl.pipeline.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('pandas', 'scipy', 'torch', 'matplotlib') if m in sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", out


def test_mathrl_launch_imports_no_configuration_code():
    """`mathrl launch`, every training job's first process, hands the run on without reading the
    configuration: the schema's validator (jsonschema) and yaml are the forked run's to import."""
    import subprocess
    import sys

    from mathrl.pipeline import cli, config

    assert cli.DEFAULT_CONFIG == config.DEFAULT_CONFIG
    code = ("import sys; from mathrl.pipeline.cli import main; "
            "main(['launch', '--gpus', '0', '--dry-run', '--', '--run', 'x']); "
            "print(sorted(m for m in ('mathrl.pipeline.config', 'jsonschema', 'yaml', 'torch') if m in "
            "sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out.splitlines()[-1] == "[]", out


def test_a_run_by_hand_trains_on_the_pipelines_thread_count(monkeypatch):
    """The thread count changes float sums: without --threads a run trains on pipeline.threads_per_run, as the
    pipeline's job does, unless OMP_NUM_THREADS already gives the launcher's share (torch reads that itself)."""
    from mathrl.pipeline.cli import pipeline_threads

    cfg, key = {"pipeline": {"threads_per_run": 3}}, "threads_per_run"
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert (
        pipeline_threads(0, cfg, key) == 3 and pipeline_threads(0, {}, key) == 1 and pipeline_threads(2, cfg, key) == 2
    )
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert pipeline_threads(0, cfg, key) is None and pipeline_threads(2, cfg, key) == 2


def test_the_seeds_of_a_setting_train_in_one_command_each_with_its_own_log(run_env, capsys):
    """`--run A --run B` (the pipeline's job for a setting's seeds): both runs trained, each its own outputs and
    log, one line each on the console; again, each finds its final snapshot and trains nothing."""
    results = run_env["results"]
    runs = ["tiny__batch_size-8__s0", "tiny__batch_size-8__s1"]
    argv = ["train", "--config", str(run_env["config"]), "--set", "train.steps=2", "--on-mismatch", "restart"]
    for run_id in runs:
        argv += ["--run", run_id]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == [f"run {run_id}" for run_id in runs]
    for run_id in runs:
        summary = json.loads((results / "runs" / run_id / "summary.json").read_text())
        assert summary["status"] == "complete" and summary["seed"] == int(run_id[-1])
        log = (results / "logs" / "train" / f"{run_id}.log").read_text()
        assert f"run {run_id}: complete" in log and "Step 2/2" in log
    (results / "runs" / runs[0] / "summary.json").unlink()  # as Snakemake removes a rerun job's outputs first
    (results / "runs" / runs[0] / "metrics.csv").unlink()
    assert main(argv) == 0
    for run_id in runs:
        log = (results / "logs" / "train" / f"{run_id}.log").read_text()
        assert "Step " not in log and f"run {run_id}: complete" in log  # no step trained again
        assert (results / "runs" / run_id / "summary.json").is_file()  # rewritten from the final snapshot
        assert len(pd.read_csv(results / "runs" / run_id / "metrics.csv")) == 2


def test_several_runs_refuse_what_names_one_run(tiny_cfg_dict, tmp_path, capsys):
    path = write_config(tmp_path / "c.yaml", tiny_cfg_dict)
    argv = ["train", "--config", str(path), "--run", "tiny__batch_size-8__s0", "--run", "tiny__batch_size-8__s1"]
    assert main([*argv, "--out", str(tmp_path / "x")]) == 2
    assert "--out name one run's own output" in capsys.readouterr().err
    assert main(["train", "--config", str(path), "--run-logs"]) == 2
    assert "--run-logs: the logs are named by the runs" in capsys.readouterr().err
