"""Metric functions: record DataFrames (with a `run` column) to small aggregate DataFrames. None
collects; the caller decides what reaches the driver. Each is a partial aggregation over one scan
with keys of low cardinality, so 100M records shuffle few rows (docs/REPORT.md, "How it is
computed")."""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Optional

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ..contract import histogram as rule
from ..measure.queue_replay import BIN_NS as QUEUE_BIN_NS
from ..contract.topics import Topics
from ..contract.wire import SendStatus
from .summary_row import ALL as ALL  # the consumer (or stream) key meaning "all of them"

# Latency histograms: `run`'s layout and percentile rule (zmqload/contract/histogram.py), so
# the report's percentiles of a run equal run.json's.
PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p99_9", 0.999), ("p99_99", 0.9999))


def consumer_key(fanout_runs: Iterable[int] | None) -> Column:
    """The consumer a delivery is unique for: itself in fan-out runs (every consumer should
    get every message), ALL otherwise (a message is delivered once to any consumer)."""
    fanout_runs = list(fanout_runs or ())
    if not fanout_runs:
        return F.lit(ALL)
    return F.when(F.col("run").isin(fanout_runs), F.col("consumer")).otherwise(F.lit(ALL))


TopicRuns = Mapping[int, Topics]
"""{run number: its topics} of the runs with --topics."""


def topic_of(topics: Topics) -> Column:
    """The topic index of a record's seq (contract/topics.py's rule)."""
    pattern = F.array(*[F.lit(int(t)) for t in topics.pattern])
    return pattern[(F.col("seq") % F.lit(len(topics.pattern))).cast("int")]


def subscribed(topic_runs: TopicRuns | None) -> Column:
    """Whether a row's consumer subscribed to its seq's topic, so that the seq is in its view
    (contract/topics.py); True in runs without topics."""
    expr = F.lit(True)
    for run, topics in (topic_runs or {}).items():
        table = F.array(
            *[
                F.array(*[F.lit(t in subs) for t in range(len(topics.names))])
                for subs in topics.subscribed
            ]
        )
        expr = F.when(
            F.col("run") == F.lit(run), table[F.col("consumer")][topic_of(topics)]
        ).otherwise(expr)
    return expr


def topic_counts(
    sends: DataFrame, recvs: DataFrame, topic_runs: TopicRuns
) -> tuple[DataFrame, DataFrame]:
    """Per (run, topic) the accepted sends, and per (run, consumer, topic) the distinct seqs received,
    for the runs with topics."""
    runs = list(topic_runs)
    topic = F.lit(None).cast("int")
    for run, topics in topic_runs.items():
        topic = F.when(F.col("run") == F.lit(run), topic_of(topics)).otherwise(topic)
    sent = (
        sends.where(F.col("run").isin(runs) & (F.col("status") == SendStatus.OK))
        .groupBy("run", topic.alias("topic"))
        .agg(F.count(F.lit(1)).alias("sent"))
    )
    got = (
        recvs.where(F.col("run").isin(runs))
        .select("run", "consumer", "stream", "seq")
        .dropDuplicates()
        .groupBy("run", "consumer", topic.alias("topic"))
        .agg(F.count(F.lit(1)).alias("received"))
    )
    return sent, got


WORD = 64  # seqs per bitmap word: one long per (consumer, stream, seq div WORD)


def _per_consumer(values: dict[tuple[int, int], int] | None, default: int) -> Column:
    """A literal lookup of {(run, consumer): value} for each record's own consumer (not its
    key: in round-robin runs the drain began at a different time at every consumer)."""
    if not values:
        return F.lit(default).cast("long")
    packed = F.col("run").cast("long") * F.lit(1 << 16) + F.col("consumer").cast("long")
    table = F.create_map(
        *[x for (run, c), v in values.items() for x in (F.lit((run << 16) + c), F.lit(int(v)))]
    )
    return F.coalesce(table[packed], F.lit(default)).cast("long")


NEVER = 2**63 - 1  # a drain start no record reaches


def in_drain(drain_starts: dict[tuple[int, int], int] | None) -> Column:
    """True for a record received at or after its consumer began draining (t_drain_ns of
    run.json's consumers: {(run, consumer): t_drain_ns}; 0 or absent = never drained)."""
    starts = {k: v for k, v in (drain_starts or {}).items() if v}
    return F.col("t_recv_ns") >= _per_consumer(starts, NEVER)


def _words(rows: DataFrame, extra: Iterable[Column] = ()) -> DataFrame:
    """Per (run, consumer, stream, word): which seqs arrived, as one long of bits, so the
    distinct count of any group of words is exact (the sum of bit counts), whatever the
    duplicates. `early` holds the seqs with an arrival before the drain."""
    bit = F.expr(f"shiftleft(cast(1 as bigint), cast(seq % {WORD} as int))")
    return rows.groupBy("run", "consumer", "stream", F.expr(f"seq div {WORD}").alias("word")).agg(
        F.count(F.lit(1)).alias("n"),
        F.bit_or(bit).alias("bits"),
        F.bit_or(F.when(~F.col("drain"), bit).otherwise(F.lit(0).cast("long"))).alias("early"),
        *extra,
    )


