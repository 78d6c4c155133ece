"""One finished run's figures as `compare` uses them (contract/comparison.RunFigures): run.json's
figures, and the run cut into equal windows of its receive span, each with its receipts and latency
histogram, read from the recvs Parquet a batch at a time (memory bounded by the window count)."""

from __future__ import annotations

from typing import Optional

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..contract.comparison import PERCENTILES, RunFigures, Windows
from ..contract.fates import FATES
from ..contract.histogram import N_BUCKETS
from ..contract.run_record import RunRecord
from ..errors import ReportInputError
from ..store.parquet_parts import part_files
from ..store.record_files import read_run
from .histogram import bucket_index

WINDOWS = 10
"""Windows a run is cut into: enough for a spread, each long enough for its own p99 (a 1 s run at
100k msg/s: 10,000 receipts a window)."""
BATCH_ROWS = 1 << 20


def run_figures(run_dir: str, windows: int = WINDOWS) -> RunFigures:
    """The figures of the finished run in `run_dir`; ReportInputError (one line) when it has none."""
    record = read_run(run_dir)
    if record.summary is None or record.counters is None:
        raise ReportInputError(
            f"{run_dir}: run {record.status.value} without figures (run.json has no summary)"
        )
    return RunFigures(
        run_id=record.run_id,
        run_dir=run_dir,
        settings={name: str(value) for name, value in msgspec.to_builtins(record.workload).items()},
        figures=figures_of(record),
        windows=windows_of(run_dir, record, windows),
    )


def figures_of(record: RunRecord) -> dict[str, Optional[float]]:
    """run.json's figures by contract/comparison.FIGURES' names."""
    assert record.summary is not None and record.counters is not None
    latency = record.summary.latency_intended_ns
    peak = record.summary.queue_peak.messages
    rss = [w.max_rss_kb for w in (*record.producers, *record.consumers) if w.max_rss_kb]
    out: dict[str, Optional[float]] = {"throughput": record.summary.throughput_msgs}
    for name, q in (("p50", latency.p50), ("p99", latency.p99), ("p99.9", latency.p99_9)):
        out[name] = None if q is None else float(q)
    assert set(out) - {"throughput"} == set(PERCENTILES)
    out["lost"] = record.counters.lost
    out.update({fate: getattr(record.counters, fate) for fate in FATES})
    out["queue_peak"] = None if peak is None else float(peak)
    out["peak_rss_kb"] = float(max(rss)) if rss else None
    return out


def windows_of(run_dir: str, record: RunRecord, count: int) -> Optional[Windows]:
    """The run's receive span (first send to last receipt) cut into `count` equal windows."""
    first_send = min((p.t_first_send_ns for p in record.producers if p.t_first_send_ns), default=0)
    first_recv = min((c.t_first_recv_ns for c in record.consumers if c.t_first_recv_ns), default=0)
    start = first_send or first_recv
    end = max((c.t_last_recv_ns for c in record.consumers), default=0) + 1
    drain = min((c.t_drain_ns for c in record.consumers if c.t_drain_ns), default=end)
    files = part_files(run_dir, "recvs")
    if not files or not start or end <= start:
        return None
    edges = np.linspace(start, end, count + 1).astype(np.int64)
    edges[-1] = end
    hist = np.zeros(count * N_BUCKETS, dtype=np.int64)
    messages = np.zeros(count, dtype=np.int64)
    for path in files:
        try:
            for batch in pq.ParquetFile(path).iter_batches(
                BATCH_ROWS, columns=["t_intended_ns", "t_recv_ns"]
            ):
                t_recv = batch.column("t_recv_ns").to_numpy()
                latency = t_recv - batch.column("t_intended_ns").to_numpy()
                window = np.clip(np.searchsorted(edges, t_recv, side="right") - 1, 0, count - 1)
                hist += np.bincount(
                    window * N_BUCKETS + bucket_index(latency), minlength=count * N_BUCKETS
                )
                # throughput before the drain only: the drain's pace is not the consumers' (run.json's)
                messages += np.bincount(window[t_recv < drain], minlength=count)
        except (OSError, pa.ArrowException, KeyError, ValueError) as exc:  # not a recvs part
            said = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ReportInputError(f"{path}: not a readable recvs part ({said})") from None
    per_window = hist.reshape(count, N_BUCKETS)
    used = np.flatnonzero(per_window.sum(axis=0))
    seconds = (np.minimum(edges[1:], drain) - edges[:-1]).clip(0) / 1e9
    return Windows(
        seconds=seconds.tolist(),
        messages=messages.tolist(),
        buckets=used.tolist(),
        counts=per_window[:, used].tolist(),
    )
