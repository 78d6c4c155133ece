"""Queue depth and its exact peak, one definition for `run` (numpy) and the report (Spark): sent -
received - dropped per consumer's queue, summed, in millisecond bins; the peak replays only the
candidate bins event by event. Pure numpy (docs/ARCHITECTURE.md, "Queue depth")."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np

BIN_NS = 1_000_000
"""The depth series' resolution: the depth at the end of each millisecond."""


def bin_of(t_ns: np.ndarray) -> np.ndarray:
    return t_ns // BIN_NS


def closed_ns(t_last_send_ns: int, close_ns: int, term_ns: int) -> int:
    """When a producer's tail drops leave the queue: its last send, plus the time its close and
    its context's termination took (run.json's producers[]: t_last_send_ns, close_ns, term_ns)."""
    return t_last_send_ns + close_ns + term_ns


WINDOW_BINS = 1 << 16
"""The most bins (milliseconds: 65.5 s) `run` holds at once: a run's queue is measured a window of
this many bins at a time, the depth carried from one to the next (zmqload.measure.queue_depth), so
its memory does not grow with the run's duration (~45 bytes per bin: ~3 MB). Larger windows only
cost memory; smaller ones read a part that spans several windows once per window."""


@dataclass
class Bins:
    """Messages that entered and left one queue (or a sum of queues) per bin, from bin `first` on;
    `before`: the depth at the start of bin `first` (a window's, carried from the bins before it)."""

    first: int
    entered: np.ndarray  # int64 per bin
    left: np.ndarray
    before: int = 0

    @classmethod
    def of(cls, entered: dict[int, int], left: dict[int, int]) -> Optional[Bins]:
        """From {bin: count} maps; None when nothing entered or left."""
        keys = [k for k, v in (*entered.items(), *left.items()) if v]
        if not keys:
            return None
        first, last = min(keys), max(keys)
        e, x = np.zeros(last - first + 1, np.int64), np.zeros(last - first + 1, np.int64)
        for k, v in entered.items():
            if v:
                e[k - first] += v
        for k, v in left.items():
            if v:
                x[k - first] += v
        return cls(first, e, x)

    @classmethod
    def from_times(cls, entered_ns: np.ndarray, left_ns: np.ndarray) -> Optional[Bins]:
        if not len(entered_ns) and not len(left_ns):
            return None
        eb, lb = bin_of(np.asarray(entered_ns, np.int64)), bin_of(np.asarray(left_ns, np.int64))
        first = int(
            min(eb.min(initial=np.iinfo(np.int64).max), lb.min(initial=np.iinfo(np.int64).max))
        )
        last = int(
            max(eb.max(initial=np.iinfo(np.int64).min), lb.max(initial=np.iinfo(np.int64).min))
        )
        n = last - first + 1
        return cls(
            first,
            np.bincount(eb - first, minlength=n).astype(np.int64),
            np.bincount(lb - first, minlength=n).astype(np.int64),
        )

    def __add__(self, other: Bins) -> Bins:
        """The sum of two queues' bins, each from its start (`before` 0)."""
        first = min(self.first, other.first)
        last = max(self.first + len(self.entered), other.first + len(other.entered))
        e, x = np.zeros(last - first, np.int64), np.zeros(last - first, np.int64)
        for b in (self, other):
            e[b.first - first : b.first - first + len(b.entered)] += b.entered
            x[b.first - first : b.first - first + len(b.left)] += b.left
        return Bins(first, e, x)

    def depth(self) -> np.ndarray:
        """The depth at the end of each bin."""
        return self.before + np.cumsum(self.entered - self.left)

    def end_ns(self, i: int | np.ndarray) -> int | np.ndarray:
        """The end of bin index i (relative to `first`), ns."""
        return (self.first + i + 1) * BIN_NS


def candidate_bins(bins: Bins, depth: np.ndarray | None = None, reach: int = 0) -> np.ndarray:
    """The bins (absolute numbers) in which the depth may have risen to or above its highest bin
    end (and `reach`: a depth known to be reached elsewhere). Inside a bin the depth is at most its
    start plus what entered in it, and at most its end plus what left in it (what left after an
    instant was there at it): only the bins where both bounds reach it need replaying."""
    depth = bins.depth() if depth is None else depth
    if not len(depth):
        return np.zeros(0, np.int64)
    start = np.concatenate(([bins.before], depth[:-1]))
    bound = np.minimum(start + bins.entered, depth + bins.left)
    picked = np.flatnonzero((bins.entered > 0) & (bound >= max(int(depth.max()), reach, 1)))
    return (picked + bins.first).astype(np.int64)


@dataclass(frozen=True)
class Peak:
    messages: int
    t_ns: Optional[int]  # the first instant the queue held that many; None: it never held one


Replayed = Optional[tuple[int, int]]
"""The highest depth reached at an event of some bins, and the first instant it was: None
without events there."""


