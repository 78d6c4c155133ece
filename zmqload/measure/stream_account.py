"""One stream's account, as reconciliation makes it (RunResult.streams): run.json's StreamEntry
with each view keyed as the run knows it, a consumer's index or "all", readable by key too."""

from __future__ import annotations

from typing import Optional, Union

from ..contract.keyed import Keyed
from ..contract.run_record import FateCounts, MessageCounts


class ViewFates(FateCounts, Keyed):
    """One consumer's fates of a fan-out stream."""


class StreamAccount(MessageCounts, Keyed):
    """One producer's stream: its counts, fates and missing seq ranges (run.json `streams[]`)."""

    stream: int = 0
    missing_ranges: dict[Union[int, str], list[list[int]]] = {}
    """Per consumer index (fan-out) or "all": [first, last] seq ranges, at most 20."""
    dropped_tail_ambiguous: int = 0
    fates_by_consumer: Optional[dict[int, ViewFates]] = None
    """Fan-out only: the fates seen by each consumer."""
    holes: Optional[int] = None
    """--role consumer: seqs below the highest received that never arrived (a lower bound of
    the loss)."""
    beyond: Optional[int] = None
    """--role consumer: arrivals past the span a seen-map may take, in no seq accounting."""