def _per_run(values: dict[int, int], default: int) -> Column:
    """A literal lookup of {run: value} for each record's run."""
    if not values:
        return F.lit(default).cast("long")
    table = F.create_map(
        *[x for run, v in values.items() for x in (F.lit(run), F.lit(int(v)).cast("long"))]
    )
    return F.coalesce(table[F.col("run")], F.lit(default).cast("long"))


def recv_summary(
    recvs: DataFrame,
    fanout_runs: Iterable[int] = (),
    drain_starts: dict[tuple[int, int], int] | None = None,
    backlog_windows: dict[int, tuple[int, int]] | None = None,
) -> DataFrame:
    """Per (run, consumer, stream): received, unique, duplicates, drained (distinct seqs whose
    every arrival came in the drain, as measure/reconcile.py counts them), seq and time range, bytes;
    and the backlog rule's counts (contract/judge.py) for the runs in `backlog_windows` ({run:
    (mid, end)} of the second half of sending): `went_in`, records sent in [mid, end], and
    `came_out`, records received in it (0 elsewhere).

    Exact by construction: seqs are OR-ed into 64-bit words and counted with bit_count, so
    duplicates can neither hide behind gaps nor be faked by them (issue 14: the earlier
    power-sum shortcut could be fooled by 2+ duplicates). One scan; the words are a partial
    aggregation (<= records / 64 rows, far fewer after the map side), then summed."""
    windows = backlog_windows or {}
    if windows:
        mid, end = (
            _per_run({r: w[0] for r, w in windows.items()}, NEVER),
            _per_run({r: w[1] for r, w in windows.items()}, 0),
        )
        went_in = ((F.col("t_sent_ns") >= mid) & (F.col("t_sent_ns") <= end)).cast("long")
        came_out = ((F.col("t_recv_ns") >= mid) & (F.col("t_recv_ns") <= end)).cast("long")
    else:
        went_in = came_out = F.lit(0).cast("long")
    rows = recvs.select(
        "run",
        consumer_key(fanout_runs).alias("consumer"),
        "stream",
        "seq",
        in_drain(drain_starts).alias("drain"),
        "t_recv_ns",
        "size",
        went_in.alias("went_in"),
        came_out.alias("came_out"),
    )
    words = _words(
        rows,
        (
            F.min("seq").alias("seq_min"),
            F.max("seq").alias("seq_max"),
            F.min("t_recv_ns").alias("t_first_recv_ns"),
            F.max("t_recv_ns").alias("t_last_recv_ns"),
            F.sum(F.col("size").cast("long")).alias("bytes"),
            F.sum("went_in").alias("went_in"),
            F.sum("came_out").alias("came_out"),
        ),
    )
    return (
        words.groupBy("run", "consumer", "stream")
        .agg(
            F.sum("n").alias("received"),
            F.sum(F.bit_count("bits")).cast("long").alias("unique"),
            F.sum(F.bit_count(F.col("bits").bitwiseAND(F.bitwise_not("early"))))
            .cast("long")
            .alias("drained"),
            F.min("seq_min").alias("seq_min"),
            F.max("seq_max").alias("seq_max"),
            F.min("t_first_recv_ns").alias("t_first_recv_ns"),
            F.max("t_last_recv_ns").alias("t_last_recv_ns"),
            F.sum("bytes").alias("bytes"),
            F.sum("went_in").cast("long").alias("went_in"),
            F.sum("came_out").cast("long").alias("came_out"),
        )
        .withColumn("duplicates", F.col("received") - F.col("unique"))
    )


def last_seq_per_consumer(recvs: DataFrame, runs: Iterable[int]) -> DataFrame:
    """Per (run, consumer, stream) the highest seq each real consumer received, for the
    given runs only: the certain line of round-robin runs whose drain was cut short."""
    return (
        recvs.where(F.col("run").isin(list(runs)))
        .groupBy("run", "consumer", "stream")
        .agg(F.max("seq").alias("seq_max"))
    )


def distinct_below(
    recvs: DataFrame, limits: dict[tuple[int, int, int], int], fanout_runs: Iterable[int] = ()
) -> DataFrame:
    """Exact distinct seqs below a limit per (run, consumer key, stream), for the views in
    `limits` ({(run, consumer key, stream): limit}) only."""
    key = consumer_key(fanout_runs)
    packed = (
        F.col("run").cast("long") * F.lit(1 << 40)
        + (key.cast("long") + 1) * F.lit(1 << 20)
        + F.col("stream")
    )
    table = F.create_map(
        *[
            x
            for (run, c, st), lim in limits.items()
            for x in (F.lit((run << 40) + ((c + 1) << 20) + st), F.lit(int(lim)))
        ]
    )
    rows = recvs.select(
        "run",
        key.alias("consumer"),
        "stream",
        "seq",
        table[packed].alias("limit"),
        F.lit(True).alias("drain"),
    ).where(F.col("seq") < F.col("limit"))
    return (
        _words(rows)
        .groupBy("run", "consumer", "stream")
        .agg(F.sum(F.bit_count("bits")).cast("long").alias("got_below_limit"))
    )


