"""Seed 001: blog post "ZeroMQ High Water Mark (HWM) Not Dropping Messages?
Troubleshooting the Durable Subscribers Example in Python".

Claims: 001-1 default HWMs, 001-2 which socket types drop vs block at HWM,
001-3 receiver discards at RCVHWM, 001-4 PUB+DONTWAIT raises EAGAIN at HWM,
001-5 the post's faulty/fixed PUB -> XSUB/XPUB proxy -> SUB code,
001-6 ZMQ_EVENT_SND_HWM monitor event, 001-7 large vs small messages.
"""

from __future__ import annotations

import threading
import time

import zmq
import zmq.utils.monitor

from . import _common as C

# sender type -> receiver type used to test it
PAIRS = {
    "PUSH": "PULL",
    "PUB": "SUB",
    "XPUB": "SUB",
    "XSUB": "XPUB",
    "DEALER": "ROUTER",
    "ROUTER": "DEALER",
    "REQ": "REP",
    "REP": "REQ",
    "PAIR": "PAIR",
}
ALL_TYPES = [
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
]


def default_hwms() -> dict:
    """001-1: getsockopt(SNDHWM/RCVHWM/LINGER) of a fresh socket of each type."""
    ctx = zmq.Context()
    out = {}
    for name in ALL_TYPES:
        s = ctx.socket(getattr(zmq, name))
        out[name] = {
            "SNDHWM": s.getsockopt(zmq.SNDHWM),
            "RCVHWM": s.getsockopt(zmq.RCVHWM),
            "LINGER": s.getsockopt(zmq.LINGER),
        }
        s.close(0)
    ctx.term()
    return out


def _msg(i: int, size: int) -> bytes:
    # leading b'D' so an XSUB's upstream data is never read as (un)subscribe
    return b"D" + C.payload(i, max(16, size - 1))


def _seq(frame: bytes) -> int:
    return C.parse(frame[1:])[0]


