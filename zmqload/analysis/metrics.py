"""Metric functions: each takes record DataFrames (with a `run` column) and returns a small
aggregate DataFrame. No function collects; the caller decides what reaches the driver.

Costs, on purpose: every function is a partial (map-side) aggregation over one scan with
keys of low cardinality, so 100M records shuffle only thousands of rows. Duplicates are
found from per-block power sums with an exact distinct count only for doubtful blocks;
latency percentiles come from a log-bucket histogram (relative error < 1%); time windows
are integer division of t_ns. The only row-level shuffle is `reordering`, which needs
receive order per stream, and is partitioned by stream.
"""
from __future__ import annotations

import math

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ..contract.wire import SendStatus

# Log-bucket histogram: bucket b holds values in (G^(b-1), G^b]; G = 1.01 gives < 1% error.
HIST_GROWTH = 1.01
_LN_G = math.log(HIST_GROWTH)
PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p99_9", 0.999), ("p99_99", 0.9999))

ALL = -1   # consumer (or stream) key meaning "all of them"


def consumer_key(fanout_runs) -> Column:
    """The consumer a delivery is unique for: itself in fan-out runs (every consumer should
    get every message), ALL otherwise (a message is delivered once to any consumer)."""
    fanout_runs = list(fanout_runs or ())
    if not fanout_runs:
        return F.lit(ALL)
    return F.when(F.col("run").isin(fanout_runs), F.col("consumer")).otherwise(F.lit(ALL))


SEQ_BLOCK = 1024
SWITCH_MAX = 400   # spark.sql.optimizer.inSetSwitchThreshold's default


def _range_power_sums(lo: Column, hi: Column):
    """Sums of k, k^2, k^3 for k in [lo, hi] (offsets within a block, so no overflow)."""
    def s1(n):
        return n * (n + 1) / 2

    def s2(n):
        return n * (n + 1) * (2 * n + 1) / 6

    def s3(n):
        return s1(n) * s1(n)
    a, b = (lo - 1).cast("double"), hi.cast("double")
    return s1(b) - s1(a), s2(b) - s2(a), s3(b) - s3(a)


def _missing_explained(n, lo, hi, d1, d2, d3) -> Column:
    """True when a block with gaps is certainly duplicate-free: the d = hi - lo + 1 - n
    offsets missing from lo..hi, assumed distinct, have power sums d1, d2, d3 that fit one
    missing offset, two, or one contiguous run of d. With three power sums this cannot be
    faked by fewer than three duplicates in the block (Newton's identities: two multisets of
    at most three values with equal p1..p3 are equal, and a duplicated value is present, so
    it cannot also be missing). Real losses (a few drops, an HWM burst) fit one of the three;
    other blocks get the exact distinct count."""
    d = (hi - lo + 1 - n).cast("double")
    one = (d == 1) & (d2 == d1 * d1) & (d3 == d1 * d1 * d1) & (d1 > lo) & (d1 < hi)
    disc = 2 * d2 - d1 * d1                           # (x - y)^2 for the two missing x < y
    root = F.round(F.sqrt(F.greatest(disc, F.lit(0.0))))
    x, y = (d1 - root) / 2, (d1 + root) / 2
    two = ((d == 2) & (disc > 0) & (root * root == disc) & (x == F.floor(x))
           & (x > lo) & (y < hi) & (x * x * x + y * y * y == d3))
    a = (d1 - d * (d - 1) / 2) / d                    # a run a..a+d-1 has p1 = d*a + d(d-1)/2
    r1, r2, r3 = _range_power_sums(a, a + d - 1)
    run = (d >= 1) & (a == F.floor(a)) & (a > lo) & (a + d - 1 < hi) & (r2 == d2) & (r3 == d3)
    return one | two | run


