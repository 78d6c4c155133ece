"""Run one worker of any role, reporting a failure as its last control message."""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import traceback

from .. import _engine, libzmq
from ..contract import control
from ..contract.ids import Role
from ..contract.run_record import Libzmq
from ..errors import RunError, ZmqloadError
from .channel import ControlClient
from .spec import WorkerSpec


def load_runs_libzmq(lib: Libzmq) -> None:
    """Loads the run's libzmq, found here as the controller found it there (--libzmq pyzmq on an
    executor is that executor's pyzmq's): RunError in one line unless it is the same file's bytes."""
    try:
        here = libzmq.describe(lib.choice)
        if here.sha256 != lib.sha256:
            raise RunError(
                f"--libzmq {lib.choice} here is {here.file} (libzmq {here.version}, sha256 "
                f"{here.sha256[:12]}), not the run's {lib.file} (libzmq {lib.version}, sha256 "
                f"{lib.sha256[:12]}): install the same one on every host, or give its path"
            )
        libzmq.use(here)
    except ValueError as exc:
        raise RunError(f"--libzmq {lib.choice}: {exc}") from None


def run_worker(spec: WorkerSpec, context: _engine.Context | None = None) -> None:
    from .consumer import Consumer
    from .producer import Producer
    from .proxy import ProxyWorker

    body = {Role.PRODUCER: Producer, Role.CONSUMER: Consumer, Role.PROXY: ProxyWorker}[spec.role]
    ctl = ControlClient(spec.control, spec.worker, spec.control_curve)
    # a worker process beside its controller (not an inproc thread of it, nor a Spark task of a driver
    # elsewhere, whose control channel is tcp and which has no control directory to leave markers in)
    process = context is None and control_dir(spec) is not None
    if process:
        _touch(_marker(spec))
    worker = None
    try:
        if spec.libzmq is not None:
            load_runs_libzmq(spec.libzmq)
        worker = body(spec, ctl, context)
        worker.run()
    except BaseException as exc:
        # zmqload's own errors are already the one line a user reads (a full disk names itself)
        message = str(exc) if isinstance(exc, ZmqloadError) else f"{type(exc).__name__}: {exc}"
        ctl.send(control.Failed(message, getattr(exc, "errno", None), traceback.format_exc()))
    finally:
        if worker is not None:
            worker.close_sockets()
        orphan = process and not spec.controller_alive()
        ctl.close(linger_ms=0 if orphan else None)  # nobody would ever read it
        if process:
            leave(spec, orphan)


def control_dir(spec: WorkerSpec) -> str | None:
    """The run's private directory of control and ipc socket files (runner/channel.py); None for a
    control channel over tcp (a placed run's task: the directory is on the driver's host)."""
    scheme, address = spec.control.split("://", 1)
    return os.path.dirname(address) if scheme == "ipc" else None


def _marker(spec: WorkerSpec) -> str:
    return os.path.join(control_dir(spec) or "", f"{spec.name}.alive")


def _touch(path: str) -> None:
    try:
        open(path, "a").close()
    except OSError:
        pass  # the controller is gone already; the watchdog ends this worker


def leave(spec: WorkerSpec, orphan: bool) -> None:
    """A worker process ends. Without its controller, the last worker to end finishes the
    run from its records (run.json marked failed) and removes the private control files;
    each worker's marker file says who is still there (under a lock: exactly one is last)."""
    directory = control_dir(spec)
    if directory is None:
        return
    try:
        lock = open(os.path.join(directory, ".lock"), "a")
    except OSError:
        return  # the controller removed the directory: it finishes the run
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            os.remove(_marker(spec))
        except FileNotFoundError:
            pass
        if not orphan or any(name.endswith(".alive") for name in os.listdir(directory)):
            return
        try:
            from .repair import repair_run

            repair_run(
                spec.run_dir,
                f"the controller (pid {spec.controller_pid}) died; the workers stopped "
                f"by themselves and {spec.name}, the last, rebuilt the figures from the records",
                workers_died=False,
            )
        except Exception as exc:  # `zmqload repair` can still do it; the files below go in any case
            print(
                f"zmqload worker {spec.name}: cannot finish {spec.run_dir} ({exc}); "
                f"run: zmqload repair {spec.run_dir}",
                file=sys.stderr,
            )
        finally:
            shutil.rmtree(directory, ignore_errors=True)
