"""Runs of one side, whose other side is the user's and not seen: nothing is reconciled. A
consumer-only run: arrivals over time and sizes, with zmqload's header (recvs/) or foreign, and a
header-writer's holes (run.json). A producer-only run: sends offered, sent and refused over
time, and each sent message's wait past its intended time (the consumer's pushback)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from ..contract.wire import SendStatus
from .runs import RunInfo, load_records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# The two kinds of what arrives: a message with zmqload's header (recvs/), or any other (foreign/).
KINDS = {"recvs": "zmqload's header", "foreign": "foreign"}


@dataclass
class Sizes:
    messages: int
    min: int
    p50: float
    max: int
    mean: float


@dataclass
class ConsumerSide:
    """One consumer-only run's figures: per kind of message, arrivals per window (seconds since
    the run's first arrival, per second) and sizes."""

    info: RunInfo
    window_ns: int
    t0_ns: Optional[int] = None
    rates: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    sizes: dict[str, Sizes] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return self.info.run_id


def _per_window(df: DataFrame, window_ns: int) -> DataFrame:
    from pyspark.sql import functions as F

    return df.groupBy("run", F.floor(F.col("t_recv_ns") / window_ns).alias("w")).agg(
        F.count("*").alias("n")
    )


def _sizes(df: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return df.groupBy("run").agg(
        F.count("*").alias("messages"),
        F.min("size").alias("min"),
        F.expr("percentile(size, 0.5)").alias("p50"),
        F.max("size").alias("max"),
        F.avg("size").alias("mean"),
    )


def consumer_sides(spark: SparkSession, sides: list[RunInfo], window_ns: int) -> list[ConsumerSide]:
    """Each consumer-only run's figures, in one Spark job per kind over all of them."""
    out = [ConsumerSide(info, window_ns) for info in sides]
    if not sides:
        return out
    windows: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for kind, name in KINDS.items():
        if not any(s.parts.get(kind) for s in sides):
            continue
        df = load_records(spark, sides, kind)
        for row in _per_window(df, window_ns).collect():
            windows.setdefault((row["run"], name), []).append((int(row["w"]), int(row["n"])))
        for row in _sizes(df).collect():
            out[row["run"]].sizes[name] = Sizes(
                int(row["messages"]), int(row["min"]), float(row["p50"]), int(row["max"]),
                float(row["mean"]),
            )  # fmt: skip
    for i, side in enumerate(out):
        seen = [w for n in KINDS.values() for w, _ in windows.get((i, n), ())]
        if not seen:
            continue
        w0, last = min(seen), max(seen)
        side.t0_ns = w0 * window_ns
        for name in KINDS.values():
            counts = dict(windows.get((i, name), ()))
            if counts:  # every window from the first arrival of either kind to the last: 0 between
                side.rates[name] = [
                    ((w - w0) * window_ns / 1e9, counts.get(w, 0) * 1e9 / window_ns)
                    for w in range(w0, last + 1)
                ]
    return out


def stream_lines(info: RunInfo) -> list[dict[str, Any]]:
    """A header-writing producer's streams as the run accounted them (run.json): received,
    duplicates, reordered, holes (seqs never seen below the highest: a lower bound of loss) and
    their ranges."""
    lines = []
    for s in info.record.streams:
        ranges = [tuple(r) for rs in (s.missing_ranges or {}).values() for r in rs]
        lines.append(
            {
                "stream": s.stream,
                "received": s.received,
                "duplicates": s.duplicates,
                "reordered": s.reordered,
                "holes": s.holes,
                "missing": ranges,
            }
        )
    return lines


@dataclass
class ProducerSide:
    """One producer-only run's figures: offered (by intended time), sent and refused per window
    (seconds since the first intended send, per second); its send attempts by status (SendStatus
    names); the wait of a sent message past its intended time (p50, p99, max, µs)."""

    info: RunInfo
    window_ns: int
    rates: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    wait_us: dict[str, float] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return self.info.run_id


def producer_sides(spark: SparkSession, sides: list[RunInfo], window_ns: int) -> list[ProducerSide]:
    """Each producer-only run's figures, in three Spark queries over all of them."""
    from pyspark.sql import functions as F

    out = [ProducerSide(info, window_ns) for info in sides]
    if not any(s.parts_of("sends") for s in sides):
        return out
    sends = load_records(spark, sides, "sends")
    ok = F.col("status") == int(SendStatus.OK)
    by_intended = sends.groupBy("run", F.floor(F.col("t_intended_ns") / window_ns).alias("w")).agg(
        F.count("*").alias("offered"), F.sum((~ok).cast("long")).alias("refused")
    )
    by_sent = (
        sends.where(ok)
        .groupBy("run", F.floor(F.col("t_sent_ns") / window_ns).alias("w"))
        .agg(F.count("*").alias("sent"))
    )
    wait = F.col("t_sent_ns") - F.col("t_intended_ns")
    stats = sends.groupBy("run", "status").agg(
        F.count("*").alias("n"),
        F.percentile_approx(F.when(ok, wait), [0.5, 0.99], 10_000).alias("q"),
        F.max(F.when(ok, wait)).alias("max"),
    )
    windows: dict[tuple[int, str], dict[int, int]] = {}
    for row in by_intended.collect():
        for name in ("offered", "refused"):
            windows.setdefault((row["run"], name), {})[int(row["w"])] = int(row[name])
    for row in by_sent.collect():
        windows.setdefault((row["run"], "sent"), {})[int(row["w"])] = int(row["sent"])
    for row in stats.collect():
        side = out[row["run"]]
        side.statuses[SendStatus(row["status"]).name.lower()] = int(row["n"])
        if row["status"] == SendStatus.OK and row["max"] is not None:
            p50, p99 = row["q"]
            side.wait_us = {"p50": p50 / 1e3, "p99": p99 / 1e3, "max": row["max"] / 1e3}
    for i, side in enumerate(out):
        side.statuses = {  # in SendStatus order: ok, eagain, timeout, error
            s.name.lower(): side.statuses[s.name.lower()]
            for s in SendStatus
            if s.name.lower() in side.statuses
        }
        seen = [w for name in ("offered", "sent") for w in windows.get((i, name), {})]
        if not seen:
            continue
        w0, last = min(seen), max(seen)
        for name in ("offered", "sent", "refused"):
            counts = windows.get((i, name), {})
            if name != "refused" or any(counts.values()):
                side.rates[name] = [
                    ((w - w0) * window_ns / 1e9, counts.get(w, 0) * 1e9 / window_ns)
                    for w in range(w0, last + 1)
                ]
    return out
