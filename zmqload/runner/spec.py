"""What a worker is told when it starts: who it is, what to run, where to report."""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Optional

from ..contract.curve import CurveKeys
from ..contract.workload import Workload
from ..contract.ids import Role, WorkerId


@dataclass(frozen=True)
class WorkerSpec:
    worker: WorkerId
    workload: Workload
    control: str                  # the control channel's endpoint
    run_dir: str
    bind: list[str] = field(default_factory=list)   # endpoints to bind (binders; the proxy: front, back)
    controller_pid: int = 0       # a worker process ends when this process is gone
    curve: Optional[CurveKeys] = None   # --curve on: the run's keys (a connecting worker's hold no server secret)
    control_curve: Optional[CurveKeys] = None   # --curve on: the controller's sockets' (no server secret)
    upload_to: Optional[str] = None     # a placed run's --out URI: the run directory there, secrets and all (runner/task_out.py)
    header_key: int = 0           # the run's header key (csrc/zl_wire.h zl_check); 0 where a side is the user's

    @property
    def name(self) -> str:
        return str(self.worker)

    @property
    def role(self) -> Role:
        return self.worker.role

    def to_json(self) -> str:
        return json.dumps({"worker": str(self.worker), "workload": self.workload.to_dict(),
                           "control": self.control, "run_dir": self.run_dir, "bind": self.bind,
                           "controller_pid": self.controller_pid,
                           "curve": None if self.curve is None else self.curve.to_dict(),
                           "control_curve": None if self.control_curve is None else self.control_curve.to_dict(),
                           "upload_to": self.upload_to, "header_key": self.header_key})

    @classmethod
    def from_json(cls, text: str) -> "WorkerSpec":
        data = json.loads(text)
        return cls(WorkerId.parse(data["worker"]), Workload.from_dict(data["workload"]), data["control"],
                   data["run_dir"], list(data["bind"]), int(data["controller_pid"]),
                   None if data.get("curve") is None else CurveKeys.from_dict(data["curve"]),
                   None if data.get("control_curve") is None else CurveKeys.from_dict(data["control_curve"]),
                   data.get("upload_to"), int(data.get("header_key", 0)))

    def controller_alive(self) -> bool:
        """The watchdog's test: a worker process is reparented when its controller dies."""
        return not self.controller_pid or os.getppid() == self.controller_pid

    def with_pid(self) -> "WorkerSpec":
        return dataclasses.replace(self, controller_pid=os.getpid())
