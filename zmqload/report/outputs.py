"""summary.parquet and summary.csv: every figure, one row per (run, consumer, stream)."""
from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ..analysis.pipeline import SUMMARY_COLUMNS

_TYPES = {"run": pa.string(), "status": pa.string(), "pattern": pa.string(), "transport": pa.string(),
          "send_mode": pa.string(), "interrupted": pa.bool_(), "fanout": pa.bool_()}
_FLOAT = ("rate_per_producer", "_rate", "_us", "_s", "ratio", "mb_s", "depth_mean", "depth_p99", "queued_bytes", "mean_size")


def summary_table(rows: list[dict[str, Any]]) -> pa.Table:
    fields = []
    for c in SUMMARY_COLUMNS:
        t = _TYPES.get(c) or (pa.float64() if c.endswith(_FLOAT) or c.startswith("queued") else pa.int64())
        fields.append(pa.field(c, t))
    schema = pa.schema(fields)
    cols = {}
    for f in schema:
        vals = [r.get(f.name) for r in rows]
        if pa.types.is_floating(f.type):
            vals = [None if v is None else float(v) for v in vals]
        elif pa.types.is_integer(f.type):
            vals = [None if v is None else int(v) for v in vals]
        cols[f.name] = pa.array(vals, type=f.type)
    return pa.table(cols, schema=schema)


def write_summary(rows: list[dict[str, Any]], out_dir: str) -> None:
    table = summary_table(rows)
    pq.write_table(table, os.path.join(out_dir, "summary.parquet"))
    pacsv.write_csv(table, os.path.join(out_dir, "summary.csv"))
