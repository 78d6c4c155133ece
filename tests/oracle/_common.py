"""Shared helpers for the oracle experiments (no zmqload imports).

Conventions used by every experiment:

* A message's *fate* is one of
  - ``received_during_run``: received while the experiment's normal phase ran,
  - ``received_in_drain``: received only after the normal phase, when the
    receiver read as fast as it could until it saw no message for
    ``idle_s`` seconds (the message was *still queued* somewhere),
  - ``never_received``: not received even after the drain (*dropped*).
* Anything that may block forever runs in a child process (``spawn``) with a
  deadline; a child that misses it is killed and reported as
  ``{"blocked": True, "blocked_for_at_least_s": N, "last_event": ...}``.
* Times are ``time.monotonic_ns()`` (CLOCK_MONOTONIC, shared by all processes
  on Linux), so one-way latencies across processes are meaningful.
"""

from __future__ import annotations

import atexit
import json
import multiprocessing as mp
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
import uuid

import zmq

_MP = mp.get_context("spawn")
_TMPDIRS: list[str] = []

HEADER = struct.Struct("<qq")  # seq, t_send_ns


def versions() -> dict:
    """Versions of what is measured: pyzmq and the libzmq *bundled with pyzmq*."""
    return {
        "pyzmq": zmq.pyzmq_version(),
        "libzmq": zmq.zmq_version(),
        "libzmq_note": "libzmq bundled with pyzmq (not the system libzmq 4.3.4 zmqload links)",
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }


def now_ns() -> int:
    return time.monotonic_ns()


# ---------------------------------------------------------------- endpoints
def _tmpdir() -> str:
    d = tempfile.mkdtemp(prefix="zmqoracle-")
    _TMPDIRS.append(d)
    return d


@atexit.register
def _cleanup_tmpdirs() -> None:
    for d in _TMPDIRS:
        shutil.rmtree(d, ignore_errors=True)


def ipc_endpoint() -> str:
    """A fresh ipc:// endpoint in a private temp directory."""
    return "ipc://%s/%s" % (_tmpdir(), uuid.uuid4().hex[:8])


def free_tcp_endpoint() -> str:
    """A tcp endpoint on 127.0.0.1 whose port was free a moment ago (for
    experiments where the connecting side must start before the binder)."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "tcp://127.0.0.1:%d" % port


def bind(sock: zmq.Socket, transport: str) -> str:
    """Bind ``sock`` on a fresh endpoint of ``transport`` ('tcp', 'ipc' or
    'inproc'); return the endpoint peers should connect to."""
    if transport == "tcp":
        sock.bind("tcp://127.0.0.1:0")
        return sock.getsockopt_string(zmq.LAST_ENDPOINT)
    if transport == "ipc":
        ep = ipc_endpoint()
        sock.bind(ep)
        return ep
    if transport == "inproc":
        ep = "inproc://%s" % uuid.uuid4().hex
        sock.bind(ep)
        return ep
    raise ValueError(transport)


def endpoint(transport: str) -> str:
    """An endpoint to bind later (tcp: a port that was free; ipc: temp path)."""
    return free_tcp_endpoint() if transport == "tcp" else ipc_endpoint()


# ---------------------------------------------------------------- payloads
def payload(seq: int, size: int) -> bytes:
    """``size`` bytes (at least 16) carrying seq and the send time."""
    head = HEADER.pack(seq, now_ns())
    return head + b"x" * max(0, size - len(head))


def parse(msg: bytes) -> tuple[int, int]:
    """(seq, t_send_ns) of a payload() message."""
    return HEADER.unpack_from(msg)


# ---------------------------------------------------------------- memory
def rss_kb() -> int:
    """This process's resident set size (VmRSS) in kB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


# ---------------------------------------------------------------- kernel queues
def tcp_queues(port: int) -> dict:
    """Bytes the kernel holds for TCP sockets with local or remote ``port``
    (from /proc/net/tcp{,6}: tx_queue = sent but unacked/unsent, rx_queue =
    received but not read by the application)."""
    tx = rx = n = 0
    for fn in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(fn) as f:
                next(f)
                for line in f:
                    p = line.split()
                    lport = int(p[1].split(":")[1], 16)
                    rport = int(p[2].split(":")[1], 16)
                    if port in (lport, rport) and p[3] == "01":  # ESTABLISHED
                        t, r = p[4].split(":")
                        tx += int(t, 16)
                        rx += int(r, 16)
                        n += 1
        except FileNotFoundError:
            pass
    return {"kernel_tx_queue_bytes": tx, "kernel_rx_queue_bytes": rx, "tcp_sockets": n}


def port_of(ep: str) -> int | None:
    return int(ep.rsplit(":", 1)[1]) if ep.startswith("tcp://") else None