def recv_blocks(recvs: DataFrame, fanout_runs=()) -> DataFrame:
    """Per (run, consumer, stream, block of SEQ_BLOCK seqs): counts, ranges and a flag `exact`
    that is true when the block is certainly free of duplicates, so unique = received.

    A block with n rows, min m, max M is duplicate-free when n = M - m + 1 and the sums of
    offsets, their squares and cubes equal those of the full range m..M (a duplicate needs a
    gap to keep n, and then the sums differ unless >= 4 duplicates and 4 gaps in one block
    balance all three power sums exactly), or when its gaps are explained exactly by the
    power sums (`_missing_explained`). Other blocks get an exact distinct count from
    `distinct_in_blocks`; in most runs there are none, and the expensive exact count is
    skipped. This replaces a bitmap over every row (measured 34 s vs ~6 s per 100M rows).
    """
    blk = F.lit(SEQ_BLOCK)
    r = recvs.select("run", consumer_key(fanout_runs).alias("consumer"), "stream", "seq",
                     F.expr(f"seq div {SEQ_BLOCK}").alias("block"), "t_recv_ns", "size")
    off = (F.col("seq") - F.col("block") * blk)
    g = (r.groupBy("run", "consumer", "stream", "block")
         .agg(F.count(F.lit(1)).alias("received"),
              F.min("seq").alias("seq_min"), F.max("seq").alias("seq_max"),
              F.sum(off).alias("p1"), F.sum(off * off).alias("p2"), F.sum(off * off * off).alias("p3"),
              F.min("t_recv_ns").alias("t_first_recv_ns"), F.max("t_recv_ns").alias("t_last_recv_ns"),
              F.sum(F.col("size").cast("long")).alias("bytes")))
    lo = F.col("seq_min") - F.col("block") * blk
    hi = F.col("seq_max") - F.col("block") * blk
    e1, e2, e3 = _range_power_sums(lo, hi)
    d1, d2, d3 = (e1 - F.col("p1").cast("double"), e2 - F.col("p2").cast("double"),
                  e3 - F.col("p3").cast("double"))
    full = (F.col("received") == F.col("seq_max") - F.col("seq_min") + 1) & (d1 == 0) & (d2 == 0) & (d3 == 0)
    gaps = ((F.col("received") < F.col("seq_max") - F.col("seq_min") + 1)
            & _missing_explained(F.col("received"), lo, hi, d1, d2, d3))
    return g.withColumn("exact", full | gaps).drop("p1", "p2", "p3")


def distinct_in_blocks(recvs: DataFrame, blocks, fanout_runs=()) -> DataFrame:
    """Exact distinct seqs per (run, consumer, stream, block) for the given blocks: a small
    DataFrame, or a list of (run, consumer, stream, block) tuples. A list becomes a hash-set
    filter per run on one packed long (measured 14 s -> see docs/BENCHMARKS.md for 100M
    rows), instead of a semi-join on four columns."""
    r = recvs.select("run", consumer_key(fanout_runs).alias("consumer"), "stream", "seq",
                     F.expr(f"seq div {SEQ_BLOCK}").alias("block"))
    if isinstance(blocks, DataFrame):
        keys = blocks.select("run", "consumer", "stream", "block")
        r = r.join(F.broadcast(keys), ["run", "consumer", "stream", "block"], "left_semi")
    else:
        numbers = sorted({b[3] for b in blocks})
        if numbers and len(numbers) <= SWITCH_MAX and numbers[-1] < 2**31:
            # A coarse test first, on the block number alone as an int: Spark tests a small
            # int IN-list with a switch, while a long one goes through a set of boxed values
            # (5% of the report's JVM samples in a profile). The exact key below then sees
            # only the rows of these blocks.
            r = r.where(F.col("block").cast("int").isin(numbers))
        packed = ((F.col("consumer").cast("long") + 1) * F.lit(1 << 56) + F.col("stream").cast("long") * F.lit(1 << 40)
                  + F.col("block"))
        by_run: dict[int, list[int]] = {}
        for run, consumer, stream, block in blocks:
            by_run.setdefault(run, []).append(((consumer + 1) << 56) + (stream << 40) + block)
        cond = None
        for run, run_keys in by_run.items():
            c = (F.col("run") == F.lit(run)) & packed.isin(run_keys)
            cond = c if cond is None else (cond | c)
        r = r.where(cond if cond is not None else F.lit(False))
    return r.groupBy("run", "consumer", "stream", "block").agg(F.countDistinct("seq").alias("unique"))


