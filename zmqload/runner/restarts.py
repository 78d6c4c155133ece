"""The restart fault (--restart): when due, a worker's process is ended (--restart-mode) and, after
--restart-gap-ms, a new process takes its place on the same endpoints with the same socket options,
recording under its generation's name (contract/ids.incarnation). The steps are the controller's
(`Controller.restart`); this is the schedule."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import _engine
from ..contract.ids import WorkerId
from ..contract.workload import Workload


@dataclass
class Restarts:
    """The run's restart schedule: `due` gives the restarts whose time has come, once each (the
    controller asks while the producers send)."""

    t0_ns: int  # the schedule's start, from which --restart counts
    planned: list[tuple[WorkerId, int]] = field(default_factory=list)  # (worker, due ns), in order

    @classmethod
    def plan(cls, w: Workload, t0_ns: int) -> Restarts:
        return cls(
            t0_ns,
            [(WorkerId.parse(name), t0_ns + round(at * 1e9)) for name, at in w.restarts],
        )

    def due(self) -> list[WorkerId]:
        """The workers whose restart is due now, taken off the schedule."""
        now = _engine.now_ns()
        ready = [worker for worker, at in self.planned if at <= now]
        self.planned = [(worker, at) for worker, at in self.planned if at > now]
        return ready