def hwm_behaviour(
    sender: str = "PUSH",
    transport: str = "ipc",
    sndhwm: int | None = 10,
    rcvhwm: int | None = 10,
    size: int = 1024,
    max_messages: int = 20000,
    dontwait: bool = False,
    sndtimeo_ms: int = 200,
    idle_s: float = 0.5,
    xpub_nodrop: bool = False,
    router_mandatory: bool = False,
) -> dict:
    """Fill the path from a ``sender`` socket to a receiver that does not read.

    The receiver (type ``PAIRS[sender]``) binds, the sender connects, both
    with the given HWMs set before bind/connect (``None`` = libzmq default,
    ``0`` = unlimited).  The sender sends up to ``max_messages`` ``size``-byte
    messages, blocking with SNDTIMEO=``sndtimeo_ms`` (or with DONTWAIT), and
    stops at the first EAGAIN.  Then the receiver drains until idle for
    ``idle_s`` (both sockets are in this process; 0.5 s is ample).

    Returns ``behaviour``: 'blocks' (a send timed out / EAGAIN), 'drops'
    (sends all succeeded but some messages never arrived), 'efsm' (the
    socket's state machine forbids a second send), or 'delivered_all'; plus
    accepted_before_block, again_count, fates and kernel queue bytes (tcp).
    """
    ctx = zmq.Context()
    snd = ctx.socket(getattr(zmq, sender))
    rcv = ctx.socket(getattr(zmq, PAIRS[sender]))
    for s, hwm_opt, val in ((snd, zmq.SNDHWM, sndhwm), (rcv, zmq.RCVHWM, rcvhwm)):
        if val is not None:
            s.setsockopt(hwm_opt, val)
        s.setsockopt(zmq.LINGER, 0)
    snd.setsockopt(zmq.SNDTIMEO, sndtimeo_ms)
    if xpub_nodrop:
        snd.setsockopt(zmq.XPUB_NODROP, 1)
    if router_mandatory:
        snd.setsockopt(zmq.ROUTER_MANDATORY, 1)
    if sender == "ROUTER":
        rcv.setsockopt(zmq.ROUTING_ID, b"peer")
    if PAIRS[sender] == "SUB":
        rcv.setsockopt(zmq.SUBSCRIBE, b"")
    ep = C.bind(rcv, transport)
    snd.connect(ep)
    out = {
        "sender": sender,
        "receiver": PAIRS[sender],
        "transport": transport,
        "sndhwm": snd.getsockopt(zmq.SNDHWM),
        "rcvhwm": rcv.getsockopt(zmq.RCVHWM),
        "size": size,
        "dontwait": dontwait,
        "max_messages": max_messages,
    }
    # --- make the route exist before counting
    if sender == "ROUTER":
        rcv.send(b"hello")  # DEALER (routing id 'peer') -> ROUTER
        snd.recv_multipart()
    elif sender == "XSUB":
        time.sleep(0.2)  # XSUB sends data upstream; no subscription needed
    elif PAIRS[sender] == "SUB":
        # slow-joiner guard: probe until the subscription has arrived
        for _ in range(200):
            snd.send(b"P")
            if rcv.poll(10):
                break
        C.drain(rcv, 0.2)
        if sender == "XPUB":
            C.drain(snd, 0.1)  # the SUB's subscription message
    else:
        time.sleep(0.2)
    # --- send until the first EAGAIN
    flags = zmq.DONTWAIT if dontwait else 0
    sent, again, efsm, blocked_s, err = [], 0, False, 0.0, None
    t0 = time.monotonic()
    for i in range(max_messages):
        m = _msg(i, size)
        t = time.monotonic()
        try:
            if sender == "ROUTER":
                snd.send_multipart([b"peer", m], flags)
            else:
                snd.send(m, flags)
            sent.append(i)
        except zmq.Again:
            again += 1
            blocked_s = time.monotonic() - t
            break
        except zmq.ZMQError as e:
            if e.errno == zmq.EFSM:
                efsm = True
            err = "EFSM" if efsm else "%s (errno %s)" % (e.strerror, e.errno)
            break
    out["send_loop_s"] = round(time.monotonic() - t0, 3)
    out["accepted_before_block"] = len(sent)
    out["again_count"] = again
    out["blocked_in_send_s"] = round(blocked_s, 3)
    out["send_error"] = err
    if transport == "tcp":
        time.sleep(0.2)
        out.update(C.tcp_queues(C.port_of(ep)))
    got = []
    for frames in C.drain(rcv, idle_s):
        f = frames[-1]
        if f[:1] == b"D":
            got.append(_seq(f))
    out.update(C.fates(sent, [], got))
    if efsm:
        out["behaviour"] = "efsm"
    elif again:
        out["behaviour"] = "blocks" if not dontwait else "eagain"
    elif out["never_received"]:
        out["behaviour"] = "drops"
    else:
        out["behaviour"] = "delivered_all"
    snd.close(0)
    rcv.close(0)
    ctx.term()
    return out


_K = (
    "behaviour",
    "accepted_before_block",
    "again_count",
    "blocked_in_send_s",
    "never_received",
    "received_in_drain",
    "send_error",
    "kernel_tx_queue_bytes",
    "kernel_rx_queue_bytes",
)


def _slim(r):
    return {k: r[k] for k in _K if k in r}


def claim_001_2(reps: int = 3, transports=("ipc", "tcp", "inproc"), senders=tuple(PAIRS)) -> dict:
    """Every sender type with SNDHWM=RCVHWM=10, non-reading receiver."""
    out = {}
    for tr in transports:
        size, n = (16384, 6000) if tr == "tcp" else (1024, 20000)
        for st in senders:
            out["%s/%s" % (tr, st)] = [
                _slim(hwm_behaviour(st, tr, 10, 10, size, n)) for _ in range(reps)
            ]
        out["%s/ROUTER+ROUTER_MANDATORY" % tr] = [
            _slim(hwm_behaviour("ROUTER", tr, 10, 10, size, n, router_mandatory=True))
            for _ in range(reps)
        ]
    return out


