"""Where a run's Parquet parts are (docs/RECORDS.md: `<run>/<kind>/part-<worker>-<n>.parquet`) and
how to read one kind of them back: the layout every writer (runner/parquet_writer.py) and every reader
with numpy (measure/, plan/slo.py, salvage) shares."""
from __future__ import annotations

import glob
import os

import pyarrow as pa
import pyarrow.parquet as pq


PART_NAME = "part-{worker}-{index}.parquet"
"""A worker's Parquet parts of one record kind, numbered in the order written."""


def part_name(worker: str, index: int) -> str:
    return PART_NAME.format(worker=worker, index=f"{index:05d}")


def part_files(run_dir: str, kind: str, worker: str = "*") -> list[str]:
    """The whole Parquet parts of one record kind (of one worker, or all), in write order."""
    return sorted(glob.glob(os.path.join(run_dir, kind, PART_NAME.format(worker=worker, index="*"))))


def read_parts(run_dir: str, kind: str, columns: list[str] | None = None) -> pa.Table | None:
    """All records of one kind of a run (only `columns`, if given), or None without parts."""
    files = part_files(run_dir, kind)
    return pq.ParquetDataset(files).read(columns=columns) if files else None
