"""A run's record on disk as the run goes: the first run.json (status running) with the room
kept for the last one, and the last run.json (status, counters, summary) written in that room.
The runner (runner/run.py) and `zmqload repair` (runner/repair.py) both finish a run here."""

from __future__ import annotations

import datetime as _dt
import os
import shutil

from ..contract.workload import Workload
from ..contract import codec
from ..contract import run_record as rr
from ..store import record_files
from ..contract.states import RunStatus
from .parquet_writer import write_error
from ..measure.result import RunResult
from .state import RunState

RESERVE_NAME = ".run.json.reserve"
"""Room kept for the final run.json from the start, released just before it is written,
so a run that fills its disk can still record how it ended."""


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def start_records(run_dir: str, record: rr.RunRecord, reserve: int) -> None:
    """The first run.json (status running) and the room kept for the last one; on a disk
    too full for either nothing starts (and the empty run directory goes)."""
    try:
        record_files.write_run(run_dir, record)
        with open(os.path.join(run_dir, RESERVE_NAME), "wb") as f:
            f.write(b"\0" * reserve)  # written zeros, not a sparse hole: the room is taken now
    except OSError as exc:
        error = write_error(exc, run_dir, reserve)
        shutil.rmtree(run_dir, ignore_errors=True)
        raise error from None


def finish_unfigured(
    run_dir: str, record: rr.RunRecord, state: RunState, w: Workload, status: RunStatus, error: str
) -> None:
    """The last run.json of a run whose figures were not computed (a signal stopped them): its
    status and why, how far it got, no counters (null, as while it ran)."""
    record.status, record.error, record.finished_at = status, error, utc_now()
    record.schedule = (
        rr.Schedule(t0_ns=state.t0_ns, rate_per_producer=w.rate, fanout=w.fanout)
        if state.t0_ns
        else record.schedule
    )
    record.drain = state.drain
    record.resets = list(state.resets)
    record.restarts = list(state.restarts)
    _write_last(run_dir, record)


def finish_records(
    run_dir: str,
    record: rr.RunRecord,
    state: RunState,
    w: Workload,
    result: RunResult,
    error: str | None,
) -> None:
    """The last run.json: status, counters and summary, written in the room kept for it."""
    summary = result.summary()
    record.status, record.error, record.finished_at = RunStatus(result.status), error, utc_now()
    record.schedule = rr.Schedule(t0_ns=state.t0_ns, rate_per_producer=w.rate, fanout=w.fanout)
    record.drain = state.drain
    record.resets = list(state.resets)
    record.restarts = codec.convert(result.restarts, list[rr.Restart])  # with what each cost
    record.producers, record.consumers = list(result.producers), list(result.consumers)
    record.counters = codec.convert({k: summary[k] for k in RunResult.COUNTERS}, rr.Counters)
    record.streams = codec.convert(result.streams, list[rr.StreamEntry])
    record.topics = codec.convert(result.topics, list[rr.TopicEntry])
    record.summary = codec.convert({k: summary[k] for k in RunResult.FIGURES}, rr.Summary)
    _write_last(run_dir, record)


def _write_last(run_dir: str, record: rr.RunRecord) -> None:
    """run.json written in the room kept for it."""
    try:
        os.remove(os.path.join(run_dir, RESERVE_NAME))
    except FileNotFoundError:
        pass
    try:
        record_files.write_run(run_dir, record)
    except OSError as exc:
        raise write_error(exc, run_dir, len(codec.encode(record))) from None
