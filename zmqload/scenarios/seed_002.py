"""Claims of the blog post on a fast PUB and a slow SUB (002)."""

from __future__ import annotations

from typing import Any, cast

from ..errors import EngineError
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


def slow_subscriber(r: ScenarioRunner) -> Outcome:
    """The post's own setup (short messages at ~1000 msg/s, 1000 of them, 100 ms of work per
    message, default HWMs) and a heavier one (4 KiB at 2000 msg/s) whose volume overflows
    the kernel buffers, at RCVHWM 10, 1000, 10000; the subscriber drains what is queued at
    the end, so what it misses is what was really dropped. The heavier runs close after the
    drain: a PUB closed at once cannot tell a drop at its full pipe from a loss at close
    (docs/RECORDS.md, tail placement), and this claim is about the first."""
    work_us = r.scale(100_000, 10_000)
    rate, duration = r.scale(2_000, 4_000), r.scale(3.0, 1.0)
    measured: list[str] = []
    figures: dict[str | int, dict[str, Any]] = {}
    # "Message N" is ~12 bytes; 16 is the smallest zmqload message (its header)
    post = facts(
        r.run(
            "post-setup",
            pattern="pub-sub",
            transport="tcp",
            size=16,
            rate=1000,
            count=r.scale(1000, 300),
            consumer_delay_us=work_us,
        )
    )
    figures["post"] = post
    post_dropped = post["dropped_start"] + post["dropped_mid"] + post["dropped_tail"]
    measured.append(f"the post's setup (16 B, 1000 msg/s, default HWMs): {fates_line(post)}")
    for hwm in (10, 1000, 10000):
        res = r.run(
            f"rcvhwm-{hwm}",
            pattern="pub-sub",
            transport="tcp",
            size=4096,
            rate=rate,
            duration=duration,
            rcvhwm=hwm,
            consumer_delay_us=work_us,
            close_order="after-drain",
        )
        f = facts(res)
        figures[hwm] = f
        measured.append(
            f"RCVHWM={hwm}: {fates_line(f)}; queue peak {f['queue_peak'].get('messages', 0):,}; latency "
            f"p50 {ms(f['latency_p50_ns'])} max {ms(f['latency_max_ns'])}; consumer RSS "
            f"{f['consumer_rss_kb'] / 1024:,.0f} MiB"
        )
    small, large = figures[10], figures[10000]
    hwms = (10, 1000, 10000)
    dropped = {
        h: figures[h]["dropped_mid"] + figures[h]["dropped_tail"] + figures[h]["dropped_start"]
        for h in hwms
    }
    during = {h: figures[h]["delivered"] for h in hwms}
    # The claim is about the post's own setup; the heavier runs say when it would come true.
    missing = post["sent"] - post["delivered"]
    heavy = "; ".join(
        f"4 KiB at RCVHWM {h}: {dropped[h]:,} dropped, {figures[h]['drained']:,} queued"
        for h in hwms
    )
    if post_dropped == 0:
        v1 = Verdict(
            "002-1",
            DOES_NOT_HOLD,
            f"in the post's setup {missing:,} of {post['sent']:,} were missing when the sending ended, and "
            f"all {post['drained']:,} of them were still queued (0 dropped); {heavy}",
            {"post": post, "dropped": dropped},
        )
    else:
        v1 = Verdict(
            "002-1",
            HOLDS if post_dropped >= missing * 0.5 else depends("on the HWM and volume"),
            f"in the post's setup {post_dropped:,} of {missing:,} missing were dropped, "
            f"{post['drained']:,} still queued; {heavy}",
            {"post": post, "dropped": dropped},
        )
    extra_mib = (large["consumer_rss_kb"] - small["consumer_rss_kb"]) / 1024
    v2 = Verdict(
        "002-2",
        depends(
            "on the run: a larger HWM turns drops into a backlog (nothing lost while it "
            "fits) but the subscriber is no faster"
        )
        if dropped[10] and not dropped[10000]
        else DOES_NOT_HOLD,
        f"RCVHWM 10: {dropped[10]:,} dropped; RCVHWM 10000: {dropped[10000]:,} dropped, "
        f"{extra_mib:,.0f} MiB more consumer memory, max latency {ms(small['latency_max_ns'])} -> "
        f"{ms(large['latency_max_ns'])}; received during the run: {during[10]:,} vs {during[10000]:,}",
        {"extra_mib": extra_mib},
    )
    return Outcome([v1, v2], measured, figures)


# --- 002-3 -----------------------------------------------------------------------------------------------------


