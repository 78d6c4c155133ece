"""Where each restart (--restart) falls in every stream's seqs, from the records: per view and
stream, the region whose unreceived messages are `dropped_restart` (the rule: contract/fates.py
`restart_region`; docs/RECORDS.md), what each restart cost and when the flow came back. A part at
a time."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow.parquet as pq

from ..contract.fates import merge_regions, regions_outside, restart_region
from ..contract.wire import SendStatus
from ..store.parquet_parts import part_files

Region = tuple[int, int]
"""[lo, hi): seqs lo .. hi - 1 of one stream, lost at a restart if unreceived."""
Regions = dict[int, dict[int | str, list[Region]]]
"""stream -> view (a consumer's index with fan-out, else "all") -> disjoint regions."""


@dataclass(frozen=True)
class RestartAt:
    """One restart as the records name it: the worker's role and index, its ended processes' names
    (all before the restart: "c0", or "c0", "c0.g1" at a second one), the new process's ("c0.g1"),
    when that was up, and a producer's new process's first seq."""

    producer: bool
    index: int
    before: tuple[str, ...]
    after: str
    t_up_ns: int = 0  # run.json restarts[].t_up_ns
    first_seq: int = 0  # run.json restarts[].first_seq


@dataclass
class RestartCost:
    """What one restart cost, from the records."""

    regions: dict[int | str, Region] = field(default_factory=dict)  # view -> its region
    lost: int = 0  # accepted seqs in its regions that the view never received
    t_first_recv_ns: int = 0  # the first arrival from or at the new process (0: none)
    # recovery: the last arrival of what the restart held back (0: none): at a consumer's new
    # process, a message sent before it was up (a connecting PUSH queues for the peer it lost); from
    # a producer's, a message due before it was up (its schedule caught up)
    t_backlog_drained_ns: int = 0


def _parts(
    run_dir: str, kind: str, names: Iterable[str], columns: list[str]
) -> Iterator[dict[str, np.ndarray]]:
    """The records of kind `kind` of the processes `names` ("*": every one), a part at a time."""
    for name in names:
        for path in part_files(run_dir, kind, name):
            table = pq.read_table(path, columns=columns)
            yield {column: table[column].to_numpy() for column in columns}


def _per_stream(run_dir: str, names: Iterable[str], reduce: str) -> tuple[dict[int, int], int]:
    """stream -> the highest ("max") or lowest ("min") seq the processes `names` received, and
    their first arrival's time (0: none)."""
    seqs: dict[int, int] = {}
    first = 0
    for part in _parts(run_dir, "recvs", names, ["stream", "seq", "t_recv_ns"]):
        if not len(part["seq"]):
            continue
        t = int(part["t_recv_ns"].min())
        first = t if not first else min(first, t)
        for stream in np.unique(part["stream"]).tolist():
            mine = part["seq"][part["stream"] == stream]
            if reduce == "max":
                seqs[stream] = max(seqs.get(stream, -1), int(mine.max()))
            else:
                seqs[stream] = min(seqs.get(stream, int(mine.min())), int(mine.min()))
    return seqs, first


def _around(
    run_dir: str, stream: int, first_seq: int
) -> tuple[dict[int, int], dict[int, int], int]:
    """A producer's restart in every consumer's records: consumer -> the highest seq of `stream`
    below `first_seq` it received, consumer -> the lowest at or above it, and the first arrival of
    one at or above it (0: none)."""
    high: dict[int, int] = {}
    low: dict[int, int] = {}
    first = 0
    for part in _parts(run_dir, "recvs", ["*"], ["consumer", "stream", "seq", "t_recv_ns"]):
        mine = part["stream"] == stream
        for consumer in np.unique(part["consumer"][mine]).tolist():
            seq = part["seq"][mine & (part["consumer"] == consumer)]
            below, above = seq[seq < first_seq], seq[seq >= first_seq]
            if len(below):
                high[consumer] = max(high.get(consumer, -1), int(below.max()))
            if len(above):
                low[consumer] = min(low.get(consumer, int(above.min())), int(above.min()))
        later = part["t_recv_ns"][mine & (part["seq"] >= first_seq)]
        if len(later):
            first = int(later.min()) if not first else min(first, int(later.min()))
    return high, low, first


def _lost(run_dir: str, stream: int, region: Region, receivers: Sequence[int] | None) -> int:
    """Accepted seqs of `stream` in `region` that none of `receivers` (None: any consumer) received."""
    lo, hi = region
    accepted = np.zeros(hi - lo, bool)
    for part in _parts(run_dir, "sends", ["*"], ["stream", "seq", "status"]):
        mine = (
            (part["stream"] == stream)
            & (part["seq"] >= lo)
            & (part["seq"] < hi)
            & (part["status"] == SendStatus.OK)
        )
        accepted[part["seq"][mine] - lo] = True
    for part in _parts(run_dir, "recvs", ["*"], ["consumer", "stream", "seq"]):
        mine = (part["stream"] == stream) & (part["seq"] >= lo) & (part["seq"] < hi)
        if receivers is not None:
            mine &= np.isin(part["consumer"], receivers)
        accepted[part["seq"][mine] - lo] = False
    return int(np.count_nonzero(accepted))


def _consumer_held_back(run_dir: str, restart: RestartAt) -> int:
    """The last arrival at a consumer's new process of a message sent before it was up; 0: none."""
    last = 0
    for part in _parts(run_dir, "recvs", [restart.after], ["t_sent_ns", "t_recv_ns"]):
        early = part["t_recv_ns"][part["t_sent_ns"] < restart.t_up_ns]
        if len(early):
            last = max(last, int(early.max()))
    return last


def _producer_held_back(run_dir: str, restart: RestartAt) -> int:
    """The last arrival of a message a producer's new process sent that was due before it was up."""
    last = 0
    columns = ["stream", "seq", "t_intended_ns", "t_recv_ns"]
    for part in _parts(run_dir, "recvs", ["*"], columns):
        late = (
            (part["stream"] == restart.index)
            & (part["seq"] >= restart.first_seq)
            & (part["t_intended_ns"] < restart.t_up_ns)
        )
        if late.any():
            last = max(last, int(part["t_recv_ns"][late].max()))
    return last


def _consumer_regions(
    run_dir: str, restart: RestartAt, fanout: bool
) -> tuple[dict[tuple[int, int | str], Region], int]:
    """(stream, view) -> a consumer's restart's region, and its new process's first arrival. Without
    fan-out the region is the restarted consumer's: the others kept receiving, their arrivals in it
    are received."""
    high, _ = _per_stream(run_dir, restart.before, "max")
    low, first = _per_stream(run_dir, [restart.after], "min")
    view: int | str = restart.index if fanout else "all"
    out: dict[tuple[int, int | str], Region] = {}
    for stream in sorted(set(high) | set(low)):
        region = restart_region(high.get(stream, -1), low.get(stream))
        if region is not None:
            out[(stream, view)] = region
    return out, first


def _producer_regions(
    run_dir: str, restart: RestartAt, fanout: bool, consumers: Sequence[int]
) -> tuple[dict[tuple[int, int | str], Region], int]:
    """(stream, view) -> a producer's restart's region in each view of its stream, and the first
    arrival from its new process. Without fan-out: the lowest of the consumers' highs below the
    new process's first seq (each consumer's connection held what it had not received)."""
    high, low, first = _around(run_dir, restart.index, restart.first_seq)
    views: dict[int | str, list[int]] = (
        {c: [c] for c in consumers} if fanout else {"all": list(consumers)}
    )
    out: dict[tuple[int, int | str], Region] = {}
    for view, members in views.items():
        region = restart_region(
            min((high.get(c, -1) for c in members), default=-1),
            min((low[c] for c in members if c in low), default=None),
        )
        if region is not None:
            out[(restart.index, view)] = region
    return out, first


def restart_regions(
    run_dir: str, restarts: Sequence[RestartAt], fanout: bool, consumers: Sequence[int]
) -> tuple[Regions, list[RestartCost]]:
    """stream -> view (the consumer's index with fan-out, else "all") -> the merged regions of
    `restarts`, and each restart's cost (what several restarts share counts for the first)."""
    merged: Regions = {}
    costs: list[RestartCost] = []
    for restart in restarts:
        if restart.producer:
            found, first = _producer_regions(run_dir, restart, fanout, consumers)
            drained = _producer_held_back(run_dir, restart)
        else:
            found, first = _consumer_regions(run_dir, restart, fanout)
            drained = _consumer_held_back(run_dir, restart)
        cost = RestartCost(t_first_recv_ns=first, t_backlog_drained_ns=drained)
        for (stream, view), region in found.items():
            cost.regions[view] = region
            regions = merged.setdefault(stream, {}).setdefault(view, [])
            receivers = [int(view)] if view != "all" else None
            cost.lost += sum(
                _lost(run_dir, stream, piece, receivers)
                for piece in regions_outside([region], regions)
            )
            regions[:] = merge_regions([*regions, region])
        costs.append(cost)
    return merged, costs


def restarts_of(
    made: Sequence[tuple[str, int, int, int]], incarnations: Mapping[str, Sequence[str]]
) -> list[RestartAt]:
    """The restarts made ((worker name, generation, when its new process was up, a producer's first
    seq), in order) as the records name them, from each worker's processes' names (`incarnations`:
    "c0" -> ["c0", "c0.g1", ...])."""
    out: list[RestartAt] = []
    for worker, generation, t_up_ns, first_seq in made:
        names = incarnations[worker]
        out.append(
            RestartAt(
                worker.startswith("p"),
                int(worker[1:]),
                tuple(names[:generation]),
                names[generation],
                t_up_ns,
                first_seq,
            )
        )
    return out
