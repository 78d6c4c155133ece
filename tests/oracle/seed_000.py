"""Seed 000: zeromq-dev, 2014-02-10, "Effect of RCVHWM on pull socket at
context termination?" (J. Kamens; libzmq 3.2.4 / pyzmq 14 there).

The post's script (Python 2, with the connect/bind/send/sleep/term lines
missing from the archived copy) is reconstructed in ``push_pull_run``'s
defaults: a PUSH in a separate process connects to ``ipc://...``, sends 10
messages ``str(i)`` over 2 s (sleep 0.2 s after each), prints 'Sender
exiting' and ends; the main process's PULL sets RCVHWM=1, binds, and receives
10 messages sleeping 0.4 s after each.  How the sender ends is the open
variable (``exit_mode``):

* ``term_open``  - ``ctx.term()`` with the socket still open (the script's
  most literal reading: the post is about *context termination*),
* ``close_term`` - ``sock.close(); ctx.term()`` (LINGER as set, default -1),
* ``os_exit``    - ``os._exit(0)`` without close/term (what multiprocessing's
  fork start method does after the target returns),
* ``interp_exit``- return without close; the interpreter exits normally
  (GC / atexit of pyzmq decide).

Claims: 000-1, 000-2, 000-3, 000-4.
"""

from __future__ import annotations

import os
import time

import zmq

from . import _common as C


# ------------------------------------------------------------------ children
def _sender(conn, addr, num_messages, send_duration, exit_mode, sndhwm, linger, size):
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    if sndhwm is not None:
        sock.setsockopt(zmq.SNDHWM, sndhwm)
    if linger is not None:
        sock.setsockopt(zmq.LINGER, linger)
    sock.connect(addr)
    rss0 = C.rss_kb()
    rss_max = rss0
    sleep_time = float(send_duration) / num_messages
    send_block_s = 0.0
    t_start = C.now_ns()
    for i in range(num_messages):
        msg = str(i).encode() if size is None else C.payload(i, size)
        t0 = time.monotonic()
        sock.send(msg)
        send_block_s += time.monotonic() - t0
        if sleep_time:
            time.sleep(sleep_time)
        if i % 50 == 0:
            rss_max = max(rss_max, C.rss_kb())
    rss_max = max(rss_max, C.rss_kb())
    C.event(
        conn,
        "sender_exiting",
        send_block_s=round(send_block_s, 3),
        send_loop_s=round((C.now_ns() - t_start) / 1e9, 3),
        sender_rss_growth_kb=rss_max - rss0,
    )
    if exit_mode == "term_open":
        C.event(conn, "term_start")
        ctx.term()
        C.event(conn, "term_done")
    elif exit_mode == "close_term":
        sock.close()
        C.event(conn, "term_start")
        ctx.term()
        C.event(conn, "term_done")
    elif exit_mode == "os_exit":
        C.event(conn, "os_exit")
        os._exit(0)
    elif exit_mode == "interp_exit":
        pass
    else:
        raise ValueError(exit_mode)
    return {"send_block_s": round(send_block_s, 3), "sender_rss_growth_kb": rss_max - rss0}


def _receiver(conn, addr, num_messages, receive_duration, rcvhwm, recv_timeout_s, idle_s):
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    if rcvhwm is not None:
        sock.setsockopt(zmq.RCVHWM, rcvhwm)
    sock.bind(addr)
    rss0 = C.rss_kb()
    rss_max = rss0
    C.event(conn, "bound")
    sleep_time = float(receive_duration) / num_messages
    during, t_recv = [], {}
    for i in range(num_messages):
        # the first message may wait for the sender process to start
        frames = C.recv_timeout(sock, recv_timeout_s if i else 60)
        if frames is None:
            break
        seq = _seq(frames[0])
        during.append(seq)
        t_recv[seq] = C.now_ns()
        if sleep_time:
            time.sleep(sleep_time)
        rss_max = max(rss_max, C.rss_kb())
    drained = []
    for frames in C.drain(sock, idle_s):
        seq = _seq(frames[0])
        drained.append(seq)
        t_recv[seq] = C.now_ns()
    rss_max = max(rss_max, C.rss_kb())
    sock.close(0)
    ctx.term()
    return {
        "during": during,
        "drained": drained,
        "t_recv": t_recv,
        "receiver_rss_growth_kb": rss_max - rss0,
    }


def _seq(b: bytes) -> int:
    return int(b) if len(b) < 16 else C.parse(b)[0]


