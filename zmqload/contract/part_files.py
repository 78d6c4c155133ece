"""Where a run's Parquet parts are (docs/RECORDS.md: `<run>/<kind>/part-<worker>-<n>.parquet`): the
layout every writer (runner/parquet_writer.py) and every reader (store/parquet_parts.py) shares.
Names only: reading them back is store/parquet_parts.py's."""

from __future__ import annotations


PART_NAME = "part-{worker}-{index}.parquet"
"""A worker's Parquet parts of one record kind, numbered in the order written."""


def part_name(worker: str, index: int) -> str:
    return PART_NAME.format(worker=worker, index=f"{index:05d}")
