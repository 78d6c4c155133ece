"""Claims users keep reporting in the libzmq and pyzmq issue trackers (U).

U-1 (libzmq #4394) needs an HWM set after bind/connect, which a zmqload run never does
(its workers set every option before): it is measured with the engine's own sockets, one
PUB and one SUB in this process (two contexts), next to ordinary runs for the fates.
U-2 and U-3 are ordinary runs.
"""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

from .. import _engine
from ..kernelq import TcpQueues, ports_of
from .framework import DOES_NOT_HOLD, HOLDS, Outcome, Scenario, ScenarioRunner, Verdict, depends, facts, fates_line, ms

_SEQ = struct.Struct("<q")
WHEN = ("before", "after")            # an HWM set before or after the socket's bind/connect
PROBE_DEADLINE_S = 20                 # every probe wait is bounded by this


# ---------------------------------------------------------------------------- U-1
class _PubSub:
    """A PUB (binds) and a SUB (connects) in this process, each with its own context, whose
    options are set before or after bind/connect as asked."""

    def __init__(self):
        self.contexts = (_engine.Context(), _engine.Context())
        self.pub = _engine.Socket(self.contexts[0], _engine.SOCKET_TYPES["PUB"])
        self.sub = _engine.Socket(self.contexts[1], _engine.SOCKET_TYPES["SUB"])
        for sock in (self.pub, self.sub):
            sock.set_option(_engine.OPTIONS["LINGER"], 0)
        self.kernel = TcpQueues([])

    def connect(self, endpoint: str, pub_before=None, pub_after=None, sub_before=None, sub_after=None) -> bool:
        _set(self.pub, pub_before)
        endpoint = self.pub.bind(endpoint)
        _set(self.pub, pub_after)
        self.sub.subscribe(b"")
        _set(self.sub, sub_before)
        self.sub.connect(endpoint)
        _set(self.sub, sub_after)
        self.kernel = TcpQueues(ports_of([endpoint]))
        return self._await_subscription()

    def _await_subscription(self) -> bool:
        """Publish one-byte probes until the SUB hears one (its subscription reached the PUB)."""
        deadline = time.monotonic() + PROBE_DEADLINE_S / 4
        while time.monotonic() < deadline:
            self.pub.send_bytes(b"P")
            if self.sub.recv_bytes(10) is not None:
                while self.sub.recv_bytes(100) is not None:
                    pass
                return True
        return False

    def getsockopt(self) -> dict:
        """What getsockopt says (the option value, not necessarily what the pipes use)."""
        return {"pub_sndhwm": self.pub.get_option(_engine.OPTIONS["SNDHWM"]),
                "sub_rcvhwm": self.sub.get_option(_engine.OPTIONS["RCVHWM"])}

    def burst_then_drain(self, n: int, size: int) -> dict:
        """Publish n messages of `size` bytes as fast as possible while the SUB reads nothing,
        let the I/O threads settle, sample the kernel queues, then drain the SUB until idle:
        whatever never arrives was dropped (a PUB's only loss: its pipe was full)."""
        body = b"x" * (size - _SEQ.size)
        for seq in range(n):
            self.pub.send_bytes(_SEQ.pack(seq) + body)
        time.sleep(0.3)
        sendq, recvq = self.kernel.sample()
        seen = set()
        deadline = time.monotonic() + PROBE_DEADLINE_S
        while time.monotonic() < deadline:
            message = self.sub.recv_bytes(300)
            if message is None:
                break
            if len(message) >= _SEQ.size:
                seen.add(_SEQ.unpack_from(message)[0])
        kernel = sendq + recvq if sendq >= 0 else None
        return {"sent": n, "arrived": len(seen), "dropped": n - len(seen), "kernel_bytes": kernel,
                "kernel_messages": None if kernel is None else kernel // (size + 9)}   # 9: ZMTP long frame header

    def close(self) -> None:
        for sock in (self.pub, self.sub):
            sock.close(0)
        for context in self.contexts:
            context.term()


def _when(when: str, call: str) -> str:
    return "not at all" if when == "never" else f"{when} {call}"


def _set(sock, options) -> None:
    for name, value in (options or {}).items():
        sock.set_option(_engine.OPTIONS[name], value)


def _probe(transport: str, n: int, size: int, **phases) -> dict:
    """One PUB/SUB pair with options set in the given phases (pub_before, pub_after,
    sub_before, sub_after), one burst, then the drain."""
    ipc_dir = tempfile.mkdtemp(prefix="zmqload-u1-")
    pair = _PubSub()
    try:
        endpoint = "tcp://127.0.0.1:*" if transport == "tcp" else f"ipc://{os.path.join(ipc_dir, 'u1')}"
        subscribed = pair.connect(endpoint, **{k: v for k, v in phases.items() if not k.endswith("never")})
        return {"subscribed": subscribed, **pair.getsockopt(), **pair.burst_then_drain(n, size)}
    finally:
        pair.close()
        shutil.rmtree(ipc_dir, ignore_errors=True)


ZERO = {"SNDHWM": 0, "RCVHWM": 0}
TINY_KERNEL = {"SNDBUF": 4096, "RCVBUF": 4096}
SUB_LIMITED_KERNEL_BYTES = 256 * 1024   # a SUB that stopped reading leaves MBs in the kernel


def hwm_zero(r: ScenarioRunner) -> Outcome:
    """SNDHWM=RCVHWM=0 set before or after bind (PUB) and connect (SUB), or not at all, and
    the issue's burst of 1 KiB messages to a SUB that is not reading yet; then the HWM each
    side really uses; and ordinary zmqload runs (options set before bind/connect) for the
    fates."""
    transports = r.scale(("tcp", "ipc"), ("tcp",))
    n, size = r.scale(50_000, 20_000), 1024
    measured, figures = [], {"matrix": {}, "pub_in_force": {}, "runs": {}}
    for transport in transports:
        for pub_when in WHEN + ("never",):
            for sub_when in WHEN + ("never",):
                p = _probe(transport, n, size, **{f"pub_{pub_when}": ZERO, f"sub_{sub_when}": ZERO})
                figures["matrix"][f"{transport}/pub-{pub_when}/sub-{sub_when}"] = p
                measured.append(f"{transport}, HWM 0 set on the PUB {_when(pub_when, 'bind')}, on the SUB "
                                f"{_when(sub_when, 'connect')}: "
                                f"getsockopt SNDHWM {p['pub_sndhwm']}, RCVHWM {p['sub_rcvhwm']}; {p['arrived']:,} "
                                f"of {n:,} arrived, {p['dropped']:,} dropped"
                                + (f"; the kernel held {p['kernel_bytes']:,} B" if p["kernel_bytes"] is not None
                                   else ""))
        # The PUB's HWM in force: behind it a SUB that holds ~nothing (HWM 1, 4 KiB kernel
        # buffers), so what survives the burst is what the PUB's own pipe held.
        for when in WHEN + ("never",):
            phases = {"sub_before": {**TINY_KERNEL, "SNDHWM": 1, "RCVHWM": 1}, "pub_before": dict(TINY_KERNEL)}
            if when != "never":
                phases[f"pub_{when}"] = {**phases.get(f"pub_{when}", {}), **ZERO}
            p = _probe(transport, n, size, **phases)
            p["held"] = None if p["dropped"] == 0 else p["arrived"] - 1 - (p["kernel_messages"] or 0)
            figures["pub_in_force"][f"{transport}/pub-{when}"] = p
            measured.append(f"{transport}, the PUB's HWM in force with 0 set {_when(when, 'bind')} (getsockopt "
                            f"{p['pub_sndhwm']}): " + (f"no limit, all {n:,} held" if p["held"] is None else
                                                        f"its pipe held ~{p['held']:,}, {p['dropped']:,} dropped"))
    for variant, hwm in (("hwm-0", 0), ("hwm-default", None)):
        res = r.run(variant, pattern="pub-sub", transport="tcp", size=size, count=n, sndhwm=hwm, rcvhwm=hwm,
                    consumer_delay_us=20, drain_timeout_ms=300)
        f = facts(res)
        figures["runs"][variant] = f
        measured.append(f"zmqload run, SNDHWM=RCVHWM={'0' if hwm == 0 else 'default'} set before bind/connect, "
                        f"unpaced PUB, SUB at 20 us/message: {fates_line(f)}; queue peak "
                        f"{f['queue_peak'].get('messages', 0):,}")
    return Outcome([_u1_verdict(figures, n)], measured, figures)


def _dropped(f: dict) -> int:
    return f["dropped_start"] + f["dropped_mid"] + f["dropped_tail"]


def _sub_in_force(matrix: dict) -> dict:
    """The SUB's HWM in force (tcp): behind an unlimited PUB, a SUB whose limit is in force
    stops reading and leaves the kernel buffers full; one without a limit leaves them empty."""
    return {k.replace("/pub-before", ""): ("limited" if p["kernel_bytes"] >= SUB_LIMITED_KERNEL_BYTES else "none")
            for k, p in matrix.items() if "/pub-before/" in k and p["kernel_bytes"] is not None}


def _u1_verdict(figures: dict, n: int) -> Verdict:
    matrix, pub_force = figures["matrix"], figures["pub_in_force"]
    both = {k: p for k, p in matrix.items() if "never" not in k}       # the claim: 0 on both sides
    lossy = sorted(k for k, p in both.items() if p["dropped"])
    clean = sorted(set(both) - set(lossy))
    run0 = figures["runs"]["hwm-0"]
    sub_force = _sub_in_force(matrix)
    measurements = {"dropped": {k: p["dropped"] for k, p in matrix.items()},
                    "getsockopt": {k: [p["pub_sndhwm"], p["sub_rcvhwm"]] for k, p in both.items()},
                    "pub_hwm_in_force": {k: "none" if p["held"] is None else p["held"] for k, p in pub_force.items()},
                    "sub_hwm_in_force": sub_force,
                    "run_hwm0_dropped": _dropped(run0), "run_default_dropped": _dropped(figures["runs"]["hwm-default"])}
    if len(lossy) == len(both):
        return Verdict("U-1", HOLDS, "every placement of HWM 0 dropped: " + ", ".join(
            f"{k} {both[k]['dropped']:,}" for k in lossy) + f" of {n:,}", measurements)
    if not lossy and not _dropped(run0):
        return Verdict("U-1", DOES_NOT_HOLD, f"no placement of HWM 0 dropped any of {n:,}; the zmqload run dropped "
                       f"{_dropped(run0):,}", measurements)
    by_pub = all(("/pub-after/" in k) == (k in lossy) for k in both)
    condition = ("on when the PUB sets it: after bind it still drops (the default 1000 stays in force), "
                 "before bind nothing is dropped; when the SUB sets it does not matter" if by_pub else
                 f"on where and when HWM 0 is set: drops with {', '.join(lossy)}")
    worst = max(lossy, key=lambda k: both[k]["dropped"])
    held = [p["held"] for k, p in pub_force.items() if k.endswith("pub-after") and p["held"] is not None]
    because = (f"{worst}: {both[worst]['dropped']:,} of {n:,} dropped although getsockopt says "
               f"{both[worst]['pub_sndhwm']}/{both[worst]['sub_rcvhwm']}"
               + (f", the PUB's pipe held ~{max(held):,}" if held else "")
               + "; " + (", ".join(f"{k} {both[k]['dropped']:,}" for k in clean) or "no placement") + " dropped; "
               f"zmqload run with HWM 0 set before: {_dropped(run0):,} dropped")
    return Verdict("U-1", depends(condition), because, measurements)


SCENARIOS = (
    Scenario("hwm-zero-after-bind", "PUB/SUB with SNDHWM=RCVHWM=0 set before or after bind/connect, on each side "
             "(libzmq #4394)", ("U-1",), hwm_zero),
)
