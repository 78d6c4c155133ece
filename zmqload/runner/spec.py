"""What a worker is told when it starts: who it is, what to run, where to report."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Optional

from ..contract import codec
from ..contract.curve import CurveKeys
from ..contract.run_record import Libzmq
from ..contract.workload import Workload
from ..contract.ids import Role, WorkerId, incarnation
from ..errors import ConfigError, RecordError

_SPEC_KEYS = {
    "worker",
    "workload",
    "control",
    "run_dir",
    "bind",
    "controller_pid",
    "curve",
    "control_curve",
    "upload_to",
    "header_key",
    "libzmq",
    "generation",
    "t0_ns",
    "first_seq",
}
_REQUIRED = {
    "worker",
    "workload",
    "control",
    "run_dir",
    "bind",
    "controller_pid",
    "generation",
    "t0_ns",
    "first_seq",
}


@dataclass(frozen=True)
class WorkerSpec:
    worker: WorkerId
    workload: Workload
    control: str  # the control channel's endpoint
    run_dir: str
    bind: list[str] = field(
        default_factory=list
    )  # endpoints to bind (binders; the proxy: front, back)
    controller_pid: int = 0  # a worker process ends when this process is gone
    curve: Optional[CurveKeys] = (
        None  # --curve on: the run's keys (a connecting worker's hold no server secret)
    )
    control_curve: Optional[CurveKeys] = (
        None  # --curve on: the controller's sockets' (no server secret)
    )
    upload_to: Optional[str] = (
        None  # a placed run's --out URI: the run directory there, secrets and all (runner/task_out.py)
    )
    header_key: int = (
        0  # the run's header key (csrc/zl_wire.h zl_check); 0 where a side is the user's
    )
    libzmq: Optional[Libzmq] = (
        None  # the run's libzmq as the controller found it: the worker's must be the same file
    )
    generation: int = 0  # --restart: 0 for a worker's first process, n for its n-th new one
    t0_ns: int = (
        0  # a new process of a running run (--restart): the schedule's start, known at once
    )
    first_seq: int = 0  # a restarted producer's new process: the seq it goes on from

    @property
    def name(self) -> str:
        """The name its records are kept under (the process's: contract/ids.incarnation)."""
        return incarnation(self.worker, self.generation)

    @property
    def role(self) -> Role:
        return self.worker.role

    def to_json(self) -> str:
        return json.dumps(
            {
                "worker": str(self.worker),
                "workload": self.workload.to_dict(),
                "control": self.control,
                "run_dir": self.run_dir,
                "bind": self.bind,
                "controller_pid": self.controller_pid,
                "curve": None if self.curve is None else self.curve.to_dict(),
                "control_curve": None
                if self.control_curve is None
                else self.control_curve.to_dict(),
                "upload_to": self.upload_to,
                "header_key": self.header_key,
                "libzmq": None if self.libzmq is None else codec.to_builtins(self.libzmq),
                "generation": self.generation,
                "t0_ns": self.t0_ns,
                "first_seq": self.first_seq,
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> "WorkerSpec":
        """Inverse of to_json(), checked: RecordError in one line for anything else, whatever its bytes
        (a workload value as its option refuses it: `worker spec: --rate: got ...`)."""
        try:
            data = json.loads(text)
        except (
            ValueError,
            RecursionError,
        ) as exc:  # JSONDecodeError, UnicodeDecodeError, digits: ValueErrors
            raise _refuse(f"not JSON ({_first_line(exc)})") from None
        if not isinstance(data, dict) or set(data) - _SPEC_KEYS or _REQUIRED - set(data):
            raise _refuse(f"not a JSON object of {', '.join(sorted(_SPEC_KEYS))}")
        worker = data["worker"]
        if not isinstance(worker, str):
            raise _refuse("worker: not a worker name")
        try:
            worker_id = WorkerId.parse(worker)
        except ValueError:
            raise _refuse(f"worker: {worker[:20]!r} is not a worker name (p0, c1, x0)") from None
        if not isinstance(data["workload"], dict) or not all(
            isinstance(k, str) for k in data["workload"]
        ):
            raise _refuse("workload: not an object of options")
        try:
            workload = Workload.from_dict(data["workload"])
        except ConfigError as exc:
            raise _refuse(f"workload: {exc}") from None
        for name in ("control", "run_dir"):
            if not isinstance(data[name], str):
                raise _refuse(f"{name}: not a string")
        bind = data["bind"]
        if not isinstance(bind, list) or not all(isinstance(e, str) for e in bind):
            raise _refuse("bind: not a list of endpoints")
        pid = data["controller_pid"]
        if type(pid) is not int or not 0 <= pid < 2**31:
            raise _refuse("controller_pid: not a process id")
        upload_to = data.get("upload_to")
        if upload_to is not None and not isinstance(upload_to, str):
            raise _refuse("upload_to: not a string")
        key = data.get("header_key", 0)
        if type(key) is not int or not 0 <= key < 2**64:
            raise _refuse("header_key: not a 64-bit key")
        curve, control_curve = (_keys(data.get(name), name) for name in ("curve", "control_curve"))
        generation, t0_ns, first_seq = data["generation"], data["t0_ns"], data["first_seq"]
        if type(first_seq) is not int or not 0 <= first_seq < 2**40:
            raise _refuse("first_seq: not a seq")
        if type(generation) is not int or not 0 <= generation < 2**16:
            raise _refuse("generation: not a process generation")
        if type(t0_ns) is not int or not 0 <= t0_ns < 2**63:
            raise _refuse("t0_ns: not a CLOCK_MONOTONIC time")
        try:
            lib = None if data.get("libzmq") is None else codec.convert(data["libzmq"], Libzmq)
        except RecordError as exc:
            raise _refuse(f"libzmq: {exc}") from None
        return cls(
            worker_id,
            workload,
            data["control"],
            data["run_dir"],
            list(bind),
            pid,
            curve,
            control_curve,
            upload_to,
            key,
            lib,
            generation,
            t0_ns,
            first_seq,
        )

    def controller_alive(self) -> bool:
        """The watchdog's test: a worker process is reparented when its controller dies."""
        return not self.controller_pid or os.getppid() == self.controller_pid

    def with_pid(self) -> "WorkerSpec":
        return dataclasses.replace(self, controller_pid=os.getpid())


def _refuse(why: str) -> RecordError:
    return RecordError(f"worker spec: {why}")


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


def _keys(data: object, name: str) -> Optional[CurveKeys]:
    """A spec's CURVE keys: null, or the four keys of CurveKeys (the server's secret may be null)."""
    if data is None:
        return None
    try:
        return CurveKeys.from_dict(data)
    except ConfigError as exc:
        raise _refuse(f"{name}: {exc.message}") from None
