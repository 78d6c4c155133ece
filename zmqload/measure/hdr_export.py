"""A run's latency (from the intended send time) as HdrHistogram files in its `hdr/`: the `.hgrm`
percentile distribution (wrk2's layout, HdrHistogram's plotter reads it) of the run and of each
consumer, and a 1 s `.hlog` interval log, written with the `hdrhistogram` package from the recvs
Parquet, zmqload's buckets bucket for bucket (docs/REPORT.md, "HdrHistogram files")."""

from __future__ import annotations

import io
import os
import re
from typing import Any, Optional

import numpy as np
import pyarrow.parquet as pq

from ..contract.histogram import N_BUCKETS
from ..contract.run_record import RunRecord
from ..store.parquet_parts import part_files
from .histogram import bucket_index, bucket_value

HDR_DIR = "hdr"
RUN_HGRM = "latency_us.hgrm"
CONSUMER_HGRM = "latency_us-c{consumer}.hgrm"
HLOG = "latency.hlog"
UNIT_RATIO = 1000.0  # the .hgrm's values (and the .hlog's max column) in microseconds
INTERVAL_NS = 1_000_000_000
HIGHEST_NS = 2**55  # contract/histogram.py's top
SIGNIFICANT = 2  # 256 sub-buckets: the very layout of contract/histogram.py, bucket for bucket
BATCH_ROWS = 1 << 20
DENSE_LIMIT = 64 * N_BUCKETS  # counts a batch may spread over at once (3 MB)


