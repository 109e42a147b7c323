"""Fault injection: what the pipeline guarantees when things go wrong, each checked for real.

Kills land at chosen instants through the test-only hooks of `mathrl.faults` (environment
variables; see its docstring): a training process is paused in the middle of step N or
halfway through writing a snapshot, the test waits for the `fault: ...` line it prints and
then sends SIGKILL. Every command runs as the user runs it (`python -m mathrl`, torchrun,
Snakemake on the repository's Snakefile with `--directory` a temporary directory), on a
tiny add task warmed up once for this module (20 steps: accuracy does not matter here; the
shaped reward makes every step move the weights). Nothing here touches the repository's
own results/ or .snakemake/.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import io
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from conftest import TINY, write_config
from test_pipeline import SNAKEFILE, finished_runs, planned_runs, snakemake, tiny_config

from mathrl import snapshot
from mathrl.cli import main
from mathrl.config import load_schema

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
VOLATILE = ["seconds", "sample_seconds", "update_seconds"]  # wall-clock columns
# Every step snapshotted, so a kill in step 3 has a complete snapshot of step 2 behind it.
KILL_SETTINGS = ["steps=4", "snapshot_every=1", "reward=shaped"]


# --- helpers -------------------------------------------------------------------------------


def child_env(**extra: str) -> dict:
    """The environment of a command under test: one thread, no fault hook unless given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MATHRL_FAULT_", "TORCHELASTIC_"))}
    return {**env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **extra}


def train_cmd(env: dict, run_id: str, *settings: str) -> list[str]:
    return [PY, "-m", "mathrl", "train", "--config", str(env["config"]), "--run-id", run_id, "--threads", "1", *settings]


def torchrun_cmd(env: dict, run_id: str, *settings: str, extra: tuple = ()) -> list[str]:
    return [PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *extra,
            "-m", "mathrl", "train", "--config", str(env["config"]), "--run-id", run_id, *settings]  # fmt: skip


