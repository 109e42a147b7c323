"""A fork server for CPU runs: torch is imported once, and each run is forked from it.

`import torch` costs about 2.4 s of CPU on the 2-core machines this project targets, more
than a whole short CPU run of the default grid takes to train. So the pipeline's lone CPU
worker (`mathrl launch --fork-server auto`, no GPU, outside SLURM) does not start a fresh
interpreter: it asks a per-user server process, which has already imported what the
launcher names (torch, torch._dynamo, the trainer), to fork a child that runs
`python -m mathrl <argv>` with the job's environment, working
directory and standard streams (passed over a Unix socket). Everything a run computes is
unchanged; only the import is shared.

Lifetime and safety:
- the server is keyed by a hash of the interpreter, torch's location and every mathrl
  source file (path, size, mtime): editing the code starts a fresh server, so a stale
  import is never used. It exits after `IDLE_SECONDS` without work
  ($MATHRL_FORK_SERVER_IDLE overrides it; $MATHRL_FORK_SERVER_DIR moves the sockets).
- its socket lives in a private directory (mode 0700, owned by the user) and it serves
  only peers of the same uid (SO_PEERCRED).
- it is single-threaded (a `selectors` loop) and never runs a torch op itself, so a fork
  never copies a held lock or a started OpenMP pool.
- the client forwards SIGTERM/SIGINT to the child; if the client dies, the server sends
  the child SIGTERM (SIGKILL after a grace period); if the server dies, the child gets
  SIGTERM (Linux parent-death signal). A run never outlives the job that asked for it.
- anything that goes wrong before the child is forked makes `run` return None, and the
  launcher starts the run the ordinary way.

Protocol (stream socket): the client sends a 4-byte length with its stdin, stdout and
stderr attached (SCM_RIGHTS), then that many bytes of JSON {module, argv, env, cwd}. The server
answers b"A" + pid once the child is forked, and b"R" + exit status (128+N for a signal)
when it ends. The client may send b"S" + signal number at any time.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from mathrl import CPU_KERNEL_PINS
from mathrl.pipeline.processes import forwarding_signals, prctl, set_parent_death_signal

IDLE_SECONDS = 60.0  # the server exits after this long with no child and no client
KILL_GRACE = 10.0  # seconds between SIGTERM and SIGKILL for a child whose client died
START_TIMEOUT = 60.0  # how long a client waits for a new server to listen
PACKAGE = Path(__file__).resolve().parents[1]  # the whole package, every wing


# ---------------------------------------------------------------------- where and whether
def enabled(gpus: int, environ=os.environ) -> bool:
    """The `auto` rule: a CPU run on Linux, outside SLURM (a cluster job must leave no
    process behind on its node) and not switched off by MATHRL_NO_FORK_SERVER=1."""
    return (
        gpus == 0
        and sys.platform.startswith("linux")
        and not environ.get("SLURM_JOB_ID")
        and environ.get("MATHRL_NO_FORK_SERVER", "").strip() in ("", "0")
        and hasattr(socket, "send_fds")
    )


def code_key(package: Path = PACKAGE) -> str:
    """Hash of what a forked run would execute: interpreter, torch's location, our sources, and the
    CPU kernels the server's torch was imported with (a forked run keeps them, whatever its own
    environment asks)."""
    h = hashlib.sha256()
    spec = importlib.util.find_spec("torch")  # finds, does not import
    torch_origin = spec.origin if spec and spec.origin else "none"
    kernels = " ".join(f"{key}={os.environ.get(key, '')}" for key in CPU_KERNEL_PINS)
    for part in (sys.executable, sys.version, torch_origin, kernels):
        h.update(part.encode() + b"\0")
    if torch_origin != "none":
        st = os.stat(torch_origin)
        h.update(f"{st.st_size}:{st.st_mtime_ns}\0".encode())
    for path in sorted(package.rglob("*.py")):
        st = path.stat()
        h.update(f"{path.relative_to(package)}:{st.st_size}:{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:16]


def socket_dir() -> Path:
    """A private directory for the user's sockets (created 0700; refused if not ours or
    readable by others)."""
    base = Path(os.environ.get("MATHRL_FORK_SERVER_DIR") or f"/tmp/mathrl-fork-{os.getuid()}")
    base.mkdir(mode=0o700, exist_ok=True)
    st = base.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{base}: not a private directory of uid {os.getuid()} (mode {st.st_mode & 0o777:o})")
    return base


def socket_path(preload: tuple[str, ...] = ()) -> Path:
    """One server per code version and preload list."""
    extra = f"-{hashlib.sha256(' '.join(preload).encode()).hexdigest()[:6]}" if preload else ""
    return socket_dir() / f"{code_key()}{extra}.sock"


# ---------------------------------------------------------------------- client
def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
        return sock
    except OSError:
        sock.close()
        return None


def _start_server(path: Path, preload: tuple[str, ...]) -> None:
    idle = os.environ.get("MATHRL_FORK_SERVER_IDLE") or str(IDLE_SECONDS)
    log = open(path.with_suffix(".log"), "ab")
    subprocess.Popen(
        [sys.executable, "-m", "mathrl.pipeline.forkserver", str(path), idle, *preload],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
        close_fds=True,
    )
    log.close()


def connect(preload: tuple[str, ...] = ()) -> socket.socket | None:
    """A connection to the server for this code, started if needed; None if impossible."""
    import fcntl

    path = socket_path(preload)
    sock = _connect(path)
    if sock is not None:
        return sock
    # One client starts the server; the others wait on the lock and then connect.
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sock = _connect(path)
        if sock is None:
            path.unlink(missing_ok=True)  # a socket nobody answers on: its server was killed
            _start_server(path, preload)
            deadline = time.monotonic() + START_TIMEOUT
            while sock is None and time.monotonic() < deadline:
                time.sleep(0.05)
                sock = _connect(path)
    return sock


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("fork server closed the connection")
        buf += chunk
    return buf


def run(
    argv: list[str],
    env: dict | None = None,
    cwd: str | None = None,
    module: str = "mathrl",
    preload: tuple[str, ...] = (),
) -> int | None:
    """Run `python -m <module> <argv>` in a child of the fork server (one that imported
    `preload`), with this process's standard streams; its exit status, or None if no child
    could be started (run it yourself).

    SIGTERM and SIGINT received meanwhile are passed on to the child."""
    payload = json.dumps(
        {
            "module": module,
            "argv": list(argv),
            "env": dict(os.environ if env is None else env),
            "cwd": cwd or os.getcwd(),
        }
    ).encode()
    for _attempt in range(3):  # a server that was just exiting closes without an answer
        try:
            sock = connect(tuple(preload))
        except OSError:
            return None
        if sock is None:
            return None
        with sock:
            try:
                socket.send_fds(sock, [struct.pack("!I", len(payload))], [0, 1, 2])
                sock.sendall(payload)
                head = sock.recv(1)
            except OSError:
                continue
            if head != b"A":
                continue
            return _wait(sock)
    return None


def _wait(sock: socket.socket) -> int:
    """After the child started: forward signals, then return its exit status."""
    _recv_exact(sock, 4)  # the child's pid

    def forward(signum, _frame):
        try:
            sock.sendall(b"S" + bytes([signum]))
        except OSError:
            pass

    with forwarding_signals(forward):
        try:
            if _recv_exact(sock, 1) != b"R":
                raise ConnectionError("fork server sent an unexpected message")
            return struct.unpack("!i", _recv_exact(sock, 4))[0]
        except (ConnectionError, OSError) as exc:
            print(f"mathrl launch: error: the fork server ended before the run did ({exc})", file=sys.stderr)
            return 1


# ---------------------------------------------------------------------- server
def _child(request: dict, fds: list[int], server_pid: int) -> None:
    """In the forked child: become the job's process, run the command, never return."""
    import io

    rc = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for s in (signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        set_parent_death_signal(server_pid)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # Streams over the job's descriptors, buffered as a fresh interpreter would buffer them.
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=os.isatty(1))
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
        import torch

        threads = os.environ.get("OMP_NUM_THREADS", "").strip()
        if threads.isdigit() and int(threads) > 0:
            torch.set_num_threads(int(threads))
        # What `python -m <module> <argv>` does; a module's __main__ ends by raising SystemExit.
        sys.argv = [request["module"], *request["argv"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        rc = 0
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except KeyboardInterrupt:
        rc = 128 + signal.SIGINT
    except BaseException:  # noqa: BLE001 - the child must always exit with a status
        import traceback

        traceback.print_exc()
        rc = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(rc if isinstance(rc, int) and 0 <= rc < 256 else 1)


class Server:
    """The accept/fork/reap loop of one socket."""

    def __init__(self, path: Path, idle: float = IDLE_SECONDS):
        self.path, self.idle = path, idle
        self.sel = selectors.DefaultSelector()
        self.children: dict[int, socket.socket] = {}  # pid -> its client
        self.clients: dict[socket.socket, int | None] = {}  # client -> pid (None until forked)
        self.kill_at: dict[int, float] = {}  # pid -> when to SIGKILL (client gone)

    def listen(self) -> bool:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        self.listener.bind(str(tmp))
        self.listener.listen(64)
        try:  # bind under a temporary name, then link: a lost race leaves the winner's socket alone
            os.link(tmp, self.path)
        except FileExistsError:
            tmp.unlink()
            return False
        tmp.unlink()
        self.inode = self.path.stat().st_ino
        self.sel.register(self.listener, selectors.EVENT_READ, "listen")
        return True

    def serve(self) -> None:
        last_busy = time.monotonic()
        while True:
            for key, _ in self.sel.select(timeout=0.05):
                if key.data == "listen":
                    self.accept()
                else:
                    self.from_client(key.fileobj)
            self.reap()
            now = time.monotonic()
            for pid, when in list(self.kill_at.items()):
                if now >= when:
                    self._signal(pid, signal.SIGKILL)
                    del self.kill_at[pid]
            if self.children or self.clients:
                last_busy = now
            elif now - last_busy > self.idle or not self._still_ours():
                break
        self.close()

    def _still_ours(self) -> bool:
        try:
            return self.path.stat().st_ino == self.inode
        except FileNotFoundError:
            return False

    def close(self) -> None:
        if self._still_ours():
            self.path.unlink()
        self.listener.close()

    def accept(self) -> None:
        conn, _ = self.listener.accept()
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        if uid != os.getuid():
            conn.close()
            return
        self.clients[conn] = None
        self.sel.register(conn, selectors.EVENT_READ, "client")

    def from_client(self, conn: socket.socket) -> None:
        pid = self.clients.get(conn)
        try:
            if pid is None:
                self.start(conn)
                return
            msg = conn.recv(2)
        except OSError:
            msg = b""
        if len(msg) == 2 and msg[:1] == b"S":
            self._signal(pid, msg[1])
        elif not msg:  # the client is gone: so must its run be
            self.drop(conn)
            if pid in self.children:
                self._signal(pid, signal.SIGTERM)
                self.kill_at[pid] = time.monotonic() + KILL_GRACE

    def start(self, conn: socket.socket) -> None:
        try:
            data, fds, _flags, _addr = socket.recv_fds(conn, 4, 3)
        except OSError:
            self.drop(conn)
            return
        try:
            if len(data) < 4 or len(fds) != 3:
                raise ConnectionError("malformed request")
            request = json.loads(_recv_exact(conn, struct.unpack("!I", data)[0]))
        except (ConnectionError, OSError, ValueError):
            for fd in fds:
                os.close(fd)
            self.drop(conn)
            return
        server_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            self.sel.close()
            self.listener.close()
            for other in list(self.clients):
                other.close()
            _child(request, fds, server_pid)
        for fd in fds:
            os.close(fd)
        self.clients[conn] = pid
        self.children[pid] = conn
        try:
            conn.sendall(b"A" + struct.pack("!i", pid))
        except OSError:
            pass  # the client died at once; its EOF is handled by the loop

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            rc = os.waitstatus_to_exitcode(status)
            rc = 128 - rc if rc < 0 else rc
            conn = self.children.pop(pid, None)
            self.kill_at.pop(pid, None)
            if conn is not None and conn in self.clients:
                try:
                    conn.sendall(b"R" + struct.pack("!i", rc))
                except OSError:
                    pass
                self.drop(conn)

    def drop(self, conn: socket.socket) -> None:
        pid = self.clients.pop(conn, None)
        if pid is not None and pid in self.children:
            self.children[pid] = None  # still reaped; nobody to tell
        try:
            self.sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()

    @staticmethod
    def _signal(pid: int, signum: int) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def serve(path: Path, idle: float = IDLE_SECONDS, preload: tuple[str, ...] = ()) -> int:
    """Import `preload` (the point of the server: the caller names what its runs import),
    then serve until idle. Exit status 0, or 1 if another server already owns the path."""
    for module in preload:
        importlib.import_module(module)
    prctl()  # resolved before any fork
    server = Server(path, idle)
    if not server.listen():
        return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve()
    except SystemExit:
        for pid in list(server.children):
            Server._signal(pid, signal.SIGTERM)
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(serve(Path(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else IDLE_SECONDS, tuple(sys.argv[3:])))
