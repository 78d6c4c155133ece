"""More claims from the libzmq issue tracker (U): ZMQ_CONFLATE and a short-lived PUSH.

U-4 (libzmq #3323) is ordinary zmqload runs: `--conflate producers` on a PUB with several
subscribers, repeated (which subscriber connects first is a race). U-5 (libzmq #3171) needs a
SUB that does not read at all, which a zmqload consumer never is: a SUB of the engine's
libzmq in a process of its own that stops reading once subscribed, its VmRSS read from
/proc while a PUB in this process sends, next to a non-conflating SUB and one that only
polls ZMQ_EVENTS; plus zmqload runs of a conflating SUB that reads slowly, for its fates and
memory. U-7 (libzmq #3774) is repeated trials of the report's sender with the engine's
sockets: connect, send one message with DONTWAIT, close at once with LINGER 10000.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from typing import Any, Optional

from .. import _engine
from ..errors import RunError
from .framework import (
    DOES_NOT_HOLD,
    HOLDS,
    Outcome,
    Scenario,
    ScenarioRunner,
    Verdict,
    depends,
    facts,
    fates_line,
    scratch_dir,
)

PROBE_DEADLINE_S = 20  # every wait on a peer is bounded by this
TRANSPORTS = ("tcp", "ipc")


def _endpoint(transport: str, name: str) -> str:
    return (
        "tcp://127.0.0.1:*"
        if transport == "tcp"
        else f"ipc://{os.path.join(scratch_dir('zmqload-cf-'), name)}"
    )


def _libzmq() -> str:
    return ".".join(map(str, _engine.libzmq_version()))


def _spread(k: int, n: int) -> str:
    return f"{k} of {n}"


# ---------------------------------------------------------------------------- U-4
U4_SUBSCRIBERS = 3


def conflate_fanout(r: ScenarioRunner) -> Outcome:
    """A conflating PUB (`--conflate producers`) and 3 SUBs, over tcp and ipc: paced at 1,000
    msg/s (nothing to conflate: each subscriber should get every message), repeated; and one
    unpaced run per transport, where the PUB's per-subscriber queue conflates. Counted per
    subscriber: data messages and frames shorter than the header (the report saw zero-byte
    frames at the others). A warm-up that never completes (a subscriber never heard the PUB)
    is recorded as such."""
    # 3 paced runs per transport: which subscriber connects first is a race, and one run could hide a
    # subscriber left without messages
    repeats, count, burst = r.scale(3, 2), r.scale(500, 200), r.scale(200_000, 50_000)
    figures: dict[str, Any] = {
        "paced": {t: [] for t in TRANSPORTS},
        "unpaced": {},
        "repeats": repeats,
    }
    measured: list[str] = []
    for transport in TRANSPORTS:
        for i in range(repeats):
            cell = _fanout_run(r, f"{transport}-paced-{i + 1}", transport, rate=1000, count=count)
            figures["paced"][transport].append(cell)
            measured.append(f"{transport}, paced 1,000 msg/s, run {i + 1}: {_fanout_text(cell)}")
        cell = _fanout_run(r, f"{transport}-unpaced", transport, rate=0, count=burst)
        figures["unpaced"][transport] = cell
        measured.append(f"{transport}, unpaced: {_fanout_text(cell)}")
    return Outcome([_u4_verdict(figures)], measured, figures)


def _fanout_run(
    r: ScenarioRunner, variant: str, transport: str, rate: int, count: int
) -> dict[str, Any]:
    try:
        res = r.run(
            variant,
            pattern="pub-sub",
            transport=transport,
            conflate="producers",
            consumers=U4_SUBSCRIBERS,
            rate=rate,
            count=count,
            drain_timeout_ms=300,
            close_order="after-drain",
        )
    except RunError as exc:  # the warm-up: not every subscriber heard the PUB
        return {
            "warmup_failed": True,
            "error": str(exc),
            "received": [],
            "foreign": [],
            "getting": 0,
        }
    f = facts(res)
    received = [int(c.get("received", 0)) for c in res.consumers]
    foreign = [int(c.get("foreign", 0)) for c in res.consumers]
    return {
        "warmup_failed": False,
        "received": received,
        "foreign": foreign,
        "sent": f["sent"],
        "getting": sum(1 for n in received if n > 0),
        "facts": f,
    }


def _fanout_text(c: dict[str, Any]) -> str:
    if c["warmup_failed"]:
        return f"the warm-up never completed: {c['error']}"
    per = ", ".join(f"{n:,}" for n in c["received"])
    return (
        f"{c['getting']} of {U4_SUBSCRIBERS} subscribers got messages ({per} of {c['sent']:,} each), frames "
        f"shorter than the header {sum(c['foreign']):,}; {fates_line(c['facts'])}"
    )


def _u4_verdict(figures: dict[str, Any]) -> Verdict:
    paced, unpaced, n = figures["paced"], figures["unpaced"], figures["repeats"]
    held = {
        t: sum(1 for c in cells if c["warmup_failed"] or c["getting"] <= 1)
        for t, cells in paced.items()
    }
    complete = {
        t: sum(
            1
            for c in cells
            if not c["warmup_failed"] and all(x == c["sent"] for x in c["received"])
        )
        for t, cells in paced.items()
    }
    short = sum(sum(c["foreign"]) for cells in paced.values() for c in cells) + sum(
        sum(c["foreign"]) for c in unpaced.values()
    )
    measurements = {
        "runs_only_one_subscriber": held,
        "runs_every_subscriber_every_message": complete,
        "repeats": n,
        "short_frames": short,
        "unpaced_received": {t: c["received"] for t, c in unpaced.items()},
        "unpaced_getting": {t: c["getting"] for t, c in unpaced.items()},
    }
    libzmq = _libzmq()
    unpaced_text = "; unpaced (the PUB conflating): " + ", ".join(
        f"{t} {c['getting']} of {U4_SUBSCRIBERS} got messages ({', '.join(f'{x:,}' for x in c['received'])} of "
        f"{c.get('sent', 0):,})"
        for t, c in unpaced.items()
    )
    if all(k == n for k in held.values()) and all(c["getting"] <= 1 for c in unpaced.values()):
        return Verdict(
            "U-4",
            HOLDS,
            "only one subscriber got messages in "
            + ", ".join(f"{_spread(k, n)} runs over {t}" for t, k in held.items())
            + f" (libzmq {libzmq})"
            + unpaced_text,
            measurements,
        )
    if not any(held.values()) and all(c["getting"] == U4_SUBSCRIBERS for c in unpaced.values()):
        counts = [x for cells in paced.values() for c in cells for x in c["received"]]
        sent = max((c["sent"] for cells in paced.values() for c in cells), default=0)
        return Verdict(
            "U-4",
            DOES_NOT_HOLD,
            f"libzmq {libzmq}: all {U4_SUBSCRIBERS} subscribers got messages at "
            "1,000 msg/s in "
            + ", ".join(f"{_spread(n - k, n)} runs over {t}" for t, k in held.items())
            + f" (each {min(counts):,}-{max(counts):,} of {sent:,}; every message to every subscriber in "
            + ", ".join(f"{_spread(k, n)} over {t}" for t, k in complete.items())
            + ", the rest conflated away by the PUB)"
            + f", {short:,} frames shorter than the header"
            + unpaced_text,
            measurements,
        )
    condition = "; ".join(f"holds in {_spread(k, n)} runs over {t}" for t, k in held.items())
    return Verdict(
        "U-4",
        depends(f"on the run: {condition}"),
        f"libzmq {libzmq}: " + condition + unpaced_text,
        measurements,
    )


# ---------------------------------------------------------------------------- U-5
FLAT_KB = 64  # "flat": RSS grew at most this much from the first quarter of the sends to the end
# (measured: a non-conflating or ZMQ_EVENTS-polling SUB 0-20 kB, page granularity)
U5_RATE = (
    200_000  # msg/s the PUB is paced at (64 B; 16 KiB at a tenth): the SUB's I/O thread keeps up
)
SUB_CHILD = r"""
import sys, time
from zmqload import _engine
endpoint, conflate, events_s, life_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
ctx = _engine.Context()
sub = _engine.Socket(ctx, _engine.SOCKET_TYPES["SUB"])
sub.set_option(_engine.SOCKET_OPTION_IDS["LINGER"], 0)
if conflate:
    sub.set_option(_engine.SOCKET_OPTION_IDS["CONFLATE"], 1)