def replay(
    bins: Bins, depth: np.ndarray, entered_ns: np.ndarray, left_ns: np.ndarray, only: np.ndarray
) -> Replayed:
    """Every event in the bins `only` (absolute numbers) replayed in time order from its bin's
    start depth. Every event of those bins must be given (more is harmless: events outside them
    are ignored). At one instant, whatever left and entered then counts (depth(t) counts the
    events at or before t)."""
    # one sort of one int64 key: the time, doubled, plus 1 for an arrival (the departures of an
    # instant first: the depth after all of them); only the events in `only`'s bins
    key = np.concatenate(
        [np.asarray(entered_ns, np.int64) * 2 + 1, np.asarray(left_ns, np.int64) * 2]
    )
    index = bin_of(key >> 1) - bins.first
    wanted = np.zeros(len(depth), bool)
    only = np.asarray(only, np.int64) - bins.first
    wanted[only[(only >= 0) & (only < len(depth))]] = True
    inside = (index >= 0) & (index < len(depth))
    inside[inside] = wanted[index[inside]]
    key = np.sort(key[inside], kind="stable")  # timsort: the records come in nearly sorted runs
    if not len(key):
        return None
    times, signs = key >> 1, (key & 1) * 2 - 1
    b = bin_of(times)
    starts = np.flatnonzero(np.concatenate(([True], b[1:] != b[:-1])))
    running = np.cumsum(signs)
    offset = np.repeat(running[starts] - signs[starts], np.diff(np.append(starts, len(b))))
    before = np.concatenate(([bins.before], depth))[b - bins.first]  # the depth at each bin's start
    values = before + running - offset
    i = int(np.argmax(values))
    return int(values[i]), int(times[i])


REPLAY_EVENTS = 250_000
"""The most events one piece of the run's replay of its exact peak holds (zmqload.measure.queue_depth):
about 100 bytes per event at the replay's peak (measured: +100 MB for a piece of 1M events in a 40M-
message run), so ~25 MB whatever the run's length (read when called: a test lowers it). Unpaced runs
have a few dozen candidate bins of ~8k events: a few pieces. The report cuts larger pieces
(analysis/finish.REPLAY_EVENTS)."""


def cuts(events: Iterable[int], budget: int | None = None) -> list[int]:
    """Where candidate bins, in time order with `events` each, are cut into pieces to replay one at
    a time: the index each piece starts at. A piece holds at most `budget` events (REPLAY_EVENTS
    unless given); a bin is never split (one larger than the budget is a piece of its own)."""
    budget = REPLAY_EVENTS if budget is None else budget
    starts: list[int] = []
    held = 0
    for i, n in enumerate(events):
        if not starts or held + n > budget:
            starts.append(i)
            held = 0
        held += int(n)
    return starts


def pieces(
    costs: Iterable[tuple[int, int, int]], budget: int | None = None
) -> list[dict[int, list[int]]]:
    """`cuts` of candidate bins of several runs: `costs` holds (bin, whose bin: a run's number, its
    events); [{whose: [bin]}] in time order."""
    ordered = sorted(costs)
    starts = cuts((n for _, _, n in ordered), budget) + [len(ordered)]
    out: list[dict[int, list[int]]] = []
    for lo, hi in zip(starts, starts[1:]):
        piece: defaultdict[int, list[int]] = defaultdict(list)
        for k, whose, _ in ordered[lo:hi]:
            piece[whose].append(k)
        out.append(dict(piece))
    return out


def peak_of(bins: Bins, depth: np.ndarray, replayed: Iterable[Replayed]) -> Peak:
    """The exact peak from the bins' ends and the replays of (pieces of) the candidate bins."""
    if not len(depth) or not bins.entered.any():
        return Peak(0, None)
    i = int(np.argmax(depth))
    return settle(int(depth[i]), bins.first + i, replayed)


def settle(highest_end: int, at_bin: int, replayed: Iterable[Replayed]) -> Peak:
    """The exact peak from the highest bin end (`at_bin`: the first bin that ended there) and the
    replays of the candidate bins, of a queue that something entered."""
    best, best_t = highest_end, None
    for r in replayed:
        if r is not None and (r[0] > best or (r[0] == best and (best_t is None or r[1] < best_t))):
            best, best_t = r
    if best_t is None:  # the highest bin end was not reached inside a candidate: never by an entry
        best_t = (at_bin + 1) * BIN_NS - 1 if best > 0 else None
    return Peak(best, best_t)


def exact_peak(
    bins: Bins, entered_ns: np.ndarray, left_ns: np.ndarray, depth: np.ndarray | None = None
) -> Peak:
    """The most messages in flight at any instant. `entered_ns` and `left_ns`: the times of every
    message that entered / left in the candidate bins (more is harmless)."""
    depth = bins.depth() if depth is None else depth
    if not len(depth) or not bins.entered.any():
        return Peak(0, None)
    candidates = candidate_bins(bins, depth)
    return peak_of(
        bins,
        depth,
        [replay(bins, depth, entered_ns, left_ns, candidates) if len(candidates) else None],
    )
