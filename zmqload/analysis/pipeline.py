"""The report's Spark job: every metric over every run, collected as small lists of dicts
(aggregates only), then finished on the driver (finish.py). The receive summary goes back to Spark
only where the send counts need a join (`_small`). No pandas: thousands of rows, and no dependency.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterable, Mapping, Optional, Union, cast

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from ..contract import judge as judge_rule
from ..measure import queue_replay as queue_rule
from ..contract.derived import throughput_span
from ..contract.fates import (
    AMBIGUOUS_TAIL,
    FATES,
    TAIL_AT_CLOSE,
    merge_regions,
    regions_outside,
    reset_region,
    restart_region,
)
from ..measure.queue_replay import BIN_NS as QUEUE_BIN_NS
from ..contract.ids import Role
from ..contract.sizes import message_bytes
from ..contract.states import RunStatus
from ..contract.records import BOOL, FLOAT64, INT32, INT64, STRING, Schema
from . import finish, metrics
from .runs import RunInfo, load_records
from .summary_row import SummaryRow
from .view_counts import ViewCounts

ALL = metrics.ALL
LATENCY_METRICS = (*metrics.RECV_METRICS, "stall", "round_trip")
STAT_NAMES = [n for n, _ in metrics.PERCENTILES] + ["max", "mean"]
LATENCY_COLUMNS = [f"{m}_{s}_us" for m in LATENCY_METRICS for s in STAT_NAMES]

RUN_COLUMNS = [
    "run",
    "status",
    "interrupted",
    "pattern",
    "transport",
    "size",
    "sndhwm",
    "rcvhwm",
    "proxy_sndhwm",
    "proxy_rcvhwm",
    "linger_ms",
    "send_mode",
    "producers",
    "consumers",
    "fanout",
    "rate_per_producer",
    "clock_uncertainty_us",
    "serves",
]
# The first and last intended, actual send and receive times (CLOCK_MONOTONIC ns): the spans
# the throughput plot divides its first and last windows by.
SPAN_COLUMNS = (
    "t_first_intended_ns",
    "t_last_intended_ns",
    "t_first_send_ns",
    "t_last_send_ns",
    "t_first_recv_ns",
    "t_last_recv_ns",
)
# summary.parquet / summary.csv: one row per (run, consumer, stream), each column with its type.
_RUN_TYPES = {
    "run": STRING,
    "status": STRING,
    "interrupted": BOOL,
    "pattern": STRING,
    "transport": STRING,
    "size": STRING,
    "send_mode": STRING,
    "fanout": BOOL,
    "serves": BOOL,
    "rate_per_producer": FLOAT64,
    "clock_uncertainty_us": FLOAT64,
}
SUMMARY = Schema(
    tuple(
        [(c, _RUN_TYPES.get(c, INT64)) for c in RUN_COLUMNS]
        + [("consumer", INT64), ("stream", INT64), ("duration_s", FLOAT64)]
        + [(c, INT64) for c in SPAN_COLUMNS]
        + [(c, FLOAT64) for c in ("offered_rate", "send_rate", "recv_rate", "recv_mb_s")]
        + [
            (c, INT64)
            for c in (
                "attempted",
                "sent",
                "eagain",
                "timeout",
                "errors",
                "dropped_sender",
                "expected",
                "received",
                "unique",
                "duplicates",
                "reordered",
                "lost",
                "bytes_sent",
                "bytes_received",
            )
        ]
        + [("loss_ratio", FLOAT64)]
        + [
            (c, INT64)
            for c in (*FATES, "dropped", AMBIGUOUS_TAIL, "round_trips", *finish.SERVICE_COLUMNS)
        ]
        + [(c, FLOAT64) for c in LATENCY_COLUMNS]
        + [("depth_max", INT64)]
        + [
            (c, FLOAT64)
            for c in (
                "depth_peak_at_s",
                "depth_mean",
                "depth_p99",
                "queued_bytes_max",
                "queued_bytes_mean",
                "mean_size",
            )
        ]
        + [("backlog_went_in", INT64), ("backlog_came_out", INT64)]
    )
)
"""The report's summary table: every figure per (run, consumer, stream), typed once."""
SUMMARY_COLUMNS = SUMMARY.names

# Reordering needs receive order per stream: a sort of every record (measured 126 s per
# 100M on 2 cores). "auto" does it up to this many records and reports it as not measured above.
REORDER_AUTO_MAX = 20_000_000

# The intermediate tables handed back to Spark (see _small).
RS_SCHEMA = Schema.of(
    run=INT32,
    consumer=INT32,
    stream=INT32,
    received=INT64,
    unique=INT64,
    drained=INT64,
    seq_min=INT64,
    seq_max=INT64,
    t_first_recv_ns=INT64,
    t_last_recv_ns=INT64,
    bytes=INT64,
    duplicates=INT64,
    limit=INT64,
    got_below_limit=INT64,
)


