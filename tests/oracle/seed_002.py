"""Seed 002: blog post on ZeroMQ's "dropped messages" (fast PUB, slow SUB).

The post's code: PUB binds tcp, sends ``f"Message {n}"`` with
``time.sleep(0.001)`` after each; SUB connects, subscribes to everything,
``recv()`` then ``time.sleep(0.1)``.  Its claim: of 1000 sent, the SUB gets
~100 and "the missing 900? Dropped."  The fix offered:
``socket.setsockopt(zmq.HWM, 10000)`` on the SUB before connecting.

Claims: 002-1 .. 002-5.
"""

from __future__ import annotations

import ctypes
import time

import zmq

from . import _common as C
from . import seed_001


# ------------------------------------------------------------------ 002-1/2
def _sub_child(conn, ep, rcvhwm, hwm_option, sub_delay, idle_s, size, sub_opts):
    context = zmq.Context()
    socket = context.socket(zmq.SUB)
    if rcvhwm is not None:  # "on the subscriber side, before connecting"
        socket.setsockopt(getattr(zmq, hwm_option), rcvhwm)
    for k, v in (sub_opts or {}).items():
        socket.setsockopt(getattr(zmq, k), v)
    socket.connect(ep)
    socket.setsockopt_string(zmq.SUBSCRIBE, "")
    rss0 = rss_max = C.rss_kb()
    while True:  # wait for the publisher's probes (subscription is live)
        fr = C.recv_timeout(socket, 10)
        if fr is None or fr[0] == b"P":
            break
    C.event(conn, "ready")
    during, t_recv = [], {}
    while not conn.poll():  # slow phase: until the publisher has sent everything
        fr = C.recv_timeout(socket, 0.05)
        if fr is None or fr[0] == b"P":
            continue
        seq = _seq(fr[0], size)
        t_recv[seq] = C.now_ns()
        during.append(seq)
        time.sleep(sub_delay)  # Simulate heavy processing
        rss_max = max(rss_max, C.rss_kb())
    conn.recv()
    rss_at_pub_end = C.rss_kb()
    rss_max = max(rss_max, rss_at_pub_end)
    t_drain0 = C.now_ns()
    drained = []
    for fr in C.drain(socket, idle_s):
        if fr[0] == b"P":
            continue
        seq = _seq(fr[0], size)
        t_recv[seq] = C.now_ns()
        drained.append(seq)
    socket.close(0)
    context.term()
    return {
        "during": during,
        "drained": drained,
        "t_recv": t_recv,
        "sub_rss_growth_kb": rss_max - rss0,
        "sub_rss_growth_at_pub_end_kb": rss_at_pub_end - rss0,
        "drain_s": round((C.now_ns() - t_drain0) / 1e9 - idle_s, 3),
    }


def _seq(b: bytes, size):
    return int(b.split()[1]) if size is None else C.parse(b)[0]


def pub_slow_sub_run(
    transport: str = "tcp",
    n_messages: int = 1000,
    pub_interval: float = 0.001,
    sub_delay: float = 0.1,
    rcvhwm: int | None = None,
    hwm_option: str = "RCVHWM",
    sndhwm: int | None = None,
    size: int | None = None,
    idle_s: float = 1.0,
    pub_opts: dict | None = None,
    sub_opts: dict | None = None,
) -> dict:
    """002's fast PUB -> slow SUB.

    The SUB (child process) sets ``hwm_option``=``rcvhwm`` before connecting
    (``None``: not set), and processes one message per ``sub_delay`` s while
    the PUB (this process, SNDHWM=``sndhwm`` or default) sends ``n_messages``
    (``size=None``: the post's ``Message n`` text, else ``size`` bytes) one
    per ``pub_interval`` s.  When the PUB is done the SUB reads as fast as
    it can until idle ``idle_s``.  ``pub_opts``/``sub_opts`` ({"SNDBUF": 4096,
    ...}) are further options set before bind/connect.  The PUB starts only after a probe
    message reached the SUB (so slow-joiner loss is excluded).

    Returns fates, SUB RSS growth (peak, and at the PUB's end), kernel TCP
    queue bytes at the PUB's end, latency of messages processed during the
    slow phase, and ``backlog_s_at_sub_pace`` = received_in_drain x
    sub_delay (how long the slow SUB would still need for the backlog).
    """
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    if sndhwm is not None:
        pub.setsockopt(zmq.SNDHWM, sndhwm)
    for k, v in (pub_opts or {}).items():
        pub.setsockopt(getattr(zmq, k), v)
    ep = C.bind(pub, transport)
    ch = C.Child(
        _sub_child,
        ep=ep,
        rcvhwm=rcvhwm,
        hwm_option=hwm_option,
        sub_delay=sub_delay,
        idle_s=idle_s,
        size=size,
        sub_opts=sub_opts,
    )
    t_end = time.monotonic() + 20
    while time.monotonic() < t_end:
        pub.send(b"P")
        if ch.wait_event("ready", 0.01):
            break
    t_send = {}
    t0 = time.monotonic()
    for n in range(n_messages):
        msg = ("Message %d" % n).encode("utf-8") if size is None else C.payload(n, size)
        pub.send(msg)
        t_send[n] = C.now_ns()
        if pub_interval:
            time.sleep(pub_interval)
    send_s = time.monotonic() - t0
    time.sleep(0.05)
    kq = C.tcp_queues(C.port_of(ep)) if transport == "tcp" else {}
    ch.send("stop")
    r = ch.result(120)
    pub.close(0)
    ctx.term()
    out = {
        "transport": transport,
        "n_messages": n_messages,
        "pub_interval": pub_interval,
        "sub_delay": sub_delay,
        "rcvhwm": rcvhwm,
        "hwm_option": hwm_option,
        "sndhwm": sndhwm,
        "size": size,
        "pub_opts": pub_opts,
        "sub_opts": sub_opts,
        "pub_send_s": round(send_s, 3),
        "pub_rate_msg_s": round(n_messages / send_s, 1),
    }
    if "error" in r or r.get("blocked"):
        out["error"] = r
        return out
    out.update(C.fates(list(range(n_messages)), r["during"], r["drained"]))
    out.update(kq)
    t_recv = {int(k): v for k, v in r["t_recv"].items()}
    lat = [(t_recv[s] - t_send[s]) / 1e6 for s in r["during"] if s in t_send]
    out["latency_ms_during_run"] = {k: round(v, 1) for k, v in C.stats(lat).items()}
    out["backlog_s_at_sub_pace"] = round(out["received_in_drain"] * sub_delay, 1)
    for k in ("sub_rss_growth_kb", "sub_rss_growth_at_pub_end_kb", "drain_s"):
        out[k] = r[k]
    return out