def recv_summary_from_blocks(blocks: DataFrame, distinct: DataFrame | None = None) -> DataFrame:
    """Per (run, consumer, stream) from `recv_blocks` (+ `distinct_in_blocks` for the inexact ones)."""
    b = blocks
    if distinct is not None:
        b = b.join(distinct, ["run", "consumer", "stream", "block"], "left")
        uniq = F.when(F.col("exact"), F.col("received")).otherwise(F.col("unique"))
    else:
        uniq = F.col("received")
    return (b.withColumn("u", uniq).groupBy("run", "consumer", "stream")
            .agg(F.sum("received").alias("received"), F.sum("u").cast("long").alias("unique"),
                 F.min("seq_min").alias("seq_min"), F.max("seq_max").alias("seq_max"),
                 F.min("t_first_recv_ns").alias("t_first_recv_ns"), F.max("t_last_recv_ns").alias("t_last_recv_ns"),
                 F.sum("bytes").alias("bytes"))
            .withColumn("duplicates", F.col("received") - F.col("unique")))


def recv_summary(recvs: DataFrame, fanout_runs=()) -> DataFrame:
    """Per (run, consumer, stream): received, unique, duplicates, seq and time range, bytes.

    (The pipeline runs the two steps itself, to skip the exact pass when nothing needs it.)
    """
    blocks = recv_blocks(recvs, fanout_runs)
    return recv_summary_from_blocks(blocks, distinct_in_blocks(recvs, blocks.where(~F.col("exact")), fanout_runs))


def send_counts(sends: DataFrame, recv_sum: DataFrame) -> DataFrame:
    """Per (run, stream, consumer): send attempts by outcome, and how many ok sends fall
    before the first / after the last seq that consumer received, with the small
    per-consumer seq range broadcast. consumer is null for a stream nobody got.

    For fan-out runs and reports over several runs; where every stream has one consumer key
    in one run, `send_cells` + `send_counts_from_cells` give the same without a join
    (literal map lookups: measured 17.6 s -> see docs/BENCHMARKS.md).
    """
    joined = sends.join(F.broadcast(recv_sum.select("run", "stream", "consumer", "seq_min", "seq_max")),
                        ["run", "stream"], "left")
    rows = joined.select("run", "stream", "consumer", "status", F.lit(1).alias("n"),
                         _seq_position(F.col("seq_min"), F.col("seq_max")).alias("pos"),
                         *[F.col(src).alias(f) for f, src in _SEND_TIME_COLUMNS])
    return send_counts_from_cells(rows)


# The first / last times per send row, named as in `send_cells` (where they are per cell).
_SEND_TIME_COLUMNS = (("t_first_intended_ns", "t_intended_ns"), ("t_last_intended_ns", "t_intended_ns"),
                      ("t_first_send_ns", "t_sent_ns"), ("t_last_send_ns", "t_sent_ns"))


def _seq_position(seq_min: Column, seq_max: Column) -> Column:
    """Where a send's seq lies against the received range: -1 before, 0 inside, 1 after,
    null when nobody received that stream."""
    return (F.when(seq_min.isNull(), F.lit(None)).when(F.col("seq") < seq_min, F.lit(-1))
            .when(F.col("seq") > seq_max, F.lit(1)).otherwise(F.lit(0)).cast("int"))


def send_counts_from_cells(rows: DataFrame) -> DataFrame:
    """The send counts from `send_cells` made with single-consumer edges, or from the rows
    `send_counts` joins (same columns, n = 1): the one place the outcome rules are written."""
    ok = F.col("status") == SendStatus.OK

    def count_if(cond):
        return F.sum(F.when(cond, F.col("n")).otherwise(0)).cast("long")

    return (rows.groupBy("run", "stream", "consumer")
            .agg(F.sum("n").cast("long").alias("attempted"),
                 count_if(ok).alias("sent"),
                 count_if(F.col("status") == SendStatus.EAGAIN).alias("eagain"),
                 count_if(F.col("status") == SendStatus.TIMEOUT).alias("timeout"),
                 count_if(F.col("status") == SendStatus.ERROR).alias("errors"),
                 count_if(ok & (F.col("pos") == -1)).alias("sent_before_first"),
                 count_if(ok & (F.col("pos") == 1)).alias("sent_after_last"),
                 F.min("t_first_intended_ns").alias("t_first_intended_ns"),
                 F.max("t_last_intended_ns").alias("t_last_intended_ns"),
                 F.min(F.when(ok, F.col("t_first_send_ns"))).alias("t_first_send_ns"),
                 F.max(F.when(ok, F.col("t_last_send_ns"))).alias("t_last_send_ns")))


