"""The fates a sent message can end in, named once for the run (zmqload/accounting.py),
run.json, the summary and the report (zmqload/analysis/metrics.py); docs/RECORDS.md
says what each means."""
from __future__ import annotations

from typing import Final

FATES: Final = ("delivered", "drained", "dropped_start", "dropped_mid", "dropped_tail", "stranded", "unknown")
"""Every expected message ends in exactly one of these: expected = the sum of them."""

DROPPED: Final = ("dropped_start", "dropped_mid", "dropped_tail")
"""The fates summed as `dropped`: certainly lost in the pipe."""

LOST: Final = (*DROPPED, "stranded", "unknown")
"""The fates summed as `lost` (= expected - unique_received): every expected message no
consumer received, whether dropped for sure, stranded by a drain cut short, or unknown
because a process on its path died."""

BRIEF: Final = tuple("dropped" if f == DROPPED[0] else f for f in FATES if f not in DROPPED[1:])
"""The fates with the three drops as one `dropped`, for one-line summaries."""

LOST_BRIEF: Final = tuple(f for f in BRIEF if f == "dropped" or f in LOST)
"""`lost` as the summary writes it: dropped + stranded + unknown."""
