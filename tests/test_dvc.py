"""DVC: dvc.yaml and its params file are generated from the config (and the committed ones are
up to date), dvc.yaml is short and DVC expands it into the pipeline's stages, and on a fresh
clone `dvc repro` builds the report, a second one has nothing to do, and neither has
Snakemake afterwards; `dvc metrics show` and `dvc plots show` work.

The end-to-end test runs in a throwaway copy of the working tree (its own git repository,
results and DVC cache) whose config/config.yaml is replaced by a tiny one, so that DVC
and Snakemake read the same config, as they do in a real checkout.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import TINY

from bench.dvc_time import differing_columns
from mathrl.pipeline import layout
from mathrl.pipeline.cli import main
from mathrl.pipeline.config import ROOT, ConfigError, group_hash, load_config, run_groups, trained_runs
from mathrl.pipeline.dvcgen import (
    DEFAULT_PYTHON,
    FOREACH,
    PARAMS,
    _foreach_stages,
    _Writer,
    dvc_files,
    dvc_yaml,
    fields,
    job_key,
    templated,
    train_groups,
)
from mathrl.pipeline.layout import group_job

DEFAULT_CONFIG = ROOT / "config" / "config.yaml"


def dvc_stages(root: Path = ROOT) -> dict:
    """The stages as DVC itself expands dvc.yaml (its `foreach` over dvc-params.yaml), by name."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return {stage.name: stage for stage in repo.index.stages}


def params_of(stage) -> dict:
    return {dep.def_path: list(dep.params) for dep in stage.deps if hasattr(dep, "params")}


def paths(entries) -> list[str]:
    return [entry.def_path for entry in entries if not hasattr(entry, "params")]


def test_the_committed_dvc_files_are_generated_from_config_yaml():
    for name, expected in dvc_files().items():
        committed = (ROOT / name).read_text() if (ROOT / name).exists() else ""
        assert committed == expected, (
            f"{name} is out of date with config/config.yaml or the mathrl sources: "
            "run `mathrl dvc-yaml` (in the venv) and commit dvc.yaml and dvc-params.yaml"
        )


def test_dvc_yaml_is_a_few_lines_a_stage_and_its_lists_are_data():
    text = dvc_yaml()
    doc, params = yaml.safe_load(text), yaml.safe_load(dvc_files()[PARAMS])
    assert doc["vars"] == [PARAMS]
    for name in ("problems", "gradvar", "bandit"):  # templated, over their jobs in dvc-params.yaml
        assert doc["stages"][name]["foreach"] == f"${{jobs.{name}}}" and params["jobs"][name]
    assert set(params["jobs"]) == {"problems", "gradvar", "bandit"}  # a task's warm-ups: one stage, no jobs
    assert doc["stages"]["sft-add"]["cmd"].endswith(" sft --config config/config.yaml --task add --parallel auto")
    runs = trained_runs(load_config(DEFAULT_CONFIG))
    groups = run_groups(runs)
    # a stage per setting, named as its Snakemake rule; its params hold the rerun trigger Snakemake's job has
    trains = {name for name in doc["stages"] if name.startswith("train")}
    assert set(params["groups"]) == {group_job(g) for g in groups} == trains
    assert all(params["groups"][group_job(g)] == group_hash(runs, ids) for g, ids in groups.items())
    stage_text = re.split(r"\n  (?=\S)", text.split("\nstages:\n", 1)[1])
    assert all(len(s.splitlines()) == 6 for s in stage_text if s.startswith("train_")), "a training stage is 6 lines"
    assert len(text.splitlines()) < 100 + 6 * len(groups)


def test_a_stage_per_setting_and_two_settings_sharing_a_name_refused():
    assert train_groups(dict.fromkeys(["x__a__s0", "x__a__s1", "x__b__s0"])) == {"x__a": ["x__a__s0", "x__a__s1"],
                                                                                "x__b": ["x__b__s0"]}  # fmt: skip
    with pytest.raises(ConfigError, match=r"x__a\.b__s\* and x__a_b__s\* would share the job name train_x__a_b"):
        train_groups(dict.fromkeys(["x__a.b__s0", "x__a_b__s0"]))


