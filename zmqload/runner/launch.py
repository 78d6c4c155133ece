"""Starting workers: processes (tcp, ipc) or threads sharing one engine context (inproc)."""

from __future__ import annotations

import os
import signal
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Protocol

from .. import _engine
from ..contract.ids import WorkerId
from ..errors import RunError
from .workers import run_worker
from .spec import WorkerSpec

TOOL_ENV = "ZMQLOAD_WORKER_TOOL"
"""A command every worker process runs under (`valgrind --tool=callgrind ...`: bench/
profile_engine.py profiles the workers so); the controller's deadlines grow by TOOL_SLOWDOWN."""
TOOL_SLOWDOWN = 15.0
HURRY_S = 2.0
"""How long the workers still get to end once a signal came while they were ending."""
CLOSE_WAIT_S = 30.0
"""How long a worker told to close for its restart (--restart-mode close) may take to exit: its
records converted, its socket closed and its context terminated."""


def _worker_environment() -> dict[str, str]:
    """numpy's OpenBLAS threads would spin on a small machine and steal cycles from the
    send and receive loops (zmqload does no linear algebra); the worker must import this
    very zmqload, wherever the caller found it."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return env


def _process() -> subprocess.Popen[bytes]:
    """A worker process, waiting for its spec on standard input."""
    tool = shlex.split(os.environ.get(TOOL_ENV, ""))  # e.g. valgrind under bench/profile_engine.py
    return subprocess.Popen(
        [*tool, sys.executable, "-m", "zmqload.runner.entry"],
        stdin=subprocess.PIPE,
        env=_worker_environment(),
        close_fds=True,
    )


class WorkerLauncher(Protocol):
    """What the controller asks of whatever starts its workers: processes or threads here
    (Launcher), tasks of a Spark barrier stage (runner/spark_stage.py, --master)."""

    @property
    def workers(self) -> Mapping[WorkerId, Any]: ...
    def start(self, spec: WorkerSpec) -> None: ...
    def stand_by(self, worker: WorkerId) -> None: ...
    def all_started(self) -> None: ...
    def pids(self) -> dict[str, int]: ...
    def alive(self, worker: WorkerId) -> bool: ...
    def dead(self, workers: Iterable[WorkerId]) -> list[WorkerId]: ...
    def how_it_ended(self, worker: WorkerId) -> str: ...
    def finish(self, timeout: float, hurry: Callable[[], bool] | None = None) -> None: ...
    def end(self, worker: WorkerId, mode: str) -> None: ...
    def reap(self, worker: WorkerId) -> None: ...


class Launcher:
    def __init__(self, threads: bool, io_threads: int):
        self.threads = threads
        self.context = _engine.Context(io_threads) if threads else None
        self.workers: dict[WorkerId, threading.Thread | subprocess.Popen[bytes]] = {}
        self.standing_by: dict[WorkerId, list[subprocess.Popen[bytes]]] = {}

    def start(self, spec: WorkerSpec) -> None:
        worker: threading.Thread | subprocess.Popen[bytes]
        if self.threads:
            worker = threading.Thread(
                target=run_worker, args=(spec, self.context), name=spec.name, daemon=True
            )
            worker.start()
        else:
            waiting = self.standing_by.get(spec.worker) if spec.generation else None
            worker = waiting.pop(0) if waiting else _process()
            assert worker.stdin is not None  # stdin=PIPE
            worker.stdin.write(spec.with_pid().to_json().encode())
            worker.stdin.close()
        self.workers[spec.worker] = worker

    def stand_by(self, worker: WorkerId) -> None:
        """A process for `worker`'s next restart, started now: it imports zmqload and waits for its
        spec (runner/entry.py), so a restart's down time holds no Python start of its own on top of
        --restart-gap-ms (docs/DEPLOYS.md)."""
        self.standing_by.setdefault(worker, []).append(_process())

    def all_started(self) -> None:
        """Each worker began at its `start`."""

    def pids(self) -> dict[str, int]:
        """Worker name -> process id (worker processes only; inproc workers are threads)."""
        return {str(n): w.pid for n, w in self.workers.items() if isinstance(w, subprocess.Popen)}

    def alive(self, worker: WorkerId) -> bool:
        w = self.workers[worker]
        return w.is_alive() if isinstance(w, threading.Thread) else w.poll() is None

    def dead(self, workers: Iterable[WorkerId]) -> list[WorkerId]:
        """Workers among `workers` that ended (or crashed)."""
        return [w for w in workers if w in self.workers and not self.alive(w)]

    def how_it_ended(self, worker: WorkerId) -> str:
        """'exit code 3', 'killed by SIGKILL', or 'thread ended'."""
        w = self.workers[worker]
        if isinstance(w, threading.Thread):
            return "thread ended"
        code = w.returncode
        if code is None:
            return "still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    def end(self, worker: WorkerId, mode: str) -> None:
        """A worker's process ended as --restart-mode says: kill = SIGKILL, waited for; close = its
        own exit waited for (the controller told it to stop; killed after CLOSE_WAIT_S); freeze =
        SIGSTOP, its connections left open (`reap` ends it). Then its new process may be started in
        its place (`start` with the same worker)."""
        process = self.workers[worker]
        if not isinstance(process, subprocess.Popen):
            raise RunError(f"--restart: {worker} is a thread of this process, not a process")
        if mode == "freeze":
            process.send_signal(signal.SIGSTOP)
            return
        if mode == "close":
            try:
                process.wait(CLOSE_WAIT_S)
                return
            except subprocess.TimeoutExpired:
                pass
        self.reap(worker)

    def reap(self, worker: WorkerId) -> None:
        """SIGKILL (a stopped process too) and wait for it."""
        process = self.workers[worker]
        assert isinstance(process, subprocess.Popen)  # end() refused threads
        process.kill()
        process.wait()

    def finish(self, timeout: float, hurry: Callable[[], bool] | None = None) -> None:
        """The workers given `timeout` to end (HURRY_S once `hurry()` says a signal came meanwhile);
        a process still there is killed (it ignores SIGTERM: runner/entry.py)."""
        deadline = time.monotonic() + timeout
        hurried = False
        for worker in self.workers.values():
            while True:
                if not hurried and hurry is not None and hurry():
                    hurried, deadline = True, min(deadline, time.monotonic() + HURRY_S)
                left = max(0.0, deadline - time.monotonic())
                if isinstance(worker, threading.Thread):
                    worker.join(min(left, 0.1))
                    ended = not worker.is_alive()
                else:
                    try:
                        worker.wait(min(left, 0.1))
                    except subprocess.TimeoutExpired:
                        pass
                    ended = worker.poll() is not None
                if ended or left <= 0:
                    break
        for worker in self.workers.values():
            if isinstance(worker, subprocess.Popen) and worker.poll() is None:
                worker.kill()
                worker.wait()
        for unused in self.standing_by.values():  # a restart that never came: nothing to record
            for process in unused:
                process.kill()
                process.wait()
        self.standing_by.clear()
        if self.context is not None and not any(self.alive(w) for w in self.workers):
            self.context.term()