def hwm_option(r: ScenarioRunner) -> Outcome:
    """The post's `socket.setsockopt(zmq.HWM, 10000)` on a SUB before connecting: in pyzmq (its
    bundled libzmq) and through the engine (libzmq 4.3.4, the option number pyzmq calls HWM),
    SNDHWM/RCVHWM read back after it; pyzmq's `hwm` property; and whether HWMs set after
    connect apply to the pipe already there (messages an inproc PUSH queues to a PULL that
    never reads, HWM 10000 set before vs after connect)."""
    import zmq
    from .. import _engine as E
    from .seed_001 import engine_capacity, pyzmq_capacity, zmq_header

    header = zmq_header()
    eng_version = ".".join(map(str, E.libzmq_version()))
    calls = {}
    # pyzmq, the post's code
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    try:
        sub.setsockopt(zmq.HWM, 10000)
        outcome = "ok"
    except zmq.ZMQError as e:
        outcome = f"ZMQError errno {e.errno} ({e.strerror})"
    calls["pyzmq"] = {
        "libzmq": zmq.zmq_version(),
        "option": int(zmq.HWM),
        "setsockopt": outcome,
        "SNDHWM": sub.getsockopt(zmq.SNDHWM),
        "RCVHWM": sub.getsockopt(zmq.RCVHWM),
    }
    sub.hwm = 10000
    calls["pyzmq_hwm_property"] = {
        "SNDHWM": sub.getsockopt(zmq.SNDHWM),
        "RCVHWM": sub.getsockopt(zmq.RCVHWM),
    }
    sub.close(0)
    ctx.term()
    # the engine's libzmq, same option number
    ectx = E.Context(1)
    esub = E.Socket(ectx, E.SOCKET_TYPES["SUB"])
    try:
        esub.set_option(int(zmq.HWM), 10000)
        outcome = "ok"
    except EngineError as e:
        outcome = f"EngineError errno {e.errno} ({e.strerror})"
    calls["engine"] = {
        "libzmq": eng_version,
        "option": int(zmq.HWM),
        "setsockopt": outcome,
        "SNDHWM": esub.get_option(E.SOCKET_OPTION_IDS["SNDHWM"]),
        "RCVHWM": esub.get_option(E.SOCKET_OPTION_IDS["RCVHWM"]),
    }
    esub.close(0)
    ectx.term()
    header_hwm = header["defines"].get("ZMQ_HWM")
    # does a HWM apply to a pipe that exists already?
    transports = r.scale(("inproc", "ipc"), ("inproc",))
    capacity = {}
    for transport in transports:
        for hwm, when in ((None, "default"), (10000, "before"), (10000, "after")):
            capacity[f"engine/{transport}/{when}"] = engine_capacity(hwm, when, transport)[
                "accepted"
            ]
    for hwm, when in ((None, "default"), (10000, "before"), (10000, "after")):
        capacity[f"pyzmq/inproc/{when}"] = pyzmq_capacity(hwm, when)
    measured = [
        f"zmq.h of libzmq {header['version']}: ZMQ_HWM {'= ' + str(header_hwm) if header_hwm is not None else 'not defined'}"
        f" (ZMQ_SNDHWM = {header['defines']['ZMQ_SNDHWM']}, ZMQ_RCVHWM = {header['defines']['ZMQ_RCVHWM']}); "
        f"pyzmq's zmq.HWM = {int(zmq.HWM)}"
    ]
    for lib in ("pyzmq", "engine"):
        c = calls[lib]
        measured.append(
            f"{lib} (libzmq {c['libzmq']}): setsockopt({c['option']} = HWM, 10000) on a SUB -> {c['setsockopt']}; "
            f"read back SNDHWM {c['SNDHWM']}, RCVHWM {c['RCVHWM']}"
        )
    p = calls["pyzmq_hwm_property"]
    measured.append(f"pyzmq `socket.hwm = 10000` -> SNDHWM {p['SNDHWM']}, RCVHWM {p['RCVHWM']}")
    measured.append(
        "messages a PUSH queues to a PULL that never reads, HWM 10000 on both: "
        + "; ".join(f"{k} {v:,}" for k, v in capacity.items())
    )
    raised = [
        lib
        for lib in ("pyzmq", "engine")
        if calls[lib]["setsockopt"] == "ok"
        and calls[lib]["SNDHWM"] == calls[lib]["RCVHWM"] == 10000
    ]
    failed = [lib for lib in ("pyzmq", "engine") if calls[lib]["setsockopt"] != "ok"]
    if len(raised) == 2:
        verdict = HOLDS
    elif raised:
        verdict = depends(f"on the libzmq version: raised in {', '.join(raised)} only")
    else:
        verdict = DOES_NOT_HOLD
    after = {
        t: (
            capacity[f"engine/{t}/default"],
            capacity[f"engine/{t}/before"],
            capacity[f"engine/{t}/after"],
        )
        for t in transports
    }
    because = (
        f"setsockopt(zmq.HWM={int(zmq.HWM)}, 10000) -> "
        + "; ".join(
            f"{lib} libzmq {calls[lib]['libzmq']}: {calls[lib]['setsockopt']}, HWMs stay "
            f"{calls[lib]['SNDHWM']}/{calls[lib]['RCVHWM']}"
            for lib in ("pyzmq", "engine")
        )
        + f"; `hwm = 10000` works ({p['SNDHWM']}/{p['RCVHWM']}); set after connect it reaches the "
        + ", ".join(
            f"{t} pipe {_reach(d, b, a)} ({a:,} queued vs {b:,} set before, {d:,} default)"
            for t, (d, b, a) in after.items()
        )
    )
    figures = {"calls": calls, "capacity": capacity, "header_ZMQ_HWM": header_hwm}
    return Outcome(
        [
            Verdict(
                "002-3",
                verdict,
                because,
                {"failed": failed, "raised": raised, "capacity": capacity},
            )
        ],
        measured,
        figures,
    )


