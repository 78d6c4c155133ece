"""Claims of the blog post on HWM "not dropping" behind a proxy (001)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, cast

from ..contract.fates import TAIL_MID_RUN
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
    ms,
    scratch_dir,
)

if TYPE_CHECKING:
    import ctypes


def _drops_by_place(f: dict[str, Any]) -> str:
    """'N dropped: M during the run, K at close (LINGER 0)': a close with LINGER 0 discards
    what is queued whatever the socket type, which is not a drop at the HWM."""
    during, at_close = f["dropped_mid"] + f["dropped_start"], f["dropped_tail"]
    return f"{during + at_close:,} dropped: {during:,} during the run, {at_close:,} at close (LINGER 0)"


def hwm_behaviour(r: ScenarioRunner) -> Outcome:
    """Drop or block at HWM: a stalled consumer, blocking sends with SNDTIMEO (a send that
    cannot complete in time blocks) and DONTWAIT sends (EAGAIN or not)."""
    count, timeout_ms = r.scale(20_000, 10_000), 50
    tight = dict(
        size=1024,
        count=count,
        sndhwm=1,
        rcvhwm=1,
        sndbuf=4096,
        rcvbuf=4096,
        consumer_delay_us=r.scale(100_000, 50_000),
        duration=r.scale(3.0, 1.5),
        drain_timeout_ms=200,
        linger_ms=0,
        # senders close once the drain is over, so a drop is placed at the HWM, during
        # the run, never confused with a discard at close (the claim is about the HWM)
        close_order="after-drain",
    )
    figures: dict[str, dict[str, Any]]
    measured, figures, found = [], {}, {}
    for pattern, socket in (("push-pull", "PUSH"), ("dealer-router", "DEALER"), ("pub-sub", "PUB")):
        blocking = r.run(
            f"{pattern}-timeout",
            pattern=pattern,
            transport="tcp",
            send_mode="timeout",
            sndtimeo_ms=timeout_ms,
            **tight,
        )
        nowait = r.run(
            f"{pattern}-dontwait", pattern=pattern, transport="tcp", send_mode="dontwait", **tight
        )
        fb, fn = facts(blocking), facts(nowait)
        blocks = blocking.timeout > 0
        drops = blocking.dropped_mid + blocking.dropped_tail > 0 and not blocks
        found[socket] = "blocks" if blocks else "drops" if drops else "neither (queues had room)"
        figures[pattern] = {
            "timeouts": blocking.timeout,
            "dropped_blocking": blocking.dropped,
            "eagain": nowait.eagain,
            "attempted_dontwait": nowait.attempted,
            "dropped_dontwait": nowait.dropped,
            "behaviour": found[socket],
            "blocking": fb,
            "dontwait": fn,
        }
        measured.append(
            f"{socket}: blocking send, SNDTIMEO {timeout_ms} ms -> {blocking.timeout:,} timed out, "
            f"{fates_line(fb)}; DONTWAIT -> EAGAIN on {nowait.eagain:,} of {nowait.attempted:,}, "
            f"{fates_line(fn)}"
        )
    claimed = {"PUSH": "drops", "PUB": "drops", "DEALER": "blocks"}
    wrong = [s for s, b in claimed.items() if found[s] != b]
    v2 = Verdict(
        "001-2",
        DOES_NOT_HOLD if wrong else HOLDS,
        "; ".join(
            f"{s} {found[s]} ({figures[p]['timeouts']:,} sends timed out, "
            f"{_drops_by_place(figures[p]['blocking'])}; claimed: {claimed[s]})"
            for p, s in (("push-pull", "PUSH"), ("pub-sub", "PUB"), ("dealer-router", "DEALER"))
        ),
        {"measured": found, "claimed": claimed},
    )
    pub = figures["pub-sub"]
    v4 = Verdict(
        "001-4",
        DOES_NOT_HOLD if pub["eagain"] == 0 else HOLDS,
        f"PUB with DONTWAIT at HWM 1: EAGAIN on {pub['eagain']:,} of {pub['attempted_dontwait']:,} sends, "
        f"while {pub['dropped_dontwait']:,} accepted messages were dropped silently",
        {},
    )
    push = figures["push-pull"]
    v24 = Verdict(
        "002-4",
        depends(
            "on the socket type: PUSH/DEALER block (EAGAIN with DONTWAIT), PUB neither "
            "blocks nor errors, it drops"
        ),
        f"PUSH: {push['timeouts']:,} sends timed out, EAGAIN {push['eagain']:,}; PUB: "
        f"{pub['timeouts']:,} timeouts, {pub['eagain']:,} EAGAIN, {pub['dropped_blocking']:,} dropped",
        {},
    )
    return Outcome([v2, v4, v24], measured, figures)


WAIT_BOUND = (
    4 * 100
)  # what may wait between PUB and SUB if the claim held: the chain's four pipes (PUB,
# XSUB, XPUB, SUB) at 100 each; the kernel buffers, which no HWM counts, come on top


def proxy_pileup(r: ScenarioRunner) -> Outcome:
    """The post's own faulty and fixed code (seed_001_post: sleep-paced, 100 msg/s, SUB at 1 s
    per message, through pyzmq), then zmqload's PUB -> XSUB | proxy | XPUB -> slow SUB at load
    (256 B at 20,000 msg/s) with SNDHWM 100 on the PUB, then on the proxy's XPUB too: where
    do messages wait, and do drops appear."""
    from .seed_001_post import VARIANTS, run_both

    post = run_both(r.scale(1000, 600))  # 600: the backlog outgrows WAIT_BOUND if nothing bounds it
    measured: list[str] = []
    figures: dict[str, Any] = {"post": post, "wait_bound": WAIT_BOUND}
    for v in VARIANTS:
        p = post[v]
        measured.append(
            f"the post's {v} code (PUB SNDHWM {p['pub_sndhwm']}, XPUB SNDHWM {p['xpub_sndhwm']}, "
            f"{p['messages']:,} messages at 100 msg/s, SUB 1 s/message): sent {p['sent']:,}, "
            f'"Dropped" (EAGAIN) {p["eagain"]:,}; received while publishing {p["received_during"]:,}, '
            f"{p['waiting_at_end']:,} waiting when the publisher finished ({p['kernel_bytes_at_end']:,} B "
            f"in kernel buffers, the rest in libzmq pipes; the SUB's RCVHWM is {p['sub_rcvhwm']:,}), "
            f"of them "
            f"drained afterwards {p['drained']:,}; lost before the "
            f"subscription arrived {p['lost_before_subscription']:,}, after it "
            f"{p['lost_after_subscription']:,}; RSS +{p['rss_growth_kb']:,} kB"
        )
    rate, duration = r.scale(20_000, 10_000), r.scale(2.0, 0.5)
    for variant, extra in (("pub-only", {}), ("pub-and-proxy", {"proxy_sndhwm": 100})):
        res = r.run(
            variant,
            pattern="proxy",
            transport="tcp",
            size=256,
            rate=rate,
            duration=duration,
            sndhwm=100,
            consumer_delay_us=200,
            drain_timeout_ms=500,
            **extra,
        )
        f = facts(res)
        figures[variant] = f
        peak = f["queue_peak"]
        measured.append(
            f"zmqload, SNDHWM=100 on {variant.replace('-', ' ')}, {rate:,} msg/s x 256 B: "
            f"{fates_line(f)}; queue peak {peak.get('messages', 0):,} messages "
            f"({peak.get('kernel_messages', 0):,} in kernel buffers, {peak.get('libzmq_messages', 0):,} "
            f"in libzmq pipes); p99 latency {ms(res.latency_summary()['p99'])}"
        )
    return Outcome([_verdict_001_5(figures, rate)], measured, figures)


def _verdict_001_5(figures: dict[str, Any], rate: int) -> Verdict:
    """Two parts, each judged in the post's own setup and at load: what waits stays within
    WAIT_BOUND, and drops appear (EAGAIN or messages lost after the subscription)."""
    fixed, faulty, load = (
        figures["post"]["fixed"],
        figures["post"]["faulty"],
        figures["pub-and-proxy"],
    )
    load_peak = load["queue_peak"].get("messages", 0)
    load_drops = load["dropped_mid"] + load["dropped_tail"]
    bounded_post = fixed["waiting_at_end"] <= WAIT_BOUND
    drops_post = fixed["eagain"] + fixed["lost_after_subscription"] > 0
    bounded_load, drops_load = load_peak <= WAIT_BOUND, load_drops > 0
    post_text = (
        f'the post\'s fixed code: {fixed["eagain"]:,} "Dropped", {fixed["lost_after_subscription"]:,} lost '
        f"after the subscription, {fixed['waiting_at_end']:,} of {fixed['sent']:,} waiting when it finished "
        f"(the faulty code: {faulty['eagain']:,}, {faulty['lost_after_subscription']:,}, "
        f"{faulty['waiting_at_end']:,})"
    )
    load_text = (
        f"zmqload at {rate:,} msg/s with PUB and XPUB at 100: up to {load_peak:,} waited "
        f"({load['queue_peak'].get('kernel_messages', 0):,} in kernel buffers), {load_drops:,} dropped"
    )
    if bounded_post and drops_post and bounded_load and drops_load:
        verdict = HOLDS
    elif not bounded_post and not bounded_load:
        verdict = DOES_NOT_HOLD  # the bound fails everywhere: the claim's core
    else:
        holds_at = [
            name
            for name, ok in (
                ("at the post's 100 msg/s", bounded_post and drops_post),
                (f"at {rate:,} msg/s", bounded_load and drops_load),
            )
            if ok
        ]
        verdict = depends(
            f"on the rate: bounded with drops {' and '.join(holds_at) or 'nowhere'}; what waits "
            f"{'stays' if bounded_post else 'does not stay'} within {WAIT_BOUND} at 100 msg/s, "
            f"{'stays' if bounded_load else 'does not stay'} at {rate:,} msg/s"
        )
    return Verdict(
        "001-5",
        verdict,
        f"{post_text}; {load_text}",
        {
            "wait_bound": WAIT_BOUND,
            "bounded_post": bounded_post,
            "drops_post": drops_post,
            "bounded_load": bounded_load,
            "drops_load": drops_load,
        },
    )


# --- measured through the libraries themselves: headers, the engine, pyzmq ------------------------------------


def zmq_header_path() -> Optional[str]:
    """The system's libzmq header, zmq.h (from `pkg-config libzmq`, else /usr/include); None
    where libzmq's headers are not installed."""
    import os
    import subprocess

    for args in (["--cflags-only-I"], ["--variable=includedir"]):
        try:
            out = subprocess.run(
                ["pkg-config", *args, "libzmq"], capture_output=True, text=True, timeout=10
            ).stdout.split()
        except (OSError, subprocess.TimeoutExpired):
            continue
        for word in out:
            path = os.path.join(word[2:] if word.startswith("-I") else word, "zmq.h")
            if os.path.exists(path):
                return path
    path = "/usr/include/zmq.h"
    return path if os.path.exists(path) else None