def claim_001_3(reps: int = 3, transports=("ipc", "tcp", "inproc")) -> dict:
    """RCVHWM=10 on the receiver, sender unlimited (SNDHWM=0): if the
    receiver discarded at its RCVHWM, only ~10 would arrive."""
    out = {}
    for tr in transports:
        for st in ("PUSH", "PUB", "DEALER"):
            out["%s/%s" % (tr, st)] = [
                _slim(hwm_behaviour(st, tr, 0, 10, 1024, 20000)) for _ in range(reps)
            ]
    return out


def claim_001_4(reps: int = 3, transports=("ipc", "tcp")) -> dict:
    """PUB (and XPUB, XPUB+XPUB_NODROP) at HWM with DONTWAIT."""
    out = {}
    for tr in transports:
        size, n = (16384, 6000) if tr == "tcp" else (1024, 20000)
        out["%s/PUB" % tr] = [
            _slim(hwm_behaviour("PUB", tr, 10, 10, size, n, dontwait=True)) for _ in range(reps)
        ]
        out["%s/XPUB" % tr] = [
            _slim(hwm_behaviour("XPUB", tr, 10, 10, size, n, dontwait=True)) for _ in range(reps)
        ]
        out["%s/XPUB+XPUB_NODROP" % tr] = [
            _slim(hwm_behaviour("XPUB", tr, 10, 10, size, n, dontwait=True, xpub_nodrop=True))
            for _ in range(reps)
        ]
    return out


# ------------------------------------------------------------------ 001-5
def _proxy_child(conn, variant, n_messages, pub_interval, sub_delay, size, idle_s):
    """The post's code: proxy thread, publisher thread, subscriber in main.
    variant: 'faulty' (as posted), 'fixed' (as posted: HWM set *after*
    bind/connect), 'fixed_before' (same HWMs set before bind/connect)."""
    context = zmq.Context()
    eps, ready = {}, threading.Event()
    pub_log = {"sent": [], "dropped_again": [], "t_send": {}}
    pub_done = threading.Event()

    def proxy_thread(context):
        xsub = context.socket(zmq.XSUB)
        xsub.bind("tcp://127.0.0.1:0")
        xpub = context.socket(zmq.XPUB)
        if variant == "fixed_before":
            xpub.setsockopt(zmq.SNDHWM, 100)
        xpub.bind("tcp://127.0.0.1:0")
        if variant == "fixed":
            xpub.setsockopt(zmq.SNDHWM, 100)  # as posted: after bind
        eps["xsub"] = xsub.getsockopt_string(zmq.LAST_ENDPOINT)
        eps["xpub"] = xpub.getsockopt_string(zmq.LAST_ENDPOINT)
        ready.set()
        try:
            zmq.proxy(xsub, xpub)
        except zmq.ContextTerminated:
            pass
        xsub.close(0)
        xpub.close(0)

    def publisher(context):
        pub = context.socket(zmq.PUB)
        if variant == "fixed_before":
            pub.setsockopt(zmq.SNDHWM, 100)
        pub.connect(eps["xsub"])
        if variant == "faulty":
            pub.setsockopt(zmq.RCVHWM, 100)  # as posted: wrong option
        elif variant == "fixed":
            pub.setsockopt(zmq.SNDHWM, 100)  # as posted: after connect
        for i in range(n_messages):
            m = ("Message %d" % i).encode() if size is None else C.payload(i, size)
            try:
                if variant == "faulty":
                    pub.send(m)
                else:
                    pub.send(m, zmq.DONTWAIT)
                pub_log["sent"].append(i)
                pub_log["t_send"][i] = C.now_ns()
            except zmq.Again:
                pub_log["dropped_again"].append(i)
            time.sleep(pub_interval)
        pub_log["pub_sock"] = pub  # closed by main after the drain
        pub_done.set()

    threading.Thread(target=proxy_thread, args=(context,), daemon=True).start()
    ready.wait(5)
    threading.Thread(target=publisher, args=(context,), daemon=True).start()
    sub = context.socket(zmq.SUB)
    sub.connect(eps["xpub"])
    sub.setsockopt_string(zmq.SUBSCRIBE, "")
    rss0 = C.rss_kb()
    during = []
    while not pub_done.is_set():
        fr = C.recv_timeout(sub, 0.5)
        if fr is None:
            continue
        during.append(_seq_text(fr[0], size))
        time.sleep(sub_delay)  # slow subscriber
    drained = [_seq_text(f[0], size) for f in C.drain(sub, idle_s)]
    rss1 = C.rss_kb()
    sent = pub_log["sent"]
    res = C.fates(sent, during, drained)
    first = min(during + drained) if during + drained else None
    lost_before = [s for s in sent if first is not None and s < first]
    res.update(
        variant=variant,
        n_messages=n_messages,
        size=size,
        again_raised=len(pub_log["dropped_again"]),
        lost_before_subscription=len(lost_before),
        never_received_after_subscription=res["never_received"] - len(lost_before),
        backlog_at_pub_end=len(sent) - len(during) - len(lost_before),
        process_rss_growth_kb=rss1 - rss0,
    )
    sub.close(0)
    pub_log.get("pub_sock") and pub_log["pub_sock"].close(0)
    context.term()  # ends zmq.proxy with ETERM; proxy thread closes its sockets
    return res


