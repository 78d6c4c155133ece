"""Where each connection reset (--reset-at) falls in every stream's seqs, from the records: per
consumer and stream, the region (r, b) whose lost messages are `dropped_reset` (the rule:
contract/fates.py `reset_region`; docs/RECORDS.md). One part at a time, three columns."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow.parquet as pq

from ..contract.fates import merge_regions, reset_region
from ..store.parquet_parts import part_files

_NONE = np.iinfo(np.int64).max  # no such seq
Region = tuple[int, int]
"""[lo, hi): seqs lo .. hi - 1 of one stream, lost at a reset if unreceived."""


def _per_stream(run_dir: str, kind: str, columns: list[str]) -> Iterable[dict[str, np.ndarray]]:
    for path in part_files(run_dir, kind):
        table = pq.read_table(path, columns=columns)
        yield {name: table[name].to_numpy() for name in columns}


def reset_regions(
    run_dir: str, resets_ns: Sequence[tuple[int, int]], fanout: bool, consumers: Sequence[int]
) -> dict[int, dict[int | str, list[Region]]]:
    """stream -> view (a consumer index with fan-out, else "all") -> the regions of the resets
    `resets_ns` ((asked, done): CLOCK_MONOTONIC ns, when the abort was asked for and when it had
    been made) whose end the records show."""
    if not resets_ns:
        return {}
    asked = np.asarray([a for a, _ in resets_ns], np.int64)
    times = np.asarray([d for _, d in resets_ns], np.int64)
    first_after: dict[int, np.ndarray] = {}  # stream -> k per reset
    for part in _per_stream(run_dir, "sends", ["stream", "seq", "t_sent_ns"]):
        for stream in np.unique(part["stream"]).tolist():
            mine = part["stream"] == stream
            seq, t = part["seq"][mine], part["t_sent_ns"][mine]
            k = first_after.setdefault(stream, np.full(len(times), _NONE))
            for i, at in enumerate(times):
                after = seq[t > at]
                if len(after):
                    k[i] = min(k[i], int(after.min()))
    high: dict[tuple[int, int], np.ndarray] = {}  # (stream, consumer) -> r per reset
    back: dict[tuple[int, int], np.ndarray] = {}  # (stream, consumer) -> b per reset
    for part in _per_stream(run_dir, "recvs", ["consumer", "stream", "seq", "t_recv_ns"]):
        for stream, consumer in np.unique(
            np.stack([part["stream"], part["consumer"]], axis=1), axis=0
        ).tolist():
            if stream not in first_after:
                continue
            mine = (part["stream"] == stream) & (part["consumer"] == consumer)
            seq, t = part["seq"][mine], part["t_recv_ns"][mine]
            r = high.setdefault((stream, consumer), np.full(len(times), -1))
            b = back.setdefault((stream, consumer), np.full(len(times), _NONE))
            for i, at in enumerate(asked):
                before, later = seq[t <= at], seq[seq >= first_after[stream][i]]
                if len(before):
                    r[i] = max(r[i], int(before.max()))
                if len(later):
                    b[i] = min(b[i], int(later.min()))

    def regions(stream: int, views: Sequence[int]) -> list[Region]:
        found = [
            reset_region(
                [int(high[(stream, c)][i]) if (stream, c) in high else -1 for c in views],
                [
                    int(back[(stream, c)][i])
                    for c in views
                    if (stream, c) in back and back[(stream, c)][i] != _NONE
                ],
            )
            for i in range(len(times))
        ]
        return merge_regions(region for region in found if region is not None)

    if not consumers:
        return {}
    return {
        stream: (
            {c: regions(stream, [c]) for c in consumers}
            if fanout
            else {"all": regions(stream, consumers)}
        )
        for stream in first_after
    }