def zmq_header() -> dict[str, Any]:
    """The system's libzmq header (zmq_header_path): every `#define ZMQ_*` with its value, the
    names that only exist under ZMQ_BUILD_DRAFT_API, and its version."""
    import re

    path = zmq_header_path()
    assert path is not None, "scenario run refuses the scenarios that read zmq.h without it"
    defines, draft, in_draft = {}, set(), []
    with open(path) as f:
        for line in f:
            s = line.strip()
            if s.startswith("#if"):
                in_draft.append("ZMQ_BUILD_DRAFT_API" in s)
            elif s.startswith("#endif") and in_draft:
                in_draft.pop()
            m = re.match(r"#define\s+(ZMQ_\w+)\s+(0x[0-9A-Fa-f]+|\d+)\b", s)
            if m:
                defines[m.group(1)] = int(m.group(2), 0)
                if any(in_draft):
                    draft.add(m.group(1))
    version = ".".join(
        str(defines.get(f"ZMQ_VERSION_{part}", "?")) for part in ("MAJOR", "MINOR", "PATCH")
    )
    return {"path": path, "defines": defines, "draft": sorted(draft), "version": version}


def engine_libzmq_path() -> str:
    """The libzmq file the engine runs in this process (--libzmq; pyzmq's where none was chosen)."""
    import os
    from .. import _engine

    _engine.libzmq_version()  # loads the default where the process chose none
    return os.path.realpath(_engine.libzmq_file() or "")


