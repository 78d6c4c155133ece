"""User reports (GitHub issues) turned into measurements.

U-1  libzmq #4394: SNDHWM=RCVHWM=0 ("no limit") on PUB/SUB still drops; the
     issue's czmq code sets the HWM right *after* bind/connect
     (zsock_new_pub(endpoint) binds, then zsock_set_sndhwm).
U-2  pyzmq #148, #1100, #1241: HWM 1 (or 2) on PUB and SUB, subscriber 10x
     slower, yet it gets every message.
U-3  libzmq #4673: a message sent after an idle gap has far higher latency
     (>200 us) than back-to-back messages.
"""

from __future__ import annotations

import os
import time

import zmq

from . import _common as C
from . import seed_002


# ------------------------------------------------------------------ U-1
def hwm0_run(
    pub_when: str = "before",
    sub_when: str = "before",
    transport: str = "tcp",
    n: int = 50000,
    size: int = 1024,
    sender: str = "PUB",
    idle_s: float = 1.0,
) -> dict:
    """Sender (PUB or PUSH) binds, receiver (SUB or PULL) connects; each sets
    SNDHWM=RCVHWM=0 ``before`` or ``after`` its bind/connect (or ``never``).
    The sender sends ``n`` x ``size`` bytes as fast as it can while the
    receiver does not read; then the receiver drains until idle.  Reports
    the HWM values getsockopt shows and the fates."""
    ctx = zmq.Context()
    snd = ctx.socket(getattr(zmq, sender))
    rcv = ctx.socket(zmq.SUB if sender == "PUB" else zmq.PULL)
    for s in (snd, rcv):
        s.setsockopt(zmq.LINGER, 0)

    def set0(s):
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)

    if pub_when == "before":
        set0(snd)
    ep = C.bind(snd, transport)
    if pub_when == "after":
        set0(snd)
    if sender == "PUB":
        rcv.setsockopt(zmq.SUBSCRIBE, b"")
    if sub_when == "before":
        set0(rcv)
    rcv.connect(ep)
    if sub_when == "after":
        set0(rcv)
    if sender == "PUB":  # probe until the subscription is live
        for _ in range(500):
            snd.send(b"P")
            if rcv.poll(10):
                break
        C.drain(rcv, 0.2)
    else:
        time.sleep(0.3)
    out = {
        "sender": sender,
        "pub_hwm0_set": pub_when,
        "sub_hwm0_set": sub_when,
        "transport": transport,
        "n": n,
        "size": size,
        "getsockopt_after": {
            "snd_SNDHWM": snd.getsockopt(zmq.SNDHWM),
            "rcv_RCVHWM": rcv.getsockopt(zmq.RCVHWM),
        },
    }
    rss0 = C.rss_kb()
    for i in range(n):
        snd.send(C.payload(i, size))
    time.sleep(0.5)
    out["process_rss_growth_kb"] = C.rss_kb() - rss0
    if transport == "tcp":
        out.update(C.tcp_queues(C.port_of(ep)))
    got = [C.parse(f[0])[0] for f in C.drain(rcv, idle_s) if f[0] != b"P"]
    out.update(C.fates(list(range(n)), [], got))
    snd.close(0)
    rcv.close(0)
    ctx.term()
    return out


def claim_u1(reps: int = 3, transports=("tcp", "ipc"), n: int = 50000) -> dict:
    out = {}
    for tr in transports:
        for sender in ("PUB", "PUSH"):
            for pw, sw in (
                ("before", "before"),
                ("after", "before"),
                ("before", "after"),
                ("after", "after"),
                ("never", "never"),
            ):
                if sender == "PUSH" and (pw, sw) not in (("after", "after"), ("never", "never")):
                    continue  # PUSH blocks instead of dropping; the comparison case
                runs = []
                for _ in range(reps):
                    r = hwm0_run(pw, sw, tr, n if sender == "PUB" else 2000, sender=sender)
                    runs.append(
                        {
                            k: r[k]
                            for k in (
                                "sent",
                                "received_in_drain",
                                "never_received",
                                "process_rss_growth_kb",
                                "getsockopt_after",
                            )
                        }
                    )
                out["%s/%s/pub_%s/sub_%s" % (tr, sender, pw, sw)] = runs
    return out


# ------------------------------------------------------------------ U-2
def hwm1_slow_sub_run(
    transport: str = "tcp",
    size: int = 1024,
    n: int = 100,
    pub_interval: float = 0.01,
    sub_delay: float = 0.1,
    kernel_buf: int | None = None,
) -> dict:
    """pyzmq #148/#1241 shape: HWM 1 (SNDHWM and RCVHWM, pyzmq ``hwm``) on
    both PUB and SUB before bind/connect; PUB sends ``n`` x ``size`` bytes
    one per ``pub_interval`` s; SUB 10x slower; then SUB drains.
    ``kernel_buf`` sets SNDBUF/RCVBUF on both to shrink the kernel socket
    buffers (to test whether they are what holds the messages)."""
    opts = {"SNDHWM": 1, "RCVHWM": 1}
    if kernel_buf:
        opts.update(SNDBUF=kernel_buf, RCVBUF=kernel_buf)
    return seed_002.pub_slow_sub_run(
        transport, n, pub_interval, sub_delay, size=size, pub_opts=opts, sub_opts=opts
    )


