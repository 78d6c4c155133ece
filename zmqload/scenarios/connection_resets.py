"""Claims from users about connection resets (U): U-6 (libzmq #3392) and U-8 (sonic-swss-common PR 1059).

Ordinary zmqload runs with --reset-at: PUSH/PULL over tcp at 20,000 msg/s, the kernel aborting
the connection once mid-run (ss -K), with a fast receiver and a slow one (80 us of work per
message: 12,500 msg/s, so a backlog sits in libzmq's and the kernel's buffers), and for U-8 the same
with ZMQ_IMMEDIATE on both sides. One scenario settles both from the same runs (U-6 reads those
without ZMQ_IMMEDIATE). Each is repeated: what a fast receiver has in flight at the instant
of the reset varies from nothing to a few hundred messages run to run, so a single run could show
either; three (two in the suite) show whether it loses at all and the spread, which U-8 compares
with and without ZMQ_IMMEDIATE. A slow receiver's loss is the backlog in flight, thousands every time.

Per run, from its records: the loss placed at the reset (`dropped_reset`), which seqs (every lost
one sent before the reset: in flight, or after it), what was in flight at the reset (sent by then
minus received by then) and the kernel's share of it (the tcp queues sampled just before).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..store.parquet_parts import read_parts
from ..measure.queue_depth import frame_bytes, kernel_bytes_at, read_samples
from .framework import (
    DOES_NOT_HOLD,
    HOLDS,
    Outcome,
    Scenario,
    ScenarioRunner,
    Verdict,
    depends,
    facts,
    ranges,
)

RATE = 20_000
SLOW_US = 80.0
RESET_AT_S = 0.6
RECEIVERS = (("fast", 0.0), ("slow", SLOW_US))


def _spread(values: list[int]) -> str:
    return f"{min(values):,}" if min(values) == max(values) else f"{min(values):,}-{max(values):,}"


def _at_reset(run_dir: str, t_ns: int, size: int) -> dict[str, Any]:
    """From the records of a 1x1 run: messages sent and received by the reset, the lost seqs and
    whether each was sent before it, and the kernel's tcp queues sampled just before it."""
    sends = read_parts(run_dir, "sends", ["seq", "t_sent_ns", "status"])
    recvs = read_parts(run_dir, "recvs", ["seq", "t_recv_ns"])
    assert sends is not None
    seq, t_sent = sends["seq"].to_numpy(), sends["t_sent_ns"].to_numpy()
    ok = seq[sends["status"].to_numpy() == 0]
    got = recvs["seq"].to_numpy() if recvs is not None else np.zeros(0, np.int64)
    t_recv = recvs["t_recv_ns"].to_numpy() if recvs is not None else np.zeros(0, np.int64)
    lost = np.setdiff1d(ok, got)
    sent_before = t_sent[np.isin(seq, lost)] <= t_ns
    kernel = float(kernel_bytes_at(read_samples(run_dir), np.array([t_ns]))[0])
    after = seq[t_sent > t_ns]
    k = int(after.min()) if len(after) else int(seq.max()) + 1
    # sent before the reset, after the last lost one, and arrived: what the sender still held
    kept = (
        int(np.count_nonzero((np.unique(got) > lost.max()) & (np.unique(got) < k)))
        if len(lost)
        else None
    )
    return {
        "in_flight": int((t_sent <= t_ns).sum() - (t_recv <= t_ns).sum()),
        "kernel_messages": int(kernel // frame_bytes(size)),
        "lost_sent_before": int(sent_before.sum()),
        "lost_sent_after": int((~sent_before).sum()),
        "kept_after_loss": kept,
    }


def _reset_run(r: ScenarioRunner, variant: str, delay_us: float, immediate: bool) -> dict[str, Any]:
    # 1.2 s: the reset at 0.6 s, then as long again to reconnect and go on
    res = r.run(
        variant,
        pattern="push-pull",
        transport="tcp",
        rate=RATE,
        duration=1.2,
        reset_at=str(RESET_AT_S),
        consumer_delay_us=delay_us,
        immediate=immediate,
    )
    f = facts(res)
    reset = res.resets[0]
    missing = [tuple(x) for s in res.streams for x in s["missing_ranges"].get("all", [])]
    return {
        "lost": res.lost,
        "dropped_reset": res.dropped_reset,
        "other_drops": res.dropped - res.dropped_reset,
        "duplicates": res.duplicates,
        "attempted": res.attempted,
        "sent": res.sent,
        "connections": reset["connections"],
        "reset_at_s": round(reset["at_s"], 3),
        "missing": missing,
        "max_latency_ms": round((f["latency_max_ns"] or 0) / 1e6, 1),
        **_at_reset(res.run_dir, reset["t_ns"], f["size"]),
        "facts": f,
    }


def _text(c: dict[str, Any]) -> str:
    return (
        f"{c['dropped_reset']:,} lost at the reset ({c['connections']} connection aborted at "
        f"{c['reset_at_s']} s; seqs {ranges(c['missing'])}; {c['lost_sent_before']:,} sent before it, "
        f"{c['lost_sent_after']:,} after"
        + (
            ""
            if c["kept_after_loss"] is None
            else f"; the {c['kept_after_loss']:,} sent between the last lost one and "
            "the reset arrived"
        )
        + f"), {c['in_flight']:,} in flight then (~{c['kernel_messages']:,} in kernel "
        f"tcp buffers), other drops {c['other_drops']:,}, duplicates {c['duplicates']:,}; {c['sent']:,} of "
        f"{c['attempted']:,} sent; max latency {c['max_latency_ms']:,} ms"
    )


def _label(key: str) -> str:
    receiver, immediate = key.split("/")
    return f"{receiver} receiver, ZMQ_IMMEDIATE {int(immediate == 'immediate')}"


def connection_reset(r: ScenarioRunner) -> Outcome:
    """U-6 and U-8: PUSH/PULL over tcp, one reset mid-run, a fast and a slow receiver, without and
    with ZMQ_IMMEDIATE on both sides, repeated."""
    repeats = r.scale(3, 2)  # a fast receiver loses in some runs only: U-8 compares how often
    figures: dict[str, Any] = {"repeats": repeats, "cells": {}}
    measured: list[str] = []
    for immediate in (False, True):
        for receiver, delay_us in RECEIVERS:
            key = f"{receiver}/{'immediate' if immediate else 'default'}"
            cells = [_reset_run(r, f"{key}-{i + 1}", delay_us, immediate) for i in range(repeats)]
            figures["cells"][key] = cells
            measured += [f"{_label(key)}, run {i + 1}: {_text(c)}" for i, c in enumerate(cells)]
    return Outcome([_u6_verdict(figures), _u8_verdict(figures)], measured, figures)


# ---------------------------------------------------------------------------- U-6
def _u6_verdict(figures: dict[str, Any]) -> Verdict:
    """From the runs without ZMQ_IMMEDIATE."""
    n = figures["repeats"]
    cells = {k: v for k, v in figures["cells"].items() if k.endswith("/default")}
    losing = {k: sum(1 for c in v if c["dropped_reset"]) for k, v in cells.items()}
    lost = {k: [c["dropped_reset"] for c in v] for k, v in cells.items()}
    before = all(c["lost_sent_after"] == 0 for v in cells.values() for c in v)
    measurements = {
        "runs_losing": losing,
        "lost": lost,
        "repeats": n,
        "lost_all_sent_before_reset": before,
        "in_flight": {k: [c["in_flight"] for c in v] for k, v in cells.items()},
        "kernel_messages": {k: [c["kernel_messages"] for c in v] for k, v in cells.items()},
        "duplicates": sum(c["duplicates"] for v in cells.values() for c in v),
    }
    which = (
        "every lost message was sent before the reset: in flight, a run of consecutive seqs ending at most "
        "where the reset fell"
        if before
        else "some lost messages were sent after the reset"
    )
    because = (
        "; ".join(
            f"{k.split('/')[0]} receiver: lost in {losing[k]} of {n} runs ({_spread(lost[k])} messages of "
            f"{_spread(measurements['in_flight'][k])} in flight, ~{_spread(measurements['kernel_messages'][k])} in kernel "
            "tcp buffers)"
            for k in cells
        )
        + f"; {which}; duplicates {measurements['duplicates']}"
    )
    if all(k == n for k in losing.values()):
        return Verdict("U-6", HOLDS, because, measurements)
    if not any(losing.values()):
        return Verdict("U-6", DOES_NOT_HOLD, because, measurements)
    return Verdict(
        "U-6",
        depends(
            "on what is in flight at the instant: "
            + ", ".join(
                f"a {k.split('/')[0]} receiver lost messages in {losing[k]} of {n} runs"
                for k in cells
            )
        ),
        because,
        measurements,
    )


# ---------------------------------------------------------------------------- U-8
def _u8_verdict(figures: dict[str, Any]) -> Verdict:
    n, cells = figures["repeats"], figures["cells"]
    losing = {k: sum(1 for c in v if c["dropped_reset"]) for k, v in cells.items()}
    lost = {k: [c["dropped_reset"] for c in v] for k, v in cells.items()}
    kept = {
        k: [c["kept_after_loss"] for c in v if c["kept_after_loss"] is not None]
        for k, v in cells.items()
    }
    measurements = {
        "runs_losing": losing,
        "lost": lost,
        "repeats": n,
        "kept_after_loss": kept,
        "max_latency_ms": {k: [c["max_latency_ms"] for c in v] for k, v in cells.items()},
    }
    because = "; ".join(
        f"{_label(k)}: lost in {losing[k]} of {n} runs ({_spread(lost[k])}"
        + (
            f"; of those sent before the reset, the last {_spread(kept[k])} arrived"
            if kept[k]
            else ""
        )
        + ")"
        for k in cells
    )
    with_immediate = [k for k in cells if k.endswith("/immediate")]
    without = [k for k in cells if k.endswith("/default")]
    if not any(losing[k] for k in with_immediate) and any(losing[k] for k in without):
        return Verdict("U-8", HOLDS, because, measurements)
    if all(losing[k] >= losing[k.replace("immediate", "default")] for k in with_immediate) and any(
        losing[k] for k in with_immediate
    ):
        kept_with = [x for k in with_immediate for x in kept[k]]
        kept_without = [x for k in without for x in kept[k]]
        worse = (
            ", and the sending PUSH's own queue with it: none of what it sent before the reset arrived after "
            f"the lost run, where without ZMQ_IMMEDIATE up to {max(kept_without):,} did"
            if kept_with and not any(kept_with) and any(kept_without)
            else ""
        )
        return Verdict(
            "U-8",
            DOES_NOT_HOLD,
            "with ZMQ_IMMEDIATE on both sides what was in flight at the reset was "
            f"lost as without it{worse}: " + because,
            measurements,
        )
    return Verdict(
        "U-8",
        depends(
            "on the receiver: "
            + ", ".join(
                f"with ZMQ_IMMEDIATE a {k.split('/')[0]} receiver lost messages in {losing[k]} of {n} runs, without in "
                f"{losing[k.replace('immediate', 'default')]}"
                for k in with_immediate
            )
        ),
        because,
        measurements,
    )


SCENARIOS = (
    Scenario(
        "connection-reset",
        "PUSH/PULL over tcp, the connection reset by the kernel mid-run (ss -K), a fast "
        "and a slow receiver, without and with ZMQ_IMMEDIATE on both sides, repeated (libzmq #3392, "
        "sonic-swss-common PR 1059)",
        ("U-6", "U-8"),
        connection_reset,
        expected_s=38,
    ),
)
