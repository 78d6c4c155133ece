"""capacity-search.json as a type, `SearchRecord`, through the one codec as run.json is. Written
before the first probe and after every one, so an interrupted search keeps its probes.
docs/CAPACITY.md's field table is generated from these types."""

from __future__ import annotations

import dataclasses
import os
from typing import Optional, Union

import msgspec

from .workload import SearchPlan, Slos, Workload
from .codec import Record
from .records import SCHEMA_VERSION
from .states import SearchStatus, Slo
from .sweep_record import OptionValue

RESULT_FILE = "capacity-search.json"
"""The search's record, in its --out beside the probes' run directories."""

SET_BY_SEARCH = ("rate", "duration", "count")
"""Workload options each probe sets (not part of a search's template)."""
NOT_IN_TEMPLATE = SET_BY_SEARCH + ("run_name", "label")
"""Workload fields a search's template leaves out: the probe's own."""


# -- a probe ---------------------------------------------------------------------------------
class BreachEntry(Record):
    """A broken SLO (zmqload.plan.slo.Breach)."""

    slo: Slo
    """The SLO by its option's name."""
    measured: Optional[float] = None
    """What the probe measured (null: unknown, e.g. the p99 of a probe that received nothing)."""
    limit: float = 0.0
    """The SLO's limit (backlog: the growth tolerated, in messages)."""
    text: str = ""
    """One line: the SLO, the measured value and the limit."""


class ProbeQueuePeak(Record):
    """The queue's deepest point in the probe's run (run.json's summary.queue_peak), by place."""

    messages: Optional[int] = None
    kernel_messages: Optional[int] = None
    """In the kernel's tcp socket buffers."""
    libzmq_messages: Optional[int] = None
    """In libzmq's pipes."""


class Figures(Record):
    """What a probe shows of its run (zmqload.plan.capacity_search.figures): rates, loss, latency, the queue
    and memory."""

    offered_rate: int = 0
    """msg/s of all producers: the probe's rate times the producers."""
    reached_rate: Optional[float] = None
    """msg/s the producers reached (zmqload.measure.schedule_keeping); null: unpaced."""
    throughput_msgs: float = 0.0
    """Distinct messages received per second, as `run` says it (until the drain)."""
    achieved: Optional[float] = None
    """unique_received / offered (the --min-achieved figure; with --restart, dropped_restart counted
    as received); null: nothing offered."""
    loss_ratio: float = 0.0
    """lost / expected (the --max-loss figure, apart from dropped_restart)."""
    lost: int = 0
    dropped: int = 0
    dropped_restart: int = 0
    """Of dropped: lost at --restart's restarts (not judged by --max-loss: --slo-restart-lost)."""
    stranded: int = 0
    drained: int = 0
    eagain: int = 0
    p99_us: Optional[float] = None
    """p99 latency from the intended send time, us (null: nothing received)."""
    p99_9_us: Optional[float] = None
    queue_peak: Optional[ProbeQueuePeak] = None
    """null: no queue samples."""
    consumer_max_rss_kb: Optional[int] = None
    """The largest consumer's peak RSS."""
    lag_ms: Optional[float] = None
    """How far behind its schedule the latest producer was at its last send."""
    blocked_ms: Optional[float] = None
    """How long the sockets held it back (pushback)."""


class ProbeEntry(Record):
    """One probe: a real open-loop run at one rate per producer, and its verdict."""

    rate: int
    """msg/s per producer."""
    passed: bool
    """Every SLO held and no backlog grew (and the generator kept its schedule)."""
    confirm: bool = False
    """The re-run of the final pass."""
    generator_limited: bool = False
    """The producers could not keep their schedule without pushback: no verdict on the system."""
    failed_slo: Optional[Slo] = None
    """The first broken SLO (in the order `max-loss`, `min-achieved`, `backlog`, `slo-p99-us`,
    `slo-restart-lost`, `slo-recovery-ms`); `generator` when the generator was the limit."""
    breaches: list[BreachEntry] = []
    """Every broken SLO, in that order."""
    error: Optional[str] = None
    """The probe's run could not be carried out (not a verdict), else null."""
    run_dir: Optional[str] = None
    """The probe's run directory (its run.json and records)."""
    figures: Optional[Figures] = None
    """null when the probe's run failed before it had figures."""