def send_counts(
    sends: DataFrame, recv_sum: DataFrame, topic_runs: TopicRuns | None = None
) -> DataFrame:
    """Per (run, stream, consumer): send attempts by outcome, and how many ok sends fall
    before the first / after the last seq that consumer received and below its certain
    line (`limit`), with the small per-consumer ranges broadcast. consumer is null for a
    stream nobody got. `expected` (and the positions) count only the sends of the consumer's topics
    (`subscribed`): a row per consumer and stream of a run with topics must be in `recv_sum`.

    For fan-out runs and runs with topics; where every stream of every run has one consumer key,
    `send_cells` + `send_counts_from_cells` give the same without a join
    (literal map lookups: measured 17.6 s -> see docs/BENCHMARKS.md).
    """
    joined = sends.join(
        F.broadcast(recv_sum.select("run", "stream", "consumer", "seq_min", "seq_max", "limit")),
        ["run", "stream"],
        "left",
    )
    rows = joined.select(
        "run",
        "stream",
        "consumer",
        "status",
        F.lit(1).alias("n"),
        F.col("size").cast("long").alias("bytes"),
        _seq_position(F.col("seq_min"), F.col("seq_max")).alias("pos"),
        _below(F.col("limit")).alias("below"),
        subscribed(topic_runs).alias("mine"),
        *[F.col(src).alias(f) for f, src in _SEND_TIME_COLUMNS],
    )
    return send_counts_from_cells(rows)


def _below(limit: Column) -> Column:
    """Whether a send's seq lies below the certain line (always, when there is none)."""
    return F.when(limit.isNull(), F.lit(True)).otherwise(F.col("seq") < limit)


# The first / last times per send row, named as in `send_cells` (where they are per cell).
_SEND_TIME_COLUMNS = (
    ("t_first_intended_ns", "t_intended_ns"),
    ("t_last_intended_ns", "t_intended_ns"),
    ("t_first_send_ns", "t_sent_ns"),
    ("t_last_send_ns", "t_sent_ns"),
)


def _seq_position(seq_min: Column, seq_max: Column) -> Column:
    """Where a send's seq lies against the received range: -1 before, 0 inside, 1 after,
    null when nobody received that stream."""
    return (
        F.when(seq_min.isNull(), F.lit(None))
        .when(F.col("seq") < seq_min, F.lit(-1))
        .when(F.col("seq") > seq_max, F.lit(1))
        .otherwise(F.lit(0))
        .cast("int")
    )


def send_counts_from_cells(rows: DataFrame) -> DataFrame:
    """The send counts from `send_cells` made with single-consumer edges, or from the rows
    `send_counts` joins (same columns, n = 1): the one place the outcome rules are written."""
    ok = F.col("status") == SendStatus.OK
    mine = ok & (F.col("mine") if "mine" in rows.columns else F.lit(True))  # in the consumer's view

    def count_if(cond: Column) -> Column:
        return F.sum(F.when(cond, F.col("n")).otherwise(0)).cast("long")

    return rows.groupBy("run", "stream", "consumer").agg(
        F.sum("n").cast("long").alias("attempted"),
        count_if(ok).alias("sent"),
        count_if(mine).alias("expected"),
        F.sum(F.when(ok, F.col("bytes")).otherwise(0)).cast("long").alias("sent_bytes"),
        count_if(F.col("status") == SendStatus.EAGAIN).alias("eagain"),
        count_if(F.col("status") == SendStatus.TIMEOUT).alias("timeout"),
        count_if(F.col("status") == SendStatus.ERROR).alias("errors"),
        count_if(mine & (F.col("pos") == -1)).alias("sent_before_first"),
        count_if(mine & (F.col("pos") == 1)).alias("sent_after_last"),
        count_if(mine & F.col("below")).alias("sent_below_limit"),
        F.min("t_first_intended_ns").alias("t_first_intended_ns"),
        F.max("t_last_intended_ns").alias("t_last_intended_ns"),
        F.min(F.when(ok, F.col("t_first_send_ns"))).alias("t_first_send_ns"),
        F.max(F.when(ok, F.col("t_last_send_ns"))).alias("t_last_send_ns"),
    )


def _on_dead_stream(dead_streams: dict[int, list[int]] | None) -> Column:
    """Whether a row's stream is one whose producer died: {run number: [streams]}."""
    died = F.lit(False)
    for run, streams in (dead_streams or {}).items():
        if streams:
            died = died | ((F.col("run") == F.lit(run)) & F.col("stream").isin(list(streams)))
    return died


def with_received_sends(
    sends: DataFrame, recvs: DataFrame, dead_streams: dict[int, list[int]]
) -> DataFrame:
    """The send records with those a dead producer lost rebuilt from its consumers' receive
    records (which carry the send times and size): a message that arrived was evidently
    sent, as the run counts it (runner/salvage.py). Only dead producers' streams are
    joined, so complete runs pay nothing."""
    on_dead = _on_dead_stream(dead_streams)
    ok = sends.where(on_dead & (F.col("status") == SendStatus.OK)).select("run", "stream", "seq")
    got = (
        recvs.where(on_dead)
        .groupBy("run", "stream", "seq")
        .agg(
            F.min("t_intended_ns").alias("t_intended_ns"),
            F.min("t_sent_ns").alias("t_sent_ns"),
            F.first("size").alias("size"),
        )
    )
    lost_records = got.join(ok, ["run", "stream", "seq"], "left_anti").withColumn(
        "status", F.lit(int(SendStatus.OK)).cast(sends.schema["status"].dataType)
    )
    return sends.unionByName(lost_records.select(*sends.columns))


