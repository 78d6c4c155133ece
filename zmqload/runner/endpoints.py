"""Where each side binds or connects: the pattern's own topology (one endpoint per binder,
or an explicit --endpoint), or the endpoints per side (--producers-connect ... --consumers-bind)
by the pattern's rules (contract/patterns.py, `Pattern.topology`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from ..contract import patterns
from ..contract import run_record as rr
from ..contract.ids import Role
from ..contract.patterns import Attach
from ..contract.workload import Workload
from .preflight import refused


def binder_endpoints(w: Workload, count: int, ipc_dir: str, run_id: str) -> list[str]:
    """Where the `count` binding sockets bind: as the options name it, or where zmqload chooses."""
    named = w.bind_endpoints(count)
    if named:
        return named
    if w.transport == "tcp":
        host_part = f"[{w.host}]" if ":" in w.host else w.host
        return [
            f"tcp://{host_part}:{w.port + i}" if w.port else f"tcp://{host_part}:*"
            for i in range(count)
        ]
    if w.transport == "ipc":
        return [f"ipc://{os.path.join(ipc_dir, f'data-{i}')}" for i in range(count)]
    return [f"inproc://zmqload-{run_id}-{i}" for i in range(count)]


@dataclass(frozen=True)
class EndpointPlan:
    """One run's topology: which role binds (None: nobody of zmqload's: the pattern's proxy, or a
    device of the user's between both connecting sides), where each of its sockets binds, and
    what each connecting side connects to (None: to what the binders bound)."""

    topology: patterns.Topology
    binder: Optional[Role]
    bind: list[str]
    connect: dict[Role, Optional[list[str]]]

    @property
    def device(self) -> bool:
        return self.topology.device

    @property
    def user_listens(self) -> bool:
        """zmqload connects to the user's system: a device, or a consumer (--role producer) or a producer
        (--role consumer) of the user's."""
        return self.topology.user_listens

    def user_endpoints(self) -> list[str]:
        """The endpoints of the user's system zmqload connects to, in option order."""
        if not self.user_listens:
            return []
        return [e for role in (Role.PRODUCER, Role.CONSUMER) for e in self.connect[role] or ()]


def plan(w: Workload, binders: int, ipc_dir: str, run_id: str) -> EndpointPlan:
    """The run's plan for `binders` binding sockets (the binding side's worker count)."""
    topology = w.topology
    if (
        topology.producers_alone and topology.binder is None
    ):  # the producers connect to the user's consumer
        return EndpointPlan(
            topology,
            None,
            [],
            {Role.PRODUCER: list(topology.producers.endpoints), Role.CONSUMER: None},
        )
    if (
        topology.consumers_alone and topology.binder is None
    ):  # the consumers connect to the user's producer
        return EndpointPlan(
            topology,
            None,
            [],
            {Role.PRODUCER: None, Role.CONSUMER: list(topology.consumers.endpoints)},
        )
    if topology.device:
        return EndpointPlan(
            topology,
            None,
            [],
            {
                Role.PRODUCER: list(topology.producers.endpoints),
                Role.CONSUMER: list(topology.consumers.endpoints),
            },
        )
    if topology.binder not in ("producer", "consumer"):  # the proxy pattern's own proxy binds
        return EndpointPlan(topology, None, [], {Role.PRODUCER: None, Role.CONSUMER: None})
    binder = Role(topology.binder)
    connect: dict[Role, Optional[list[str]]] = {Role.PRODUCER: None, Role.CONSUMER: None}
    for role in (Role.PRODUCER, Role.CONSUMER):
        side = topology.side(role.value)
        if role is not binder and side.attach is Attach.CONNECT:
            connect[role] = list(side.endpoints)  # the same places, as the user spells them
    return EndpointPlan(topology, binder, binder_endpoints(w, binders, ipc_dir, run_id), connect)


def topology_record(
    w: Workload, endpoint_plan: EndpointPlan, bound: dict[Role, list[str]], proxy: list[str]
) -> rr.Topology:
    """run.json's `topology`: what each side bound or connected to (`bound`: what the binders
    reported, by role; `proxy`: the pattern proxy's front and back), and the device zmqload does not see."""
    pattern = patterns.get(w.pattern)
    sides: dict[Role, rr.SideEndpoints] = {}
    for role in (Role.PRODUCER, Role.CONSUMER):
        given = endpoint_plan.topology.side(role.value).given
        if role is endpoint_plan.binder:
            sides[role] = rr.SideEndpoints(
                attach=Attach.BIND, endpoints=bound.get(role) or endpoint_plan.bind, given=given
            )
        else:
            to = endpoint_plan.connect[role]
            if to is None and proxy:
                to = [proxy[0] if role is Role.PRODUCER else proxy[1]]
            elif to is None:
                to = bound.get(endpoint_plan.binder, []) if endpoint_plan.binder is not None else []
            sides[role] = rr.SideEndpoints(attach=Attach.CONNECT, endpoints=list(to), given=given)
    device = pattern.device.what if endpoint_plan.device and pattern.device is not None else ""
    note = ""
    if endpoint_plan.device:
        note = (
            f"zmqload's producers connect to {', '.join(sides[Role.PRODUCER].endpoints)} and its consumers to "
            f"{', '.join(sides[Role.CONSUMER].endpoints)}; between them a device of yours ({device.split(':')[0]}) "
            "that zmqload does not see: a message it held counts as queued, one lost in it as dropped (placed by "
            "zmqload's own sockets' rule), and its queues and drops are not told apart from the sockets'"
        )
    return rr.Topology(
        producers=sides[Role.PRODUCER],
        consumers=sides[Role.CONSUMER],
        proxy=list(proxy),
        device_in_path=endpoint_plan.device,
        device=device,
        note=note,
    )


def unanswered(endpoints: list[str], timeout_s: float = 1.0) -> list[tuple[str, str]]:
    """Of the endpoints zmqload connects to, those where nothing accepts a connection now, and why
    (runner/preflight.py `refused`): what to name when a device or consumer never answered."""
    return [
        (endpoint, why)
        for endpoint in endpoints
        if (why := refused(endpoint, timeout_s)) is not None
    ]