# ---------------------------------------------------------------- receiving
def drain(sock: zmq.Socket, idle_s: float = 1.0, max_s: float = 30.0) -> list:
    """Read everything ``sock`` delivers until it is idle for ``idle_s``
    seconds (bounded by ``max_s``).  Returns the list of frames-lists."""
    out = []
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    end = time.monotonic() + max_s
    while time.monotonic() < end:
        if not poller.poll(int(idle_s * 1000)):
            break
        while True:
            try:
                out.append(sock.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                break
            except zmq.ZMQError as e:  # REQ/REP: EFSM after one message
                if e.errno == zmq.EFSM:
                    return out
                raise
    return out


def recv_timeout(sock: zmq.Socket, timeout_s: float):
    """One message (frames list) or None after ``timeout_s``."""
    if sock.poll(int(timeout_s * 1000), zmq.POLLIN):
        return sock.recv_multipart()
    return None


def fates(sent: list[int], during: list[int], drained: list[int]) -> dict:
    """Count messages by fate given seq lists."""
    s, d, r = set(sent), set(during), set(drained)
    never = s - d - r
    return {
        "sent": len(s),
        "received_during_run": len(d & s),
        "received_in_drain": len((r - d) & s),
        "never_received": len(never),
        "never_received_seqs_sample": sorted(never)[:10],
        "first_never_received": min(never) if never else None,
        "last_never_received": max(never) if never else None,
        "duplicates_or_unknown": len((d | r) - s),
    }


def stats(values: list[float]) -> dict:
    """min / median / mean / max / stdev of a list (empty -> {})."""
    if not values:
        return {}
    v = sorted(values)
    return {
        "n": len(v),
        "min": v[0],
        "median": statistics.median(v),
        "p90": v[min(len(v) - 1, int(0.9 * len(v)))],
        "p99": v[min(len(v) - 1, int(0.99 * len(v)))],
        "max": v[-1],
        "mean": statistics.fmean(v),
    }


def spread(runs: list[dict], key: str) -> dict:
    """min/max/values of ``key`` over repeated runs (for repeatability)."""
    vals = [r.get(key) for r in runs]
    num = [v for v in vals if isinstance(v, (int, float))]
    return {"values": vals, "min": min(num) if num else None, "max": max(num) if num else None}


# ---------------------------------------------------------------- children
class Child:
    """A spawned child process running ``target(conn, **kwargs)``.

    The child reports progress with ``conn.send({"event": name, ...})`` and
    its result with ``conn.send({"result": {...}})``.  The parent may send it
    control messages on the same pipe.
    """

    def __init__(self, target, **kwargs):
        self.conn, child_conn = _MP.Pipe()
        self.proc = _MP.Process(target=_child_main, args=(child_conn, target, kwargs), daemon=True)
        self.proc.start()
        self.events: list[dict] = []

    def wait_event(self, name: str, timeout: float) -> dict | None:
        """Wait for the child's event ``name`` (or result); None on timeout."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.conn.poll(max(0.0, min(0.1, end - time.monotonic()))):
                try:
                    m = self.conn.recv()
                except EOFError:
                    return None
                self.events.append(m)
                if m.get("event") == name or "result" in m:
                    return m
            elif not self.proc.is_alive() and not self.conn.poll():
                return None
        return None

    def send(self, obj) -> None:
        self.conn.send(obj)

    def result(self, timeout: float, exit_timeout: float = 5.0) -> dict:
        """The child's result dict, or a 'blocked' record after killing it.

        After the result arrives the child's interpreter exits normally (GC,
        atexit); ``process_exit_s`` is how long that took, or
        ``exit_blocked_for_at_least_s`` if it had to be killed."""
        t0 = time.monotonic()
        m = self.wait_event("__result__", timeout)
        if m is not None and "result" in m:
            t1 = time.monotonic()
            self.proc.join(exit_timeout)
            r = m["result"]
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5)
                r["exit_blocked_for_at_least_s"] = exit_timeout
            else:
                r["process_exit_s"] = round(time.monotonic() - t1, 3)
            r.setdefault("blocked", False)
            return r
        if time.monotonic() - t0 < timeout:  # pipe closed early: child is exiting
            self.proc.join(max(0.0, min(3.0, timeout - (time.monotonic() - t0))))
        alive = self.proc.is_alive()
        if alive:
            self.proc.kill()
        self.proc.join(5)
        last = [e for e in self.events if "event" in e]
        return {
            "blocked": alive,
            "blocked_for_at_least_s": round(time.monotonic() - t0, 2) if alive else None,
            "exitcode": self.proc.exitcode,
            "last_event": last[-1] if last else None,
            "events": last,
        }


def _child_main(conn, target, kwargs):
    try:
        res = target(conn, **kwargs)
        conn.send({"result": res})
    except Exception as e:  # report, don't hide
        conn.send({"result": {"error": repr(e)}})


def event(conn, name: str, **kw) -> None:
    """Child-side progress report with a monotonic timestamp."""
    kw.update(event=name, t_ns=now_ns())
    conn.send(kw)


# ---------------------------------------------------------------- main helper
def main(collect, argv=None) -> None:
    """``python -m tests.oracle.X [--json] [--quick]``: run ``collect(quick)``."""
    argv = sys.argv[1:] if argv is None else argv
    quick = "--quick" in argv
    t0 = time.monotonic()
    out = {"versions": versions(), "quick": quick}
    out.update(collect(quick))
    out["elapsed_s"] = round(time.monotonic() - t0, 1)
    if "--json" in argv:
        print(json.dumps(out, indent=1, default=str))
    else:
        import pprint

        pprint.pprint(out, width=120)


def pmap(fn, kwargs_list: list[dict], workers: int = 4) -> list:
    """Run ``fn(**kw)`` for each kw, up to ``workers`` at a time (threads in
    the parent; the experiments themselves run in child processes).  Only
    for sleep-dominated experiments whose outcome does not hinge on CPU."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(lambda kw: fn(**kw), kwargs_list))