def _reset_times(resets: Mapping[int, list[int]]) -> Column:
    """Each record's run's reset times ({run: [t_ns, ...]}), exploded with posexplode into
    (reset, t_reset_ns): one row per record and reset."""
    table = F.create_map(
        *[
            x
            for run, times in resets.items()
            for x in (F.lit(run), F.array(*[F.lit(int(t)) for t in times]))
        ]
    )
    return F.posexplode(table[F.col("run")]).alias("reset", "t_reset_ns")


def first_sent_after(sends: DataFrame, resets: Mapping[int, list[int]]) -> DataFrame:
    """Per (run, stream, reset): `k`, the first seq sent after the reset (contract/fates.py
    reset_region), for the runs in `resets` ({run: [t_ns]}) only."""
    rows = sends.where(F.col("run").isin(list(resets))).select(
        "run", "stream", "seq", "t_sent_ns", _reset_times(resets)
    )
    return (
        rows.where(F.col("t_sent_ns") > F.col("t_reset_ns"))
        .groupBy("run", "stream", "reset")
        .agg(F.min("seq").alias("k"))
    )


def reset_receipts(
    recvs: DataFrame, resets: Mapping[int, list[int]], firsts: Mapping[tuple[int, int, int], int]
) -> DataFrame:
    """Per (run, real consumer, stream, reset): `received_by`, the highest seq received by the
    reset's time in `resets` (when its abort was asked for), and `back_at`, the first received at or after `firsts`' k ({(run, stream, reset): k}):
    the marks of contract/fates.py reset_region."""
    key = (
        F.col("run").cast("long") * F.lit(1 << 40)
        + F.col("stream").cast("long") * F.lit(1 << 20)
        + F.col("reset")
    )
    table = F.create_map(
        *[
            x
            for (run, st, reset), k in firsts.items()
            for x in (F.lit((run << 40) + (st << 20) + reset), F.lit(int(k)))
        ]
    )
    rows = recvs.where(F.col("run").isin(list(resets))).select(
        "run", "consumer", "stream", "seq", "t_recv_ns", _reset_times(resets)
    )
    k = table[key] if firsts else F.lit(None).cast("long")
    return rows.groupBy("run", "consumer", "stream", "reset").agg(
        F.max(F.when(F.col("t_recv_ns") <= F.col("t_reset_ns"), F.col("seq"))).alias("received_by"),
        F.min(F.when(F.col("seq") >= k, F.col("seq"))).alias("back_at"),
    )


def _restarted(restarts: Mapping[int, list[tuple[int, int]]]) -> Column:
    """{(run << 20) + i: who made run's i-th restart (a consumer or a stream)} as a Spark map."""
    return F.create_map(
        *[
            x
            for run, made in restarts.items()
            for i, (who, _) in enumerate(made)
            for x in (F.lit((run << 20) + i).cast("long"), F.lit(who))
        ]
    )


def restart_receipts(recvs: DataFrame, restarts: Mapping[int, list[tuple[int, int]]]) -> DataFrame:
    """Per (run, stream, restart): `before`, the highest seq the restarted consumer received by the
    time its process ended, and `after`, the lowest it received after that (its new process's
    first): the marks of contract/fates.py restart_region. `restarts`: {run: [(consumer, t_ns)]},
    in each run's order (run.json restarts). The run's own rule tells the processes apart by their
    records' names; every row of an ended process precedes its end, so time tells them apart too."""
    whose = _restarted(restarts)
    rows = recvs.where(F.col("run").isin(list(restarts))).select(
        "run",
        "consumer",
        "stream",
        "seq",
        "t_recv_ns",
        _reset_times({run: [t for _, t in made] for run, made in restarts.items()}),
    )
    rows = rows.where(
        F.col("consumer") == whose[F.col("run").cast("long") * F.lit(1 << 20) + F.col("reset")]
    )
    return rows.groupBy("run", "stream", F.col("reset").alias("restart")).agg(
        F.max(F.when(F.col("t_recv_ns") <= F.col("t_reset_ns"), F.col("seq"))).alias("before"),
        F.min(F.when(F.col("t_recv_ns") > F.col("t_reset_ns"), F.col("seq"))).alias("after"),
    )


def producer_restart_receipts(
    recvs: DataFrame, restarts: Mapping[int, list[tuple[int, int]]]
) -> DataFrame:
    """Per (run, real consumer, stream, restart) of a producer's restarts: `high`, the highest seq
    of its stream the consumer received below its new process's first seq, and `low`, the lowest
    at or above it: the marks of contract/fates.py restart_region. `restarts`: {run: [(stream,
    first_seq)]}, in each run's order of its producers' restarts."""
    table = F.create_map(
        *[
            x
            for run, made in restarts.items()
            for x in (F.lit(run), F.array(*[F.lit(int(seq)).cast("long") for _, seq in made]))
        ]
    )
    streams = _restarted(restarts)
    rows = recvs.where(F.col("run").isin(list(restarts))).select(
        "run",
        "consumer",
        "stream",
        "seq",
        F.posexplode(table[F.col("run")]).alias("restart", "first_seq"),
    )
    rows = rows.where(
        F.col("stream") == streams[F.col("run").cast("long") * F.lit(1 << 20) + F.col("restart")]
    )
    return rows.groupBy("run", "consumer", "stream", "restart").agg(
        F.max(F.when(F.col("seq") < F.col("first_seq"), F.col("seq"))).alias("high"),
        F.min(F.when(F.col("seq") >= F.col("first_seq"), F.col("seq"))).alias("low"),
    )