def loss(counts: DataFrame, recv_sum: DataFrame, consumer_keys: DataFrame) -> DataFrame:
    """Per (run, consumer, stream): what was sent, what arrived, and where the rest was lost.

    `counts` is `send_counts(...)`, `recv_sum` is `recv_summary(...)` (both small);
    `consumer_keys` is (run, consumer): ALL for non-fan-out runs, every consumer index for
    fan-out runs (so a consumer that got nothing still shows).
    A message counts as sent when its send call succeeded (status 0); EAGAIN / timeout drops
    are the sender's, counted apart. Lost messages are placed by sequence number:
    start  = sent before the first message this consumer received (slow joiner);
    tail   = sent after the last one it received (shutdown, linger);
    middle = the rest (high-water mark drops while both ends were up).
    A stream a consumer received nothing from is lost at the start.
    """
    send_cols = ["attempted", "sent", "eagain", "timeout", "errors",
                 "t_first_intended_ns", "t_last_intended_ns", "t_first_send_ns", "t_last_send_ns"]
    per_stream = counts.groupBy("run", "stream").agg(*[F.first(c, ignorenulls=True).alias(c) for c in send_cols])
    expected = per_stream.join(consumer_keys, ["run"], "inner")
    got = counts.where(F.col("consumer").isNotNull()).select(
        "run", "stream", "consumer", "sent_before_first", "sent_after_last")
    rs = recv_sum.select("run", "stream", "consumer", "received", "unique", "duplicates")
    out = (expected.join(got, ["run", "stream", "consumer"], "left")
           .join(rs, ["run", "stream", "consumer"], "left")
           .fillna(0, subset=["received", "unique", "duplicates"]))
    nothing = F.col("unique") == 0
    lost = F.greatest(F.col("sent") - F.col("unique"), F.lit(0))
    start = F.when(nothing, lost).otherwise(F.coalesce(F.col("sent_before_first"), F.lit(0)))
    tail = F.when(nothing, F.lit(0)).otherwise(F.coalesce(F.col("sent_after_last"), F.lit(0)))
    return (out.withColumn("lost", lost.cast("long"))
            .withColumn("lost_start", start.cast("long"))
            .withColumn("lost_tail", tail.cast("long"))
            .withColumn("lost_middle", F.greatest(F.col("lost") - F.col("lost_start") - F.col("lost_tail"), F.lit(0)).cast("long"))
            .withColumn("loss_ratio", F.when(F.col("sent") > 0, F.col("lost") / F.col("sent")).otherwise(F.lit(0.0)))
            .withColumn("dropped_sender", (F.col("eagain") + F.col("timeout")).cast("long"))
            .drop("sent_before_first", "sent_after_last"))


def reordering(recvs: DataFrame, fanout_runs=()) -> DataFrame:
    """Per (run, consumer, stream): messages that arrived after a higher seq of the same stream
    at the same consumer ("late"; a duplicate arriving later counts too), in receive order.

    The window is partitioned by (run, consumer, stream), so it spreads over streams; a single
    stream is one partition (one core), the cost of needing receive order at all.
    """
    w = (Window.partitionBy("run", "consumer", "stream").orderBy("t_recv_ns", "seq")
         .rowsBetween(Window.unboundedPreceding, -1))
    r = recvs.select("run", "consumer", "stream", "seq", "t_recv_ns")
    flagged = r.withColumn("late", (F.col("seq") < F.max("seq").over(w)).cast("int"))
    out = flagged.groupBy("run", "consumer", "stream").agg(F.sum("late").cast("long").alias("reordered"))
    key = consumer_key(fanout_runs)
    return out.withColumn("consumer", key).groupBy("run", "consumer", "stream").agg(
        F.sum("reordered").alias("reordered"))


def log_bucket(value: Column) -> Column:
    """Histogram bucket of a non-negative value; values <= 0 share bucket -1 (reported as 0)."""
    return F.when(value <= 0, F.lit(-1)).otherwise(F.ceil(F.log(value.cast("double")) / F.lit(_LN_G)) + F.lit(0)).cast("int")