def _seq_text(b: bytes, size):
    return int(b.split()[1]) if size is None else C.parse(b)[0]


def proxy_run(
    variant: str = "faulty",
    n_messages: int = 1000,
    pub_interval: float = 0.01,
    sub_delay: float = 1.0,
    size: int | None = None,
    idle_s: float = 1.0,
) -> dict:
    """001-5: the post's PUB -> XSUB/XPUB proxy -> SUB code (threads in one
    child process, as posted).  The SUB is slow (``sub_delay`` s per message)
    while the publisher sends; then it drains until idle.  Reports fates,
    EAGAINs raised in the publisher (the post's 'Dropped' log), messages
    lost before the subscription reached the PUB, and the backlog."""
    ch = C.Child(
        _proxy_child,
        variant=variant,
        n_messages=n_messages,
        pub_interval=pub_interval,
        sub_delay=sub_delay,
        size=size,
        idle_s=idle_s,
    )
    return ch.result(n_messages * pub_interval * 2 + 60)


def claim_001_5(
    reps: int = 3,
    n_messages: int = 1000,
    sizes=(None, 65536),
    variants=("faulty", "fixed", "fixed_before"),
) -> dict:
    keys, kws = [], []
    for size in sizes:
        n = n_messages if size is None else min(n_messages, 400)
        for v in variants:
            for _ in range(reps):
                keys.append("size=%s/%s" % (size, v))
                kws.append(dict(variant=v, n_messages=n, size=size))
    # sleep-dominated (100 msg/s, SUB 1 msg/s); run 3 at a time
    runs = C.pmap(proxy_run, kws, workers=3)
    out: dict = {}
    keep = (
        "sent",
        "received_during_run",
        "received_in_drain",
        "never_received",
        "again_raised",
        "lost_before_subscription",
        "never_received_after_subscription",
        "backlog_at_pub_end",
        "process_rss_growth_kb",
        "first_never_received",
        "error",
        "blocked",
    )
    for k, r in zip(keys, runs):
        out.setdefault(k, []).append({x: r.get(x) for x in keep if x in r})
    return out