sub.subscribe(b"")
sub.connect(endpoint)
if sub.recv_bytes(int(life_s * 1000)) is None:
    sys.exit(1)
print("subscribed", flush=True)
end = time.monotonic() + life_s        # from here on it reads nothing
while time.monotonic() < end:
    if events_s:
        sub.get_option(_engine.SOCKET_OPTION_IDS["EVENTS"])
    time.sleep(events_s or 0.05)
"""
U5_KINDS = (("plain", 0, 0.0), ("conflate", 1, 0.0), ("conflate-events", 1, 0.05))


def _vm_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def _idle_sub_memory(
    transport: str, size: int, n: int, rate: int, conflate: int, events_s: float
) -> dict[str, Any]:
    """A SUB process (engine, libzmq of zmqload) that reads nothing once subscribed, and a PUB here
    sending n messages of `size` bytes at `rate`: the SUB's VmRSS growth from before the first send,
    sampled at each fifth of the sends and for 1 s after the last."""
    ctx = _engine.Context()
    pub = _engine.Socket(ctx, _engine.SOCKET_TYPES["PUB"])
    pub.set_option(_engine.SOCKET_OPTION_IDS["LINGER"], 0)
    child: Optional[subprocess.Popen[str]] = None
    try:
        endpoint = pub.bind(_endpoint(transport, "u5"))
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                SUB_CHILD,
                endpoint,
                str(conflate),
                str(events_s),
                str(PROBE_DEADLINE_S * 3),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        deadline = time.monotonic() + PROBE_DEADLINE_S
        while not select.select([child.stdout], [], [], 0.01)[0] and time.monotonic() < deadline:
            pub.send_bytes(b"P")
        if child.stdout.readline().strip() != "subscribed":
            return {"subscribed": False}
        time.sleep(0.3)
        base = _vm_rss_kb(child.pid)
        body, growth = b"x" * size, []
        start = time.monotonic()
        for i in range(n):
            if i % 1000 == 0:
                time.sleep(max(0.0, start + i / rate - time.monotonic()))
            if i % (n // 5) == 0 and i:
                growth.append(_vm_rss_kb(child.pid) - base)
            pub.send_bytes(body)
        sending_s = time.monotonic() - start
        for _ in range(5):
            time.sleep(0.2)
            growth.append(_vm_rss_kb(child.pid) - base)
        late = growth[-1] - growth[0]
        return {
            "subscribed": True,
            "transport": transport,
            "size": size,
            "sent": n,
            "base_kb": base,
            "growth_kb": growth,
            "grew_kb": growth[-1],
            "late_growth_kb": late,
            "flat": late <= FLAT_KB,
            "bytes_per_message": round(growth[-1] * 1024 / n, 1),
            "sending_s": round(sending_s, 2),
        }
    finally:
        if child is not None:
            child.kill()
            child.wait(5)
        pub.close(0)
        ctx.term()


def conflate_memory(r: ScenarioRunner) -> Outcome:
    """U-5: per message size (64 B, 16 KiB), a SUB that stops reading once subscribed: plain (RCVHWM
    1000), with CONFLATE, and with CONFLATE while it polls ZMQ_EVENTS every 50 ms (libzmq's doc's
    advice); repeated. Then zmqload runs of a SUB reading 20 messages a second, conflating or not,
    for the fates and the consumer's peak RSS."""
    repeats = (
        2  # twice per cell: a SUB's growth is steady (1 MB and more, or flat), a repeat confirms it
    )
    # 500,000 of 64 B: a SUB that grows gains ~1 kB per 1,000 (8x FLAT_KB by the end), a flat one nothing
    plan = r.scale(
        ((64, 500_000, U5_RATE), (16384, 40_000, U5_RATE // 10)),
        ((64, 300_000, U5_RATE), (16384, 10_000, U5_RATE // 10)),
    )
    figures: dict[str, Any] = {"idle": {}, "runs": {}, "repeats": repeats}
    measured: list[str] = []
    for size, n, rate in plan:
        for kind, conflate, events_s in U5_KINDS:
            cells = [
                _idle_sub_memory("tcp", size, n, rate, conflate, events_s) for _ in range(repeats)
            ]
            figures["idle"][f"{size}/{kind}"] = cells
            for i, c in enumerate(cells):
                measured.append(
                    f"tcp, {size:,} B, {n:,} messages at {rate:,} msg/s to a SUB ({_kind(kind)}) that "
                    f"does not read, run {i + 1}: " + _memory_text(c)
                )
    count, run_size = r.scale(20_000, 5_000), 16384
    for mode in ("consumers", "off"):
        res = r.run(
            f"slow-reader-conflate-{mode}",
            pattern="pub-sub",
            transport="tcp",
            size=run_size,
            rate=10_000,
            count=count,
            consumer_delay_us=50_000,
            conflate=mode,
            drain_timeout_ms=300,
            close_order="after-drain",
        )
        f = facts(res)
        figures["runs"][mode] = f
        measured.append(
            f"zmqload run, {run_size:,} B at 10,000 msg/s to a SUB reading 20 a second, --conflate "
            f"{mode}: {fates_line(f)}; consumer peak RSS {f['consumer_rss_kb'] / 1024:,.1f} MiB"
        )
    return Outcome([_u5_verdict(figures)], measured, figures)


def _kind(kind: str) -> str:
    return {
        "plain": "no CONFLATE, RCVHWM 1000",
        "conflate": "CONFLATE",
        "conflate-events": "CONFLATE, polling ZMQ_EVENTS every 50 ms",
    }[kind]


def _memory_text(c: dict[str, Any]) -> str:
    if not c.get("subscribed"):
        return "the SUB never subscribed"
    return (
        f"RSS +{c['grew_kb']:,} kB ({', '.join(str(g) for g in c['growth_kb'])} kB at each fifth of the sends "
        f"and each 0.2 s after), +{c['late_growth_kb']:,} kB after the first fifth -> "
        + ("flat" if c["flat"] else f"grows (~{c['bytes_per_message']:g} B per message sent)")
    )


def _u5_verdict(figures: dict[str, Any]) -> Verdict:
    idle, n = figures["idle"], figures["repeats"]
    flat = {key: sum(1 for c in cells if c.get("flat")) for key, cells in idle.items()}
    grew = {
        key: [c["late_growth_kb"] for c in cells if c.get("subscribed")]
        for key, cells in idle.items()
    }
    runs = figures["runs"]
    measurements = {
        "flat_runs": flat,
        "late_growth_kb": grew,
        "repeats": n,
        "total_growth_kb": {k: [c.get("grew_kb") for c in cells] for k, cells in idle.items()},
        "slow_reader_rss_kb": {k: f["consumer_rss_kb"] for k, f in runs.items()},
        "slow_reader_dropped_mid": {k: f["dropped_mid"] for k, f in runs.items()},
    }
    conflating = [k for k in idle if k.endswith("/conflate")]
    sizes = [k.split("/")[0] for k in conflating]

    def rng(key: str) -> str:
        g = grew[key]
        return (
            f"+{min(g):,}-{max(g):,} kB"
            if g and min(g) != max(g)
            else f"+{g[0]:,} kB"
            if g
            else "?"
        )

    because = f"libzmq {_libzmq()}, " + "; ".join(
        f"{int(s):,} B: CONFLATE SUB not reading {rng(f'{s}/conflate')} after the first fifth of "
        f"{idle[f'{s}/conflate'][0].get('sent', 0):,} messages (flat in {_spread(flat[f'{s}/conflate'], n)} runs, "
        f"+{max(c.get('grew_kb', 0) for c in idle[f'{s}/conflate']):,} kB in all), plain SUB {rng(f'{s}/plain')} "
        f"(+{max(c.get('grew_kb', 0) for c in idle[f'{s}/plain']):,} kB in all: its RCVHWM's worth), CONFLATE "
        f"polling ZMQ_EVENTS {rng(f'{s}/conflate-events')}"
        for s in sizes
    )
    if runs:
        because += (
            "; zmqload, a SUB reading 20/s, 16 KiB: conflating peak RSS "
            f"{runs['consumers']['consumer_rss_kb'] / 1024:,.1f} MiB with {runs['consumers']['dropped_mid']:,} "
            f"conflated away (dropped mid-run), not conflating {runs['off']['consumer_rss_kb'] / 1024:,.1f} MiB"
        )
    if all(flat[k] == n for k in conflating):
        return Verdict("U-5", HOLDS, because, measurements)
    if not any(flat[k] for k in conflating):
        return Verdict(
            "U-5",
            DOES_NOT_HOLD,
            "its memory keeps growing with every batch received while it does not "
            "read (the old messages are freed, the wake-up commands to the socket are not: polling "
            "ZMQ_EVENTS processes them); " + because,
            measurements,
        )
    return Verdict(
        "U-5",
        depends(
            "on the run: flat in "
            + ", ".join(
                f"{_spread(flat[k], n)} runs at {int(k.split('/')[0]):,} B" for k in conflating
            )
        ),
        because,
        measurements,
    )


# ---------------------------------------------------------------------------- U-7
OFTEN = 0.10  # "often": lost in at least a tenth of the trials
U7_LINGER_MS = 10_000
U7_WAIT_MS = 1000  # how long the PULL waits for a trial's message
U7_KINDS = (("shared", False), ("own-context", False), ("shared-immediate", True))


def _push_trials(transport: str, kind: str, immediate: bool, trials: int) -> dict[str, Any]:
    """`trials` times: a fresh PUSH connects to a PULL bound here, sends one message with DONTWAIT,
    closes at once with LINGER 10000 (shared: its context lives on, as the report's singleton;
    own-context: its own context terminated right after the close), and the PULL waits up to 1 s
    for it."""
    pull_ctx, shared = _engine.Context(), _engine.Context()
    pull = _engine.Socket(pull_ctx, _engine.SOCKET_TYPES["PULL"])
    pull.set_option(_engine.SOCKET_OPTION_IDS["LINGER"], 0)
    counts: dict[str, Any] = {
        "trials": trials,
        "accepted": 0,
        "eagain": 0,
        "arrived": 0,
        "lost": 0,
        "lost_trials": [],
        "close_ms_max": 0.0,
        "term_ms_max": 0.0,
    }
    try:
        endpoint = pull.bind(_endpoint(transport, "u7"))
        for trial in range(trials):
            ctx = shared if kind.startswith("shared") else _engine.Context()
            push = _engine.Socket(ctx, _engine.SOCKET_TYPES["PUSH"])
            push.set_option(_engine.SOCKET_OPTION_IDS["LINGER"], U7_LINGER_MS)
            if immediate:
                push.set_option(_engine.SOCKET_OPTION_IDS["IMMEDIATE"], 1)
            push.connect(endpoint)
            message = b"trial-%06d" % trial
            accepted = push.send_bytes(message, dontwait=True)
            counts["close_ms_max"] = max(counts["close_ms_max"], push.close() / 1e6)
            if ctx is not shared:
                t = time.monotonic()
                ctx.term()
                counts["term_ms_max"] = max(counts["term_ms_max"], (time.monotonic() - t) * 1000)
            if not accepted:
                counts["eagain"] += 1
                continue
            counts["accepted"] += 1
            got = False
            deadline = time.monotonic() + U7_WAIT_MS / 1000
            while time.monotonic() < deadline:
                m = pull.recv_bytes(max(1, int((deadline - time.monotonic()) * 1000)))
                if m == message:
                    got = True
                    break
            counts["arrived" if got else "lost"] += 1
            if not got:
                counts["lost_trials"].append(trial)
        counts["close_ms_max"] = round(counts["close_ms_max"], 2)
        counts["term_ms_max"] = round(counts["term_ms_max"], 2)
        return counts
    finally:
        pull.close(0)
        pull_ctx.term()
        shared.term()  # every PUSH of it is closed; their linger ends once delivered (or 10 s)


def short_lived_push(r: ScenarioRunner) -> Outcome:
    """U-7: the report's sender, `trials` times per transport: with the context living on (the
    report's), with a context of its own terminated at once, and, as a control, with ZMQ_IMMEDIATE
    (no queue before the connection is made)."""
    trials = r.scale(100, 30)  # "often loses": a loss in a tenth of the trials (OFTEN) must be seen
    figures: dict[str, Any] = {"trials": trials, "cells": {}}
    measured: list[str] = []
    for transport in TRANSPORTS:
        for kind, immediate in U7_KINDS:
            c = _push_trials(transport, kind, immediate, trials)
            figures["cells"][f"{transport}/{kind}"] = c
            measured.append(
                f"{transport}, {_push_kind(kind)}: {c['accepted']} of {trials} accepted by the DONTWAIT "
                f"send ({c['eagain']} EAGAIN), {c['arrived']} arrived, {c['lost']} lost; close took up to "
                f"{c['close_ms_max']} ms"
                + (f", term {c['term_ms_max']} ms" if kind == "own-context" else "")
            )
    return Outcome([_u7_verdict(figures)], measured, figures)


def _push_kind(kind: str) -> str:
    return {
        "shared": "context living on (the report's)",
        "own-context": "its own context, terminated at once",
        "shared-immediate": "context living on, ZMQ_IMMEDIATE 1 (control)",
    }[kind]


def _u7_verdict(figures: dict[str, Any]) -> Verdict:
    cells, n = figures["cells"], figures["trials"]
    claim = {
        k: c for k, c in cells.items() if not k.endswith("immediate")
    }  # the report's setup: no IMMEDIATE
    share = {k: c["lost"] / max(1, c["accepted"]) for k, c in claim.items()}
    measurements = {
        "lost": {k: c["lost"] for k, c in cells.items()},
        "accepted": {k: c["accepted"] for k, c in cells.items()},
        "eagain": {k: c["eagain"] for k, c in cells.items()},
        "trials": n,
        "lost_share": share,
    }
    text = "; ".join(
        f"{k}: lost {_spread(c['lost'], c['accepted'])} sent" for k, c in claim.items()
    )
    control = "; ".join(
        f"control {k}: {c['eagain']} of {n} refused by the DONTWAIT send (EAGAIN), {c['lost']} lost"
        for k, c in cells.items()
        if k.endswith("immediate")
    )
    because = f"{text}; {control}" if control else text
    if all(s >= OFTEN for s in share.values()):
        return Verdict("U-7", HOLDS, because, measurements)
    if not any(c["lost"] for c in claim.values()):
        return Verdict(
            "U-7", DOES_NOT_HOLD, f"on Linux, libzmq {_libzmq()}: " + because, measurements
        )
    often = [k for k, s in share.items() if s >= OFTEN]
    some = [k for k, s in share.items() if 0 < s < OFTEN]
    parts = ([f"often with {', '.join(often)}"] if often else []) + [
        f"lost in {_spread(claim[k]['lost'], claim[k]['accepted'])} trials with {k}" for k in some
    ]
    return Verdict("U-7", depends("on the setup: " + "; ".join(parts)), because, measurements)


SCENARIOS = (
    Scenario(
        "conflate-fanout",
        "ZMQ_CONFLATE on a PUB with 3 subscribers, tcp and ipc, paced and unpaced, repeated "
        "(libzmq #3323)",
        ("U-4",),
        conflate_fanout,
        expected_s=18,
    ),
    Scenario(
        "conflate-memory",
        "The memory of a SUB that does not read, with and without ZMQ_CONFLATE, 64 B and "
        "16 KiB, and of a conflating SUB that reads slowly (libzmq #3171)",
        ("U-5",),
        conflate_memory,
        expected_s=52,
    ),
    Scenario(
        "short-lived-push",
        "A PUSH that connects, sends one message with DONTWAIT and closes at once with "
        "LINGER 10000, repeated, tcp and ipc (libzmq #3774)",
        ("U-7",),
        short_lived_push,
        expected_s=1,
    ),
)