def bucket_upper(bucket: Column) -> Column:
    return F.when(bucket < 0, F.lit(0.0)).otherwise(F.exp(bucket.cast("double") * F.lit(_LN_G)))


def recv_cells(recvs: DataFrame, window_ns: int) -> DataFrame:
    """One scan of the receive records for both latency histograms and receive windows: per
    (run, stream, bi, bs, ws, wr) the count, max and sum of each latency and the bytes, where
    bi / bs are the log buckets of the two latencies (intended / sent) and ws / wr the windows
    of the send and receive times. The buckets and the windows are each highly correlated,
    so the cells stay few (~1.2M for 100M records at 100 ms windows) and one scan replaces
    two (measured: the pair query alone took as long as this one)."""
    w = int(window_ns)
    lat = recvs.select("run", "stream",
                       (F.col("t_recv_ns") - F.col("t_intended_ns")).alias("li"),
                       (F.col("t_recv_ns") - F.col("t_sent_ns")).alias("ls"),
                       F.expr(f"t_sent_ns div {w}").alias("ws"), F.expr(f"t_recv_ns div {w}").alias("wr"),
                       F.col("size").cast("long").alias("size"))
    return (lat.groupBy("run", "stream", log_bucket(F.col("li")).alias("bi"), log_bucket(F.col("ls")).alias("bs"),
                        "ws", "wr")
            .agg(F.count(F.lit(1)).alias("n"), F.max("li").alias("mi"), F.max("ls").alias("ms"),
                 F.sum("li").alias("si"), F.sum("ls").alias("ss"), F.sum("size").alias("bytes")))


def latency_pairs(cells: DataFrame) -> DataFrame:
    """Both receive latencies from `recv_cells`: per (run, stream, bi, bs) bucket pair, the
    count, max and sum of each; `latency_histograms` splits the pairs."""
    return (cells.groupBy("run", "stream", "bi", "bs")
            .agg(F.sum("n").alias("n"), F.max("mi").alias("mi"), F.max("ms").alias("ms"),
                 F.sum("si").alias("si"), F.sum("ss").alias("ss")))


def send_cells(sends: DataFrame, window_ns: int, edges: list | None = None) -> DataFrame:
    """One scan of the send records for stall histogram, send windows and (when
    `single_consumer_edges(edges)`) the send counts: per (run, stream, consumer, status,
    bucket of the stall (ok sends; -2 otherwise), wi = t_intended div window, ws = t_sent div
    window, pos = `_seq_position` against the stream's received range) the count, stall max
    and sum, and first / last times.

    `edges` is the receive summary collected as (run, consumer, stream, seq_min, seq_max)
    tuples; otherwise (fan-out, several runs) consumer and pos are null and the counts come
    from `send_counts`."""
    w = int(window_ns)
    ok = F.col("status") == SendStatus.OK
    stall = F.col("t_sent_ns") - F.col("t_intended_ns")
    consumer, seq_min, seq_max = _edge_lookup(edges)
    return (sends.select("run", "stream", consumer.alias("consumer"), "status",
                         F.when(ok, log_bucket(stall)).otherwise(F.lit(-2)).alias("bucket"),
                         F.expr(f"t_intended_ns div {w}").alias("wi"), F.expr(f"t_sent_ns div {w}").alias("ws"),
                         _seq_position(seq_min, seq_max).alias("pos"), stall.alias("v"), "t_intended_ns", "t_sent_ns")
            .groupBy("run", "stream", "consumer", "status", "bucket", "wi", "ws", "pos")
            .agg(F.count(F.lit(1)).alias("n"), F.max("v").alias("max"), F.sum("v").alias("sum"),
                 *[(F.min if f.startswith("t_first") else F.max)(src).alias(f) for f, src in _SEND_TIME_COLUMNS]))


def single_consumer_edges(edges) -> bool:
    """True when every stream has one receive range (not fan-out) within one run, so the
    range is a literal map lookup per row instead of a join."""
    return (edges is not None and len({(e[0], e[2]) for e in edges}) == len(edges) and len(edges) <= 5000
            and len({e[0] for e in edges}) <= 1)