# ------------------------------------------------------------------ 001-6
def monitor_events_at_hwm(transport: str = "ipc", sender: str = "PUB") -> dict:
    """001-6: does pyzmq/libzmq have EVENT_SND_HWM, and which monitor events
    does a ``sender`` socket emit while it is driven past its HWM?"""
    out = {
        "has_EVENT_SND_HWM": hasattr(zmq, "EVENT_SND_HWM"),
        "event_constants": sorted(n for n in dir(zmq) if n.startswith("EVENT_")),
    }
    ctx = zmq.Context()
    snd = ctx.socket(getattr(zmq, sender))
    mon = snd.get_monitor_socket(zmq.EVENT_ALL)
    snd.setsockopt(zmq.SNDHWM, 10)
    snd.setsockopt(zmq.LINGER, 0)
    rcv = ctx.socket(getattr(zmq, PAIRS[sender]))
    rcv.setsockopt(zmq.RCVHWM, 10)
    rcv.setsockopt(zmq.LINGER, 0)
    if PAIRS[sender] == "SUB":
        rcv.setsockopt(zmq.SUBSCRIBE, b"")
    ep = C.bind(rcv, transport)
    snd.connect(ep)
    time.sleep(0.3)
    again = 0
    for i in range(20000):
        try:
            snd.send(_msg(i, 1024), zmq.DONTWAIT)
        except zmq.Again:
            again += 1
            break
    time.sleep(0.3)
    names = {getattr(zmq, n): n for n in out["event_constants"] if isinstance(getattr(zmq, n), int)}
    events = []
    while mon.poll(100):
        ev = zmq.utils.monitor.recv_monitor_message(mon)
        events.append(names.get(ev["event"], ev["event"]))
    out.update(
        sender=sender, transport=transport, sends_attempted=i + 1, again=again, events_seen=events
    )
    snd.disable_monitor()
    for s in (mon, snd, rcv):
        s.close(0)
    ctx.term()
    return out


# ------------------------------------------------------------------ 001-7
def claim_001_7(
    reps: int = 3, transports=("inproc", "ipc", "tcp"), sizes=(100, 16384, 1048576)
) -> dict:
    """PUSH(SNDHWM=10) -> non-reading PULL(RCVHWM=10): how many messages /
    bytes are accepted before the sender blocks (blocking send with
    SNDTIMEO=200 ms, which lets the I/O thread move data into the kernel)
    or gets EAGAIN (DONTWAIT in a tight loop), per message size."""
    out = {}
    for tr in transports:
        for sz in sizes:
            n = max(50, min(200000, (64 << 20) // sz))
            for dw in (False, True):
                runs = [
                    hwm_behaviour("PUSH", tr, 10, 10, sz, n, dontwait=dw, idle_s=0.5)
                    for _ in range(reps)
                ]
                out["%s/size=%d/%s" % (tr, sz, "dontwait" if dw else "blocking")] = [
                    {
                        "accepted_before_block": r["accepted_before_block"],
                        "accepted_bytes": r["accepted_before_block"] * sz,
                        "blocked": bool(r["again_count"]),
                        "never_received": r["never_received"],
                    }
                    for r in runs
                ]
    return out


def collect(quick: bool = False) -> dict:
    if quick:
        return {
            "001-1": default_hwms(),
            "001-2": claim_001_2(reps=1, transports=("ipc",), senders=("PUSH", "PUB", "ROUTER")),
            "001-3": claim_001_3(reps=1, transports=("inproc",)),
            "001-4": claim_001_4(reps=1, transports=("ipc",)),
            "001-5": claim_001_5(
                reps=1, n_messages=150, sizes=(None,), variants=("faulty", "fixed")
            ),
            "001-6": monitor_events_at_hwm(),
            "001-7": claim_001_7(reps=1, transports=("ipc",), sizes=(100, 1048576)),
        }
    # 001-5 is sleep-paced (100 msg/s, SUB 1 msg/s, ~70 s in all): run it in
    # the background while the in-process HWM tests run
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as ex:
        f5 = ex.submit(claim_001_5)
        out = {
            "001-1": default_hwms(),
            "001-2": claim_001_2(),
            "001-3": claim_001_3(),
            "001-4": claim_001_4(),
            "001-6": [
                monitor_events_at_hwm(tr, s) for tr in ("ipc", "tcp") for s in ("PUB", "PUSH")
            ],
            "001-7": claim_001_7(),
        }
        out["001-5"] = f5.result()
    return out


if __name__ == "__main__":
    C.main(collect)
