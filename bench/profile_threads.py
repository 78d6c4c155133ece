"""Where the CPU of an N x M push-pull run goes, per role and per thread kind, for zmqload and
for the bare C processes (bench/baseline_nxm.c), side by side: a companion to bench_scaling.py.

    PYTHONPATH=. .venv/bin/python bench/profile_threads.py --shape 2x2 --total 2000000 --rounds 3

Every 20 ms it reads utime + stime of every thread (/proc/PID/task/TID/stat) of the process
tree, and reports the CPU-seconds each kind of thread used inside the measured span (first
send to last receive), per message (ns) and as cores: `loop` is a process's main thread (the
send or receive loop: zmqload's engine runs in the worker's main thread), `io` libzmq's I/O
threads (ZMQbg/IO/*), `other` the rest (zmqload's converter and sampler threads, libzmq's
reaper). Roles: zmqload's from run.json `worker_pids`; C receivers are forked before the
senders (the lower pids). Thread samples nearest the span's ends bound it (20 ms either way).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_scaling import SIZE, free_ports  # noqa: E402
from cpu_span import TICK, _children  # noqa: E402
from paired import build_c  # noqa: E402


class ThreadSampler:
    def __init__(self, interval: float = 0.02):
        self.interval = interval
        self.samples: list[tuple[int, dict]] = []  # t_ns, {(pid, tid): (comm, ticks)}
        self.parents: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        snap, stack = {}, [os.getpid()]
        while stack:
            pid = stack.pop()
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/stat") as f:
                        text = f.read()
                    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                        slices = int(f.read().split()[2])
                except (OSError, IndexError, ValueError):
                    continue
                comm = text[text.index("(") + 1 : text.rindex(")")]
                rest = text.rsplit(")", 1)[1].split()
                snap[(pid, int(tid))] = (comm, (int(rest[11]), int(rest[12]), slices))
            for kid in _children(pid):
                self.parents.setdefault(kid, pid)
                stack.append(kid)
        self.samples.append((time.monotonic_ns(), snap))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self):
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def in_span(self, t0: int, t1: int) -> dict:
        """{(pid, tid): (comm, (user_s, sys_s, slices))} between the last sample at or before t0
        and the first at or after t1; a thread gone by then counts up to its last sample."""
        before = max(
            (s for s in self.samples if s[0] <= t0), key=lambda s: s[0], default=self.samples[0]
        )
        after_list = [s for s in self.samples if s[0] >= t1] or [self.samples[-1]]
        after = min(after_list, key=lambda s: s[0])
        last_seen: dict = {}
        for t, snap in self.samples:
            if t <= after[0]:
                last_seen.update(snap)
        out = {}
        for key, (comm, (user, system, slices)) in last_seen.items():
            # a thread started after `before` counts from 0
            u0, s0, n0 = before[1].get(key, (comm, (0, 0, 0)))[1]
            out[key] = (comm, ((user - u0) / TICK, (system - s0) / TICK, slices - n0))
        return out, (after[0] - before[0]) / 1e9


def kind(pid: int, tid: int, comm: str) -> str:
    if comm.startswith("ZMQbg/IO"):
        return "io"
    return "loop" if pid == tid else "other"


def summarise(per_thread: dict, roles: dict[int, str]) -> dict:
    """{(role, kind): [user_s, sys_s, times scheduled in]}"""
    totals: dict = defaultdict(lambda: [0.0, 0.0, 0])
    for (pid, tid), (comm, figures) in per_thread.items():
        cell = totals[(roles.get(pid, "bench"), kind(pid, tid, comm))]
        for i, value in enumerate(figures):
            cell[i] += value
    return totals


def run_zmqload(n: int, m: int, per: int) -> tuple[dict, int, float]:
    import numpy as np
    import pyarrow.parquet as pq
    import zmqload

    out = tempfile.mkdtemp(prefix="zmqload-threads-")
    try:
        with ThreadSampler() as s:
            r = zmqload.run(
                pattern="push-pull",
                transport="tcp",
                size=SIZE,
                count=per,
                producers=n,
                consumers=m,
                rate=0,
                out=out,
            )
        assert r.lost == 0
        t_recv = (
            pq.read_table(os.path.join(r.run_dir, "recvs"), columns=["t_recv_ns"])
            .column(0)
            .to_numpy()
        )
        t_sent = (
            pq.read_table(os.path.join(r.run_dir, "sends"), columns=["t_sent_ns"])
            .column(0)
            .to_numpy()
        )
        t0, t1 = int(t_sent.min()), int(np.max(t_recv))
        with open(os.path.join(r.run_dir, "run.json")) as f:
            pids = json.load(f)["worker_pids"]
        roles = {
            pid: ("sender" if name.startswith("p") else "receiver") for name, pid in pids.items()
        }
        roles[os.getpid()] = "controller"
        per_thread, window = s.in_span(t0, t1)
        return summarise(per_thread, roles), len(t_recv), (t1 - t0) / 1e9
    finally:
        shutil.rmtree(out, ignore_errors=True)


def run_c(binary: str, n: int, m: int, per: int) -> tuple[dict, int, float]:
    with ThreadSampler() as s:
        proc = subprocess.Popen(
            [binary, str(free_ports(m)), str(n), str(m), str(per), str(SIZE)],
            stdout=subprocess.PIPE,
            text=True,
        )
        out = proc.communicate(timeout=600)[0].split()
    msgs, _, t0, t1 = map(int, out)
    kids = sorted(pid for pid, parent in s.parents.items() if parent == proc.pid)
    roles = {pid: ("receiver" if i < m else "sender") for i, pid in enumerate(kids)}
    roles[proc.pid] = "c parent"
    roles[os.getpid()] = "bench"
    per_thread, _ = s.in_span(t0, t1)
    return summarise(per_thread, roles), msgs, (t1 - t0) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="2x2")
    ap.add_argument("--total", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    n, m = map(int, a.shape.split("x"))
    per = a.total // n
    binary = build_c("baseline_nxm")
    results: dict[str, list] = {"zmqload": [], "c": []}
    order = ["zmqload", "c"]
    for _ in range(a.rounds):
        for name in order:
            results[name].append(
                run_zmqload(n, m, per) if name == "zmqload" else run_c(binary, n, m, per)
            )
        order.reverse()
    print(
        f"shape {a.shape}, {a.total:,} messages of {SIZE} B, {a.rounds} rounds: CPU in the span, "
        f"ns per message (median over rounds) and cores"
    )
    import statistics

    for name, rounds in results.items():
        keys = sorted({k for totals, _, _ in rounds for k in totals})
        print(
            f"  {name}: msg/s " + " ".join(f"{msgs / span / 1e6:.2f}M" for _, msgs, span in rounds)
        )
        for key in keys:
            cells = [(t.get(key, [0.0, 0.0, 0]), msgs, span) for t, msgs, span in rounds]
            ns = statistics.median((c[0] + c[1]) / msgs * 1e9 for c, msgs, _ in cells)
            user = statistics.median(c[0] / msgs * 1e9 for c, msgs, _ in cells)
            system = statistics.median(c[1] / msgs * 1e9 for c, msgs, _ in cells)
            cores = statistics.median((c[0] + c[1]) / span for c, _, span in cells)
            switches = statistics.median(c[2] / msgs * 1e6 for c, msgs, _ in cells)
            if ns >= 1:
                print(
                    f"    {key[0]:10s} {key[1]:5s} {ns:7.0f} ns/msg (user {user:4.0f}, sys {system:4.0f})"
                    f"  {cores:5.2f} cores  {switches:7.0f} scheduled-in per 1M msgs"
                )
        total = statistics.median(
            sum(c[0] + c[1] for c in t.values()) / msgs * 1e9 for t, msgs, _ in rounds
        )
        print(f"    {'total':16s} {total:7.0f} ns/msg")


if __name__ == "__main__":
    main()
