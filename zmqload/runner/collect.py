"""From the workers' finals to the run's figures: reconciliation, fates, RunResult."""

from __future__ import annotations

import dataclasses
import os
import shutil
from typing import Any, Optional, Union

import msgspec
import numpy as np

from ..measure.reconcile import receipt_only, reconcile
from ..measure.reset_regions import reset_regions
from ..measure.restart_regions import restart_regions, restarts_of
from ..contract.workload import Workload
from ..contract import codec, control
from ..contract import run_record as rr
from ..store import bitmaps
from ..store.size_files import sizes_of
from ..contract.derived import throughput_span
from ..contract.fates import (
    AMBIGUOUS_TAIL,
    FATES,
    TAIL_AMBIGUOUS,
    TAIL_AT_CLOSE,
    TAIL_MID_RUN,
    TailPlacement,
)
from ..contract.ids import Role
from ..measure.schedule_keeping import schedule_keeping
from ..measure.service import service_summary
from ..measure.histogram import Histogram
from ..measure.result import RunResult
from .state import RunState

_PRODUCER_HIDDEN = ("sent_ok_map", "rtt", "counters", "lateness")
_CONSUMER_HIDDEN = ("streams", "latency_intended", "latency_sent", "foreign_seen")


def _entry(
    final: Union[control.ProducerFinal, control.ConsumerFinal], hidden: tuple[str, ...], **more: Any
) -> dict[str, Any]:
    """A final's figures as the flat row run.json keeps per worker (maps and histograms aside)."""
    return {
        **{
            f.name: getattr(final, f.name)
            for f in dataclasses.fields(final)
            if f.name not in hidden
        },
        **more,
    }


def producer_entry(index: int, final: control.ProducerFinal) -> rr.ProducerEntry:
    """A producer's counters, send times and close timings, as run.json's `producers[]`."""
    row = _entry(final, _PRODUCER_HIDDEN, worker=index, **dataclasses.asdict(final.counters))
    entry: rr.ProducerEntry = codec.convert(row, rr.ProducerEntry)  # numpy's numbers made plain
    return entry


def consumer_entry(index: int, final: control.ConsumerFinal) -> rr.ConsumerEntry:
    """A consumer's counters and receive times, as run.json's `consumers[]`."""
    entry: rr.ConsumerEntry = codec.convert(
        _entry(final, _CONSUMER_HIDDEN, worker=index), rr.ConsumerEntry
    )
    return entry


# Sockets that drop (rather than block) when their pipe reaches the HWM: measured by the
# hwm-behaviour scenario, see zmqload.measure.reconcile for why it matters to the fates.
DROP_AT_HWM = ("PUB", "XPUB")


def tail_placement(w: Workload, drain: Optional[rr.Drain]) -> tuple[str, str]:
    """Where unreceived messages sent after a consumer's last arrival were lost, and why
    (zmqload.contract.fates: TAIL_AT_CLOSE, TAIL_MID_RUN or TAIL_AMBIGUOUS), from the close
    order the run used and how its first drain ended (`drain` as the controller left it)."""
    from ..contract import patterns

    socket = patterns.get(w.pattern).producer_socket
    if (
        w.close_order == "after-drain"
        and drain is not None
        and drain.ended is not None
        and drain.ended.completed
    ):
        return TAIL_MID_RUN, (
            "the consumers drained to idle before the producers closed (close order after-drain): "
            "nothing was in flight at the close, so a message missing at the end was dropped mid-run"
        )
    if socket not in DROP_AT_HWM:
        return TAIL_AT_CLOSE, (
            f"{socket} blocks at HWM, it drops nothing while running: a message missing after the "
            "last arrival was lost at close"
        )
    return TAIL_AMBIGUOUS, (
        f"{socket} drops at a full pipe and closed before the drain showed its pipe empty (close "
        f"order {w.close_order}): a message missing after the last arrival was dropped mid-run or "
        "lost at close (over ipc even with LINGER -1); counted as dropped_tail, placement "
        "ambiguous (--close-order after-drain tells them apart)"
    )


def queue_depth(
    run_dir: str,
    w: Workload,
    t0_ns: int,
    drops: dict[int, list[tuple[bitmaps.Bits, bitmaps.Bits, bitmaps.Bits]]],
    producers: dict[int, control.ProducerFinal],
) -> dict[str, Any]:
    """The queue's peak and series from the records (measure/queue_replay.py's definition, measured by
    zmqload.measure.queue_depth): a drop at the start or mid-run leaves the queue at its send time,
    one at the tail when its producer closed, a stranded or unknown message never."""
    from ..measure.queue_replay import closed_ns
    from ..measure.queue_depth import Unreceived, queue_figures

    unreceived = []
    for stream, maps in drops.items():
        p = producers.get(stream)
        closed = 0 if p is None else closed_ns(p.counters.t_last_send_ns, p.close_ns, p.term_ns)
        for _early, tail, stranded in maps:
            # a close the run does not know (no producer final): its tail drops stay, as stranded ones
            unreceived += [
                Unreceived(stream, tail, closed if closed > 0 else None),
                Unreceived(stream, stranded, None),
            ]
    return queue_figures(
        run_dir, t0_ns=t0_ns, size=round(sizes_of(w.size, w.payload).mean), unreceived=unreceived
    )


