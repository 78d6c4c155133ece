"""Synthetic run directories with known loss, duplicates, reordering and EAGAIN drops.

Used by the analysis tests (ground truth from numpy on the same arrays) and by the report
benchmark (bulk generation in chunks). Writes exactly the RECORDS.md layout.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from zmqload.contract.workload import Workload
from zmqload.contract import run_record as rr
from zmqload.store import record_files
from zmqload.contract.records import RECVS, SAMPLES, SCHEMA_VERSION, SENDS
from zmqload.contract.states import RunStatus
from zmqload.contract.wire import SendStatus

SEND_SCHEMA = SENDS.arrow
RECV_SCHEMA = RECVS.arrow
SAMPLE_SCHEMA = SAMPLES.arrow


@dataclass
class Synth:
    """What was generated; arrays are the full records (numpy ground truth is computed from them)."""

    path: str
    run_id: str
    sends: dict = field(default_factory=dict)
    recvs: dict = field(default_factory=dict)
    record: rr.RunRecord = field(default_factory=rr.RunRecord)


def _record(
    run_id,
    pattern,
    transport,
    size,
    rate,
    producers,
    consumers,
    fanout,
    sndhwm,
    rcvhwm,
    t0,
    status="complete",
    schema_version=SCHEMA_VERSION,
) -> rr.RunRecord:
    """The run's record, built through the type every run writes (zmqload.contract.run_record)."""
    return rr.RunRecord(
        schema_version=schema_version,
        run_id=run_id,
        status=RunStatus(status),
        workload=Workload(
            pattern=pattern,
            transport=transport,
            size=size,
            rate=rate,
            producers=producers,
            consumers=consumers,
            send_mode="dontwait",
            sndhwm=sndhwm,
            rcvhwm=rcvhwm,
            linger_ms=-1,
        ),
        pattern=rr.PatternFacts(fanout=fanout),
        versions=rr.Versions(zmqload="0.1.0", libzmq="4.3.4"),
        host=rr.Host(hostname="synth", cpus=2),
        schedule=rr.Schedule(t0_ns=int(t0), rate_per_producer=rate, fanout=fanout),
        started_at="2026-11-22T00:00:00+00:00",
        finished_at="2026-11-22T00:00:01+00:00",
    )


def write_parts(directory, table, rows_per_part, prefix):
    os.makedirs(directory, exist_ok=True)
    n = table.num_rows
    for i, start in enumerate(range(0, max(n, 1), rows_per_part)):
        if n == 0:
            break
        pq.write_table(
            table.slice(start, rows_per_part),
            os.path.join(directory, f"part-{prefix}-{i:05d}.parquet"),
        )


