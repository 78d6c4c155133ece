"""The report's summary row: every figure of one (run, consumer, stream) view, typed once where
the pipeline makes it (analysis/pipeline.py summarise) and read by attribute downstream.
`columns` is its flat form, the columns of summary.parquet; `of` reads that form back."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

ALL = -1
"""The consumer (or stream) of a view meaning "all of them": a run's total has both."""


@dataclass(frozen=True)
class Percentiles:
    """One latency's figures, µs (None: not measured), in the summary's column order."""

    p50: Optional[float] = None
    p90: Optional[float] = None
    p99: Optional[float] = None
    p99_9: Optional[float] = None
    p99_99: Optional[float] = None
    max: Optional[float] = None
    mean: Optional[float] = None


STATS = tuple(f.name for f in dataclasses.fields(Percentiles))
"""The figures of each latency, as its columns name them: `latency_intended_p99_us`."""


@dataclass(frozen=True)
class SummaryRow:
    """One view's figures (None: not measured, or not known for this run). The run's settings
    repeat on each of its rows; a run total has consumer and stream ALL."""

    run: str
    status: Optional[str] = None
    interrupted: Optional[bool] = None
    pattern: Optional[str] = None
    transport: Optional[str] = None
    size: Optional[str] = None
    sndhwm: Optional[int] = None
    rcvhwm: Optional[int] = None
    proxy_sndhwm: Optional[int] = None
    proxy_rcvhwm: Optional[int] = None
    linger_ms: Optional[int] = None
    send_mode: Optional[str] = None
    producers: Optional[int] = None
    consumers: Optional[int] = None
    fanout: Optional[bool] = None
    rate_per_producer: Optional[float] = None
    clock_uncertainty_us: Optional[float] = None
    serves: Optional[bool] = None
    consumer: int = ALL
    stream: int = ALL
    duration_s: Optional[float] = None
    t_first_intended_ns: Optional[int] = None
    t_last_intended_ns: Optional[int] = None
    t_first_send_ns: Optional[int] = None
    t_last_send_ns: Optional[int] = None
    t_first_recv_ns: Optional[int] = None
    t_last_recv_ns: Optional[int] = None
    offered_rate: Optional[float] = None
    send_rate: Optional[float] = None
    recv_rate: Optional[float] = None
    recv_mb_s: Optional[float] = None
    attempted: Optional[int] = None
    sent: Optional[int] = None
    eagain: Optional[int] = None
    timeout: Optional[int] = None
    errors: Optional[int] = None
    dropped_sender: Optional[int] = None
    expected: Optional[int] = None
    received: Optional[int] = None
    unique: Optional[int] = None
    duplicates: Optional[int] = None
    reordered: Optional[int] = None
    lost: Optional[int] = None
    bytes_sent: Optional[int] = None
    bytes_received: Optional[int] = None
    loss_ratio: Optional[float] = None
    delivered: Optional[int] = None
    drained: Optional[int] = None
    dropped_start: Optional[int] = None
    dropped_mid: Optional[int] = None
    dropped_tail: Optional[int] = None
    dropped_reset: Optional[int] = None
    dropped_restart: Optional[int] = None
    stranded: Optional[int] = None
    unknown: Optional[int] = None
    dropped: Optional[int] = None
    dropped_tail_ambiguous: Optional[int] = None
    round_trips: Optional[int] = None
    unanswered: Optional[int] = None
    echoed: Optional[int] = None
    by_order: Optional[int] = None
    latency_intended: Percentiles = field(default_factory=Percentiles)
    latency_sent: Percentiles = field(default_factory=Percentiles)
    latency_delivered: Percentiles = field(default_factory=Percentiles)
    latency_drained: Percentiles = field(default_factory=Percentiles)
    stall: Percentiles = field(default_factory=Percentiles)
    round_trip: Percentiles = field(default_factory=Percentiles)
    depth_max: Optional[int] = None
    depth_peak_at_s: Optional[float] = None
    depth_mean: Optional[float] = None
    depth_p99: Optional[float] = None
    queued_bytes_max: Optional[float] = None
    queued_bytes_mean: Optional[float] = None
    mean_size: Optional[float] = None
    backlog_went_in: Optional[int] = None
    backlog_came_out: Optional[int] = None

    @property
    def is_run_total(self) -> bool:
        return self.consumer == ALL and self.stream == ALL

    @property
    def judged_p99_us(self) -> Optional[float]:
        """The p99 a run is judged by (contract/judge.py): a service of the user's (req-rep with
        --role producer) on its round trip, every other run on its latency from the intended send."""
        return self.round_trip.p99 if self.serves else self.latency_intended.p99

    @property
    def judged_p99_column(self) -> str:
        """The column of `judged_p99_us`."""
        return "round_trip_p99_us" if self.serves else "latency_intended_p99_us"

    def column(self, name: str) -> Any:
        """The value of one flat column (a table's cell named by its column); KeyError if none."""
        if name in _PLAIN:
            return getattr(self, name)
        metric, stat = _LATENCY_COLUMNS[name]
        return getattr(getattr(self, metric), stat)

    def columns(self) -> dict[str, Any]:
        """The row's flat form: every column of summary.parquet, in its order."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Percentiles):
                out.update((f"{f.name}_{stat}_us", getattr(value, stat)) for stat in STATS)
            else:
                out[f.name] = value
        return out

    def blanked(self, names: Iterable[str]) -> SummaryRow:
        """The row with these columns unknown (None)."""
        return SummaryRow.of({**self.columns(), **dict.fromkeys(names)})

    @classmethod
    def of(cls, columns: Mapping[str, Any]) -> SummaryRow:
        """A row from its flat form (or a part of it: the rest unknown); ValueError for a name
        that is not a column."""
        fields: dict[str, Any] = {}
        latency: dict[str, dict[str, Any]] = {}
        for name, value in columns.items():
            if name in _PLAIN:
                fields[name] = value
            elif name in _LATENCY_COLUMNS:
                metric, stat = _LATENCY_COLUMNS[name]
                latency.setdefault(metric, {})[stat] = value
            else:
                raise ValueError(f"not a summary column: {name!r}")
        fields.update((metric, Percentiles(**stats)) for metric, stats in latency.items())
        return cls(**fields)


LATENCY_METRICS = tuple(f.name for f in dataclasses.fields(SummaryRow) if f.type == "Percentiles")
"""The latencies of a row, each a Percentiles."""
_PLAIN = frozenset(f.name for f in dataclasses.fields(SummaryRow)) - set(LATENCY_METRICS)
_LATENCY_COLUMNS = {f"{m}_{s}_us": (m, s) for m in LATENCY_METRICS for s in STATS}