@dataclass
class Analysis:
    runs: list[RunInfo]
    window_ns: int
    summary: list[SummaryRow]  # one per (run, consumer, stream), plus run totals (ALL, ALL)
    rates: list[dict[str, Any]]  # per (run, stream, window), sorted
    depth: list[
        dict[str, Any]
    ]  # per (run, consumer, stream, window) and (run, ALL, ALL, window), sorted
    hist: list[
        dict[str, Any]
    ]  # per (run, consumer, stream, metric, bucket) and (run, ALL, ALL, ...)
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    reorder_measured: bool = True
    topics: list[dict[str, Any]] = field(
        default_factory=list
    )  # --topics: per (run, topic, consumer)

    def run_rows(self) -> list[SummaryRow]:
        return [r for r in self.summary if r.is_run_total]


def collect(df: DataFrame) -> list[dict[str, Any]]:
    """Aggregates to the driver as dicts: through Arrow (`collect_table`) on Spark 4; Spark 3.5's
    rows keep their own types (maps stay dicts)."""
    if hasattr(df, "toArrow"):
        return cast(list[dict[str, Any]], collect_table(df).to_pylist())  # pyarrow: untyped
    return [r.asDict() for r in df.collect()]


def collect_table(df: DataFrame) -> pa.Table:
    """Records to the driver as one Arrow table, never as Python rows (millions of them)."""
    if hasattr(df, "toArrow"):
        return df.toArrow()
    from pyspark.sql.pandas.types import to_arrow_schema  # Spark 3.5: no DataFrame.toArrow

    return pa.Table.from_batches(
        getattr(df, "_collect_as_arrow")(), schema=to_arrow_schema(df.schema)
    )


def _small(spark: SparkSession, rows: list[dict[str, Any]], schema: Schema) -> DataFrame:
    """Collected aggregates back into Spark. Through Arrow where Spark takes a pyarrow Table
    (4.0+): row-by-row conversion of ~100k rows took ~10 s."""
    names = schema.names
    try:
        table = pa.table({n: [r.get(n) for r in rows] for n in names}, schema=schema.arrow)
        return spark.createDataFrame(table).select(*names)
    except (TypeError, ValueError):
        return spark.createDataFrame([tuple(r.get(n) for n in names) for r in rows], schema.ddl)


def rate(n: Optional[int], t_first: Optional[int], t_last: Optional[int]) -> Optional[float]:
    """Messages per second over [first, last]: n-1 intervals in (last - first) ns."""
    if n is None or t_first is None or t_last is None or n < 2 or t_last <= t_first:
        return None
    return (n - 1) * 1e9 / (t_last - t_first)


def _run_columns(info: RunInfo) -> dict[str, Any]:
    """The run-level columns of a summary row (its `run` comes with the row)."""
    w, schedule = info.workload, info.record.schedule
    return {
        "status": info.status.value,
        "interrupted": info.interrupted,
        "pattern": w.pattern,
        "transport": w.transport,
        "size": w.size_spec,
        "sndhwm": w.sndhwm,
        "rcvhwm": w.rcvhwm,
        "proxy_sndhwm": w.proxy_sndhwm,
        "proxy_rcvhwm": w.proxy_rcvhwm,
        "linger_ms": w.linger_ms,
        "send_mode": w.send_mode,
        "producers": w.producers,
        "consumers": info.consumers,
        "fanout": info.fanout,
        "serves": w.serves,  # a service of the user's: judged on its answers (finish.answered)
        "rate_per_producer": schedule.rate_per_producer if schedule is not None else w.rate,
        # placed runs: how far a one-way latency may be off through the hosts' clocks (null: one host)
        "clock_uncertainty_us": (
            info.record.placement.latency_uncertainty_ns() / 1e3
            if info.record.placement is not None
            else None
        ),
    }


def drain_completed(info: RunInfo) -> bool:
    """Whether every unreceived message counts as dropped (measure/reconcile.py's rule): the drain
    ran to completion and the run completed (a record without a drain: its consumers read
    until idle, as a completed drain does)."""
    drain = info.record.drain
    return (drain is None or drain.completed) and info.status is RunStatus.COMPLETE


def tail_placement(info: RunInfo) -> str:
    """Where drops after a consumer's last arrival happened, as the run decided it (run.json
    drain.tail_placement; a run that ended before deciding it: at close)."""
    drain = info.record.drain
    return (
        drain.tail_placement
        if drain is not None and drain.tail_placement is not None
        else TAIL_AT_CLOSE
    )


def view_died(info: RunInfo, consumer: int) -> bool:
    """Whether a worker on a view's path died (measure.reconcile's rule): a proxy, the
    view's consumer, or for round robin (ALL) any consumer, as any could hold a message."""
    died = info.died
    if died[Role.PROXY]:
        return True
    return bool(died[Role.CONSUMER]) if consumer == ALL else consumer in died[Role.CONSUMER]


def consumer_indices(info: RunInfo) -> list[int]:
    """The consumers that reported (run.json's consumers), else all the workload names."""
    return sorted(c.worker for c in info.record.consumers) or list(range(info.consumers))


