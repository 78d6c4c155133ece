"""A run left `running` (its controller died, or everything was killed) finished from
its records: every worker's figures rebuilt from its Parquet parts and raw chunks
(runner/salvage.py), the usual accounting over them, run.json marked `failed`.

Called by the last worker of a run whose controller died, and by `zmqload repair RUN_DIR`.
"""

from __future__ import annotations

import os
import shutil

from ..contract import ids
from ..contract import run_record as rr
from ..store import record_files
from ..contract.states import RunStatus
from ..errors import ConfigError, RecordError
from ..measure.result import RunResult
from .collect import build_result
from .run_file import finish_records
from .salvage import salvage_run
from .state import RunState


def process_alive(pid: int) -> bool:
    """Whether pid is a running (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def read_running(run_dir: str, option: str = "RUN_DIR") -> rr.RunRecord:
    if not record_files.is_run_dir(run_dir):
        raise ConfigError(
            option, f"{run_dir} has no run.json; accepted: a run directory (runs/run=...)"
        )
    try:
        record = record_files.read_run(run_dir)
    except RecordError as exc:
        raise ConfigError(
            option, f"cannot read {exc}; accepted: a run directory with a readable run.json"
        ) from None
    if record.status is not RunStatus.RUNNING:
        raise ConfigError(
            option,
            f"{run_dir} is {record.status.value!r}, not 'running'; accepted: a run left running",
        )
    return record


def repair_run(run_dir: str, reason: str, workers_died: bool) -> RunResult:
    """Rebuild the counters of a run left `running` and mark it `failed` with `reason`.
    workers_died: whether its workers may have died mid-run (what they held is `unknown`)
    rather than stopped by themselves (what was unreceived is `stranded`)."""
    record = read_running(run_dir)
    w = record.workload
    state = RunState(ids.producers(w.producers), ids.consumers(w.consumers))
    state.t0_ns = record.t0_ns
    state.resets = list(record.resets)  # written as each was made: their losses are dropped_reset
    state.restarts = list(record.restarts)  # so were the restarts, each with its process's name
    for restart in record.restarts:
        worker = ids.WorkerId.parse(restart.worker)
        state.incarnations.setdefault(worker, [str(worker)]).append(
            ids.incarnation(worker, restart.generation)
        )
    rebuilt, dead, salvage = salvage_run(
        run_dir,
        w,
        state.t0_ns,
        state.producers,
        state.consumers,
        {},
        {},
        state.incarnations,
        state.first_seqs(),
    )
    state.final.update(rebuilt)
    state.dead = dead if workers_died else set()
    note = salvage.note()
    record.salvaged = salvage.record(rebuilt, state.dead)
    result = build_result(state, w, record.run_id, run_dir, RunStatus.FAILED, record.versions)
    finish_records(run_dir, record, state, w, result, reason + (f"; {note}" if note else ""))
    remove_control_dir(record)
    return result


def remove_control_dir(record: rr.RunRecord) -> None:
    """The run's private control and ipc socket files, when nobody was left to remove them."""
    directory = record.control_dir or ""
    if os.path.basename(directory).startswith("zmqload-ctl-"):
        shutil.rmtree(directory, ignore_errors=True)