_K = (
    "sent",
    "received_during_run",
    "received_in_drain",
    "never_received",
    "first_never_received",
    "sub_rss_growth_kb",
    "sub_rss_growth_at_pub_end_kb",
    "kernel_tx_queue_bytes",
    "kernel_rx_queue_bytes",
    "backlog_s_at_sub_pace",
    "pub_rate_msg_s",
    "error",
)


def _slim(r):
    d = {k: r[k] for k in _K if k in r}
    if "latency_ms_during_run" in r:
        d["latency_ms_max_during_run"] = r["latency_ms_during_run"].get("max")
    return d


def claim_002_1(reps: int = 3, rcvhwms=(10, 1000, 10000, None), n_messages: int = 1000) -> dict:
    """The post's code as written (tiny text messages, 1 ms / 100 ms)."""
    out = {}
    for h in rcvhwms:
        out["tcp/rcvhwm=%s" % h] = [
            _slim(pub_slow_sub_run(rcvhwm=h, n_messages=n_messages)) for _ in range(reps)
        ]
    return out


def claim_002_2(
    reps: int = 3,
    transports=("tcp", "ipc"),
    rcvhwms=(10, 1000, 10000),
    size: int = 65536,
    sndhwm: int = 100,
    n_messages: int = 1000,
) -> dict:
    """Where drops do happen: 64 kB messages, PUB SNDHWM=100; does raising
    the SUB's RCVHWM remove them, and what does it cost (RSS, backlog)."""
    out = {}
    for tr in transports:
        for h in rcvhwms:
            out["%s/size=%d/sndhwm=%d/rcvhwm=%s" % (tr, size, sndhwm, h)] = [
                _slim(pub_slow_sub_run(tr, n_messages, rcvhwm=h, sndhwm=sndhwm, size=size))
                for _ in range(reps)
            ]
    return out


# ------------------------------------------------------------------ 002-3
def hwm_option_check() -> dict:
    """002-3: what ``setsockopt(zmq.HWM, 10000)`` does in pyzmq, what the
    pyzmq ``hwm`` property does, and what option 1 (old ZMQ_HWM) does in
    the system libzmq via its C API (ctypes)."""
    out = {"zmq.HWM_value": int(zmq.HWM)}
    ctx = zmq.Context()
    s = ctx.socket(zmq.SUB)
    try:
        s.setsockopt(zmq.HWM, 10000)
        out["pyzmq_setsockopt_HWM"] = "ok"
    except zmq.ZMQError as e:
        out["pyzmq_setsockopt_HWM"] = "ZMQError: %s (errno %d)" % (e.strerror, e.errno)
    out["after_setsockopt_HWM"] = {
        "SNDHWM": s.getsockopt(zmq.SNDHWM),
        "RCVHWM": s.getsockopt(zmq.RCVHWM),
    }
    s.hwm = 10000
    out["after_pyzmq_hwm_property"] = {
        "SNDHWM": s.getsockopt(zmq.SNDHWM),
        "RCVHWM": s.getsockopt(zmq.RCVHWM),
    }
    s.close(0)
    ctx.term()
    try:
        lib = ctypes.CDLL("libzmq.so.5")
        lib.zmq_ctx_new.restype = ctypes.c_void_p
        lib.zmq_socket.restype = ctypes.c_void_p
        lib.zmq_socket.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.zmq_setsockopt.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_size_t,
        ]
        lib.zmq_close.argtypes = [ctypes.c_void_p]
        lib.zmq_ctx_term.argtypes = [ctypes.c_void_p]
        major, minor, patch = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        lib.zmq_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
        c = lib.zmq_ctx_new()
        sock = lib.zmq_socket(c, zmq.SUB)
        v = ctypes.c_int(10000)
        rc = lib.zmq_setsockopt(sock, 1, ctypes.byref(v), ctypes.sizeof(v))
        err = lib.zmq_errno()
        out["system_libzmq"] = {
            "version": "%d.%d.%d" % (major.value, minor.value, patch.value),
            "zmq_setsockopt(option=1)_rc": rc,
            "errno": err,
            "EINVAL": err == 22,
        }
        lib.zmq_close(sock)
        lib.zmq_ctx_term(c)
    except OSError as e:
        out["system_libzmq"] = "not loadable: %s" % e
    return out


