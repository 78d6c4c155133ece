"""The fate of every message, reconciled exactly from packed bit maps.

Producers ship a packed map of the seqs their socket accepted; consumers ship, per
stream, a packed map of the seqs that arrived and one of those that first arrived in the
drain. Working on packed bits keeps the controller's memory at count/8 bytes per map even
for 100M-message runs.

Every message a producer's socket accepted ends in exactly one fate (docs/RECORDS.md):

    delivered      arrived while the consumers worked normally
    drained        was still queued when the producers finished, arrived in the drain
    dropped_start  never arrived, sent before the first message that did (not yet joined)
    dropped_mid    never arrived, sent between arrivals (a full pipe dropped it)
    dropped_tail   never arrived, sent after the last arrival, lost at close/linger/term
    dropped_reset  never arrived, lost across a connection reset (--reset-at): in its
                   region (measure/reset_regions.py), below a later arrival; taken
                   from what would otherwise be a start or mid-run drop
    stranded       not received because the drain was cut short (limit, --drain none,
                   consumer-first close, interrupt): queued or dropped, unknown
    unknown        not received, and a process on its path died (its consumer, or its
                   producer, was killed): it may have arrived in records that died with
                   the process, or died in its queue; never counted as dropped

A drop is only called a drop when the drain ran to completion (consumers read until
idle) or when a later message of the same stream already reached every consumer that
could hold it: one connection delivers in order, so an earlier message cannot still be
queued behind it. Everything else unreceived is stranded, never dropped.

Drops after the last arrival are placed by the rule the run chose (zmqload.contract.fates,
runner/collect.tail_placement): when the consumers had drained to idle before the producers
closed (after-drain close), nothing was in flight at the close, so they are mid-run drops;
otherwise a producer socket that blocks at HWM (PUSH, DEALER, PAIR, REQ) dropped nothing
while running, so they were lost at close; one that drops at HWM (PUB) may have dropped them
at a full pipe or lost them at close (measured: over ipc a close loses what the kernel still
held even with LINGER -1), so they are tail drops flagged ambiguous.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..contract.fates import AMBIGUOUS_TAIL, DROPPED, FATES, TAIL_AMBIGUOUS, TAIL_AT_CLOSE, TAIL_MID_RUN

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
    return (bin(int(packed[b0]) & head).count("1") + _popcount(packed[b0 + 1:b1])
            + bin(int(packed[b1]) & tail).count("1"))


def first_last(packed: np.ndarray) -> tuple[int, int] | None:
    """Index of the first and the last set bit, or None if none is set."""
    nonzero = np.flatnonzero(packed)
    if not len(nonzero):
        return None
    first_byte, last_byte = int(packed[nonzero[0]]), int(packed[nonzero[-1]])
    first = int(nonzero[0]) * 8 + (8 - first_byte.bit_length())
    last = int(nonzero[-1]) * 8 + 7 - ((last_byte & -last_byte).bit_length() - 1)
    return first, last


def missing_ranges(packed_missing: np.ndarray, limit: int = MAX_RANGES) -> list[list[int]]:
    """[first, last] seq ranges of set bits, the first `limit` of them."""
    ranges: list[list[int]] = []
    nonzero = np.flatnonzero(packed_missing)
    for start in range(0, len(nonzero), 4096):
        byte_index = nonzero[start:start + 4096]
        bits = np.unpackbits(packed_missing[byte_index]).reshape(-1, 8)
        seqs = (byte_index[:, None] * 8 + np.arange(8))[bits.astype(bool)]
        for seq in seqs.tolist():
            if ranges and ranges[-1][1] == seq - 1:
                ranges[-1][1] = seq
            elif len(ranges) >= limit:
                return ranges
            else:
                ranges.append([seq, seq])
    return ranges


def below(packed: np.ndarray, limit: int) -> np.ndarray:
    """A copy of packed with every bit at index >= limit cleared."""
    out = packed.copy()
    limit = max(limit, 0)
    out[(limit + 7) // 8:] = 0
    if limit % 8 and limit // 8 < len(out):
        out[limit // 8] &= np.uint8((0xFF << (8 - limit % 8)) & 0xFF)
    return out


def region_map(regions: list[tuple[int, int]], nbits: int) -> np.ndarray:
    """Seq regions [lo, hi) as a packed bit map of `nbits` seqs."""
    ones = _trim_tail(np.full((nbits + 7) // 8, 0xFF, np.uint8), nbits)
    packed = np.zeros_like(ones)
    for lo, hi in regions:
        packed |= below(ones, hi) & ~below(ones, lo)
    return packed


def dropped_maps(sent_ok: np.ndarray, got: np.ndarray, certain_below: int, drain_completed: bool,
                 tail_placement: str) -> tuple[np.ndarray, np.ndarray]:
    """Packed maps of the seqs fates() counts as dropped: (start and mid-run drops, tail
    drops). The queue depth lets the first leave at their send time, the second when the
    producer closed: an ambiguous tail drop may have waited until then (over ipc most did),
    so the depth keeps it, as it keeps what is stranded."""
    missing = sent_ok & ~got
    dropped = missing if drain_completed else below(missing, certain_below)
    span = first_last(got & sent_ok)
    if span is None or tail_placement == TAIL_MID_RUN:
        return dropped, np.zeros_like(dropped)
    early = below(dropped, span[1] + 1)
    return early, dropped & ~early


def unreceived_maps(sent_ok: np.ndarray, got: np.ndarray, certain_below: int, drain_completed: bool,
                    tail_placement: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Packed maps of the unreceived seqs by how they left the queue (contract/queue.py): (start and
    mid-run drops: at their send time; tail drops: when the producer closed; stranded or unknown:
    never)."""
    early, tail = dropped_maps(sent_ok, got, certain_below, drain_completed, tail_placement)
    return early, tail, sent_ok & ~got & ~early & ~tail


