"""The record format and the numpy-side building blocks (no sockets)."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pyarrow.parquet as pq
import pytest

from zmqload import _engine
from zmqload.contract import wire
from zmqload.contract.control import ProducerFinal, SendCounters, StreamSeen
from zmqload.measure.reconcile import missing_ranges, reconcile
from zmqload.measure.histogram import Histogram, bucket_index, bucket_value
from zmqload.runner.parquet_writer import (
    RECVS_SCHEMA,
    SAMPLE_BLOCK_ROWS,
    SAMPLES_SCHEMA,
    SENDS_SCHEMA,
    REPLIES_SCHEMA,
    PartWriter,
    Samples,
    SeenMap,
)


@pytest.mark.parametrize(
    "schema",
    [SENDS_SCHEMA, RECVS_SCHEMA, SAMPLES_SCHEMA, REPLIES_SCHEMA],
    ids=["sends", "recvs", "samples", "replies"],
)
def test_parquet_round_trip(tmp_path, schema):
    rng = np.random.default_rng(7)
    n = 5000
    columns = {}
    for field in schema:
        if field.type == "string":
            columns[field.name] = [["producer", "consumer"][i % 2] for i in range(n)]
        else:
            dtype = field.type.to_pandas_dtype()
            columns[field.name] = rng.integers(0, 100, n).astype(dtype)
    writer = PartWriter(str(tmp_path / "kind"), "p000", schema, "snappy")
    writer.write(columns)
    writer.write(columns)
    files = sorted((tmp_path / "kind").glob("part-*.parquet"))
    assert [f.name for f in files] == ["part-p000-00000.parquet", "part-p000-00001.parquet"]
    assert not list((tmp_path / "kind").glob(".*"))
    table = pq.read_table(files[1])
    assert table.schema.equals(schema)
    for name, values in columns.items():
        assert list(table.column(name).to_pylist()) == list(np.asarray(values).tolist())


def test_writing_records_leaves_pandas_unimported(tmp_path):
    """pyarrow's conversions of numpy arrays import pandas where it is installed: ~50 MB on every
    worker's peak RSS, more than a 600 x 32 KiB backlog, which its figure then hid."""
    code = (
        "import sys, numpy as np\n"
        "from zmqload.runner.parquet_writer import PartWriter, SAMPLES_SCHEMA\n"
        f"w = PartWriter({str(tmp_path)!r}, 'c0', SAMPLES_SCHEMA, 'snappy')\n"
        "w.write({f.name: ['consumer'] * 3 if f.name == 'role' else np.arange(3)"
        " for f in SAMPLES_SCHEMA})\n"
        "assert w.rows == 3 and 'pandas' not in sys.modules, sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_wire_header_layout():
    msg = _engine.warmup_message(5, 40)
    assert len(msg) == 40
    word = int.from_bytes(msg[:8], "little")
    t_sent = int.from_bytes(msg[8:16], "little")
    assert (word >> 48) & 0xFF == 0xFF and word & 0xFFFFFFFFFF == 5
    check = ((word >> 40) & 0xFF) | (word >> 56) << 8
    assert check == wire.check(0xFF, 5, t_sent)  # the public key's check
    assert abs(t_sent - _engine.now_ns()) < 10_000_000_000


def test_intended_schedule_matches_engine():
    t0, rate = 1_000_000_000_123, 333_333
    seqs = np.array([0, 1, 2, 999_999, 123_456_789], dtype=np.int64)
    from zmqload.runner.parquet_writer import intended_times

    numpy_side = intended_times(t0, seqs, rate, seqs)
    assert [_engine.intended_ns(t0, int(s), rate) for s in seqs] == numpy_side.tolist()


def test_histogram_percentiles_within_one_percent():
    rng = np.random.default_rng(3)
    values = rng.lognormal(11, 1.5, 200_000).astype(np.int64)
    hist = Histogram()
    for part in np.array_split(values, 7):
        hist.record(part)
    for q in (50, 90, 99, 99.9):
        truth = np.percentile(values, q, method="inverted_cdf")
        assert abs(hist.percentile(q) - truth) / truth < 0.01, q
    assert hist.percentile(100) == values.max()
    assert hist.count == len(values)
    again = Histogram.from_payload(hist.to_payload())
    assert again.percentile(99) == hist.percentile(99)


def test_histogram_buckets_are_monotonic_and_tight():
    v = np.arange(1, 1 << 22, 7, dtype=np.int64)
    idx = bucket_index(v)
    assert np.all(np.diff(idx) >= 0)
    assert np.max(np.abs(bucket_value(idx) - v) / v) < 1 / 128


def test_seen_map_counts_duplicates_and_reordering():
    seen = SeenMap(10)
    seen.add(np.array([0, 1, 2, 5, 4, 4], dtype=np.int64))
    seen.add(np.array([3, 2, 6], dtype=np.int64))
    assert seen.unique == 7
    assert seen.duplicates == 2
    assert seen.reordered == 4  # 4, 4, 3, 2 arrived after a higher seq
    assert seen.max_seq == 6


def test_reconcile_fanout_and_round_robin():
    sent = np.ones(10, dtype=bool)
    sent[7] = False  # an EAGAIN drop: not sent, not lost
    producers = {
        0: ProducerFinal(SendCounters(attempted=10, sent=9), sent_ok_map=np.packbits(sent))
    }
    got_a = np.zeros(10, bool)
    got_a[[0, 2, 4, 6, 8]] = True
    got_b = np.zeros(10, bool)
    got_b[[1, 3, 5]] = True
    nothing_drained = np.zeros(2, np.uint8)
    consumers = {
        0: {
            0: StreamSeen(
                0,
                unique=5,
                duplicates=0,
                reordered=0,
                seen_map=np.packbits(got_a),
                drained_map=nothing_drained,
            )
        },
        1: {
            0: StreamSeen(
                0,
                unique=3,
                duplicates=0,
                reordered=0,
                seen_map=np.packbits(got_b),
                drained_map=nothing_drained,
            )
        },
    }
    rr = reconcile(producers, consumers, fanout=False).streams[0]
    assert rr["expected"] == 9 and rr["unique_received"] == 8 and rr["lost"] == 1
    assert rr["missing_ranges"]["all"] == [[9, 9]]
    fan = reconcile(producers, consumers, fanout=True).streams[0]
    assert fan["expected"] == 18 and fan["lost"] == 18 - 8
    assert fan["missing_ranges"][1] == [[0, 0], [2, 2], [4, 4], [6, 6], [8, 9]]


def test_missing_ranges_limit():
    bits = np.zeros(1000, bool)
    bits[10:20] = True
    bits[500] = True
    assert missing_ranges(np.packbits(bits)) == [[10, 19], [500, 500]]
    bits[::3] = True
    assert len(missing_ranges(np.packbits(bits), limit=5)) == 5


def test_compiled_histogram_matches_numpy_layout():
    rng = np.random.default_rng(11)
    values = np.concatenate(
        [
            rng.integers(-5, 300, 1000),
            rng.lognormal(15, 4, 5000).astype(np.int64),
            np.array([0, 127, 128, 255, 256, 2**40, 2**62]),
        ]
    ).astype(np.int64)
    counts = np.zeros_like(Histogram().counts)
    lo, hi, total = _engine.histogram_add(values, counts)
    expected = np.bincount(bucket_index(values), minlength=len(counts))
    assert np.array_equal(counts, expected)
    assert (lo, hi, total) == (values.min(), values.max(), int(values.sum()))


def test_samples_hold_bounded_memory_and_write_every_row(tmp_path):
    """An hour of samples (one per 20 ms slice: 180,000) in a few hundred kB held at any time, and
    every row written back as it was added (the list of tuples this replaced held ~19 MB at 65,536)."""
    samples = Samples(PartWriter(str(tmp_path), "p0", SAMPLES_SCHEMA, "snappy"), "producer", 3)
    n = 180_000
    t = 10**18 + np.arange(n, dtype=np.int64) * 20_000_000
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        samples.add(int(t[i]), i * 2000, i // 7, 4096 + i, -1, 150_000 + i % 5)
        if i % 10_000 == 0:
            held = tracemalloc.get_traced_memory()[0] - base
            assert held < 1 << 20, f"{held} bytes held after {i} samples"
    tracemalloc.stop()
    samples.flush()
    table = pq.read_table(str(tmp_path)).sort_by("t_ns")
    assert table.num_rows == n and samples.writer.parts == -(-n // SAMPLE_BLOCK_ROWS)
    assert np.array_equal(table.column("t_ns").to_numpy(), t)
    assert np.array_equal(table.column("messages").to_numpy(), np.arange(n) * 2000)
    assert np.array_equal(table.column("dropped").to_numpy(), np.arange(n) // 7)
    assert np.array_equal(table.column("tcp_sendq_bytes").to_numpy(), 4096 + np.arange(n))
    assert set(table.column("tcp_recvq_bytes").to_numpy().tolist()) == {-1}
    assert np.array_equal(table.column("rss_kb").to_numpy(), 150_000 + np.arange(n) % 5)
    assert set(table.column("role").to_pylist()) == {"producer"} and set(
        table.column("worker").to_pylist()
    ) == {3}


def test_an_untrusted_seen_map_holds_scattered_seqs_behind_and_counts_them_exactly(
    tmp_path, monkeypatch
):
    """A user's producer (--role consumer) may scatter seqs over every page its pace allows: a seq
    is placed only within 2^23 + 256 seqs per arrival so far (the rest counted `beyond`), those behind
    the newest pages are set later in one pass, and the map and its counts are numpy's."""
    from zmqload.runner import parquet_writer

    monkeypatch.setattr(parquet_writer, "BEHIND_ROWS", 500)  # several passes in a small run
    rng = np.random.default_rng(38)
    chunks = [rng.integers(0, 40 * (1 << 20), rng.integers(1, 400)) for _ in range(60)]
    chunks += [np.arange(10 << 20, (10 << 20) + 1000)]  # then in order near the top
    seen = parquet_writer.SeenMap(1 << 20, str(tmp_path / "s"), untrusted=True)
    loads = []
    page = parquet_writer.PagedFlags._page
    monkeypatch.setattr(
        parquet_writer.PagedFlags,
        "_page",
        lambda self, k: (k in self.pages or loads.append(k)) and None or page(self, k),
    )
    placed, beyond, rows = [], 0, 0
    for chunk in chunks:
        seen.add(chunk.astype(np.int64), np.zeros(len(chunk), bool))
        rows += len(chunk)
        ok = chunk < (1 << 23) + 256 * rows
        placed.append(chunk[ok])
        beyond += int((~ok).sum())
    packed, drained = seen.packed()
    everything = np.concatenate(placed)
    distinct = np.unique(everything)
    flags = np.unpackbits(np.fromfile(packed, np.uint8))[: distinct.max() + 1]
    assert np.array_equal(np.flatnonzero(flags), distinct)
    assert (seen.unique, seen.duplicates, seen.beyond) == (
        len(distinct),
        len(everything) - len(distinct),
        beyond,
    )
    assert 0 < beyond < rows and len(drained) == 0
    assert os.path.getsize(packed) <= (1 << 20) + 32 * rows  # 1 MiB + 32 bytes an arrival
    # a page is brought in once per pass over what is held, not once per chunk that touches it
    assert len(loads) < len(everything) // 4
