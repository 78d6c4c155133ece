"""A consumer-only run (--role consumer): what a producer of the user's sent, as zmqload's
consumers saw it (its sends are not seen: nothing is reconciled). Arrivals over time and sizes,
foreign (foreign/) and with zmqload's header (recvs/); a header-writer's holes from run.json."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

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