def fates(sent_ok: np.ndarray, got: np.ndarray, drained: np.ndarray, certain_below: int,
          drain_completed: bool, tail_placement: str = TAIL_AT_CLOSE, died: bool = False,
          at_reset: np.ndarray | None = None) -> dict[str, int]:
    """Fates of one stream's accepted messages as seen by one view (a consumer, or the
    union of round-robin consumers). `certain_below`: unreceived seqs below it cannot be
    queued any more (-1: none certain). `tail_placement`: where drops after the last
    arrival happened (contract.fates.TAIL_PLACEMENTS; mid-run folds them into dropped_mid).
    `died`: a process on the path died, so what is neither received nor certainly dropped
    is `unknown`. `at_reset`: the packed map of the connection resets' regions (reset_regions):
    a start or mid-run drop there is `dropped_reset`."""
    got = got & sent_ok
    drained = drained & got
    missing = sent_ok & ~got
    n_drained = _popcount(drained)
    result = dict.fromkeys(FATES, 0)
    result["delivered"] = _popcount(got) - n_drained
    result["drained"] = n_drained
    n_missing = _popcount(missing)
    span = first_last(got)
    end = len(missing) * 8
    if span is None:
        first = last = end                      # nothing arrived: every drop is a "start" drop
    else:
        first, last = span
    limit = end if drain_completed else max(certain_below, 0)
    result["dropped_start"] = bits_in(missing, 0, min(first, limit))
    result["dropped_mid"] = bits_in(missing, first, min(last, limit))
    result["dropped_tail"] = bits_in(missing, last + 1, limit)
    if at_reset is not None:        # a region ends at an arrival: never a tail drop
        reset = missing & _fit(at_reset, len(missing))
        for fate, lo, hi in (("dropped_start", 0, min(first, limit)), ("dropped_mid", first, min(last, limit))):
            n = bits_in(reset, lo, hi)
            result[fate] -= n
            result["dropped_reset"] += n
    uncertain = n_missing - sum(result[f] for f in DROPPED)
    result["unknown" if died else "stranded"] = uncertain
    if tail_placement == TAIL_MID_RUN:
        result["dropped_mid"] += result["dropped_tail"]
        result["dropped_tail"] = 0
    return result


