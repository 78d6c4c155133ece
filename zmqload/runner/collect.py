"""From the workers' finals to the run's figures: reconciliation, fates, RunResult."""
from __future__ import annotations

import dataclasses
import os
import shutil
from typing import Any, Optional, Union, cast

import numpy as np

from ..measure.reconcile import receipt_only, reconcile
from ..measure.reset_regions import reset_regions
from ..contract.workload import Workload
from ..contract import codec, control
from ..store import bitmaps
from ..contract.derived import throughput_span
from ..contract.fates import AMBIGUOUS_TAIL, FATES, TAIL_AMBIGUOUS, TAIL_AT_CLOSE, TAIL_MID_RUN
from ..contract.ids import Role
from ..measure.schedule_keeping import schedule_keeping
from ..measure.service import service_summary
from ..measure.histogram import Histogram
from ..measure.result import RunResult
from .state import RunState

_PRODUCER_HIDDEN = ("sent_ok_map", "rtt", "counters", "lateness")
_CONSUMER_HIDDEN = ("streams", "latency_intended", "latency_sent", "foreign_seen")


def _plain(final: Union[control.ProducerFinal, control.ConsumerFinal], hidden: tuple[str, ...]) -> dict[str, Any]:
    """A final as the flat dict run.json keeps per worker."""
    row = {f.name: getattr(final, f.name) for f in dataclasses.fields(final) if f.name not in hidden}
    if hasattr(final, "counters"):
        row.update(dataclasses.asdict(final.counters))
    return row


# Sockets that drop (rather than block) when their pipe reaches the HWM: measured by the
# hwm-behaviour scenario, see zmqload.measure.reconcile for why it matters to the fates.
DROP_AT_HWM = ("PUB", "XPUB")


def tail_placement(w: Workload, drain: dict[str, Any]) -> tuple[str, str]:
    """Where unreceived messages sent after a consumer's last arrival were lost, and why
    (zmqload.contract.fates: TAIL_AT_CLOSE, TAIL_MID_RUN or TAIL_AMBIGUOUS), from the close
    order the run used and how its first drain ended (`drain` as the controller left it)."""
    from ..contract import patterns
    socket = patterns.get(w.pattern).producer_socket
    if w.close_order == "after-drain" and drain.get("ended") in ("complete", "idle"):
        return TAIL_MID_RUN, ("the consumers drained to idle before the producers closed (close order after-drain): "
                              "nothing was in flight at the close, so a message missing at the end was dropped mid-run")
    if socket not in DROP_AT_HWM:
        return TAIL_AT_CLOSE, (f"{socket} blocks at HWM, it drops nothing while running: a message missing after the "
                               "last arrival was lost at close")
    return TAIL_AMBIGUOUS, (f"{socket} drops at a full pipe and closed before the drain showed its pipe empty (close "
                            f"order {w.close_order}): a message missing after the last arrival was dropped mid-run or "
                            "lost at close (over ipc even with LINGER -1); counted as dropped_tail, placement "
                            "ambiguous (--close-order after-drain tells them apart)")


