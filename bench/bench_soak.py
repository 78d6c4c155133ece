"""Soak runs (issue 30): the peak memory of every process at several run lengths must not grow
with the run. One `zmqload run` per length (push-pull, tcp, 64 B, unpaced, one producer and one
consumer), its controller a process of its own: its peak is the kernel's VmHWM, read from /proc
while it runs; each worker's is run.json's max_rss_kb. The run's counters are checked against
pyarrow over its Parquet files, a file at a time (constant memory while the seqs rise), and the
run directory is removed afterwards (a billion messages write ~12 GB), or with ZMQLOAD_SOAK_KEEP=DIR
moved under DIR for a report over it (bench_report.py's ZMQLOAD_BENCH_RUN_DIR).

    ZMQLOAD_SOAK_MESSAGES=100M,400M,1G .venv/bin/python -m pytest bench/bench_soak.py \\
        -o python_files="bench_*.py" -s --benchmark-only

Memory figures are valid on a shared machine (RSS moves little with other load); times are not.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import SMOKE

SUFFIX = {"k": 10**3, "M": 10**6, "G": 10**9}


def _count(text: str) -> int:
    return int(float(text[:-1]) * SUFFIX[text[-1]]) if text[-1] in SUFFIX else int(text)


KEEP = os.environ.get("ZMQLOAD_SOAK_KEEP")
"""A directory the runs are moved to instead of removed."""

LENGTHS = (
    [200_000]
    if SMOKE
    else [_count(t) for t in os.environ.get("ZMQLOAD_SOAK_MESSAGES", "20M,100M").split(",")]
)


def _hwm_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    except (OSError, StopIteration):
        return 0


def run_measured(messages: int, out: str) -> tuple[dict, int, float]:
    """(run.json, the controller's peak RSS in kB, wall seconds) of one unpaced run."""
    name = f"soak-{messages}"
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zmqload",
            "run",
            "--pattern",
            "push-pull",
            "--transport",
            "tcp",
            "--size",
            "64",
            "--count",
            str(messages),
            "--out",
            out,
            "--run-name",
            name,
            "--quiet",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = [0]

    def watch() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], _hwm_kb(proc.pid))  # VmHWM only rises: the last read before exit
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _, err = proc.communicate(timeout=3600)
    watcher.join()
    assert proc.returncode == 0, err
    with open(os.path.join(out, f"run={name}", "run.json")) as f:
        return json.load(f), peak[0], time.monotonic() - started


def _recv_seqs(run_dir: str):
    """(consumer, stream, seqs) of every receive part, one part at a time, in write order."""
    for path in sorted(glob.glob(os.path.join(run_dir, "recvs", "*.parquet"))):
        t = pq.read_table(path, columns=["consumer", "stream", "seq"])
        consumer, stream, seq = (t.column(c).to_numpy() for c in ("consumer", "stream", "seq"))
        keys = np.unique(consumer.astype(np.int64) << 16 | stream).tolist()
        for key in keys:
            c, s = key >> 16, key & 0xFFFF
            yield c, s, seq if len(keys) == 1 else seq[(consumer == c) & (stream == s)]


def counters_from_records(run_dir: str) -> dict[str, int]:
    """sent (send rows with status ok), received (receive rows) and unique_received from the
    Parquet files, one at a time: while each consumer's seqs rise from file to file (one tcp
    connection delivers in order), every row is a new seq, in constant memory; otherwise a second
    pass over packed maps of the seqs seen (count/8 bytes per stream: push-pull, one union)."""
    sent = 0
    for path in sorted(glob.glob(os.path.join(run_dir, "sends", "*.parquet"))):
        sent += int(
            np.count_nonzero(
                pq.read_table(path, columns=["status"]).column("status").to_numpy() == 0
            )
        )
    received = 0
    last: dict[tuple[int, int], int] = {}
    rising = True
    for c, s, q in _recv_seqs(run_dir):
        received += len(q)
        rising = rising and bool(np.all(np.diff(q) > 0)) and int(q[0]) > last.get((c, s), -1)
        last[(c, s)] = int(q[-1])
    if rising:
        return {"sent": sent, "received": received, "unique_received": received}
    unique = 0
    seen: dict[int, np.ndarray] = {}
    for _, s, q in _recv_seqs(run_dir):
        bits = seen.setdefault(s, np.zeros((sent + 7) // 8 + 1, np.uint8))
        fresh = np.unique(q)
        fresh = fresh[(bits[fresh >> 3] >> (7 - (fresh & 7)).astype(np.uint8)) & 1 == 0]
        np.bitwise_or.at(bits, fresh >> 3, (1 << (7 - (fresh & 7))).astype(np.uint8))
        unique += len(fresh)
    return {"sent": sent, "received": received, "unique_received": unique}


@pytest.mark.parametrize("messages", LENGTHS)
def test_peak_rss_does_not_grow_with_the_run(benchmark, messages):
    out = tempfile.mkdtemp(prefix="zmqload-bench-soak-")
    got: list[tuple[dict, int, float]] = []
    try:
        benchmark.pedantic(lambda: got.append(run_measured(messages, out)), rounds=1, iterations=1)
        record, controller_kb, wall_s = got[-1]
        run_dir = os.path.join(out, f"run=soak-{messages}")
        disk = sum(os.path.getsize(p) for p in glob.glob(os.path.join(run_dir, "*", "*.parquet")))
        truth = counters_from_records(run_dir)
        if KEEP:
            os.makedirs(KEEP, exist_ok=True)
            shutil.move(run_dir, os.path.join(KEEP, os.path.basename(run_dir)))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    counters = record["counters"]
    assert record["status"] == "complete" and counters["lost"] == 0
    assert (
        {k: counters[k] for k in truth}
        == truth
        == {"sent": messages, "received": messages, "unique_received": messages}
    )
    producer_kb = max(p["max_rss_kb"] for p in record["producers"])
    consumer_kb = max(c["max_rss_kb"] for c in record["consumers"])
    benchmark.extra_info.update(
        {
            "messages": messages,
            "throughput_msgs": round(record["summary"]["throughput_msgs"]),
            "wall_s": round(wall_s, 1),
            "parquet_bytes": disk,
            "producer_peak_rss_mib": round(producer_kb / 1024, 1),
            "consumer_peak_rss_mib": round(consumer_kb / 1024, 1),
            "controller_peak_rss_mib": round(controller_kb / 1024, 1),
            "total_peak_rss_mib": round((producer_kb + consumer_kb + controller_kb) / 1024, 1),
        }
    )
    print(f"\n{benchmark.extra_info}")