def dead_paths(state: RunState) -> dict[str, frozenset[int]]:
    """Whose messages a dead worker leaves with an unknown fate: its own (a producer's
    stream, a consumer's view), or every stream when the proxy between them died."""
    if any(n.role is Role.PROXY for n in state.dead):
        producers = {n.index for n in state.producers}
    else:
        producers = {n.index for n in state.dead if n.role is Role.PRODUCER}
    return {
        "dead_producers": frozenset(producers),
        "dead_consumers": frozenset(n.index for n in state.dead if n.role is Role.CONSUMER),
    }


def build_result(
    state: RunState, w: Workload, run_id: str, run_dir: str, status: str, versions: rr.Versions
) -> RunResult:
    producers: dict[int, control.ProducerFinal] = {}
    for worker in state.producers:
        final, done = state.final.get(worker), state.done.get(worker)
        if isinstance(final, control.ProducerFinal):
            producers[worker.index] = final
        elif done is not None:  # no final: nothing known beyond the done counters
            producers[worker.index] = control.ProducerFinal(
                done.counters, sent_ok_map=np.zeros(0, np.uint8)
            )
    consumers: dict[int, control.ConsumerFinal] = {}
    for worker in state.consumers:
        c_final = state.final.get(worker)
        if isinstance(c_final, control.ConsumerFinal):
            consumers[worker.index] = c_final
    seen = {i: {s.stream: s for s in c.streams} for i, c in consumers.items()}
    usable = any(
        bitmaps.nbytes(p.sent_ok_map) or not p.counters.attempted for p in producers.values()
    )
    drain_completed = state.drain is not None and state.drain.completed and status == "complete"
    placement, why = tail_placement(w, state.drain)
    # --role producer: what the user's consumer received is not seen, so no message has a fate
    # (all counts 0, the display says why) rather than every one "lost"
    accountable = usable and not w.topology.producers_alone
    regions = reset_regions(
        run_dir,
        [(r.t_ns - r.took_ns, r.t_ns) for r in state.resets],
        w.fanout,
        [c.index for c in state.consumers],
    )
    away, costs = restart_regions(
        run_dir,
        restarts_of(
            [(r.worker, r.generation, r.t_up_ns, r.first_seq) for r in state.restarts],
            {str(worker): names for worker, names in state.incarnations.items()},
        ),
        w.fanout,
        [c.index for c in state.consumers],
    )
    restarts = [
        msgspec.structs.replace(
            r,
            lost=cost.lost,
            t_first_recv_ns=cost.t_first_recv_ns,
            first_recv_after_up_ns=max(0, cost.t_first_recv_ns - r.t_up_ns)
            if cost.t_first_recv_ns
            else 0,
            backlog_drained_after_up_ns=max(0, cost.t_backlog_drained_ns - r.t_up_ns)
            if cost.t_backlog_drained_ns
            else 0,
        )
        for r, cost in zip(state.restarts, costs)
    ]
    maps_dir = os.path.join(run_dir, bitmaps.MAPS_DIR)
    try:  # the workers' maps and the unreceived ones made from them go once the figures are made
        accounts = reconcile(
            producers if accountable else {},
            seen,
            w.fanout,
            drain_completed,
            placement,
            maps_dir=maps_dir,
            **dead_paths(state),
            resets=regions,
            topics=w.topic_set,
            restarts=away,
        )
        if w.topology.consumers_alone:  # no sends to hold the receipts against: what they say alone
            accounts.streams = receipt_only(seen, w.fanout)
            accounts.totals.update(
                {
                    key: sum(getattr(s, key) for s in accounts.streams)
                    for key in ("received", "unique_received", "duplicates", "reordered")
                }
            )
        queue = queue_depth(run_dir, w, state.t0_ns, accounts.drops, producers)
    finally:
        shutil.rmtree(maps_dir, ignore_errors=True)
    totals = accounts.totals
    fates: dict[str, Any] = {name: totals[name] for name in FATES}
    # run.json keeps the rule, so the report places tail drops the same way (analysis/ cannot ask patterns)
    if state.drain is None:  # a run that ended before its drain: the rule alone
        state.drain = rr.Drain()
    state.drain.tail_placement, state.drain.tail_placement_why = TailPlacement(placement), why
    state.drain.dropped_tail_ambiguous = totals[AMBIGUOUS_TAIL]
    lat_i, lat_s, rtt = Histogram(), Histogram(), Histogram()
    for p in producers.values():
        if p.rtt:
            rtt.merge(Histogram.from_payload(p.rtt))
    for c in consumers.values():
        lat_i.merge(Histogram.from_payload(c.latency_intended))
        lat_s.merge(Histogram.from_payload(c.latency_sent))
    sends = [p.counters for p in producers.values()]
    first_send = min((p.t_first_send_ns for p in sends if p.t_first_send_ns), default=0)
    last_send = max((p.t_last_send_ns for p in sends), default=0)
    last_recv = max((c.t_last_recv_ns for c in consumers.values()), default=0)
    elapsed = (last_recv - first_send) / 1e9 if first_send and last_recv > first_send else 0.0
    send_span = (last_send - first_send) / 1e9 if first_send and last_send > first_send else 0.0
    attempted = sum(p.attempted for p in sends)
    sent = sum(p.sent for p in sends)
    unique = totals["unique_received"]
    drain_began = min((c.t_drain_ns for c in consumers.values() if c.t_drain_ns), default=0)
    counted, span_s = throughput_span(
        w.consumer_delay_us,
        w.drain,
        first_send,
        last_recv,
        drain_began,
        unique,
        totals["delivered"],
    )
    from ..contract.patterns import get as pattern

    generator = schedule_keeping(
        w.rate, state.t0_ns, list(producers.values()), pattern(w.pattern).round_trip
    )
    received = sum(c.received for c in consumers.values())
    bytes_received = sum(c.bytes_received for c in consumers.values())
    mean_bytes = bytes_received / received if received else 0.0  # of a message received
    return RunResult(
        run_id=run_id,
        run_dir=run_dir,
        status=status,
        workload=w.to_dict(),
        attempted=attempted,
        sent=sent,
        eagain=sum(p.eagain for p in sends),
        timeout=sum(p.timeout for p in sends),
        errors=sum(p.errors for p in sends),
        expected=totals["expected"],
        received=received,
        unique_received=unique,
        duplicates=totals["duplicates"],
        reordered=totals["reordered"],
        lost=totals["lost"],
        **fates,
        drain=msgspec.structs.replace(state.drain),
        elapsed_s=elapsed,
        send_rate=attempted / send_span if send_span else 0.0,
        throughput_msgs=counted / span_s if span_s else 0.0,
        throughput_mb=counted * mean_bytes / 1e6 / span_s if span_s else 0.0,
        bytes_sent=sum(p.bytes_sent for p in producers.values()),
        bytes_received=bytes_received,
        sizes={} if w.topology.consumers_alone else sizes_of(w.size, w.payload).facts(),
        latency_intended=lat_i,
        latency_sent=lat_s,
        streams=accounts.streams,
        round_trip=rtt,
        topics=accounts.topics or [],
        producers=[producer_entry(i, p) for i, p in producers.items()],
        consumers=[consumer_entry(i, c) for i, c in consumers.items()],
        versions=versions,
        queue=queue,
        generator=generator,
        resets=[codec.to_builtins(r) for r in state.resets],
        restarts=[codec.to_builtins(r) for r in restarts],
        foreign=foreign_summary(
            [f for f in state.final.values() if isinstance(f, control.ConsumerFinal)]
        ),
        service=service_summary(run_dir, sent, sum(p.unanswered for p in sends), first_send)
        if w.serves
        else {},
    )


def foreign_summary(finals: list[control.ConsumerFinal]) -> dict[str, Any]:
    """--role consumer: the foreign messages of every consumer (run.json summary.foreign); {} otherwise."""
    seen = [(f.foreign, f.foreign_seen) for f in finals if f.foreign_seen is not None]
    if not seen:
        return {}
    gaps = Histogram()
    for _, one in seen:
        gaps.merge(Histogram.from_payload(one.gaps))
    firsts = [one.t_first_ns for count, one in seen if count]
    span = (max(one.t_last_ns for _, one in seen) - min(firsts)) / 1e9 if firsts else 0.0
    messages = sum(count for count, _ in seen)
    return {
        "messages": messages,
        "bytes": sum(one.bytes for _, one in seen),
        "span_s": span,
        "rate_msgs": (messages - 1) / span
        if span
        else 0.0,  # arrivals over the intervals between them
        "gap_ns": {key: gaps.percentile(q) for key, q in (("p50", 50), ("p99", 99), ("max", 100))},
    }