def ambiguous_tail(fate_counts: dict[str, int], tail_placement: str) -> int:
    """How many of fate_counts' dropped_tail are placed by guess (AMBIGUOUS_TAIL)."""
    return fate_counts["dropped_tail"] if tail_placement == TAIL_AMBIGUOUS else 0


def _add(total: dict[str, int], part: dict[str, int]) -> None:
    for key, value in part.items():
        total[key] = total.get(key, 0) + value


def reconcile(producers: dict[int, dict[str, Any]], consumers: dict[int, dict[str, Any]], fanout: bool,
              drain_completed: bool = True, tail_placement: str = TAIL_AT_CLOSE,
              dead_producers: frozenset[int] = frozenset(), dead_consumers: frozenset[int] = frozenset(),
              resets: dict[int, dict[int | str, list[tuple[int, int]]]] | None = None) -> dict[str, Any]:
    """Per-stream and total counters and fates from the producers' and consumers' finals.

    producers: stream -> {"attempted", "sent", "sent_ok_map"}; consumers: index ->
    {"streams": {stream: {"seen_map", "drained_map", "unique", "duplicates", "reordered"}}}.
    dead_producers / dead_consumers: indices of workers that died (killed, crashed): what
    they may have held is `unknown`. resets: stream -> view (consumer index with fan-out, else
    "all") -> the connection resets' seq regions (measure/reset_regions.py).
    """
    streams = []
    drops: dict[int, list[Any]] = {}     # stream -> [(early, tail, stranded) packed maps], one per view
    indices = sorted(consumers) or [0]

    def at_reset(stream: int, view: int | str, nbits: int) -> np.ndarray | None:
        regions = (resets or {}).get(stream, {}).get(view)
        return region_map(regions, nbits) if regions else None
    for stream, prod in sorted(producers.items()):
        nbits = prod["attempted"]
        nbytes = (nbits + 7) // 8
        sent_ok = _trim_tail(_fit(prod["sent_ok_map"], nbytes), nbits)
        seen, drained = {}, {}
        received = duplicates = reordered = 0
        for index in indices:
            info = consumers.get(index, {}).get("streams", {}).get(stream)
            if info is None:
                seen[index] = drained[index] = np.zeros(nbytes, np.uint8)
                continue
            seen[index] = _fit(info["seen_map"], nbytes)
            drained[index] = _fit(info.get("drained_map", np.zeros(0, np.uint8)), nbytes)
            received += info["unique"] + info["duplicates"]
            duplicates += info["duplicates"]
            reordered += info["reordered"]
        fate_totals = dict.fromkeys(FATES, 0)
        by_consumer = {}
        missing: dict[int | str, list[list[int]]]     # per consumer (fan-out), or "all"
        if fanout:
            for index in indices:
                span = first_last(seen[index] & sent_ok)
                f = fates(sent_ok, seen[index], drained[index], span[1] if span else -1, drain_completed,
                          tail_placement, stream in dead_producers or index in dead_consumers,
                          at_reset(stream, index, nbits))
                by_consumer[index] = {**f, AMBIGUOUS_TAIL: ambiguous_tail(f, tail_placement)}
                _add(fate_totals, f)
                drops.setdefault(stream, []).append(
                    unreceived_maps(sent_ok, seen[index], span[1] if span else -1, drain_completed, tail_placement))
            delivered = sum(_popcount(seen[i] & sent_ok) for i in indices)
            missing = {index: missing_ranges(sent_ok & ~seen[index]) for index in indices}
            expected = prod["sent"] * len(indices)
        else:
            union = np.zeros(nbytes, np.uint8)
            union_drained = np.zeros(nbytes, np.uint8)
            for index in indices:
                union |= seen[index]
                union_drained |= drained[index]
            # a message that reached one consumer before the drain is not "drained" at another
            union_drained &= ~np.bitwise_or.reduce([seen[i] & ~drained[i] for i in indices])
            # a message delivered to two consumers is a duplicate too
            duplicates += sum(_popcount(seen[i]) for i in indices) - _popcount(union)
            lasts = [first_last(seen[i] & sent_ok) for i in indices]
            certain = min(span[1] if span else -1 for span in lasts)
            # round robin: any consumer may have held a missing message, the dead one too
            died = stream in dead_producers or bool(dead_consumers & set(indices))
            _add(fate_totals, fates(sent_ok, union, union_drained, certain, drain_completed, tail_placement, died,
                                    at_reset(stream, "all", nbits)))
            drops[stream] = [unreceived_maps(sent_ok, union, certain, drain_completed, tail_placement)]
            delivered = _popcount(union & sent_ok)
            missing = {"all": missing_ranges(sent_ok & ~union)}
            expected = prod["sent"]
        dropped = sum(fate_totals[f] for f in DROPPED)
        streams.append({
            "stream": stream, "attempted": nbits, "sent": prod["sent"], "expected": expected,
            "received": received, "unique_received": delivered, "duplicates": duplicates,
            "reordered": reordered, "lost": expected - delivered, "missing_ranges": missing,
            **fate_totals, "dropped": dropped, AMBIGUOUS_TAIL: ambiguous_tail(fate_totals, tail_placement),
            "fates_by_consumer": by_consumer if fanout else None,      # per consumer: fan-out only
        })
    keys = ("attempted", "sent", "expected", "received", "unique_received", "duplicates", "reordered", "lost",
            *FATES, "dropped", AMBIGUOUS_TAIL)
    totals = {key: sum(s[key] for s in streams) for key in keys}
    return {"streams": streams, "totals": totals, "drops": drops}


