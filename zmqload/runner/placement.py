"""Where a worker runs (--cpu-placement): an unpaced worker process on a CPU of its own with its
libzmq I/O thread, shared by side when workers outnumber the CPUs; an inproc pair on one CPU. Why,
measured: docs/ARCHITECTURE.md, "Process model"."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..contract.workload import Workload


def placed(workload: "Workload") -> bool:
    """Whether this run's workers are pinned: --cpu-placement auto, unpaced, no proxy in the
    path, not Spark tasks (--master: the executors' CPUs are Spark's); inproc only as one
    producer and one consumer without a consumer delay."""
    from ..contract import patterns

    inproc_pair = (workload.producers, workload.consumers, workload.consumer_delay_us) == (1, 1, 0)
    if workload.transport == "inproc" and not inproc_pair:
        return False
    return (
        workload.cpu_placement == "auto"
        and not workload.rate
        and not patterns.get(workload.pattern).proxy
        and workload.master is None
    )


def plan(workload: "Workload") -> dict[str, int]:
    """{'p0': 0, 'c0': 1}: each worker's CPU, {} when the scheduler places them (run.json)."""
    if not placed(workload) or not hasattr(os, "sched_getaffinity"):
        return {}
    cpus = sorted(os.sched_getaffinity(0))
    found = {f"p{i}": worker_cpu(workload, "producer", i, cpus) for i in range(workload.producers)}
    found.update(
        {f"c{i}": worker_cpu(workload, "consumer", i, cpus) for i in range(workload.consumers)}
    )
    return {name: cpu for name, cpu in found.items() if cpu is not None}


def worker_cpu(workload: "Workload", role: str, index: int, cpus: list[int]) -> int | None:
    """The CPU for producer / consumer `index`, or None to leave placement to the scheduler.
    One each while they fit (producers the first CPUs, consumers the next); past that, each
    side a share of the CPUs in proportion to its workers, its workers in turn on it."""
    from ..contract import patterns

    producers, consumers = workload.producers, workload.consumers
    if workload.transport == "inproc":  # the pair together (placed() admits only 1x1)
        return cpus[0]
    if producers + consumers <= len(cpus):
        return cpus[index] if role == "producer" else cpus[producers + index]
    if len(cpus) < 2 or patterns.get(workload.pattern).fanout or workload.consumer_delay_us:
        return None
    share = min(max(1, round(len(cpus) * producers / (producers + consumers))), len(cpus) - 1)
    side = cpus[:share] if role == "producer" else cpus[share:]
    return side[index % len(side)]


def place_this_worker(workload: "Workload", role: str, index: int) -> int | None:
    """Pin the calling thread (and the threads it starts later: libzmq's I/O thread, at the
    first socket, and the converter) to its CPU; returns the CPU, or None if not placed. An
    inproc worker is a thread of the controller's process: only that thread is pinned."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpu = worker_cpu(workload, role, index, sorted(os.sched_getaffinity(0)))
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError:
            return None
    return cpu
