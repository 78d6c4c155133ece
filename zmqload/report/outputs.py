"""summary.parquet and summary.csv: every figure, one row per (run, consumer, stream), with the
verdict of the run's group; capacity.json: the verdicts, one per group; topics.parquet and topics.csv
(runs with --topics): one row per (run, topic, consumer)."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ..analysis.verdicts import VERDICT_COLUMNS, verdict_columns
from ..analysis.pipeline import SUMMARY
from ..analysis.summary_row import SummaryRow
from ..analysis.verdict_group import VerdictGroup
from ..contract.search_record import SearchRecord
from . import search_answer

# The verdict columns added beside the summary's own (analysis.pipeline.SUMMARY types those).
_TYPES = {
    "group": pa.string(),
    "highest_clean_rate": pa.float64(),
    "lowest_failing_rate": pa.float64(),
    "failed_slo": pa.string(),
    "monotone": pa.bool_(),
}
# What capacity.json keeps of a group (capacity.capacity_table), beside its keys.
CAPACITY_FIELDS = (
    "group",
    "highest_clean_rate",
    "lowest_failing_rate",
    "failed_slo",
    "failure",
    "monotone",
    "monotone_note",
    "verdict",
    "cause",
    "advice",
    "rates_tested",
    "run_ids",
    "max_throughput",
)


def _column(name: str, vals: list[Any]) -> pa.Array:
    """A group key column: its values' own type, text when the runs disagree (e.g. 'max' and 10)."""
    try:
        return pa.array(vals)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in vals], type=pa.string())


def summary_table(rows: list[SummaryRow], capacity: list[VerdictGroup] | None = None) -> pa.Table:
    flat = [r.columns() for r in rows]
    cols = {}
    for f in SUMMARY.arrow:
        vals = [r[f.name] for r in flat]
        if pa.types.is_floating(f.type):
            vals = [None if v is None else float(v) for v in vals]
        elif pa.types.is_integer(f.type):
            vals = [None if v is None else int(v) for v in vals]
        cols[f.name] = pa.array(vals, type=f.type)
    if capacity:
        by_run = verdict_columns(capacity)
        names = [n for g in capacity for n in (f"group_{k}" for k in g.key_names)]
        for name in list(dict.fromkeys(names)) + list(VERDICT_COLUMNS):
            vals = [by_run.get(str(r.run), {}).get(name) for r in rows]
            cols[name] = (
                pa.array(vals, type=_TYPES[name]) if name in _TYPES else _column(name, vals)
            )
    return pa.table(cols)


TOPIC_COLUMNS = {
    "run": pa.string(),
    "topic": pa.string(),
    "consumer": pa.int64(),
    "subscribed": pa.bool_(),
    "sent": pa.int64(),
    "expected": pa.int64(),
    "received": pa.int64(),
    "lost": pa.int64(),
}
"""topics.parquet: analysis.pipeline.topic_figures' rows (run.json's `topics`, flattened)."""


def write_topics(rows: list[dict[str, Any]], out_dir: str) -> None:
    """topics.parquet and topics.csv, when some run has topics."""
    if not rows:
        return
    table = pa.table(
        {name: pa.array([r[name] for r in rows], type=kind) for name, kind in TOPIC_COLUMNS.items()}
    )
    pq.write_table(table, os.path.join(out_dir, "topics.parquet"))
    pacsv.write_csv(table, os.path.join(out_dir, "topics.csv"))


def _group_json(g: VerdictGroup) -> dict[str, Any]:
    """capacity.json's form of a group: its keys, then CAPACITY_FIELDS."""
    fields = {k: getattr(g, k) for k in CAPACITY_FIELDS}
    fields["max_throughput"] = [dataclasses.asdict(f) for f in g.max_throughput]
    return {"keys": g.keys, **fields}


def capacity_json(
    capacity: list[VerdictGroup],
    slo_p99_us: float | None = None,
    searches: Sequence[SearchRecord] = (),
) -> dict[str, Any]:
    """The verdicts per group and, for a capacity search's directory, its table per combination
    (report/search_answer.table: max sustainable rate with its memory and latency cost)."""
    return {
        "slo_p99_us": slo_p99_us,
        "groups": [_group_json(g) for g in capacity],
        "searches": search_answer.table(list(searches)),
    }


def write_summary(
    rows: list[SummaryRow],
    out_dir: str,
    capacity: list[VerdictGroup] | None = None,
    slo_p99_us: float | None = None,
    searches: Sequence[SearchRecord] = (),
) -> None:
    table = summary_table(rows, capacity)
    pq.write_table(table, os.path.join(out_dir, "summary.parquet"))
    pacsv.write_csv(table, os.path.join(out_dir, "summary.csv"))
    if capacity is not None:
        with open(os.path.join(out_dir, "capacity.json"), "w") as f:
            json.dump(capacity_json(capacity, slo_p99_us, searches), f, indent=1, default=str)
            f.write("\n")
