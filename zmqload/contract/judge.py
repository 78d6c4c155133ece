"""The one judge: a run's figures (`Figures`) against the SLOs it is judged by. `run`'s exit status
3, every capacity probe and the report's verdicts go through `judge`; callers only compute the
figures. The rules: docs/ARCHITECTURE.md, "Judging a run". Imports only contract."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

from .run_record import Restart
from .states import Slo
from .workload import Slos

# The backlog grew when, over the second half of sending, more messages went into the path
# than came out by more than this share of what was offered in that half: a consumer more
# than ~2% slower than the rate. Counted exactly from the receive records (each carries its
# send time). It was once judged on the sampled depth series with 5% and two engine slices
# of messages tolerated, which passed a 19.5k msg/s consumer at 20.9k msg/s (docs/CAPACITY.md).
BACKLOG_SHARE = 0.02
BACKLOG_FLOOR = 64

ORDER = (
    Slo.MAX_LOSS.value,
    Slo.MIN_ACHIEVED.value,
    Slo.BACKLOG.value,
    Slo.SLO_P99_US.value,
    Slo.SLO_RESTART_LOST.value,
    Slo.SLO_RECOVERY_MS.value,
)
"""The order breaches are named in."""

LOSS_ONLY = Slos(max_loss=0.0)
"""What a run made without SLOs (plain `zmqload run`) is judged by where a verdict is asked of
it (the report): nothing lost; no latency SLO, no achieved share, no backlog rule."""


@dataclass(frozen=True)
class Breach:
    slo: str  # max-loss, min-achieved, backlog, slo-p99-us, slo-restart-lost, ... (ORDER)
    measured: float  # inf: unknown (the p99 of a run that received nothing)
    limit: float
    text: str  # one line: the SLO, the measured value and the limit

    def to_dict(self) -> dict[str, Any]:
        return {"slo": self.slo, "measured": self.measured, "limit": self.limit, "text": self.text}


@dataclass(frozen=True)
class Backlog:
    """The queue's growth over the second half of sending, counted from the receive records."""

    went_in: int  # messages sent in [mid, end] that arrived (at any time)
    came_out: int  # messages that arrived in [mid, end]
    tolerated: float  # backlog_tolerance(offered)

    @property
    def growth(self) -> int:
        return self.went_in - self.came_out


@dataclass(frozen=True)
class Figures:
    """What the rules read of one run (every count over the whole run, all producers and consumers)."""

    expected: int  # deliveries expected: ok sends, times the consumers under fan-out
    lost: int  # dropped + stranded + unknown
    dropped: int
    stranded: int
    unknown: int
    unique_received: int  # distinct deliveries
    offered: int  # offered_messages
    p99_us: Optional[float]  # from the intended send time; None: nothing received
    backlog: Optional[Backlog] = None  # None: not computed (no records, no sending span)
    unanswered: Optional[int] = (
        None  # a service of the user's: its lost are requests it did not answer
    )
    restarts: tuple[Restart, ...] = ()  # --restart: each restart made (run.json restarts)
    dropped_restart: int = (
        0  # of dropped: lost at the restarts (judged per restart, not by max-loss)
    )

    @property
    def loss_ratio(self) -> float:
        return self.lost / self.expected if self.expected else 0.0

    @property
    def judged_loss_ratio(self) -> float:
        """The --max-loss figure: the loss apart from what the restarts (--restart) lost, which
        --slo-restart-lost bounds per restart (a killed process loses what it held at any rate)."""
        lost = self.lost - self.dropped_restart
        return lost / self.expected if self.expected else 0.0

    @property
    def achieved(self) -> Optional[float]:
        """The --min-achieved figure: what was received of the offered load, the restarts' loss
        counted as received (judged per restart: a rate is sustained through the restarts)."""
        got = self.unique_received + self.dropped_restart
        return got / self.offered if self.offered else None


def offered_messages(
    *,
    rate: Optional[int],
    consumers: int,
    expected: int,
    sent: int,
    attempted: int,
    scheduled: Optional[int],
) -> int:
    """Deliveries the load called for: a paced run's schedule up to each producer's last send
    (zmqload.measure.schedule_keeping's `scheduled_messages`: attempts plus the lag the sockets
    caused, so pushback that held a producer back counts), an unpaced run's attempts; times the
    consumers under fan-out (where more is expected than was sent)."""
    copies = consumers if consumers > 1 and expected > sent else 1
    return (scheduled if rate and scheduled is not None else attempted) * copies


def backlog_window(
    t0_ns: int, first_sends_ns: Iterable[int], last_sends_ns: Iterable[int]
) -> Optional[tuple[int, int]]:
    """[mid, end] of the second half of sending: from the schedule's t0 (else the first send)
    to the producers' last send. None when there is no span to halve."""
    t_end = max((t for t in last_sends_ns if t), default=0)
    t0 = t0_ns or min((t for t in first_sends_ns if t), default=0)
    if not t0 or t_end <= t0:
        return None
    return t0 + (t_end - t0) // 2, t_end


def backlog_tolerance(offered: int) -> float:
    """The growth tolerated over the second half: BACKLOG_SHARE of what was offered in it, at least BACKLOG_FLOOR."""
    return max(BACKLOG_FLOOR, BACKLOG_SHARE * offered / 2)