def _edge_lookup(edges) -> tuple[Column, Column, Column]:
    """(consumer, seq_min, seq_max) of each send row's stream as literal map lookups; nulls
    where unknown (no edges, not single-consumer, another run, a stream nobody received)."""
    if not edges or not single_consumer_edges(edges):
        return F.lit(None).cast("int"), F.lit(None).cast("long"), F.lit(None).cast("long")
    same_run = F.col("run") == F.lit(edges[0][0])

    def lookup(i):
        return F.when(same_run, F.create_map(*[x for e in edges for x in (F.lit(e[2]), F.lit(e[i]))])[F.col("stream")])
    return lookup(1).cast("int"), lookup(3), lookup(4)


def stall_histogram(cells: DataFrame) -> DataFrame:
    """Sender stall (t_sent - t_intended of ok sends) per (run, stream, bucket), from `send_cells`."""
    return (cells.where(F.col("status") == SendStatus.OK)
            .groupBy("run", "stream", "bucket")
            .agg(F.sum("n").alias("count"), F.max("max").alias("max"), F.sum("sum").cast("long").alias("sum"))
            .withColumn("metric", F.lit("stall")))


def latency_histograms(pairs: DataFrame, stall: DataFrame | None = None) -> DataFrame:
    """Log-bucket histograms per (run, stream, metric, bucket): count, exact max and sum in it.

    metric: `latency_intended` (t_recv - t_intended: free of coordinated omission),
    `latency_sent` (t_recv - t_sent), and `stall` (t_sent - t_intended, ok sends).
    Inputs are `latency_pairs(recvs)` and `stall_histogram(sends)` (small).
    """
    parts = [
        pairs.groupBy("run", "stream", F.col("bi").alias("bucket")).agg(
            F.sum("n").alias("count"), F.max("mi").alias("max"), F.sum("si").alias("sum")).withColumn("metric", F.lit("latency_intended")),
        pairs.groupBy("run", "stream", F.col("bs").alias("bucket")).agg(
            F.sum("n").alias("count"), F.max("ms").alias("max"), F.sum("ss").alias("sum")).withColumn("metric", F.lit("latency_sent")),
    ]
    if stall is not None:
        parts.append(stall)
    cols = ["run", "stream", "metric", "bucket", "count", "max", "sum"]
    out = parts[0].select(*cols)
    for p in parts[1:]:
        out = out.unionByName(p.select(*cols))
    return out


def percentiles(hist: DataFrame, keys=("run", "stream", "metric")) -> DataFrame:
    """Percentiles from `latency_histograms` rows: per key, count, mean, p50..p99.99 and max.

    A percentile is the upper edge of the first bucket whose cumulative count reaches
    q * count (HdrHistogram's rule), capped by the exact max seen in that bucket.
    """
    keys = list(keys)
    h = hist.groupBy(*keys, "bucket").agg(F.sum("count").alias("count"), F.max("max").alias("max"), F.sum("sum").alias("sum"))
    w = Window.partitionBy(*keys).orderBy("bucket").rowsBetween(Window.unboundedPreceding, 0)
    wall = Window.partitionBy(*keys)
    h = (h.withColumn("cum", F.sum("count").over(w))
         .withColumn("total", F.sum("count").over(wall))
         .withColumn("value", F.least(bucket_upper(F.col("bucket")), F.greatest(F.col("max").cast("double"), F.lit(0.0)))))
    aggs = [F.first("total").alias("count"), (F.sum("sum") / F.sum("count")).alias("mean"), F.max("max").cast("double").alias("max")]
    for name, q in PERCENTILES:
        aggs.append(F.min(F.when(F.col("cum") >= F.lit(q) * F.col("total"), F.col("value"))).alias(name))
    return h.groupBy(*keys).agg(*aggs)


def send_windows(cells: DataFrame) -> DataFrame:
    """Send attempts per (run, stream, wi, ws, ok) from `send_cells`."""
    return (cells.withColumn("ok", F.col("status") == SendStatus.OK)
            .groupBy("run", "stream", "wi", "ws", "ok").agg(F.sum("n").alias("n")))