def reset_losses(
    sends: DataFrame,
    recvs: DataFrame,
    regions: DataFrame,
    fanout_runs: Iterable[int] = (),
    topic_runs: TopicRuns | None = None,
) -> DataFrame:
    """Per (run, consumer key, stream) of `regions` (run, consumer, stream, lo, hi, limit, seq_min:
    the disjoint reset regions of each view, its certain line and first arrival): the ok sends in
    them below the line before the first arrival (`reset_start`) and from it on (`reset_sent_mid`),
    and the distinct seqs that view received there (`reset_got`); with topics, of the view's topics."""
    ranges = F.broadcast(regions)
    in_range = (F.col("seq") >= F.col("lo")) & (F.col("seq") < F.col("hi")) & _below(F.col("limit"))
    sent = (
        sends.where(F.col("status") == SendStatus.OK)
        .join(ranges, ["run", "stream"])
        .where(in_range & subscribed(topic_runs))
        .groupBy("run", "consumer", "stream")
        .agg(
            F.sum((F.col("seq") < F.col("seq_min")).cast("long")).alias("reset_start"),
            F.sum((F.col("seq") >= F.col("seq_min")).cast("long")).alias("reset_sent_mid"),
        )
    )
    got = (
        recvs.select(
            "run",
            consumer_key(fanout_runs).alias("consumer"),
            "stream",
            "seq",
            F.lit(True).alias("drain"),
        )
        .join(ranges, ["run", "consumer", "stream"])
        .where(in_range)
    )
    got = (
        _words(got)
        .groupBy("run", "consumer", "stream")
        .agg(F.sum(F.bit_count("bits")).cast("long").alias("reset_got"))
    )
    return sent.join(got, ["run", "consumer", "stream"], "left").fillna(0, ["reset_got"])


