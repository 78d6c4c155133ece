"""Where a PUB's missing messages were lost, by close order (plain pyzmq, no zmqload code).

The U-2 setup: HWM 1 on PUB and SUB, a SUB doing `delay_s` of work per message while the
PUB (a child process, its own libzmq) sends `n` messages at `rate`; then either
  * ``producer-first``: the PUB closes right after its last send (LINGER -1 unless given),
    while the SUB stops working and reads what is queued until idle, or
  * ``after-drain``: the PUB keeps its socket open until the SUB has read until idle, then
    closes, and the SUB reads until idle again.
The SUB records which seqs it had at the moment the PUB's close returned (`had_at_close`)
and at the end (`arrived`), so each missing message is known to have been missing before
the close, and the arrivals after it show whether anything was still in flight then.

Run: python -m tests.oracle.close_order [ipc|tcp] [producer-first|after-drain]
"""

from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import sys
import tempfile
import time

import zmq

HEADER = struct.Struct("<q")  # seq
PROBE = b"P"  # before the start: until the SUB hears one (slow joiner)

PUBLISHER = r"""
import os, select, struct, sys, time, zmq
endpoint, n, rate, size, linger = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
order = sys.argv[6]
ctx = zmq.Context(); pub = ctx.socket(zmq.PUB); pub.sndhwm = 1; pub.linger = linger
pub.bind(endpoint); print("endpoint", pub.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)
def line(timeout):
    return sys.stdin.readline().strip() if select.select([sys.stdin], [], [], timeout)[0] else ""
deadline = time.monotonic() + 10
while line(0.01) != "go" and time.monotonic() < deadline:
    pub.send(b"P")
body = b"x" * (size - 8); t0 = time.monotonic()
for seq in range(n):
    time.sleep(max(0.0, t0 + seq / rate - time.monotonic()))
    pub.send(struct.pack("<q", seq) + body)
print("done", flush=True)
if order == "after-drain":
    deadline = time.monotonic() + 60
    while line(0.1) != "close" and time.monotonic() < deadline:
        pass
t = time.monotonic_ns(); pub.close(); close_ns = time.monotonic_ns() - t
print("closed", close_ns, flush=True)
t = time.monotonic_ns(); ctx.term(); print("termed", time.monotonic_ns() - t, flush=True)
"""


class _Lines:
    """The publisher's stdout, read without blocking."""

    def __init__(self, proc):
        self.proc, self.buf = proc, b""

    def poll(self, timeout: float = 0.0) -> list[str]:
        out = []
        while select.select([self.proc.stdout], [], [], timeout)[0]:
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                break
            self.buf += chunk
            timeout = 0.0
        while b"\n" in self.buf:
            raw, self.buf = self.buf.split(b"\n", 1)
            out.append(raw.decode())
        return out


def _read_until_idle(sub, seen: set, idle_s: float, limit_s: float = 30.0) -> None:
    """Read as fast as possible until nothing arrived for idle_s (bounded by limit_s)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end and sub.poll(int(idle_s * 1000)):
        message = sub.recv()
        if message != PROBE:
            seen.add(HEADER.unpack_from(message)[0])


def close_order_run(
    transport: str = "ipc",
    order: str = "producer-first",
    n: int = 60,
    rate: float = 200,
    delay_s: float = 0.05,
    size: int = 64,
    linger: int = -1,
    idle_s: float = 0.3,
) -> dict:
    """One run of the setup above; see the module docstring. Every wait is bounded."""
    ipc_dir = tempfile.mkdtemp(prefix="zmqoracle-close-")
    endpoint = "tcp://127.0.0.1:*" if transport == "tcp" else f"ipc://{ipc_dir}/pub"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            PUBLISHER,
            endpoint,
            str(n),
            str(rate),
            str(size),
            str(linger),
            order,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    lines = _Lines(proc)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.rcvhwm, sub.linger = 1, 0
    sub.subscribe(b"")
    events: dict[str, int] = {}
    seen: set[int] = set()
    had_at_done = had_at_close = None
    try:
        first, deadline = [], time.monotonic() + 60  # a loaded machine starts Python slowly
        while not first and time.monotonic() < deadline and proc.poll() is None:
            first = lines.poll(0.1)
        sub.connect(first[0].split()[1])
        deadline = time.monotonic() + 10
        while not sub.poll(10) and time.monotonic() < deadline:
            pass
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 30 + n / rate
        while (
            "done" not in events and time.monotonic() < deadline
        ):  # the run: slow work per message
            if sub.poll(10):
                message = sub.recv()
                if message != PROBE:
                    seen.add(HEADER.unpack_from(message)[0])
                    time.sleep(delay_s)
            for line in lines.poll():
                events[line.split()[0]] = int(line.split()[1]) if len(line.split()) > 1 else 0
        had_at_done = set(seen)
        if order == "after-drain":
            _read_until_idle(sub, seen, idle_s)
            had_at_close = set(seen)
            proc.stdin.write(b"close\n")
            proc.stdin.flush()
            deadline = time.monotonic() + 30
            while "closed" not in events and time.monotonic() < deadline:
                for line in lines.poll(0.05):
                    events[line.split()[0]] = int(line.split()[1]) if len(line.split()) > 1 else 0
        else:
            # the PUB closes right after its last send; note what had arrived when its close returned
            deadline = time.monotonic() + 30
            while "closed" not in events and time.monotonic() < deadline:
                if sub.poll(1):
                    message = sub.recv()
                    if message != PROBE:
                        seen.add(HEADER.unpack_from(message)[0])
                for line in lines.poll():
                    events[line.split()[0]] = int(line.split()[1]) if len(line.split()) > 1 else 0
            had_at_close = set(seen)
        _read_until_idle(sub, seen, idle_s)
        proc.stdin.close()
        proc.wait(timeout=30)
        for line in lines.poll():
            events[line.split()[0]] = int(line.split()[1]) if len(line.split()) > 1 else 0
    finally:
        sub.close(0)
        ctx.term()
        if proc.poll() is None:
            proc.kill()
        for name in os.listdir(ipc_dir):
            os.unlink(os.path.join(ipc_dir, name))
        os.rmdir(ipc_dir)
    missing = sorted(set(range(n)) - seen)
    last = max(seen) if seen else -1
    return {
        "transport": transport,
        "order": order,
        "sent": n,
        "size": size,
        "rate": rate,
        "linger": linger,
        "arrived": len(seen),
        "missing": len(missing),
        "missing_after_last_arrival": sum(1 for s in missing if s > last),
        "missing_at_close": len(set(range(n)) - had_at_close),
        "arrived_after_close": len(seen - had_at_close),
        "arrived_before_done": len(had_at_done),
        "close_ns": events.get("closed"),
        "term_ns": events.get("termed"),
    }


if __name__ == "__main__":
    transport = sys.argv[1] if len(sys.argv) > 1 else "ipc"
    orders = sys.argv[2:] or ["producer-first", "after-drain"]
    for order in orders:
        print(json.dumps(close_order_run(transport, order, n=200, rate=100, delay_s=0.1)))
