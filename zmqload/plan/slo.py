"""Judging a finished run against service-level objectives (contract.workload.Slos).

The same judgement gates `zmqload run` (exit status 3) and decides whether a capacity probe
passed. Every breach names its SLO, the measured value and the limit, in one line.
Loss counts the fates that never arrived (dropped + stranded + unknown), so a backlog that was
drained at the end is not loss; a backlog that keeps growing is judged on its own
(`backlog`): it is not sustainable even when nothing is dropped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..contract.workload import Slos
from ..contract.parts import read_parts
from ..measure.result import RunResult

# The backlog grew when, over the second half of sending, more messages went into the path
# than came out by more than this share of what was offered in that half: a consumer more
# than ~2% slower than the rate. Counted exactly from the receive records (each carries its
# send time). It was once judged on the sampled depth series with 5% and two engine slices
# of messages tolerated, which passed a 19.5k msg/s consumer at 20.9k msg/s (docs/CAPACITY.md).
BACKLOG_SHARE = 0.02
BACKLOG_FLOOR = 64

# The order breaches are named in: the first is the one a search reports as "failed first".
ORDER = ("max-loss", "min-achieved", "backlog", "slo-p99-us")


@dataclass(frozen=True)
class Breach:
    slo: str              # max-loss, min-achieved, backlog or slo-p99-us
    measured: float
    limit: float
    text: str             # one line: the SLO, the measured value and the limit

    def to_dict(self) -> dict[str, Any]:
        return {"slo": self.slo, "measured": self.measured, "limit": self.limit, "text": self.text}


def offered(result: RunResult) -> int:
    """Deliveries the load called for: a paced run's schedule up to each producer's last send
    (zmqload.measure.schedule_keeping: attempts plus the lag, so pushback that held a producer back counts),
    an unpaced run's attempts; times the consumers under fan-out."""
    w = result.workload
    copies = w["consumers"] if w["consumers"] > 1 and result.expected > result.sent else 1
    scheduled = (result.generator or {}).get("scheduled_messages")
    return (scheduled if w["rate"] and scheduled is not None else result.attempted) * copies


def backlog_growth(result: RunResult) -> Optional[tuple[float, float]]:
    """(growth, margin) in messages: how much the queue grew over the second half of sending,
    and how much growth is tolerated. None when the run has no records to tell.

    growth = messages sent in [mid, end] that arrived (at any time, the drain included)
    - messages that arrived in [mid, end]: the depth at the end minus the depth at mid, of
    the messages that arrived. Messages that never arrived are judged by --max-loss."""
    t_end = max(((p.get("t_last_send_ns") or 0) for p in result.producers), default=0)
    t0 = (result.generator or {}).get("t0_ns") or min(
        ((p.get("t_first_send_ns") or 0) for p in result.producers if p.get("t_first_send_ns")), default=0)
    if not t0 or t_end <= t0 or not result.run_dir:
        return None
    table = read_parts(result.run_dir, "recvs", ["t_sent_ns", "t_recv_ns"])
    if table is None:
        return None
    t_sent, t_recv = table.column("t_sent_ns").to_numpy(), table.column("t_recv_ns").to_numpy()
    mid = t0 + (t_end - t0) // 2
    went_in = int(np.count_nonzero((t_sent >= mid) & (t_sent <= t_end)))
    came_out = int(np.count_nonzero((t_recv >= mid) & (t_recv <= t_end)))
    margin = max(BACKLOG_FLOOR, BACKLOG_SHARE * offered(result) / 2)
    return float(went_in - came_out), margin


def judge(result: RunResult, slos: Slos, backlog: bool = False) -> list[Breach]:
    """Every SLO the run broke, in ORDER. `backlog`: also judge the queue's growth."""
    breaches = []
    if slos.max_loss is not None and result.loss_ratio > slos.max_loss:
        breaches.append(Breach("max-loss", result.loss_ratio, slos.max_loss,
                               f"--max-loss {slos.max_loss:g}: lost {result.loss_ratio:.4%} ({result.lost:,} of "
                               f"{result.expected:,}: {result.dropped:,} dropped, {result.stranded:,} stranded, "
                               f"{result.unknown:,} unknown)"))
    want = offered(result)
    if slos.min_achieved is not None and want:
        achieved = result.unique_received / want
        if achieved < slos.min_achieved:
            breaches.append(Breach("min-achieved", achieved, slos.min_achieved,
                                   f"--min-achieved {slos.min_achieved:g}: received {achieved:.4f} of the offered "
                                   f"load ({result.unique_received:,} of {want:,})"))
    growth = backlog_growth(result) if backlog else None
    if growth is not None and growth[0] > growth[1]:
        breaches.append(Breach("backlog", growth[0], growth[1],
                               f"backlog: the queue grew by {growth[0]:,.0f} messages over the second half of "
                               f"sending (tolerated {growth[1]:,.0f})"))
    if slos.slo_p99_us is not None:
        p99 = result.latency_us(99)
        if p99 is None or p99 > slos.slo_p99_us:
            breaches.append(Breach("slo-p99-us", float("inf") if p99 is None else p99, slos.slo_p99_us,
                                   f"--slo-p99-us {slos.slo_p99_us:g}: p99 from the intended send time "
                                   + ("unknown (nothing received)" if p99 is None else f"{p99:,.1f} us")))
    return breaches