# ------------------------------------------------------------------ experiment
def push_pull_run(
    transport: str = "ipc",
    num_messages: int = 10,
    send_duration: float = 2.0,
    receive_duration: float = 4.0,
    rcvhwm: int | None = 1,
    sndhwm: int | None = None,
    linger: int | None = None,
    exit_mode: str = "close_term",
    size: int | None = None,
    recv_timeout_s: float = 3.0,
    idle_s: float = 1.0,
    sender_timeout_s: float | None = None,
) -> dict:
    """One run of 000's PUSH->PULL script (defaults = the post's values).

    ``size=None`` sends the post's ``str(i)`` messages, otherwise ``size``-byte
    payloads.  ``None`` for rcvhwm/sndhwm/linger means "not set" (libzmq
    default).  Returns fates (sent / received_during_run / received_in_drain
    / never_received), whether and how long the sender's ``ctx.term()``
    blocked, how many messages the receiving application had when
    ``term()`` returned, and RSS growth on both sides.  A sender whose
    term()/exit has not finished ``sender_timeout_s`` after its last send is
    killed and reported as blocked for at least that long.
    """
    addr = C.endpoint(transport)
    if sender_timeout_s is None:  # from the end of sending to the end of term()/exit
        sender_timeout_s = receive_duration + 6
    snd = C.Child(
        _sender,
        addr=addr,
        num_messages=num_messages,
        send_duration=send_duration,
        exit_mode=exit_mode,
        sndhwm=sndhwm,
        linger=linger,
        size=size,
    )
    rcv = C.Child(
        _receiver,
        addr=addr,
        num_messages=num_messages,
        receive_duration=receive_duration,
        rcvhwm=rcvhwm,
        recv_timeout_s=recv_timeout_s,
        idle_s=idle_s,
    )
    # the deadline for a block starts when the sender has finished sending
    # (child start-up under load must not count as blocking)
    snd.wait_event("sender_exiting", send_duration + num_messages * 0.1 + 60)
    s_res = snd.result(sender_timeout_s)
    r_res = rcv.result(receive_duration + num_messages * 0.5 + 60)
    ev = {e["event"]: e for e in snd.events if "event" in e}
    out = {
        "transport": transport,
        "num_messages": num_messages,
        "rcvhwm": rcvhwm,
        "sndhwm": sndhwm,
        "linger": linger,
        "exit_mode": exit_mode,
        "size": size,
    }
    out.update(
        C.fates(list(range(num_messages)), r_res.get("during", []), r_res.get("drained", []))
    )
    out["receiver_rss_growth_kb"] = r_res.get("receiver_rss_growth_kb")
    ex = ev.get("sender_exiting", {})
    out["sender_rss_growth_kb"] = ex.get("sender_rss_growth_kb")
    out["sender_send_block_s"] = ex.get("send_block_s")
    out["sender_send_loop_s"] = ex.get("send_loop_s")
    t_recv = {int(k): v for k, v in r_res.get("t_recv", {}).items()}
    if "term_start" in ev:
        if "term_done" in ev:
            t_done = ev["term_done"]["t_ns"]
            out["term_blocked_s"] = round((t_done - ev["term_start"]["t_ns"]) / 1e9, 3)
            out["app_had_at_term_return"] = sum(1 for t in t_recv.values() if t <= t_done)
            last = max(t_recv.values()) if t_recv else None
            out["last_recv_after_term_return_s"] = round((last - t_done) / 1e9, 3) if last else None
        else:
            out["term_blocked_s"] = None
            out["term_blocked_for_at_least_s"] = s_res.get("blocked_for_at_least_s")
    out["sender_blocked"] = s_res.get("blocked")
    out["sender_blocked_for_at_least_s"] = s_res.get("blocked_for_at_least_s")
    out["sender_exit_blocked_for_at_least_s"] = s_res.get("exit_blocked_for_at_least_s")
    out["sender_process_exit_s"] = s_res.get("process_exit_s")
    if "error" in s_res or "error" in r_res:
        out["error"] = [s_res.get("error"), r_res.get("error")]
    return out


def _reps(n, fn, **kw):
    return [fn(**kw) for _ in range(n)]


_KEYS = (
    "sent",
    "received_during_run",
    "received_in_drain",
    "never_received",
    "term_blocked_s",
    "term_blocked_for_at_least_s",
    "app_had_at_term_return",
    "sender_blocked",
    "sender_exit_blocked_for_at_least_s",
    "sender_rss_growth_kb",
    "receiver_rss_growth_kb",
    "sender_send_block_s",
    "first_never_received",
)


def _slim(r):
    return {k: r.get(k) for k in _KEYS if k in r}


def claim_000_1_2_3(
    reps: int = 3,
    transports=("ipc", "tcp"),
    rcvhwms=(1, 10, None),
    exit_modes=("close_term", "term_open", "os_exit", "interp_exit"),
    send_duration: float = 2.0,
    receive_duration: float = 4.0,
    sender_timeout_s: float = 5.0,
) -> dict:
    """The post's script across RCVHWM x sender exit mode x transport
    (``send_duration``/``receive_duration`` are the post's 2 s / 4 s)."""
    keys, kws = [], []
    for tr in transports:
        for mode in exit_modes:
            for h in rcvhwms:
                for _ in range(reps):
                    keys.append("%s/%s/rcvhwm=%s" % (tr, mode, h))
                    kws.append(
                        dict(
                            transport=tr,
                            rcvhwm=h,
                            exit_mode=mode,
                            send_duration=send_duration,
                            receive_duration=receive_duration,
                            sender_timeout_s=sender_timeout_s,
                        )
                    )
    # sleep-dominated (10 tiny messages over 2-4 s): run 6 at a time
    runs = C.pmap(push_pull_run, kws, workers=6)
    out: dict = {}
    for k, r in zip(keys, runs):
        out.setdefault(k, []).append(_slim(r))
    return out


