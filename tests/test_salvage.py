"""Salvage rebuilds a dead worker's final from its Parquet parts a part at a time, its maps paged
to files: the same figures numpy gives over the whole arrays, in memory that does not grow with
the run (an interrupted hour-long run's producer has hundreds of millions of sends rows)."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest

from zmqload.store import bitmaps
from zmqload.contract.ids import WorkerId, consumers, producers
from zmqload.contract.wire import SendStatus
from zmqload.contract.workload import Workload
from zmqload.runner import salvage
from zmqload.runner.parquet_writer import RECVS_SCHEMA, SENDS_SCHEMA, PartWriter

PART_ROWS = 50_000


def write_sends(run_dir: str, worker: WorkerId, status: np.ndarray, t_sent: np.ndarray) -> None:
    writer = PartWriter(os.path.join(run_dir, "sends"), str(worker), SENDS_SCHEMA, "snappy")
    for lo in range(0, len(status), PART_ROWS):
        hi = min(lo + PART_ROWS, len(status))
        seq = np.arange(lo, hi, dtype=np.int64)
        writer.write(
            {
                "stream": np.full(hi - lo, worker.index, np.int32),
                "seq": seq,
                "t_intended_ns": t_sent[lo:hi] - 1000,
                "t_sent_ns": t_sent[lo:hi],
                "status": status[lo:hi],
                "size": np.full(hi - lo, 64, np.int32),
            }
        )


def write_recvs(run_dir: str, worker: WorkerId, seq: np.ndarray, t_recv: np.ndarray) -> None:
    writer = PartWriter(os.path.join(run_dir, "recvs"), str(worker), RECVS_SCHEMA, "snappy")
    for lo in range(0, len(seq), PART_ROWS):
        hi = min(lo + PART_ROWS, len(seq))
        n = hi - lo
        writer.write(
            {
                "consumer": np.full(n, worker.index, np.int32),
                "stream": np.zeros(n, np.int32),
                "seq": seq[lo:hi],
                "t_intended_ns": t_recv[lo:hi] - 5000,
                "t_sent_ns": t_recv[lo:hi] - 4000,
                "t_recv_ns": t_recv[lo:hi],
                "size": np.full(n, 64, np.int32),
            }
        )


def bits(m: bitmaps.Bits, n: int) -> np.ndarray:
    return np.unpackbits(bitmaps.load(m))[:n].astype(bool)


@pytest.fixture
def small_pieces(monkeypatch):
    """Pages and pieces far smaller than a run, so these runs take many of each."""
    monkeypatch.setattr(salvage, "PAGE_SEQS", 1 << 13)
    monkeypatch.setattr(bitmaps, "PIECE_BYTES", 1 << 9)


def test_producer_final_equals_numpy_over_its_sends(tmp_path, small_pieces):
    rng = np.random.default_rng(5)
    n = 234_567
    status = rng.choice(
        [SendStatus.OK, SendStatus.EAGAIN, SendStatus.TIMEOUT], n, p=[0.9, 0.07, 0.03]
    ).astype(np.int8)
    status[-3:] = SendStatus.EAGAIN  # the last attempts failed: the map still covers them
    t_sent = 10**15 + np.cumsum(rng.integers(1, 900, n))
    (p0,) = producers(1)
    write_sends(str(tmp_path), p0, status, t_sent)
    final = salvage.producer_final(str(tmp_path), p0, Workload(count=n))
    c = final.counters
    assert (c.attempted, c.sent, c.eagain, c.timeout, c.errors) == (
        n,
        int((status == SendStatus.OK).sum()),
        int((status == SendStatus.EAGAIN).sum()),
        int((status == SendStatus.TIMEOUT).sum()),
        0,
    )
    assert (c.t_first_send_ns, c.t_last_send_ns) == (int(t_sent.min()), int(t_sent.max()))
    assert isinstance(final.sent_ok_map, str) and bitmaps.nbytes(final.sent_ok_map) == (n + 7) // 8
    assert np.array_equal(bits(final.sent_ok_map, n), status == SendStatus.OK)
    assert final.parts == -(-n // PART_ROWS) and final.bytes_sent == 64 * c.sent


def test_consumer_final_and_a_dead_producers_map_equal_numpy(tmp_path, small_pieces):
    rng = np.random.default_rng(9)
    n = 150_001
    status = np.where(rng.random(n) < 0.95, SendStatus.OK, SendStatus.EAGAIN).astype(np.int8)
    (p0,), (c0,) = producers(1), consumers(1)
    # the producer died at seq 100,000: its records stop there, its consumer got accepted seqs past it
    write_sends(str(tmp_path), p0, status[:100_000], 10**15 + np.arange(100_000, dtype=np.int64))
    got = np.flatnonzero(status == SendStatus.OK)
    got = got[rng.random(len(got)) < 0.97]
    arrival = got.copy()
    swap = 2 * rng.choice(
        len(arrival) // 2 - 1, 500, replace=False
    )  # a little reordering (disjoint pairs)
    arrival[swap], arrival[swap + 1] = arrival[swap + 1], arrival[swap].copy()
    arrival = np.concatenate(
        [arrival, rng.choice(got, 300)]
    )  # and duplicates, the last in the drain
    t_recv = 10**15 + 10**6 + np.arange(len(arrival), dtype=np.int64) * 10
    t_drain = int(t_recv[-400])
    write_recvs(str(tmp_path), c0, arrival, t_recv)
    w = Workload(count=n)

    cf = salvage.consumer_final(str(tmp_path), c0, w, t_drain)
    (stream,) = cf.streams
    assert cf.received == len(arrival)
    assert (stream.unique, stream.duplicates) == (len(got), len(arrival) - len(got))
    top = int(arrival.max()) + 1
    assert np.array_equal(bits(stream.seen_map, top), np.isin(np.arange(top), got))
    before = set(arrival[t_recv < t_drain].tolist())
    drained = sorted(set(arrival[t_recv >= t_drain].tolist()) - before)
    assert np.array_equal(np.flatnonzero(bits(stream.drained_map, top)), drained)

    pf = salvage.producer_final(str(tmp_path), p0, w)
    merged = salvage.with_received(pf, [stream.seen_map], str(tmp_path / "merged.ok"))
    truth = np.zeros(top, bool)
    truth[:100_000] = status[:100_000] == SendStatus.OK
    truth[got] = True
    assert merged.counters.attempted == top and merged.counters.sent == int(truth.sum())
    assert bitmaps.nbytes(merged.sent_ok_map) == (top + 7) // 8
    assert np.array_equal(bits(merged.sent_ok_map, top), truth)


def test_producer_final_holds_pages_not_the_run(tmp_path):
    """4M sends rows: the old rebuild held every seq, status and send time at once (~70 MB of numpy
    arrays); paged, the map's two pages and a part's columns."""
    n = 4_000_000
    (p0,) = producers(1)
    writer = PartWriter(os.path.join(tmp_path, "sends"), str(p0), SENDS_SCHEMA, "snappy")
    for lo in range(0, n, 1 << 20):
        hi = min(lo + (1 << 20), n)
        writer.write(
            {
                "stream": np.zeros(hi - lo, np.int32),
                "seq": np.arange(lo, hi, dtype=np.int64),
                "t_intended_ns": np.arange(lo, hi, dtype=np.int64),
                "t_sent_ns": np.arange(lo, hi, dtype=np.int64),
                "status": np.zeros(hi - lo, np.int8),
                "size": np.full(hi - lo, 64, np.int32),
            }
        )
    tracemalloc.start()
    final = salvage.producer_final(str(tmp_path), p0, Workload(count=n))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert final.counters.sent == n
    assert peak < 2 * salvage.PAGE_SEQS + (24 << 20), f"peak {peak:,} bytes"
