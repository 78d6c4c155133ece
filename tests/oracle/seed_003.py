"""Seed 003: blog post on LINGER ("sockets don't actually close; they
linger").  Its example: a PUB binds tcp, sends 5 strings 0.1 s apart,
``socket.close(); context.term()``; a SUB connects, subscribes, and polls
10 times with ``recv_string(DONTWAIT)`` sleeping 0.2 s after each miss.
The "fix": ``socket.setsockopt(zmq.LINGER, 1000)`` on the PUB.

Claims: 003-1 default LINGER is 0; 003-2 close() blocks for the linger
period; 003-3 LINGER 0 discards what is queued at close; 003-4 term()
interrupts a lingering socket / closes its sockets; 003-5 LINGER 1000 makes
the SUB more likely to get all 5.
"""

from __future__ import annotations

import threading
import time

import zmq

from . import _common as C


# ------------------------------------------------------------------ 003-1
def default_linger() -> dict:
    """getsockopt(LINGER) of fresh sockets, and the context's BLOCKY."""
    ctx = zmq.Context()
    out = {}
    for name in (
        "PUB",
        "SUB",
        "PUSH",
        "PULL",
        "DEALER",
        "ROUTER",
        "REQ",
        "REP",
        "XPUB",
        "XSUB",
        "PAIR",
    ):
        s = ctx.socket(getattr(zmq, name))
        out[name] = s.getsockopt(zmq.LINGER)
        s.close()
    out["context_BLOCKY"] = ctx.get(zmq.BLOCKY)
    ctx.term()
    return out


# ------------------------------------------------------------------ 003-2/3
def _linger_sender(conn, ep, linger, n, size, sock_type):
    ctx = zmq.Context()
    s = ctx.socket(getattr(zmq, sock_type))
    if linger is not None:
        s.setsockopt(zmq.LINGER, linger)
    s.connect(ep)
    for i in range(n):
        s.send(C.payload(i, size))
    C.event(conn, "sent")
    t0 = time.monotonic()
    s.close()
    C.event(conn, "closed", close_s=round(time.monotonic() - t0, 4))
    t1 = time.monotonic()
    ctx.term()
    C.event(conn, "termed", term_s=round(time.monotonic() - t1, 3))
    return {}


def _late_receiver(conn, ep, delay_s, idle_s):
    time.sleep(delay_s)
    ctx = zmq.Context()
    s = ctx.socket(zmq.PULL)
    s.bind(ep)
    got = [C.parse(f[0])[0] for f in C.drain(s, idle_s)]
    s.close(0)
    ctx.term()
    return {"received": got}


def linger_run(
    linger: int | None = 1000,
    n: int = 5,
    size: int = 100,
    peer_delay_s: float | None = 0.5,
    transport: str = "ipc",
    sock_type: str = "PUSH",
    term_timeout_s: float = 4.0,
) -> dict:
    """A PUSH connects to an endpoint nobody has bound yet (its messages
    stay queued in the sender), sends ``n`` messages, then ``close()`` and
    ``ctx.term()`` - each timed.  A PULL binds the endpoint ``peer_delay_s``
    after the start (``None``: never) and drains until idle.  Returns
    close_s, term_s (or term_blocked_for_at_least_s) and received count."""
    ep = C.endpoint(transport)
    snd = C.Child(_linger_sender, ep=ep, linger=linger, n=n, size=size, sock_type=sock_type)
    rcv = None
    if peer_delay_s is not None:
        rcv = C.Child(_late_receiver, ep=ep, delay_s=peer_delay_s, idle_s=1.0)
    r = snd.result(term_timeout_s + 3)
    ev = {e["event"]: e for e in snd.events if "event" in e}
    out = {
        "linger": linger,
        "n": n,
        "peer_delay_s": peer_delay_s,
        "transport": transport,
        "close_s": ev.get("closed", {}).get("close_s"),
    }
    if "termed" in ev:
        out["term_s"] = ev["termed"]["term_s"]
    else:
        out["term_blocked_for_at_least_s"] = r.get("blocked_for_at_least_s")
    if rcv is not None:
        rr = rcv.result(peer_delay_s + 30)
        out["received"] = len(rr.get("received", []))
        out["never_received"] = n - out["received"]
    return out


