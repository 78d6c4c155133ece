"""A finished run's figures for the SLO rules of contract/judge.py, from its RunResult and records
(numpy): what gates `zmqload run` (exit status 3) and passes or fails a capacity probe. Every breach
names its SLO, the value and the limit, in one line."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..contract import judge as rules
from ..contract.codec import convert
from ..contract.run_record import Restart
from ..contract.judge import BACKLOG_FLOOR, BACKLOG_SHARE, ORDER, Breach
from ..store.parquet_parts import read_parts
from ..contract.workload import Slos
from ..measure.result import RunResult

__all__ = [
    "BACKLOG_FLOOR",
    "BACKLOG_SHARE",
    "ORDER",
    "Breach",
    "backlog",
    "backlog_growth",
    "figures",
    "judge",
    "offered",
]


def offered(result: RunResult) -> int:
    """Deliveries the load called for (contract/judge.py's `offered_messages`)."""
    w = result.workload
    return rules.offered_messages(
        rate=w["rate"],
        consumers=w["consumers"],
        expected=result.expected,
        sent=result.sent,
        attempted=result.attempted,
        scheduled=result.generator.scheduled_messages,
    )


def backlog(result: RunResult) -> Optional[rules.Backlog]:
    """The queue's growth over the second half of sending (contract/judge.py's window), counted
    exactly from the receive records; None when the run has no records or no span to tell."""
    window = rules.backlog_window(
        result.generator.t0_ns,
        (p.t_first_send_ns for p in result.producers),
        (p.t_last_send_ns for p in result.producers),
    )
    if window is None or not result.run_dir:
        return None
    table = read_parts(result.run_dir, "recvs", ["t_sent_ns", "t_recv_ns"])
    if table is None:
        return None
    mid, end = window
    t_sent, t_recv = table.column("t_sent_ns").to_numpy(), table.column("t_recv_ns").to_numpy()
    return rules.Backlog(
        went_in=int(np.count_nonzero((t_sent >= mid) & (t_sent <= end))),
        came_out=int(np.count_nonzero((t_recv >= mid) & (t_recv <= end))),
        tolerated=rules.backlog_tolerance(offered(result)),
    )


def backlog_growth(result: RunResult) -> Optional[tuple[float, float]]:
    """(growth, tolerated) in messages (`backlog`), or None."""
    grew = backlog(result)
    return None if grew is None else (float(grew.growth), grew.tolerated)


def figures(result: RunResult, with_backlog: bool = False) -> rules.Figures:
    """What contract/judge.py's rules read of a run. A service of the user's (--role producer,
    req-rep) is judged on its answers: an unanswered request is lost, an answered one received,
    the p99 is the round trip's (one request in flight: no backlog can build)."""
    if result.serves:
        return rules.Figures(
            expected=result.sent,
            lost=result.unanswered,
            dropped=0,
            stranded=0,
            unknown=0,
            unique_received=result.answered,
            offered=offered(result),
            p99_us=result.latency_us(99, "round_trip"),
            unanswered=result.unanswered,
        )
    return rules.Figures(
        expected=result.expected,
        lost=result.lost,
        dropped=result.dropped,
        stranded=result.stranded,
        unknown=result.unknown,
        unique_received=result.unique_received,
        offered=offered(result),
        p99_us=result.latency_us(99),
        backlog=backlog(result) if with_backlog else None,
        restarts=tuple(convert(result.restarts, list[Restart])),
        dropped_restart=result.dropped_restart,
    )


def judge(result: RunResult, slos: Slos, backlog: bool = False) -> list[Breach]:
    """Every SLO the run broke, in ORDER (contract/judge.py). `backlog`: also judge the queue's growth."""
    return rules.judge(figures(result, with_backlog=backlog), slos, backlog=backlog)
