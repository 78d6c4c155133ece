"""One run from a Workload to a RunResult and a run directory with run.json."""

from __future__ import annotations

import copy
import datetime as _dt
import errno
import os
import secrets
import shutil
import sys
from typing import Callable

from ..contract import patterns, uris
from ..contract.records import DISK_BYTES_PER_ROW
from ..contract.workload import UNPACED_RATE_GUESS, Slos, Workload
from ..contract import codec
from ..contract import run_record as rr
from ..store import record_files
from ..contract.curve import CurveKeys, Security
from ..contract import ids
from ..store import bitmaps
from ..contract.ids import Role
from ..contract.states import RunStatus
from ..errors import ConfigError, Interrupted, RunError, ZmqloadError
from .parquet_writer import WRITE_ERRNOS, free_bytes, held_spill_bytes, write_error
from ..measure.result import RunResult
from ..versions import clock_pair, host, versions
from .channel import ControlServer, new_endpoint
from .collect import build_result
from .controller import FINAL_TIMEOUT_S, Controller
from .curve import control_keys, run_keys
from .endpoints import EndpointPlan
from . import placement
from .launch import Launcher
from .metrics_export import MetricsExporter
from .spark_stage import StageLauncher, control_host
from .preflight import check_binds, check_output_dir, load_libzmq, preflight
from .resets import check_can_reset
from .run_file import finish_records, finish_unfigured, start_records, utc_now
from .remote_out import run_staged
from .salvage import remove_partial_parts, salvage_run
from . import signals
from .state import ProgressListener, RunState, WorkerFailed

SPILL_BYTES_PER_ROW = {"producer": 9, "consumer": 28}
"""Bytes per raw row waiting in _spill/ (docs/ARCHITECTURE.md: 9 per send, 28 per receive)."""


def reserve_bytes(w: Workload) -> int:
    """run.json's size is bounded: 20 missing ranges per stream, a row per worker."""
    return 256 * 1024 + 8 * 1024 * (w.producers + w.consumers)


def row_bytes_per_message(w: Workload) -> float:
    """What one message sent leaves in the run's Parquet records: its send row (zmqload's
    producers), a receive row per copy (zmqload's consumers), a reply row for a round trip
    (contract/records.DISK_BYTES_PER_ROW). A side that is the user's records nothing."""
    copies = w.consumers if w.fanout else 1
    rows = 0.0
    if w.role in ("both", "producer"):
        rows += DISK_BYTES_PER_ROW["sends"]
    if w.role in ("both", "consumer"):
        rows += copies * DISK_BYTES_PER_ROW["recvs"]
    if patterns.get(w.pattern).round_trip and w.role != "consumer":
        rows += DISK_BYTES_PER_ROW["replies"]
    return rows


def bytes_per_message(w: Workload) -> float:
    """What one message sent adds to the run's directory while it runs: its rows and a bit in
    the producer's and each copy's two maps (store/bitmaps.py, removed at the end)."""
    copies = w.consumers if w.fanout else 1
    return row_bytes_per_message(w) + (1 + 2 * copies) / 8


RUN_FILES_BYTES = 16 * 1024
"""What a run keeps beside its rows: run.json, the samples and each part's footer (measured: 12
to 14 KB in runs of 100 to 2,500 messages: a REP service's probe, push-pull)."""


def kept_bytes(w: Workload, messages_per_producer: int | None = None) -> int:
    """What a run keeps once it ended (the figure a run, sweep or search announces; the disk's
    peak need, which the checks use, is `expected_bytes`): every message's rows and the run's
    files. `messages_per_producer`: what each producer will really send, where it is not
    --count or --rate x --duration (an unpaced run's guess, a service's pace)."""
    n = w.messages_per_producer if messages_per_producer is None else messages_per_producer
    return int(w.producers * n * row_bytes_per_message(w)) + RUN_FILES_BYTES