def claim_003_2_3(reps: int = 3, transports=("ipc", "tcp")) -> dict:
    cases = [  # (linger, peer_delay_s)
        (0, 0.5),
        (1000, 0.5),
        (1000, 2.0),
        (-1, 2.0),
        (None, 2.0),
        (-1, None),
        (1000, None),
    ]
    keys, kws = [], []
    for tr in transports:
        for lg, pd in cases:
            for _ in range(reps):
                keys.append("%s/linger=%s/peer_after=%s" % (tr, lg, pd))
                kws.append(dict(linger=lg, peer_delay_s=pd, transport=tr))
    runs = C.pmap(linger_run, kws, workers=6)  # timing is in 100s of ms; sleep-dominated
    out: dict = {}
    for k, r in zip(keys, runs):
        out.setdefault(k, []).append(
            {
                x: r.get(x)
                for x in (
                    "close_s",
                    "term_s",
                    "term_blocked_for_at_least_s",
                    "received",
                    "never_received",
                )
                if x in r
            }
        )
    return out


# ------------------------------------------------------------------ 003-4
def _term_case(conn, case):
    ctx = zmq.Context()
    out = {"case": case}
    if case == "term_with_open_socket":
        s = ctx.socket(zmq.PUSH)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(C.ipc_endpoint())
        C.event(conn, "term_start")
        ctx.term()  # expected to block: the socket is never closed
        out["term_returned"] = True
    elif case == "term_interrupts_blocked_recv":
        s = ctx.socket(zmq.PULL)
        s.bind(C.ipc_endpoint())
        seen = {}

        def reader():
            try:
                s.recv()
            except zmq.ContextTerminated:
                seen["recv_raised"] = "ContextTerminated"
                seen["t"] = time.monotonic()
            s.close()

        th = threading.Thread(target=reader)
        th.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        ctx.term()
        out["term_s"] = round(time.monotonic() - t0, 3)
        out["recv_raised"] = seen.get("recv_raised")
        out["recv_raised_after_s"] = round(seen["t"] - t0, 3) if "t" in seen else None
        th.join()
    elif case.startswith("close_then_term_linger="):
        linger = int(case.split("=")[1])
        s = ctx.socket(zmq.PUSH)
        s.setsockopt(zmq.LINGER, linger)
        s.connect(C.ipc_endpoint())  # nobody binds: messages stay queued
        for i in range(5):
            s.send(b"m%d" % i)
        t0 = time.monotonic()
        s.close()
        out["close_s"] = round(time.monotonic() - t0, 4)
        t1 = time.monotonic()
        C.event(conn, "term_start")
        ctx.term()
        out["term_s"] = round(time.monotonic() - t1, 3)
    elif case == "pyzmq_destroy_linger0_open_socket":
        s = ctx.socket(zmq.PUSH)
        s.connect(C.ipc_endpoint())
        for i in range(5):
            s.send(b"m%d" % i)
        t0 = time.monotonic()
        ctx.destroy(linger=0)
        out["destroy_s"] = round(time.monotonic() - t0, 3)
        out["socket_closed_after"] = s.closed
    return out


def term_behaviour(case: str, timeout_s: float = 4.0) -> dict:
    """003-4 cases (each in a child process, ``timeout_s`` deadline):
    ``term_with_open_socket``, ``term_interrupts_blocked_recv``,
    ``close_then_term_linger=<ms>`` (5 messages queued to an unbound ipc
    endpoint), ``pyzmq_destroy_linger0_open_socket``."""
    r = C.Child(_term_case, case=case).result(timeout_s)
    r.pop("events", None)
    return r