def claim_u2(
    reps: int = 3,
    transports=("tcp", "ipc"),
    sizes=(1024, 16384, 65536, 262144, 1048576),
    n: int = 100,
) -> dict:
    keys, kws = [], []
    for tr in transports:
        for sz in sizes:
            for _ in range(reps):
                keys.append("%s/size=%d" % (tr, sz))
                kws.append(dict(transport=tr, size=sz, n=n))
        for _ in range(reps):
            keys.append("%s/size=1024/SNDBUF=RCVBUF=4096" % tr)
            kws.append(dict(transport=tr, size=1024, n=n, kernel_buf=4096))
    runs = C.pmap(lambda **kw: hwm1_slow_sub_run(**kw), kws, workers=3)
    out: dict = {}
    for k, r in zip(keys, runs):
        out.setdefault(k, []).append(
            {
                x: r.get(x)
                for x in (
                    "sent",
                    "received_during_run",
                    "received_in_drain",
                    "never_received",
                    "kernel_tx_queue_bytes",
                    "kernel_rx_queue_bytes",
                    "sub_rss_growth_kb",
                    "error",
                )
                if x in r
            }
        )
    return out


# ------------------------------------------------------------------ U-3
def _lat_receiver(conn, ep, busy, n_total, timeout_s):
    ctx = zmq.Context()
    s = ctx.socket(zmq.PULL)
    s.connect(ep)
    C.event(conn, "connected")
    lat = []
    end = time.monotonic() + timeout_s
    while len(lat) < n_total and time.monotonic() < end:
        if busy:
            try:
                m = s.recv(zmq.NOBLOCK)
            except zmq.Again:
                continue
        else:
            if not s.poll(200):
                continue
            m = s.recv()
        t = C.now_ns()
        seq, t0 = C.parse(m)
        lat.append((seq, (t - t0) / 1000.0))
    s.close(0)
    ctx.term()
    return {"lat": lat}


def latency_vs_interval(
    transport: str = "tcp",
    busy: bool = False,
    intervals_us=(100, 300, 1000, 3000, 10000, 100000),
    counts=(400, 300, 200, 100, 40, 10),
    warmup: int = 100,
) -> dict:
    """One-way latency (send timestamp -> receiver's recv, microseconds) of
    PUSH -> PULL (receiver in a child process) for messages sent every
    ``interval`` us (the sender sleeps between sends; ``time.sleep`` of
    100 us really sleeps ~150 us).  ``busy``: the receiver busy-polls
    (NOBLOCK) so its CPU never idles; otherwise it blocks in poll().  No
    back-to-back burst is used as a baseline: a Python receiver cannot keep
    up with a burst, so its latency would be queueing, not wake-up.  Python
    overhead (~tens of us) is in all numbers alike; ``loadavg`` is the
    machine's 1-minute load when the run started (2 shared cores)."""
    ctx = zmq.Context()
    snd = ctx.socket(zmq.PUSH)
    snd.setsockopt(zmq.LINGER, 0)
    ep = C.bind(snd, transport)
    total = warmup + sum(counts)
    ch = C.Child(_lat_receiver, ep=ep, busy=busy, n_total=total, timeout_s=60)
    ch.wait_event("connected", 10)
    time.sleep(0.3)
    seq = 0
    loadavg = os.getloadavg()[0]
    plan = [(1000, warmup)] + list(zip(intervals_us, counts))
    bounds = []
    for interval, count in plan:
        first = seq
        for _ in range(count):
            time.sleep(interval / 1e6)
            snd.send(C.payload(seq, 64))
            seq += 1
        bounds.append((interval, first, seq))
    r = ch.result(70)
    snd.close(0)
    ctx.term()
    lat = dict(r.get("lat", []))
    out = {
        "transport": transport,
        "busy_receiver": busy,
        "loadavg": loadavg,
        "lost": total - len(lat),
        "by_interval_us": {},
    }
    for interval, a, b in bounds[1:]:
        v = [lat[i] for i in range(a, b) if i in lat]
        out["by_interval_us"][interval] = {k: round(x, 1) for k, x in C.stats(v).items()}
    return out


def claim_u3(reps: int = 3, transports=("tcp", "ipc")) -> dict:
    out = {}
    for tr in transports:
        for busy in (False, True):
            out["%s/%s" % (tr, "busy_receiver" if busy else "blocking_receiver")] = [
                latency_vs_interval(tr, busy) for _ in range(reps)
            ]
    return out


def collect(quick: bool = False) -> dict:
    if quick:
        return {
            "U-1": claim_u1(reps=1, transports=("tcp",), n=20000),
            "U-2": claim_u2(reps=1, transports=("ipc",), sizes=(1024, 262144), n=50),
            "U-3": {
                "tcp/idle": [latency_vs_interval("tcp", False, (100, 1000, 100000), (200, 100, 5))]
            },
        }
    return {"U-1": claim_u1(), "U-2": claim_u2(), "U-3": claim_u3()}


if __name__ == "__main__":
    C.main(collect)