# ------------------------------------------------------------------ 002-4
def claim_002_4(reps: int = 3, transport: str = "ipc") -> dict:
    """A sender with SNDHWM=1 (receiver RCVHWM=1, not reading): blocking
    send with SNDTIMEO=200 ms, and DONTWAIT, for PUB and PUSH."""
    out = {}
    for st in ("PUB", "PUSH"):
        for dw in (False, True):
            out["%s/%s/%s" % (transport, st, "dontwait" if dw else "blocking")] = [
                seed_001._slim(
                    seed_001.hwm_behaviour(st, transport, 1, 1, 1024, 20000, dontwait=dw)
                )
                for _ in range(reps)
            ]
    return out


# ------------------------------------------------------------------ 002-5
def _multipart_child(conn, mode, n, total, frames, transport):
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    pull = ctx.socket(zmq.PULL)
    for s in (push, pull):
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)
        s.setsockopt(zmq.LINGER, 0)
    ep = C.bind(pull, transport)
    push.connect(ep)
    time.sleep(0.2)
    chunk = total // frames
    data = [bytes([65 + i % 26]) * chunk for i in range(frames)]
    rss0 = C.rss_kb()
    t0 = time.monotonic()
    for i in range(n):
        if mode == "single":
            push.send(b"".join(data))
        elif mode == "multipart":
            push.send_multipart(data)
        elif mode == "separate":
            for d in data:
                push.send(d)
    time.sleep(0.5)  # let the I/O thread move everything it can
    rss1 = C.rss_kb()
    send_s = time.monotonic() - t0
    got = 0
    for fr in C.drain(pull, 0.5):
        got += sum(len(f) for f in fr)
    push.close(0)
    pull.close(0)
    ctx.term()
    return {
        "mode": mode,
        "n": n,
        "bytes_queued": n * total,
        "rss_growth_kb": rss1 - rss0,
        "rss_growth_per_queued_byte": round((rss1 - rss0) * 1024 / (n * total), 3),
        "bytes_received": got,
        "send_s": round(send_s, 2),
    }


def multipart_memory(
    mode: str = "single",
    n: int = 64,
    total: int = 1 << 20,
    frames: int = 16,
    transport: str = "inproc",
) -> dict:
    """002-5: queue ``n`` logical messages of ``total`` bytes to a PULL that
    does not read (HWM unlimited), as one frame (``single``), as a
    ``frames``-part multipart message, or as ``frames`` separate messages;
    return the RSS growth of the (single) process holding both queues."""
    return C.Child(
        _multipart_child, mode=mode, n=n, total=total, frames=frames, transport=transport
    ).result(60)


def claim_002_5(reps: int = 3, transports=("inproc", "tcp")) -> dict:
    out = {}
    for tr in transports:
        for mode in ("single", "multipart", "separate"):
            out["%s/%s" % (tr, mode)] = [
                {
                    k: r.get(k)
                    for k in (
                        "rss_growth_kb",
                        "rss_growth_per_queued_byte",
                        "bytes_received",
                        "error",
                    )
                }
                for r in (multipart_memory(mode, transport=tr) for _ in range(reps))
            ]
    return out


def collect(quick: bool = False) -> dict:
    if quick:
        return {
            "002-1": claim_002_1(reps=1, rcvhwms=(10, None), n_messages=500),
            "002-2": claim_002_2(reps=1, transports=("ipc",), rcvhwms=(10, 1000), n_messages=300),
            "002-3": hwm_option_check(),
            "002-4": claim_002_4(reps=1),
            "002-5": claim_002_5(reps=1, transports=("inproc",)),
        }
    return {
        "002-1": claim_002_1(),
        "002-2": claim_002_2(),
        "002-3": hwm_option_check(),
        "002-4": claim_002_4(),
        "002-5": claim_002_5(),
    }


if __name__ == "__main__":
    C.main(collect)
