"""A verdict group: the runs of one setting and what the report concludes of them (built by
analysis/verdicts.py, worded by report/search_answer.py, written to capacity.json and the page)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class Flood:
    """A max-throughput (unpaced) run of the group, as capacity.json lists it."""

    run: str
    send_rate: Optional[float]
    recv_rate: Optional[float]
    dropped: int
    stranded: int
    p99_us: Optional[float]


@dataclass(frozen=True)
class SearchRef:
    """The capacity search whose probes the group is: its id and the index of its combination."""

    search_id: str
    index: int


@dataclass
class VerdictGroup:
    """One setting's verdict. Not frozen: the verdict fills it in steps, and a capacity search's
    wording (report/search_answer.py word_groups) rewrites its verdict and cause."""

    keys: dict[str, Any]
    """The grouping keys' values: workload fields (and libzmq), as run.json holds them."""
    key_names: list[str]
    group: str
    """The keys in words ('rcvhwm=10, consumer_delay_us=40'), or 'all runs'."""
    run_ids: list[str]
    what_if_p99_us: Optional[float] = None
    judged_by: list[str] = field(default_factory=list)
    judged: dict[str, list[str]] = field(default_factory=dict)
    """run id -> the SLOs it broke (empty: it passed)."""
    rates_tested: list[float] = field(default_factory=list)
    highest_clean_rate: Optional[float] = None
    lowest_failing_rate: Optional[float] = None
    monotone: bool = True
    failed_slo: Optional[str] = None
    failure: Optional[str] = None
    cause: Optional[str] = None
    advice: Optional[str] = None
    runs_at_clean: list[str] = field(default_factory=list)
    max_throughput: list[Flood] = field(default_factory=list)
    failing_run: Optional[str] = None
    verdict: Optional[str] = None
    monotone_note: Optional[str] = None
    what_if: Optional[str] = None
    others: Optional[str] = None
    search: Optional[SearchRef] = None
    p99_at_clean_us: Optional[float] = None
    queued_bytes_at_clean: Optional[float] = None
    queue_peak_at_clean: Optional[int] = None

    @property
    def runs(self) -> int:
        return len(self.run_ids)