_counter = iter(range(10**9))


def inproc_name(tag: str) -> str:
    import os

    return f"inproc://zmqload-{tag}-{os.getpid()}-{next(_counter)}"


def engine_capacity(
    hwm: Optional[int] = None,
    when: str = "before",
    transport: str = "inproc",
    size: int = 64,
    frames: int = 1,
    limit: int = 200_000,
) -> dict[str, Any]:
    """Messages a PUSH accepts (DONTWAIT) towards a PULL that never reads, through the engine:
    `hwm` (None: libzmq's default) set as SNDHWM on the PUSH and RCVHWM on the PULL, before
    or after they connect. Sending stops at the first refusal still standing after 50 ms
    (the I/O thread had time to move what it could). `frames` > 1 sends each message as
    that many parts of `size` bytes."""
    import time
    from .. import _engine as E

    O, T = E.SOCKET_OPTION_IDS, E.SOCKET_TYPES
    ctx = E.Context(1)
    pull, push = E.Socket(ctx, T["PULL"]), E.Socket(ctx, T["PUSH"])
    for s in (pull, push):
        s.set_option(O["LINGER"], 0)

    def set_hwm() -> None:
        assert hwm is not None  # called only with an hwm to set
        push.set_option(O["SNDHWM"], hwm)
        pull.set_option(O["RCVHWM"], hwm)

    if hwm is not None and when == "before":
        set_hwm()
    tmp = scratch_dir("zmqload-cap-") if transport == "ipc" else None
    ep = pull.bind(
        {"inproc": inproc_name("cap"), "tcp": "tcp://127.0.0.1:0", "ipc": f"ipc://{tmp}/s"}[
            transport
        ]
    )
    push.connect(ep)
    time.sleep(0.1)
    if hwm is not None and when == "after":
        set_hwm()
    read_back = {"SNDHWM": push.get_option(O["SNDHWM"]), "RCVHWM": pull.get_option(O["RCVHWM"])}
    data = b"x" * size
    accepted, torn = 0, 0
    try:
        while accepted < limit:
            if not push.send_bytes(data, dontwait=True, more=frames > 1):
                time.sleep(0.05)
                if not push.send_bytes(data, dontwait=True, more=frames > 1):
                    break
            for k in range(1, frames):  # the rest of a multipart message
                if not push.send_bytes(data, dontwait=True, more=k < frames - 1):
                    torn += 1
                    break
            accepted += 1
    finally:
        push.close(0)
        pull.close(0)
        ctx.term()
        if tmp:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return {
        "transport": transport,
        "hwm": hwm,
        "when": when,
        "size": size,
        "frames": frames,
        "read_back": read_back,
        "accepted": accepted,
        "torn": torn,
    }


def pyzmq_defaults(
    options: tuple[str, ...] = ("SNDHWM", "RCVHWM"), types: list[str] | None = None
) -> dict[str, dict[str, int]]:
    """`options` of a fresh pyzmq socket of each of `types` (default: every type pyzmq knows),
    in pyzmq's bundled libzmq."""
    import zmq

    ctx = zmq.Context()
    out = {}
    try:
        for t in (zmq.SocketType[name] for name in types) if types else zmq.SocketType:
            try:
                s = ctx.socket(t)
            except zmq.ZMQError:  # draft-only types (SERVER, RADIO ...) without draft
                continue
            out[t.name] = {opt: int(s.getsockopt(getattr(zmq, opt))) for opt in options}
            s.close(0)
    finally:
        ctx.term()
    return out


def engine_defaults() -> dict[str, dict[str, int]]:
    """SNDHWM/RCVHWM of a fresh socket of every type zmq.h defines (ZMQ_PAIR .. ZMQ_STREAM)."""
    from .. import _engine as E

    header = zmq_header()["defines"]
    names = (
        "PAIR",
        "PUB",
        "SUB",
        "REQ",
        "REP",
        "DEALER",
        "ROUTER",
        "PULL",
        "PUSH",
        "XPUB",
        "XSUB",
        "STREAM",
    )
    ctx = E.Context(1)
    out = {}
    try:
        for name in names:
            s = E.Socket(ctx, header[f"ZMQ_{name}"])
            out[name] = {
                "SNDHWM": s.get_option(E.SOCKET_OPTION_IDS["SNDHWM"]),
                "RCVHWM": s.get_option(E.SOCKET_OPTION_IDS["RCVHWM"]),
            }
            s.close(0)
    finally:
        ctx.term()
    return out


