"""A run's Parquet parts read back (the layout: contract/part_files.py): the files of one kind, and
their records, for every reader with numpy (measure/, plan/slo.py, salvage)."""

from __future__ import annotations

import glob
import os

import pyarrow as pa
import pyarrow.parquet as pq

from ..contract.part_files import PART_NAME


def part_files(run_dir: str, kind: str, worker: str = "*") -> list[str]:
    """The whole Parquet parts of one record kind (of one worker, or all), in write order."""
    return sorted(
        glob.glob(os.path.join(run_dir, kind, PART_NAME.format(worker=worker, index="*")))
    )


def read_parts(run_dir: str, kind: str, columns: list[str] | None = None) -> pa.Table | None:
    """All records of one kind of a run (only `columns`, if given), or None without parts."""
    files = part_files(run_dir, kind)
    return pq.ParquetDataset(files).read(columns=columns) if files else None
