"""Spill files prepared before the loop (parquet_writer.SLOT_PREFIX): the pipeline writes them up
front for the rows it expects, each spill overwrites one in place and becomes a whole `.raw`
chunk, a partial chunk is cut to its rows, unused ones go at close, and nothing that reads
the spill (the converter, salvage's `*.raw`) ever takes a slot for records."""

from __future__ import annotations

import glob
import os
import time

import numpy as np

from zmqload.runner import parquet_writer

ROWS = 1024
COLUMNS = {"t": np.int64, "s": np.int8}
ROW_BYTES = 9


def _pipeline(tmp_path, expected_rows):
    converted: list[tuple[np.ndarray, np.ndarray]] = []

    def process(chunk, rows):
        converted.append((chunk["t"][:rows].copy(), chunk["s"][:rows].copy()))

    spill = tmp_path / "spill"
    return (
        parquet_writer.ChunkPipeline(
            COLUMNS, ROWS, process, str(spill), expected_rows=expected_rows
        ),
        converted,
        spill,
    )


def _fill(pipeline, first: int, rows: int) -> None:
    pipeline.current["t"][:rows] = np.arange(first, first + rows)
    pipeline.current["s"][:rows] = np.arange(first, first + rows) % 3
    pipeline.advance(rows)


def _names(spill, pattern):
    return sorted(os.path.basename(p) for p in glob.glob(str(spill / pattern)))


def test_slots_cover_the_expected_rows_and_become_whole_chunks(tmp_path):
    pipeline, converted, spill = _pipeline(tmp_path, expected_rows=2 * ROWS + ROWS // 2)
    slots = _names(spill, parquet_writer.SLOT_PREFIX + "*")
    assert len(slots) == 3 and _names(spill, "*.raw") == []
    sizes = sorted(os.path.getsize(spill / name) for name in slots)
    assert sizes == [ROWS // 2 * ROW_BYTES, ROWS * ROW_BYTES, ROWS * ROW_BYTES]

    _fill(pipeline, 0, ROWS)
    _fill(pipeline, ROWS, ROWS)
    assert len(_names(spill, parquet_writer.SLOT_PREFIX + "*")) == 1
    assert [os.path.getsize(spill / n) for n in _names(spill, "*.raw")] == [ROWS * ROW_BYTES] * 2
    _fill(pipeline, 2 * ROWS, 100)
    assert pipeline.close() == 0
    assert not spill.exists(), "every slot used or removed, every chunk converted"
    t = np.concatenate([c[0] for c in converted])
    s = np.concatenate([c[1] for c in converted])
    assert np.array_equal(t, np.arange(2 * ROWS + 100))
    assert np.array_equal(s, np.arange(2 * ROWS + 100) % 3)


def test_a_short_chunk_in_a_full_slot_is_cut_to_its_rows(tmp_path):
    pipeline, converted, spill = _pipeline(tmp_path, expected_rows=ROWS)
    pipeline.current["t"][:] = -1  # left over past row 10: must not reach the chunk
    pipeline.current["s"][:] = -1
    _fill(pipeline, 0, 10)
    pipeline._spill()
    [raw] = glob.glob(str(spill / "*.raw"))
    assert os.path.getsize(raw) == 10 * ROW_BYTES
    read = parquet_writer.spill_columns_of(raw, [(n, np.dtype(d)) for n, d in COLUMNS.items()])
    assert read is not None
    columns, rows = read
    assert (
        rows == 10
        and np.array_equal(columns["t"], np.arange(10))
        and np.array_equal(columns["s"], np.arange(10) % 3)
    )
    assert pipeline.close() == 0
    assert np.array_equal(converted[0][0], np.arange(10))


def test_a_killed_worker_leaves_slots_no_reader_takes_for_records(tmp_path):
    """As a worker killed mid-run leaves it: one chunk spilled, slots still unused. The
    chunks salvage reads are the `*.raw` ones, and those hold exactly the rows spilled."""
    pipeline, _, spill = _pipeline(tmp_path, expected_rows=3 * ROWS)
    _fill(pipeline, 0, ROWS)
    raws = glob.glob(str(spill / "*.raw"))
    assert len(raws) == 1 and len(_names(spill, parquet_writer.SLOT_PREFIX + "*")) == 2
    columns, rows = parquet_writer.spill_columns_of(
        raws[0], [(n, np.dtype(d)) for n, d in COLUMNS.items()]
    )
    assert rows == ROWS and np.array_equal(columns["t"], np.arange(ROWS))
    pipeline.close()


def test_slots_stop_at_the_held_backlog_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(parquet_writer, "HOLD_BACKLOG_BYTES", 4 * ROWS * ROW_BYTES)
    pipeline, _, spill = _pipeline(tmp_path, expected_rows=1 << 40)
    total = sum(
        os.path.getsize(p) for p in glob.glob(str(spill / (parquet_writer.SLOT_PREFIX + "*")))
    )
    assert total == 4 * ROWS * ROW_BYTES
    assert pipeline.close() == 0 and not spill.exists()


def test_no_expected_rows_no_slots(tmp_path):
    pipeline, converted, spill = _pipeline(tmp_path, expected_rows=0)
    assert _names(spill, "*") == []
    _fill(pipeline, 0, ROWS + 0)
    assert pipeline.close() == 0
    assert np.array_equal(converted[0][0], np.arange(ROWS))


def test_a_chunk_converted_while_the_loop_runs_becomes_a_slot_again(tmp_path, monkeypatch):
    monkeypatch.setattr(parquet_writer, "HOLD_BACKLOG_BYTES", 2 * ROWS * ROW_BYTES)
    pipeline, converted, spill = _pipeline(tmp_path, expected_rows=0)
    _fill(pipeline, 0, ROWS)
    _fill(pipeline, ROWS, ROWS)  # the bound: the converter runs beside the loop
    deadline = time.monotonic() + 10
    while not _names(spill, parquet_writer.SLOT_PREFIX + "*") and time.monotonic() < deadline:
        time.sleep(0.01)
    # the held converter takes the backlog just under its bound: one chunk
    [recycled] = _names(spill, parquet_writer.SLOT_PREFIX + "*")
    [waiting] = _names(spill, "*.raw")
    inode = os.stat(spill / recycled).st_ino
    _fill(pipeline, 2 * ROWS, ROWS)
    assert not (spill / recycled).exists()
    [new] = set(_names(spill, "*.raw")) - {waiting}
    assert os.stat(spill / new).st_ino == inode, "the spill wrote into the recycled file"
    assert pipeline.close() == 0 and not spill.exists()
    assert np.array_equal(np.concatenate([c[0] for c in converted]), np.arange(3 * ROWS))


def test_the_chunk_the_loop_fills_is_touched_before_the_loop(tmp_path):
    """Filling the current chunk takes no page faults: its pages were written through when the
    pipeline was built (fresh pages of the same size take one each, the control: from mmap, as
    np.empty may reuse heap pages touched before)."""
    import mmap
    import resource

    rows = 1 << 18  # 2.3 MB of these columns: ~560 pages

    def faults_while(fill) -> int:
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        fill()
        return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before

    pages = rows * ROW_BYTES // 4096
    fresh = mmap.mmap(-1, rows * ROW_BYTES)
    assert faults_while(lambda: np.frombuffer(fresh, np.uint8).fill(1)) > pages // 2
    pipeline = parquet_writer.ChunkPipeline(
        COLUMNS, rows, lambda chunk, n: None, str(tmp_path / "spill")
    )
    try:
        assert (
            faults_while(lambda: [column.fill(1) for column in pipeline.current.values()])
            < pages // 20
        )
    finally:
        pipeline.close()