def pyzmq_capacity(hwm: Optional[int] = None, when: str = "before", size: int = 64) -> int:
    """engine_capacity's inproc probe in pyzmq (its bundled libzmq), with the `hwm` property."""
    import time
    import zmq

    ctx = zmq.Context()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    try:
        for s in (pull, push):
            s.linger = 0
            if hwm is not None and when == "before":
                s.hwm = hwm
        ep = inproc_name("pycap")
        pull.bind(ep)
        push.connect(ep)
        time.sleep(0.1)
        if hwm is not None and when == "after":
            for s in (pull, push):
                s.hwm = hwm
        n = 0
        while n < 200_000:
            try:
                push.send(b"x" * size, zmq.DONTWAIT)
            except zmq.Again:
                break
            n += 1
        return n
    finally:
        push.close(0)
        pull.close(0)
        ctx.term()


def first_refused(run_dir: str) -> Optional[int]:
    """seq of the first send the producer's socket refused (EAGAIN / SNDTIMEO), or None."""
    from ..store.parquet_parts import read_parts

    t = read_parts(run_dir, "sends", ["seq", "status"])
    if t is None:
        return None
    seq, status = t.column("seq").to_numpy(), t.column("status").to_numpy()
    bad = seq[status != 0]
    return int(bad.min()) if len(bad) else None


# --- 001-1 -----------------------------------------------------------------------------------------------------


def hwm_defaults(r: ScenarioRunner) -> Outcome:
    """getsockopt(SNDHWM/RCVHWM) of a fresh socket of every type, in the engine's libzmq and in
    pyzmq's bundled one; and what the default lets queue: an inproc PUSH -> non-reading PULL
    (engine, pyzmq, and an ordinary zmqload run with DONTWAIT)."""
    import zmq
    from .. import _engine

    eng, py = engine_defaults(), pyzmq_defaults()
    eng_version, py_version = ".".join(map(str, _engine.libzmq_version())), zmq.zmq_version()
    cap_engine, cap_pyzmq = engine_capacity()["accepted"], pyzmq_capacity()
    count = r.scale(6000, 4000)
    res = r.run(
        "inproc-defaults-dontwait",
        pattern="push-pull",
        transport="inproc",
        size=64,
        count=count,
        send_mode="dontwait",
        consumer_delay_us=200_000,
        drain_timeout_ms=1000,
    )
    f = facts(res)
    refused_at = first_refused(res.run_dir)

    def values(d: dict[str, dict[str, int]]) -> list[int]:
        return sorted({v for hw in d.values() for v in hw.values()})

    measured = [
        f"libzmq {eng_version} (engine), {len(eng)} socket types: "
        + ", ".join(f"{s} {d['SNDHWM']}/{d['RCVHWM']}" for s, d in eng.items()),
        f"libzmq {py_version} (pyzmq {zmq.pyzmq_version()}), {len(py)} socket types: "
        + ", ".join(f"{s} {d['SNDHWM']}/{d['RCVHWM']}" for s, d in py.items()),
        f"default HWMs, inproc PUSH -> PULL that never reads: {cap_engine:,} messages accepted before "
        f"EAGAIN (engine), {cap_pyzmq:,} (pyzmq); zmqload run with DONTWAIT: first refusal at message "
        f"{refused_at}, {fates_line(f)}",
    ]
    figures = {
        "engine": eng,
        "pyzmq": py,
        "engine_libzmq": eng_version,
        "pyzmq_libzmq": py_version,
        "capacity_engine": cap_engine,
        "capacity_pyzmq": cap_pyzmq,
        "run_first_refused": refused_at,
        "run": f,
    }
    ev, pv = values(eng), values(py)
    per_type = {s for d in (eng, py) for s, hw in d.items() if set(hw.values()) != {1000}}
    if ev == pv == [1000]:
        verdict = HOLDS
    elif per_type and len(per_type) < len(eng):
        verdict = depends(f"on the socket type: {', '.join(sorted(per_type))} differ from 1000")
    else:
        verdict = DOES_NOT_HOLD
    because = (
        f"every socket type reads SNDHWM/RCVHWM {ev} on libzmq {eng_version} ({len(eng)} types) and {pv} on "
        f"{py_version} ({len(py)} types), not varying by type; a connected inproc pair queues "
        f"{cap_engine:,} (both ends' 1000)"
    )
    return Outcome(
        [
            Verdict(
                "001-1",
                verdict,
                because,
                {
                    "engine_values": ev,
                    "pyzmq_values": pv,
                    "capacity_engine": cap_engine,
                    "capacity_pyzmq": cap_pyzmq,
                    "run_first_refused": refused_at,
                },
            )
        ],
        measured,
        figures,
    )


# --- 001-3 -----------------------------------------------------------------------------------------------------


