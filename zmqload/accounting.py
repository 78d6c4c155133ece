"""Reconcile what producers sent with what consumers received, exactly.

Producers ship a packed bit map of the seqs they sent successfully; consumers ship a
packed bit map of the seqs they received, per stream. Working on packed bits keeps the
controller's memory at count/8 bytes per map even for 100M-message runs.
"""
from __future__ import annotations

from typing import Any

import numpy as np

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


def reconcile(producers: dict[int, dict[str, Any]], consumers: dict[int, dict[str, Any]],
              fanout: bool) -> dict[str, Any]:
    """Per-stream and total counters from the producers' and consumers' final reports.

    producers: stream -> {"attempted", "sent", "sent_ok_map"}; consumers: index ->
    {"received", "streams": {stream: {"seen_map", "duplicates", "reordered"}}}.
    """
    streams = []
    n_consumers = max(1, len(consumers))
    for stream, prod in sorted(producers.items()):
        nbits = prod["attempted"]
        nbytes = (nbits + 7) // 8
        sent_ok = _trim_tail(_fit(prod["sent_ok_map"], nbytes), nbits)
        received_maps = []
        missing: dict[int | str, list[list[int]]]    # per consumer (fan-out), or "all"
        received = duplicates = reordered = 0
        for index, cons in sorted(consumers.items()):
            info = cons.get("streams", {}).get(stream)
            if info is None:
                received_maps.append((index, np.zeros(nbytes, np.uint8)))
                continue
            seen = _fit(info["seen_map"], nbytes)
            received_maps.append((index, seen))
            received += info["unique"] + info["duplicates"]
            duplicates += info["duplicates"]
            reordered += info["reordered"]
        if fanout:
            delivered = sum(_popcount(seen & sent_ok) for _, seen in received_maps)
            missing = {index: missing_ranges(sent_ok & ~seen) for index, seen in received_maps}
            expected = prod["sent"] * n_consumers
        else:
            union = np.zeros(nbytes, np.uint8)
            for _, seen in received_maps:
                union |= seen
            delivered = _popcount(union & sent_ok)
            # a message delivered to two consumers is a duplicate too
            duplicates += sum(_popcount(seen) for _, seen in received_maps) - _popcount(union)
            missing = {"all": missing_ranges(sent_ok & ~union)}
            expected = prod["sent"]
        streams.append({
            "stream": stream, "attempted": nbits, "sent": prod["sent"], "expected": expected,
            "received": received, "unique_received": delivered, "duplicates": duplicates,
            "reordered": reordered, "lost": expected - delivered, "missing_ranges": missing,
        })
    totals = {key: sum(s[key] for s in streams)
              for key in ("attempted", "sent", "expected", "received", "unique_received",
                          "duplicates", "reordered", "lost")}
    return {"streams": streams, "totals": totals}