def reordering(recvs: DataFrame, fanout_runs: Iterable[int] = ()) -> DataFrame:
    """Per (run, consumer, stream): messages that arrived after a higher seq of the same stream
    at the same consumer ("late"; a duplicate arriving later counts too), in receive order.

    The window is partitioned by (run, consumer, stream), so it spreads over streams; a single
    stream is one partition (one core), the cost of needing receive order at all.
    """
    w = (
        Window.partitionBy("run", "consumer", "stream")
        .orderBy("t_recv_ns", "seq")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    r = recvs.select("run", "consumer", "stream", "seq", "t_recv_ns")
    flagged = r.withColumn("late", (F.col("seq") < F.max("seq").over(w)).cast("int"))
    out = flagged.groupBy("run", "consumer", "stream").agg(
        F.sum("late").cast("long").alias("reordered")
    )
    key = consumer_key(fanout_runs)
    return (
        out.withColumn("consumer", key)
        .groupBy("run", "consumer", "stream")
        .agg(F.sum("reordered").alias("reordered"))
    )


def _bucket_by_bit_length(v: str, lo: int, hi: int) -> str:
    """SQL for the bucket of column v: a binary search on its bit length b by comparisons,
    each leaf the bucket formula for its b. Values below the range go to the lowest leaf
    (negative ones too), values above it to the highest."""
    if lo == hi:
        if lo <= rule.SIGNIFICANT_BITS:
            return f"greatest({v}, 0L)"  # below 2 * SUB_BUCKETS a bucket per value; <= 0 is 0
        shift = lo - rule.SIGNIFICANT_BITS
        if shift > rule.MAX_SHIFT:
            return str(rule.N_BUCKETS - 1)
        # (shift + 1) * SUB_BUCKETS + (v >> shift) - SUB_BUCKETS, with the leaf's shift
        return f"({shift * rule.SUB_BUCKETS} + shiftright({v}, {shift}))"
    mid = (lo + hi + 1) // 2  # b >= mid  <=>  v >= 2 ** (mid - 1)
    return (
        f"case when {v} >= {1 << (mid - 1)}L then {_bucket_by_bit_length(v, mid, hi)} "
        f"else {_bucket_by_bit_length(v, lo, mid - 1)} end"
    )


def log_bucket(column: str) -> Column:
    """Histogram bucket of a bigint column's value (contract/histogram.py's layout, as
    zmqload.measure.histogram and the engine fill it; values <= 0 are bucket 0).

    The bit length is found by six comparisons, not log2: the log2 version (a double log,
    corrected by one either way) made the latency scan of 100M records 2.5x slower (10.2 s
    vs 4.1 s per bucket column, warm). Give it a column, not an expression: the value is
    read at every comparison, and an expression would be generated as code at each (the
    JIT then left the scan's method uncompiled). One SQL expression, one Py4J call."""
    top = rule.SIGNIFICANT_BITS + rule.MAX_SHIFT + 1  # this bit length and above: the last bucket
    return F.expr(f"cast({_bucket_by_bit_length(column, rule.SIGNIFICANT_BITS, top)} as int)")


def latency_pairs(
    recvs: DataFrame,
    fanout_runs: Iterable[int] = (),
    drain_starts: dict[tuple[int, int], int] | None = None,
) -> DataFrame:
    """Both receive latencies in one scan: per (run, consumer key, stream, drain, bi, bs) the
    count, max and sum of each latency, where bi / bs are the log buckets of the latency from
    the intended and from the actual send time and drain whether the record came in its
    consumer's drain; `finish.latency_histograms` splits the pairs. The consumer key is the
    consumer itself in fan-out runs (each has its own latency), ALL otherwise. The two
    buckets are highly correlated, so the pairs stay few (~150k for 100M records).

    Not crossed with the time windows (`recv_windows`) to share a scan: the cross product
    held 2.3M cells at 100M records and took 13.2 s against 7.8 s for the two scans (warm)."""
    lat = recvs.select(
        "run",
        consumer_key(fanout_runs).alias("consumer"),
        "stream",
        in_drain(drain_starts).alias("drain"),
        (F.col("t_recv_ns") - F.col("t_intended_ns")).alias("li"),
        (F.col("t_recv_ns") - F.col("t_sent_ns")).alias("ls"),
    )
    return lat.groupBy(
        "run",
        "consumer",
        "stream",
        "drain",
        log_bucket("li").alias("bi"),
        log_bucket("ls").alias("bs"),
    ).agg(
        F.count(F.lit(1)).alias("n"),
        F.max("li").alias("mi"),
        F.max("ls").alias("ms"),
        F.sum("li").alias("si"),
        F.sum("ls").alias("ss"),
    )


Edge = tuple[int, int, int, int, int, Optional[int]]
"""A receive summary row as `send_cells` takes it: (run, consumer, stream, seq_min, seq_max, limit)."""


def send_cells(sends: DataFrame, edges: list[Edge] | None = None) -> DataFrame:
    """One scan of the send records for the stall histogram and (when
    `single_consumer_edges(edges)`) the send counts: per (run, stream, consumer, status,
    bucket of the stall (ok sends; -2 otherwise), pos = `_seq_position` against the stream's
    received range, below its certain line) the count, stall max and sum, and first / last
    times: a few thousand cells at any run length.

    `edges` is the receive summary collected as (run, consumer, stream, seq_min, seq_max,
    limit) tuples; otherwise (fan-out) consumer and pos are null and the counts come from
    `send_counts`. The time windows are a scan of their own (`send_windows`): crossed with
    the stall buckets in this one they made 814k cells at 100M records, 10.3 s against 7.8 s
    for the two scans (warm)."""
    ok = F.col("status") == SendStatus.OK
    stall = F.col("t_sent_ns") - F.col("t_intended_ns")
    consumer, seq_min, seq_max, limit = _edge_lookup(edges)
    rows = sends.select(
        "run",
        "stream",
        consumer.alias("consumer"),
        "status",
        ok.alias("ok"),
        _seq_position(seq_min, seq_max).alias("pos"),
        _below(limit).alias("below"),
        stall.alias("v"),
        "t_intended_ns",
        "t_sent_ns",
        "size",
    )
    return rows.groupBy(
        "run",
        "stream",
        "consumer",
        "status",
        F.when(F.col("ok"), log_bucket("v")).otherwise(F.lit(-2)).alias("bucket"),
        "pos",
        "below",
    ).agg(
        F.count(F.lit(1)).alias("n"),
        F.max("v").alias("max"),
        F.sum("v").alias("sum"),
        F.sum(F.col("size").cast("long")).alias("bytes"),
        *[
            (F.min if f.startswith("t_first") else F.max)(src).alias(f)
            for f, src in _SEND_TIME_COLUMNS
        ],
    )


def single_consumer_edges(edges: list[Edge] | None) -> bool:
    """True when every stream of every run has one receive range (no fan-out), so the range is
    a literal map lookup per row instead of a join."""
    return (
        edges is not None
        and len({(e[0], e[2]) for e in edges}) == len(edges)
        and len(edges) <= 5000
    )


def _edge_lookup(edges: list[Edge] | None) -> tuple[Column, Column, Column, Column]:
    """(consumer, seq_min, seq_max, limit) of each send row's run and stream as literal map
    lookups; nulls where unknown (no edges, not single-consumer, a stream nobody received, no
    certain line)."""
    if not edges or not single_consumer_edges(edges):
        return (
            F.lit(None).cast("int"),
            F.lit(None).cast("long"),
            F.lit(None).cast("long"),
            F.lit(None).cast("long"),
        )
    key = F.col("run").cast("long") * F.lit(1 << 32) + F.col("stream")  # (run, stream) in one long

    def lookup(i: int) -> Column:
        pairs = [x for e in edges for x in (F.lit((e[0] << 32) + e[2]), F.lit(e[i]).cast("long"))]
        return F.create_map(*pairs)[key]

    return lookup(1).cast("int"), lookup(3), lookup(4), lookup(5)


def stall_histogram(cells: DataFrame) -> DataFrame:
    """Sender stall (t_sent - t_intended of ok sends) per (run, stream, bucket), from
    `send_cells`; consumer ALL (a send has no consumer)."""
    return (
        cells.where(F.col("status") == SendStatus.OK)
        .groupBy("run", "stream", "bucket")
        .agg(
            F.sum("n").alias("count"),
            F.max("max").alias("max"),
            F.sum("sum").cast("long").alias("sum"),
        )
        .withColumn("metric", F.lit("stall"))
        .withColumn("consumer", F.lit(ALL))
    )


def round_trip_histogram(replies: DataFrame) -> DataFrame:
    """req-rep round trips (`replies/` records): t_reply - t_intended per (run, stream, bucket),
    from the intended send time as run.json's round_trip_ns (a request held back by the one
    before it still counts its wait); consumer ALL (a producer's stream is its own). One
    scan, rows per bucket: as small as `stall_histogram`."""
    rtt = F.col("t_reply_ns") - F.col("t_intended_ns")
    return (
        replies.select("run", "stream", rtt.alias("v"))
        .groupBy("run", "stream", log_bucket("v").alias("bucket"))
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.max("v").alias("max"),
            F.sum("v").cast("long").alias("sum"),
        )
        .withColumn("metric", F.lit("round_trip"))
        .withColumn("consumer", F.lit(ALL))
    )