def receipt_only(consumers: dict[int, dict[str, Any]], fanout: bool) -> list[dict[str, Any]]:
    """Per stream, what zmqload's consumers alone (--role consumer) can say with no sends to hold
    it against: received, unique, duplicates, reordered, and the `holes`: seqs below the highest one
    received (per consumer with fan-out) that never arrived, with their ranges. A hole is a lower
    bound of what was lost: the producer may have refused sends, and a tail after the highest seq
    is not seen at all (joining the producer half settles both)."""
    streams = sorted({s for c in consumers.values() for s in c.get("streams", {})})
    out = []
    for stream in streams:
        infos = {i: c["streams"][stream] for i, c in sorted(consumers.items()) if stream in c.get("streams", {})}
        nbytes = max(len(info["seen_map"]) for info in infos.values())
        seen = {i: _fit(info["seen_map"], nbytes) for i, info in infos.items()}
        received = sum(info["unique"] + info["duplicates"] for info in infos.values())
        duplicates = sum(info["duplicates"] for info in infos.values())
        views: dict[int | str, np.ndarray] = {i: m for i, m in seen.items()}
        if not fanout:
            union = np.bitwise_or.reduce(list(seen.values()))
            duplicates += sum(_popcount(m) for m in seen.values()) - _popcount(union)
            views = {"all": union}
        holes = 0
        missing: dict[int | str, list[list[int]]] = {}
        for key, view in views.items():
            span = first_last(view)
            nbits = span[1] + 1 if span else 0
            absent = _trim_tail(~view[:(nbits + 7) // 8], nbits)
            holes += _popcount(absent)
            missing[key] = missing_ranges(absent)
        out.append({"stream": stream, "received": received, "duplicates": duplicates,
                    "unique_received": sum(_popcount(v) for v in views.values()),
                    "reordered": sum(info["reordered"] for info in infos.values()),
                    "holes": holes, "missing_ranges": missing})
    return out
