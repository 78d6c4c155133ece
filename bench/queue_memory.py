"""The controller's queue figures (zmqload.measure.queue_depth.queue_figures) over records of the same
8M receipts spread over runs of different durations: its traced peak memory (tracemalloc, numpy's
arrays), Arrow's pool peak (pyarrow's reads, which tracemalloc does not see) and the process's peak
RSS, each length measured in a fresh process. What grows with the run's duration, not its messages
(docs/BENCHMARKS.md, "Memory").

    PYTHONPATH=. .venv/bin/python bench/queue_memory.py 150 370 1500

Memory figures are valid on a shared machine; the times printed are not.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from zmqload.contract.part_files import part_name
from zmqload.contract.records import RECVS, SAMPLES

ROWS = 8_000_000
PART_ROWS = 1_000_000  # a consumer's part
SAMPLE_NS = 20_000_000  # one sample per 20 ms slice per worker
T0 = 10**12


def write_records(run_dir: str, seconds: float, seed: int = 1) -> None:
    """ROWS receipts sent evenly over `seconds`, most received within 200 us, one in 1,000 after up
    to 50 ms (a backlog now and then); a producer's and a consumer's samples every 20 ms."""
    rng = np.random.default_rng(seed)
    span = int(seconds * 1e9)
    for kind in ("recvs", "samples"):
        os.makedirs(os.path.join(run_dir, kind))
    for i, lo in enumerate(range(0, ROWS, PART_ROWS)):
        n = min(PART_ROWS, ROWS - lo)
        t_sent = T0 + (np.arange(lo, lo + n, dtype=np.int64) * span) // ROWS
        late = rng.random(n) < 0.001
        t_recv = t_sent + np.where(
            late, rng.integers(0, 50_000_000, n), rng.integers(5_000, 200_000, n)
        )
        pq.write_table(
            pa.table(
                {
                    "consumer": np.zeros(n, np.int32),
                    "stream": np.zeros(n, np.int32),
                    "seq": np.arange(lo, lo + n, dtype=np.int64),
                    "t_intended_ns": t_sent,
                    "t_sent_ns": t_sent,
                    "t_recv_ns": t_recv,
                    "size": np.full(n, 64, np.int32),
                },
                schema=RECVS.arrow,
            ),
            os.path.join(run_dir, "recvs", part_name("c0", i)),
        )
    t = T0 + np.arange(0, span + SAMPLE_NS, SAMPLE_NS, dtype=np.int64)
    for role, worker, column in (
        ("producer", "p0", "tcp_sendq_bytes"),
        ("consumer", "c0", "tcp_recvq_bytes"),
    ):
        for i, lo in enumerate(range(0, len(t), 65536)):
            part = t[lo : lo + 65536]
            n = len(part)
            columns = {
                "t_ns": part,
                "role": [role] * n,
                "worker": np.zeros(n, np.int32),
                "messages": np.zeros(n, np.int64),
                "dropped": np.zeros(n, np.int64),
                "tcp_sendq_bytes": np.full(n, -1, np.int64),
                "tcp_recvq_bytes": np.full(n, -1, np.int64),
                "rss_kb": rng.integers(100_000, 150_000, n),
            }
            columns[column] = rng.integers(0, 200_000, n)
            pq.write_table(
                pa.table(columns, schema=SAMPLES.arrow),
                os.path.join(run_dir, "samples", part_name(worker, i)),
            )


def measure(run_dir: str) -> dict:
    """queue_figures over one run's records, in this process: its peaks and what it found."""
    # imported before the trace starts: only what queue_figures allocates is counted
    from zmqload.measure.queue_depth import queue_figures

    tracemalloc.start()
    started = time.monotonic()
    figures = queue_figures(run_dir, t0_ns=T0, size=64)
    took = time.monotonic() - started
    _, traced = tracemalloc.get_traced_memory()
    return {
        "traced_peak_mb": round(traced / 1e6, 1),
        "arrow_pool_peak_mb": round(pa.default_memory_pool().max_memory() / 1e6, 1),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "peak_messages": figures["peak"]["messages"],
        "series_points": len(figures["series"]["depth"]),
        "seconds_taken": round(took, 1),
    }


def main(lengths: list[float]) -> None:
    for seconds in lengths:
        run_dir = tempfile.mkdtemp(prefix="zmqload-queue-memory-")
        try:
            write_records(run_dir, seconds)
            out = subprocess.run(
                [sys.executable, __file__, "--measure", run_dir],
                capture_output=True,
                text=True,
                check=True,
                env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
            )
            print(
                json.dumps({"run_seconds": seconds, "rows": ROWS, **json.loads(out.stdout)}),
                flush=True,
            )
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        print(json.dumps(measure(sys.argv[2])))
    else:
        main([float(a) for a in sys.argv[1:]] or [150, 370, 1500])