def make_run(
    parent,
    run_id="synth",
    *,
    streams=2,
    count=5000,
    consumers=1,
    fanout=False,
    rate=100_000,
    size=64,
    pattern="push-pull",
    transport="tcp",
    sndhwm=1000,
    rcvhwm=1000,
    lost_start=0,
    lost_tail=0,
    lost_middle=0,
    eagain=0,
    timeouts=0,
    duplicates=0,
    reorder_swaps=0,
    base_latency_ns=50_000,
    stall_every=0,
    seed=0,
    rows_per_part=4000,
    run_status="complete",
    schema_version=SCHEMA_VERSION,
) -> Synth:
    """One run directory: `streams` producers each sending `count` messages at `rate`/s.

    Per stream and (for fan-out) per consumer: the first `lost_start` sent-ok messages and the
    last `lost_tail` are not received, `lost_middle` random middle ones are not received,
    `eagain`/`timeouts` random sends fail at the sender (never received), `duplicates` random
    received messages arrive twice, `reorder_swaps` adjacent pairs arrive swapped.
    """
    rng = np.random.default_rng(seed)
    t0 = 1_000_000_000_000
    period = int(1e9 // rate)
    path = os.path.join(parent, f"run={run_id}")
    sends_cols = {k: [] for k in SEND_SCHEMA.names}
    recv_cols = {k: [] for k in RECV_SCHEMA.names}
    ncons = consumers if fanout else 1
    for s in range(streams):
        seq = np.arange(count, dtype=np.int64)
        t_int = t0 + seq * period
        stall = rng.integers(0, 2_000, count)
        if stall_every:
            stall[::stall_every] += 3_000_000
        t_sent = t_int + stall
        status = np.full(count, SendStatus.OK, np.int8)
        middle = np.arange(max(lost_start, 10) + 10, count - max(lost_tail, 10) - 10)
        picks = rng.choice(
            middle,
            eagain + timeouts + lost_middle * ncons + duplicates + 2 * reorder_swaps + 50,
            replace=False,
        )
        status[picks[:eagain]] = SendStatus.EAGAIN
        status[picks[eagain : eagain + timeouts]] = SendStatus.TIMEOUT
        rest = picks[eagain + timeouts :]
        sends_cols["stream"].append(np.full(count, s, np.int32))
        sends_cols["seq"].append(seq)
        sends_cols["t_intended_ns"].append(t_int)
        sends_cols["t_sent_ns"].append(t_sent)
        sends_cols["status"].append(status)
        sends_cols["size"].append(np.full(count, size, np.int32))
        ok_idx = np.flatnonzero(status == SendStatus.OK)
        for c in range(consumers if fanout else 1):
            mid = rest[c * lost_middle : (c + 1) * lost_middle]
            rest_c = rest[ncons * lost_middle :]
            keep = np.ones(count, bool)
            keep[status != SendStatus.OK] = False
            keep[ok_idx[:lost_start]] = False
            if lost_tail:
                keep[ok_idx[-lost_tail:]] = False
            keep[mid] = False
            rseq = np.flatnonzero(keep).astype(np.int64)
            dup = rest_c[:duplicates]
            dup = dup[keep[dup]]
            # The duplicate arrives right after the original (as a resend would).
            pos = np.searchsorted(rseq, dup)
            rseq = np.insert(rseq, pos + 1, dup)
            # Reorder: swap adjacent received pairs away from duplicates.
            cand = (
                rng.choice(np.arange(5, len(rseq) - 5, 3), reorder_swaps, replace=False)
                if reorder_swaps
                else []
            )
            for i in cand:
                rseq[i], rseq[i + 1] = rseq[i + 1], rseq[i]
            lat = base_latency_ns + rng.lognormal(9, 1.0, len(rseq)).astype(np.int64)
            t_recv_order = np.maximum.accumulate(t_sent[rseq] + lat) + np.arange(
                len(rseq)
            )  # strictly increasing
            who = (
                np.full(len(rseq), c, np.int32)
                if fanout
                else rng.integers(0, consumers, len(rseq)).astype(np.int32)
            )
            recv_cols["consumer"].append(who)
            recv_cols["stream"].append(np.full(len(rseq), s, np.int32))
            recv_cols["seq"].append(rseq)
            recv_cols["t_intended_ns"].append(t_int[rseq])
            recv_cols["t_sent_ns"].append(t_sent[rseq])
            recv_cols["t_recv_ns"].append(t_recv_order)
            recv_cols["size"].append(np.full(len(rseq), size, np.int32))
    sends = {k: np.concatenate(v) for k, v in sends_cols.items()}
    recvs = {k: np.concatenate(v) for k, v in recv_cols.items()}
    # Receivers write in receive order.
    order = np.argsort(recvs["t_recv_ns"], kind="stable")
    recvs = {k: v[order] for k, v in recvs.items()}
    write_parts(
        os.path.join(path, "sends"), pa.table(sends, schema=SEND_SCHEMA), rows_per_part, "p000"
    )
    write_parts(
        os.path.join(path, "recvs"), pa.table(recvs, schema=RECV_SCHEMA), rows_per_part, "c000"
    )
    tmax = int(recvs["t_recv_ns"].max()) if len(recvs["t_recv_ns"]) else t0
    ts = np.arange(t0, tmax + 20_000_000, 20_000_000, dtype=np.int64)
    samples = pa.table(
        {
            "t_ns": ts,
            "role": ["producer"] * len(ts),
            "worker": np.zeros(len(ts), np.int32),
            "messages": np.searchsorted(np.sort(sends["t_sent_ns"]), ts).astype(np.int64),
            "dropped": np.zeros(len(ts), np.int64),
            "tcp_sendq_bytes": np.full(len(ts), -1, np.int64),
            "tcp_recvq_bytes": np.full(len(ts), -1, np.int64),
            "rss_kb": np.full(len(ts), -1, np.int64),
        },
        schema=SAMPLE_SCHEMA,
    )
    write_parts(os.path.join(path, "samples"), samples, 100_000, "p000")
    record = _record(
        run_id,
        pattern,
        transport,
        size,
        rate,
        streams,
        consumers,
        fanout,
        sndhwm,
        rcvhwm,
        t0,
        run_status,
        schema_version,
    )
    record_files.write_run(path, record)
    return Synth(path=path, run_id=run_id, sends=sends, recvs=recvs, record=record)
