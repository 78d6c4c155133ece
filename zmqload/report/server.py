"""A warm Spark for `zmqload report`: a local process that keeps a SparkSession between reports,
which send it their arguments over a Unix socket, since most of a small report's time is the JVM's
start. Started on demand, gone when idle, its memory bounded (docs/REPORT.md)."""

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

from ..contract.report_options import jvm_heap_size
from ..errors import ExitStatus, ZmqloadError

IDLE_S = float(os.environ.get("ZMQLOAD_REPORT_SERVER_IDLE_S", "600"))
START_TIMEOUT_S = 180.0  # a JVM start on a loaded 2-core machine took up to ~60 s
HEAP = "2g"
"""The server's JVM heap (spark.driver.memory; ZMQLOAD_REPORT_SERVER_HEAP to change it). Measured
(docs/REPORT.md): a report of 10M receive records peaked at 0.9 GB live in it; one of 100M ran
out of it (1.6 GB live and growing), and 1g was too small for 10M."""
MAX_RECEIVE_RECORDS = 10_000_000
"""Reports of more receive records than this run in-process (report.command), with the in-process
heap (4g by default), whose JVM ends with the report: the largest size measured to fit HEAP."""
HEAP_VARIABLE = "ZMQLOAD_REPORT_SERVER_HEAP"
JAVA_OPTIONS = (
    "-Xms64m",  # start small: the heap grows to what a report needs
    "-XX:+UseAdaptiveSizePolicyWithSystemGC",  # the full collection after a report resizes the heap
)
"""Options of the server's JVM besides spark.driver.* (given as SPARK_SUBMIT_OPTS, which the
Spark launcher puts on the driver's command line): Spark's session sets the collector
(analysis/session.py: Parallel GC), these how the heap is sized."""
IDLE_FREE_RATIO = (10, 20)
"""Min/MaxHeapFreeRatio (%) of the collection after a report: the heap shrinks to what is live
plus 10-20%. Only then: held during a report, they would shrink the heap at each of its full
collections and make it collect more often."""


def heap() -> str:
    """The server's heap: ZMQLOAD_REPORT_SERVER_HEAP, else HEAP; ConfigError naming the
    variable when it is not a heap size the JVM takes (a report says so before a server starts)."""
    return jvm_heap_size(os.environ.get(HEAP_VARIABLE) or HEAP, HEAP_VARIABLE)


def _user_dir() -> str:
    """Where this user's servers keep their state, one directory each."""
    return os.path.join(tempfile.gettempdir(), f"zmqload-report-{os.getuid()}")


def _state_dir() -> str:
    """Private (0700) directory of this user and this zmqload checkout: two checkouts never
    share a server, so a report always runs the code it was started from."""
    where = os.path.dirname(os.path.abspath(zmqload.__file__))
    key = hashlib.sha1(f"{where}\0{sys.executable}\0{_source_stamp(where)}".encode()).hexdigest()[
        :12
    ]
    path = os.path.join(_user_dir(), key)
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
    return _stop(os.path.join(_state_dir(), "server.pid"))


def stop_servers() -> int:
    """Stop every report server of this user (of any checkout or version of the sources,
    `zmqload report --stop-server`); how many were running."""
    try:
        keys = sorted(os.listdir(_user_dir()))
    except OSError:
        return 0
    return sum(_stop(os.path.join(_user_dir(), key, "server.pid")) for key in keys)


def _stop(pid_file: str) -> bool:
    """SIGTERM to the server of `pid_file` and wait (30 s, then SIGKILL) until it is gone."""
    try:
        with open(pid_file) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:  # not a pid reused by another process
            if b"zmqload.report.server" not in f.read():
                return False
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