def test_foreach_stages_take_whatever_wildcards_their_layout_patterns_have(monkeypatch):
    """A step whose files have two wildcards (a probe of a task's k-th warm-up, say) is templated with both, from
    its patterns alone; its jobs name both, and DVC names a job by their values."""
    probe = layout.Stage("gradvar", "gradvar", {"out": "gv/{task}/w{k}.json"}, "task", "--task {task} --warm-up {k}")
    monkeypatch.setitem(layout.STAGES, "gradvar", probe)
    assert fields("gv/{task}/w{k}.json") == ["task", "k"]
    assert templated("a.{task}.{k}") == "a.${item.task}.${item.k}"
    cfg = load_config(DEFAULT_CONFIG)
    jobs = {name: {} for name in FOREACH} | {"gradvar": {job_key(j): j for j in ({"task": "add", "k": 0},)}}
    stages = _foreach_stages(_Writer(cfg, ["config/config.yaml"], DEFAULT_PYTHON), jobs)
    assert list(stages) == ["gradvar"] and list(jobs["gradvar"]) == ["add-0"]
    cmd = stages["gradvar"]["do"]["cmd"]
    assert cmd.endswith(" gradvar --config config/config.yaml --task ${item.task} --warm-up ${item.k}")
    assert stages["gradvar"]["do"]["outs"] == ["results/gv/${item.task}/w${item.k}.json"]
    assert stages["gradvar"]["do"]["deps"][0] == "results/problems/${item.task}/train.txt"


def test_a_stage_per_task_setting_study_and_report_step_with_the_rules_commands():
    stages, cfg = dvc_stages(), load_config(DEFAULT_CONFIG)
    groups = run_groups(trained_runs(cfg))
    assert {name for name in stages if name.startswith("train")} == {group_job(g) for g in groups}
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+(@[A-Za-z0-9_-]+)?", name) for name in stages)
    py = f"{DEFAULT_PYTHON} -m mathrl"

    # a task's warm-ups in one stage, dealt out to the cores as its seeds are (below), each on its job's threads
    sft = stages["sft-add"]
    assert sft.cmd == f"{py} sft --config config/config.yaml --task add --parallel auto"
    assert params_of(sft) == {PARAMS: ["config.tasks.add", "config.sft.add"]}
    problems = [f"results/problems/add/{split}.txt" for split in ("train", "val", "test")]
    assert paths(sft.deps) == [*problems, "mathrl", "config/config.schema.yaml"]
    # the package is one directory dependency; .dvcignore keeps bytecode and the generator out of its hash
    ignored = (ROOT / ".dvcignore").read_text().splitlines()
    assert "__pycache__/" in ignored and "/mathrl/pipeline/dvcgen.py" in ignored
    warmups = range(cfg["sft"]["add"]["warmups"])
    assert paths(sft.outs) == [f"results/sft/add/w{k}/{name}" for k in warmups for name in ("model.pt", "summary.json")]
    starts = stages["sft_starts-add"]
    assert starts.cmd == f"{py} sft --config config/config.yaml --task add --starts --parallel auto"
    models = [f"results/sft/add/w{k}/model.pt" for k in warmups]
    assert paths(starts.deps) == [*problems, *models, "mathrl", "config/config.schema.yaml"]
    assert paths(starts.outs) == [f"results/sft/add/w{k}/starts" for k in warmups]

    # one stage trains a setting's seeds: launch deals them out to as many processes as the cores give a
    # run its pipeline threads, each training its share one after another (Snakemake's job trains them in one)
    run_ids = groups["clipping__sgd_clip1"]
    assert len(run_ids) > 1
    group = stages["train_clipping__sgd_clip1"]
    runs = " ".join(layout.group_args(run_ids))
    assert group.cmd == (f"{py} launch --threads 1 --parallel auto --torchrun auto --fork-server auto -- --config "
                         f"config/config.yaml {runs} --run-logs --on-mismatch restart")  # fmt: skip
    assert params_of(group) == {PARAMS: ["groups.train_clipping__sgd_clip1", "config.tasks.add"]}
    warmups = [f"results/sft/add/w{k}/model.pt" for k in range(len(run_ids))]  # each seed starts from its own
    assert paths(group.deps) == [*problems, *warmups, "mathrl", "config/config.schema.yaml"]
    files = ("metrics.csv", "summary.json", "snapshot.pt")
    outs = [f"results/runs/{run_id}/{name}" for run_id in run_ids for name in files]
    assert paths(group.outs) == outs and [out.persist for out in group.outs] == [False, False, True] * len(run_ids)
    random = stages["train_lab04_gpt__random_init"]  # no warm-up model; its preset
    assert not any("/sft/" in p for p in paths(random.deps)) and "config.sft.add" in params_of(random)[PARAMS]
    dotted = stages["train_calibration__add_512_x3_3"]  # a `.` in a run id: `_` in the name, as Snakemake's rule
    assert "--experiment-run calibration__add_512_x3.3__s0" in dotted.cmd

    agg = stages["aggregate"]
    assert agg.cmd[0] == f"{py} aggregate --config config/config.yaml"
    assert paths(agg.outs) == ["results/tables", "results/tables.complete"]
    assert {"results/runs", "results/bandit", "results/gradvar", "results/sft"} <= set(paths(agg.deps))
    assert params_of(agg) == {PARAMS: ["config"]}
    assert "pipeline" not in yaml.safe_load(dvc_files()[PARAMS])["config"]
    assert paths(stages["report"].outs) == ["results/report.html"]
    assert any("snakemake report --forcerun report" in c for c in stages["report"].cmd)
    doc = yaml.safe_load(dvc_yaml())
    assert doc["metrics"] == ["results/tables/metrics.json"]
    plots = {name: props for plot in doc["plots"] for name, props in plot.items()}
    assert set(plots) == {"eval_accuracy", "entropy"}
    assert plots["entropy"]["y"] == {"results/tables/curves.csv": "entropy"}
    # the template draws a panel per experiment and a line per run from the curves table's columns
    template = json.loads((ROOT / ".dvc" / "plots" / f"{plots['entropy']['template']}.json").read_text())
    assert template["data"] == {"values": "<DVC_METRIC_DATA>"} and template["facet"]["field"] == "experiment"
    assert {"field": "run_id", "type": "nominal"} in template["spec"]["encoding"]["detail"]