def expected_bytes(w: Workload) -> int | None:
    """The most a run will have on disk at once, or None when its length is unbounded (unpaced
    with --duration): bytes_per_message of every send, and the raw chunks waiting in _spill/.
    A paced run's converter keeps up: what it holds while held (prepared before the loop, up to
    parquet_writer.HOLD_BACKLOG_BYTES, at least one chunk). Beside unpaced loops the converter (nice 19)
    may get almost no CPU until they end (measured: 7 GB of raw chunks waiting 2 minutes into a
    400M-message run on the shared 2-core machine): every raw row may wait at once."""
    from ..contract.wire import MAX_SEQ

    per_producer = w.messages_per_producer
    if per_producer >= MAX_SEQ:
        return None

    def held(rows: int, row_bytes: int) -> int:
        waiting = (
            rows * row_bytes if not w.rate else held_spill_bytes(rows, row_bytes, w.chunk_rows)
        )
        return max(waiting, w.chunk_rows * row_bytes)

    spill = w.producers * held(per_producer, SPILL_BYTES_PER_ROW["producer"]) + w.consumers * held(
        w.expected_receives_per_consumer, SPILL_BYTES_PER_ROW["consumer"]
    )
    return int(w.producers * per_producer * bytes_per_message(w)) + spill + reserve_bytes(w)


def expected_write(w: Workload) -> tuple[int, bool]:
    """(bytes the run is expected to write, whether its length was guessed): expected_bytes, or
    for an unpaced run only --duration bounds, what a run paced at UNPACED_RATE_GUESS msg/s per
    producer writes (a guess: a warning, never a refusal)."""
    n = expected_bytes(w)
    if n is not None:
        return n, False
    guess = copy.copy(w)  # not replace(): a rate is not an option of every run (--role consumer)
    guess.rate = UNPACED_RATE_GUESS
    return expected_bytes(guess) or 0, True


def free_space(directory: str) -> int:
    """Bytes free where `directory` is (or would be: its nearest existing parent); -1 unknown."""
    path = os.path.abspath(directory)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return free_bytes(path)


def check_space(w: Workload, staging_for: str | None = None) -> str | None:
    """Before anything is made: a run expected to write more than --out (or the staging directory
    of `staging_for`, a URI's: runner/remote_out.py) has free is refused (one line, naming the
    option); one whose length is a guess (unpaced --duration) gets a warning line instead
    (returned). A disk that fills anyway ends the run `failed`, what was recorded kept readable
    (docs/RELIABILITY.md)."""
    (needed, guessed), free = expected_write(w), free_space(w.out)
    if free < 0 or free >= needed:
        return None
    where = (
        w.out if staging_for is None else f"{w.out} (staging for {staging_for}: $TMPDIR, else /tmp)"
    )
    said = (
        f"{where}: {free:,} bytes free, the run is expected to write about {needed:,} "
        f"(~{bytes_per_message(w):.0f} bytes per message kept"
        + (
            ", and every raw row may wait to be converted while unpaced loops run"
            if not w.rate
            else ""
        )
    )
    if not guessed:
        raise ConfigError(
            "--out",
            f"{said}); accepted: a directory with room for it, or fewer messages "
            "(--count, --duration x --rate)",
        )
    return f"{said} at a guessed {UNPACED_RATE_GUESS:,} msg/s per producer); it fails if the disk fills"


def new_run_id(w: Workload) -> str:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return w.run_name or f"{stamp}-{w.pattern}-{w.transport}-{secrets.token_hex(2)}"


def _make_run_dir(w: Workload) -> tuple[str, str]:
    check_output_dir(w.out)
    run_id = new_run_id(w)
    run_dir = os.path.join(w.out, rr.run_dir_name(run_id, w.role))
    try:
        os.makedirs(run_dir)
    except FileExistsError:
        raise ConfigError("--run-name", f"{run_dir} already exists; accepted: a new run name")
    except OSError as exc:
        raise ConfigError(
            "--out", f"cannot create {run_dir} ({exc.strerror}); accepted: a writable directory"
        )
    return run_id, run_dir


