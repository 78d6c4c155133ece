"""RunResult: the summary figures of one run, as documented attributes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from ..contract import codec, patterns
from ..contract.fates import DROPPED, FATES
from ..contract.run_record import (
    ConsumerEntry,
    Drain,
    GeneratorVerdict,
    ProducerEntry,
    Topology,
    Versions,
)
from .histogram import Histogram
from .stream_account import StreamAccount

PERCENTILES = (50, 90, 99, 99.9, 99.99, 100)


def _key(q: float) -> str:
    return "max" if q >= 100 else "p" + format(q, "g")


@dataclass
class RunResult:
    """The summary figures of one run, as `zmqload.run()` returns them.

    Counts are messages summed over every producer (sender side) or consumer (receiver
    side); rates are per second over the whole run, not per producer. Every figure is also
    in `<run_dir>/run.json`, and every message in the run's Parquet records.
    """

    run_id: str
    """The run's name: `Workload.run_name`, or time-pattern-transport-id."""
    run_dir: str
    """Where the run's records went: `<Workload.out>/run=<run_id>` (default `./runs/run=...`,
    relative to the working directory), holding run.json and the sends/, recvs/, samples/
    Parquet parts (docs/RECORDS.md)."""
    status: str
    """complete, interrupted (Ctrl-C or SIGTERM; what was recorded is kept) or failed (a
    worker died or failed, the disk filled, the controller died: figures from the records)."""
    workload: dict[str, Any]
    """The validated Workload as a dict (`Workload.to_dict()`), defaults filled in."""
    attempted: int = 0
    """Messages the producers tried to send: each got a seq and one outcome (sent, eagain,
    timeout or an error)."""
    sent: int = 0
    """Messages libzmq accepted from the producers (sends that returned success)."""
    eagain: int = 0
    """Sends the socket refused with EAGAIN (--send-mode dontwait at HWM): never accepted."""
    timeout: int = 0
    """Sends that waited out SNDTIMEO (--send-mode timeout): never accepted."""
    errors: int = 0
    """Sends that failed with any other error."""
    expected: int = 0
    """Deliveries expected: `sent`, times the number of consumers for fan-out patterns."""
    received: int = 0
    """Messages the consumers received, duplicates included."""
    unique_received: int = 0
    """Distinct (stream, seq, consumer for fan-out) deliveries: `expected - lost`."""
    duplicates: int = 0
    """Deliveries of a message already received (by the same consumer, for fan-out)."""
    reordered: int = 0
    """Messages that arrived with a lower seq than one already received from their stream."""
    lost: int = 0
    """Accepted messages no (expected) consumer received: `expected - unique_received`, the
    sum of the fates in `zmqload.contract.fates.LOST` (dropped_*, `stranded`, `unknown`)."""
    # the fate of every accepted message (zmqload.measure.reconcile, docs/RECORDS.md)
    delivered: int = 0
    """Messages that arrived while the consumers worked normally."""
    drained: int = 0
    """Messages still queued when the producers finished, received during the drain."""
    dropped_start: int = 0
    """Messages that never arrived, dropped before the consumer had joined."""
    dropped_mid: int = 0
    """Messages that never arrived, dropped mid-run (a full pipe)."""
    dropped_tail: int = 0
    """Messages that never arrived, lost at close / linger / context termination."""
    dropped_reset: int = 0
    """Messages that never arrived, lost across a connection reset (--reset-at): in flight at the
    reset, or sent before the connection was back (zmqload.measure.reset_regions)."""
    dropped_restart: int = 0
    """Messages that never arrived, lost at a worker's restart (--restart): in the ended process's
    queue or unrecorded receipts, in flight, or sent for it before its new process received
    (zmqload.measure.restart_regions)."""
    stranded: int = 0
    """Messages unreceived when the drain was cut short (--drain none, --drain-limit-s): queued or dropped."""
    unknown: int = 0
    """Messages unreceived whose producer or consumer died (killed, crashed): they may have
    arrived in records that died with it, or died in its queue. Never counted as dropped."""
    drain: Drain = field(default_factory=Drain)
    """The drain: its mode, how it ended and when, and the tail rule (run.json `drain`; by
    attribute or key)."""
    queue: dict[str, Any] = field(default_factory=dict)
    """Queue depth in messages (zmqload/measure/queue_replay.py: sent - received - dropped, counted from the
    records): "peak" (the most messages in flight at any instant, when, and its kernel / libzmq
    split) and "series" (the depth at the end of each millisecond, with the split and each role's RSS)."""
    elapsed_s: float = 0.0
    """Seconds from the first send to the last receive."""
    send_rate: float = 0.0
    """Messages per second attempted, over the span from the first to the last send."""
    throughput_msgs: float = 0.0
    """Distinct messages received per second, over `elapsed_s`; with --consumer-delay-us and
    the fast drain (which skips that work) only those received before the drain, over the
    time until it began: the drain's speed is not the consumers'."""
    throughput_mb: float = 0.0
    """Megabytes received per second, over the same span as `throughput_msgs` (1 MB = 1e6
    bytes): throughput_msgs times the mean bytes of a received message (bytes_received / received)."""
    bytes_sent: int = 0
    """Bytes of the messages libzmq accepted, every frame (contract/sizes.py's rule per seq)."""
    bytes_received: int = 0
    """Bytes of zmqload's messages received, every frame, duplicates included."""
    sizes: dict[str, Any] = field(default_factory=dict)
    """The message sizes (contract/sizes.Sizes.facts): spec, kind, entries, min, max, mean, seed."""
    latency_intended: Histogram = field(default_factory=Histogram)
    """Receive time minus intended send time (the open-loop schedule), in nanoseconds: free
    of coordinated omission. See `latency_us`."""
    latency_sent: Histogram = field(default_factory=Histogram)
    """Receive time minus actual send time, in nanoseconds."""
    round_trip: Histogram = field(default_factory=Histogram)
    """req-rep only: reply time minus intended send time, in nanoseconds."""
    streams: list[StreamAccount] = field(default_factory=list)
    """Per producer stream: the same counts, and the missing seq ranges of lost messages (run.json
    `streams[]`, a view keyed by its consumer's index or "all"; by attribute or key:
    `streams[i]["missing_ranges"]`)."""
    topics: list[dict[str, Any]] = field(default_factory=list)
    """--topics: per topic, "topic", "sent" and per consumer "consumer", "subscribed", "expected",
    "received", "lost" (measure/reconcile.py); [] without topics."""
    producers: list[ProducerEntry] = field(default_factory=list)
    """Per producer: its counters, send times (ns) and close/term timings (run.json `producers[]`;
    read as `p.blocked_sends` or, as before, `p["blocked_sends"]`)."""
    consumers: list[ConsumerEntry] = field(default_factory=list)
    """Per consumer: its counters and receive times (ns) (run.json `consumers[]`; by attribute
    or key)."""
    versions: Versions = field(default_factory=Versions)
    """libzmq (engine and pyzmq's), pyzmq, Python and zmqload versions of the run (run.json
    `versions`; by attribute or key)."""
    foreign: dict[str, Any] = field(default_factory=dict)
    """--role consumer: the messages without zmqload's header (contract/wire.py FOREIGN_STREAM):
    "messages", "bytes", "span_s" (first to last arrival), "rate_msgs" and "gap_ns" (p50, p99, max
    between arrivals); every one is in the run's foreign/ records. {} in other runs."""
    resets: list[dict[str, int]] = field(default_factory=list)
    """--reset-at: each connection reset made, in order: `t_ns` (CLOCK_MONOTONIC, the records' clock)
    and `connections` (tcp connections it aborted)."""
    restarts: list[dict[str, Any]] = field(default_factory=list)
    """--restart: each restart made, in order (run.json `restarts`: contract/run_record.Restart)."""
    generator: GeneratorVerdict = field(default_factory=GeneratorVerdict)
    """Whether the producers kept their open-loop schedule (zmqload.measure.schedule_keeping): `generator_limited`,
    `scheduled_rate` and `reached_rate` (msg/s, all producers), `lag_ms` and `blocked_ms` (run.json
    `summary.generator`; by attribute or key)."""
    service: dict[str, Any] = field(default_factory=dict)
    """A service of the user's (req-rep with --role producer): "requests", "answered" ("echoed" +
    "by_order"), "unanswered", "answer_rate" (answers/s over "span_s", first request to last
    answer), from the replies/ records (zmqload.measure.service). {} in other runs."""
    clock_uncertainty_ns: Optional[int] = None
    """Placed runs (--master): how far a one-way latency may be off through the hosts' clocks
    (run.json placement, `Placement.latency_uncertainty_ns`); None on one host, where it is 0."""
    topology: Optional[Topology] = None
    """Who bound and who connected, to what, and whether a device of yours sat between the sides
    (run.json `topology`), kept here because the run directory may be at a URI by now."""

    # The figures run.json keeps under "counters" and "summary" (docs/RECORDS.md).
    COUNTERS: ClassVar[tuple[str, ...]] = (
        "attempted",
        "sent",
        "eagain",
        "timeout",
        "errors",
        "expected",
        "received",
        "unique_received",
        "duplicates",
        "reordered",
        "lost",
        *FATES,
        "dropped",
        "bytes_sent",
        "bytes_received",
    )
    FIGURES: ClassVar[tuple[str, ...]] = (
        "queue_peak",
        "elapsed_s",
        "send_rate",
        "throughput_msgs",
        "throughput_mb",
        "loss_ratio",
        "latency_intended_ns",
        "latency_sent_ns",
        "round_trip_ns",
        "generator_limited",
        "generator",
        "foreign",
        "service",
        "sizes",
    )

    def __repr__(self) -> str:
        return (
            f"RunResult({self.run_id!r}, status={self.status!r}, sent={self.sent}, received={self.received}, "
            f"lost={self.lost}, eagain={self.eagain}, throughput_msgs={self.throughput_msgs:.0f}, "
            f"p99_us={self.latency_us(99)})"
        )

    def queue_peak_figures(self) -> dict[str, Any]:
        """queue["peak"]: the most messages in flight, when, and the kernel / libzmq split; {} where
        the run has no queue figures (a service's, a consumer-only run)."""
        peak: dict[str, Any] = self.queue.get("peak") or {}
        return peak

    @property
    def refused(self) -> int:
        """Messages the sending socket never accepted (EAGAIN with dontwait, SNDTIMEO expiry)."""
        return self.eagain + self.timeout

    @property
    def dropped(self) -> int:
        """Accepted messages that never arrived although the drain ran to completion."""
        return sum(getattr(self, name) for name in DROPPED)

    @property
    def generator_limited(self) -> bool:
        """The producers fell behind their schedule without pushback from the sockets: the
        load generator, not the system under test, set the pace (zmqload.measure.schedule_keeping)."""
        return self.generator.generator_limited

    @property
    def frame_mismatches(self) -> int:
        """Messages whose frame count was not --parts, at every consumer (counted with --parts > 1
        and --role consumer)."""
        return sum(c.frame_mismatches for c in self.consumers)

    @property
    def size_mismatches(self) -> int:
        """Messages received at another first-frame size than the size rule's for their seq
        (contract/sizes.py), at every consumer: a device of the user's that cut or grew them."""
        return sum(c.size_mismatches for c in self.consumers)

    @property
    def loss_ratio(self) -> float:
        return self.lost / self.expected if self.expected else 0.0

    def latency_us(self, q: float, since: str = "intended") -> float | None:
        """Latency percentile q (a percent from 1 to 100: 99 = p99, 99.9, 100 = max) in
        microseconds, None if nothing was received; measured from the intended send time
        (default; free of coordinated omission), the actual one ("sent"), or the req-rep
        round trip ("round_trip", from the intended send time). ValueError otherwise: a
        fraction such as 0.99 is refused ("did you mean 99?"), not read as p0.99."""
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 1 <= q <= 100:
            hint = f"; did you mean {q * 100:g}?" if isinstance(q, float) and 0 < q < 1 else ""
            raise ValueError(f"percentile q is a percent from 1 to 100, got {q!r}{hint}")
        value = self._histogram(since).percentile(q)
        return None if value is None else value / 1000.0

    def _histogram(self, since: str) -> Histogram:
        try:
            return {
                "intended": self.latency_intended,
                "sent": self.latency_sent,
                "round_trip": self.round_trip,
            }[since]
        except KeyError:
            raise ValueError(f"since must be 'intended', 'sent' or 'round_trip', not {since!r}")

    def latency_summary(self, since: str = "intended") -> dict[str, Optional[int]]:
        hist = self._histogram(since)
        return {_key(q): hist.percentile(q) for q in PERCENTILES}

    RECEIVE_SIDE = (
        "expected",
        "received",
        "unique_received",
        "duplicates",
        "reordered",
        "lost",
        *FATES,
        "dropped",
        "queue_peak",
        "loss_ratio",
        "elapsed_s",
        "throughput_msgs",
        "throughput_mb",
        "latency_intended_ns",
        "latency_sent_ns",
        "streams",
        "consumers",
    )
    """The figures a consumer of zmqload's makes: None with --role producer (the consumer is the
    user's: not seen, not zero)."""

    SEND_SIDE = (
        "attempted",
        "sent",
        "eagain",
        "timeout",
        "errors",
        "expected",
        "lost",
        *FATES,
        "dropped",
        "queue_peak",
        "loss_ratio",
        "send_rate",
        "producers",
        "generator_limited",
        "generator",
    )
    """The figures that need a producer of zmqload's: None with --role consumer (the producer is the
    user's: what it sent is not seen)."""

    def shown(self) -> dict[str, Any]:
        """`summary` as `run --json` prints it: with --role producer the receive side is null, with
        --role consumer the send side and what follows from it."""
        figures = self.summary()
        if self.workload["role"] == "producer":
            figures.update({name: None for name in self.RECEIVE_SIDE}, receipt_seen=False)
        if self.workload["role"] == "consumer":
            figures.update({name: None for name in self.SEND_SIDE}, sends_seen=False)
        if patterns.get(self.workload["pattern"]).round_trip:
            figures.update(answered=self.answered, unanswered=self.unanswered)
        if self.clock_uncertainty_ns is not None:
            figures.update(clock_uncertainty_ns=self.clock_uncertainty_ns)
        return figures

    @property
    def serves(self) -> bool:
        """A run against a service of the user's (contract/patterns.py `serves`)."""
        return patterns.serves(self.workload["pattern"], self.workload["role"])

    @property
    def answered(self) -> int:
        """req-rep: requests whose reply came (each has a replies/ record and a round trip)."""
        return self.round_trip.count

    @property
    def unanswered(self) -> int:
        """req-rep: requests with no reply within --reply-timeout-ms."""
        return sum(p.unanswered for p in self.producers)

    def summary(self) -> dict[str, Any]:
        """Every figure, JSON-ready (latencies in ns)."""
        return {
            "run_id": self.run_id,
            "run_dir": self.run_dir,
            "status": self.status,
            "pattern": self.workload["pattern"],
            "transport": self.workload["transport"],
            "size": self.workload["size"],
            "rate": self.workload["rate"],
            "attempted": self.attempted,
            "sent": self.sent,
            "eagain": self.eagain,
            "timeout": self.timeout,
            "errors": self.errors,
            "expected": self.expected,
            "received": self.received,
            "unique_received": self.unique_received,
            "duplicates": self.duplicates,
            "reordered": self.reordered,
            "lost": self.lost,
            **{name: getattr(self, name) for name in FATES},
            "dropped": self.dropped,
            "drain": codec.to_builtins(self.drain),
            "queue_peak": self.queue.get("peak", {}),
            "loss_ratio": self.loss_ratio,
            "elapsed_s": self.elapsed_s,
            "send_rate": self.send_rate,
            "throughput_msgs": self.throughput_msgs,
            "throughput_mb": self.throughput_mb,
            "latency_intended_ns": self.latency_summary("intended"),
            "latency_sent_ns": self.latency_summary("sent"),
            "round_trip_ns": self.latency_summary("round_trip") if self.round_trip.count else None,
            "streams": [codec.to_builtins(s) for s in self.streams],
            "topics": self.topics or None,
            "producers": [codec.to_builtins(p) for p in self.producers],
            "consumers": [codec.to_builtins(c) for c in self.consumers],
            "versions": codec.to_builtins(self.versions),
            "generator_limited": self.generator_limited,
            "generator": codec.to_builtins(self.generator),
            "resets": self.resets,
            "restarts": self.restarts,
            "foreign": self.foreign or None,
            "service": self.service or None,
            "frame_mismatches": self.frame_mismatches,
            "size_mismatches": self.size_mismatches,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "sizes": self.sizes or None,
        }
