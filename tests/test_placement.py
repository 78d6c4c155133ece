"""Unpaced worker processes each run on a CPU of their own, with their libzmq I/O thread
(zmqload/runner/placement.py); otherwise the scheduler places them."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from zmqload.runner.placement import worker_cpu


def test_producers_take_the_first_cpus_consumers_the_next():
    cpus = [2, 3, 5, 7]
    assert [worker_cpu("producer", i, 2, 2, cpus) for i in range(2)] == [2, 3]
    assert [worker_cpu("consumer", i, 2, 2, cpus) for i in range(2)] == [5, 7]


def test_more_workers_than_cpus_are_left_to_the_scheduler():
    assert worker_cpu("producer", 0, 2, 1, [0, 1]) is None
    assert worker_cpu("consumer", 0, 4, 4, [0, 1]) is None


def _allowed(pid: str) -> dict[str, str]:
    """Thread id -> Cpus_allowed_list, for every thread of process pid."""
    lists = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            lists[tid] = next(line.split()[1] for line in f if line.startswith("Cpus_allowed_list:"))
    return lists


def _io_threads(pid: str) -> int:
    try:
        names = [open(f"/proc/{pid}/task/{tid}/comm").read() for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return 0
    return sum(name.startswith("ZMQbg/IO") for name in names)


def _worker_affinities(paced: bool, extra: tuple[str, ...] = ()) -> dict[str, dict[str, str]]:
    """Start a real run, and read each worker process's thread affinities while it sends."""
    args = [sys.executable, "-m", "zmqload", "run", "--transport", "tcp", "--size", "64", "--duration", "3",
            "--count", "50000000", "--quiet", "--out", os.path.join(os.environ.get("TMPDIR", "/tmp"), "zl-placement")]
    if paced:
        args += ["--rate", "10k"]
    args += list(extra)
    run = subprocess.Popen(args, cwd=os.path.dirname(os.path.dirname(__file__)))
    try:
        seen: dict[str, dict[str, str]] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and run.poll() is None:
            kids = subprocess.run(["pgrep", "-P", str(run.pid)], capture_output=True, text=True).stdout.split()
            # both libzmq contexts started (control channel and engine: two I/O threads each)
            if len(kids) == 2 and all(_io_threads(pid) >= 2 for pid in kids):
                seen = {pid: _allowed(pid) for pid in kids}
                break
            time.sleep(0.05)
        assert run.wait(120) == 0
        return seen
    finally:
        if run.poll() is None:
            run.kill()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to place two workers")
def test_unpaced_workers_each_get_a_cpu_of_their_own():
    seen = _worker_affinities(paced=False)
    assert len(seen) == 2
    cpus = [threads[pid] for pid, threads in seen.items()]            # each main thread's
    assert all(c.isdigit() for c in cpus), seen                       # on a single CPU ...
    assert cpus[0] != cpus[1], seen                                   # ... the two apart
    for (pid, threads), cpu in zip(seen.items(), cpus):
        # with it the engine's libzmq I/O and reaper threads (started at its first socket);
        # only the control channel's context, started before, is left to the scheduler
        assert sum(allowed == cpu for allowed in threads.values()) >= 3, seen


def test_paced_workers_are_left_to_the_scheduler():
    everywhere = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    seen = _worker_affinities(paced=True)
    assert len(seen) == 2
    for threads in seen.values():
        for allowed in threads.values():
            expanded = []
            for part in allowed.split(","):
                lo, _, hi = part.partition("-")
                expanded += list(range(int(lo), int(hi or lo) + 1))
            assert ",".join(map(str, expanded)) == everywhere, seen


def test_the_plan_is_in_run_json_and_none_leaves_the_scheduler(tmp_path):
    """run.json names each worker's CPU; --cpu-placement none pins nothing (and says so)."""
    import json
    import glob
    runs = {}
    for choice in ("auto", "none"):
        out = tmp_path / choice
        subprocess.run([sys.executable, "-m", "zmqload", "run", "--transport", "tcp", "--size", "64",
                        "--count", "20000", "--quiet", "--cpu-placement", choice, "--out", str(out)],
                       check=True, cwd=os.path.dirname(os.path.dirname(__file__)), timeout=120)
        (run_json,) = glob.glob(str(out / "run=*" / "run.json"))
        runs[choice] = json.load(open(run_json))
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2:
        assert runs["auto"]["cpu_placement"] == {"p0": cpus[0], "c0": cpus[1]}
    assert runs["none"]["cpu_placement"] == {}
    assert runs["none"]["workload"]["cpu_placement"] == "none"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to place two workers")
def test_cpu_placement_none_leaves_unpaced_workers_to_the_scheduler():
    seen = _worker_affinities(paced=False, extra=("--cpu-placement", "none"))
    assert len(seen) == 2
    assert all(not threads[pid].isdigit() for pid, threads in seen.items()), seen
