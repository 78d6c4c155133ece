"""What a person sees: a live progress line during a run and the final summary table."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Optional

from rich.console import Console
from rich.live import Live
from rich.table import Table

from ..contract.fates import LOST_BRIEF
from ..contract.run_record import Drain
from ..contract.workload import reply_timeout_in_effect
from ..measure.result import RunResult

if TYPE_CHECKING:
    from ..runner.state import ProgressSnapshot

SHOW_AFTER_S = 1.0  # short runs print only their summary


def _ns_to_us(ns: Optional[float]) -> str:
    return "-" if ns is None else f"{ns / 1000:,.1f}"


def _mib(kb: int) -> str:
    return "-" if kb < 0 else f"{kb / 1024:,.0f} MiB"


def _bytes(n: int) -> str:
    return "-" if n < 0 else f"{n / 1e9:,.1f} GB" if n >= 1e9 else f"{n / 1e6:,.0f} MB"


class LiveProgress:
    """Progress of a run, shown on a terminal once the run has lasted a second."""

    def __init__(self, console: Console | None = None, total_s: float | None = None):
        self.console = console or Console(stderr=True)
        self.live: Live | None = None
        self.started = 0.0
        self.total_s = total_s  # the planned sending time, when known (sweep.estimate_run_s)
        self._last = 0.0
        self._rate_from = (0.0, 0)  # (time, received) a second or so ago: the receive rate
        self._rate = 0.0
        self._stopped = False

    def start(self, snapshot: ProgressSnapshot) -> None:
        self.started = time.monotonic()
        self._stopped = False  # a display given to another run shows that one

    def update(self, snapshot: ProgressSnapshot) -> None:
        now = time.monotonic()
        # stopped stays stopped: the finals pumped after the stop would start a new display, and
        # its refresh thread redrew a frozen frame through the whole collect (41 s after an hour)
        if self._stopped or now - self.started < SHOW_AFTER_S or now - self._last < 0.1:
            return
        self._last = now
        then, received = self._rate_from
        if now - then >= 1.0:
            self._rate = (snapshot.received - received) / (now - then) if then else 0.0
            self._rate_from = (now, snapshot.received)
        if self.live is None:
            if not self.console.is_terminal:
                return
            self.live = Live(console=self.console, refresh_per_second=8, transient=True)
            self.live.start()
        self.live.update(self._render(snapshot, now - self.started))

    def _render(self, snap: ProgressSnapshot, elapsed: float) -> Table:
        table = Table.grid(padding=(0, 2))
        total = f" / {self.total_s:,.1f}" if self.total_s else ""
        table.add_row(
            f"[bold]{snap.pattern}[/] over {snap.transport}",
            snap.phase,
            f"{elapsed:6.1f}{total} s",
            f"sent {snap.sent:,}",
            f"received {snap.received:,} ({self._rate:,.0f} msg/s)",
            f"refused {snap.dropped:,}",
            f"gaps {snap.gaps:,}",
        )
        table.add_row(
            "",
            "",
            "",
            f"in flight ~{snap.in_flight:,}",
            f"memory {_mib(snap.rss_kb)}",
            f"disk {_bytes(snap.disk_bytes)} written",
            f"{_bytes(snap.disk_free_bytes)} free",
        )
        return table

    def stop(self) -> None:
        self._stopped = True
        if self.live is not None:
            self.live.stop()
            self.live = None


def _queue(peak: dict[str, Any], drain: Drain | None = None) -> str:
    """The queue's peak (zmqload/measure/queue_replay.py: sent - received - dropped, the most in flight at
    any instant), when, and its kernel / libzmq split. A PUB's tail drops the run cannot place
    (mid-run or at close) count as queued until it closed: said, as they may weigh in it."""
    if not peak:
        return "-"
    ambiguous = drain.dropped_tail_ambiguous if drain is not None else 0
    return (
        f"{peak['messages']:,} at {peak['at_s']:.2f} s ({peak['kernel_messages']:,} / "
        f"{peak['libzmq_messages']:,} messages)"
        + (
            f"; the {ambiguous:,} tail drops of ambiguous place count as queued until their producer closed"
            if ambiguous
            else ""
        )
    )


def _drain(drain: Drain) -> str:
    # a failed run's drain may hold only the run's tail rule: it never began or never ended
    if drain.ended is None:
        return "not reached"
    seconds = (drain.t_end_ns - drain.t_start_ns) / 1e9
    return f"{drain.mode}, ended {drain.ended} after {seconds:.2f} s"


def _resets(resets: list[dict[str, Any]]) -> str:
    """--reset-at: when each reset was made and how many connections it aborted."""
    return ", ".join(f"{r['at_s']:.3f} s ({r['connections']} conn.)" for r in resets)


def _restarts(restarts: list[dict[str, Any]]) -> str:
    """--restart: each restart's worker, when, how long it was away, what it cost and how long the
    flow took to come back, in the words and units of the report's table."""
    from ..contract.codec import convert
    from ..contract.run_record import Restart
    from ..report.restart_table import brief

    return ", ".join(brief(r) for r in convert(restarts, list[Restart]))


