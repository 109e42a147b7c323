"""The Snakemake profiles in profiles/: a tiny workflow through a real single-node SLURM cluster.

The cluster (tests/slurm_cluster.py) has no accounting database, so two settings are
passed on the command line rather than baked into profiles/slurm (real clusters keep the
plugin's defaults): ``--slurm-status-command squeue`` (sacct needs slurmdbd) and a short
``--slurm-init-seconds-before-status-checks`` (the default 40 s only costs time here).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from slurm_cluster import clean_env, die_with_parent, slurm_cluster  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "profiles"

# Three cluster jobs (one declaring gpu=0, i.e. CPU-only) and a local rule. Each cluster job
# records the SLURM job id it ran under; the local rule records that it had none.
SNAKEFILE = textwrap.dedent(
    """\
    localrules: all, collect

    rule all:
        input: "collect.txt"

    rule alpha:
        output: "alpha.txt"
        resources: mem_mb=100, runtime=5
        shell: 'echo "${{SLURM_JOB_ID:-none}} ${{SLURM_JOB_PARTITION:-none}}" > {output}'

    rule beta:
        output: "beta.txt"
        resources: mem_mb=100, runtime=5, gpu=0
        shell: 'echo "${{SLURM_JOB_ID:-none}} ${{SLURM_JOB_PARTITION:-none}}" > {output}'

    rule gamma:
        input: "alpha.txt", "beta.txt"
        output: "gamma.txt"
        resources: mem_mb=100, runtime=5
        shell: 'echo "${{SLURM_JOB_ID:-none}} ${{SLURM_JOB_PARTITION:-none}}" > {output}'

    rule collect:
        input: "alpha.txt", "beta.txt", "gamma.txt"
        output: "collect.txt"
        shell: 'echo "${{SLURM_JOB_ID:-local}}" > {output}'
    """
)
CLUSTER_RULES = ("alpha", "beta", "gamma")


def _tail(text: str, n: int = 80) -> str:
    return "\n".join(text.splitlines()[-n:])


def _report(workdir: Path, proc: subprocess.CompletedProcess | None, cluster=None) -> str:
    """Everything useful for a post-mortem: snakemake's output, the job logs, the daemon logs."""
    parts = []
    if proc is not None:
        parts.append(f"===== snakemake (rc={proc.returncode}) =====\n{_tail(proc.stdout + proc.stderr, 120)}")
    for log in sorted((workdir / ".snakemake" / "slurm_logs").rglob("*.log")):
        parts.append(f"===== {log.relative_to(workdir)} =====\n{_tail(log.read_text(errors='replace'), 40)}")
    if cluster is not None:
        parts.append(cluster.logs(40))
        parts.append(cluster.run("squeue", "-t", "all", "-o", "%i %j %T %P %r").stdout)
    return "\n".join(parts)


def _snakemake(workdir: Path, profile: str, *extra: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    (workdir / "Snakefile").write_text(SNAKEFILE)
    argv = [sys.executable, "-m", "snakemake", "--profile", str(PROFILES / profile), "--directory", str(workdir),
            "--snakefile", str(workdir / "Snakefile"), *extra]  # fmt: skip
    # If pytest itself is killed, the cluster's daemons stop with it and snakemake, which
    # could only wait for a controller that is gone (it ignores SIGTERM meanwhile), is killed.
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, check=False, cwd=workdir,
                          preexec_fn=lambda: die_with_parent(signal.SIGKILL))  # fmt: skip


@pytest.mark.slurm
@pytest.mark.timeout(360)
def test_profile_runs_jobs_through_slurm(slurm_cluster, tmp_path):  # noqa: F811 - fixture imported above
    env = slurm_cluster.env  # SLURM_CONF -> the test cluster, no inherited SLURM_* settings
    # The profile's default-resources read partition and account from the environment; ask
    # for the cluster's non-default partition, so that the jobs landing there shows it was used.
    partition, account = slurm_cluster.other_partition, "mathrl"
    env["SLURM_PARTITION"], env["SLURM_ACCOUNT"] = partition, account  # (no accounting: any name goes)
    start = time.monotonic()
    proc = _snakemake(
        tmp_path, "slurm",
        "--slurm-status-command", "squeue",  # no accounting database, so no sacct
        "--slurm-init-seconds-before-status-checks", "2",
        "--latency-wait", "5",
        env=env, timeout=300,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    print(f"\nsnakemake --profile profiles/slurm: {elapsed:.1f}s")
    assert proc.returncode == 0, _report(tmp_path, proc, slurm_cluster)

    job_ids = {}
    for rule in CLUSTER_RULES:
        out = tmp_path / f"{rule}.txt"
        assert out.exists(), _report(tmp_path, proc, slurm_cluster)
        job_id, job_partition = out.read_text().split()
        assert job_id.isdigit(), f"{rule} did not run in a SLURM job: {out.read_text()!r}\n" + _report(tmp_path, proc)
        assert job_partition == partition, f"{rule} ran in partition {job_partition!r}, not {partition!r}"
        job_ids[rule] = job_id
    assert len(set(job_ids.values())) == len(CLUSTER_RULES), f"jobs shared a SLURM job: {job_ids}"
    assert (tmp_path / "collect.txt").read_text().strip() == "local", "the localrule was submitted to SLURM"

    # SLURM itself (MinJobAge keeps finished jobs in squeue) saw them complete, without GPUs.
    q = slurm_cluster.run("squeue", "-h", "-t", "all", "-j", ",".join(job_ids.values()), "-o", "%i|%T|%P|%a|%b")
    rows = {line.split("|")[0]: line.split("|")[1:] for line in q.stdout.split()}
    for rule, job_id in job_ids.items():
        state, job_partition, job_account, gres = rows.get(job_id, ("missing", "", "", ""))
        assert state == "COMPLETED", f"{rule} (job {job_id}): {state}\n" + q.stdout + q.stderr
        assert (job_partition, job_account) == (partition, account), q.stdout
        assert gres in ("N/A", "(null)", ""), f"{rule} (job {job_id}) requested {gres}"


def test_default_profile_runs_locally(tmp_path):
    """profiles/default parses and runs the same workflow on this machine, outside SLURM."""
    proc = _snakemake(tmp_path, "default", "--cores", "2", env=clean_env(), timeout=120)
    assert proc.returncode == 0, _report(tmp_path, proc)
    for rule in CLUSTER_RULES:
        assert (tmp_path / f"{rule}.txt").read_text().split()[0] == "none"
    assert (tmp_path / "collect.txt").read_text().strip() == "local"