def test_override_files_reach_the_commands_and_the_params_and_the_cli_writes_both_files(tmp_path, monkeypatch):
    # A second config file inside the repository overriding the first (as full.yaml does).
    monkeypatch.chdir(ROOT)
    full = ROOT / "config" / "full.yaml"
    files = dvc_files([DEFAULT_CONFIG, full])
    doc, params = yaml.safe_load(files["dvc.yaml"]), yaml.safe_load(files[PARAMS])
    assert "--config config/config.yaml --config config/full.yaml" in doc["stages"]["sft-add"]["cmd"]
    merged = load_config([DEFAULT_CONFIG, full])
    assert params["config"]["experiments"]["system"] == merged["experiments"]["system"]  # what each stage's params read
    assert params["config"]["experiments"]["system"] != load_config(DEFAULT_CONFIG)["experiments"]["system"]
    assert "--configfile config/config.yaml config/full.yaml" in " ".join(doc["stages"]["report"]["cmd"])

    outside = tmp_path / "c.yaml"
    outside.write_text(DEFAULT_CONFIG.read_text())
    with pytest.raises(ConfigError, match="inside"):
        dvc_yaml([outside])
    out = tmp_path / "dvc.yaml"
    assert main(["dvc-yaml", "--out", str(out)]) == 2  # no repository (no mathrl/, no config/) there


# --- end to end on a tiny config -------------------------------------------------------------


def tiny_config() -> dict:
    """conftest's TINY at pipeline scale, as tests/test_pipeline.py runs it."""
    cfg = copy.deepcopy(TINY)
    cfg["results"] = "results"
    cfg["sft"]["add"].update(max_steps=20, eval_every=10)
    cfg["bandit"] = {"steps": 20, "seeds": [0]}
    cfg["gradvar"] = {"batch_sizes": [8, 16], "num_samples": 2, "group_size": 4, "accumulation": [16, 8]}
    cfg["pipeline"] = {"gpus_per_run": 0, "gpus_sft": 0}
    cfg["experiments"] = {"tiny": {"variants": {"a": {}, "b": {"steps": 3}}, "seeds": [0, 1]}}
    return cfg