def _ambiguous(drain: Drain) -> str:
    # the tail drops a PUB's run cannot place (mid-run or at close): said, not hidden in the count
    n = drain.dropped_tail_ambiguous
    return f"  ({n:,} of the tail: mid-run or at close, ambiguous)" if n else ""


def pushback(result: RunResult) -> str:
    """Sends that found the socket full, and how long they waited (the producers' counters)."""
    blocked = sum(p.blocked_sends for p in result.producers)
    waited = sum(p.blocked_ns for p in result.producers) / 1e9
    return f"{blocked:,} sends waited, {waited:,.3f} s in all"


def service_rows(result: RunResult) -> list[tuple[str, str]]:
    """--role producer with req-rep: the user's service answered (or not) each request."""
    rt = result.latency_summary("round_trip")
    timeout = reply_timeout_in_effect(result.workload["reply_timeout_ms"], result.workload["role"])
    return [
        ("requests sent", f"{result.sent:,}"),
        ("answered", f"{result.answered:,}"),
        (
            "echoed / by order",
            f"{result.service.get('echoed', 0):,} / {result.service.get('by_order', 0):,} "
            "(the reply carried the request's header / matched to the request just sent)",
        ),
        ("unanswered", f"{result.unanswered:,} (no reply within {timeout:,} ms)"),
        (
            "round trip from intended (µs)",
            "  ".join(
                f"{k} {_ns_to_us(v)}" for k, v in rt.items() if k in ("p50", "p99", "p99.9", "max")
            ),
        ),
        ("request rate", f"{result.send_rate:,.0f} req/s"),
        (
            "answer rate",
            f"{result.service.get('answer_rate', 0.0):,.0f} answers/s (first request to last answer)",
        ),
    ]


def producers_alone_rows(result: RunResult) -> list[tuple[str, str]]:
    """--role producer: the send side only; what the user's consumer received is not seen."""
    if result.serves:
        return service_rows(result)
    return [
        ("attempted", f"{result.attempted:,}"),
        ("sent ok", f"{result.sent:,}"),
        ("EAGAIN drops (sender)", f"{result.eagain:,}"),
        ("SNDTIMEO drops (sender)", f"{result.timeout:,}"),
        ("pushback (full socket)", pushback(result)),
        ("received, lost", "not seen: the consumer is yours (--role producer)"),
        ("send rate", f"{result.send_rate:,.0f} msg/s"),
    ]


def _foreign_count(result: RunResult) -> int:
    return sum(c.foreign for c in result.consumers)


def _implausible_count(result: RunResult) -> int:
    return sum(c.implausible for c in result.consumers)


def _foreign(result: RunResult) -> str:
    implausible = _implausible_count(result)
    return f"{_foreign_count(result):,}" + (
        f" ({implausible:,} with an implausible header)" if implausible else ""
    )


def consumers_alone_rows(result: RunResult) -> list[tuple[str, str]]:
    """--role consumer: the receive side only; what the user's producer sent is not seen."""
    holes = sum(s.holes or 0 for s in result.streams)
    foreign = result.foreign or {}
    gap = foreign.get("gap_ns") or {}
    rows = [
        (
            "received (zmqload's header)",
            f"{result.received:,} from {len(result.streams)} stream(s)",
        ),
        ("duplicates / reordered", f"{result.duplicates:,} / {result.reordered:,}"),
        (
            "frame count mismatches",
            f"{result.frame_mismatches:,} (expected {result.workload.get('parts', 1)})",
        ),
        ("seq holes (a lower bound of loss)", f"{holes:,}"),
        (
            "sent, lost",
            "not seen: the producer is yours (--role consumer; join a producer half with `report`)",
        ),
        ("foreign messages", f"{foreign.get('messages', 0):,}, {foreign.get('bytes', 0):,} bytes"),
    ]
    implausible = _implausible_count(result)
    if implausible:  # zmqload's header, but nothing this run could have sent (docs/RECORDS.md)
        rows.append(("of them, implausible headers", f"{implausible:,}"))
    if foreign.get("messages"):
        rows += [
            ("foreign rate", f"{foreign['rate_msgs']:,.0f} msg/s over {foreign['span_s']:,.3f} s"),
            ("foreign gaps (µs)", "  ".join(f"{k} {_ns_to_us(v)}" for k, v in gap.items())),
        ]
    if result.received:
        lat = result.latency_summary("sent")
        rows.append(
            (
                "latency from sent (µs)",
                "  ".join(
                    f"{k} {_ns_to_us(v)}"
                    for k, v in lat.items()
                    if k in ("p50", "p99", "p99.9", "max")
                ),
            )
        )
    return rows