def unseen_views(
    runs: list[RunInfo], rs: list[dict[str, Any]], topic_runs: metrics.TopicRuns
) -> list[dict[str, Any]]:
    """Empty receive rows for the (run, consumer, stream) views of runs with topics that received
    nothing, so that the send counts give every view its own expected sends."""
    seen = {(r["run"], r["consumer"], r["stream"]) for r in rs}
    return [
        {"run": i, "consumer": c, "stream": p.worker}
        for i in topic_runs
        for c in consumer_indices(runs[i])
        for p in runs[i].record.producers
        if (i, c, p.worker) not in seen
    ]


def drain_starts(runs: list[RunInfo]) -> dict[tuple[int, int], int]:
    """{(run number, consumer): t_drain_ns} of the consumers that began draining."""
    return {
        (i, c.worker): c.t_drain_ns
        for i, r in enumerate(runs)
        for c in r.record.consumers
        if c.t_drain_ns
    }


def certain_lines(
    spark_recvs: DataFrame,
    runs: list[RunInfo],
    rs: list[dict[str, Any]],
    fanout_runs: Collection[int],
) -> None:
    """Sets `limit` and `got_below_limit` on each receive summary row (in place): for runs
    whose drain was cut short, the seq below which an unreceived message cannot still be
    queued (measure/reconcile.py: one connection delivers in order), and how many distinct seqs
    arrived below it. A fan-out consumer's line is its own last arrival; a round-robin
    stream's is the lowest of every consumer's last arrival (-1, so 0, if one got none)."""
    cut = {i for i, r in enumerate(runs) if not drain_completed(r)}
    for r in rs:
        r["limit"], r["got_below_limit"] = None, 0
    round_robin = [i for i in cut if i not in fanout_runs and len(consumer_indices(runs[i])) > 1]
    lasts: dict[tuple[int, int], dict[int, int]] = defaultdict(dict)
    if round_robin:
        for x in collect(metrics.last_seq_per_consumer(spark_recvs, round_robin)):
            lasts[(x["run"], x["stream"])][x["consumer"]] = x["seq_max"]
    exact_needed: dict[tuple[int, int, int], int] = {}
    for r in rs:
        if r["run"] not in cut:
            continue
        if r["run"] in round_robin:
            got = lasts[(r["run"], r["stream"])]
            certain = min(got.get(c, -1) for c in consumer_indices(runs[r["run"]]))
        else:
            certain = r["seq_max"]
        r["limit"] = max(certain, 0)
        if r["limit"] <= r["seq_min"]:
            r["got_below_limit"] = 0
        elif r["limit"] == r["seq_max"]:
            r["got_below_limit"] = r["unique"] - 1
        else:
            exact_needed[(r["run"], r["consumer"], r["stream"])] = r["limit"]
    if exact_needed:
        got_below = {
            (x["run"], x["consumer"], x["stream"]): x["got_below_limit"]
            for x in collect(metrics.distinct_below(spark_recvs, exact_needed, fanout_runs))
        }
        for r in rs:
            key = (r["run"], r["consumer"], r["stream"])
            if key in exact_needed:
                r["got_below_limit"] = got_below.get(key, 0)


REGION_SCHEMA = Schema.of(
    run=INT32, consumer=INT32, stream=INT32, lo=INT64, hi=INT64, limit=INT64, seq_min=INT64
)


def reset_drops(
    spark: SparkSession,
    runs: list[RunInfo],
    sends: DataFrame,
    recvs: DataFrame,
    rs: list[dict[str, Any]],
    fanout_runs: Collection[int],
    topic_runs: metrics.TopicRuns | None = None,
    away: Mapping[ViewKey, list[tuple[int, int]]] | None = None,
) -> dict[tuple[int, int, int], tuple[int, int]]:
    """{(run, stream, consumer key): (start, mid)}: the drops of each kind lost across a connection
    reset (run.json resets), by the rule of contract/fates.py reset_region on marks from the
    records: k from the sends after each abort was made, then each consumer's high when it was asked
    for and its return from the receives. `away`: the restarts' regions of each view
    (restart_regions), whose losses are dropped_restart, not a reset's."""
    resets = {i: [x.t_ns for x in r.record.resets] for i, r in enumerate(runs) if r.record.resets}
    asked = {
        i: [x.t_ns - x.took_ns for x in r.record.resets]
        for i, r in enumerate(runs)
        if r.record.resets
    }
    firsts = {
        (x["run"], x["stream"], x["reset"]): x["k"]
        for x in collect(metrics.first_sent_after(sends, resets))
    }
    marks = {
        (x["run"], x["consumer"], x["stream"], x["reset"]): x
        for x in collect(metrics.reset_receipts(recvs, asked, firsts))
    }
    regions = []
    for r in rs:
        run, stream = r["run"], r["stream"]
        if run not in resets:
            continue
        consumers = consumer_indices(runs[run]) if r["consumer"] == ALL else [r["consumer"]]
        found = []
        for reset in range(len(resets[run])):
            mine = [marks.get((run, c, stream, reset), {}) for c in consumers]
            found.append(
                reset_region(
                    [-1 if m.get("received_by") is None else m["received_by"] for m in mine],
                    [m.get("back_at") for m in mine],
                )
            )
        regions += _region_rows(
            r,
            regions_outside(
                (x for x in found if x is not None),
                (away or {}).get((run, r["consumer"], stream), []),
            ),
        )
    return region_drops(spark, sends, recvs, regions, fanout_runs, topic_runs)


