"""CPU time spent inside a measured span, by this process and everything it started.

A thread samples, every INTERVAL seconds, the utime + stime of this process and of all its
descendants (/proc/PID/stat, walked through /proc/PID/task/*/children) and the machine's busy
time (/proc/stat: user + nice + system + irq + softirq, all CPUs), each stamped with
CLOCK_MONOTONIC (time.monotonic_ns(), the clock zmqload and the C yardsticks stamp with).
`in_span(t0, t1)` interpolates both at the span's ends: CPU-seconds used while the messages
flowed, so start-up (Python imports of worker processes) and after-work (Parquet conversion)
are left out. Divided by the span it is the number of cores busy (2.0 = this machine's all).

A process that exits between samples keeps its last sampled value (up to INTERVAL of its CPU
is missed). /proc reports in clock ticks (10 ms), so a span of ~0.5 s is good to a few %.
"""

from __future__ import annotations

import os
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")
INTERVAL = 0.02


def _proc_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12])  # utime, stime
    except (OSError, IndexError, ValueError):
        return None


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids.extend(int(k) for k in f.read().split())
            except OSError:
                pass
    except OSError:
        pass
    return kids


def _machine_ticks() -> tuple[int, int]:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq = v[:7]
    steal = v[7] if len(v) > 7 else 0
    return user + nice + system + irq + softirq, steal


class CpuSampler:
    def __init__(self, interval: float = INTERVAL):
        self.interval = interval
        self.samples: list[
            tuple[int, float, float, float, float]
        ] = []  # t_ns, ours_s, machine_busy_s, steal_s, self_s
        self._last: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        stack, seen = [os.getpid()], set()
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            ticks = _proc_ticks(pid)
            if ticks is not None:
                self._last[pid] = max(ticks, self._last.get(pid, 0))
            stack.extend(_children(pid))
        busy, steal = _machine_ticks()
        self.samples.append(
            (
                time.monotonic_ns(),
                sum(self._last.values()) / TICK,
                busy / TICK,
                steal / TICK,
                self._last.get(os.getpid(), 0) / TICK,
            )
        )

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> "CpuSampler":
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _at(self, t_ns: int, col: int) -> float:
        s = self.samples
        if t_ns <= s[0][0]:
            return s[0][col]
        for a, b in zip(s, s[1:]):
            if a[0] <= t_ns <= b[0]:
                return a[col] + (b[col] - a[col]) * (t_ns - a[0]) / max(b[0] - a[0], 1)
        return s[-1][col]

    def in_span(self, t0_ns: int, t1_ns: int) -> dict:
        """CPU-seconds between t0 and t1: ours (this process tree), the machine's, steal, and the
        cores this process alone kept busy (the zmqload controller, inproc workers, the sampler)."""
        span = (t1_ns - t0_ns) / 1e9
        ours = self._at(t1_ns, 1) - self._at(t0_ns, 1)
        machine = self._at(t1_ns, 2) - self._at(t0_ns, 2)
        steal = self._at(t1_ns, 3) - self._at(t0_ns, 3)
        own = self._at(t1_ns, 4) - self._at(t0_ns, 4)
        return {
            "span_s": span,
            "cpu_s": ours,
            "cores": ours / span if span > 0 else 0.0,
            "machine_cores": machine / span if span > 0 else 0.0,
            "steal_cores": steal / span if span > 0 else 0.0,
            "self_cores": own / span if span > 0 else 0.0,
            "total_cpu_s": self.samples[-1][1] - self.samples[0][1],
        }