def answers(replies: DataFrame, served: Iterable[int]) -> DataFrame:
    """A service of the user's (req-rep with --role producer, run numbers `served`): its answers per
    (run, stream) from the replies records: how many, how many echoed the request's header (the
    rest were matched by order, docs/RECORDS.md), the first and last answer's time. One scan."""
    return (
        replies.filter(F.col("run").isin(list(served)))
        .groupBy("run", "stream")
        .agg(
            F.count(F.lit(1)).alias("answered"),
            F.sum(F.col("echoed").cast("long")).alias("echoed"),
            F.min("t_reply_ns").alias("t_first_reply_ns"),
            F.max("t_reply_ns").alias("t_last_reply_ns"),
        )
    )


def answer_windows(replies: DataFrame, window_ns: int, served: Iterable[int]) -> DataFrame:
    """A service's answers per window as `recv_windows` rows (received = answered, by the answer's
    time; no size: the answers are the service's): its answers' throughput over time."""
    return recv_windows(
        replies.filter(F.col("run").isin(list(served))).select(
            "run",
            "stream",
            "t_sent_ns",
            F.col("t_reply_ns").alias("t_recv_ns"),
            F.lit(0).alias("size"),
        ),
        window_ns,
    )


# Receive latency metrics: from the intended send time (free of coordinated omission), from
# the actual send time, and the first split by whether the record came in the drain (how
# long the backlog waited, against the messages delivered while the consumers worked).
RECV_METRICS = ("latency_intended", "latency_sent", "latency_delivered", "latency_drained")


DEFAULT_WINDOW_MS = 100.0
MIN_WINDOWS = 30  # a run gets at least this many windows when --window-ms is not given
_NICE_MS = (1, 2, 5, 10, 20, 50, 100)


def window_ns_for(window_ms: float | None, run_seconds: Iterable[float | None]) -> int:
    """The time window for rates and queue depth: --window-ms when given; otherwise 100 ms,
    or the largest of 1, 2, 5, 10, 20, 50 ms that gives the shortest run (its run.json
    elapsed_s) MIN_WINDOWS windows, so a 0.6 s run is drawn in 30 windows of 20 ms, not 6."""
    if window_ms is not None:
        return max(1, int(round(window_ms * 1e6)))
    known = [s for s in run_seconds if s and s > 0]
    shortest_ms = 1000 * min(known) if known else math.inf
    fits = [w for w in _NICE_MS if w <= DEFAULT_WINDOW_MS and shortest_ms / w >= MIN_WINDOWS]
    return int((max(fits) if fits else _NICE_MS[0]) * 1e6)


def send_windows(sends: DataFrame, window_ns: int) -> DataFrame:
    """Send attempts per (run, stream, wi = t_intended div window, ws = t_sent div window,
    ok): one scan of the send records."""
    w = int(window_ns)
    return (
        sends.select(
            "run",
            "stream",
            F.expr(f"t_intended_ns div {w}").alias("wi"),
            F.expr(f"t_sent_ns div {w}").alias("ws"),
            (F.col("status") == SendStatus.OK).alias("ok"),
        )
        .groupBy("run", "stream", "wi", "ws", "ok")
        .agg(F.count(F.lit(1)).alias("n"))
    )


def recv_windows(recvs: DataFrame, window_ns: int, fanout_runs: Iterable[int] = ()) -> DataFrame:
    """Deliveries per (run, consumer key, stream, ws = t_sent div window, wr = t_recv div
    window), with bytes: one scan of the receive records."""
    w = int(window_ns)
    return (
        recvs.select(
            "run",
            consumer_key(fanout_runs).alias("consumer"),
            "stream",
            F.expr(f"t_sent_ns div {w}").alias("ws"),
            F.expr(f"t_recv_ns div {w}").alias("wr"),
            F.col("size").cast("long").alias("size"),
        )
        .groupBy("run", "consumer", "stream", "ws", "wr")
        .agg(F.count(F.lit(1)).alias("n"), F.sum("size").alias("bytes"))
    )