def claim_003_4(reps: int = 3) -> dict:
    cases = [
        "term_with_open_socket",
        "term_interrupts_blocked_recv",
        "close_then_term_linger=0",
        "close_then_term_linger=500",
        "close_then_term_linger=2000",
        "pyzmq_destroy_linger0_open_socket",
    ]
    kws = [dict(case=c) for c in cases for _ in range(reps)]
    runs = C.pmap(term_behaviour, kws, workers=6)
    out: dict = {}
    for kw, r in zip(kws, runs):
        r.pop("last_event", None)
        out.setdefault(kw["case"], []).append(r)
    return out


# ------------------------------------------------------------------ 003-5
def _publisher_003(conn, ep, linger):
    context = zmq.Context()
    socket = context.socket(zmq.PUB)
    socket.bind(ep)
    if linger is not None:
        socket.setsockopt(zmq.LINGER, linger)
    C.event(conn, "bound")
    for i in range(5):
        message = f"Message {i}"
        socket.send_string(message)
        time.sleep(0.1)
    t0 = time.monotonic()
    socket.close()
    close_s = time.monotonic() - t0
    context.term()
    return {"close_s": round(close_s, 4), "close_term_s": round(time.monotonic() - t0, 4)}


def _subscriber_003(conn, ep):
    context = zmq.Context()
    socket = context.socket(zmq.SUB)
    socket.connect(ep)
    socket.setsockopt_string(zmq.SUBSCRIBE, "")
    C.event(conn, "connected")
    got = []
    for _ in range(10):
        try:
            got.append(socket.recv_string(zmq.DONTWAIT))
        except zmq.Again:
            time.sleep(0.2)
    late = [m for (m,) in C.drain(socket, 1.0)]
    socket.close()
    context.term()
    return {"received": got, "received_after_loop": late}


def example_003_run(
    linger: int | None = None, start: str = "pub_first", transport: str = "tcp"
) -> dict:
    """The post's publisher and subscriber as two processes (each script
    verbatim apart from the endpoint).  ``start``: 'pub_first' (subscriber
    launched right after the publisher has bound) or 'sub_first'
    (subscriber launched 1 s before the publisher).  Returns how many of the
    5 the subscriber's 10-iteration loop got, how many more it would have
    got by reading on, and the publisher's close/term times."""
    ep = C.endpoint(transport)
    if start == "pub_first":
        pub = C.Child(_publisher_003, ep=ep, linger=linger)
        pub.wait_event("bound", 10)
        sub = C.Child(_subscriber_003, ep=ep)
    else:
        sub = C.Child(_subscriber_003, ep=ep)
        sub.wait_event("connected", 10)
        time.sleep(0.5)
        pub = C.Child(_publisher_003, ep=ep, linger=linger)
    p, s = pub.result(15), sub.result(15)
    return {
        "linger": linger,
        "start": start,
        "received_in_loop": len(s.get("received", [])),
        "received_after_loop": len(s.get("received_after_loop", [])),
        "first_received": (s.get("received") or [None])[0],
        "pub_close_s": p.get("close_s"),
        "pub_close_term_s": p.get("close_term_s"),
    }


def claim_003_5(reps: int = 5) -> dict:
    kws = [
        dict(linger=lg, start=st)
        for lg in (None, 1000)
        for st in ("pub_first", "sub_first")
        for _ in range(reps)
    ]
    runs = C.pmap(example_003_run, kws, workers=4)
    out: dict = {}
    for kw, r in zip(kws, runs):
        out.setdefault("linger=%s/%s" % (kw["linger"], kw["start"]), []).append(
            {
                k: r[k]
                for k in (
                    "received_in_loop",
                    "received_after_loop",
                    "first_received",
                    "pub_close_term_s",
                )
            }
        )
    return out


def collect(quick: bool = False) -> dict:
    if quick:
        return {
            "003-1": default_linger(),
            "003-2_3": claim_003_2_3(reps=1, transports=("ipc",)),
            "003-4": claim_003_4(reps=1),
            "003-5": claim_003_5(reps=2),
        }
    return {
        "003-1": default_linger(),
        "003-2_3": claim_003_2_3(),
        "003-4": claim_003_4(),
        "003-5": claim_003_5(),
    }


if __name__ == "__main__":
    C.main(collect)
