"""The converter waits while the loop runs (parquet_writer.ChunkPipeline holds it from the start),
converts once released or closed, and stops waiting when the spilled backlog reaches its bound."""

from __future__ import annotations

import threading
import time

import numpy as np

from zmqload.runner import parquet_writer

ROWS = 1024
COLUMNS = {"t": np.int64}


def _pipeline(tmp_path):
    converted: list[np.ndarray] = []
    done = threading.Event()

    def process(chunk, rows):
        converted.append(chunk["t"][:rows].copy())
        done.set()

    return (
        parquet_writer.ChunkPipeline(COLUMNS, ROWS, process, str(tmp_path / "spill")),
        converted,
        done,
    )


def _fill(pipeline, first: int) -> None:
    pipeline.current["t"][:] = np.arange(first, first + ROWS)
    pipeline.advance(ROWS)


def test_held_converter_waits_for_release(tmp_path):
    pipeline, converted, done = _pipeline(tmp_path)
    _fill(pipeline, 0)
    _fill(pipeline, ROWS)
    assert not done.wait(0.5), "the converter ran while held"
    assert len(list((tmp_path / "spill").iterdir())) == 2  # both chunks wait on disk
    pipeline.release()
    assert done.wait(10)
    assert pipeline.close() == 0
    assert np.array_equal(np.concatenate(converted), np.arange(2 * ROWS))


def test_close_converts_a_held_backlog(tmp_path):
    pipeline, converted, _ = _pipeline(tmp_path)
    _fill(pipeline, 0)
    pipeline.current["t"][:10] = np.arange(ROWS, ROWS + 10)
    pipeline.advance(10)
    assert pipeline.close() == 0
    assert np.array_equal(np.concatenate(converted), np.arange(ROWS + 10))


def test_backlog_bound_lets_the_converter_run(tmp_path, monkeypatch):
    chunk_bytes = ROWS * 8
    monkeypatch.setattr(parquet_writer, "HOLD_BACKLOG_BYTES", 3 * chunk_bytes)
    pipeline, converted, done = _pipeline(tmp_path)
    _fill(pipeline, 0)
    assert not done.wait(0.3), "one chunk is under the bound"
    _fill(pipeline, ROWS)
    _fill(pipeline, 2 * ROWS)
    deadline = time.monotonic() + 10
    while not converted and time.monotonic() < deadline:
        time.sleep(0.01)
    assert converted, "three spilled chunks reach the bound: the converter must run although held"
    assert pipeline.close() == 0
    assert np.array_equal(np.concatenate(converted), np.arange(3 * ROWS))
