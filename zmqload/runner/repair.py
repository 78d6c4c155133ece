"""A run left `running` (its controller died, or everything was killed) finished from
its records: every worker's figures rebuilt from its Parquet parts and raw chunks
(runner/salvage.py), the usual accounting over them, run.json marked `failed`.

Called by the last worker of a run whose controller died, and by `zmqload repair RUN_DIR`.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any

from ..config import Workload
from ..contract import ids
from ..errors import ConfigError
from ..result import RunResult
from .collect import build_result
from .run import finish_records
from .salvage import salvage_run
from .state import RunState


def process_alive(pid: int) -> bool:
    """Whether pid is a running (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def read_running(run_dir: str, option: str = "RUN_DIR") -> dict[str, Any]:
    path = os.path.join(run_dir, "run.json")
    try:
        with open(path) as f:
            meta: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        raise ConfigError(option, f"{run_dir} has no run.json; accepted: a run directory (runs/run=...)") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(option, f"cannot read {path} ({exc}); accepted: a run directory with a readable run.json") from None
    if meta.get("status") != "running":
        raise ConfigError(option, f"{run_dir} is {meta.get('status')!r}, not 'running'; accepted: a run left running")
    return meta


def repair_run(run_dir: str, reason: str, workers_died: bool) -> RunResult:
    """Rebuild the counters of a run left `running` and mark it `failed` with `reason`.
    workers_died: whether its workers may have died mid-run (what they held is `unknown`)
    rather than stopped by themselves (what was unreceived is `stranded`)."""
    meta = read_running(run_dir)
    w = Workload.from_dict(meta["workload"])
    state = RunState(ids.producers(w.producers), ids.consumers(w.consumers))
    state.t0_ns = int((meta.get("schedule") or {}).get("t0_ns") or 0)
    rebuilt, dead, salvage = salvage_run(run_dir, w, state.t0_ns, state.producers, state.consumers, {}, {})
    state.final.update(rebuilt)
    state.dead = dead if workers_died else set()
    note = salvage.note()
    meta["salvaged"] = dict(salvage.as_dict(), workers=sorted(str(n) for n in rebuilt),
                            died=sorted(str(n) for n in state.dead))
    result = build_result(state, w, meta["run_id"], run_dir, "failed", meta.get("versions", {}))
    finish_records(os.path.join(run_dir, "run.json"), meta, state, w, result,
                   reason + (f"; {note}" if note else ""))
    remove_control_dir(meta)
    return result


def remove_control_dir(meta: dict[str, Any]) -> None:
    """The run's private control and ipc socket files, when nobody was left to remove them."""
    directory = meta.get("control_dir") or ""
    if os.path.basename(directory).startswith("zmqload-ctl-"):
        shutil.rmtree(directory, ignore_errors=True)
