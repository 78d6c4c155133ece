"""What was counted of one view (run, consumer, stream), or of a whole run, from the collected
aggregates: sends, receipts and the fate of every sent message (analysis/finish.py fates), before
the summary's rates and latencies (analysis/pipeline.py summarise)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class ViewCounts:
    """One view's counts. Not frozen: the pipeline adds the receive times and reordering once
    known, and a service's answers replace the receipts (finish.answered). `run` is the run's
    number (its index in the pipeline's runs)."""

    run: int
    stream: int
    consumer: int
    attempted: Optional[int] = None
    sent: Optional[int] = None
    sent_bytes: Optional[int] = None
    eagain: Optional[int] = None
    timeout: Optional[int] = None
    errors: Optional[int] = None
    t_first_intended_ns: Optional[int] = None
    t_last_intended_ns: Optional[int] = None
    t_first_send_ns: Optional[int] = None
    t_last_send_ns: Optional[int] = None
    received: int = 0
    unique: int = 0
    duplicates: int = 0
    drained: int = 0
    expected: int = 0
    lost: int = 0
    delivered: int = 0
    dropped_start: int = 0
    dropped_mid: int = 0
    dropped_tail: int = 0
    dropped_reset: int = 0
    dropped_restart: int = 0
    dropped: int = 0
    dropped_tail_ambiguous: int = 0
    stranded: int = 0
    unknown: int = 0
    loss_ratio: float = 0.0
    dropped_sender: int = 0
    t_first_recv_ns: Optional[int] = None
    t_last_recv_ns: Optional[int] = None
    bytes: Optional[int] = None
    """Payload bytes received (None: not seen, as a service's answers)."""
    reordered: Optional[int] = None
    """None: reordering not measured."""
    unanswered: Optional[int] = None
    echoed: Optional[int] = None
    by_order: Optional[int] = None
    copies: int = 1
    """A run total's consumers: a fan-out run offers every message to each."""
    backlog_went_in: Optional[int] = None
    backlog_came_out: Optional[int] = None

    def columns(self) -> dict[str, Any]:
        """The counts by name (for a summary row, whose columns share these names)."""
        return dataclasses.asdict(self)