def rcvhwm_full(r: ScenarioRunner) -> Outcome:
    """A receiver whose RCVHWM (10) is full because it is slow (10 ms per message) while the
    sender sends 4 KiB messages at 10,000 msg/s: PUB/SUB and PUSH/PULL, the sender unlimited
    (SNDHWM 0) or at its default 1000 (PUSH blocking with SNDTIMEO). If the receiver
    discarded at its RCVHWM, the unlimited senders would lose all but ~RCVHWM. The senders
    close after the drain, so a message lost at close is not taken for one discarded during
    the run (issue 11: over ipc a PUSH closed at once lost 1 of 10,000 that way)."""
    rcvhwm = 10
    transports = r.scale(("tcp", "ipc"), ("tcp",))
    rate, duration = 10_000, r.scale(1.0, 0.5)
    figures: dict[str, dict[str, Any]]
    measured, figures = [], {}
    for transport in transports:
        for pattern, sender in (("pub-sub", "PUB"), ("push-pull", "PUSH")):
            for sndhwm in (0, None):
                mode = "timeout" if pattern == "push-pull" and sndhwm is None else "block"
                res = r.run(
                    f"{transport}-{pattern}-sndhwm-{sndhwm if sndhwm is not None else 'default'}",
                    pattern=pattern,
                    transport=transport,
                    size=4096,
                    rate=rate,
                    duration=duration,
                    sndhwm=sndhwm,
                    rcvhwm=rcvhwm,
                    consumer_delay_us=10_000,
                    send_mode=mode,
                    sndtimeo_ms=100,
                    drain_timeout_ms=300,
                    close_order="after-drain",
                )
                f = facts(res)
                key = f"{transport}/{sender}/sndhwm={sndhwm if sndhwm is not None else 'default'}"
                figures[key] = f
                peak = f["queue_peak"]
                f["scheduled"] = int(rate * duration)
                measured.append(
                    f"{key}, RCVHWM {rcvhwm}: {fates_line(f)}; {f['attempted']:,} of "
                    f"{f['scheduled']:,} scheduled sends attempted, {f['timeouts']:,} timed out; "
                    f"queue peak {peak.get('messages', 0):,} ({peak.get('kernel_messages', 0):,} in "
                    f"kernel buffers, {peak.get('libzmq_messages', 0):,} in libzmq pipes); RSS "
                    f"sender {f['producer_rss_kb'] / 1024:,.0f} MiB, receiver "
                    f"{f['consumer_rss_kb'] / 1024:,.0f} MiB"
                )
    unlimited = {k: f for k, f in figures.items() if k.endswith("sndhwm=0")}
    default = {k: f for k, f in figures.items() if k.endswith("sndhwm=default")}

    def dropped(f: dict[str, Any]) -> int:
        """Drops placed during the run: the tail too where the drain proved it mid-run."""
        placed_tail = f["dropped_tail"] if f["tail_placement"] == TAIL_MID_RUN else 0
        return cast(int, f["dropped_mid"] + f["dropped_start"] + placed_tail)

    unplaced = {
        k: f["dropped_tail"]
        for k, f in figures.items()
        if f["tail_placement"] != TAIL_MID_RUN and f["dropped_tail"]
    }
    lossy_unlimited = [k for k, f in unlimited.items() if dropped(f)]
    waited = [k for k, f in unlimited.items() if f["queue_peak"].get("messages", 0) > 10 * rcvhwm]
    pub_drops = {k: dropped(f) for k, f in default.items() if "/PUB/" in k}
    push_blocks = {
        k: (f["attempted"], f["scheduled"], f["timeouts"], dropped(f))
        for k, f in default.items()
        if "/PUSH/" in k
    }
    peaks = {k: f["queue_peak"].get("messages", 0) for k, f in figures.items()}
    mostly_gone = [k for k, f in unlimited.items() if dropped(f) > (f["sent"] - 10 * rcvhwm) * 0.5]
    if not lossy_unlimited and len(waited) == len(unlimited):
        verdict = DOES_NOT_HOLD
    elif mostly_gone and len(mostly_gone) == len(unlimited):
        verdict = HOLDS
    else:
        verdict = depends(
            f"on the transport/socket: an unlimited sender still lost messages in "
            f"{', '.join(lossy_unlimited) or 'none'}"
        )
    because = (
        "with RCVHWM 10 full and the sender unlimited: "
        + "; ".join(
            f"{k.rsplit('/', 1)[0]} {dropped(f):,} dropped of {f['sent']:,}, up to {peaks[k]:,} "
            f"waited, sender RSS {f['producer_rss_kb'] / 1024:,.0f} MiB"
            for k, f in unlimited.items()
        )
        + "; with the sender's default SNDHWM the PUB dropped "
        + ", ".join(f"{v:,}" for v in pub_drops.values())
        + " (at the sender), the PUSH blocked ("
        + ", ".join(
            f"{a:,} of {n:,} scheduled sends attempted, {t:,} timeouts, {d:,} dropped"
            for a, n, t, d in push_blocks.values()
        )
        + ")"
        + (
            "; not counted, lost after the last arrival where the drain could not place them: "
            + ", ".join(f"{k} {n:,}" for k, n in unplaced.items())
            if unplaced
            else ""
        )
    )
    return Outcome(
        [
            Verdict(
                "001-3",
                verdict,
                because,
                {
                    "dropped_with_unlimited_sender": {k: dropped(f) for k, f in unlimited.items()},
                    "queue_peak": peaks,
                    "pub_default_dropped": pub_drops,
                    "push_default_timeouts_dropped": push_blocks,
                },
            )
        ],
        measured,
        figures,
    )


# --- 001-6 -----------------------------------------------------------------------------------------------------


def _engine_lib() -> ctypes.CDLL:
    """The engine's own libzmq through ctypes (the engine wraps no monitor call): same file,
    same version as `_engine.libzmq_version()`."""
    import ctypes

    lib = ctypes.CDLL(engine_libzmq_path())
    vp, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    for name, res, args in (
        ("zmq_ctx_new", vp, []),
        ("zmq_ctx_term", i, [vp]),
        ("zmq_socket", vp, [vp, i]),
        ("zmq_close", i, [vp]),
        ("zmq_setsockopt", i, [vp, i, vp, sz]),
        ("zmq_socket_monitor", i, [vp, ctypes.c_char_p, i]),
        ("zmq_connect", i, [vp, ctypes.c_char_p]),
        ("zmq_send", i, [vp, vp, sz, i]),
        ("zmq_recv", i, [vp, vp, sz, i]),
        ("zmq_errno", i, []),
        ("zmq_version", None, [vp, vp, vp]),
    ):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


def _fill(sender: str, send: Callable[[], bool], n_pub: int) -> tuple[int, int]:
    """Drive a sender to its HWM and hold it there for 300 ms: a PUB sends n_pub messages (it
    never refuses); a PUSH sends until refusals persist for 50 ms (the kernel buffers in front
    are full too). Returns (accepted, refused)."""
    import time

    sent = again = streak = 0
    t_end = time.monotonic() + 10
    while time.monotonic() < t_end:
        if sender == "PUB" and sent >= n_pub:
            break
        if send():
            sent, streak = sent + 1, 0
        else:
            again, streak = again + 1, streak + 1
            if streak >= 10:
                break
            time.sleep(0.005)
    t_end = time.monotonic() + 0.3  # sit at the HWM: keep knocking
    while time.monotonic() < t_end:
        if send():
            sent += 1
        else:
            again += 1
        time.sleep(0.01)
    return sent, again


