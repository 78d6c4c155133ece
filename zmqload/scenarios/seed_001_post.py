"""Seed 001's own example, as posted, run through pyzmq: a PUB -> XSUB | zmq.proxy | XPUB
-> SUB chain in three threads of one process, the publisher paced by time.sleep(0.01), the
subscriber sleeping 1 s per message; the post's faulty version (RCVHWM 100 on the PUB,
blocking sends, nothing on the XPUB) and its fix (SNDHWM 100 on the PUB after connect and
on the XPUB after bind, DONTWAIT sends that count zmq.Again as "Dropped").

What had to change to make it a measurement, and nothing else: loopback endpoints on
free ports (the post's fixed 5556/5557 would collide), a bounded message count, and a
bounded end: the post's subscriber would sleep through 1,000 s of messages, so once the
publisher is done it reads what is still queued as fast as it can (a message that arrives
then was waiting, one that never does was dropped), and every socket is closed so the
context's term cannot hang. Messages carry the post's text, "Message <i>".
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ..runner.kernel_queues import TcpQueues
from .framework import bounded

HWM = 100  # the post's SNDHWM (and its misplaced RCVHWM)
PUBLISH_INTERVAL_S = 0.01  # the post's time.sleep(0.01): 100 msg/s
SUBSCRIBER_DELAY_S = 1.0  # the post's time.sleep(1)
DRAIN_IDLE_S = 1.0  # the drain ends after this long without a message ...
DRAIN_LIMIT_S = 30.0  # ... or after this long in all
VARIANTS = ("faulty", "fixed")


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def run_post(variant: str, n_messages: int) -> dict[str, Any]:
    """The post's three functions, one variant. Returns the sends and the EAGAINs ("Dropped"
    lines), what the subscriber received while the publisher ran and in the drain, and what
    waited where when the publisher finished (kernel tcp bytes of the chain's two
    connections, both ends being in this process)."""
    import zmq

    fixed = variant == "fixed"
    context = zmq.Context()
    endpoints: dict[str, str] = {}
    proxy_ready, published = threading.Event(), threading.Event()
    log: dict[str, Any] = {"sent": [], "dropped": [], "pub": None}

    def proxy_thread() -> None:
        xsub = context.socket(zmq.XSUB)
        xsub.bind("tcp://127.0.0.1:0")
        xpub = context.socket(zmq.XPUB)
        xpub.bind("tcp://127.0.0.1:0")
        if fixed:
            xpub.setsockopt(zmq.SNDHWM, HWM)  # as posted: after bind
        endpoints.update(
            xsub=xsub.getsockopt_string(zmq.LAST_ENDPOINT),
            xpub=xpub.getsockopt_string(zmq.LAST_ENDPOINT),
        )
        log["xpub_sndhwm"] = xpub.getsockopt(zmq.SNDHWM)
        proxy_ready.set()
        try:
            zmq.proxy(xsub, xpub)
        except zmq.ContextTerminated:  # our bounded end
            pass
        xsub.close(0)
        xpub.close(0)

    def publisher() -> None:
        pub = context.socket(zmq.PUB)
        pub.connect(endpoints["xsub"])
        pub.setsockopt(zmq.SNDHWM if fixed else zmq.RCVHWM, HWM)  # as posted: after connect
        log.update(pub=pub, pub_sndhwm=pub.getsockopt(zmq.SNDHWM))
        for i in range(n_messages):
            try:
                pub.send(f"Message {i}".encode(), zmq.DONTWAIT if fixed else 0)
                log["sent"].append(i)
            except zmq.Again:
                log["dropped"].append(i)  # the post prints "Dropped: Message i"
            time.sleep(PUBLISH_INTERVAL_S)
        published.set()

    threading.Thread(target=proxy_thread, daemon=True).start()
    if not proxy_ready.wait(10):
        raise RuntimeError("the post's proxy thread did not bind within 10 s")
    rss_start = _rss_kb()
    threading.Thread(target=publisher, daemon=True).start()
    sub = context.socket(zmq.SUB)
    sub.connect(endpoints["xpub"])
    sub.setsockopt_string(zmq.SUBSCRIBE, "")
    sub_rcvhwm = sub.getsockopt(zmq.RCVHWM)  # neither version sets it
    kernel = TcpQueues(int(endpoints[k].rsplit(":", 1)[1]) for k in ("xsub", "xpub"))
    during: list[int] = []
    deadline = time.monotonic() + n_messages * PUBLISH_INTERVAL_S * 3 + 30
    while not published.is_set() and time.monotonic() < deadline:
        if sub.poll(100):
            during.append(int(sub.recv().split()[1]))
            time.sleep(SUBSCRIBER_DELAY_S)
    kernel_bytes = sum(kernel.sample())
    rss_at_end = _rss_kb()
    drained: list[int] = []
    drain_end = time.monotonic() + DRAIN_LIMIT_S
    while time.monotonic() < drain_end and sub.poll(int(DRAIN_IDLE_S * 1000)):
        drained.append(int(sub.recv().split()[1]))
    sub.close(0)
    if log["pub"] is not None:
        log["pub"].close(0)  # the post never closes it: term would hang
    term_s, term_returned = bounded(context.term, 10)  # ends zmq.proxy (ETERM)
    sent, got = log["sent"], set(during) | set(drained)
    first = min(got) if got else None
    before = [i for i in sent if first is None or i < first]
    return {
        "variant": variant,
        "messages": n_messages,
        "pub_sndhwm": log.get("pub_sndhwm"),
        "xpub_sndhwm": log.get("xpub_sndhwm"),
        "sub_rcvhwm": sub_rcvhwm,
        "published": published.is_set(),
        "sent": len(sent),
        "eagain": len(log["dropped"]),
        "received_during": len(during),
        "drained": len(set(drained) - set(during)),
        "lost_before_subscription": len(
            before
        ),  # slow joiner: sent before the SUB's subscription arrived
        "lost_after_subscription": len(set(sent) - got) - len(before),
        # sent, not lost to the slow joiner, not yet received when the publisher finished
        "waiting_at_end": len(sent) - len(before) - len(during),
        "kernel_bytes_at_end": kernel_bytes,
        "rss_growth_kb": rss_at_end - rss_start,
        "term_s": round(term_s, 3),
        "term_returned": term_returned,
    }


def run_both(n_messages: int) -> dict[str, dict[str, Any]]:
    """Both variants at once, each in its own context (the runs are paced by sleeps, so
    sharing the process costs them nothing measurable)."""
    results: dict[str, dict[str, Any]] = {}
    errors: list[BaseException] = []

    def one(variant: str) -> None:
        try:
            results[variant] = run_post(variant, n_messages)
        except BaseException as e:  # reported below, in this thread
            errors.append(e)

    threads = [threading.Thread(target=one, args=(v,), daemon=True) for v in VARIANTS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(n_messages * PUBLISH_INTERVAL_S * 3 + DRAIN_LIMIT_S + 60)
    if errors:
        raise errors[0]
    missing = [v for v in VARIANTS if v not in results]
    if missing:
        raise RuntimeError(f"the post's code did not finish in time: {', '.join(missing)}")
    return results
