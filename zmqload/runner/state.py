"""What the controller knows about a run as it goes, and the immutable snapshots a
progress listener receives."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Mapping, Optional, Protocol, Union

from ..contract import control
from ..contract.ids import WorkerId, incarnation
from ..contract.run_record import Drain, Reset, Restart
from .lifecycle import rss_kb
from .parquet_writer import free_bytes


@dataclass(frozen=True)
class ProgressSnapshot:
    """The run as it stands; a listener may keep it, nothing changes it."""

    pattern: str
    transport: str
    phase: str  # starting, running, draining, closing, stopping (interrupted)
    elapsed_s: float  # since the run was launched
    sent: int  # messages the producers' sockets accepted so far
    dropped: int  # EAGAIN + SNDTIMEO at the producers so far
    received: int  # messages the consumers received so far (copies included)
    producers: int
    producers_done: int
    gaps: int = 0  # seqs the consumers skipped so far (live estimate, copies included)
    copies: int = 1  # consumers each message is meant for (fan-out)
    rss_kb: int = (
        -1
    )  # memory (VmRSS) of every worker process and the controller, summed; -1 until all said
    disk_bytes: int = -1  # what the run directory holds on disk (records, spill, maps)
    disk_free_bytes: int = -1  # what its file system has left
    run_id: str = ""
    # each worker's last Progress ("p0", "c1", "x0" -> it): --metrics's per-worker series
    workers: Mapping[str, control.Progress] = field(default_factory=dict)
    controller_rss_kb: int = -1  # the controller's own memory (VmRSS), in rss_kb's sum too

    @property
    def in_flight(self) -> int:
        """Messages accepted by the producers' sockets and neither received nor skipped yet
        (sampled between slices at different instants: an estimate, the run's figure is exact)."""
        return max(0, self.sent * self.copies - self.received - self.gaps)


class ProgressListener(Protocol):
    """Receives snapshots while a run goes on (the live display, a sweep's progress bar).
    Called on the controller's thread between control messages; must return quickly."""

    def start(self, snapshot: ProgressSnapshot) -> None: ...

    def update(self, snapshot: ProgressSnapshot) -> None: ...

    def stop(self) -> None: ...


WorkerFinal = Union[control.ProducerFinal, control.ConsumerFinal, control.ProxyFinal]
"""A worker's last word: what RunState.final holds."""


class WorkerFailed(Exception):
    def __init__(self, worker: WorkerId, failure: control.Failed):
        self.worker, self.failure = worker, failure
        super().__init__(f"{worker}: {failure.message}")


@dataclass
class RunState:
    producers: list[WorkerId]
    consumers: list[WorkerId]
    proxies: list[WorkerId] = field(default_factory=list)
    ready: dict[WorkerId, list[str]] = field(
        default_factory=dict
    )  # worker -> list of bound endpoints
    connected: set[WorkerId] = field(default_factory=set)
    warm: set[WorkerId] = field(default_factory=set)
    draining: set[WorkerId] = field(default_factory=set)  # consumers that began the drain
    live: dict[WorkerId, control.Progress] = field(default_factory=dict)  # worker -> last Progress
    done: dict[WorkerId, control.ProducerDone] = field(
        default_factory=dict
    )  # producer -> ProducerDone
    final: dict[WorkerId, WorkerFinal] = field(default_factory=dict)  # worker -> *Final
    failures: dict[WorkerId, control.Failed] = field(default_factory=dict)  # worker -> Failed
    t0_ns: int = 0
    phase: str = "starting"
    drain: Optional[Drain] = None  # how the drain went (run.json "drain")
    drain_sent_ns: int = 0  # when the consumers were told to drain
    dead: set[WorkerId] = field(default_factory=set)  # workers that ended without their final
    resets: list[Reset] = field(default_factory=list)  # the resets made (--reset-at)
    restarts: list[Restart] = field(default_factory=list)  # the restarts made (--restart)
    # worker -> its processes' record names in order ("c0", "c0.g1"): one while it never restarted
    incarnations: dict[WorkerId, list[str]] = field(default_factory=dict)
    # consumer -> what its ended processes received (their last Progress): the drain's count goes on
    received_before: dict[WorkerId, int] = field(default_factory=dict)
    # restarted workers whose new process has not said Ready yet: what the ended one still had on
    # the way (its Progress) is not the new one's
    restarting: set[WorkerId] = field(default_factory=set)
    held: dict[WorkerId, control.Held] = field(default_factory=dict)  # holding for a restart
    # worker -> when it said it had bound or connected (its own clock: this host's), 0: unsaid
    up_ns: dict[WorkerId, int] = field(default_factory=dict)
    # producer -> what its ended processes' sockets accepted (their Held): the drain's count goes on
    sent_before: dict[WorkerId, int] = field(default_factory=dict)

    @property
    def everyone(self) -> list[WorkerId]:
        return self.producers + self.consumers + self.proxies

    def receive(self, worker: WorkerId, message: control.Message) -> None:
        if worker in self.restarting:
            if not isinstance(message, control.Ready):
                return
            self.restarting.discard(worker)
        if isinstance(message, control.Ready):
            self.ready[worker] = message.endpoints
            self.up_ns[worker] = message.t_ns
        elif isinstance(message, control.Connected):
            self.connected.add(worker)
            self.up_ns[worker] = message.t_ns
        elif isinstance(message, control.Warm):
            self.warm.add(worker)
        elif isinstance(message, control.Draining):
            self.draining.add(worker)
        elif isinstance(message, control.Held):
            self.held[worker] = message
        elif isinstance(message, control.Progress):
            before = self.live.get(worker)
            if message.latency_sent is None and before is not None:
                # a consumer sends its latency (--metrics) once a second: kept between
                message = dataclasses.replace(
                    message,
                    latency_intended=before.latency_intended,
                    latency_sent=before.latency_sent,
                )
            self.live[worker] = message
        elif isinstance(message, control.ProducerDone):
            self.done[worker] = message
        elif isinstance(
            message, (control.ProducerFinal, control.ConsumerFinal, control.ProxyFinal)
        ):
            self.final[worker] = message
        elif isinstance(message, control.Failed):
            self.failures[worker] = message
            raise WorkerFailed(worker, message)

    def received_so_far(self) -> int:
        return sum(self.live[c].messages for c in self.consumers if c in self.live) + sum(
            self.received_before.values()
        )

    def first_seqs(self) -> dict[str, int]:
        """A restarted producer's new processes' first seqs, by their records' names."""
        return {
            incarnation(WorkerId.parse(r.worker), r.generation): r.first_seq for r in self.restarts
        }

    def names(self, worker: WorkerId) -> list[str]:
        """The record names of every process the worker had, in order (contract/ids.incarnation)."""
        return self.incarnations.get(worker, [str(worker)])

    def snapshot(
        self,
        pattern: str,
        transport: str,
        elapsed_s: float,
        copies: int = 1,
        footprint: Footprint | None = None,
        run_id: str = "",
    ) -> ProgressSnapshot:
        sent = sum(self.live[p].messages for p in self.producers if p in self.live)
        dropped = sum(self.live[p].dropped for p in self.producers if p in self.live)
        gaps = sum(self.live[c].gaps for c in self.consumers if c in self.live)
        rss = [
            self.live[w].rss_kb
            for w in self.everyone
            if w in self.live and self.live[w].rss_kb >= 0
        ]
        own = (
            footprint or Footprint()
        )  # the whole run's memory, or none until every worker said its own
        return ProgressSnapshot(
            pattern,
            transport,
            self.phase,
            elapsed_s,
            sent,
            dropped,
            self.received_so_far(),
            len(self.producers),
            len(self.done),
            gaps,
            copies,
            sum(rss) + own.rss_kb if len(rss) == len(self.everyone) and own.rss_kb >= 0 else -1,
            own.disk_bytes,
            own.disk_free_bytes,
            run_id,
            {str(w): progress for w, progress in self.live.items()},
            own.rss_kb,
        )


@dataclass(frozen=True)
class Footprint:
    """What the controller's own process and the run directory take, measured at most once a
    second (a walk of the run directory): the live display's memory and disk."""

    rss_kb: int = -1
    disk_bytes: int = -1
    disk_free_bytes: int = -1
    at: float = 0.0  # time.monotonic() when measured

    EVERY_S = 1.0

    def fresh(self, run_dir: str, now: float) -> Footprint:
        """This footprint, or a new one when a second has passed."""
        if now - self.at < self.EVERY_S:
            return self
        return Footprint(rss_kb(), disk_used(run_dir), free_bytes(run_dir), now)


def disk_used(directory: str) -> int:
    """Bytes the files under `directory` take on disk (allocated blocks: a spill slot written
    once before the loop counts whole), -1 if it cannot be read."""
    total = 0
    try:
        for root, _, files in os.walk(directory):
            for name in files:
                try:
                    total += os.lstat(os.path.join(root, name)).st_blocks * 512
                except FileNotFoundError:  # a part renamed or a spill slot removed meanwhile
                    pass
    except OSError:
        return -1
    return total