def _engine_monitor(
    sender: str, transport: str, header: dict[str, Any], n_pub: int
) -> dict[str, Any]:
    """A `sender` (PUB/PUSH) of the engine's libzmq with a monitor on every event, connected
    to an engine peer (SUB/PULL, RCVHWM 10) that never reads; SNDHWM 10; driven to its HWM
    with DONTWAIT sends, then held there 300 ms. Events listed per phase."""
    import ctypes
    import errno
    import time
    from .. import _engine as E

    lib, d = _engine_lib(), header["defines"]
    names = {
        v: k[len("ZMQ_EVENT_") :]
        for k, v in d.items()
        if k.startswith("ZMQ_EVENT_") and k != "ZMQ_EVENT_ALL"
    }
    peer_ctx = E.Context(1)
    peer = E.Socket(peer_ctx, E.SOCKET_TYPES["SUB" if sender == "PUB" else "PULL"])
    peer.set_option(E.SOCKET_OPTION_IDS["RCVHWM"], 10)
    peer.set_option(
        E.SOCKET_OPTION_IDS["RCVBUF"], 4096
    )  # small kernel buffers: the HWM is reached soon
    peer.set_option(E.SOCKET_OPTION_IDS["LINGER"], 0)
    if sender == "PUB":
        peer.subscribe(b"")
    tmp = scratch_dir("zmqload-mon-")
    ep = peer.bind("tcp://127.0.0.1:0" if transport == "tcp" else f"ipc://{tmp}/s")
    ctx = lib.zmq_ctx_new()
    snd = lib.zmq_socket(ctx, d[f"ZMQ_{sender}"])
    mon = lib.zmq_socket(ctx, d["ZMQ_PAIR"])
    buf = ctypes.create_string_buffer(4096)
    one = ctypes.c_int(10)
    zero = ctypes.c_int(0)
    small = ctypes.c_int(4096)
    lib.zmq_setsockopt(snd, d["ZMQ_SNDHWM"], ctypes.byref(one), 4)
    lib.zmq_setsockopt(snd, d["ZMQ_SNDBUF"], ctypes.byref(small), 4)
    lib.zmq_setsockopt(snd, d["ZMQ_LINGER"], ctypes.byref(zero), 4)
    lib.zmq_setsockopt(mon, d["ZMQ_LINGER"], ctypes.byref(zero), 4)
    addr = inproc_name("mon").encode()
    rc_monitor = lib.zmq_socket_monitor(snd, addr, d["ZMQ_EVENT_ALL"])
    lib.zmq_connect(mon, addr)
    lib.zmq_connect(snd, ep.encode())

    def events() -> list[str]:
        out: list[str] = []
        frame = 0
        while True:
            n = lib.zmq_recv(mon, buf, len(buf), d["ZMQ_DONTWAIT"])
            if n < 0:
                return out
            if frame % 2 == 0 and n >= 6:
                ev = int.from_bytes(buf.raw[:2], "little")
                out.append(names.get(ev, hex(ev)))
            frame += 1

    msg = ctypes.create_string_buffer(1024)
    probe = ctypes.create_string_buffer(b"P")
    t_end = time.monotonic() + 3  # the connection (and a SUB's subscription) is live
    while time.monotonic() < t_end and peer.recv_bytes(10) is None:
        lib.zmq_send(snd, probe, 1, d["ZMQ_DONTWAIT"])
    while peer.recv_bytes(50) is not None:
        pass
    setup = events()

    def send() -> bool:
        if lib.zmq_send(snd, msg, 1024, d["ZMQ_DONTWAIT"]) >= 0:
            return True
        if lib.zmq_errno() != errno.EAGAIN:
            raise OSError(lib.zmq_errno(), "zmq_send")
        return False

    sent, again = _fill(sender, send, n_pub)
    at_hwm = events()
    received = 0
    while peer.recv_bytes(300) is not None:
        received += 1
    lib.zmq_close(snd)
    time.sleep(0.1)
    after_close = events()
    lib.zmq_close(mon)
    lib.zmq_ctx_term(ctx)
    peer.close(0)
    peer_ctx.term()
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return {
        "library": "engine",
        "sender": sender,
        "transport": transport,
        "monitor_rc": rc_monitor,
        "sent": sent,
        "eagain": again,
        "received": received,
        "dropped": sent - received,
        "events_setup": setup,
        "events_at_hwm": at_hwm,
        "events_after_close": after_close,
    }


