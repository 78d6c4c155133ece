"""The fate of every message (delivered, drained, dropped, stranded, unknown: docs/RECORDS.md),
reconciled exactly from the producers' accepted-maps and the consumers' seen- and drained-maps,
packed bits read a piece at a time so memory stays bounded."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..contract.bitmaps import Bits
from ..contract.control import ProducerFinal, StreamSeen
from ..store import bitmaps
from ..contract.fates import (
    AMBIGUOUS_TAIL,
    DROPPED,
    FATES,
    TAIL_AMBIGUOUS,
    TAIL_AT_CLOSE,
    TAIL_MID_RUN,
)
from ..contract.topics import Topics
from .stream_account import StreamAccount, ViewFates

MAX_RANGES = 20


def _popcount(packed: np.ndarray) -> int:
    if hasattr(np, "bitwise_count"):
        return int(np.bitwise_count(packed).sum(dtype=np.int64))
    return int(np.unpackbits(packed).sum(dtype=np.int64))


def _fit(packed: np.ndarray, nbytes: int) -> np.ndarray:
    if len(packed) >= nbytes:
        return packed[:nbytes]
    return np.concatenate([packed, np.zeros(nbytes - len(packed), np.uint8)])


def _trim_tail(packed: np.ndarray, nbits: int) -> np.ndarray:
    """Clear the padding bits past nbits in the last byte."""
    packed = packed.copy()
    if nbits % 8 and len(packed):
        packed[-1] &= np.uint8((0xFF << (8 - nbits % 8)) & 0xFF)
    return packed


def bits_in(packed: np.ndarray, lo: int, hi: int) -> int:
    """Set bits with index in [lo, hi) (bit i is bit 7 - i % 8 of byte i // 8, as np.packbits)."""
    lo, hi = max(lo, 0), min(hi, len(packed) * 8)
    if hi <= lo:
        return 0
    b0, b1 = lo // 8, (hi - 1) // 8
    head = 0xFF >> (lo % 8)
    tail = (0xFF << (7 - (hi - 1) % 8)) & 0xFF
    if b0 == b1:
        return bin(int(packed[b0]) & head & tail).count("1")
    return (
        bin(int(packed[b0]) & head).count("1")
        + _popcount(packed[b0 + 1 : b1])
        + bin(int(packed[b1]) & tail).count("1")
    )


def first_last(packed: np.ndarray) -> tuple[int, int] | None:
    """Index of the first and the last set bit, or None if none is set."""
    nonzero = packed != 0
    if not nonzero.any():
        return None
    first_at = int(np.argmax(nonzero))
    last_at = len(packed) - 1 - int(np.argmax(nonzero[::-1]))
    first_byte, last_byte = int(packed[first_at]), int(packed[last_at])
    first = first_at * 8 + (8 - first_byte.bit_length())
    last = last_at * 8 + 7 - ((last_byte & -last_byte).bit_length() - 1)
    return first, last


def missing_ranges(packed_missing: np.ndarray, limit: int = MAX_RANGES) -> list[list[int]]:
    """[first, last] seq ranges of set bits, the first `limit` of them (runs found by their edges:
    one hole of millions of seqs costs what a short one does)."""
    nonzero = np.flatnonzero(packed_missing)
    if not len(nonzero):
        return []
    lo = int(nonzero[0])
    bits = np.unpackbits(packed_missing[lo:]).view(np.int8)
    edges = np.diff(bits, prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edges == 1)[:limit]
    ends = np.flatnonzero(edges == -1)[:limit] - 1
    return [[lo * 8 + int(a), lo * 8 + int(b)] for a, b in zip(starts, ends)]


def below(packed: np.ndarray, limit: int) -> np.ndarray:
    """A copy of packed with every bit at index >= limit cleared."""
    out = packed.copy()
    limit = max(limit, 0)
    out[(limit + 7) // 8 :] = 0
    if limit % 8 and limit // 8 < len(out):
        out[limit // 8] &= np.uint8((0xFF << (8 - limit % 8)) & 0xFF)
    return out


def region_piece(regions: list[tuple[int, int]], offset: int, nbytes: int) -> np.ndarray:
    """Seq regions [lo, hi) as the packed bits of seqs [offset, offset + 8 * nbytes)."""
    ones = np.full(nbytes, 0xFF, np.uint8)
    packed = np.zeros(nbytes, np.uint8)
    for lo, hi in regions:
        if hi > offset and lo < offset + 8 * nbytes:
            packed |= below(ones, hi - offset) & ~below(ones, lo - offset)
    return packed


def region_map(regions: list[tuple[int, int]], nbits: int) -> np.ndarray:
    """Seq regions [lo, hi) as a packed bit map of `nbits` seqs (a whole stream's: region_piece)."""
    return _trim_tail(region_piece(regions, 0, (nbits + 7) // 8), nbits)


def _unreceived_piece(
    sent_ok: np.ndarray,
    got: np.ndarray,
    offset: int,
    certain_below: int,
    drain_completed: bool,
    tail_placement: str,
    last: int | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """unreceived_maps of the piece of a stream's maps starting at bit `offset`; `last`: the view's
    last arrival in the whole stream (None: nothing arrived)."""
    missing = sent_ok & ~got
    dropped = missing if drain_completed else below(missing, certain_below - offset)
    if last is None or tail_placement == TAIL_MID_RUN:
        early, tail = dropped, np.zeros_like(dropped)
    else:
        early = below(dropped, last + 1 - offset)
        tail = dropped & ~early
    return early, tail, missing & ~early & ~tail


def dropped_maps(
    sent_ok: np.ndarray,
    got: np.ndarray,
    certain_below: int,
    drain_completed: bool,
    tail_placement: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Packed maps of the seqs fates() counts as dropped: (start and mid-run drops, tail
    drops). The queue depth lets the first leave at their send time, the second when the
    producer closed: an ambiguous tail drop may have waited until then (over ipc most did),
    so the depth keeps it, as it keeps what is stranded."""
    early, tail, _ = unreceived_maps(sent_ok, got, certain_below, drain_completed, tail_placement)
    return early, tail


def unreceived_maps(
    sent_ok: np.ndarray,
    got: np.ndarray,
    certain_below: int,
    drain_completed: bool,
    tail_placement: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Packed maps of the unreceived seqs by how they left the queue (measure/queue_replay.py): (start and
    mid-run drops: at their send time; tail drops: when the producer closed; stranded or unknown:
    never)."""
    span = first_last(got & sent_ok)
    return _unreceived_piece(
        sent_ok, got, 0, certain_below, drain_completed, tail_placement, span[1] if span else None
    )


Span = Optional[tuple[int, int]]
"""The first and last seq of a view that arrived (among those accepted), None: none did."""


def _bounds(
    span: Span, end: int, certain_below: int, drain_completed: bool
) -> tuple[int, int, int]:
    """(first arrival, last arrival, the seq below which an unreceived message is a drop) as fates()
    places the drops: with nothing arrived, every drop is a "start" drop."""
    first, last = span if span is not None else (end, end)
    return first, last, end if drain_completed else max(certain_below, 0)


def _fate_bits(
    sent_ok: np.ndarray,
    got: np.ndarray,
    drained: np.ndarray,
    offset: int,
    bounds: tuple[int, int, int],
    at_reset: np.ndarray | None = None,
    at_restart: np.ndarray | None = None,
) -> dict[str, int]:
    """The fate counts of one piece of a view's maps (its bits from seq `offset` on): they add up
    over the pieces; `_fate_total` finishes them. `at_reset`: the piece's bits of the connection
    resets' regions: a start or mid-run drop there is `dropped_reset` (a region ends at an arrival:
    never a tail drop). `at_restart`: the restarts' regions, the same way `dropped_restart`, placed
    first (a reset while a worker was away cost it nothing more)."""
    first, last, limit = bounds
    got = got & sent_ok
    drained = drained & got
    missing = sent_ok & ~got
    n_drained = _popcount(drained)
    counts = {
        "delivered": _popcount(got) - n_drained,
        "drained": n_drained,
        "missing": _popcount(missing),
        "dropped_start": bits_in(missing, -offset, min(first, limit) - offset),
        "dropped_mid": bits_in(missing, first - offset, min(last, limit) - offset),
        "dropped_tail": bits_in(missing, last + 1 - offset, limit - offset),
        "dropped_reset": 0,
        "dropped_restart": 0,
    }
    for fate_here, regions in (("dropped_restart", at_restart), ("dropped_reset", at_reset)):
        if regions is None:
            continue
        here = missing & _fit(regions, len(missing))
        missing = missing & ~here  # placed once: the restarts' first
        for fate, lo, hi in (
            ("dropped_start", -offset, min(first, limit) - offset),
            ("dropped_mid", first - offset, min(last, limit) - offset),
        ):
            n = bits_in(here, lo, hi)
            counts[fate] -= n
            counts[fate_here] += n
    return counts


def _fate_total(counts: dict[str, int], tail_placement: str, died: bool) -> dict[str, int]:
    result = dict.fromkeys(FATES, 0)
    for fate in ("delivered", "drained", *DROPPED):
        result[fate] = counts.get(fate, 0)
    uncertain = counts.get("missing", 0) - sum(result[f] for f in DROPPED)
    result["unknown" if died else "stranded"] = uncertain
    if tail_placement == TAIL_MID_RUN:
        result["dropped_mid"] += result["dropped_tail"]
        result["dropped_tail"] = 0
    return result


def fates(
    sent_ok: np.ndarray,
    got: np.ndarray,
    drained: np.ndarray,
    certain_below: int,
    drain_completed: bool,
    tail_placement: str = TAIL_AT_CLOSE,
    died: bool = False,
    at_reset: np.ndarray | None = None,
    at_restart: np.ndarray | None = None,
) -> dict[str, int]:
    """Fates of one stream's accepted messages as seen by one view (a consumer, or the
    union of round-robin consumers). `certain_below`: unreceived seqs below it cannot be
    queued any more (-1: none certain). `tail_placement`: where drops after the last
    arrival happened (contract.fates.TAIL_PLACEMENTS; mid-run folds them into dropped_mid).
    `died`: a process on the path died, so what is neither received nor certainly dropped
    is `unknown`. `at_reset`: the packed map of the connection resets' regions (reset_regions):
    a start or mid-run drop there is `dropped_reset`; `at_restart`: the restarts' regions
    (restart_regions), `dropped_restart` the same way, placed first."""
    bounds = _bounds(first_last(got & sent_ok), len(sent_ok) * 8, certain_below, drain_completed)
    return _fate_total(
        _fate_bits(sent_ok, got, drained, 0, bounds, at_reset, at_restart), tail_placement, died
    )


def ambiguous_tail(fate_counts: dict[str, int], tail_placement: str) -> int:
    """How many of fate_counts' dropped_tail are placed by guess (AMBIGUOUS_TAIL)."""
    return fate_counts["dropped_tail"] if tail_placement == TAIL_AMBIGUOUS else 0


def _add(total: dict[str, int], part: dict[str, int]) -> None:
    for key, value in part.items():
        total[key] = total.get(key, 0) + value


class _Ranges:
    """missing_ranges over a map read a piece at a time."""

    def __init__(self) -> None:
        self.ranges: list[list[int]] = []
        self.full = False

    def add(self, packed_missing: np.ndarray, offset: int) -> None:
        for lo, hi in missing_ranges(packed_missing, MAX_RANGES + 1):
            self.add_range(lo + offset, hi + offset)

    def add_range(self, lo: int, hi: int) -> None:
        """Seqs lo..hi (inclusive) missing, after every range added before."""
        if self.full:
            return
        if self.ranges and self.ranges[-1][1] == lo - 1:
            self.ranges[-1][1] = hi
        elif len(self.ranges) >= MAX_RANGES:
            self.full = True
        else:
            self.ranges.append([lo, hi])


class _Stream:
    """One stream's maps, read a piece at a time: the producer's accepted-map (cut to `nbits`) and
    each consumer's seen- and drained-maps (None: that consumer saw nothing of it)."""

    def __init__(
        self,
        sent_ok: Bits,
        nbits: int,
        seen: dict[int, Bits | None],
        drained: dict[int, Bits | None],
    ):
        self.sent_ok, self.nbits, self.seen, self.drained = sent_ok, nbits, seen, drained
        self.nbytes = (nbits + 7) // 8

    def pieces(
        self,
    ) -> Iterator[tuple[int, np.ndarray, dict[int, np.ndarray], dict[int, np.ndarray]]]:
        """(first seq, accepted, {consumer: seen}, {consumer: drained}) a piece at a time."""
        for lo, hi in bitmaps.pieces(self.nbytes):
            ok = bitmaps.piece(self.sent_ok, lo, hi)
            if hi == self.nbytes:
                ok = _trim_tail(ok, self.nbits)
            yield (
                lo * 8,
                ok,
                {i: self._read(m, lo, hi) for i, m in self.seen.items()},
                {i: self._read(m, lo, hi) for i, m in self.drained.items()},
            )

    @staticmethod
    def _read(bits: Bits | None, lo: int, hi: int) -> np.ndarray:
        return bitmaps.piece(bits, lo, hi) if bits is not None else np.zeros(hi - lo, np.uint8)

    def spans(self) -> dict[int, Span]:
        """Each consumer's first and last arrival among the accepted seqs."""
        spans: dict[int, Span] = dict.fromkeys(self.seen)
        for offset, ok, seen, _ in self.pieces():
            for i, got in seen.items():
                found = first_last(got & ok)
                if found is not None:
                    before = spans[i]
                    spans[i] = (before[0] if before else found[0] + offset, found[1] + offset)
        return spans


class _Drops:
    """A view's unreceived maps (unreceived_maps), written a piece at a time: in files under
    `directory` when given, else in memory; a map without a set bit is empty."""

    def __init__(self, directory: str | None, name: str):
        self.writers = [
            bitmaps.BitsWriter(directory and os.path.join(directory, f"{name}.{kind}"))
            for kind in ("early", "tail", "stranded")
        ]

    def add(self, maps: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        for writer, packed in zip(self.writers, maps):
            writer.append(packed)

    def done(self) -> tuple[Bits, Bits, Bits]:
        early, tail, stranded = (w.done(empty_when_clear=True) for w in self.writers)
        return early, tail, stranded


Seen = dict[int, dict[int, StreamSeen]]
"""What the consumers saw: consumer index -> stream -> its StreamSeen (from the consumers' finals)."""


@dataclass
class Accounts:
    """reconcile's answer: per stream (run.json `streams`) and in total, and the unreceived maps."""

    streams: list[StreamAccount]
    totals: dict[str, int]
    """The streams' counts summed, by name (attempted ... dropped, AMBIGUOUS_TAIL)."""
    drops: dict[int, list[tuple[Bits, Bits, Bits]]]
    """stream -> each view's (early, tail, stranded) unreceived maps."""
    topics: Optional[list[dict[str, Any]]] = None
    """--topics with fan-out: per topic (run.json `topics`); None otherwise."""


def reconcile(
    producers: dict[int, ProducerFinal],
    consumers: Seen,
    fanout: bool,
    drain_completed: bool = True,
    tail_placement: str = TAIL_AT_CLOSE,
    dead_producers: frozenset[int] = frozenset(),
    dead_consumers: frozenset[int] = frozenset(),
    maps_dir: str | None = None,
    resets: dict[int, dict[int | str, list[tuple[int, int]]]] | None = None,
    topics: Topics | None = None,
    restarts: dict[int, dict[int | str, list[tuple[int, int]]]] | None = None,
) -> Accounts:
    """Per-stream and total counters and fates from the producers' and consumers' finals.

    producers: stream -> its final (attempted, sent, sent_ok_map); consumers: what each saw of
    each stream (maps as contract/bitmaps.Bits: arrays or files). dead_producers / dead_consumers:
    indices of workers that died (killed, crashed): what they may have held is `unknown`. Every
    map is read a piece at a time (bitmaps.PIECE_BYTES), twice: each view's first and last arrival, then the
    counts, which add up over the pieces; `drops` (each view's unreceived maps) go to files in
    `maps_dir` when given. resets: stream -> view (consumer index with fan-out, else "all") -> the
    connection resets' seq regions (measure/reset_regions.py); restarts: the same of the workers'
    restarts (measure/restart_regions.py). topics (fan-out only): a consumer's
    view holds only the seqs of the topics it subscribed to (contract/topics.py), the others are
    outside its accounting; "topics" in the result counts per topic what was sent and, per
    consumer, what it expected and received.
    """
    streams: list[StreamAccount] = []
    per_topic = (
        _TopicCounts(topics, sorted(consumers) or [0]) if topics is not None and fanout else None
    )
    drops: dict[int, list[tuple[Bits, Bits, Bits]]] = {}  # stream -> one per view
    indices = sorted(consumers) or [0]
    for stream, prod in sorted(producers.items()):
        nbits, sent = int(prod.counters.attempted), int(prod.counters.sent)
        infos = {i: consumers.get(i, {}).get(stream) for i in indices}
        maps = _Stream(
            prod.sent_ok_map,
            nbits,
            {i: None if info is None else info.seen_map for i, info in infos.items()},
            {i: None if info is None else info.drained_map for i, info in infos.items()},
        )
        known = [info for info in infos.values() if info is not None]
        received = sum(info.unique + info.duplicates for info in known)
        duplicates = sum(info.duplicates for info in known)
        reordered = sum(info.reordered for info in known)
        end = maps.nbytes * 8
        spans = maps.spans()
        died_producer = stream in dead_producers
        # view -> (its span, the seq below which its unreceived are drops): a consumer under fan-out,
        # else the union of the round-robin consumers, of which each may have held a missing message
        if fanout:
            views: dict[Any, tuple[Span, int]] = {
                i: (span, span[1] if span else -1) for i, span in spans.items()
            }
        else:
            arrived = [span for span in spans.values() if span is not None]
            union_span = (
                (min(a[0] for a in arrived), max(a[1] for a in arrived)) if arrived else None
            )
            views = {"all": (union_span, min(span[1] if span else -1 for span in spans.values()))}
        counts: dict[Any, dict[str, int]] = {view: {} for view in views}
        ranges = {view: _Ranges() for view in views}
        writers = {view: _Drops(maps_dir, f"drops-s{stream}-{view}") for view in views}
        delivered = expected = 0
        for offset, ok, seen, drained in maps.pieces():
            oks: dict[Any, np.ndarray] = {}
            if per_topic is not None:  # each consumer's view: its topics' seqs
                oks = {i: ok & per_topic.expected(i, offset, len(ok)) for i in indices}
                per_topic.add(ok, oks, seen, offset)
            if fanout:
                got_of: dict[Any, tuple[np.ndarray, np.ndarray]] = {
                    i: (seen[i], drained[i]) for i in indices
                }
            else:
                union = np.bitwise_or.reduce([seen[i] for i in indices])
                # a message that reached one consumer before the drain is not "drained" at another
                union_drained = np.bitwise_or.reduce(
                    [drained[i] for i in indices]
                ) & ~np.bitwise_or.reduce([seen[i] & ~drained[i] for i in indices])
                # a message delivered to two consumers is a duplicate too
                duplicates += sum(_popcount(seen[i]) for i in indices) - _popcount(union)
                got_of = {"all": (union, union_drained)}
            for view, (got, got_drained) in got_of.items():
                mine = oks.get(view, ok)
                expected += _popcount(mine)
                span, certain = views[view]
                regions = (resets or {}).get(stream, {}).get(view)
                away = (restarts or {}).get(stream, {}).get(view)
                _add(
                    counts[view],
                    _fate_bits(
                        mine,
                        got,
                        got_drained,
                        offset,
                        _bounds(span, end, certain, drain_completed),
                        region_piece(regions, offset, len(mine)) if regions else None,
                        region_piece(away, offset, len(mine)) if away else None,
                    ),
                )
                writers[view].add(
                    _unreceived_piece(
                        mine,
                        got,
                        offset,
                        certain,
                        drain_completed,
                        tail_placement,
                        span[1] if span else None,
                    )
                )
                ranges[view].add(mine & ~got, offset)
                delivered += _popcount(got & mine)
        fate_totals = dict.fromkeys(FATES, 0)
        by_consumer: dict[int, ViewFates] = {}
        for view in views:
            died = died_producer or (
                view in dead_consumers if fanout else bool(dead_consumers & set(indices))
            )
            f = _fate_total(counts[view], tail_placement, died)
            _add(fate_totals, f)
            if fanout:
                by_consumer[view] = ViewFates(
                    **f, dropped_tail_ambiguous=ambiguous_tail(f, tail_placement)
                )
        drops[stream] = [writers[view].done() for view in views]
        missing: dict[int | str, list[list[int]]] = {view: ranges[view].ranges for view in views}
        if per_topic is None:  # with topics: each view's own topics' seqs, counted above
            expected = sent * (len(indices) if fanout else 1)
        dropped = sum(fate_totals[f] for f in DROPPED)
        # holes and beyond stay None: the consumers alone only (receipt_only); here the fates say it all
        streams.append(
            StreamAccount(
                stream=stream,
                attempted=nbits,
                sent=sent,
                expected=expected,
                received=received,
                unique_received=delivered,
                duplicates=duplicates,
                reordered=reordered,
                lost=expected - delivered,
                missing_ranges=missing,
                **fate_totals,
                dropped=dropped,
                dropped_tail_ambiguous=ambiguous_tail(fate_totals, tail_placement),
                fates_by_consumer=by_consumer if fanout else None,
            )
        )  # per consumer: fan-out only
    keys = (
        "attempted",
        "sent",
        "expected",
        "received",
        "unique_received",
        "duplicates",
        "reordered",
        "lost",
        *FATES,
        "dropped",
        AMBIGUOUS_TAIL,
    )
    totals = {key: sum(getattr(s, key) for s in streams) for key in keys}
    return Accounts(streams, totals, drops, per_topic.rows() if per_topic is not None else None)


class _TopicCounts:
    """Per topic, over every stream: accepted sends, and per consumer what it expected (its topics'
    accepted sends) and received of them (distinct)."""

    def __init__(self, topics: Topics, consumers: list[int]):
        self.topics, self.consumers = topics, consumers
        self.sent = np.zeros(len(topics.names), np.int64)
        self.received = {i: np.zeros(len(topics.names), np.int64) for i in consumers}

    def expected(self, consumer: int, offset: int, nbytes: int) -> np.ndarray:
        return self.topics.expected(consumer, offset // 8, offset // 8 + nbytes)

    def add(
        self, ok: np.ndarray, oks: dict[Any, np.ndarray], seen: dict[int, np.ndarray], offset: int
    ) -> None:
        self.sent += self.topics.count(ok, offset)
        for i in self.consumers:
            self.received[i] += self.topics.count(seen[i] & oks[i], offset)

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for t, name in enumerate(self.topics.names):
            per = []
            for i in self.consumers:
                subscribed = t in self.topics.subscribed[i]
                expected = int(self.sent[t]) if subscribed else 0
                received = int(self.received[i][t])
                per.append(
                    {
                        "consumer": i,
                        "subscribed": subscribed,
                        "expected": expected,
                        "received": received,
                        "lost": expected - received,
                    }
                )
            out.append({"topic": name, "sent": int(self.sent[t]), "consumers": per})
        return out


def receipt_only(consumers: Seen, fanout: bool) -> list[StreamAccount]:
    """Per stream, what zmqload's consumers alone (--role consumer) can say with no sends to hold
    it against: received, unique, duplicates, reordered, and the `holes`: seqs below the highest one
    received (per consumer with fan-out) that never arrived, with their ranges. A hole is a lower
    bound of what was lost: the producer may have refused sends, and a tail after the highest seq
    is not seen at all (joining the producer half settles both). Maps read a piece at a time."""
    streams = sorted({s for seen in consumers.values() for s in seen})
    out = []
    for stream in streams:
        infos = {i: seen[stream] for i, seen in sorted(consumers.items()) if stream in seen}
        size = max(bitmaps.nbytes(info.seen_map) for info in infos.values())
        beyond = sum(info.beyond for info in infos.values())
        received = sum(info.unique + info.duplicates for info in infos.values()) + beyond
        duplicates = sum(info.duplicates for info in infos.values())
        views: list[int | str] = list(infos) if fanout else ["all"]

        def view_pieces() -> Iterator[tuple[int, int, dict[int | str, np.ndarray] | None, int]]:
            """(first seq, end seq, {view: its seen bits}, duplicates across consumers) a piece at a
            time; None for a piece no map holds a bit of (a hole in every file: never read, so a seq
            far past the rest costs no time)."""
            for lo, hi in bitmaps.pieces(size):
                if not any(bitmaps.may_hold_bits(info.seen_map, lo, hi) for info in infos.values()):
                    yield lo * 8, hi * 8, None, 0
                    continue
                seen = {i: bitmaps.piece(info.seen_map, lo, hi) for i, info in infos.items()}
                if fanout:
                    yield lo * 8, hi * 8, {i: m for i, m in seen.items()}, 0
                else:
                    union = np.bitwise_or.reduce(list(seen.values()))
                    yield (
                        lo * 8,
                        hi * 8,
                        {"all": union},
                        sum(_popcount(m) for m in seen.values()) - _popcount(union),
                    )

        last: dict[int | str, int] = dict.fromkeys(views, -1)
        unique = 0
        for offset, _, got, shared in view_pieces():
            duplicates += shared
            for view, bits in (got or {}).items():
                unique += _popcount(bits)
                span = first_last(bits)
                if span is not None:
                    last[view] = span[1] + offset
        holes = 0
        ranges: dict[int | str, _Ranges] = {view: _Ranges() for view in views}
        for offset, end, got, _ in view_pieces():
            if got is None:  # nothing arrived here: every seq below the view's last is a hole
                for view in views:
                    top = min(end, last[view] + 1)
                    if top > offset:
                        holes += top - offset
                        ranges[view].add_range(offset, top - 1)
                continue
            for view, bits in got.items():
                absent = below(~bits, last[view] + 1 - offset)
                holes += _popcount(absent)
                ranges[view].add(absent, offset)
        out.append(
            StreamAccount(
                stream=stream,
                received=received,
                duplicates=duplicates,
                unique_received=unique,
                reordered=sum(info.reordered for info in infos.values()),
                holes=holes,
                missing_ranges={view: r.ranges for view, r in ranges.items()},
                beyond=beyond,
            )
        )
    return out