def run(
    workload: Workload, progress: ProgressListener | None = None, slos: Slos | None = None
) -> RunResult:
    """Carry out one run (`slos`: the SLOs it will be judged by, kept in its record). Raises
    ConfigError for bad options (before anything starts), RunError when the run fails (or its
    records could not be copied to an --out URI), KeyboardInterrupt after an interrupted run
    was recorded (Ctrl-C or SIGTERM, in any phase: runner/signals.py)."""
    w = preflight(workload.validate())
    exporter = MetricsExporter.open(w, progress)  # --metrics: listening from here
    if exporter is None:
        return _run_handled(w, progress, slos)
    result = None
    try:
        result = _run_handled(w, exporter, slos)
    except RunError as exc:  # a failed run's figures, when it has them, are served too
        result = getattr(exc, "result", None)
        raise
    finally:
        exporter.finish(result)  # run.json's totals served for --metrics-linger, then closed
    return result


def _run_handled(w: Workload, progress: ProgressListener | None, slos: Slos | None) -> RunResult:
    with signals.handled():
        if uris.is_uri(w.out):  # recorded here, then copied there (runner/remote_out.py)
            return run_staged(
                w,
                lambda staged, uri, check_target: _run_here(
                    staged, progress, slos, uri, check_target
                ),
            )
        return _run_here(w, progress, slos)


def _run_here(
    w: Workload,
    progress: ProgressListener | None,
    slos: Slos | None,
    out_uri: str | None = None,
    check_target: Callable[[], None] | None = None,
) -> RunResult:
    """The run, its directory under w.out; `out_uri`: the URI it will be copied to (run.json's
    workload.out names it without its secrets; a placed run's tasks copy their records there:
    runner/task_out.py), `check_target` the URI's check, the last before the run directory is made.
    Signals (runner/signals.py): raised in the checks before the run directory, the workers' phases
    and the figures; held everywhere else, so every way out writes the last run.json."""
    sigs = signals.current()
    with signals.raised():  # nothing made yet: a signal ends the command, nothing left behind
        staging_for = None if out_uri is None else uris.without_secrets(out_uri)
        check_can_reset(w)
        lib = load_libzmq(w)  # inproc: this process runs it from here (its workers are threads)
        curve = run_keys(w, lib)  # before the run directory: libzmq without CURVE is bad input
        if (
            w.master is not None
        ):  # the workers bind on their hosts' addresses, the controller at its own
            at = control_host(w.master)
            check_binds(
                [("--master", f"tcp://{f'[{at}]' if ':' in at else at}:*")],
                curve is not None,
                w.insecure,
            )
        keys = control_keys(w)
        warning = check_space(w, staging_for)
        if check_target is not None:
            check_target()
    with signals.held():
        run_id, run_dir = _make_run_dir(w)
        recorded = w
        if staging_for is not None:
            recorded = copy.copy(w)
            recorded.out = staging_for
        record = rr.RunRecord(
            run_id=run_id,
            workload=recorded,
            slos=slos,
            security=Security.NULL if curve is None else Security.CURVE,
            pattern=rr.PatternFacts(fanout=w.fanout, binder=Role(patterns.get(w.pattern).binder)),
            versions=codec.convert(versions(lib.version), rr.Versions),
            libzmq=lib,
            host=codec.convert(host(), rr.Host),
            clock=codec.convert(clock_pair(), rr.ClockPair),
            started_at=utc_now(),
        )
        if warning:
            record.warnings.append(warning)
            print(f"zmqload: warning: {warning}", file=sys.stderr)
        start_records(run_dir, record, reserve_bytes(w))
        # run.json says `running` from here: every way out below writes the last one
        return _recorded_run(w, progress, out_uri, curve, keys, run_id, run_dir, record, sigs)