# -- a combination's search ----------------------------------------------------------------------
class SearchTemplate(Record):
    """The combination's workload: every option of `run` but rate, duration and count (each probe
    sets them) and run_name, label. Checked as a Workload is (contract/workload.py)."""

    pattern: str = "push-pull"
    transport: str = "tcp"
    host: str = "127.0.0.1"
    port: int = 0
    endpoint: Optional[str] = None
    producers_connect: Optional[str] = None
    producers_bind: Optional[str] = None
    consumers_connect: Optional[str] = None
    consumers_bind: Optional[str] = None
    role: str = "both"
    reply_timeout_ms: Optional[int] = None
    size: Union[int, str] = 64
    payload: Optional[str] = None
    parts: int = 1
    topics: int = 0
    topic_weights: Optional[str] = None
    subscribe: Optional[str] = None
    pacing: str = "spin"
    producers: int = 1
    consumers: int = 1
    send_mode: str = "block"
    sndtimeo_ms: int = 100
    sndhwm: Optional[int] = None
    rcvhwm: Optional[int] = None
    linger_ms: Optional[int] = None
    sndbuf: Optional[int] = None
    rcvbuf: Optional[int] = None
    immediate: bool = False
    conflate: str = "off"
    router_mandatory: bool = False
    router_handover: bool = False
    xpub_nodrop: bool = False
    heartbeat_ivl_ms: Optional[int] = None
    heartbeat_ttl_ms: Optional[int] = None
    heartbeat_timeout_ms: Optional[int] = None
    io_threads: int = 1
    libzmq: str = "system"
    cpu_placement: str = "auto"
    curve: str = "off"
    curve_server_key: Optional[str] = None
    curve_server_cert: Optional[str] = None
    insecure: bool = False
    master: Optional[str] = None
    placement: Optional[str] = None
    consumer_delay_us: float = 0.0
    drain_timeout_ms: int = 1000
    drain: str = "fast"
    drain_limit_s: float = 60.0
    warmup: bool = True
    warmup_timeout_s: float = 15.0
    join_delay_ms: int = 0
    close_pause_ms: int = 0
    close_order: str = "producer-first"
    reset_at: Optional[str] = None
    restart: Optional[str] = None
    restart_mode: str = "kill"
    restart_gap_ms: int = 0
    proxy_sndhwm: Optional[int] = None
    proxy_rcvhwm: Optional[int] = None
    out: str = "runs"
    metrics: Optional[str] = None
    metrics_linger: float = 15.0
    compression: str = "none"
    chunk_rows: int = 262_144
    slice_ms: int = 20

    def __post_init__(self) -> None:
        self.workload()  # ConfigError (a ValueError): the codec names the field

    def workload(self) -> Workload:
        """The template as a Workload (rate, duration and count unset)."""
        return Workload(**msgspec.structs.asdict(self))

    @classmethod
    def of(cls, workload: Workload) -> SearchTemplate:
        """The template of a combination's workload."""
        names = {f.name for f in msgspec.structs.fields(cls)}
        return cls(**{k: v for k, v in dataclasses.asdict(workload).items() if k in names})


class SearchEntry(Record):
    """One combination's search (zmqload.plan.capacity_search.Outcome): its answer, bracket and probes. While it
    runs (and in a search cut short, its last), the probes and bracket so far."""

    values: dict[str, OptionValue] = {}
    """This combination's values of the varying options."""
    workload: SearchTemplate = msgspec.field(default_factory=SearchTemplate)
    producers: int = 1
    """Producers per probe (the rates are per producer)."""
    wall_s: float = 0.0
    """Seconds the search took (so far)."""
    converged: bool = False
    """An answer was found."""
    max_sustainable_rate: Optional[int] = None
    """msg/s per producer, or null."""
    bracket: list[Optional[int]] = msgspec.field(default_factory=lambda: [None, None])
    """[highest passing, lowest failing] (so far); either may be null."""
    failed_slo: Optional[Slo] = None
    """At the lowest failing rate, the first broken SLO; `generator` when the generator was the limit."""
    generator_limited: bool = False
    """The search ended on the generator's limit."""
    reason: str = ""
    """Why it ended (while it runs: how far it got)."""
    probes: list[ProbeEntry] = []
    """In the order run."""

    def __post_init__(self) -> None:
        if len(self.bracket) != 2:
            raise ValueError(
                f"bracket: expected [highest passing, lowest failing], got {self.bracket}"
            )


# -- the record --------------------------------------------------------------------------------
class SearchRecord(Record):
    """One `zmqload capacity`'s capacity-search.json (docs/CAPACITY.md)."""

    schema_version: int = SCHEMA_VERSION
    """The records' schema version (contract.records.SCHEMA_VERSION, run.json's too)."""
    search_id: str = ""
    """The search id: --name, or time and a random suffix; the prefix of every probe's run name."""
    out: str = ""
    """--out: where the probes' run directories and this file are."""
    status: SearchStatus = SearchStatus.RUNNING
    """`running` from before the first probe on (left so: the search was killed), then how it ended."""
    varying: list[str] = []
    """The options that differ between combinations."""
    slos: Slos = msgspec.field(default_factory=Slos)
    """The SLOs in effect (capacity's defaults filled in)."""
    plan: SearchPlan = msgspec.field(default_factory=SearchPlan)
    """--start-rate, --precision, --probe-duration, --max-probes."""
    searches: list[SearchEntry] = []
    """One per combination searched so far, in order; in a search cut short, the last is the one it
    was in."""

    @property
    def cut_short(self) -> Optional[SearchEntry]:
        """The combination the search was in when it stopped short (running: killed or still
        going; interrupted; failed): the last one. None for a complete search."""
        return self.searches[-1] if self.status.cut_short and self.searches else None


# -- where it is (read and written by store/record_files.py) -----------------------------------
def search_path(out: str) -> str:
    return os.path.join(out, RESULT_FILE)
