"""The record schemas (docs/RECORDS.md), stated once as typed column lists.

The Parquet schemas the workers write (`Schema.arrow`) and the Spark DDL the report reads
with (`Schema.ddl`) are both derived from these lists, as are the report's intermediate
tables (zmqload/analysis/pipeline.py). Any change to a record column's name, type or
meaning bumps SCHEMA_VERSION.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

import pyarrow as pa

SCHEMA_VERSION: Final = 1
"""run.json["schema_version"] of the records this zmqload writes and reads."""


class ColumnType(enum.Enum):
    """A column's type; the value is its Spark DDL name."""

    INT8 = "TINYINT"
    INT32 = "INT"
    INT64 = "BIGINT"
    FLOAT64 = "DOUBLE"
    BOOL = "BOOLEAN"
    STRING = "STRING"

    @property
    def arrow(self) -> pa.DataType:
        return _ARROW[self]


_ARROW: Final = {
    ColumnType.INT8: pa.int8(),
    ColumnType.INT32: pa.int32(),
    ColumnType.INT64: pa.int64(),
    ColumnType.FLOAT64: pa.float64(),
    ColumnType.BOOL: pa.bool_(),
    ColumnType.STRING: pa.string(),
}

INT8: Final = ColumnType.INT8
INT32: Final = ColumnType.INT32
INT64: Final = ColumnType.INT64
FLOAT64: Final = ColumnType.FLOAT64
BOOL: Final = ColumnType.BOOL
STRING: Final = ColumnType.STRING


@dataclass(frozen=True)
class Schema:
    """Named, typed columns in order. `Schema.of(stream=INT32, seq=INT64)`."""

    columns: tuple[tuple[str, ColumnType], ...]

    @classmethod
    def of(cls, **columns: ColumnType) -> Schema:
        return cls(tuple(columns.items()))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)

    @property
    def arrow(self) -> pa.Schema:
        return pa.schema([(name, kind.arrow) for name, kind in self.columns])

    @property
    def ddl(self) -> str:
        """Spark DDL, e.g. "stream INT, seq BIGINT"."""
        return ", ".join(f"{name} {kind.value}" for name, kind in self.columns)


# One row per send attempt; status holds zmqload.contract.wire.SendStatus values.
SENDS: Final = Schema.of(
    stream=INT32, seq=INT64, t_intended_ns=INT64, t_sent_ns=INT64, status=INT8, size=INT32
)
# One row per received message.
RECVS: Final = Schema.of(
    consumer=INT32,
    stream=INT32,
    seq=INT64,
    t_intended_ns=INT64,
    t_sent_ns=INT64,
    t_recv_ns=INT64,
    size=INT32,
)
# One row per completed request of a round-trip pattern; echoed: the reply began with the
# request's header (csrc/zl_wire.h zl_reply_echoes), else it was matched by order.
REPLIES: Final = Schema.of(
    stream=INT32, seq=INT64, t_intended_ns=INT64, t_sent_ns=INT64, t_reply_ns=INT64, echoed=BOOL
)
# Counters over time from every worker.
SAMPLES: Final = Schema.of(
    t_ns=INT64,
    role=STRING,
    worker=INT32,
    messages=INT64,
    dropped=INT64,
    tcp_sendq_bytes=INT64,
    tcp_recvq_bytes=INT64,
    rss_kb=INT64,
)

# One row per foreign message (--role consumer: one without zmqload's header, contract/wire.py).
FOREIGN: Final = Schema.of(consumer=INT32, t_recv_ns=INT64, size=INT32)
SCHEMAS: Final = {
    "sends": SENDS,
    "recvs": RECVS,
    "replies": REPLIES,
    "samples": SAMPLES,
    "foreign": FOREIGN,
}
"""Record kind (the directory under a run) -> its schema."""

DISK_BYTES_PER_ROW: Final = {"sends": 7, "recvs": 5, "replies": 7}
"""Bytes a row of each kind takes in its Parquet part (delta-encoded, runner/parquet_writer.PartWriter),
rounded up from what was measured: 6.1 per send and 3.4 per receive unpaced (push-pull tcp 64 B,
5M messages), 6.0 and 3.9 paced at 100k msg/s. How much a run will write is counted from these."""
