"""A throwaway single-node SLURM cluster for tests.

``start_cluster()`` brings up a private MUNGE daemon, ``slurmctld`` and ``slurmd`` on
this machine, all configured from one temporary directory (``slurm.conf``, the MUNGE key
and socket, state, spool, pid and log files) and listening on free ports, so nothing in
/etc is read or written and an already running system SLURM/MUNGE is left alone.  The
daemons run in the foreground (``-D`` / ``-F``) as children of the test process and get
SIGTERM when it dies (``PR_SET_PDEATHSIG``), so even a killed pytest leaves none behind;
``SlurmCluster.stop()`` cancels the remaining jobs, stops the daemons and removes the
directory (set ``MATHRL_SLURM_KEEP=1`` to keep it for debugging).

The client commands (sbatch, squeue, sinfo, scontrol, ...) that Snakemake's SLURM
executor calls find the cluster through ``SLURM_CONF``, which the ``slurm_cluster``
fixture sets for the test process and therefore for its children.  That is not enough
inside the jobs: the slurm-jobstep plugin (0.6.x) strips every SLURM_* variable except
the job identity, SLURM_CONF included, before it runs the job's ``srun``, which then finds
no configuration (a real cluster has /etc/slurm/slurm.conf or configless slurmd; we write
nothing to /etc).  So ``<workdir>/bin`` holds small wrappers (srun, sbatch, squeue, ...)
that set SLURM_CONF and exec the real command, and the fixture puts that directory first
on PATH, which sbatch --export=ALL carries into the jobs.

The configuration is what a cluster without an accounting database needs:
``select/cons_tres``, ``proctrack/linuxproc``, ``task/none``, no accounting storage and
``MinJobAge=600`` so that ``squeue`` still knows finished jobs (Snakemake must be run
with ``--slurm-status-command squeue``; ``sacct`` does not work without slurmdbd).

Running it needs root (slurmd launches jobs for users) and the Debian packages
``slurm-wlm`` and ``munge``; when they are missing and we are root they are installed
with ``scripts/install-system-deps.sh`` (opt out with ``MATHRL_SLURM_NO_INSTALL=1``).
Only when that is impossible does the fixture skip.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INSTALL_SCRIPT = ROOT / "scripts" / "install-system-deps.sh"
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("munge", "sbatch", "srun", "squeue", "sinfo", "scontrol", "scancel")
# Wrapped in <workdir>/bin (see SlurmCluster.env) so they find the cluster even without SLURM_CONF.
WRAPPED = ("sbatch", "srun", "salloc", "squeue", "sinfo", "scontrol", "scancel", "sacct", "sacctmgr", "sshare", "sstat")
PARTITION = "debug"  # the default partition
OTHER_PARTITION = "batch"  # a second one on the same node, to see that a requested partition is used
CLUSTER_NAME = "mathrltest"
SBIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/sbin")
START_TIMEOUT = 60.0


class SlurmUnavailable(RuntimeError):
    """SLURM cannot be run on this machine at all (a reason to skip, not to fail)."""


class SlurmStartError(RuntimeError):
    """SLURM is installed but the cluster did not come up (a reason to fail)."""


def _which(name: str) -> str | None:
    path = os.environ.get("PATH", os.defpath)
    extra = [d for d in SBIN_DIRS if d not in path.split(os.pathsep)]
    return shutil.which(name, path=os.pathsep.join([path, *extra]))


def _missing_binaries() -> list[str]:
    return [b for b in (*DAEMONS, *CLIENTS) if _which(b) is None]


def ensure_slurm_installed() -> None:
    """Raise SlurmUnavailable unless the SLURM and MUNGE binaries are (made) available."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        raise SlurmUnavailable("starting a SLURM cluster needs root (slurmd runs jobs for users)")
    missing = _missing_binaries()
    if not missing:
        return
    if os.environ.get("MATHRL_SLURM_NO_INSTALL"):
        raise SlurmUnavailable(f"SLURM binaries missing ({', '.join(missing)}) and MATHRL_SLURM_NO_INSTALL is set")
    if shutil.which("apt-get") is None or not INSTALL_SCRIPT.exists():
        raise SlurmUnavailable(f"SLURM binaries missing ({', '.join(missing)}) and no apt-get to install them")
    proc = subprocess.run(
        ["bash", str(INSTALL_SCRIPT), "slurm-wlm", "munge"],
        capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    missing = _missing_binaries()
    if proc.returncode != 0 or missing:
        raise SlurmUnavailable(
            f"could not install slurm-wlm/munge (rc={proc.returncode}, still missing: {', '.join(missing) or '-'}):\n"
            + (proc.stdout + proc.stderr)[-2000:]
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_hardware() -> dict[str, str]:
    """The node line fields that ``slurmd -C`` reports for this machine (CPUs, RealMemory, ...)."""
    out = subprocess.run([_which("slurmd"), "-C"], capture_output=True, text=True, timeout=60, check=False).stdout
    first = out.splitlines()[0] if out.strip() else ""
    fields = dict(re.findall(r"(\w+)=(\S+)", first))
    keep = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
    hw = {k: fields[k] for k in keep if k in fields}
    if "CPUs" not in hw:
        hw = {"CPUs": str(os.cpu_count() or 1)}
    if "RealMemory" not in hw:
        try:
            hw["RealMemory"] = str(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20)
        except (ValueError, OSError):
            hw["RealMemory"] = "1000"
    return hw


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """preexec_fn: the child gets `sig` when the test process dies, even by SIGKILL (Linux)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(sig))  # PR_SET_PDEATHSIG


def clean_env(conf: Path | None = None) -> dict[str, str]:
    """os.environ without inherited SLURM_*/SBATCH_*/SRUN_*/SALLOC_* settings, plus SLURM_CONF=conf."""
    env = {k: v for k, v in os.environ.items() if not re.match(r"(SLURM|SBATCH|SRUN|SALLOC)_", k)}
    if conf is not None:
        env["SLURM_CONF"] = str(conf)
    return env


@dataclass
class SlurmCluster:
    workdir: Path
    conf: Path
    nodename: str
    partition: str = PARTITION
    other_partition: str = OTHER_PARTITION
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    keep: bool = False

    @property
    def bindir(self) -> Path:
        return self.workdir / "bin"

    @property
    def env(self) -> dict[str, str]:
        """An environment in which the SLURM clients talk to this cluster (SLURM_CONF, PATH)."""
        env = clean_env(self.conf)
        env["PATH"] = os.pathsep.join([str(self.bindir), env.get("PATH", os.defpath)])
        return env

    def run(self, *cmd: str, timeout: float = 30, check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), capture_output=True, text=True, env=self.env, timeout=timeout, check=check)

    def log_files(self) -> list[Path]:
        return sorted(self.workdir.glob("*.log"))

    def logs(self, tail: int = 60) -> str:
        """The last lines of every daemon log, for failure messages."""
        parts = []
        for path in self.log_files():
            lines = path.read_text(errors="replace").splitlines()
            parts.append(f"----- {path.name} (last {tail} lines) -----\n" + "\n".join(lines[-tail:]))
        return "\n".join(parts)

    # -- lifecycle -----------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the daemon
        try:
            self.procs[name] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                cwd=self.workdir, preexec_fn=die_with_parent, start_new_session=True,
            )  # fmt: skip
        finally:
            log.close()

    def _wait(self, what: str, ready, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise SlurmStartError(f"{name} exited with {proc.returncode} while waiting for {what} "
                                          f"(files in {self.workdir})\n{self.logs()}")  # fmt: skip
            if ready():
                return
            time.sleep(0.3)
        raise SlurmStartError(f"timed out after {timeout:.0f}s waiting for {what} "
                              f"(files in {self.workdir})\n{self.logs()}")  # fmt: skip

    def _node_states(self) -> set[str]:
        """The node's state as sinfo reports it (once per partition), flags like '*' removed."""
        out = self.run("sinfo", "-h", "-N", "-n", self.nodename, "-o", "%T", timeout=15)
        return {s.rstrip("*~#!%$@^-") for s in out.stdout.split()} if out.returncode == 0 else set()

    def start(self) -> SlurmCluster:
        munge_dir = self.workdir / "munge"
        self._spawn("munged", [
            _which("munged"), "--foreground", "--force",
            f"--key-file={self.workdir / 'munge.key'}", f"--socket={munge_dir / 'munge.socket'}",
            f"--pid-file={munge_dir / 'munged.pid'}", f"--seed-file={munge_dir / 'munged.seed'}",
            f"--log-file={self.workdir / 'munged.log'}",
        ])  # fmt: skip
        self._wait("munged", lambda: (munge_dir / "munge.socket").exists(), timeout=20)
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._wait("slurmctld", lambda: self.run("scontrol", "ping", timeout=15).stdout.count("is UP") > 0)
        self._spawn("slurmd", [_which("slurmd"), "-D", "-f", str(self.conf), "-N", self.nodename])

        def idle() -> bool:
            states = self._node_states()
            if any(s.startswith(("down", "drain")) for s in states):  # e.g. a stale registration reason
                self.run("scontrol", "update", f"nodename={self.nodename}", "state=resume", timeout=15)
            return states == {"idle"}

        self._wait(f"node {self.nodename} to become idle", idle)
        return self

    def stop(self) -> None:
        """Cancel this cluster's jobs, stop its daemons and remove its directory."""
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            with contextlib.suppress(Exception):
                self.run("scancel", "--full", "--user", "root", timeout=15)
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    out = self.run("squeue", "-h", "-t", "pending,running,completing", "-o", "%i", timeout=15)
                    if out.returncode != 0 or not out.stdout.strip():
                        break
                    time.sleep(0.5)
        for name in ("slurmd", "slurmctld", "munged"):  # reverse start order
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


def write_config(workdir: Path, nodename: str) -> Path:
    hw = _node_hardware()
    node = " ".join(f"{k}={v}" for k, v in hw.items())
    for sub in ("state", "spool", "munge"):
        (workdir / sub).mkdir(mode=0o755, exist_ok=True)
    (workdir / "plugstack.conf").write_text("")  # keep the system's SPANK plugins out
    conf = workdir / "slurm.conf"
    conf.write_text(f"""\
# Generated by tests/slurm_cluster.py: a private single-node cluster without accounting.
ClusterName={CLUSTER_NAME}
SlurmctldHost={nodename}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={workdir / 'munge' / 'munge.socket'}
StateSaveLocation={workdir / 'state'}
SlurmdSpoolDir={workdir / 'spool'}
SlurmctldPidFile={workdir / 'slurmctld.pid'}
SlurmdPidFile={workdir / 'slurmd.pid'}
SlurmctldLogFile={workdir / 'slurmctld.log'}
SlurmdLogFile={workdir / 'slurmd.log'}
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={workdir / 'plugstack.conf'}
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
InactiveLimit=0
KillWait=5
Waittime=0
SlurmdTimeout=300
NodeName={nodename} NodeAddr=127.0.0.1 {node} State=UNKNOWN
PartitionName={PARTITION} Nodes={nodename} Default=YES MaxTime=INFINITE State=UP
PartitionName={OTHER_PARTITION} Nodes={nodename} Default=NO MaxTime=INFINITE State=UP
""")  # fmt: skip
    return conf


def write_wrappers(bindir: Path, conf: Path) -> None:
    """<bindir>/<client> runs the real client with SLURM_CONF=conf (see the module docstring)."""
    bindir.mkdir(mode=0o755, exist_ok=True)
    for name in WRAPPED:
        real = _which(name)
        if real is None:
            continue
        wrapper = bindir / name
        wrapper.write_text(f'#!/bin/sh\nSLURM_CONF="{conf}"\nexport SLURM_CONF\nexec "{real}" "$@"\n')
        wrapper.chmod(0o755)


def start_cluster() -> SlurmCluster:
    """Start a private single-node cluster; raises SlurmUnavailable or SlurmStartError."""
    ensure_slurm_installed()
    # /tmp rather than $TMPDIR: munged wants every directory above its socket searchable by
    # all, and a unix socket path must stay short (< 108 bytes).
    workdir = Path(tempfile.mkdtemp(prefix="mathrl-slurm-", dir="/tmp" if os.path.isdir("/tmp") else None))
    workdir.chmod(0o755)
    key = workdir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    nodename = socket.gethostname().split(".")[0] or "localhost"
    conf = write_config(workdir, nodename)
    write_wrappers(workdir / "bin", conf)
    cluster = SlurmCluster(workdir, conf, nodename, keep=bool(os.environ.get("MATHRL_SLURM_KEEP")))
    try:
        return cluster.start()
    except BaseException:
        cluster.stop()  # the error message carries the log tails; MATHRL_SLURM_KEEP=1 keeps the files
        raise


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running single-node SLURM cluster; SLURM_CONF points the clients at it meanwhile."""
    try:
        cluster = start_cluster()
    except SlurmUnavailable as e:
        pytest.skip(f"SLURM cluster unavailable: {e}")
    except SlurmStartError as e:
        pytest.fail(f"SLURM is installed but the test cluster did not start: {e}", pytrace=False)
    mp = pytest.MonkeyPatch()
    for key in [k for k in os.environ if re.match(r"(SLURM|SBATCH|SRUN|SALLOC)_", k)]:
        mp.delenv(key)
    mp.setenv("SLURM_CONF", str(cluster.conf))
    mp.setenv("PATH", str(cluster.bindir), prepend=os.pathsep)
    try:
        yield cluster
    finally:
        mp.undo()
        cluster.stop()
