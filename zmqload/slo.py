"""Judging a finished run against service-level objectives (config.Slos).

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

from .config import Slos
from .result import RunResult

# The backlog grew when the depth at the end of sending exceeds the depth halfway by more
# than this share of the messages offered in between (a consumer ~5% slower than the rate),
# and by more than two sampling slices' worth of messages (the counters are sampled once per
# engine slice, so the depth is only that exact).
BACKLOG_SHARE = 0.05
BACKLOG_SLICES = 2
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
    (zmqload.generator: attempts plus the lag, so pushback that held a producer back counts),
    an unpaced run's attempts; times the consumers under fan-out."""
    w = result.workload
    copies = w["consumers"] if w["consumers"] > 1 and result.expected > result.sent else 1
    scheduled = (result.generator or {}).get("scheduled_messages")
    return (scheduled if w["rate"] and scheduled is not None else result.attempted) * copies


def backlog_growth(result: RunResult) -> Optional[tuple[float, float]]:
    """(growth, margin) in messages: queue depth when sending ended minus the depth halfway
    through, and how much growth is tolerated. None when the run has no depth series."""
    series = result.queue.get("series") or {}
    t_end = max(((p.get("t_last_send_ns") or 0) for p in result.producers), default=0)
    # the series counts from the run's t0 (the schedule's; an unpaced run's first send)
    t0 = (result.generator or {}).get("t0_ns") or min(
        ((p.get("t_first_send_ns") or 0) for p in result.producers if p.get("t_first_send_ns")), default=0)
    if not len(series.get("t_s", ())) or not t0 or t_end <= t0:
        return None
    t_s, depth = np.asarray(series["t_s"]), np.asarray(series["depth"])
    end_s = (t_end - t0) / 1e9
    if end_s <= 0:
        return None
    at_end = float(depth[max(0, np.searchsorted(t_s, end_s, side="right") - 1)])
    at_mid = float(depth[max(0, np.searchsorted(t_s, end_s / 2, side="right") - 1)])
    offered_half = offered(result) / 2
    slice_s = result.workload.get("slice_ms", 20) / 1000
    rate = offered(result) / end_s
    margin = max(BACKLOG_FLOOR, BACKLOG_SHARE * offered_half, BACKLOG_SLICES * slice_s * rate)
    return at_end - at_mid, margin


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