ViewKey = tuple[int, int, int]
"""(run, consumer key, stream): one view of one stream."""


def _region_rows(r: dict[str, Any], regions: Iterable[tuple[int, int]]) -> list[dict[str, Any]]:
    """REGION_SCHEMA rows of one view's (`r`: its receive summary) disjoint regions."""
    return [
        dict(
            run=r["run"],
            consumer=r["consumer"],
            stream=r["stream"],
            lo=lo,
            hi=hi,
            limit=r["limit"],
            seq_min=r["seq_min"],
        )
        for lo, hi in regions
    ]


def region_drops(
    spark: SparkSession,
    sends: DataFrame,
    recvs: DataFrame,
    regions: list[dict[str, Any]],
    fanout_runs: Collection[int],
    topic_runs: metrics.TopicRuns | None = None,
) -> dict[tuple[int, int, int], tuple[int, int]]:
    """{(run, stream, consumer key): (start, mid)}: the unreceived accepted sends in each view's
    disjoint `regions` (REGION_SCHEMA rows), before its first arrival and from it on."""
    if not regions:
        return {}
    losses = collect(
        metrics.reset_losses(
            sends, recvs, _small(spark, regions, REGION_SCHEMA), fanout_runs, topic_runs
        )
    )
    return {
        (x["run"], x["stream"], x["consumer"]): (
            x["reset_start"],
            x["reset_sent_mid"] - x["reset_got"],
        )
        for x in losses
    }


def restart_regions(
    runs: list[RunInfo], recvs: DataFrame, rs: list[dict[str, Any]]
) -> dict[ViewKey, list[tuple[int, int]]]:
    """{(run, consumer key, stream): its disjoint restart regions}: where the restarts of run.json
    (--restart) fall in each view, by the rule of contract/fates.py restart_region on marks from
    the receives (measure/restart_regions.py is the run's own): a consumer's from its receipts
    before and after its process ended, a producer's from each consumer's around its new
    process's first seq."""
    of_consumers = {
        i: [(int(x.worker[1:]), x.t_ns) for x in r.record.restarts if x.worker.startswith("c")]
        for i, r in enumerate(runs)
    }
    of_producers = {
        i: [(int(x.worker[1:]), x.first_seq) for x in r.record.restarts if x.worker.startswith("p")]
        for i, r in enumerate(runs)
    }
    of_consumers = {run: made for run, made in of_consumers.items() if made}
    of_producers = {run: made for run, made in of_producers.items() if made}
    marks = (
        {
            (x["run"], x["stream"], x["restart"]): x
            for x in collect(metrics.restart_receipts(recvs, of_consumers))
        }
        if of_consumers
        else {}
    )
    around = (
        {
            (x["run"], x["consumer"], x["stream"], x["restart"]): x
            for x in collect(metrics.producer_restart_receipts(recvs, of_producers))
        }
        if of_producers
        else {}
    )
    out: dict[ViewKey, list[tuple[int, int]]] = {}
    for r in rs:
        run, stream = r["run"], r["stream"]
        found = []
        for i, (consumer, _) in enumerate(of_consumers.get(run, [])):
            if r["consumer"] not in (ALL, consumer):  # fan-out: that consumer's view only
                continue
            m = marks.get((run, stream, i))
            before, after = (m["before"], m["after"]) if m else (None, None)
            found.append(restart_region(-1 if before is None else before, after))
        members = consumer_indices(runs[run]) if r["consumer"] == ALL else [r["consumer"]]
        for i, (producer, _) in enumerate(of_producers.get(run, [])):
            if producer != stream:
                continue
            got = [around.get((run, c, stream, i)) for c in members]
            highs = [-1 if m is None or m["high"] is None else m["high"] for m in got]
            lows = [m["low"] for m in got if m is not None and m["low"] is not None]
            found.append(restart_region(min(highs, default=-1), min(lows, default=None)))
        regions = merge_regions(x for x in found if x is not None)
        if regions:
            out[(run, r["consumer"], stream)] = regions
    return out


class _Steps:
    """Wall time per step, for --timings and the benchmark."""

    def __init__(self, log: Optional[Callable[[str], object]]):
        self.log, self.t = log, time.perf_counter()
        self.times: dict[str, float] = {}

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.times[name] = now - self.t
        if self.log:
            self.log(f"{name}: {now - self.t:.2f} s")
        self.t = now


