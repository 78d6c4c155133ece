"""A warm Spark for `zmqload report`: one local process keeps a SparkSession between reports.

Most of a small report's time is fixed cost (JVM start, session, the JIT warming up on the
first queries), paid again by every `report` process. The first report that may use the
embedded local Spark starts this server (a detached `python -m zmqload.report.server`); it
and later reports send their arguments over a Unix socket, the server makes the report in
its warm session (zmqload.report.build, as the report's own process would) and sends back
the exit status, the output and the error it ended with, which the report's process raises
again for its command line to say. Nothing to set up: the socket lives
in a private directory per user and per zmqload installation, the server exits after
`IDLE_S` seconds without a report (its JVM with it), a dead server is replaced by the next
report, and anything else (a cluster --master, --driver-memory, spark-submit, --no-server)
runs in-process as before.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import zmqload

from ..errors import ExitStatus, ZmqloadError

IDLE_S = float(os.environ.get("ZMQLOAD_REPORT_SERVER_IDLE_S", "600"))
START_TIMEOUT_S = 180.0       # a JVM start on a loaded 2-core machine took up to ~60 s


def _state_dir() -> str:
    """Private (0700) directory of this user and this zmqload checkout: two checkouts never
    share a server, so a report always runs the code it was started from."""
    where = os.path.dirname(os.path.abspath(zmqload.__file__))
    key = hashlib.sha1(f"{where}\0{sys.executable}\0{_source_stamp(where)}".encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"zmqload-report-{os.getuid()}", key)
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def _source_stamp(where: str) -> int:
    """The newest modification time of the package's Python files: an edited checkout gets a
    new server instead of one still running the code it was started with."""
    newest = 0
    for root, _dirs, files in os.walk(where):
        for name in files:
            if name.endswith(".py"):
                with contextlib.suppress(OSError):
                    newest = max(newest, os.stat(os.path.join(root, name)).st_mtime_ns)
    return newest


def stop_server() -> bool:
    """Stop this checkout's server, if one runs (SIGTERM: it removes its socket and stops
    its JVM); True if there was one. Test sessions call it so that none outlives them."""
    try:
        with open(os.path.join(_state_dir(), "server.pid")) as f:
            pid = int(f.read().strip())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return False
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return True
        time.sleep(0.1)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    return True


def socket_path() -> str:
    return os.path.join(_state_dir(), "server.sock")


def _send(sock: socket.socket, obj: Any) -> None:
    sock.sendall(json.dumps(obj).encode() + b"\n")


def _recv(sock: socket.socket) -> Any:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the report server closed the connection")
        data += chunk
    return json.loads(data)


class ServedError(ZmqloadError):
    """An error the report met in the server, raised again in the report's own process with
    its message and exit status: the command line says it there, as it says its own."""

    def __init__(self, message: str, exit_status: int):
        super().__init__(message)
        self.exit_status = ExitStatus(exit_status)


# ---- the client side: `zmqload report` -------------------------------------------------------

def _connect() -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(socket_path())
        return s
    except OSError:
        s.close()
        return None


def _start_server() -> None:
    """Start a detached server (own session, no terminal), unless another report is just
    starting one; wait until it accepts. The lock serialises concurrent first reports."""
    with open(os.path.join(_state_dir(), "start.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        probe = _connect()
        if probe is not None:
            probe.close()
            return
        with contextlib.suppress(FileNotFoundError):
            os.remove(socket_path())          # left by a server that died
        log = open(os.path.join(_state_dir(), "server.log"), "ab")
        # The zmqload this report imported, wherever it came from (a checkout on the cwd too).
        here = os.path.dirname(os.path.dirname(os.path.abspath(zmqload.__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p))
        proc = subprocess.Popen([sys.executable, "-m", "zmqload.report.server"], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, env=env, start_new_session=True, cwd="/")
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ConnectionError(f"the report server exited with status {proc.returncode}")
            probe = _connect()
            if probe is not None:
                probe.close()
                return
            time.sleep(0.1)
        proc.kill()
        raise ConnectionError(f"the report server did not start within {START_TIMEOUT_S:g} s")


def run_remote(args: dict[str, Any]) -> int | None:
    """The report (its parsed arguments) run by the warm server: its exit status, its output
    replayed here, and the error it ended with raised here (ServedError); None when no server
    could be reached or started (the caller then runs it in-process). Java is checked before
    a server is started, so bad Java is one line here."""
    request = {"args": args, "cwd": os.getcwd()}
    for attempt in range(2):
        sock = _connect()
        if sock is None:
            from ..analysis.javacheck import check_java
            check_java()
            try:
                _start_server()
            except (OSError, ConnectionError):
                return None
            continue
        try:
            with sock:
                _send(sock, request)
                reply = _recv(sock)
        except (OSError, ConnectionError, ValueError):
            if attempt:
                return None
            continue                            # it died mid-report: a new one takes it
        sys.stdout.write(reply["stdout"])
        sys.stderr.write(reply["stderr"])
        if reply.get("error") is not None:
            raise ServedError(reply["error"], reply["status"])
        return int(reply["status"])
    return None


# ---- the server side ---------------------------------------------------------------------

def _serve_one(conn: socket.socket) -> None:
    """One report made here, as the client's process would make it; the error it ends with
    goes back as its message and exit status (the client raises it: ServedError)."""
    import argparse

    from . import build

    request = _recv(conn)
    out, err = io.StringIO(), io.StringIO()
    error: str | None = None
    os.chdir(request["cwd"])
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            options = argparse.Namespace(**request["args"])
            status = int(build.make(options, build.prepare(options)))
        except ZmqloadError as e:
            status, error = int(e.exit_status), str(e)
        except BaseException as e:  # noqa: BLE001 - the client gets one line, the server lives on
            status, error = int(ExitStatus.FAILED), f"report server: {e.__class__.__name__}: {e}"
    os.chdir("/")
    _send(conn, {"status": status, "stdout": out.getvalue(), "stderr": err.getvalue(), "error": error})


def serve(idle_s: float = IDLE_S) -> None:
    """Accept reports one at a time until `idle_s` pass without one, then stop Spark."""
    from ..analysis.session import get_spark

    # SIGTERM (a shutdown, `kill PID`) ends it like the idle timeout: socket, pid file and
    # the JVM's log removed, Spark stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    spark = get_spark()        # warm before the first report's request is accepted
    spark.range(1).count()
    path = socket_path()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    os.replace(path + ".new", path)
    ours = os.stat(path).st_ino
    with open(os.path.join(_state_dir(), "server.pid"), "w") as f:
        f.write(str(os.getpid()))
    listener.listen(8)
    listener.settimeout(idle_s)
    try:
        while True:
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                break
            with conn:
                try:
                    _serve_one(conn)
                except (OSError, ConnectionError, ValueError):
                    pass        # the client went away; the next one is served
    finally:
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == ours:       # not a newer server's
                os.remove(path)
                os.remove(os.path.join(_state_dir(), "server.pid"))
        listener.close()
        spark.stop()


if __name__ == "__main__":
    serve()