class _Counts:
    """Histogram counts by key (a consumer, an interval), with the exact min and max: a batch's
    keys lie close together (a few seconds, 64 consumers at most), so each batch is one dense
    bincount over its keys' span, kept sparse."""

    def __init__(self) -> None:
        self.parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.low: dict[int, int] = {}
        self.high: dict[int, int] = {}

    def add(self, key: np.ndarray, index: np.ndarray, latency: np.ndarray) -> None:
        """`index`: each latency's bucket (histogram.bucket_index)."""
        first = int(key.min())
        span = int(key.max()) - first + 1
        if span * N_BUCKETS > DENSE_LIMIT:  # keys far apart (a stalled run's receipts): in pieces
            for part in np.array_split(np.argsort(key, kind="stable"), 2):
                self.add(key[part], index[part], latency[part])
            return
        local = key - first
        dense = np.bincount(local * N_BUCKETS + index, minlength=span * N_BUCKETS)
        lows = np.full(span, np.iinfo(np.int64).max)
        highs = np.full(span, np.iinfo(np.int64).min)
        np.minimum.at(lows, local, latency)
        np.maximum.at(highs, local, latency)
        for row in np.flatnonzero(highs >= lows).tolist():
            counts = dense[row * N_BUCKETS : (row + 1) * N_BUCKETS]
            used = np.flatnonzero(counts)
            k = first + row
            self.parts.setdefault(k, []).append((used, counts[used]))
            self.low[k] = min(self.low.get(k, int(lows[row])), int(lows[row]))
            self.high[k] = max(self.high.get(k, int(highs[row])), int(highs[row]))

    def by_key(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """key -> (bucket indexes, their counts)."""
        out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for k, parts in self.parts.items():
            counts = np.zeros(N_BUCKETS, np.int64)
            for used, part in parts:
                counts[used] += part
            used = np.flatnonzero(counts)
            out[k] = (used, counts[used])
        return out


def hdr_histogram(buckets: np.ndarray, counts: np.ndarray, low: int, high: int) -> Any:
    """An HdrHistogram of zmqload's bucket counts: each at its bucket's midpoint, one value each at
    the exact min and max."""
    from hdrh.histogram import HdrHistogram

    hist = HdrHistogram(1, HIGHEST_NS, SIGNIFICANT)
    counts = counts.copy()
    for exact in (low, high):
        where = np.flatnonzero(buckets == int(bucket_index(np.array([exact]))[0]))
        if len(where) and counts[where[0]] > 0 and int(counts.sum()) > 1:
            hist.record_value(max(exact, 0))
            counts[where[0]] -= 1
    values = bucket_value(buckets)
    for value, count in zip(values.tolist(), counts.tolist()):
        if count:
            hist.record_value(max(value, 0), count)
    return hist


def percentile_distribution(hist: Any) -> bytes:
    """The .hgrm text (values in microseconds); its standard deviation in microseconds too (the
    package leaves it unscaled)."""
    out = io.BytesIO()
    hist.output_percentile_distribution(out, UNIT_RATIO)
    text = out.getvalue().decode()
    std = hist.get_stddev() / UNIT_RATIO
    text = re.sub(r"StdDeviation   = +[0-9.]+", f"StdDeviation   = {std:12.{SIGNIFICANT}f}", text)
    return text.encode()


def write_exports(run_dir: str, record: RunRecord) -> list[str]:
    """The run's .hgrm files (run and each consumer) and its .hlog, written into run_dir/hdr/;
    their paths ([] when nothing was received)."""
    files = part_files(run_dir, "recvs")
    if not files:
        return []
    start = record.t0_ns or min(
        (c.t_first_recv_ns for c in record.consumers if c.t_first_recv_ns), default=0
    )
    consumers, intervals = _Counts(), _Counts()
    for path in files:
        for batch in pq.ParquetFile(path).iter_batches(
            BATCH_ROWS, columns=["consumer", "t_intended_ns", "t_recv_ns"]
        ):
            t_recv = batch.column("t_recv_ns").to_numpy()
            latency = t_recv - batch.column("t_intended_ns").to_numpy()
            index = bucket_index(latency)
            consumers.add(batch.column("consumer").to_numpy().astype(np.int64), index, latency)
            intervals.add(np.maximum(t_recv - start, 0) // INTERVAL_NS, index, latency)
    per_consumer = consumers.by_key()
    if not per_consumer:
        return []
    folder = os.path.join(run_dir, HDR_DIR)
    os.makedirs(folder, exist_ok=True)
    written: list[str] = []
    whole = None
    for consumer, (buckets, counts) in sorted(per_consumer.items()):
        hist = hdr_histogram(buckets, counts, consumers.low[consumer], consumers.high[consumer])
        text = percentile_distribution(hist)
        written.append(_write(folder, CONSUMER_HGRM.format(consumer=consumer), text))
        if whole is None:
            whole = hist
        else:
            whole.add(hist)
    assert whole is not None
    # one consumer: the run's distribution is its own (the package's iterators are slow Python)
    whole_text = text if len(per_consumer) == 1 else percentile_distribution(whole)
    written.insert(0, _write(folder, RUN_HGRM, whole_text))
    written.append(_write_log(folder, record, start, intervals))
    return written


def _write(folder: str, name: str, text: bytes) -> str:
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(text)
    return path


def _write_log(folder: str, record: RunRecord, start: int, intervals: _Counts) -> str:
    from hdrh.log import HistogramLogWriter

    epoch_s = (record.clock.realtime_ns + (start - record.clock.monotonic_ns)) / 1e9
    path = os.path.join(folder, HLOG)
    with open(path, "w") as f:
        log = HistogramLogWriter(f)
        log.output_comment(
            f"[zmqload run {record.run_id}: latency from the intended send time, ns]"
        )
        log.output_log_format_version()
        # the package's output_start_time formats the date with a method datetime lacks
        log.output_comment(f"[StartTime: {epoch_s:.3f} (seconds since epoch)]")
        log.output_legend()
        for second, (buckets, counts) in sorted(intervals.by_key().items()):
            hist = hdr_histogram(buckets, counts, intervals.low[second], intervals.high[second])
            begin = second * INTERVAL_NS / 1e9
            log.output_interval_histogram(hist, begin, begin + INTERVAL_NS / 1e9, UNIT_RATIO)
    return path


def exports_of(run_dir: str) -> Optional[list[str]]:
    """The run's HdrHistogram files as written (names relative to run_dir), or None without them."""
    folder = os.path.join(run_dir, HDR_DIR)
    if not os.path.isdir(folder):
        return None
    return sorted(os.path.join(HDR_DIR, n) for n in os.listdir(folder))