def queue_depth(run_dir: str, w: Workload, t0_ns: int,
                drops: dict[int, list[tuple[bitmaps.Bits, bitmaps.Bits, bitmaps.Bits]]],
                producers: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The queue's peak and series from the records (measure/queue_replay.py's definition, measured by
    zmqload.measure.queue_depth): a drop at the start or mid-run leaves the queue at its send time,
    one at the tail when its producer closed, a stranded or unknown message never."""
    from ..measure.queue_replay import closed_ns
    from ..measure.queue_depth import Unreceived, queue_figures
    unreceived = []
    for stream, maps in drops.items():
        p = producers.get(stream, {})
        closed = closed_ns(p.get("t_last_send_ns") or 0, p.get("close_ns") or 0, p.get("term_ns") or 0)
        for _early, tail, stranded in maps:
            # a close the run does not know (no producer final): its tail drops stay, as stranded ones
            unreceived += [Unreceived(stream, tail, closed if closed > 0 else None), Unreceived(stream, stranded, None)]
    return queue_figures(run_dir, t0_ns=t0_ns, size=round(w.sizes.mean), unreceived=unreceived)


def dead_paths(state: RunState) -> dict[str, frozenset[int]]:
    """Whose messages a dead worker leaves with an unknown fate: its own (a producer's
    stream, a consumer's view), or every stream when the proxy between them died."""
    if any(n.role is Role.PROXY for n in state.dead):
        producers = {n.index for n in state.producers}
    else:
        producers = {n.index for n in state.dead if n.role is Role.PRODUCER}
    return {"dead_producers": frozenset(producers),
            "dead_consumers": frozenset(n.index for n in state.dead if n.role is Role.CONSUMER)}


def build_result(state: RunState, w: Workload, run_id: str, run_dir: str, status: str,
                 versions: dict[str, str]) -> RunResult:
    producers: dict[int, dict[str, Any]] = {}
    for worker in state.producers:
        final = cast(Optional[control.ProducerFinal], state.final.get(worker))     # a producer's final
        done = state.done.get(worker)
        if final is not None:
            producers[worker.index] = dict(_plain(final, _PRODUCER_HIDDEN), worker=worker.index,
                                           sent_ok_map=final.sent_ok_map, rtt=final.rtt, lateness=final.lateness)
        elif done is not None:      # no final: nothing known beyond the done counters
            producers[worker.index] = dict(dataclasses.asdict(done.counters), worker=worker.index,
                                           sent_ok_map=np.zeros(0, np.uint8), rtt=None)
    consumers: dict[int, dict[str, Any]] = {}
    for worker in state.consumers:
        c_final = cast(Optional[control.ConsumerFinal], state.final.get(worker))   # a consumer's final
        if c_final is not None:
            consumers[worker.index] = dict(
                _plain(c_final, _CONSUMER_HIDDEN), worker=worker.index, latency_intended=c_final.latency_intended,
                latency_sent=c_final.latency_sent,
                streams={s.stream: {"unique": s.unique, "duplicates": s.duplicates, "reordered": s.reordered,
                                    "seen_map": s.seen_map, "drained_map": s.drained_map, "beyond": s.beyond}
                         for s in c_final.streams})
    usable = any(bitmaps.nbytes(p["sent_ok_map"]) or not p.get("attempted") for p in producers.values())
    drain_completed = bool(state.drain.get("completed")) and status == "complete"
    placement, why = tail_placement(w, state.drain)
    # --role producer: what the user's consumer received is not seen, so no message has a fate
    # (all counts 0, the display says why) rather than every one "lost"
    accountable = usable and not w.topology.producers_alone
    regions = reset_regions(run_dir, [(r.t_ns - r.took_ns, r.t_ns) for r in state.resets], w.fanout,
                            [c.index for c in state.consumers])
    maps_dir = os.path.join(run_dir, bitmaps.MAPS_DIR)
    try:        # the workers' maps and the unreceived ones made from them go once the figures are made
        accounts = reconcile(producers if accountable else {}, consumers, w.fanout, drain_completed, placement,
                             maps_dir=maps_dir, **dead_paths(state), resets=regions,
                             topics=w.topic_set)
        if w.topology.consumers_alone:      # no sends to hold the receipts against: what they say alone
            accounts["streams"] = receipt_only(consumers, w.fanout)
            accounts["totals"].update({key: sum(s[key] for s in accounts["streams"])
                                       for key in ("received", "unique_received", "duplicates", "reordered")})
        queue = queue_depth(run_dir, w, state.t0_ns, accounts["drops"], producers)
    finally:
        shutil.rmtree(maps_dir, ignore_errors=True)
    totals = accounts["totals"]
    # run.json keeps the rule, so the report places tail drops the same way (analysis/ cannot ask patterns)
    state.drain.update(tail_placement=placement, tail_placement_why=why, **{AMBIGUOUS_TAIL: totals[AMBIGUOUS_TAIL]})
    lat_i, lat_s, rtt = Histogram(), Histogram(), Histogram()
    for p in producers.values():
        if p.get("rtt"):
            rtt.merge(Histogram.from_payload(p["rtt"]))
    for c in consumers.values():
        lat_i.merge(Histogram.from_payload(c["latency_intended"]))
        lat_s.merge(Histogram.from_payload(c["latency_sent"]))
    first_send = min((p["t_first_send_ns"] for p in producers.values() if p.get("t_first_send_ns")), default=0)
    last_send = max((p.get("t_last_send_ns") or 0 for p in producers.values()), default=0)
    last_recv = max((c.get("t_last_recv_ns") or 0 for c in consumers.values()), default=0)
    elapsed = (last_recv - first_send) / 1e9 if first_send and last_recv > first_send else 0.0
    send_span = (last_send - first_send) / 1e9 if first_send and last_send > first_send else 0.0
    attempted = sum(p.get("attempted", 0) for p in producers.values())
    unique = totals["unique_received"]
    drain_began = min((c["t_drain_ns"] for c in consumers.values() if c.get("t_drain_ns")), default=0)
    counted, span_s = throughput_span(w.consumer_delay_us, w.drain, first_send, last_recv, drain_began,
                                      unique, totals["delivered"])
    from ..contract.patterns import get as pattern
    generator = schedule_keeping(w.rate, state.t0_ns, list(producers.values()), pattern(w.pattern).round_trip)
    received = sum(c.get("received", 0) for c in consumers.values())
    bytes_received = sum(c.get("bytes_received", 0) for c in consumers.values())
    mean_bytes = bytes_received / received if received else 0.0      # of a message received
    return RunResult(
        run_id=run_id, run_dir=run_dir, status=status, workload=w.to_dict(),
        attempted=attempted, sent=sum(p.get("sent", 0) for p in producers.values()),
        eagain=sum(p.get("eagain", 0) for p in producers.values()),
        timeout=sum(p.get("timeout", 0) for p in producers.values()),
        errors=sum(p.get("errors", 0) for p in producers.values()),
        expected=totals["expected"], received=received,
        unique_received=unique, duplicates=totals["duplicates"], reordered=totals["reordered"],
        lost=totals["lost"], **{name: totals[name] for name in FATES}, drain=dict(state.drain),
        elapsed_s=elapsed, send_rate=attempted / send_span if send_span else 0.0,
        throughput_msgs=counted / span_s if span_s else 0.0,
        throughput_mb=counted * mean_bytes / 1e6 / span_s if span_s else 0.0,
        bytes_sent=sum(p.get("bytes_sent", 0) for p in producers.values()), bytes_received=bytes_received,
        sizes={} if w.topology.consumers_alone else w.sizes.facts(),
        latency_intended=lat_i, latency_sent=lat_s, streams=accounts["streams"], round_trip=rtt,
        topics=accounts.get("topics") or [],
        producers=[{k: v for k, v in p.items() if k not in ("sent_ok_map", "rtt", "lateness")}
                   for p in producers.values()],
        consumers=[{k: v for k, v in c.items() if k not in _CONSUMER_HIDDEN} for c in consumers.values()],
        versions=versions, queue=queue, generator=generator, resets=[codec.to_builtins(r) for r in state.resets],
        foreign=foreign_summary([f for f in state.final.values() if isinstance(f, control.ConsumerFinal)]),
        service=service_summary(run_dir, sum(p.get("sent", 0) for p in producers.values()),
                                sum(p.get("unanswered") or 0 for p in producers.values()), first_send)
        if w.serves else {})


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
    return {"messages": messages, "bytes": sum(one.bytes for _, one in seen), "span_s": span,
            "rate_msgs": (messages - 1) / span if span else 0.0,     # arrivals over the intervals between them
            "gap_ns": {key: gaps.percentile(q) for key, q in (("p50", 50), ("p99", 99), ("max", 100))}}


