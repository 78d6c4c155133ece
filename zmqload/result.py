"""RunResult: the summary figures of one run, as attributes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .accounting import FATES
from .histogram import Histogram

PERCENTILES = (50, 90, 99, 99.9, 99.99, 100)


def _key(q: float) -> str:
    return "max" if q >= 100 else "p" + format(q, "g")


@dataclass
class RunResult:
    run_id: str
    run_dir: str
    status: str                                   # complete / interrupted / failed
    workload: dict
    attempted: int = 0
    sent: int = 0
    eagain: int = 0                               # dontwait drops at the sender
    timeout: int = 0                              # SNDTIMEO drops at the sender
    errors: int = 0
    expected: int = 0                             # deliveries expected (sent x consumers for fan-out)
    received: int = 0
    unique_received: int = 0
    duplicates: int = 0
    reordered: int = 0
    lost: int = 0                                 # dropped + stranded (expected - unique_received)
    # the fate of every accepted message (zmqload.accounting, docs/RECORDS.md)
    delivered: int = 0                            # arrived while the consumers worked normally
    drained: int = 0                              # was still queued when the producers finished
    dropped_start: int = 0                        # never arrived: before the consumer had joined
    dropped_mid: int = 0                          # never arrived: dropped mid-run (a full pipe)
    dropped_tail: int = 0                         # never arrived: lost at close / linger / term
    stranded: int = 0                             # unreceived when the drain was cut short: unknown
    drain: dict = field(default_factory=dict)     # mode, how it ended, when
    queue: dict = field(default_factory=dict)     # "peak": depth and its kernel/libzmq split; "series"
    elapsed_s: float = 0.0                        # first send to last receive
    send_rate: float = 0.0                        # msg/s attempted by the producers
    throughput_msgs: float = 0.0                  # msg/s received
    throughput_mb: float = 0.0                    # MB/s received (1 MB = 1e6 B)
    latency_intended: Histogram = field(default_factory=Histogram)
    latency_sent: Histogram = field(default_factory=Histogram)
    round_trip: Histogram = field(default_factory=Histogram)   # req-rep: reply time - intended send time
    streams: list = field(default_factory=list)
    producers: list = field(default_factory=list)
    consumers: list = field(default_factory=list)
    versions: dict = field(default_factory=dict)

    # The figures run.json keeps under "counters" and "summary" (docs/RECORDS.md).
    COUNTERS: ClassVar[tuple] = ("attempted", "sent", "eagain", "timeout", "errors", "expected", "received", "unique_received",
                "duplicates", "reordered", "lost", *FATES, "dropped")
    FIGURES: ClassVar[tuple] = ("queue_peak", "elapsed_s", "send_rate", "throughput_msgs", "throughput_mb", "loss_ratio",
               "latency_intended_ns", "latency_sent_ns", "round_trip_ns")

    def __repr__(self) -> str:
        return (f"RunResult({self.run_id!r}, status={self.status!r}, sent={self.sent}, received={self.received}, "
                f"lost={self.lost}, eagain={self.eagain}, throughput_msgs={self.throughput_msgs:.0f}, "
                f"p99_us={self.latency_us(99)})")

    @property
    def refused(self) -> int:
        """Messages the sending socket never accepted (EAGAIN with dontwait, SNDTIMEO expiry)."""
        return self.eagain + self.timeout

    @property
    def dropped(self) -> int:
        """Accepted messages that never arrived although the drain ran to completion."""
        return self.dropped_start + self.dropped_mid + self.dropped_tail

    @property
    def loss_ratio(self) -> float:
        return self.lost / self.expected if self.expected else 0.0

    def latency_us(self, q: float, since: str = "intended") -> float | None:
        """Latency percentile q (0-100, 100 = max) in microseconds, measured from the
        intended send time (default; free of coordinated omission), the actual one ("sent"),
        or the req-rep round trip ("round_trip", from the intended send time)."""
        value = self._histogram(since).percentile(q)
        return None if value is None else value / 1000.0

    def _histogram(self, since: str) -> Histogram:
        try:
            return {"intended": self.latency_intended, "sent": self.latency_sent,
                    "round_trip": self.round_trip}[since]
        except KeyError:
            raise ValueError(f"since must be 'intended', 'sent' or 'round_trip', not {since!r}")

    def latency_summary(self, since: str = "intended") -> dict:
        hist = self._histogram(since)
        return {_key(q): hist.percentile(q) for q in PERCENTILES}

    def summary(self) -> dict:
        """Every figure, JSON-ready (latencies in ns)."""
        return {
            "run_id": self.run_id, "run_dir": self.run_dir, "status": self.status,
            "pattern": self.workload.get("pattern"), "transport": self.workload.get("transport"),
            "size": self.workload.get("size"), "rate": self.workload.get("rate"),
            "attempted": self.attempted, "sent": self.sent, "eagain": self.eagain,
            "timeout": self.timeout, "errors": self.errors, "expected": self.expected,
            "received": self.received, "unique_received": self.unique_received,
            "duplicates": self.duplicates, "reordered": self.reordered, "lost": self.lost,
            **{name: getattr(self, name) for name in FATES}, "dropped": self.dropped, "drain": self.drain,
            "queue_peak": self.queue.get("peak", {}),
            "loss_ratio": self.loss_ratio, "elapsed_s": self.elapsed_s, "send_rate": self.send_rate,
            "throughput_msgs": self.throughput_msgs, "throughput_mb": self.throughput_mb,
            "latency_intended_ns": self.latency_summary("intended"),
            "latency_sent_ns": self.latency_summary("sent"),
            "round_trip_ns": self.latency_summary("round_trip") if self.round_trip.count else None,
            "streams": self.streams,
            "producers": [{k: v for k, v in p.items() if k != "sent_ok_map"} for p in self.producers],
            "consumers": self.consumers, "versions": self.versions,
        }