def judge(f: Figures, slos: Slos, backlog: bool = False) -> list[Breach]:
    """Every SLO the figures break, in ORDER. `backlog`: also apply the backlog rule (the capacity
    search's; `run` does not)."""
    breaches = []
    loss = f.judged_loss_ratio
    if slos.max_loss is not None and loss > slos.max_loss:
        apart = f.dropped_restart
        how = (
            f"{f.unanswered:,} unanswered"
            if f.unanswered is not None
            else f"{f.dropped - apart:,} dropped, {f.stranded:,} stranded, {f.unknown:,} unknown"
        )
        breaches.append(
            Breach(
                Slo.MAX_LOSS.value,
                loss,
                slos.max_loss,
                f"--max-loss {slos.max_loss:g}: lost {loss:.4%} ({f.lost - apart:,} of "
                f"{f.expected:,}: {how})"
                + (f", apart from {apart:,} at restarts" if apart else ""),
            )
        )
    achieved = f.achieved
    if slos.min_achieved is not None and achieved is not None and achieved < slos.min_achieved:
        breaches.append(
            Breach(
                Slo.MIN_ACHIEVED.value,
                achieved,
                slos.min_achieved,
                f"--min-achieved {slos.min_achieved:g}: "
                + (
                    f"answered {achieved:.4f} of the requests"
                    if f.unanswered is not None  # a service of the user's
                    else f"received {achieved:.4f} of the offered load"
                )
                + f" ({f.unique_received:,}"
                + (f" + {f.dropped_restart:,} lost at restarts" if f.dropped_restart else "")
                + f" of {f.offered:,})",
            )
        )
    grew = f.backlog if backlog else None
    if grew is not None and grew.growth > grew.tolerated:
        breaches.append(
            Breach(
                Slo.BACKLOG.value,
                float(grew.growth),
                grew.tolerated,
                f"backlog: the queue grew by {grew.growth:,} messages over the second half of "
                f"sending (tolerated {grew.tolerated:,.0f})",
            )
        )
    if slos.slo_p99_us is not None and (f.p99_us is None or f.p99_us > slos.slo_p99_us):
        breaches.append(
            Breach(
                Slo.SLO_P99_US.value,
                float("inf") if f.p99_us is None else f.p99_us,
                slos.slo_p99_us,
                f"--slo-p99-us {slos.slo_p99_us:g}: p99 "
                + ("round trip " if f.unanswered is not None else "")
                + "from the intended send time "
                + ("unknown (nothing received)" if f.p99_us is None else f"{f.p99_us:,.1f} µs"),
            )
        )
    breaches += _restart_breaches(f.restarts, slos)
    return breaches


def restart_name(r: Restart) -> str:
    """A restart as the summaries name it: 'c0 at 0.400 s'."""
    return f"{r.worker} at {r.at_s:.3f} s"


def _restart_breaches(restarts: tuple[Restart, ...], slos: Slos) -> list[Breach]:
    """Per restart: the most one lost, the longest recovery (one breach each: the worst restart)."""
    out = []
    if slos.slo_restart_lost is not None and restarts:
        worst = max(restarts, key=lambda r: r.lost)
        if worst.lost > slos.slo_restart_lost:
            out.append(
                Breach(
                    Slo.SLO_RESTART_LOST.value,
                    float(worst.lost),
                    slos.slo_restart_lost,
                    f"--slo-restart-lost {slos.slo_restart_lost:g}: the restart of "
                    f"{restart_name(worst)} lost {worst.lost:,}",
                )
            )
    if slos.slo_recovery_ms is not None and restarts:

        def recovery_ms(r: Restart) -> float:
            ns = r.recovery_ns
            return float("inf") if ns is None else ns / 1e6

        worst = max(restarts, key=recovery_ms)
        took = recovery_ms(worst)
        if took > slos.slo_recovery_ms:
            out.append(
                Breach(
                    Slo.SLO_RECOVERY_MS.value,
                    took,
                    slos.slo_recovery_ms,
                    f"--slo-recovery-ms {slos.slo_recovery_ms:g}: the restart of "
                    f"{restart_name(worst)} "
                    + (
                        "never recovered (nothing arrived after it)"
                        if took == float("inf")
                        else f"recovered in {took:,.0f} ms"
                    ),
                )
            )
    return out


def describe(slos: Optional[Slos], backlog: bool = False) -> str:
    """The SLOs as options, one line: '--max-loss 0, --min-achieved 0.99, --slo-p99-us 50000, no growing
    backlog'; None: 'none set'."""
    if slos is None or not slos.given:
        return "none set"
    parts = [
        f"--{name.replace('_', '-')} {value:g}"
        for name, value in (
            ("max_loss", slos.max_loss),
            ("min_achieved", slos.min_achieved),
            ("slo_p99_us", slos.slo_p99_us),
            ("slo_restart_lost", slos.slo_restart_lost),
            ("slo_recovery_ms", slos.slo_recovery_ms),
        )
        if value is not None
    ]
    return ", ".join(parts + (["no growing backlog"] if backlog else []))
