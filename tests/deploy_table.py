"""What a rolling restart costs (docs/DEPLOYS.md): runs at 50k msg/s whose consumers are restarted
in turn, or whose producer is, each row's loss checked against numpy over the Parquet records.

    python tests/deploy_table.py [ROW,ROW...]     # the rows' numbers; all without
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pyarrow.parquet as pq

BASE = ["--transport", "tcp", "--consumers", "3", "--rate", "50k", "--duration", "8"]
ROLLING = ["--restart", "c0@2,c1@4,c2@6"]
SLOW = ["--restart", "p0@4", "--consumer-delay-us", "70"]  # 3 x 14k/s: a backlog at the producer
ROWS = [  # pattern, --restart-mode, what else
    ("push-pull", "close", ROLLING),
    ("push-pull", "kill", ROLLING),
    ("push-pull", "freeze", [*ROLLING, "--restart-gap-ms", "500"]),
    ("push-pull", "kill", [*ROLLING, "--immediate"]),
    ("push-pull", "kill", [*ROLLING, "--rcvhwm", "100", "--sndhwm", "100"]),
    ("pub-sub", "close", ROLLING),
    ("pub-sub", "kill", ROLLING),
    ("pub-sub", "freeze", [*ROLLING, "--restart-gap-ms", "500"]),
    ("proxy", "kill", ROLLING),
    ("push-pull", "close", [*SLOW, "--linger", "0"]),
    ("push-pull", "close", [*SLOW, "--linger", "1000"]),
    ("push-pull", "kill", SLOW),
]
FAN_OUT = ("pub-sub", "proxy")  # every consumer is sent every message


def lost_by_numpy(run_dir: str, consumers: int) -> int:
    """Accepted sends times the consumers each is for, minus the distinct deliveries received."""
    sends = pq.read_table(os.path.join(run_dir, "sends"), columns=["stream", "seq", "status"])
    recvs = pq.read_table(os.path.join(run_dir, "recvs"), columns=["consumer", "stream", "seq"])
    ok = sends["status"].to_numpy() == 0
    sent = np.unique(
        sends["stream"].to_numpy()[ok].astype(np.int64) << 40 | sends["seq"].to_numpy()[ok]
    )
    key = recvs["stream"].to_numpy().astype(np.int64) << 40 | recvs["seq"].to_numpy()
    key = key + (recvs["consumer"].to_numpy().astype(np.int64) << 56)
    got = np.unique(key) if consumers > 1 else np.unique(key & ((1 << 56) - 1))
    return len(sent) * consumers - len(got)


def row(out: str, pattern: str, mode: str, extra: list[str]) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "zmqload",
        "run",
        "--pattern",
        pattern,
        *BASE,
        "--restart-mode",
        mode,
        *extra,
    ]
    done = subprocess.run([*cmd, "--out", out], capture_output=True, text=True)
    if done.returncode != 0:
        return [" ".join(cmd[3:]), f"exit {done.returncode}: {done.stderr.strip()[-200:]}"]
    run_dir = sorted(glob.glob(os.path.join(out, "run=*")))[-1]
    meta = json.load(open(os.path.join(run_dir, "run.json")))
    c, restarts = meta["counters"], meta["restarts"]
    fan = 3 if pattern in FAN_OUT else 1
    numpy_lost = lost_by_numpy(run_dir, fan)
    other = c["dropped"] - c["dropped_restart"]

    def spread(values: list[float], unit: str = "") -> str:
        lo, hi = min(values), max(values)
        return f"{lo:,.0f}{unit}" if lo == hi else f"{lo:,.0f}-{hi:,.0f}{unit}"

    return [
        " ".join(cmd[4:]).replace(" ".join(BASE) + " ", ""),
        f"{c['dropped_restart']:,}" + (f" (+{other:,} other drops)" if other else ""),
        "same" if numpy_lost == c["dropped"] else f"DIFFERS: {numpy_lost:,}",
        spread([r["lost"] for r in restarts]),
        spread([r["down_ns"] / 1e6 for r in restarts], " ms"),
        spread([r["first_recv_after_up_ns"] / 1e6 for r in restarts], " ms"),
        spread([r["backlog_drained_after_up_ns"] / 1e6 for r in restarts], " ms"),
    ]


def main() -> None:
    chosen = [int(x) for x in sys.argv[1].split(",")] if len(sys.argv) > 1 else range(len(ROWS))
    head = [
        "run (" + " ".join(BASE) + ")",
        "lost at restarts",
        "numpy over the records",
        "lost per restart",
        "down",
        "first message after up",
        "held back, drained after up",
    ]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    with tempfile.TemporaryDirectory(prefix="zmqload-deploys-") as out:
        for i in chosen:
            cells = row(os.path.join(out, str(i)), *ROWS[i])
            print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
