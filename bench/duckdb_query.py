"""DuckDB's core figures over a run's receive records, in a process of its own: exact received,
distinct (stream, seq), duplicates and p50/p99/p99.9 latency from the intended send (quantile_disc:
the nearest rank). bench_report.py runs it beside the report:

    python bench/duckdb_query.py RUN_DIR SPILL_DIR    # prints one JSON line: figures, seconds, peak RSS

Its own process, so that numpy's truth in the bench (8 bytes a record) does not share DuckDB's memory;
a spill directory, so that DuckDB may go to disk where it can, and MEMORY_LIMIT. Two statements: the count and the
percentiles in one, the distinct (a GROUP BY, which spills) in another. One statement with
`count(DISTINCT ...)` beside the percentiles ran out of memory over 400M records at DuckDB's default
limit (18.8 GiB on this 24 GiB machine). The seconds are the connection and the queries, timed here
(as before, when DuckDB ran in the bench's process): the process's start is not DuckDB's work.

Percentiles two ways (ZMQLOAD_BENCH_DUCKDB_PERCENTILES):
- `quantile_disc` (the default): DuckDB's own, as a user writes it. It holds every value and does
  not spill: over a billion records it ran out of memory at 16 and 20 GB limits.
- `buckets`: exact in bounded memory, in DuckDB's own GROUP BYs (which spill): the count and the
  latencies' range; a count per bucket of at most BUCKETS buckets; then the latencies of the
  buckets holding each wanted rank, counted per value. Only the walks to the ranks are Python.
"""

from __future__ import annotations

import glob
import json
import math
import os
import resource
import sys
import time
from fractions import Fraction

QUANTILES = (("p50", "0.5"), ("p99", "0.99"), ("p99_9", "0.999"))
MEMORY_LIMIT = os.environ.get("ZMQLOAD_BENCH_DUCKDB_MEMORY", "16GB")
"""DuckDB's own limit: below its default (80% of RAM, 18.8 GiB here), where its DISTINCT over 400M
records asked for 4 GiB more at 15 GiB and failed; under a lower limit it spills to disk."""


PERCENTILES = os.environ.get("ZMQLOAD_BENCH_DUCKDB_PERCENTILES", "quantile_disc")
BUCKETS = 1 << 22
LATENCY = "t_recv_ns - t_intended_ns"


def rank(q: str, n: int) -> int:
    """The nearest rank of quantile q among n values, exactly (no float: 0.999 * 4000 must be 3996,
    not 3997): what quantile_disc gives, and numpy's truth in bench_report.py."""
    return max(1, math.ceil(Fraction(q) * n))


def recv_files(run_dir: str) -> list[str]:
    """A run's receive parts, in order (bench_report.py's numpy truth reads the same)."""
    return sorted(glob.glob(os.path.join(run_dir, "recvs", "*.parquet")))


def figures(run_dir: str, spill_dir: str) -> dict:
    import duckdb

    files = recv_files(run_dir)
    source = "read_parquet([" + ", ".join(f"'{f}'" for f in files) + "])"
    t = time.perf_counter()
    con = duckdb.connect(
        config={
            "temp_directory": spill_dir,
            "memory_limit": MEMORY_LIMIT,
            "preserve_insertion_order": False,
        }
    )
    try:
        if PERCENTILES == "buckets":
            received, pcts = _bucketed(con, source)
        else:
            received, pcts = con.execute(
                f"SELECT count(*), quantile_disc({LATENCY}, [{', '.join(q for _, q in QUANTILES)}]) "
                f"FROM {source}"
            ).fetchone()
        (unique,) = con.execute(
            f"SELECT count(*) FROM (SELECT DISTINCT stream, seq FROM {source})"
        ).fetchone()
    finally:
        con.close()
    seconds = time.perf_counter() - t
    return {
        "figures": {
            "received": received,
            "unique": unique,
            "duplicates": received - unique,
            **{name: int(v) for (name, _), v in zip(QUANTILES, pcts)},
        },
        "percentiles": PERCENTILES,
        "seconds": seconds,
        "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def _bucketed(con, source: str) -> tuple[int, list[int]]:
    """(received, the QUANTILES' latencies at their nearest ranks), exactly, in three statements."""
    received, lo, hi = con.execute(
        f"SELECT count(*), min({LATENCY}), max({LATENCY}) FROM {source}"
    ).fetchone()
    shift = max(0, (hi - lo).bit_length() - BUCKETS.bit_length() + 1)
    bucket = f"(({LATENCY}) - {lo}) >> {shift}"
    counts = con.execute(
        f"SELECT {bucket} AS b, count(*) FROM {source} GROUP BY b ORDER BY b"
    ).fetchall()
    wanted, below, i = [], 0, 0  # per quantile: its bucket, and its rank within that bucket
    for _, q in QUANTILES:
        k = rank(q, received)
        while below + counts[i][1] < k:
            below += counts[i][1]
            i += 1
        wanted.append((counts[i][0], k - below))
    buckets = sorted({b for b, _ in wanted})
    values = con.execute(
        f"SELECT {bucket} AS b, {LATENCY} AS v, count(*) FROM {source} "
        f"WHERE {bucket} IN ({', '.join(map(str, buckets))}) GROUP BY b, v ORDER BY b, v"
    ).fetchall()
    found = []
    for b, k in wanted:
        for vb, v, n in values:
            if vb == b:
                if k <= n:
                    found.append(v)
                    break
                k -= n
    return received, found


if __name__ == "__main__":
    print(json.dumps(figures(sys.argv[1], sys.argv[2])))