def _reach(default: int, before: int, after: int) -> str:
    """How far a HWM set after connect reached the existing pipe, from queue capacities."""
    if abs(after - before) <= 0.05 * before:
        return "fully"
    if abs(after - default) <= 0.05 * max(default, 1):
        return "not at all"
    return "only partly"


# --- 002-5 -----------------------------------------------------------------------------------------------------

MULTIPART_MODES = {  # name: (frames per message, messages per logical 64 KiB item)
    "single": (1, 1),
    "multipart-16": (16, 1),
    "multipart-1024": (1024, 1),
    "separate-16": (1, 16),
}
ITEM = 65_536
REDUCED = 0.75  # multipart RSS / single-frame RSS below this: memory reduced


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def _multipart_child(mode: str, items: int, transport: str) -> dict[str, Any]:
    """In a fresh process: an engine PUSH queues `items` x 64 KiB to a PULL that does not read
    (HWM 0, no limit), shaped as `mode`; RSS growth once the queue is settled, then the PULL
    reads everything back (bytes received)."""
    import shutil
    import time
    from .. import _engine as E

    frames, per_item = MULTIPART_MODES[mode]
    part = ITEM // (frames * per_item)
    ctx = E.Context(1)
    pull, push = E.Socket(ctx, E.SOCKET_TYPES["PULL"]), E.Socket(ctx, E.SOCKET_TYPES["PUSH"])
    for s in (pull, push):
        s.set_option(E.SOCKET_OPTION_IDS["SNDHWM"], 0)
        s.set_option(E.SOCKET_OPTION_IDS["RCVHWM"], 0)
        s.set_option(E.SOCKET_OPTION_IDS["LINGER"], 0)
    tmp = scratch_dir("zmqload-mp-")
    ep = pull.bind(
        {"inproc": "inproc://zmqload-mp", "tcp": "tcp://127.0.0.1:0", "ipc": f"ipc://{tmp}/s"}[
            transport
        ]
    )
    push.connect(ep)
    push.send_bytes(b"w")
    if pull.recv_bytes(2000) != b"w":
        raise RuntimeError("the PUSH/PULL pair did not connect")
    data = bytes(part)
    rss0 = _rss_kb()
    for _ in range(items * per_item):
        for k in range(frames):
            push.send_bytes(data, more=k < frames - 1)
    last, stable, t_end = -1, 0, time.monotonic() + 5
    while stable < 3 and time.monotonic() < t_end:  # the I/O thread is done moving them
        time.sleep(0.1)
        now = _rss_kb()
        stable, last = (stable + 1 if abs(now - last) < 256 else 0), now
    rss1 = _rss_kb()
    received = 0
    while (b := pull.recv_bytes(500)) is not None:
        received += len(b)
    push.close(0)
    pull.close(0)
    ctx.term()
    shutil.rmtree(tmp, ignore_errors=True)
    return {
        "mode": mode,
        "transport": transport,
        "frames": frames,
        "part": part,
        "messages": items * per_item,
        "bytes_queued": items * ITEM,
        "rss_growth_kb": rss1 - rss0,
        "bytes_received": received,
    }