def summary_table(result: RunResult) -> Table:
    w = result.workload
    role = str(w["role"])
    sides = {
        "producer": f"{w['producers']} producer(s) -> your {'service' if result.serves else 'consumer'}",
        "consumer": f"your producer -> {w['consumers']} consumer(s)",
    }
    title = (
        f"{w['pattern']} over {w['transport']}{' with CURVE' if w.get('curve') == 'on' else ''}, "
        + (
            f"{w['size']} B, {'unpaced' if not w['rate'] else format(w['rate'], ',') + ' msg/s per producer'}, "
            if role != "consumer"
            else ""
        )
        + sides.get(role, f"{w['producers']}x{w['consumers']}")
        + f"  [{result.status}]"
    )
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("figure")
    table.add_column("value", justify="right")
    one_side = {"producer": producers_alone_rows, "consumer": consumers_alone_rows}.get(role)
    if one_side is not None:
        for label, value in one_side(result):
            table.add_row(label, value)
        return table
    rows = [
        ("attempted", f"{result.attempted:,}"),
        ("sent ok", f"{result.sent:,}"),
        ("EAGAIN drops (sender)", f"{result.eagain:,}"),
        ("SNDTIMEO drops (sender)", f"{result.timeout:,}"),
        ("expected deliveries", f"{result.expected:,}"),
        ("received", f"{result.received:,}"),
        (
            "delivered / drained",
            f"{result.delivered:,} / {result.drained:,}  (drain {_drain(result.drain)})",
        ),
        (
            "dropped start / mid / tail",
            f"{result.dropped_start:,} / {result.dropped_mid:,} / {result.dropped_tail:,}"
            + _ambiguous(result.drain),
        ),
        *(
            [
                ("connection resets", _resets(result.resets)),
                ("dropped at a reset", f"{result.dropped_reset:,}"),
            ]
            if result.resets
            else []
        ),
        *(
            [
                ("restarts", _restarts(result.restarts)),
                ("dropped at a restart", f"{result.dropped_restart:,}"),
            ]
            if result.restarts
            else []
        ),
        ("stranded (drain cut short)", f"{result.stranded:,}"),
        # only a failed run can have any: a worker on the message's path died
        *([("unknown (a worker died)", f"{result.unknown:,}")] if result.unknown else []),
        ("lost", f"{result.lost:,} ({result.loss_ratio:.4%}) = {' + '.join(LOST_BRIEF)}"),
        ("queue peak (kernel / libzmq)", _queue(result.queue_peak_figures(), result.drain)),
        ("duplicates / reordered", f"{result.duplicates:,} / {result.reordered:,}"),
        *(
            [
                (
                    "frame count mismatches",
                    f"{result.frame_mismatches:,} (of {w['parts']} frames each)",
                )
            ]
            if w["parts"] > 1
            else []
        ),
        ("send rate", f"{result.send_rate:,.0f} msg/s"),
        ("throughput", f"{result.throughput_msgs:,.0f} msg/s  {result.throughput_mb:,.1f} MB/s"),
        (
            "bytes sent / received",
            f"{result.bytes_sent:,} / {result.bytes_received:,}  (sizes {_sizes(result.sizes)})",
        ),
        *(
            [
                (
                    "size mismatches",
                    f"{result.size_mismatches:,} received at another size than their seq's",
                )
            ]
            if result.size_mismatches
            else []
        ),
        # a peer that is not this run's on a port it binds (docs/RECORDS.md "Which messages are zmqload's")
        *(
            [("foreign messages (not this run's)", _foreign(result))]
            if _foreign_count(result)
            else []
        ),
    ]
    # across hosts every one-way latency is good to the hosts' clock alignment (run.json placement)
    clocks = (
        ""
        if result.clock_uncertainty_ns is None
        else f"  (± {_ns_to_us(result.clock_uncertainty_ns)} clocks)"
    )
    for label, since in (
        ("latency from intended (µs)", "intended"),
        ("latency from sent (µs)", "sent"),
    ):
        lat = result.latency_summary(since)
        rows.append(
            (
                label,
                "  ".join(
                    f"{k} {_ns_to_us(v)}"
                    for k, v in lat.items()
                    if k in ("p50", "p99", "p99.9", "max")
                )
                + clocks,
            )
        )
    for label, value in rows:
        table.add_row(label, value)
    return table


def _sizes(facts: dict[str, Any]) -> str:
    """summary.sizes as the table shows it: "64:1024, 64..1024 B, mean 544.8"."""
    if not facts or facts.get("kind") == "fixed":
        return f"{facts.get('spec', '?')} B" if facts else "?"
    return f"{facts['spec']}: {facts['min']}..{facts['max']} B, mean {facts['mean']:,.1f}"


def print_summary(result: RunResult, console: Console | None = None) -> None:
    console = console or Console()
    console.print(summary_table(result))
    lossy = [s for s in result.streams if s.lost or s.holes]
    for stream in lossy[:4]:
        for where, ranges in stream.missing_ranges.items():
            if ranges:
                shown = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:8])
                who = "" if where == "all" else f" at consumer {where}"
                console.print(
                    f"missing seqs of stream {stream.stream}{who}: {shown}"
                    f"{' ...' if len(ranges) > 8 else ''}"
                )
    from ..measure.schedule_keeping import describe

    limited = describe(result.generator)
    if limited:
        console.print(limited, soft_wrap=True)
    console.print(f"records: {result.run_dir}")


def is_interactive() -> bool:
    return sys.stderr.isatty()
