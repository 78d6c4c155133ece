"""What `zmqload compare` compares and how a limit on it is written: the figures (their names, once),
one run's figures as a record (what a pytest baseline file keeps of each run), and the `--fail-if`
spec. Types and rules only; the numbers are measure/compare.py's (docs/COMPARE.md)."""

from __future__ import annotations

import math
import re
from typing import Optional

import msgspec

from ..errors import ConfigError
from .codec import Record
from .fates import FATES
from .records import SCHEMA_VERSION

WINDOWED: tuple[str, ...] = ("throughput", "p50", "p99", "p99.9")
"""Figures measured per window of a run too, so a single run has a spread of its own."""
PERCENTILES: dict[str, float] = {"p50": 50.0, "p99": 99.0, "p99.9": 99.9}
"""The latency figures (from the intended send time, ns) and their percent."""
RUN_LEVEL: tuple[str, ...] = ("lost", *FATES, "queue_peak", "peak_rss_kb")
"""Figures a run has once: their spread is that of repeated runs."""
FIGURES: tuple[str, ...] = (*WINDOWED, *RUN_LEVEL)
"""Every figure compared, in the table's order."""
UNITS: dict[str, str] = {
    "throughput": "msg/s",
    **{name: "µs" for name in PERCENTILES},
    "queue_peak": "msgs",
    "peak_rss_kb": "KiB",
}


class Windows(Record):
    """A run cut into equal windows of its receive span: per window, its length, the receipts
    counted for throughput (before any drain) and the latency histogram (contract/histogram.py
    buckets, only those named in `buckets`)."""

    seconds: list[float] = []
    """Of each window, the part before the drain began: what its throughput is counted over."""
    messages: list[int] = []
    """Receipts in that part of each window."""
    buckets: list[int] = []
    """The histogram buckets any window used, ascending."""
    counts: list[list[int]] = []
    """Per window, its receipts per bucket of `buckets`."""


class RunFigures(Record):
    """One run as compare sees it: run.json's figures, its settings and its windows."""

    run_id: str = ""
    run_dir: str = ""
    settings: dict[str, str] = {}
    """Every workload option of the run, as text (a group is split by one of them)."""
    figures: dict[str, Optional[float]] = {}
    """FIGURES by name, from run.json (None: not measured, e.g. no receipts)."""
    windows: Optional[Windows] = None
    """None: the run has no receipts recorded."""


class Baseline(Record):
    """A pytest baseline file (--zmqload-save-baseline): each test's runs, by test id."""

    schema_version: int = SCHEMA_VERSION
    tests: dict[str, list[RunFigures]] = {}


class Limit(msgspec.Struct, frozen=True):
    """One limit of --fail-if: `figure` may move in the `worse` direction (+1 up, -1 down) by at
    most `amount`, a fraction of the base (`relative`) or in the figure's own unit."""

    figure: str
    worse: int
    amount: float
    relative: bool

    def __str__(self) -> str:
        sign = "+" if self.worse > 0 else "-"
        amount = f"{self.amount * 100:g}%" if self.relative else f"{self.amount:g}"
        return f"{self.figure}={sign}{amount}"

    def exceeded(self, base: float, candidate: float) -> bool:
        """The candidate moved the worse way by more than allowed."""
        moved = (candidate - base) * self.worse
        if self.relative:
            if base == 0:
                return moved > 0
            return moved / abs(base) > self.amount
        return moved > self.amount


FAIL_IF = "--fail-if"
_LIMIT = re.compile(
    r"(?P<figure>[a-z_.0-9]+)=(?P<sign>[+-])(?P<amount>[0-9]+(\.[0-9]+)?)(?P<pct>%?)"
)
FAIL_IF_ACCEPTED = (
    "comma-separated FIGURE=+N or FIGURE=-N, N a number or a percent (p99=+10%,lost=+0,"
    f"throughput=-5%): + a rise is worse, - a fall; FIGURE one of {', '.join(FIGURES)}"
)


def parse_fail_if(text: str, option: str = FAIL_IF) -> list[Limit]:
    """--fail-if's text -> its limits; ConfigError naming the option otherwise."""
    limits: list[Limit] = []
    for part in (p.strip() for p in text.split(",")):
        match = _LIMIT.fullmatch(part)
        if not match or match["figure"] not in FIGURES:
            raise ConfigError(option, f"got {part!r}; accepted: {FAIL_IF_ACCEPTED}")
        amount = float(match["amount"]) / (100 if match["pct"] else 1)
        if not math.isfinite(amount) or any(lim.figure == match["figure"] for lim in limits):
            raise ConfigError(option, f"got {part!r} twice or out of range; {FAIL_IF_ACCEPTED}")
        limits.append(
            Limit(match["figure"], 1 if match["sign"] == "+" else -1, amount, bool(match["pct"]))
        )
    return limits