def recv_windows(cells: DataFrame) -> DataFrame:
    """Deliveries per (run, stream, ws = t_sent div window, wr = t_recv div window), with
    bytes, from `recv_cells`."""
    return cells.groupBy("run", "stream", "ws", "wr").agg(F.sum("n").alias("n"), F.sum("bytes").alias("bytes"))


def rates_over_time(send_w: DataFrame, recv_w: DataFrame) -> DataFrame:
    """Counts per (run, stream, window) (window = t_ns div window_ns, absolute) from
    `send_windows` and `recv_windows`: offered (send attempts by intended time), sent (ok
    sends by actual send time), received (deliveries by receive time), and delivered_sent
    (deliveries by their send time, for queue depth: sent-by-t minus received-by-t of what
    eventually arrived)."""
    s, r = send_w, recv_w
    zero = F.lit(0).cast("long")
    cols = ["run", "stream", "window", "offered", "sent", "received", "delivered_sent", "received_bytes"]
    parts = [
        s.groupBy("run", "stream", F.col("wi").alias("window")).agg(F.sum("n").alias("offered"))
         .select("run", "stream", "window", "offered", zero.alias("sent"), zero.alias("received"), zero.alias("delivered_sent"), zero.alias("received_bytes")),
        s.where("ok").groupBy("run", "stream", F.col("ws").alias("window")).agg(F.sum("n").alias("sent"))
         .select("run", "stream", "window", zero.alias("offered"), "sent", zero.alias("received"), zero.alias("delivered_sent"), zero.alias("received_bytes")),
        r.groupBy("run", "stream", F.col("wr").alias("window")).agg(F.sum("n").alias("received"), F.sum("bytes").alias("received_bytes"))
         .select("run", "stream", "window", zero.alias("offered"), zero.alias("sent"), "received", zero.alias("delivered_sent"), "received_bytes"),
        r.groupBy("run", "stream", F.col("ws").alias("window")).agg(F.sum("n").alias("delivered_sent"))
         .select("run", "stream", "window", zero.alias("offered"), zero.alias("sent"), zero.alias("received"), "delivered_sent", zero.alias("received_bytes")),
    ]
    u = parts[0]
    for p in parts[1:]:
        u = u.unionByName(p)
    return (u.groupBy("run", "stream", "window")
            .agg(*[F.sum(c).cast("long").alias(c) for c in cols[3:]]).select(*cols))


def queue_depth(rates: DataFrame) -> DataFrame:
    """Messages in flight at the end of each window, per (run, stream) and for the whole run
    (stream = ALL): sent by t minus received by t, over messages that eventually arrived
    (lost ones are counted as loss, not as a queue that never drains). Adds mean size."""
    per_run = rates.groupBy("run", "window").agg(*[F.sum(c).alias(c) for c in ("delivered_sent", "received", "received_bytes")]) \
        .withColumn("stream", F.lit(ALL))
    both = rates.select("run", "stream", "window", "delivered_sent", "received", "received_bytes").unionByName(
        per_run.select("run", "stream", "window", "delivered_sent", "received", "received_bytes"))
    w = Window.partitionBy("run", "stream").orderBy("window").rowsBetween(Window.unboundedPreceding, 0)
    wall = Window.partitionBy("run", "stream")
    return (both.withColumn("depth", (F.sum("delivered_sent").over(w) - F.sum("received").over(w)).cast("long"))
            .withColumn("mean_size", F.sum("received_bytes").over(wall) / F.greatest(F.sum("received").over(wall), F.lit(1)))
            .withColumn("depth_bytes", F.col("depth") * F.col("mean_size"))
            .select("run", "stream", "window", "depth", "depth_bytes", "mean_size"))


def queue_depth_stats(depth: DataFrame) -> DataFrame:
    """max / mean / p99 of the in-flight depth over windows, and the memory that represents."""
    return (depth.groupBy("run", "stream")
            .agg(F.max("depth").alias("depth_max"), F.avg("depth").alias("depth_mean"),
                 F.percentile(F.col("depth").cast("double"), F.lit(0.99)).alias("depth_p99"),
                 F.max("depth_bytes").alias("queued_bytes_max"), F.avg("depth_bytes").alias("queued_bytes_mean"),
                 F.first("mean_size").alias("mean_size")))
