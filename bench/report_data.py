"""Synthetic run directories at benchmark scale (up to hundreds of millions of records).

Written in chunks with numpy + pyarrow in the engine's Parquet layout (delta-encoded
integers, no dictionary, snappy), cached under /tmp keyed by size so reruns reuse them.
Never commit the data.
"""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from zmqload.contract.workload import Workload
from zmqload.contract import run_record as rr
from zmqload.store import record_files
from zmqload.contract.records import RECVS, SAMPLES, SENDS
from zmqload.contract.states import RunStatus
from zmqload.contract.wire import SendStatus

SEND_SCHEMA, RECV_SCHEMA, SAMPLE_SCHEMA = SENDS.arrow, RECVS.arrow, SAMPLES.arrow
CACHE = os.environ.get("ZMQLOAD_BENCH_CACHE", "/tmp/zmqload-bench-report")
FORMAT = 3  # bump when the generated data changes


def _write(path, table):
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    pq.write_table(
        table,
        tmp,
        compression="snappy",
        use_dictionary=False,
        column_encoding={
            f.name: "DELTA_BINARY_PACKED"
            for f in table.schema
            if pa.types.is_integer(f.type) and f.type.bit_width >= 32
        },
    )
    os.replace(tmp, path)


def generate(
    records: int,
    producers: int = 2,
    rate_per_producer: int = 500_000,
    chunk: int = 1 << 20,
    size: int = 64,
    seed: int = 7,
    cache: str = CACHE,
) -> str:
    """Path of a run directory with about `records` receive records (and their sends).

    Defects, so every metric has work: 1000 messages per stream lost at the start, 500 at the
    tail, 1 in 100,000 lost mid-run and 1 in 100,000 sends dropped with EAGAIN, 1 in 10^6
    duplicated; latency log-normal (median ~30 us) with periodic stalls.
    """
    name = f"run=bench-{records}-p{producers}-v{FORMAT}"
    root = os.path.join(cache, str(records))
    path = os.path.join(root, name)
    if os.path.exists(os.path.join(path, "run.json")):
        return path
    shutil.rmtree(path, ignore_errors=True)
    for d in ("sends", "recvs", "samples"):
        os.makedirs(os.path.join(path, d))
    rng = np.random.default_rng(seed)
    per_stream = -(-records // producers)
    period = 10**9 // rate_per_producer
    t0 = 10**12
    part = 0
    for start in range(0, per_stream, chunk):
        n = min(chunk, per_stream - start)
        seq = np.arange(start, start + n, dtype=np.int64)
        t_int = t0 + seq * period
        recv_parts = []
        for s in range(producers):
            stall = rng.integers(0, 400, n)
            burst = (seq % 400_000) < 2000  # a 4 ms stall every 0.8 s
            stall[burst] += 4_000_000 - (seq[burst] % 400_000) * period
            t_sent = t_int + stall
            status = np.zeros(n, np.int8)
            status[rng.random(n) < 1e-5] = SendStatus.EAGAIN
            _write(
                os.path.join(path, "sends", f"part-p{s:03d}-{part:05d}.parquet"),
                pa.table(
                    {
                        "stream": np.full(n, s, np.int32),
                        "seq": seq,
                        "t_intended_ns": t_int,
                        "t_sent_ns": t_sent,
                        "status": status,
                        "size": np.full(n, size, np.int32),
                    },
                    schema=SEND_SCHEMA,
                ),
            )
            keep = (
                (status == SendStatus.OK)
                & (rng.random(n) >= 1e-5)
                & (seq >= 1000)
                & (seq < per_stream - 500)
            )
            idx = np.flatnonzero(keep)
            dup = idx[rng.random(len(idx)) < 1e-6]
            idx = np.sort(np.concatenate([idx, dup]))
            lat = (20_000 + rng.lognormal(9.2, 0.6, len(idx))).astype(np.int64)
            recv_parts.append(
                (
                    np.full(len(idx), s, np.int32),
                    seq[idx],
                    t_int[idx],
                    t_sent[idx],
                    t_sent[idx] + lat,
                )
            )
        cols = [np.concatenate(c) for c in zip(*recv_parts)]
        order = np.argsort(cols[4], kind="stable")
        cols = [c[order] for c in cols]
        m = len(cols[0])
        _write(
            os.path.join(path, "recvs", f"part-c000-{part:05d}.parquet"),
            pa.table(
                {
                    "consumer": np.zeros(m, np.int32),
                    "stream": cols[0],
                    "seq": cols[1],
                    "t_intended_ns": cols[2],
                    "t_sent_ns": cols[3],
                    "t_recv_ns": cols[4],
                    "size": np.full(m, size, np.int32),
                },
                schema=RECV_SCHEMA,
            ),
        )
        part += 1
    t_end = t0 + per_stream * period
    ts = np.arange(t0, t_end, 20_000_000, dtype=np.int64)
    _write(
        os.path.join(path, "samples", "part-p000-00000.parquet"),
        pa.table(
            {
                "t_ns": ts,
                "role": ["producer"] * len(ts),
                "worker": np.zeros(len(ts), np.int32),
                "messages": ((ts - t0) // period).astype(np.int64),
                "dropped": np.zeros(len(ts), np.int64),
                "tcp_sendq_bytes": np.full(len(ts), -1, np.int64),
                "tcp_recvq_bytes": np.full(len(ts), -1, np.int64),
                "rss_kb": np.full(len(ts), -1, np.int64),
            },
            schema=SAMPLE_SCHEMA,
        ),
    )
    record_files.write_run(
        path,
        rr.RunRecord(
            run_id=f"bench-{records}",
            status=RunStatus.COMPLETE,
            workload=Workload(
                pattern="push-pull",
                transport="tcp",
                size=size,
                count=per_stream,
                rate=rate_per_producer,
                producers=producers,
                consumers=1,
                send_mode="dontwait",
                sndhwm=1000,
                rcvhwm=1000,
                linger_ms=-1,
            ),
            versions=rr.Versions(zmqload="synthetic"),
            host=rr.Host(hostname="synthetic", cpus=os.cpu_count()),
            schedule=rr.Schedule(t0_ns=t0, rate_per_producer=rate_per_producer, fanout=False),
        ),
    )
    return path


if __name__ == "__main__":
    print(generate(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000))