def _in_child(limit_s: float, **kwargs: Any) -> dict[str, Any]:
    """_multipart_child in a fresh interpreter (clean RSS), bounded by limit_s."""
    import json
    import os
    import subprocess
    import sys
    import zmqload

    root = os.path.dirname(os.path.dirname(os.path.abspath(zmqload.__file__)))
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    )
    code = (
        "import json, sys; from zmqload.scenarios.seed_002 import _multipart_child; "
        f"print(json.dumps(_multipart_child(**{kwargs!r})))"
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=limit_s,
            env=env,
            cwd=root,
        )
    except subprocess.TimeoutExpired:
        return {**kwargs, "error": f"no result within {limit_s} s"}
    if proc.returncode != 0:
        return {
            **kwargs,
            "error": (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1],
        }
    return cast(dict[str, Any], json.loads(proc.stdout.strip().splitlines()[-1]))


def multipart_memory(r: ScenarioRunner) -> Outcome:
    """The same payload bytes buffered in a non-reading PULL's queue as one 64 KiB frame per
    item, as 16- and 1024-part messages, and as 16 separate messages: RSS growth per byte
    queued (fresh process each, inproc and tcp); and how a HWM counts a multipart message
    (messages accepted at SNDHWM = RCVHWM = 10, inproc)."""
    from .seed_001 import engine_capacity

    items = r.scale(512, 128)
    transports = ("inproc", "tcp")
    runs = {}
    for transport in transports:
        for mode in MULTIPART_MODES:
            res = _in_child(60, mode=mode, items=items, transport=transport)
            res["rss_per_byte"] = (
                (res["rss_growth_kb"] * 1024 / res["bytes_queued"]) if "error" not in res else None
            )
            runs[f"{transport}/{mode}"] = res
    counting = {
        f"{frames} x {size} B": engine_capacity(10, "before", "inproc", size=size, frames=frames)
        for frames, size in ((1, 4096), (16, 4096), (1, 65_536))
    }
    measured = []
    for key, m in runs.items():
        if "error" in m:
            measured.append(f"{key}: {m['error']}")
            continue
        measured.append(
            f"{key}: {m['messages']:,} messages of {m['frames']} x {m['part']:,} B = "
            f"{m['bytes_queued'] / 2**20:,.0f} MiB queued -> RSS +{m['rss_growth_kb'] / 1024:,.1f} MiB "
            f"({m['rss_per_byte']:.2f} B of memory per payload byte); {m['bytes_received']:,} B read back"
        )
    measured.append(
        "HWM 10 on both ends, inproc, messages accepted before EAGAIN: "
        + "; ".join(
            f"{k}: {c['accepted']:,} messages ({c['accepted'] * c['frames'] * c['size'] / 1024:,.0f} KiB)"
            for k, c in counting.items()
        )
    )
    ratios = {}
    for transport in transports:
        single = runs[f"{transport}/single"]
        for mode in ("multipart-16", "multipart-1024"):
            m = runs[f"{transport}/{mode}"]
            if "error" not in m and "error" not in single and single["rss_growth_kb"] > 0:
                ratios[f"{transport}/{mode}"] = m["rss_growth_kb"] / single["rss_growth_kb"]
    complete = all(
        "error" not in m and m["bytes_received"] == m["bytes_queued"] for m in runs.values()
    )
    less = [k for k, v in ratios.items() if v < REDUCED]  # a clear reduction, beyond RSS noise
    if not complete or not ratios:
        verdict = depends("on a measurement that did not complete")
    elif not less:
        verdict = DOES_NOT_HOLD
    elif less and len(less) == len(ratios):
        verdict = HOLDS
    else:
        verdict = depends(
            f"on the transport and frame size: less memory only with {', '.join(less)}"
        )
    counts = {k: c["accepted"] for k, c in counting.items()}
    because = (
        "RSS growth of the multipart forms relative to one frame per item: "
        + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
        + f"; HWM 10 counts a 16-part message as one ({counts['16 x 4096 B']} accepted, like "
        f"{counts['1 x 4096 B']} single-frame)"
    )
    figures = {"runs": runs, "hwm_counting": counting, "ratios": ratios}
    return Outcome(
        [Verdict("002-5", verdict, because, {"ratios": ratios, "hwm_counting": counts})],
        measured,
        figures,
    )


SCENARIOS = (
    Scenario(
        "slow-subscriber",
        "Fast PUB, SUB doing 100 ms of work per message, RCVHWM 10/1000/10000",
        ("002-1", "002-2"),
        slow_subscriber,
        expected_s=18,
    ),
    Scenario(
        "hwm-option",
        "setsockopt(zmq.HWM, 10000) in pyzmq and the engine; HWM set before vs after connect",
        ("002-3",),
        hwm_option,
        expected_s=1,
        reads_header=True,
    ),
    Scenario(
        "multipart-memory",
        "The same bytes queued as single-part, multipart and separate messages: memory "
        "and HWM counting",
        ("002-5",),
        multipart_memory,
        expected_s=13,
    ),
)