def analyze(
    spark: SparkSession,
    runs: list[RunInfo],
    window_ms: float | None = None,
    reorder: Union[bool, str] = "auto",
    log: Optional[Callable[[str], object]] = None,
) -> Analysis:
    step = _Steps(log)
    window_ns = metrics.window_ns_for(
        window_ms, [r.record.summary.elapsed_s if r.record.summary else None for r in runs]
    )
    sends = load_records(spark, runs, "sends")
    recvs = load_records(spark, runs, "recvs")
    replies = (
        load_records(spark, runs, "replies") if any(r.parts_of("replies") for r in runs) else None
    )
    # The records are not cached: each query's scan of the parts costs less than building Spark's
    # in-memory copy did (2.4M and 5.9M records: a report 15-25% faster warm, as fast cold).

    # a service of the user's: its answers stand for the receipts (finish.answered)
    served = [i for i, r in enumerate(runs) if r.workload.serves]
    # Runs are numbered (their index in `runs`) inside Spark; ids come back in `_name_runs`.
    fanout_runs = [i for i, r in enumerate(runs) if r.fanout]
    topic_runs = {i: t for i, r in enumerate(runs) if (t := r.workload.topic_set) is not None}
    starts = drain_starts(runs)
    views = [
        (i, c, drain_completed(r), tail_placement(r), view_died(r, c))
        for i, r in enumerate(runs)
        for c in (consumer_indices(r) if r.fanout else [ALL])
    ]
    dead_streams = {
        i: sorted(r.died[Role.PRODUCER]) for i, r in enumerate(runs) if r.died[Role.PRODUCER]
    }
    if dead_streams:
        sends = metrics.with_received_sends(sends, recvs, dead_streams)

    rs = collect(metrics.recv_summary(recvs, fanout_runs, starts, backlog_windows(runs)))
    total_recvs = sum(r["received"] for r in rs)
    step("receive summary")
    certain_lines(recvs, runs, rs, fanout_runs)
    step("certain lines")
    edges = [
        (r["run"], r["consumer"], r["stream"], r["seq_min"], r["seq_max"], r["limit"]) for r in rs
    ]
    # One scan of the sends for counts and stall; cached, as two small queries read it.
    send_cells = metrics.send_cells(sends, edges).persist()
    if metrics.single_consumer_edges(edges) and not topic_runs:
        counts = collect(metrics.send_counts_from_cells(send_cells))
    else:  # fan-out or topics: the ranges per consumer need a join, so a scan of their own
        counts = collect(
            metrics.send_counts(
                sends, _small(spark, rs + unseen_views(runs, rs, topic_runs), RS_SCHEMA), topic_runs
            )
        )
    step("send counts")
    away = restart_regions(runs, recvs, rs) if any(r.record.restarts for r in runs) else {}
    rs_by = {(r["run"], r["consumer"], r["stream"]): r for r in rs}
    at_restart = region_drops(
        spark,
        sends,
        recvs,
        [row for key, regions in away.items() for row in _region_rows(rs_by[key], regions)],
        fanout_runs,
        topic_runs,
    )
    at_reset = (
        reset_drops(spark, runs, sends, recvs, rs, fanout_runs, topic_runs, away)
        if any(r.record.resets for r in runs)
        else {}
    )
    loss = finish.fates(counts, rs, views, dead_streams, at_reset, at_restart)
    step("fates")
    late: dict[tuple[int, int, int], int] = {}
    if reorder == "auto":
        reorder = total_recvs <= REORDER_AUTO_MAX
    if reorder:
        late = {
            (r["run"], r["consumer"], r["stream"]): r["reordered"]
            for r in collect(metrics.reordering(recvs, fanout_runs))
        }
    for row in loss:
        key = (row.run, row.consumer, row.stream)
        got = rs_by.get(key)  # None: the view received nothing
        if got is not None:
            row.t_first_recv_ns, row.t_last_recv_ns = got["t_first_recv_ns"], got["t_last_recv_ns"]
            row.bytes = got["bytes"]
        row.reordered = late.get(key, 0) if reorder else None
    if served:
        answers = (
            {(x["run"], x["stream"]): x for x in collect(metrics.answers(replies, served))}
            if replies
            else {}
        )
        finish.answered([row for row in loss if row.run in served], answers)

    step("reordering" if reorder else "reordering (skipped)")
    pairs = collect(metrics.latency_pairs(recvs, fanout_runs, starts))
    # The stall histogram from the cached send cells and, where replies exist, the req-rep
    # round trips: both small, collected in one job; the rest happens on the driver.
    others = metrics.stall_histogram(send_cells)
    if replies is not None:
        others = others.unionByName(metrics.round_trip_histogram(replies))
    hist = finish.latency_histograms(pairs, collect(others))
    send_cells.unpersist()
    step("latency histograms")
    merged: defaultdict[tuple[int, str, int], list[Any]] = defaultdict(lambda: [0, None, 0])
    for h in hist:
        m = merged[(h["run"], h["metric"], h["bucket"])]
        m[0] += h["count"]
        m[1] = h["max"] if m[1] is None else max(m[1], h["max"])
        m[2] += h["sum"] or 0
    hist += [
        {
            "run": k[0],
            "consumer": ALL,
            "stream": ALL,
            "metric": k[1],
            "bucket": k[2],
            "count": v[0],
            "max": v[1],
            "sum": v[2],
        }
        for k, v in merged.items()
    ]
    pct = finish.percentiles(hist)

    step("percentiles")
    send_w = collect(metrics.send_windows(sends, window_ns))
    # the receive windows at the queue's millisecond (measure/queue_replay.py); the report's windows
    # follow from them when they are whole milliseconds (one scan), else from a scan of their own
    recv_ms = collect(metrics.recv_windows(recvs, QUEUE_BIN_NS, fanout_runs))
    recv_w = (
        finish.rebin(recv_ms, window_ns // QUEUE_BIN_NS)
        if window_ns % QUEUE_BIN_NS == 0
        else collect(metrics.recv_windows(recvs, window_ns, fanout_runs))
    )
    if served and replies is not None:  # a service's answers over time
        recv_w += collect(metrics.answer_windows(replies, window_ns, served))
    rates = finish.rates_over_time(send_w, recv_w)
    step("rates over time")
    depth, dstats = queue(
        spark,
        runs,
        sends,
        recvs,
        [row for row in loss if row.run not in served],
        rs,
        recv_ms,
        window_ns,
        fanout_runs,
        topic_runs,
    )
    step("queue depth")
    per_topic = topic_figures(runs, sends, recvs, topic_runs) if topic_runs else []

    step("topics")
    summary = summarise(runs, loss, pct, dstats, starts, rs)
    for rows in (rates, depth, hist, per_topic):
        _name_runs(rows, runs)
    summary.sort(key=lambda r: (r.run, r.stream != ALL, r.stream, r.consumer))
    rates.sort(key=lambda r: (r["run"], r["stream"], r["window"]))
    depth.sort(key=lambda r: (r["run"], r["consumer"], r["stream"], r["window"]))
    step("summary")
    return Analysis(
        runs=runs,
        window_ns=window_ns,
        summary=summary,
        rates=rates,
        depth=depth,
        hist=hist,
        timings=step.times,
        reorder_measured=bool(reorder),
        topics=per_topic,
    )


def topic_figures(
    runs: list[RunInfo], sends: DataFrame, recvs: DataFrame, topic_runs: metrics.TopicRuns
) -> list[dict[str, Any]]:
    """Per (run, topic, consumer) of the runs with --topics: the topic's accepted sends, whether the
    consumer subscribed to it, what it expected and received of it, and lost (run.json's `topics`)."""
    sent_df, got_df = metrics.topic_counts(sends, recvs, topic_runs)
    sent = {(r["run"], r["topic"]): r["sent"] for r in collect(sent_df)}
    got = {(r["run"], r["consumer"], r["topic"]): r["received"] for r in collect(got_df)}
    out = []
    for i, t in topic_runs.items():
        for index, name in enumerate(t.names):
            for c in consumer_indices(runs[i]):
                mine = index in t.subscribed[c]
                expected = sent.get((i, index), 0) if mine else 0
                received = got.get((i, c, index), 0)
                out.append(
                    {
                        "run": i,
                        "topic": name,
                        "consumer": c,
                        "subscribed": mine,
                        "sent": sent.get((i, index), 0),
                        "expected": expected,
                        "received": received,
                        "lost": expected - received,
                    }
                )
    return out


def backlog_windows(runs: list[RunInfo]) -> dict[int, tuple[int, int]]:
    """{run number: [mid, end]} of the second half of sending (contract/judge.py's window, from
    run.json's schedule and producers, as `run` reads them)."""
    out = {}
    for i, r in enumerate(runs):
        record = r.record
        t0 = (record.summary.generator.t0_ns if record.summary is not None else 0) or 0
        window = judge_rule.backlog_window(
            t0,
            (p.t_first_send_ns for p in record.producers),
            (p.t_last_send_ns for p in record.producers),
        )
        if window is not None:
            out[i] = window
    return out


def producers_closed(runs: list[RunInfo]) -> dict[tuple[int, int], int]:
    """{(run number, stream): when the producer closed} (measure/queue_replay.py), from run.json."""
    return {
        (i, p.worker): closed
        for i, r in enumerate(runs)
        for p in r.record.producers
        if (closed := queue_rule.closed_ns(p.t_last_send_ns, p.close_ns, p.term_ns)) > 0
    }


def queue(
    spark: SparkSession,
    runs: list[RunInfo],
    sends: DataFrame,
    recvs: DataFrame,
    loss: list[ViewCounts],
    rs: list[dict[str, Any]],
    recv_ms: list[dict[str, Any]],
    window_ns: int,
    fanout_runs: list[int],
    topic_runs: metrics.TopicRuns | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The queue of every view and run (measure/queue_replay.py): (depth per report window for the plots,
    its stats with the exact peak). From the millisecond receive windows, the never-arrived messages
    that queued (a filtered scan of the sends at the tail of their streams, only for runs with
    such), and the events of the bins where a peak may lie (a filtered scan)."""
    firsts, leaves = finish.queue_thresholds(loss, rs, producers_closed(runs))
    unreceived = (
        metrics.unreceived_sends(sends, recvs, firsts, fanout_runs, topic_runs) if firsts else None
    )
    expected = sum(
        row.dropped_tail + row.stranded + row.unknown
        for row in loss
        if (row.run, row.consumer, row.stream) in firsts
    )
    u_table = None
    if unreceived is not None and expected <= finish.REPLAY_EVENTS:  # few: one scan, binned here
        u_table = collect_table(unreceived)
        u_bins = finish.time_bins(u_table)
    else:  # many (a run cut short): binned in Spark, and only those in the replayed bins collected
        u_bins = collect(metrics.time_bins(unreceived)) if unreceived is not None else []
    bins, mean_size, closing = finish.queue_bins(recv_ms, u_bins, leaves)
    pieces = finish.replay_pieces(bins)
    if unreceived is not None and u_table is None and pieces:
        every: dict[int, list[int]] = defaultdict(list)
        for piece in pieces:
            for run, ks in piece.items():
                every[run] += ks
        u_table = collect_table(metrics.times_in_bins(unreceived, every))
    replay = finish.PeakReplay(bins, u_table, leaves, closing)
    for piece in pieces:  # a piece at a time: the driver's memory does not grow with the run
        replay.add(piece, collect_table(metrics.recv_events_in_bins(recvs, piece, fanout_runs)))
    peaks = replay.peaks()
    t0 = {i: r.record.t0_ns for i, r in enumerate(runs) if r.record.t0_ns}
    return finish.queue_windows(bins, window_ns, mean_size), finish.queue_stats(
        bins, peaks, mean_size, t0
    )


def _name_runs(rows: list[dict[str, Any]], runs: list[RunInfo]) -> None:
    """Run numbers (indexes into `runs`) back to run ids, in place."""
    for r in rows:
        r["run"] = runs[r["run"]].run_id


def _sum(values: Iterable[Optional[int]]) -> int:
    known = [v for v in values if v is not None]
    return sum(known) if known else 0


def _min(values: Iterable[Optional[int]]) -> Optional[int]:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def _max(values: Iterable[Optional[int]]) -> Optional[int]:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def throughput(info: RunInfo, row: ViewCounts, drain_began: int | None) -> float | None:
    """Distinct messages received per second, as `run` computes its throughput_msgs
    (runner/collect.py): over the span from the first ok send to the last receive; with
    --consumer-delay-us and the fast drain (which skips that work) only what was delivered
    before the drain, over the time until the drain began."""
    w = info.workload
    counted, span_s = throughput_span(
        w.consumer_delay_us,
        w.drain,
        row.t_first_send_ns or 0,
        row.t_last_recv_ns or 0,
        drain_began or 0,
        row.unique,
        row.delivered,
    )
    return counted / span_s if span_s else None


def _sum_or_none(values: Iterable[Optional[int]]) -> Optional[int]:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def run_total(run: int, views: list[ViewCounts]) -> ViewCounts:
    """A run's counts over its views (consumer and stream ALL): the sends once per stream (they
    repeat per consumer), the receipts and fates of every view."""
    per_stream: dict[int, ViewCounts] = {}
    for v in views:
        per_stream.setdefault(v.stream, v)
    s = list(per_stream.values())
    total = ViewCounts(
        run=run,
        consumer=ALL,
        stream=ALL,
        attempted=_sum(v.attempted for v in s),
        sent=_sum(v.sent for v in s),
        sent_bytes=_sum(v.sent_bytes for v in s),
        eagain=_sum(v.eagain for v in s),
        timeout=_sum(v.timeout for v in s),
        errors=_sum(v.errors for v in s),
        dropped_sender=_sum(v.dropped_sender for v in s),
        expected=_sum(v.expected for v in views),
        received=_sum(v.received for v in views),
        unique=_sum(v.unique for v in views),
        duplicates=_sum(v.duplicates for v in views),
        lost=_sum(v.lost for v in views),
        delivered=_sum(v.delivered for v in views),
        drained=_sum(v.drained for v in views),
        dropped_start=_sum(v.dropped_start for v in views),
        dropped_mid=_sum(v.dropped_mid for v in views),
        dropped_tail=_sum(v.dropped_tail for v in views),
        dropped_reset=_sum(v.dropped_reset for v in views),
        dropped_restart=_sum(v.dropped_restart for v in views),
        stranded=_sum(v.stranded for v in views),
        unknown=_sum(v.unknown for v in views),
        dropped=_sum(v.dropped for v in views),
        dropped_tail_ambiguous=_sum(v.dropped_tail_ambiguous for v in views),
        bytes=_sum_or_none(v.bytes for v in views),  # None: a service's answers (bytes not seen)
        reordered=None
        if any(v.reordered is None for v in views)
        else _sum(v.reordered for v in views),
        unanswered=_sum_or_none(v.unanswered for v in s),
        echoed=_sum_or_none(v.echoed for v in s),
        by_order=_sum_or_none(v.by_order for v in s),  # a service's only
        t_first_intended_ns=_min(v.t_first_intended_ns for v in views),
        t_first_send_ns=_min(v.t_first_send_ns for v in views),
        t_first_recv_ns=_min(v.t_first_recv_ns for v in views),
        t_last_intended_ns=_max(v.t_last_intended_ns for v in views),
        t_last_send_ns=_max(v.t_last_send_ns for v in views),
        t_last_recv_ns=_max(v.t_last_recv_ns for v in views),
        copies=len({v.consumer for v in views}),
    )
    total.loss_ratio = total.lost / total.expected if total.expected else 0.0
    return total


DEPTH_COLUMNS = (
    "depth_max",
    "depth_peak_at_s",
    "depth_mean",
    "depth_p99",
    "queued_bytes_max",
    "queued_bytes_mean",
    "mean_size",
)
"""The queue's figures of a summary row (finish.queue_stats)."""


def summarise(
    runs: list[RunInfo],
    loss: list[ViewCounts],
    pct: list[dict[str, Any]],
    dstats: list[dict[str, Any]],
    starts: dict[tuple[int, int], int] | None = None,
    recv_sum: list[dict[str, Any]] | None = None,
) -> list[SummaryRow]:
    """One row per (run, consumer, stream) and a run total (consumer ALL, stream ALL), named by
    run id (`run` is still the run's number in what it reads). The run total carries the backlog
    rule's counts (contract/judge.py) from `recv_sum` (`metrics.recv_summary` rows), for runs
    with a window."""
    windows = backlog_windows(runs)
    went: defaultdict[int, list[int]] = defaultdict(lambda: [0, 0])
    for x in recv_sum or ():
        went[x["run"]][0] += x["went_in"] or 0
        went[x["run"]][1] += x["came_out"] or 0
    by_run: defaultdict[int, list[ViewCounts]] = defaultdict(list)
    for view in loss:
        by_run[view.run].append(view)
    totals = []
    for run, views in by_run.items():
        total = run_total(run, views)
        if run in windows:
            total.backlog_went_in, total.backlog_came_out = went[run]
        totals.append(total)

    pct_by: defaultdict[tuple[int, int, int], dict[str, Any]] = defaultdict(dict)
    for p in pct:
        for stat in STAT_NAMES:
            v = p.get(stat)
            pct_by[(p["run"], p["consumer"], p["stream"])][f"{p['metric']}_{stat}_us"] = (
                None if v is None else v / 1e3
            )
        if p["metric"] == "round_trip":  # completed requests: the replies counted
            pct_by[(p["run"], p["consumer"], p["stream"])]["round_trips"] = p["count"]
    dstats_by = {(d["run"], d["consumer"], d["stream"]): d for d in dstats}
    meta = {i: _run_columns(r) for i, r in enumerate(runs)}
    began = {
        i: min((v for (run, _), v in (starts or {}).items() if run == i), default=None)
        for i in range(len(runs))
    }
    summary_columns = set(SUMMARY_COLUMNS)
    out = []
    for r in loss + totals:
        info = runs[r.run]
        first, last = r.t_first_intended_ns, _max([r.t_last_recv_ns, r.t_last_send_ns])
        offered = rate(r.attempted, r.t_first_intended_ns, r.t_last_intended_ns)
        recv_rate = throughput(info, r, began.get(r.run))
        parts = info.workload.parts  # every frame the first's size (contract/sizes.py)
        bytes_received = None if r.bytes is None else message_bytes(r.bytes, parts)
        depth = dstats_by.get((r.run, r.consumer, r.stream), {})
        out.append(
            SummaryRow.of(
                {
                    **meta[r.run],
                    **{c: v for c, v in r.columns().items() if c in summary_columns},
                    "run": info.run_id,
                    "duration_s": (last - first) / 1e9
                    if first is not None and last is not None
                    else None,
                    # a fan-out run offers every message to each consumer: its total counts every copy
                    "offered_rate": offered * r.copies if offered is not None else None,
                    "send_rate": rate(r.sent, r.t_first_send_ns, r.t_last_send_ns),
                    "recv_rate": recv_rate,
                    "bytes_sent": None
                    if r.sent_bytes is None
                    else message_bytes(r.sent_bytes, parts),
                    "bytes_received": bytes_received,
                    "recv_mb_s": (
                        recv_rate * bytes_received / r.received / 1e6  # None: a service's
                        if recv_rate and r.received and bytes_received is not None
                        else None
                    ),
                    # a send has no consumer: a fan-out consumer's row takes its stream's stall
                    **pct_by.get((r.run, ALL, r.stream), {}),
                    **pct_by.get((r.run, r.consumer, r.stream), {}),
                    **{c: depth.get(c) for c in DEPTH_COLUMNS},
                }
            )
        )
    seen = {r.run for r in loss}
    for i, info in enumerate(
        runs
    ):  # runs with no records still get a row, so the report can say so
        if i not in seen:
            out.append(
                SummaryRow.of(
                    {**_run_columns(info), "run": info.run_id, "consumer": ALL, "stream": ALL}
                )
            )
    return out