def _tree_rss_kb(pid: int) -> int:
    """Resident memory of `pid` and every process under it (the server's JVM is its child), kB."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        with contextlib.suppress(OSError, ValueError):
            with open(f"/proc/{p}/status") as f:
                # a zombie (a server just ending) has no VmRSS line: it holds nothing
                total += next((int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:")), 0)
    return total


def _duration(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def status_line() -> str:
    """One line on this checkout's warm server, if one runs: how long it stays, the memory it
    holds, how to stop it (what `make demo` says last); '' when none runs."""
    try:
        with open(os.path.join(_state_dir(), "server.pid")) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"zmqload.report.server" not in f.read():
                return ""
    except (OSError, ValueError):
        return ""
    return (
        f"A report server stays warm for {_duration(IDLE_S)} after the last report (pid {pid}, "
        f"{_tree_rss_kb(pid) / 1024:,.0f} MB resident: its JVM and Python), so the next report "
        "starts without a JVM; stop it now: zmqload report --stop-server"
    )


def socket_path() -> str:
    return os.path.join(_state_dir(), "server.sock")


_dir_fds: dict[str, int] = {}


def _address(path: str) -> str:
    """`path` as a socket address: AF_UNIX takes at most 107 bytes, so a longer one (a deep
    TMPDIR) is reached through this process's descriptor of its directory, /proc/self/fd/N/name:
    the same file, in the same private directory."""
    if len(os.fsencode(path)) < 100:
        return path
    where, name = os.path.split(path)
    if where not in _dir_fds:
        _dir_fds[where] = os.open(where, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    return f"/proc/self/fd/{_dir_fds[where]}/{name}"


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
        s.connect(_address(socket_path()))
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
            os.remove(socket_path())  # left by a server that died
        log = open(os.path.join(_state_dir(), "server.log"), "ab")
        # The zmqload this report imported, wherever it came from (a checkout on the cwd too).
        here = os.path.dirname(os.path.dirname(os.path.abspath(zmqload.__file__)))
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p),
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "zmqload.report.server"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
            cwd="/",
        )
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
            heap()
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
            continue  # it died mid-report: a new one takes it
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
    _send(
        conn, {"status": status, "stdout": out.getvalue(), "stderr": err.getvalue(), "error": error}
    )


def _give_back(spark: Any) -> None:
    """A full collection after a report, with the heap's free ratios lowered for it
    (IDLE_FREE_RATIO, then HotSpot's defaults again): the heap shrinks to what is live (the
    warm session) and its pages go back to the system."""
    with contextlib.suppress(Exception):  # noqa: BLE001 - a JVM gone is the next report's to find
        jvm = spark.sparkContext._jvm
        hotspot = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
            jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
        )
        low, high = IDLE_FREE_RATIO
        hotspot.setVMOption("MaxHeapFreeRatio", str(high))
        hotspot.setVMOption("MinHeapFreeRatio", str(low))
        try:
            jvm.java.lang.System.gc()
        finally:
            hotspot.setVMOption("MinHeapFreeRatio", "0")  # Parallel GC's defaults
            hotspot.setVMOption("MaxHeapFreeRatio", "100")


def serve(idle_s: float = IDLE_S) -> None:
    """Accept reports one at a time until `idle_s` pass without one, then stop Spark."""
    from ..analysis.session import get_spark
    from .build import page_modules_loading

    # SIGTERM (a shutdown, `kill PID`) ends it like the idle timeout: socket, pid file and
    # the JVM's log removed, Spark stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join(
        filter(None, (os.environ.get("SPARK_SUBMIT_OPTS"), *JAVA_OPTIONS))
    )
    # Spark up before the first report's request is accepted; no job of its own: the first
    # report waits for this, and its own first job warms the JVM as well
    page = page_modules_loading()
    spark = get_spark(driver_memory=heap())
    page.join(START_TIMEOUT_S)  # the first report finds them imported
    path = socket_path()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(_address(path + ".new"))
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
                    pass  # the client went away; the next one is served
            _give_back(spark)
    finally:
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == ours:  # not a newer server's
                os.remove(path)
                os.remove(os.path.join(_state_dir(), "server.pid"))
        listener.close()
        spark.stop()


if __name__ == "__main__":
    serve()
