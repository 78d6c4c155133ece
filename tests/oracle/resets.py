"""Connection resets on a plain pyzmq PUSH/PULL pair (U-6, U-8): the oracle for zmqload's --reset-at.

A PUSH in this process, paced, connected over tcp to a PULL in a process of its own that does
`work_us` of busy work per message (a slow receiver keeps a backlog in flight); at each reset time the
pair's tcp connection is aborted by the kernel with `ss -K` (root or CAP_NET_ADMIN), as zmqload does,
but nothing of zmqload is used: the seqs are in the payload, what arrived is what the PULL wrote.

    python -m tests.oracle.resets --json [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import zmq

_PULL = r"""
import sys, time, zmq
work_s, immediate, out = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ctx = zmq.Context()
pull = ctx.socket(zmq.PULL)
pull.immediate = immediate
pull.bind("tcp://127.0.0.1:0")
print(pull.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)
seqs = []
while pull.poll(3000):
    seqs.append(int(pull.recv()[:12]))
    end = time.perf_counter() + work_s
    while time.perf_counter() < end:
        pass
with open(out, "w") as f:
    f.write(" ".join(map(str, seqs)))
"""


def pair_with_resets(
    tmp_dir: str,
    rate: int,
    seconds: float,
    resets_s: list[float],
    work_us: float,
    immediate: bool = False,
) -> tuple[int, list[int], list[int]]:
    """`rate` msg/s for `seconds` from the PUSH to the PULL, the connection aborted at each of
    `resets_s`; ZMQ_IMMEDIATE on both sides if asked. Returns (messages sent, seqs received in
    order, the first seq sent after each reset)."""
    out = os.path.join(tmp_dir, f"pulled-{time.monotonic_ns()}.txt")
    pull = subprocess.Popen(
        [sys.executable, "-c", _PULL, str(work_us / 1e6), str(int(immediate)), out],
        stdout=subprocess.PIPE,
        text=True,
    )
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.immediate = int(immediate)
    try:
        assert pull.stdout is not None
        endpoint = pull.stdout.readline().strip()
        port = endpoint.rpartition(":")[2]
        push.connect(endpoint)
        push.send(b"%012d" % 0)  # connected and heard before the clock starts
        t0, sent, boundaries, due = time.monotonic(), 1, [], list(resets_s)
        while sent < rate * seconds:
            now = time.monotonic() - t0
            if due and now >= due[0]:
                subprocess.run(
                    [
                        "ss",
                        "-K",
                        "-t",
                        "-n",
                        "state",
                        "established",
                        "(",
                        "sport",
                        "=",
                        f":{port}",
                        "or",
                        "dport",
                        "=",
                        f":{port}",
                        ")",
                    ],
                    capture_output=True,
                    check=True,
                )
                boundaries.append(sent)
                due.pop(0)
            while sent < min(rate * now, rate * seconds):
                push.send(b"%012d" % sent)
                sent += 1
            time.sleep(0.0005)
        assert pull.wait(timeout=120) == 0
        with open(out) as f:
            got = [int(x) for x in f.read().split()]
    finally:
        push.close(linger=5000)
        ctx.term()
        if pull.poll() is None:
            pull.kill()
        if os.path.exists(out):
            os.remove(out)
    return sent, got, boundaries


def seq_runs(seqs: np.ndarray) -> list[tuple[int, int]]:
    """Sorted seqs as [first, last] runs of consecutive ones."""
    if not len(seqs):
        return []
    breaks = np.flatnonzero(np.diff(seqs) != 1)
    starts, ends = np.r_[0, breaks + 1], np.r_[breaks, len(seqs) - 1]
    return [(int(seqs[a]), int(seqs[b])) for a, b in zip(starts, ends)]


def lost_at_resets(work_us: float, immediate: bool, seconds: float = 2.0) -> dict:
    """One pair at 20,000 msg/s, resets at 0.5 and 1.2 s: what it lost and where."""
    with tempfile.TemporaryDirectory() as tmp:
        sent, got, boundaries = pair_with_resets(
            tmp, 20_000, seconds, [0.5, 1.2], work_us, immediate
        )
    missing = np.setdiff1d(np.arange(sent), np.array(got))
    return {
        "work_us": work_us,
        "immediate": immediate,
        "sent": sent,
        "lost": int(missing.size),
        "lost_runs": seq_runs(missing),
        "reset_boundaries": boundaries,
        "duplicates": len(got) - len(set(got)),
        "pyzmq": zmq.pyzmq_version(),
        "libzmq": zmq.zmq_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    cells = [
        lost_at_resets(work, immediate, 1.5 if args.quick else 2.0)
        for work in (0.0, 80.0)
        for immediate in (False, True)
    ]
    print(json.dumps(cells, indent=2) if args.json else "\n".join(map(str, cells)))


if __name__ == "__main__":
    main()