def _recorded_run(
    w: Workload,
    progress: ProgressListener | None,
    out_uri: str | None,
    curve: CurveKeys | None,
    keys: CurveKeys | None,
    run_id: str,
    run_dir: str,
    record: rr.RunRecord,
    sigs: signals.RunSignals,
) -> RunResult:
    """The run once its first run.json is written (signals held, but where raised below)."""
    launcher: Launcher | StageLauncher | None = None
    server: ControlServer | None = None
    controller: Controller | None = None
    control_dir: str | None = None
    status, error = RunStatus.COMPLETE, None
    pending: BaseException | None = None  # raised once the run is recorded
    try:
        with (
            signals.raised()
        ):  # the workers' phases (one that came since the directory was made: at once)
            if (
                w.master is not None
            ):  # the workers as one Spark barrier stage (runner/spark_stage.py)
                control_endpoint, control_dir = new_endpoint(control_host(w.master))
                upload_to = (
                    None if out_uri is None else uris.join(out_uri, os.path.basename(run_dir))
                )
                launcher = StageLauncher(w.master, w.placement, keys, upload_to)
            else:
                control_endpoint, control_dir = new_endpoint()
                launcher = Launcher(threads=(w.transport == "inproc"), io_threads=w.io_threads)
            server = ControlServer(control_endpoint, keys)
            controller = Controller(
                w, run_dir, run_id, server, launcher, control_dir, progress, curve
            )
            _on_start(controller, launcher, record, run_dir, control_dir)
            controller.execute()
    except KeyboardInterrupt as exc:
        status, pending = RunStatus.INTERRUPTED, exc
    except WorkerFailed as exc:
        assert controller is not None
        pending = _worker_error(w, exc, started=controller.state.t0_ns != 0)
        status, error = RunStatus.FAILED, str(pending)
    except ZmqloadError as exc:  # RunError; ConfigError: an endpoint that could not be used
        status, error, pending = RunStatus.FAILED, str(exc), exc
    except Exception as exc:  # a fault of zmqload's own: recorded, then raised as it is
        status, error, pending = RunStatus.FAILED, f"{type(exc).__name__}: {exc}", exc

    # Stopping the workers and their last records: bounded (controller.INTERRUPT_GRACE_S, then
    # launch.HURRY_S once a signal came meanwhile), held; a signal in it skips the figures.
    try:
        if status is not RunStatus.COMPLETE and controller is not None:
            signals.pause_in("stopping")
            controller.interrupt()
    finally:
        if progress is not None:
            progress.stop()
        if launcher is not None:
            launcher.finish(
                timeout=2.0 if status is not RunStatus.COMPLETE else FINAL_TIMEOUT_S,
                hurry=lambda: sigs.pending > 0,
            )
        if controller is not None:
            controller.pump_last()  # finals that came while the workers ended
        if server is not None:
            server.close()
        if control_dir is not None:
            shutil.rmtree(control_dir, ignore_errors=True)

    state = (
        controller.state
        if controller is not None
        else RunState(ids.producers(w.producer_workers), ids.consumers(w.consumer_workers))
    )
    if isinstance(launcher, StageLauncher):
        record.placement = placed(launcher)
    if isinstance(pending, ConfigError):
        # an endpoint the checks before the run could not judge (a port taken since, a path libzmq
        # refused): bad input, and nothing was recorded yet, so nothing is left behind
        shutil.rmtree(run_dir, ignore_errors=True)
        if isinstance(launcher, StageLauncher):
            launcher.discard_records()
        raise pending
    if isinstance(launcher, StageLauncher):  # an --out URI: the tasks' records copied here
        lost = launcher.take_records(
            run_dir, state.final
        )  # (the copy up removes there what is not here)
        if lost:
            error = f"{error}; {lost}" if error else lost
            if status is RunStatus.COMPLETE:
                status, pending = RunStatus.FAILED, RunError(lost)
            elif isinstance(pending, RunError):
                pending = RunError(error)
    if controller is not None:
        record.topology = controller.topology()

    # The figures from the records, raised: a signal stops them (one that came while the workers
    # stopped skips them), and run.json is written without them; so it is when they fail.
    result, failure = None, None
    cut = "stopped by a signal while the workers ended: the figures were not computed (run.json has none)"
    if not sigs.take():
        cut = "stopped by a signal while the figures were computed: run.json has none"
        try:
            with signals.raised():
                signals.pause_in("reconcile")
                note = salvage_records(state, w, run_dir, record)
                if note and status is not RunStatus.COMPLETE:
                    error = f"{error}; {note}" if error else note
                    if isinstance(pending, RunError):
                        pending = RunError(f"{pending}; {note}")
                result = build_result(state, w, run_id, run_dir, status, record.versions)
        except KeyboardInterrupt:
            result = None
        except Exception as exc:  # recorded `failed`, then raised as it is
            result, failure = None, exc
    if result is None:
        if failure is not None:
            said = (
                str(failure)
                if isinstance(failure, ZmqloadError)
                else f"{type(failure).__name__}: {failure}"
            )
            cut = f"the figures could not be computed ({said}): run.json has none"
            status, pending = RunStatus.FAILED, failure
        elif status is RunStatus.COMPLETE:
            status, pending = RunStatus.INTERRUPTED, KeyboardInterrupt()
        cut = f"{cut}; {forget_figures(run_dir, state)}"
        error = f"{error}; {cut}" if error else cut
        if isinstance(pending, RunError):
            pending = RunError(error)
        finish_unfigured(run_dir, record, state, w, status, error)
        assert pending is not None
        raise pending
    if record.placement is not None:
        result.clock_uncertainty_ns = record.placement.latency_uncertainty_ns()
    note_device(controller.plan if controller is not None else None, state, result)
    result.topology = record.topology
    finish_records(run_dir, record, state, w, result, error)
    write_hdr_files(run_dir, record)
    if pending is not None:
        if isinstance(pending, RunError):
            pending.result = result  # type: ignore[attr-defined]  # the figures of the failed run
        raise pending
    if out_uri is None and sigs.take():  # it came once the figures were made: the command ends here
        raise Interrupted("what was recorded is kept", status=result.status)
    return result  # (with a URI, one that came is raised as the copy begins: runner/remote_out.py)


