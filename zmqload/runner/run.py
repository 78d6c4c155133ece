"""One run from a Workload to a RunResult and a run directory with run.json."""
from __future__ import annotations

import datetime as _dt
import errno
import os
import secrets
import shutil
import signal
import threading
from types import FrameType
from typing import Any, Callable, NoReturn

from .. import patterns
from ..config import Workload, check_output_dir
from ..errors import ConfigError, RunError
from ..contract.records import SCHEMA_VERSION
from ..recorder import write_json_atomic
from ..result import RunResult
from ..versions import clock_pair, host, versions
from .channel import ControlServer, new_endpoint
from .collect import build_result
from .controller import FINAL_TIMEOUT_S, Controller
from .launch import Launcher
from .state import ProgressListener, WorkerFailed


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def new_run_id(w: Workload) -> str:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return w.run_name or f"{stamp}-{w.pattern}-{w.transport}-{secrets.token_hex(2)}"


def sigterm_as_interrupt() -> Callable[[int, FrameType | None], Any] | int | None:
    """Treat SIGTERM like Ctrl-C while a run is in progress (main thread only).
    Returns the previous handler for the caller to restore, or None off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: FrameType | None) -> NoReturn:
        raise KeyboardInterrupt
    return signal.signal(signal.SIGTERM, handler)


def _make_run_dir(w: Workload) -> tuple[str, str]:
    check_output_dir(w.out)
    run_id = new_run_id(w)
    run_dir = os.path.join(w.out, f"run={run_id}")
    try:
        os.makedirs(run_dir)
    except FileExistsError:
        raise ConfigError("--run-name", f"{run_dir} already exists; accepted: a new run name")
    except OSError as exc:
        raise ConfigError("--out", f"cannot create {run_dir} ({exc.strerror}); accepted: a writable directory")
    return run_id, run_dir


def run(workload: Workload, progress: ProgressListener | None = None) -> RunResult:
    """Carry out one run. Raises ConfigError for bad options (before anything starts),
    RunError when the run fails, KeyboardInterrupt after an interrupted run was recorded."""
    w = workload.validate()
    run_id, run_dir = _make_run_dir(w)
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "run_id": run_id, "status": "running", "error": None,
        "workload": w.to_dict(), "pattern": {"fanout": w.fanout, "binder": patterns.get(w.pattern).binder},
        "versions": versions(), "host": host(), "clock": clock_pair(), "started_at": _utc_now(),
    }
    meta_path = os.path.join(run_dir, "run.json")
    write_json_atomic(meta_path, meta)

    control_endpoint, control_dir = new_endpoint()
    server = ControlServer(control_endpoint)
    launcher = Launcher(threads=(w.transport == "inproc"), io_threads=w.io_threads)
    controller = Controller(w, run_dir, run_id, server, launcher, control_dir, progress)
    previous_sigterm = sigterm_as_interrupt()
    status, error = "complete", None
    pending: BaseException | None = None       # raised once the run is recorded
    try:
        controller.execute()
    except KeyboardInterrupt as exc:
        status, pending = "interrupted", exc
        controller.interrupt()
    except WorkerFailed as exc:
        status, error = "failed", exc.failure.message
        controller.interrupt()
        pending = _worker_error(w, exc)
    except RunError as exc:
        status, error, pending = "failed", str(exc), exc
        controller.interrupt()
    finally:
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
        if progress is not None:
            progress.stop()
        launcher.finish(timeout=2.0 if status != "complete" else FINAL_TIMEOUT_S)
        server.close()
        shutil.rmtree(control_dir, ignore_errors=True)

    state = controller.state
    result = build_result(state, w, run_id, run_dir, status, meta["versions"])
    summary = result.summary()
    meta.update({"status": status, "error": error, "finished_at": _utc_now(),
                 "schedule": {"t0_ns": state.t0_ns, "rate_per_producer": w.rate, "fanout": w.fanout},
                 "drain": state.drain, "producers": result.producers, "consumers": result.consumers,
                 "counters": {k: summary[k] for k in RunResult.COUNTERS},
                 "streams": result.streams,
                 "summary": {k: summary[k] for k in RunResult.FIGURES}})
    write_json_atomic(meta_path, meta)
    if pending is not None:
        raise pending
    return result


def _worker_error(w: Workload, exc: WorkerFailed) -> Exception:
    """Turn a worker's failure into the user's terms (a bind conflict is bad input)."""
    message = exc.failure.message
    if exc.failure.errno == errno.EADDRINUSE or "Address already in use" in message:
        option = "--endpoint" if w.endpoint else "--port"
        return ConfigError(option, f"address already in use ({message.split(': ', 1)[-1]}); accepted: a free address")
    if exc.failure.errno in (errno.ENOENT, errno.EACCES, errno.EINVAL) and w.endpoint:
        return ConfigError("--endpoint", f"cannot use {w.endpoint!r} ({message}); accepted: a bindable endpoint")
    return RunError(f"worker {exc.worker} failed: {message}")
