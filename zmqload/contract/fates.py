"""The fates a sent message can end in, named once for the run (zmqload/measure/reconcile.py),
run.json, the summary and the report (zmqload/analysis/metrics.py); docs/RECORDS.md
says what each means."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from .states import Word


class Fate(Word):
    """Where one expected message ended; docs/RECORDS.md says what each means."""

    DELIVERED = "delivered"
    DRAINED = "drained"
    DROPPED_START = "dropped_start"
    DROPPED_MID = "dropped_mid"
    DROPPED_TAIL = "dropped_tail"
    DROPPED_RESET = "dropped_reset"
    DROPPED_RESTART = "dropped_restart"
    STRANDED = "stranded"
    UNKNOWN = "unknown"


FATES: Final = tuple(fate.value for fate in Fate)
"""Every expected message ends in exactly one of these: expected = the sum of them."""

DROPPED: Final = (
    "dropped_start",
    "dropped_mid",
    "dropped_tail",
    "dropped_reset",
    "dropped_restart",
)
"""The fates summed as `dropped`: certainly lost in the pipe. `dropped_reset`: lost across a
connection reset (--reset-at: in flight at the reset, or sent before the connection was back;
measure/reset_regions.py), placed before the others: not a full pipe's drop, not a close's.
`dropped_restart`: lost at a worker's restart (--restart: in the ended process's queue or
records, in flight, or sent for it before its new process received; measure/restart_regions.py),
placed before a reset's."""

LOST: Final = (*DROPPED, "stranded", "unknown")
"""The fates summed as `lost` (= expected - unique_received): every expected message no
consumer received, whether dropped for sure, stranded by a drain cut short, or unknown
because a process on its path died."""

BRIEF: Final = tuple("dropped" if f == DROPPED[0] else f for f in FATES if f not in DROPPED[1:])
"""The fates with the drops as one `dropped`, for one-line summaries."""

LOST_BRIEF: Final = tuple(f for f in BRIEF if f == "dropped" or f in LOST)
"""`lost` as the summary writes it: dropped + stranded + unknown."""


# Where `dropped_tail` comes from: a message that never arrived although sent after the
# last one that did was either lost at the producer's close or dropped mid-run at a full
# pipe. The run decides which from the socket and the close order it used, and records the
# rule in run.json["drain"]["tail_placement"] (docs/RECORDS.md) so the report applies it too.
class TailPlacement(Word):
    """run.json["drain"]["tail_placement"]: where a message missing after the last arrival
    was lost (the constants below say when each applies)."""

    AT_CLOSE = "at-close"
    MID_RUN = "mid-run"
    AMBIGUOUS = "ambiguous"


TAIL_AT_CLOSE: Final = TailPlacement.AT_CLOSE
"""The producer's socket blocks at HWM (PUSH, DEALER, PAIR, REQ): it dropped nothing while
running, so a message missing after the last arrival was lost at close: `dropped_tail`."""

TAIL_MID_RUN: Final = TailPlacement.MID_RUN
"""The consumers had drained to idle before the producers closed (--close-order after-drain):
nothing was in flight at the close, so a missing message was dropped mid-run: `dropped_mid`."""

TAIL_AMBIGUOUS: Final = TailPlacement.AMBIGUOUS
"""A socket that drops at HWM (PUB, XPUB) closed before the drain could show the pipe empty:
a missing message may have died at a full pipe or at close (over ipc even with LINGER -1).
Counted as `dropped_tail` and also as `AMBIGUOUS_TAIL`."""

TAIL_PLACEMENTS: Final = (TAIL_AT_CLOSE, TAIL_MID_RUN, TAIL_AMBIGUOUS)

AMBIGUOUS_TAIL: Final = "dropped_tail_ambiguous"
"""The part of `dropped_tail` whose place the run cannot tell (TAIL_AMBIGUOUS): not a fate of
its own (the fates still sum to expected), a flag on how many of the tail drops are a guess."""


def reset_region(
    received_by: Iterable[int], back_at: Iterable[int | None]
) -> tuple[int, int] | None:
    """Where one connection reset falls in one view of one stream (the `dropped_reset` rule of
    measure/reset_regions.py and the report's): the seqs [lo, hi) after the highest one received
    when the abort was asked for (`received_by`, -1: none) up to the first one received at or after
    the first sent once it was made (`back_at`: the connection was back; None: not seen). Several consumers of one stream
    without fan-out (round robin, a connection each): the lowest of their highs, the first of their
    returns. None when no return is seen (the tail rules apply) or nothing lies between."""
    lo = min(received_by, default=-1) + 1
    backs = [b for b in back_at if b is not None]
    if not backs or min(backs) <= lo:
        return None
    return lo, min(backs)


def merge_regions(regions: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Regions [lo, hi) of several resets as disjoint ones, in order (a message counts once)."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(regions):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def restart_region(received_before: int, first_after: int | None) -> tuple[int, int] | None:
    """Where one restart falls in one view of one stream (the `dropped_restart` rule of
    measure/restart_regions.py and the report's): the seqs [lo, hi) after `received_before` (-1:
    none) up to `first_after` (None: no arrival, the tail rules apply). A consumer's restart: the
    highest seq its ended process recorded, the first its new process received (without fan-out
    the other consumers' arrivals in it are received: what stays unreceived went to the restarted
    one). A producer's: the view's highest seq below its new process's first (several consumers
    without fan-out: the lowest of their highs), the view's first at or above it."""
    lo = received_before + 1
    if first_after is None or first_after <= lo:
        return None
    return lo, first_after


def regions_outside(
    regions: Iterable[tuple[int, int]], taken: Iterable[tuple[int, int]]
) -> list[tuple[int, int]]:
    """The parts of `regions` outside every region of `taken`, disjoint and in order: a reset's
    regions without a restart's (a message lost at a restart is `dropped_restart` only)."""
    out: list[tuple[int, int]] = []
    taken = merge_regions(taken)
    for lo, hi in merge_regions(regions):
        for t_lo, t_hi in taken:
            if t_hi <= lo or t_lo >= hi:
                continue
            if t_lo > lo:
                out.append((lo, t_lo))
            lo = max(lo, t_hi)
        if lo < hi:
            out.append((lo, hi))
    return out