def write_hdr_files(run_dir: str, record: rr.RunRecord) -> None:
    """The latency as HdrHistogram files in run_dir/hdr/ (measure/hdr_export.py); a disk that
    refuses them leaves the run as it is, run.json saying so in its warnings."""
    from ..measure.hdr_export import write_exports

    try:
        write_exports(run_dir, record)
    except OSError as exc:
        record.warnings.append(f"HdrHistogram files (hdr/) not written: {exc}")
        record_files.write_run(run_dir, record)


def _on_start(
    controller: Controller,
    launcher: Launcher | StageLauncher,
    record: rr.RunRecord,
    run_dir: str,
    control_dir: str,
) -> None:
    """run.json rewritten when the schedule begins and as each connection reset or restart is made."""
    w = controller.w

    def started(t0_ns: int) -> None:
        # run.json says when the schedule began and which process is which worker, so an
        # operator (and `zmqload repair` after a dead controller) can find them
        record.schedule = rr.Schedule(t0_ns=t0_ns, rate_per_producer=w.rate, fanout=w.fanout)
        record.controller_pid = os.getpid()
        record.worker_pids = {str(name): pid for name, pid in launcher.pids().items()}
        record.cpu_placement = placement.plan(w)  # {} = the scheduler's
        if isinstance(launcher, StageLauncher):  # where each task runs, known before the start
            record.placement = placed(launcher)
        record.control_dir = control_dir  # private control and ipc socket files, removed at the end
        record.topology = controller.topology()
        try:
            with signals.held(then_raise=True):
                record_files.write_run(run_dir, record)
        except OSError as exc:  # a run error: the run ends failed, in the room kept for run.json
            raise write_error(exc, run_dir, len(codec.encode(record))) from None

    controller.on_start = started

    def reset_made() -> None:
        # run.json holds each reset as it is made, so `zmqload repair` places its losses as the run would
        record.resets = list(controller.state.resets)
        try:
            with signals.held(then_raise=True):
                record_files.write_run(run_dir, record)
        except OSError as exc:
            raise write_error(exc, run_dir, len(codec.encode(record))) from None

    controller.on_reset = reset_made

    def restart_made() -> None:
        # run.json holds each restart as it is made, with the records' names of the new process
        record.restarts = list(controller.state.restarts)
        record.worker_pids = {str(name): pid for name, pid in launcher.pids().items()}
        try:
            with signals.held(then_raise=True):
                record_files.write_run(run_dir, record)
        except OSError as exc:
            raise write_error(exc, run_dir, len(codec.encode(record))) from None

    controller.on_restart = restart_made