def _pyzmq_monitor(sender: str, transport: str, n_pub: int) -> dict[str, Any]:
    """The same in pyzmq (its bundled libzmq), with get_monitor_socket(EVENT_ALL)."""
    import time
    import zmq
    from zmq.utils.monitor import recv_monitor_message

    ctx = zmq.Context()
    peer = ctx.socket(zmq.SUB if sender == "PUB" else zmq.PULL)
    peer.rcvhwm, peer.linger, peer.rcvbuf = 10, 0, 4096
    if sender == "PUB":
        peer.subscribe(b"")
    tmp = scratch_dir("zmqload-pymon-")
    if transport == "tcp":
        peer.bind("tcp://127.0.0.1:0")
        ep = peer.getsockopt_string(zmq.LAST_ENDPOINT)
    else:
        ep = f"ipc://{tmp}/s"
        peer.bind(ep)
    snd = ctx.socket(getattr(zmq, sender))
    snd.sndhwm, snd.linger, snd.sndbuf = 10, 0, 4096
    mon = snd.get_monitor_socket(zmq.EVENT_ALL)
    snd.connect(ep)

    def events() -> list[Optional[str]]:  # zmq.Event's name
        out = []
        while mon.poll(0):
            ev = recv_monitor_message(mon)["event"]
            out.append(ev.name if isinstance(ev, zmq.Event) else hex(ev))
        return out

    t_end = time.monotonic() + 3
    while time.monotonic() < t_end and not peer.poll(10):
        snd.send(b"P", zmq.DONTWAIT)
    while peer.poll(50):
        peer.recv()
    setup = events()

    def send() -> bool:
        try:
            snd.send(b"x" * 1024, zmq.DONTWAIT)
            return True
        except zmq.Again:
            return False

    sent, again = _fill(sender, send, n_pub)
    at_hwm = events()
    received = 0
    while peer.poll(300):
        peer.recv()
        received += 1
    snd.close(0)
    time.sleep(0.1)
    after_close = events()
    mon.close(0)
    peer.close(0)
    ctx.term()
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return {
        "library": "pyzmq",
        "sender": sender,
        "transport": transport,
        "sent": sent,
        "eagain": again,
        "received": received,
        "dropped": sent - received,
        "events_setup": setup,
        "events_at_hwm": at_hwm,
        "events_after_close": after_close,
    }


def monitor_at_hwm(r: ScenarioRunner) -> Outcome:
    """Is there a ZMQ_EVENT_SND_HWM (zmq.h of the engine's libzmq, pyzmq's zmq.Event), and
    what does a monitor on every event report while a PUB / PUSH sits at its HWM?"""
    import zmq

    header = zmq_header()
    event_names = sorted(k for k in header["defines"] if k.startswith("ZMQ_EVENT_"))
    hwm_like = [k for k in event_names if "HWM" in k]
    py_events = [e.name for e in zmq.Event if e.name]  # every member of this IntFlag is named
    py_hwm = [n for n in py_events if "HWM" in n] + [
        n for n in dir(zmq) if n.startswith("EVENT_") and "HWM" in n
    ]
    n_pub = r.scale(20_000, 10_000)
    runs = []
    for transport in r.scale(("tcp", "ipc"), ("tcp",)):
        for sender in ("PUB", "PUSH"):
            runs.append(_engine_monitor(sender, transport, header, n_pub))
            runs.append(_pyzmq_monitor(sender, transport, n_pub))
    measured = [
        f"zmq.h of libzmq {header['version']} ({header['path']}): {len(event_names)} ZMQ_EVENT_* names, "
        f"{'with ' + ', '.join(hwm_like) if hwm_like else 'none about HWM'}; draft-only: "
        f"{', '.join(n for n in header['draft'] if n.startswith('ZMQ_EVENT_')) or 'none'}",
        f"pyzmq {zmq.pyzmq_version()} (libzmq {zmq.zmq_version()}): zmq.Event = {', '.join(py_events)}; "
        f"EVENT_SND_HWM {'exists' if hasattr(zmq, 'EVENT_SND_HWM') else 'does not exist'}",
    ]
    for m in runs:
        hit = (
            f"{m['sent']:,} accepted, then {m['eagain']:,} EAGAIN"
            if m["sender"] == "PUSH"
            else f"{m['dropped']:,} of {m['sent']:,} dropped"
        )
        measured.append(
            f"{m['library']} {m['sender']} over {m['transport']} at SNDHWM 10 ({hit}): events at "
            f"connect {m['events_setup']}, while at the HWM {m['events_at_hwm'] or 'none'}, after close "
            f"{m['events_after_close']}"
        )
    at_hwm_hit = [m for m in runs if (m["eagain"] if m["sender"] == "PUSH" else m["dropped"]) > 0]
    during = sorted({e for m in at_hwm_hit for e in m["events_at_hwm"]})
    exists = bool(hwm_like or py_hwm)
    if exists and during:
        verdict = HOLDS
    elif exists or during:
        verdict = depends(f"on the library: constant {hwm_like or py_hwm}, events at HWM {during}")
    else:
        verdict = DOES_NOT_HOLD
    because = (
        f"no *HWM* event in zmq.h of libzmq {header['version']} ({len(event_names)} ZMQ_EVENT_* names) nor in pyzmq's "
        f"zmq.Event ({len(py_events)} members) ; {len(at_hwm_hit)} of {len(runs)} monitored sockets at their HWM "
        f"reported {during or 'no event'} while there"
        if not exists
        else f"HWM event names {hwm_like or py_hwm}; at the HWM the monitors reported {during}"
    )
    figures = {
        "header_events": event_names,
        "header_draft": header["draft"],
        "pyzmq_events": py_events,
        "runs": runs,
    }
    return Outcome(
        [
            Verdict(
                "001-6",
                verdict,
                because,
                {
                    "header_hwm_events": hwm_like,
                    "pyzmq_hwm_events": py_hwm,
                    "events_while_at_hwm": during,
                    "sockets_at_hwm": len(at_hwm_hit),
                    "sockets": len(runs),
                },
            )
        ],
        measured,
        figures,
    )


# --- 001-7 -----------------------------------------------------------------------------------------------------