def claim_000_2_condition(
    reps: int = 3, transports=("ipc", "tcp"), rcvhwms=(1, 10, 100, None), num_messages: int = 100
) -> dict:
    """Is '10 or default fixes it' about the HWM value or about the message
    count?  ``num_messages`` tiny messages sent in 0.5 s, PULL reads one per
    20 ms, sender close+term; per RCVHWM and transport."""
    keys, kws = [], []
    for tr in transports:
        for h in rcvhwms:
            for _ in range(reps):
                keys.append("%s/rcvhwm=%s" % (tr, h))
                kws.append(
                    dict(
                        transport=tr,
                        rcvhwm=h,
                        num_messages=num_messages,
                        send_duration=0.5,
                        receive_duration=2.0,
                        exit_mode="close_term",
                    )
                )
    runs = C.pmap(push_pull_run, kws, workers=6)
    out: dict = {}
    for k, r in zip(keys, runs):
        out.setdefault(k, []).append(_slim(r))
    return out


def claim_000_1_bulk(reps: int = 3, transports=("ipc", "tcp")) -> dict:
    """Does term() wait until the PULL *application* has every message?
    Bulk variant: 400 x 64 kB sent at once, PULL reads 1 per 10 ms, default
    HWMs and LINGER, close+term."""
    kws = [
        dict(
            transport=tr,
            num_messages=400,
            send_duration=0,
            receive_duration=4.0,
            rcvhwm=None,
            exit_mode="close_term",
            size=65536,
        )
        for tr in transports
        for _ in range(reps)
    ]
    runs = C.pmap(push_pull_run, kws, workers=3)  # receiver-paced: 10 ms per message
    out: dict = {}
    for kw, r in zip(kws, runs):
        out.setdefault(kw["transport"], []).append(
            _slim(r) | {"last_recv_after_term_return_s": r.get("last_recv_after_term_return_s")}
        )
    return out


CANDIDATES_000_4 = {
    # name: (sndhwm, rcvhwm, linger, exit_mode)
    "default_hwm_close_term": (None, None, None, "close_term"),
    "hwm10_both_close_term": (10, 10, None, "close_term"),
    "sndhwm10_rcvhwm1_close_term": (10, 1, None, "close_term"),
    "hwm10_both_linger0_close_term": (10, 10, 0, "close_term"),
    "hwm10_both_exit_without_close": (10, 10, None, "os_exit"),
    "hwm0_unbounded_close_term": (0, 0, None, "close_term"),
}


def claim_000_4(
    reps: int = 3,
    transport: str = "ipc",
    num_messages: int = 300,
    size: int = 100_000,
    receive_duration: float = 3.0,
    candidates=None,
) -> dict:
    """000's goal: every message delivered AND bounded memory at both ends,
    when the PULL falls behind.  Sender blasts ``num_messages`` x ``size``
    bytes (no sleep) and ends; PULL reads one per receive_duration/n s."""
    keys, kws = [], []
    for name, (sh, rh, lg, mode) in (candidates or CANDIDATES_000_4).items():
        for _ in range(reps):
            keys.append(name)
            kws.append(
                dict(
                    transport=transport,
                    num_messages=num_messages,
                    send_duration=0,
                    receive_duration=receive_duration,
                    rcvhwm=rh,
                    sndhwm=sh,
                    linger=lg,
                    exit_mode=mode,
                    size=size,
                )
            )
    runs = C.pmap(push_pull_run, kws, workers=3)  # receiver-paced
    out: dict = {}
    for k, r in zip(keys, runs):
        out.setdefault(k, []).append(_slim(r))
    return out


def collect(quick: bool = False) -> dict:
    if quick:
        return {
            # the post's timings halved; the RCVHWM=1 tail loss still shows
            "000-1_2_3": claim_000_1_2_3(
                reps=1,
                transports=("ipc",),
                rcvhwms=(1, None),
                exit_modes=("close_term", "term_open"),
                send_duration=1.0,
                receive_duration=2.0,
                sender_timeout_s=3.0,
            ),
            "000-2_condition": claim_000_2_condition(reps=1, transports=("ipc",), rcvhwms=(10,)),
            "000-4": claim_000_4(
                reps=1,
                num_messages=150,
                receive_duration=1.0,
                candidates={
                    k: CANDIDATES_000_4[k]
                    for k in ("hwm10_both_close_term", "hwm10_both_exit_without_close")
                },
            ),
        }
    return {
        "000-1_2_3": claim_000_1_2_3(reps=3),
        "000-2_condition": claim_000_2_condition(reps=3),
        "000-1_bulk": claim_000_1_bulk(reps=3),
        "000-4": claim_000_4(reps=3),
    }


if __name__ == "__main__":
    C.main(collect)