def forget_figures(run_dir: str, state: RunState) -> str:
    """What computing the figures left when a signal stopped it: a part half written (hidden, never
    read) and the maps removed; the raw rows not yet converted stay in _spill/. Says what is kept."""
    for worker in state.everyone:
        for name in state.names(worker):
            remove_partial_parts(run_dir, name)
    shutil.rmtree(os.path.join(run_dir, bitmaps.MAPS_DIR), ignore_errors=True)
    spill = os.path.join(run_dir, "_spill")
    if os.path.isdir(spill) and any(files for _, _, files in os.walk(spill)):
        return "the Parquet records are kept, and the raw rows not yet converted are in _spill/"
    return "the Parquet records are kept"


def placed(launcher: StageLauncher) -> rr.Placement:
    """run.json's `placement`: where each task of the stage told the driver it runs."""
    return rr.Placement(
        master=launcher.master,
        workers=[codec.convert(where, rr.PlacedWorker) for where in launcher.placed],
    )


def salvage_records(state: RunState, w: Workload, run_dir: str, record: rr.RunRecord) -> str:
    """Finals of workers that died or left records unconverted, rebuilt from their records
    (runner/salvage.py). Returns '' or what could not be kept, for the error line."""
    drain_started = {c: state.drain_sent_ns for c in state.draining} if state.drain_sent_ns else {}
    rebuilt, dead, salvage = salvage_run(
        run_dir,
        w,
        state.t0_ns,
        state.producers,
        state.consumers,
        state.final,
        drain_started,
        state.incarnations,
        state.first_seqs(),
    )
    state.final.update(rebuilt)
    state.dead = dead | {x for x in state.proxies if x not in state.final}  # a proxy has no records
    if rebuilt:
        record.salvaged = salvage.record(rebuilt, dead)
    return salvage.note()


def note_device(plan: EndpointPlan | None, state: RunState, result: RunResult) -> None:
    """With a device of the user's in the path, the drain's record says so beside the tail rule:
    the fates stay zmqload's (dropped is dropped), but a drop may have happened inside the device.
    `plan` None: the run ended before its controller was made."""
    device = plan is not None and plan.device
    why = state.drain.tail_placement_why if state.drain is not None else ""
    if device and why:
        why = (
            f"{why}; a device of yours was in the path: a message missing may have been dropped inside it "
            "(zmqload does not see it)"
        )
    for drain in (state.drain, result.drain):  # --json says what run.json says, device or not
        if drain is None:
            continue
        drain.device_in_path = bool(device)
        if why:
            drain.tail_placement_why = why


def _worker_error(w: Workload, exc: WorkerFailed, started: bool) -> Exception:
    """Turn a worker's failure into the user's terms (an endpoint that cannot be bound or connected
    to, found before the run started, is bad input)."""
    message = exc.failure.message
    if exc.failure.errno in WRITE_ERRNOS or started:
        return RunError(f"worker {exc.worker} failed: {message}")
    option = _endpoint_option(w, exc.worker.role)
    if exc.failure.errno == errno.EADDRINUSE or "Address already in use" in message:
        return ConfigError(
            option,
            f"address already in use ({message.split(': ', 1)[-1]}); accepted: a free address",
        )
    if exc.failure.errno in (
        errno.ENOENT,
        errno.EACCES,
        errno.EINVAL,
        errno.ENAMETOOLONG,
        errno.EADDRNOTAVAIL,
    ) and (w.endpoint or w.topology.given):
        return ConfigError(
            option,
            f"cannot use it ({message}); accepted: an endpoint libzmq can "
            f"{'bind' if option.endswith('bind') or option == '--endpoint' else 'connect to'}",
        )
    return RunError(f"worker {exc.worker} failed: {message}")


def _endpoint_option(w: Workload, role: Role) -> str:
    """The option that named where a worker of `role` binds or connects."""
    topology = w.topology
    if topology.given:
        side = topology.side(role.value)
        if side.given:
            return side.flag
        return (topology.producers if topology.binder == "producer" else topology.consumers).flag
    return "--endpoint" if w.endpoint else "--port"