# -- the queue (measure/queue_replay.py): what the driver needs beyond the 1 ms receive windows -------------
def _bin(column: str) -> Column:
    return F.expr(f"{column} div {QUEUE_BIN_NS}")


def unreceived_sends(
    sends: DataFrame,
    recvs: DataFrame,
    thresholds: dict[tuple[int, int, int], int],
    fanout_runs: Iterable[int] = (),
    topic_runs: TopicRuns | None = None,
) -> DataFrame:
    """The never-arrived messages that queued (measure/queue_replay.py: tail drops, stranded, unknown),
    per view: for each (run, consumer key, stream) in `thresholds` ({view: first seq}), the ok sends
    of that stream with seq >= the threshold that did not arrive at the view, as (run, consumer,
    stream, t_sent_ns). Only those runs' sends at or above a threshold are read past the filter,
    and only those receives are joined (a left anti join): the tail of a stream, not the run."""
    views = [(run, c, st, int(theta)) for (run, c, st), theta in thresholds.items()]
    spark = sends.sparkSession
    table = spark.createDataFrame(views, "run int, consumer int, stream int, theta long")
    runs = sorted({v[0] for v in views})
    lowest = F.col("seq") >= min(
        v[3] for v in views
    )  # a literal: Parquet skips the row groups below it
    ok = (
        sends.where(F.col("run").isin(runs) & lowest & (F.col("status") == SendStatus.OK))
        .join(F.broadcast(table), ["run", "stream"])
        .where((F.col("seq") >= F.col("theta")) & subscribed(topic_runs))
        .select("run", "consumer", "stream", "seq", "t_sent_ns")
    )
    got = (
        recvs.where(F.col("run").isin(runs) & lowest)
        .select("run", consumer_key(fanout_runs).alias("consumer"), "stream", "seq")
        .join(F.broadcast(table), ["run", "consumer", "stream"])
        .where(F.col("seq") >= F.col("theta"))
        .select("run", "consumer", "stream", "seq")
    )
    return ok.join(got, ["run", "consumer", "stream", "seq"], "left_anti").select(
        "run", "consumer", "stream", "t_sent_ns"
    )


def time_bins(rows: DataFrame, column: str = "t_sent_ns") -> DataFrame:
    """Per (run, consumer, stream, bin of `column`): the count."""
    return rows.groupBy("run", "consumer", "stream", _bin(column).alias("bin")).agg(
        F.count(F.lit(1)).alias("n")
    )


def _in_bins(column: str, bins: Mapping[int, Iterable[int]]) -> Column:
    """`column` in one of its run's bins. One SQL IN of (run, bin) keys: a Column built literal by
    literal costs a Py4J call each (18 s for a 10M-record run's 30,000 bins)."""
    keys = ",".join(str((run << 40) + int(b)) for run, bs in bins.items() for b in bs)
    return F.expr(f"(CAST(run AS BIGINT) * {1 << 40} + ({column} div {QUEUE_BIN_NS})) IN ({keys})")


def _span(bins: Mapping[int, Iterable[int]]) -> tuple[int, int]:
    """[first ns, last ns + 1) of the bins: a range Parquet's row-group statistics can skip by."""
    every = [int(b) for bs in bins.values() for b in bs]
    return min(every) * QUEUE_BIN_NS, (max(every) + 1) * QUEUE_BIN_NS


def _within(column: str, span: tuple[int, int]) -> Column:
    return (F.col(column) >= span[0]) & (F.col(column) < span[1])


def times_in_bins(
    rows: DataFrame, bins: Mapping[int, Iterable[int]], column: str = "t_sent_ns"
) -> DataFrame:
    """The rows whose `column` falls in one of their run's `bins` ({run: [bin]})."""
    return rows.where(_within(column, _span(bins)) & _in_bins(column, bins)).select(
        "run", "consumer", "stream", column
    )


def recv_events_in_bins(
    recvs: DataFrame, bins: Mapping[int, Iterable[int]], fanout_runs: Iterable[int] = ()
) -> DataFrame:
    """Every receive record with its send or its receive time in one of its run's `bins`: (run,
    consumer key, stream, t_sent_ns or null, t_recv_ns or null), the events the exact queue peak
    replays (measure/queue_replay.py). The bins' time span is filtered first, so a piece of the replay
    reads only the row groups around it."""
    span = _span(bins)
    sent_in, recv_in = _in_bins("t_sent_ns", bins), _in_bins("t_recv_ns", bins)
    return recvs.where(
        F.col("run").isin(list(bins))
        & (_within("t_sent_ns", span) | _within("t_recv_ns", span))
        & (sent_in | recv_in)
    ).select(
        "run",
        consumer_key(fanout_runs).alias("consumer"),
        "stream",
        F.when(sent_in, F.col("t_sent_ns")).alias("t_sent_ns"),
        F.when(recv_in, F.col("t_recv_ns")).alias("t_recv_ns"),
    )