def clone_worktree(dst: Path) -> Path:
    """The working tree's files as git sees them (tracked, and untracked but not ignored:
    uncommitted work is tested too), copied to `dst` and committed to a new repository."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout  # fmt: skip
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file() and name != "dvc.lock":  # a fresh pipeline: no lock yet
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dst / name)
    return dst


def run(cmd: list[str], cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    res.out = res.stdout + res.stderr  # type: ignore[attr-defined]
    return res


@pytest.mark.slow
def test_dvc_repro_builds_the_report_then_nothing_is_left_to_do_for_dvc_or_snakemake(tmp_path):
    repo = clone_worktree(tmp_path / "repo")
    cfg = tiny_config()
    (repo / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "DVC_SITE_CACHE_DIR": str(tmp_path / "dvc-site"),
           "PYTHONUNBUFFERED": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    # The stages run `.venv/bin/python`, as in a checkout after `make setup`: this venv.
    python = [sys.executable]
    if sys.prefix != sys.base_prefix:
        (repo / ".venv").symlink_to(sys.prefix, target_is_directory=True)
        generate = [sys.executable, "-m", "mathrl", "dvc-yaml"]
    else:  # not in a venv: the stages run this interpreter
        generate = [sys.executable, "-m", "mathrl", "dvc-yaml", "--python", sys.executable]
    gen = run(generate, repo, env)
    assert gen.returncode == 0, gen.out
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "tiny"]):
        subprocess.run(cmd, cwd=repo, env=env, check=True)
    dvc = [*python, "-m", "dvc"]

    first = run([*dvc, "repro"], repo, env)
    assert first.returncode == 0, first.out
    results = repo / "results"
    assert (results / "report.html").stat().st_size > 0
    ran = set(re.findall(r"Running stage '([^']+)'", first.out))
    stages = set(dvc_stages(repo))
    assert ran == stages and {"train_tiny__a", "train_tiny__b", "report"} <= ran
    assert not any(name.startswith("train") for name in stages - {"train_tiny__a", "train_tiny__b"})
    assert (
        "sft-mul" not in stages and "sft-add" in stages
    )  # no run uses mul: `snakemake report` builds no warm-up for it either
    run_ids = [f"tiny__{v}__s{s}" for v in "ab" for s in (0, 1)]
    for run_id in run_ids:  # each run of a stage keeps its own files and log
        assert (results / "runs" / run_id / "snapshot.pt").is_file()
        assert f"run {run_id}: trained (log " in first.out
        assert (results / "logs" / "train" / f"{run_id}.log").is_file()
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    assert {out["path"] for out in lock["train_tiny__a"]["outs"]} >= {
        f"results/runs/tiny__a__s{s}/{name}" for s in (0, 1) for name in ("metrics.csv", "summary.json", "snapshot.pt")
    }
    # A run trained beside its group's other runs is the run trained alone, on the pipeline's thread count.
    alone = run([*python, "-m", "mathrl", "train", "--config", "config/config.yaml", "--experiment-run", "tiny__a__s1",
                 "--threads", "1", "--out", str(tmp_path / "alone")], repo, env)  # fmt: skip
    assert alone.returncode == 0, alone.out
    assert differing_columns(results / "runs" / "tiny__a__s1" / "metrics.csv", tmp_path / "alone" / "metrics.csv") == []

    second = run([*dvc, "repro"], repo, env)
    assert second.returncode == 0, second.out
    assert "Running stage" not in second.out and "Data and pipelines are up to date" in second.out, second.out
    status = run([*dvc, "status"], repo, env)
    assert status.returncode == 0 and "Data and pipelines are up to date" in status.out, status.out

    # Snakemake, on the same config and files, agrees that everything is up to date.
    sm = run([*python, "-m", "snakemake", "-s", "Snakefile", "-n", "report"], repo, env)
    assert sm.returncode == 0, sm.out
    assert "Nothing to be done" in sm.out, sm.out

    metrics = run([*dvc, "metrics", "show", "--json"], repo, env)
    assert metrics.returncode == 0, metrics.out
    shown = json.loads(metrics.stdout)
    headline = next(iter(shown.values()))["data"]["results/tables/metrics.json"]["data"]
    assert headline["experiments"]["tiny"]["runs"] == 4 and headline["experiments"]["tiny"]["complete"] == 4
    plots = run([*dvc, "plots", "show", "--json"], repo, env)
    assert plots.returncode == 0, plots.out
    data = json.loads(plots.stdout)["data"]
    assert {"eval_accuracy", "entropy"} <= set(data)
    values = data["entropy"][0]["content"]["data"]["values"]
    assert {row["run_id"] for row in values} == set(run_ids), "a line per run"

    # A changed setting reruns its own stage (and what reads every run), not the other setting's.
    a_files = {p: p.read_bytes() for p in (results / "runs" / "tiny__a__s0").iterdir() if p.is_file()}
    cfg["experiments"]["tiny"]["variants"]["b"]["steps"] = 2
    (repo / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    assert run(generate, repo, env).returncode == 0
    third = run([*dvc, "repro"], repo, env)
    assert third.returncode == 0, third.out
    assert set(re.findall(r"Running stage '([^']+)'", third.out)) == {"train_tiny__b", "aggregate", "figures", "report"}
    assert {p: p.read_bytes() for p in a_files} == a_files
    summary = json.loads((results / "runs" / "tiny__b__s1" / "summary.json").read_text())
    assert summary["config"]["steps"] == 2

    # DVC's cache restores each run's files.
    tracked = {p: p.read_bytes() for s in (0, 1) for p in (results / "runs" / f"tiny__a__s{s}").iterdir()
               if p.name in ("metrics.csv", "summary.json", "snapshot.pt")}  # fmt: skip
    assert len(tracked) == 6
    for path in tracked:
        path.unlink()
    restored = run([*dvc, "checkout"], repo, env)
    assert restored.returncode == 0, restored.out
    assert {p: p.read_bytes() for p in tracked} == tracked