def size_vs_hwm(r: ScenarioRunner) -> Outcome:
    """Same HWM (SNDHWM = RCVHWM = 100), 64 B vs 64 KiB messages, to a receiver that reads one
    message per 200 ms: a PUSH sending with SNDTIMEO 100 ms (where does the first send block,
    how many bytes were then queued), on inproc (libzmq pipes only) and tcp/ipc (kernel socket
    buffers in front, sized in bytes). Full form adds a PUB paced so its I/O thread keeps up
    (100,000 msg/s of 64 B, 2,000 msg/s of 64 KiB): how many messages the path held (the
    rest was dropped) and its first drop (a PUB also drops when its pipe fills for a moment)."""
    hwm, sizes = 100, (64, 65_536)
    transports = r.scale(("inproc", "ipc", "tcp"), ("inproc", "tcp"))
    figures: dict[str, dict[str, Any]]
    measured, figures = [], {}
    cases = [("push-pull", t) for t in transports] + r.scale(
        [("pub-sub", "inproc"), ("pub-sub", "tcp")], []
    )
    for pattern, transport in cases:
        for size in sizes:
            common = dict(
                pattern=pattern,
                transport=transport,
                size=size,
                sndhwm=hwm,
                rcvhwm=hwm,
                consumer_delay_us=200_000,
                drain_timeout_ms=1000,
            )
            if pattern == "push-pull":
                # 1 s: the first send blocks well within it (64 B over tcp, the latest: ~44,000 sent unpaced)
                res = r.run(
                    f"{pattern}-{transport}-{size}",
                    count=max(1000, min(200_000, (24 << 20) // size)),
                    duration=1.0,
                    send_mode="timeout",
                    sndtimeo_ms=100,
                    **common,
                )
                first = first_refused(res.run_dir)
            else:
                res = r.run(
                    f"{pattern}-{transport}-{size}",
                    rate=100_000 if size == 64 else 2_000,
                    count=100_000 if size == 64 else 1_000,
                    **common,
                )
                missing = res.streams[0]["missing_ranges"]
                ranges_: list[list[int]] = next(iter(missing.values()), []) if missing else []
                first = ranges_[0][0] if ranges_ else None
            f = facts(res)
            key = f"{pattern}/{transport}/{size}"
            held = f["delivered"] + f["drained"]
            stop = first if pattern == "push-pull" else held
            figures[key] = dict(
                f,
                first_stop=first,
                held=held,
                stop=stop,
                bytes_at_stop=None if stop is None else stop * size,
            )
            what = "blocked" if pattern == "push-pull" else "was dropped"
            measured.append(
                f"{key}: first message that {what}: #{first if first is not None else 'none'}; "
                f"{'queued before it' if pattern == 'push-pull' else 'held in all'}: "
                f"{'-' if stop is None else f'{stop:,} messages = {stop * size / 2**20:,.2f} MiB'}; "
                f"kernel buffers at the queue peak {f['queue_peak'].get('kernel_bytes', 0) / 2**20:,.1f} "
                f"MiB; {fates_line(f)}; RSS sender {f['producer_rss_kb'] / 1024:,.0f} MiB, receiver "
                f"{f['consumer_rss_kb'] / 1024:,.0f} MiB"
            )
    stops: dict[tuple[str, str], dict[int, int | None]] = {}
    for key, f in figures.items():
        pattern, transport, size_text = key.split("/")
        stops.setdefault((pattern, transport), {})[int(size_text)] = f["stop"]
    same, fewer = [], []
    for (pattern, transport), by_size in stops.items():
        small, large = by_size[sizes[0]], by_size[sizes[1]]
        if small is None or large is None:
            continue
        if abs(small - large) <= max(2, 0.05 * small):
            same.append(f"{pattern} {transport}")
        elif large < small:
            fewer.append(f"{pattern} {transport}")
    describe = "; ".join(
        f"{p} {t}: {'first block' if p == 'push-pull' else 'held'} at {v[sizes[0]]} (64 B) vs "
        f"{v[sizes[1]]} (64 KiB) messages"
        for (p, t), v in stops.items()
    )
    if same and fewer:
        verdict = depends(
            f"on the transport: with libzmq pipes alone ({', '.join(same)}) both sizes stop at the "
            f"same message count, the HWM counts messages; with kernel socket buffers in front "
            f"({', '.join(fewer)}) large messages stop sooner, those buffers count bytes"
        )
    elif fewer and not same:
        verdict = HOLDS
    else:
        verdict = DOES_NOT_HOLD
    return Outcome(
        [
            Verdict(
                "001-7",
                verdict,
                describe,
                {
                    "stop": {f"{p}/{t}": v for (p, t), v in stops.items()},
                    "same_count": same,
                    "large_stop_sooner": fewer,
                },
            )
        ],
        measured,
        figures,
    )


SCENARIOS = (
    Scenario(
        "hwm-behaviour",
        "Drop or block at HWM, with blocking sends and with DONTWAIT",
        ("001-2", "001-4", "002-4"),
        hwm_behaviour,
        expected_s=12,
    ),
    Scenario(
        "proxy-pileup",
        "PUB -> XSUB/XPUB proxy -> slow SUB: the post's own faulty and fixed code (pyzmq), "
        "and zmqload at load with SNDHWM 100 on the PUB (and the XPUB)",
        ("001-5",),
        proxy_pileup,
        expected_s=20,
    ),
    Scenario(
        "hwm-defaults",
        "Default SNDHWM/RCVHWM of every socket type (engine and pyzmq) and what it lets queue",
        ("001-1",),
        hwm_defaults,
        expected_s=1,
        reads_header=True,
    ),
    Scenario(
        "rcvhwm-full",
        "A full RCVHWM: who drops or blocks, PUB/SUB vs PUSH/PULL, sender unlimited or at default",
        ("001-3",),
        rcvhwm_full,
        expected_s=15,
    ),
    Scenario(
        "monitor-at-hwm",
        "Is there a ZMQ_EVENT_SND_HWM, and what a monitor reports at the HWM",
        ("001-6",),
        monitor_at_hwm,
        expected_s=7,
        reads_header=True,
    ),
    Scenario(
        "size-vs-hwm",
        "64 B vs 64 KiB messages at the same HWM: first block / drop and bytes queued",
        ("001-7",),
        size_vs_hwm,
        expected_s=20,
    ),
)
