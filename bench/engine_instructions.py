"""Instructions per message of the engine's send and receive loops, counted by callgrind (repeatable
where time is not): one Sender fills an inproc PUSH -> PULL pipe in one thread, one Receiver empties
it; the count for N messages less the count for none, over N.

    valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/engine_instructions.py N SIZE
    python bench/engine_instructions.py --compare N SIZE [PYTHONPATH ...]   # each tree, 0 and N messages

BENCH_LIBZMQ=pyzmq|system|PATH picks the libzmq of a tree whose engine loads it at run time
(--libzmq's words); a tree linked at build time runs the one it was linked to.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys


def exchange(n: int, size: int) -> None:
    import numpy as np
    from zmqload import _engine as e

    if os.environ.get("BENCH_LIBZMQ"):
        from zmqload import libzmq

        libzmq.use(libzmq.describe(os.environ["BENCH_LIBZMQ"]))
    ctx = e.Context(1)
    push, pull = e.Socket(ctx, e.SOCKET_TYPES["PUSH"]), e.Socket(ctx, e.SOCKET_TYPES["PULL"])
    for sock, name in ((push, "SNDHWM"), (pull, "RCVHWM")):
        sock.set_option(e.SOCKET_OPTION_IDS[name], 0)  # unlimited: one thread fills, then empties
        sock.set_option(e.SOCKET_OPTION_IDS["LINGER"], 0)
    pull.bind("inproc://count")
    push.connect("inproc://count")
    sender = e.Sender(push, 0, size, n, 0, e.now_ns())
    receiver = e.Receiver(pull)
    t_sent, status = np.zeros(n + 1, np.int64), np.zeros(n + 1, np.int8)  # room to see the end
    row = 0
    while not sender.finished:
        row = sender.run_slice(t_sent, status, row, e.now_ns() + 10_000_000_000)
    columns = (
        np.zeros(max(n, 1), np.uint64),
        np.zeros(max(n, 1), np.int64),
        np.zeros(max(n, 1), np.int64),
        np.zeros(max(n, 1), np.intc),
    )
    got = 0
    while got < n:
        got = receiver.run_slice(*columns, got, e.now_ns() + 1_000_000_000)
    assert receiver.received == n, (receiver.received, n)
    push.close(0)
    pull.close(0)
    ctx.term()


def instructions(n: int, size: int, pythonpath: str) -> int:
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            __file__,
            str(n),
            str(size),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=pythonpath),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return int(re.search(r"Collected : (\d+)", done.stderr).group(1))


def main() -> None:
    if sys.argv[1] != "--compare":
        exchange(int(sys.argv[1]), int(sys.argv[2]))
        return
    n, size, trees = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    for tree in trees:
        per = (instructions(n, size, tree) - instructions(0, size, tree)) / n
        print(
            f"{tree}: {per:,.1f} instructions per message (send + receive), {size} B, {n:,} messages"
        )


if __name__ == "__main__":
    main()