def run(cmd: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("env", child_env())
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def run_dir(env: dict, run_id: str) -> Path:
    return env["results"] / "runs" / run_id


def metrics(directory: Path) -> pd.DataFrame:
    return pd.read_csv(directory / "metrics.csv").drop(columns=VOLATILE)


def snapshot_files(directory: Path) -> dict[str, bytes]:
    """Every snapshot-related file of a run directory (temporary ones included) by name."""
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*snapshot*"))}


class Background:
    """Commands started in the background, output to a file, killed (group) at teardown."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def start(self, cmd: list[str], log: Path, env: dict, cwd: Path | None = None, err: Path | None = None) -> subprocess.Popen:
        """Start `cmd` in a session of its own: stdout to `log`, stderr to `err` (or `log`)."""
        out = open(log, "w")
        errors = open(err, "w") if err else subprocess.STDOUT
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=errors, env=env, cwd=cwd, start_new_session=True)
        finally:
            out.close()
            if err:
                errors.close()
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def background():
    bg = Background()
    yield bg
    bg.close()


def wait_for(proc: subprocess.Popen, log: Path, pattern: str, timeout: float = 180, until=None) -> re.Match:
    """The first match of `pattern` in the growing file `log` (and `until()` true)."""
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text() if log.exists() else ""
        m = re.search(pattern, text)
        if m and (until is None or until()):
            return m
        assert proc.poll() is None, f"exited with {proc.returncode} before {pattern!r}:\n{text[-4000:]}"
        assert time.monotonic() < deadline, f"no {pattern!r} in {timeout}s:\n{text[-4000:]}"
        time.sleep(0.05)


def gone(pid: int, timeout: float = 30) -> bool:
    """Whether process `pid` has ended (a zombie counts) within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False


# --- fixtures: one warm-up for the module --------------------------------------------------


def tiny_cfg(results: Path) -> dict:
    """conftest's TINY with test_pipeline's 20-step warm-up (same files as its tiny_config)."""
    cfg = copy.deepcopy(TINY)
    cfg["results"] = str(results)
    cfg["sft"]["add"].update(max_steps=20, eval_every=10)
    return cfg


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """The add task's problem sets and warm-up checkpoint, built once: a results tree."""
    base = tmp_path_factory.mktemp("faults_tree")
    path = write_config(base / "config.yaml", tiny_cfg(base / "results"))
    assert main(["problems", "--config", str(path), "--task", "add"]) == 0
    assert main(["sft", "--config", str(path), "--task", "add"]) == 0
    return base / "results"


def copy_tree(tree: Path, where: Path, **changes) -> dict:
    """A private copy of the warmed-up tree and its config (with `changes` at the top level)."""
    cfg = {**tiny_cfg(where / "results"), **changes}
    shutil.copytree(tree, where / "results")
    return {"config": write_config(where / "config.yaml", cfg), "results": where / "results", "cfg": cfg, "dir": where}


@pytest.fixture
def env(tree, tmp_path) -> dict:
    return copy_tree(tree, tmp_path)


@pytest.fixture(scope="module")
def reference(tree, tmp_path_factory) -> pd.DataFrame:
    """metrics.csv of an uninterrupted single-process run with KILL_SETTINGS."""
    e = copy_tree(tree, tmp_path_factory.mktemp("reference"))
    done = run(train_cmd(e, "r", *KILL_SETTINGS))
    assert done.returncode == 0, done.stderr
    return metrics(run_dir(e, "r"))


# --- a training process killed with SIGKILL ------------------------------------------------


@pytest.mark.parametrize(
    "hook, marker",
    [
        ({"MATHRL_FAULT_SLEEP_AT_STEP": "3:300"}, r"fault: pid (\d+) rank 0 in step 3 before the optimizer step"),
        ({"MATHRL_FAULT_SLEEP_IN_SNAPSHOT": "3:300"}, r"fault: pid (\d+) rank 0 wrote half of (\S+);"),
    ],
    ids=["mid-step", "mid-snapshot"],
)
def test_kill_9_resumes_from_the_last_complete_snapshot_to_identical_metrics(env, reference, background, hook, marker):
    d, log = run_dir(env, "r"), env["dir"] / "killed.log"
    proc = background.start(train_cmd(env, "r", *KILL_SETTINGS), log, child_env(**hook))
    m = wait_for(proc, log, marker)
    assert int(m[1]) == proc.pid
    if "MATHRL_FAULT_SLEEP_IN_SNAPSHOT" in hook:  # half of step 3's snapshot is on disk, under a temporary name
        half = Path(m[2])
        assert half.parent == d and 0 < half.stat().st_size < (d / "snapshot.pt").stat().st_size
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert snapshot.load(d / "snapshot.pt")["step"] == 2  # the last complete one
    assert not (d / "metrics.csv").exists() and not (d / "summary.json").exists()

    again = run(train_cmd(env, "r", *KILL_SETTINGS))  # the same command, run again
    assert again.returncode == 0, again.stderr
    assert f"resuming r from {d / 'snapshot.pt'} at step 2" in again.stdout
    assert "unusable" not in again.stderr  # the half-written file was never a candidate
    pd.testing.assert_frame_equal(metrics(d), reference, check_exact=True)
    assert sorted(p.name for p in d.iterdir()) == ["metrics.csv", "snapshot.pt", "snapshot.pt.prev", "summary.json"]


# --- damaged snapshots ----------------------------------------------------------------------


def flip_payload_bit(path: Path) -> None:
    """One bit of the payload (after the checksum header) flipped: same size, bad content."""
    data = bytearray(path.read_bytes())
    start = data.index(b"\n") + 1
    data[start + (len(data) - start) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def test_bit_flipped_snapshot_is_reported_and_the_previous_one_used(env, capsys):
    args = ["train", "--config", str(env["config"]), "--run-id", "r", "snapshot_every=1", "reward=shaped"]
    assert main([*args, "steps=2"]) == 0
    d = run_dir(env, "r")
    flip_payload_bit(d / "snapshot.pt")
    capsys.readouterr()
    assert main([*args, "steps=3"]) == 0
    out, err = capsys.readouterr()
    assert f"snapshot {d / 'snapshot.pt'} is unusable" in err and "checksum mismatch" in err
    assert f"resuming r from {d / 'snapshot.pt'} at step 1" in out  # from .prev, never step 0
    assert list(pd.read_csv(d / "metrics.csv")["step"]) == [1, 2, 3]


def test_both_snapshots_damaged_is_an_error_naming_both_and_nothing_is_overwritten(env, capsys):
    args = ["train", "--config", str(env["config"]), "--run-id", "r", "snapshot_every=1"]
    assert main([*args, "steps=2"]) == 0
    d = run_dir(env, "r")
    flip_payload_bit(d / "snapshot.pt")
    prev = d / "snapshot.pt.prev"
    prev.write_bytes(prev.read_bytes()[:1000])  # truncated
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    capsys.readouterr()
    assert main([*args, "steps=3"]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("mathrl train: error: no usable snapshot")
    assert f"{d / 'snapshot.pt'}: " in last and f"{prev}: " in last and "checksum mismatch" in last
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before  # nothing rewritten, nothing added


# --- under torchrun -------------------------------------------------------------------------

DDP_SETTINGS = ["steps=4", "snapshot_every=1", "batch_size=16", "group_size=4", "reward=shaped"]


@pytest.fixture(scope="module")
def ddp_reference(tree, tmp_path_factory) -> pd.DataFrame:
    """metrics.csv of an uninterrupted 2-process run (gloo on CPU)."""
    e = copy_tree(tree, tmp_path_factory.mktemp("ddp_reference"))
    done = run(torchrun_cmd(e, "two", *DDP_SETTINGS))
    assert done.returncode == 0, done.stderr[-3000:]
    return metrics(run_dir(e, "two"))


def test_torchrun_worker_killed_ends_the_job_with_a_clear_error(env, background):
    """Both workers pause in step 3; rank 1 is killed by pid: the job ends (no hang) with
    torchrun's failure report naming the rank, its pid and the signal."""
    out, err = env["dir"] / "out.log", env["dir"] / "err.log"
    proc = background.start(torchrun_cmd(env, "two", *DDP_SETTINGS), out, child_env(MATHRL_FAULT_SLEEP_AT_STEP="3:300"), err=err)
    pid = int(wait_for(proc, err, r"fault: pid (\d+) rank 1 in step 3")[1])
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    rc = proc.wait(timeout=60)
    assert rc != 0 and time.monotonic() - killed < 60
    text = err.read_text()
    assert "ChildFailedError" in text and "mathrl FAILED" in text
    assert re.search(rf"rank\s*: 1 \(local_rank: 1\)\s*\n\s*exitcode\s*: -9 \(pid: {pid}\)", text), text[-3000:]
    assert snapshot.load(run_dir(env, "two") / "snapshot.pt")["step"] == 2
    assert not (run_dir(env, "two") / "summary.json").exists()


def test_torchrun_max_restarts_recovers_from_the_snapshot(env, ddp_reference):
    """Rank 1 kills itself in step 3 of the first attempt; torchrun restarts both workers,
    which resume from step 2's snapshot and end with the uninterrupted run's metrics."""
    cmd = torchrun_cmd(env, "two", *DDP_SETTINGS, extra=("--max-restarts=1",))
    done = run(cmd, env=child_env(MATHRL_FAULT_KILL_RANK_AT_STEP="1:3"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 1 killing itself in step 3" in done.stderr  # the fault did happen
    assert f"resuming two from {run_dir(env, 'two') / 'snapshot.pt'} at step 2" in done.stdout
    pd.testing.assert_frame_equal(metrics(run_dir(env, "two")), ddp_reference, check_exact=True)
    assert json.loads((run_dir(env, "two") / "summary.json").read_text())["resolved"]["world_size"] == 2


# --- a non-finite loss, and a missing run, in the report -----------------------------------

DESCRIPTION = "<script>alert('x')</script> & friends"


@pytest.fixture(scope="module")
def reported(tree, tmp_path_factory) -> dict:
    """An experiment of two runs: `nan` (non-finite loss at step 2) is run, `clean` is not;
    then `mathrl aggregate` and `mathrl report` on that tree."""
    experiments = {"fault": {"description": DESCRIPTION, "fixed": {"steps": 3},
                             "variants": {"nan": {"fault_nan_step": 2}, "clean": {}}, "seeds": [0]}}  # fmt: skip
    e = copy_tree(tree, tmp_path_factory.mktemp("reported"), experiments=experiments)
    assert main(["train", "--config", str(e["config"]), "--run", "fault__nan__s0"]) == 0
    assert main(["aggregate", "--config", str(e["config"])]) == 0
    assert main(["report", "--config", str(e["config"])]) == 0
    tables = e["results"] / "tables"
    return {**e, "runs": pd.read_csv(tables / "runs.csv").set_index("run_id"), "curves": pd.read_csv(tables / "curves.csv"),
            "alerts": pd.read_csv(tables / "alerts.csv"), "html": (e["results"] / "report.html").read_text()}  # fmt: skip


def section(html: str, sid: str) -> str:
    return re.search(rf'<section id="{sid}">(.*?)</section>', html, re.S)[1]


def test_nonfinite_loss_shows_in_the_report(reported):
    alerts = reported["alerts"]
    assert alerts[["run_id", "step", "kind"]].values.tolist() == [["fault__nan__s0", 2, "nonfinite"]]
    assert "nonfinite" in reported["runs"].loc["fault__nan__s0", "alert_kinds"]
    rows = re.findall(r"<tr>(.*?)</tr>", section(reported["html"], "alerts"), re.S)
    assert [r for r in rows if "fault__nan__s0" in r and ">nonfinite<" in r and ">2<" in r], rows


def test_missing_run_is_marked_and_never_invented(reported):
    runs, curves, html = reported["runs"], reported["curves"], reported["html"]
    assert runs.loc["fault__clean__s0", "status"] == "missing" and runs.loc["fault__nan__s0", "status"] == "complete"
    assert set(curves["run_id"]) == {"fault__nan__s0"} and len(curves) == 3
    assert not (run_dir(reported, "fault__clean__s0")).exists()  # reading the tree wrote nothing there
    row = re.search(r'<tr id="run-fault__clean__s0">.*?</tr>', html, re.S)[0]
    assert '<td class="missing">missing</td>' in row
    assert "1 run(s) are missing or failed" in html


def test_free_text_is_escaped_in_the_report(reported):
    html = reported["html"]
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; friends" in html


# --- Snakemake killed, and two Snakemakes at once -----------------------------------------


def pipeline_dir(tree: Path, workdir: Path, experiments: dict) -> Path:
    """A Snakemake directory holding the warmed-up tree (problem sets and warm-up are there,
    so only train jobs run) and test_pipeline's tiny config with `experiments`."""
    shutil.copytree(tree, workdir / "results")
    return tiny_config(workdir, experiments)


def snakemake_cmd(workdir: Path, config: Path, *args: str) -> list[str]:
    return [PY, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(workdir), *args, "--configfile", str(config)]


def test_killed_snakemake_aggregates_no_partial_run_and_reruns_only_what_is_missing(tree, tmp_path, background, monkeypatch):
    """Run a (2 steps) finishes while b (6 steps, snapshots every 2) is paused in step 4;
    then the whole process group gets SIGKILL. Aggregation before the rerun counts b as
    missing (even with a partial metrics.csv planted in its directory); the rerun, after
    `--unlock`, runs b alone, which resumes from its step-2 snapshot."""
    experiments = {"cut": {"fixed": {"snapshot_every": 2}, "variants": {"a": {"steps": 2}, "b": {"steps": 6}}, "seeds": [0]}}
    config = pipeline_dir(tree, tmp_path, experiments)
    a, b = (tmp_path / "results" / "runs" / f"cut__{v}__s0" for v in "ab")
    targets = [f"results/runs/cut__{v}__s0/summary.json" for v in "ab"]
    log, b_log = tmp_path / "first.log", tmp_path / "results" / "logs" / "train" / "cut__b__s0.log"
    proc = background.start(snakemake_cmd(tmp_path, config, "--cores", "2", *targets), log, child_env(MATHRL_FAULT_SLEEP_AT_STEP="4:300"),
                            cwd=tmp_path)  # fmt: skip
    wait_for(proc, log, r"Finished job", until=lambda: "cut__a__s0" in finished_runs(log.read_text()))
    b_pid = int(wait_for(proc, b_log, r"fault: pid (\d+) rank 0 in step 4")[1])
    os.killpg(proc.pid, signal.SIGKILL)  # Snakemake and every job: a machine going down
    proc.wait(timeout=30)
    assert gone(b_pid), "the training job survived its Snakemake"
    assert (a / "summary.json").exists() and not (b / "summary.json").exists()
    assert snapshot.load(b / "snapshot.pt")["step"] == 2
    a_summary = (a / "summary.json").stat().st_mtime_ns

    # A partial metrics.csv where b's would be (as a copy cut mid-line would leave it).
    text = (a / "metrics.csv").read_text()
    (b / "metrics.csv").write_text(text[: len(text) * 2 // 3])
    monkeypatch.chdir(tmp_path)  # the config's results directory is relative, as in the pipeline
    assert main(["aggregate", "--config", str(config)]) == 0
    runs = pd.read_csv(tmp_path / "results" / "tables" / "runs.csv").set_index("run_id")
    assert runs.loc["cut__a__s0", "status"] == "complete" and runs.loc["cut__b__s0", "status"] == "missing"
    curves = pd.read_csv(tmp_path / "results" / "tables" / "curves.csv")
    assert set(curves["run_id"]) == {"cut__a__s0"} and len(curves) == 2
    (b / "metrics.csv").unlink()

    locked = run(snakemake_cmd(tmp_path, config, "--cores", "2", *targets), cwd=tmp_path)
    assert locked.returncode != 0 and "cannot be locked" in locked.stdout + locked.stderr  # the killed one's lock
    unlock = run(snakemake_cmd(tmp_path, config, "--unlock", *targets), cwd=tmp_path)
    assert unlock.returncode == 0, unlock.stdout + unlock.stderr
    again = run(snakemake_cmd(tmp_path, config, "--cores", "2", *targets), cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert planned_runs(again.stdout + again.stderr) == {"cut__b__s0"}
    assert (a / "summary.json").stat().st_mtime_ns == a_summary
    assert "resuming cut__b__s0" in b_log.read_text() and "at step 2" in b_log.read_text()
    assert list(pd.read_csv(b / "metrics.csv")["step"]) == [1, 2, 3, 4, 5, 6]


def test_second_snakemake_on_the_same_directory_is_refused_and_the_first_completes(tree, tmp_path, background):
    config = pipeline_dir(tree, tmp_path, {"lock": {"fixed": {"steps": 3}, "seeds": [0]}})
    target = "results/runs/lock__base__s0/summary.json"
    d, release = tmp_path / "results" / "runs" / "lock__base__s0", tmp_path / "release"
    log, run_log = tmp_path / "first.log", tmp_path / "results" / "logs" / "train" / "lock__base__s0.log"
    hook = child_env(MATHRL_FAULT_SLEEP_AT_STEP="2:300", MATHRL_FAULT_RELEASE=str(release))
    first = background.start(snakemake_cmd(tmp_path, config, "--cores", "1", target), log, hook, cwd=tmp_path)
    wait_for(first, run_log, r"fault: pid \d+ rank 0 in step 2")

    second = snakemake(tmp_path, "--cores", "1", target, "--configfile", str(config), timeout=120)
    out = second.stdout + second.stderr
    assert second.returncode != 0 and "cannot be locked" in out, out
    assert "rule train" not in out and run_log.read_text().count("fault:") == 1  # no second job started

    release.touch()
    assert first.wait(timeout=180) == 0, log.read_text()[-3000:]
    assert json.loads((d / "summary.json").read_text())["status"] == "complete"
    assert list(pd.read_csv(d / "metrics.csv")["step"]) == [1, 2, 3]
    assert snapshot.load(d / "snapshot.pt")["step"] == 3
    assert not list((tmp_path / ".snakemake" / "locks").glob("*"))
    again = snakemake(tmp_path, "-n", target, "--configfile", str(config))
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


# --- bad input: exit 2, a message naming the problem, nothing written ----------------------


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--set", "train.bacth_size=8"], "train.bacth_size: unknown key (did you mean 'batch_size'?)"),
        (["--set", "tasks.add.ndigit=two"], "tasks.add.ndigit: 'two' is not of type 'integer'"),
        (["--set", "train.group_size=0"], "train.group_size: 0 is less than the minimum of 1"),
        (["--set", "experiments.tiny.grid.batch_size=[]"], "experiments.tiny.grid.batch_size: [] should be non-empty"),
        (["--config", "MALFORMED"], "bad.yaml line 3: malformed YAML: mapping values are not allowed"),
    ],
    ids=["unknown-key", "wrong-type", "out-of-range", "zero-run-grid", "malformed-yaml"],
)
def test_bad_config_through_train_exits_2_and_writes_nothing(tmp_path, capsys, args, needle):
    config = write_config(tmp_path / "c.yaml", tiny_cfg(tmp_path / "results"))
    malformed = tmp_path / "bad.yaml"
    malformed.write_text("train:\n  steps: 4\n  lr: 0.1: 2\n  seed: 1\n")
    args = [str(malformed) if a == "MALFORMED" else a for a in args]
    assert main(["train", "--config", str(config), *args, "--run-id", "r"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mathrl train: error:") and needle in err, err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("command", ["train", "sft"])
def test_malformed_problem_file_names_its_line_and_writes_nothing(env, capsys, command):
    train_txt = env["results"] / "problems" / "add" / "train.txt"
    lines = train_txt.read_text().splitlines(keepends=True)
    lines[6] = "12+34=47\n"  # line 7: a wrong result
    train_txt.write_text("".join(lines))
    before = {p: p.read_bytes() for p in env["results"].rglob("*") if p.is_file()}
    argv = ["train", "--run-id", "r"] if command == "train" else ["sft", "--task", "add"]
    assert main([argv[0], "--config", str(env["config"]), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert f"mathrl {command}: error: {train_txt}, line 7: '12+34=47': wrong result: expected 46" in err
    assert {p: p.read_bytes() for p in env["results"].rglob("*") if p.is_file()} == before


# --- a full disk ------------------------------------------------------------------------------


def file_size_limit(limit: int):
    """preexec_fn: files of this process may not grow past `limit` bytes (a full disk without
    privileges); writes past it fail with EFBIG instead of killing the process."""

    def pre():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return pre


def test_full_disk_during_a_snapshot_keeps_the_previous_one(env, capsys):
    """A run of 2 steps is complete; extended to 4 on a full disk (files may not grow past
    half a snapshot), its step-4 snapshot cannot be written: a one-line error naming the
    file, and everything on disk is step 2's, whole. With space again it resumes."""
    d = run_dir(env, "r")
    argv = ["train", "--config", str(env["config"]), "--run-id", "r", "snapshot_every=2"]
    assert main([*argv, "steps=2"]) == 0
    before = {name: (d / name).read_bytes() for name in ("snapshot.pt", "metrics.csv", "summary.json")}

    full = run(train_cmd(env, "r", "snapshot_every=2", "steps=4"), preexec_fn=file_size_limit(len(before["snapshot.pt"]) // 2))
    assert full.returncode == 1, full.stderr
    assert "Traceback" not in full.stderr
    assert full.stderr.strip().splitlines()[-1] == (
        f"mathrl train: error: [Errno 27] cannot write {d / 'snapshot.pt'} (File too large); the file in place is unchanged"
    )
    assert {name: (d / name).read_bytes() for name in before} == before  # step 2's outputs, whole
    assert sorted(p.name for p in d.iterdir()) == sorted(before)  # no temporary file left
    assert snapshot.load(d / "snapshot.pt")["step"] == 2

    capsys.readouterr()
    assert main([*argv, "steps=4"]) == 0  # space again: the same command resumes
    assert f"resuming r from {d / 'snapshot.pt'} at step 2" in capsys.readouterr().out
    assert list(pd.read_csv(d / "metrics.csv")["step"]) == [1, 2, 3, 4]


FULL_DISK_WRITES = """
import json, math, sys
from pathlib import Path
from mathrl.snapshot import atomic_write_bytes
from mathrl.trainer import write_metrics
d = Path(sys.argv[1])
errors = []
for write in (lambda: atomic_write_bytes(d / "summary.json", b"x" * 200_000),
              lambda: write_metrics(d / "metrics.csv", [{"step": i, "lr": math.pi} for i in range(5000)])):
    try:
        write()
    except OSError as exc:
        errors.append(str(exc))
print(json.dumps(errors))
"""


def test_full_disk_never_leaves_half_a_results_file(tmp_path):
    (tmp_path / "summary.json").write_text('{"status": "complete"}\n')
    done = run([PY, "-c", FULL_DISK_WRITES, str(tmp_path)], preexec_fn=file_size_limit(64 * 1024))
    assert done.returncode == 0, done.stderr
    errors = json.loads(done.stdout)
    assert len(errors) == 2 and all("File too large" in e for e in errors), errors
    assert str(tmp_path / "summary.json") in errors[0] and str(tmp_path / "metrics.csv") in errors[1]
    assert (tmp_path / "summary.json").read_text() == '{"status": "complete"}\n'  # the good one, untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]  # no metrics.csv, no temporary file


# --- security basics ----------------------------------------------------------------------


def test_yaml_python_tags_are_refused(tmp_path, capsys):
    marker = tmp_path / "pwned"
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"results: !!python/object/apply:os.system ['touch {marker}']\n")
    assert main(["runs", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "malformed YAML" in err and "python/object/apply" in err
    assert not marker.exists()


class Evil:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_snapshot_with_code_is_refused_even_with_a_valid_checksum(env, capsys):
    marker = env["dir"] / "pwned"
    buf = io.BytesIO()
    torch.save({"step": 1, "net": Evil(marker)}, buf)
    payload = buf.getvalue()
    data = snapshot.MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
    d = run_dir(env, "r")
    d.mkdir(parents=True)
    (d / "snapshot.pt").write_bytes(data)
    with pytest.raises(Exception, match="Weights only load failed"):
        snapshot.decode(data, "evil")
    assert main(["train", "--config", str(env["config"]), "--run-id", "r", "steps=2"]) == 2
    err = capsys.readouterr().err
    assert f"{d / 'snapshot.pt'}: " in err and "Weights only load failed" in err
    assert not marker.exists()
    assert (d / "snapshot.pt").read_bytes() == data and sorted(p.name for p in d.iterdir()) == ["snapshot.pt"]


def shell_commands() -> dict[str, str]:
    """Each rule's shell command (its string literals joined), by rule name."""
    commands = {}
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        lines = smk.read_text().splitlines()
        rule = None
        for i, line in enumerate(lines):
            if m := re.match(r"rule (\w+):", line):
                rule = m[1]
            if line.strip() == "shell:":
                parts = []
                for nxt in lines[i + 1 :]:
                    if not nxt.strip().startswith(('"', "'")):
                        break
                    parts.append(nxt.strip())
                commands[rule] = ast.literal_eval("(" + "\n".join(parts) + ")")
    return commands


def test_every_value_reaching_a_rule_shell_is_quoted_or_constrained():
    common = (ROOT / "rules" / "common.smk").read_text()
    block = re.search(r"^wildcard_constraints:\n((?:    .*\n)+)", common, re.M)[1]
    constrained = set(re.findall(r"^    (\w+)=", block, re.M))
    assert re.search(r'study="\[A-Za-z0-9_\]\+"', block)  # run_id and task: alternations of validated names
    schema = load_schema()["definitions"]
    # Params that are no file and no free text: a closed set of safe words from the schema.
    enum_params = {"torchrun": schema["pipeline"]["properties"]["torchrun"]["enum"], "fork_server": ["auto", "off"]}
    for values in enum_params.values():
        assert all(re.fullmatch(r"[a-z]+", v) for v in values)
    commands = shell_commands()
    assert {"problems", "sft", "train", "bandit", "gradvar", "aggregate", "figures", "report"} <= set(commands)
    for rule, cmd in commands.items():
        for field in re.findall(r"\{([^{}]+)\}", cmd):
            name, _, spec = field.partition(":")
            kind, _, attr = name.partition(".")
            if kind in ("input", "output", "log", "params"):
                assert spec == "q" or (kind == "params" and attr in enum_params), f"rule {rule}: {{{field}}} is not quoted"
            elif kind == "wildcards":
                assert attr in constrained, f"rule {rule}: wildcard {attr} has no constraint"
            else:
                assert name in ("threads", "resources.gpu"), f"rule {rule}: {{{field}}}"  # integers


@pytest.mark.parametrize("run_id", ["x;touch pwned", "<b>x</b>", "a b", "..", "$(id)", ""])
def test_run_id_with_shell_or_html_metacharacters_is_refused(tmp_path, capsys, run_id):
    config = write_config(tmp_path / "c.yaml", tiny_cfg(tmp_path / "results"))
    assert main(["train", "--config", str(config), "--run-id", run_id]) == 2
    assert "--run-id" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("where", ["experiment", "variant"])
def test_experiment_or_variant_name_with_metacharacters_is_refused(tmp_path, capsys, where):
    name = "x;touch pwned<b>"
    cfg = tiny_cfg(tmp_path / "results")
    cfg["experiments"] = {name: {"seeds": [0]}} if where == "experiment" else {"e": {"variants": {name: {}}, "seeds": [0]}}
    config = write_config(tmp_path / "c.yaml", cfg)
    assert main(["runs", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert (f"{name!r} does not match '^[A-Za-z0-9_]+$'" if where == "experiment" else "characters outside [A-Za-z0-9_.-]") in err, err
    assert not (tmp_path / "results").exists()
