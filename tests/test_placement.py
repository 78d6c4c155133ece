"""Unpaced worker processes each run on a CPU of their own, with their libzmq I/O thread
(zmqload/runner/placement.py); otherwise the scheduler places them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from zmqload import Workload
from zmqload.runner.placement import worker_cpu


def _cpus(
    pattern: str, producers: int, consumers: int, cpus: list[int], delay_us: float = 0
) -> tuple[list, list]:
    w = Workload(
        pattern=pattern, producers=producers, consumers=consumers, consumer_delay_us=delay_us
    )
    return (
        [worker_cpu(w, "producer", i, cpus) for i in range(producers)],
        [worker_cpu(w, "consumer", i, cpus) for i in range(consumers)],
    )


def test_producers_take_the_first_cpus_consumers_the_next():
    assert _cpus("push-pull", 2, 2, [2, 3, 5, 7]) == ([2, 3], [5, 7])
    assert _cpus("pub-sub", 1, 3, [2, 3, 5, 7]) == ([2], [3, 5, 7])


def test_workers_that_outnumber_the_cpus_share_them_by_side():
    assert _cpus("push-pull", 4, 4, [0, 1]) == ([0] * 4, [1] * 4)
    assert _cpus("push-pull", 2, 1, [0, 1]) == ([0, 0], [1])
    assert _cpus("dealer-router", 1, 4, [0, 1]) == ([0], [1] * 4)
    # a side's share follows its number of workers, at least one CPU each
    assert _cpus("push-pull", 4, 4, [0, 1, 2, 3]) == ([0, 1, 0, 1], [2, 3, 2, 3])
    assert _cpus("push-pull", 1, 4, [0, 1, 2, 3]) == ([0], [1, 2, 3, 1])
    assert _cpus("push-pull", 8, 1, [4, 5, 6]) == ([4, 5] * 4, [6])


def test_an_inproc_pair_shares_one_cpu_and_only_the_pair():
    from zmqload.runner.placement import placed

    w = Workload(transport="inproc")
    assert placed(w) and [worker_cpu(w, role, 0, [3, 5]) for role in ("producer", "consumer")] == [
        3,
        3,
    ]
    assert not placed(Workload(transport="inproc", producers=2, consumers=2))
    assert not placed(Workload(transport="inproc", consumer_delay_us=5))
    assert not placed(Workload(transport="inproc", rate="10k"))
    assert not placed(Workload(transport="inproc", cpu_placement="none"))


def test_sides_of_unequal_work_that_outnumber_the_cpus_are_left_to_the_scheduler():
    """Every subscriber receives every message (its side does M times the work); simulated
    consumer work would be capped by the consumers' share, the figure a run measures."""
    assert _cpus("pub-sub", 1, 4, [0, 1]) == ([None], [None] * 4)
    assert _cpus("push-pull", 1, 2, [0, 1], delay_us=20) == ([None], [None, None])
    assert _cpus("push-pull", 1, 1, [0, 1], delay_us=20) == ([0], [1])  # one each still
    assert _cpus("push-pull", 2, 1, [0]) == ([None, None], [None])


def _allowed(pid: str) -> dict[str, str]:
    """Thread id -> Cpus_allowed_list, for every thread of process pid."""
    lists = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            lists[tid] = next(
                line.split()[1] for line in f if line.startswith("Cpus_allowed_list:")
            )
    return lists


def _expand(allowed: str) -> list[int]:
    """A Cpus_allowed_list as CPU numbers: '0-2,5' -> [0, 1, 2, 5]."""
    out = []
    for part in allowed.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def _io_threads(pid: str) -> int:
    try:
        names = [
            open(f"/proc/{pid}/task/{tid}/comm").read() for tid in os.listdir(f"/proc/{pid}/task")
        ]
    except OSError:
        return 0
    return sum(name.startswith("ZMQbg/IO") for name in names)


def _worker_affinities(
    paced: bool, extra: tuple[str, ...] = (), workers: int = 2, out: str | None = None
) -> dict[str, dict[str, str]]:
    """Start a real run, and read each worker process's thread affinities while it sends."""
    out = out or os.path.join(os.environ.get("TMPDIR", "/tmp"), "zl-placement")
    args = [
        sys.executable,
        "-m",
        "zmqload",
        "run",
        "--transport",
        "tcp",
        "--size",
        "64",
        "--duration",
        "3",
        "--count",
        "50000000",
        "--quiet",
        "--out",
        out,
    ]
    if paced:
        args += ["--rate", "10k"]
    args += list(extra)
    run = subprocess.Popen(args, cwd=os.path.dirname(os.path.dirname(__file__)))
    try:
        seen: dict[str, dict[str, str]] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and run.poll() is None:
            kids = subprocess.run(
                ["pgrep", "-P", str(run.pid)], capture_output=True, text=True
            ).stdout.split()
            # both libzmq contexts started (control channel and engine: two I/O threads each)
            if len(kids) == workers and all(_io_threads(pid) >= 2 for pid in kids):
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
    cpus = [threads[pid] for pid, threads in seen.items()]  # each main thread's
    assert all(c.isdigit() for c in cpus), seen  # on a single CPU ...
    assert cpus[0] != cpus[1], seen  # ... the two apart
    for (pid, threads), cpu in zip(seen.items(), cpus):
        # with it the engine's libzmq I/O and reaper threads (started at its first socket);
        # only the control channel's context, started before, is left to the scheduler
        assert sum(allowed == cpu for allowed in threads.values()) >= 3, seen


@pytest.mark.skipif(len(os.sched_getaffinity(0)) != 2, reason="the shares of two CPUs")
def test_unpaced_workers_that_outnumber_two_cpus_run_by_side(tmp_path):
    """2 producers x 2 consumers on two CPUs: both producers (and their I/O threads) on the
    first, both consumers on the second; read from /proc during a real run, each process's
    role from the run's run.json."""
    import glob
    import json

    seen = _worker_affinities(
        paced=False, extra=("--producers", "2", "--consumers", "2"), workers=4, out=str(tmp_path)
    )
    assert len(seen) == 4
    (run_json,) = glob.glob(str(tmp_path / "run=*" / "run.json"))
    pids = json.load(open(run_json))["worker_pids"]
    cpus = sorted(os.sched_getaffinity(0))
    for name, cpu in (("p0", cpus[0]), ("p1", cpus[0]), ("c0", cpus[1]), ("c1", cpus[1])):
        threads = seen[str(pids[name])]
        assert threads[str(pids[name])] == str(cpu), (name, seen)  # the main thread ...
        # ... and with it the engine's libzmq I/O and reaper threads
        assert sum(allowed == str(cpu) for allowed in threads.values()) >= 3, (name, seen)


def test_paced_workers_are_left_to_the_scheduler():
    everywhere = sorted(os.sched_getaffinity(0))
    seen = _worker_affinities(paced=True)
    assert len(seen) == 2
    for threads in seen.values():
        for allowed in threads.values():
            assert _expand(allowed) == everywhere, seen


def test_the_plan_is_in_run_json_and_none_leaves_the_scheduler(tmp_path):
    """run.json names each worker's CPU; --cpu-placement none pins nothing (and says so)."""
    import json
    import glob

    runs = {}
    for choice in ("auto", "none"):
        out = tmp_path / choice
        subprocess.run(
            [
                sys.executable,
                "-m",
                "zmqload",
                "run",
                "--transport",
                "tcp",
                "--size",
                "64",
                "--count",
                "20000",
                "--quiet",
                "--cpu-placement",
                choice,
                "--out",
                str(out),
            ],
            check=True,
            cwd=os.path.dirname(os.path.dirname(__file__)),
            timeout=120,
        )
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


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: pinned and free look alike")
def test_an_unpaced_inproc_pair_runs_on_one_cpu_the_controller_does_not(tmp_path):
    """Inproc workers are threads of the run's process: during a real run, its two loop threads
    (and what they started) are on the first CPU, its main thread (the controller) is not pinned."""
    import glob
    import json

    cpus = sorted(os.sched_getaffinity(0))
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zmqload",
            "run",
            "--transport",
            "inproc",
            "--size",
            "64",
            "--duration",
            "3",
            "--count",
            "50000000",
            "--quiet",
            "--out",
            str(tmp_path),
        ],
        cwd=os.path.dirname(os.path.dirname(__file__)),
    )
    try:
        seen: dict[str, str] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and run.poll() is None:
            try:
                threads = _allowed(str(run.pid))
            except OSError:  # a thread ended between listing and reading
                continue
            if sum(allowed == str(cpus[0]) for allowed in threads.values()) >= 2:
                seen = threads
                break
            time.sleep(0.05)
        assert run.wait(120) == 0
    finally:
        if run.poll() is None:
            run.kill()
    assert sum(allowed == str(cpus[0]) for allowed in seen.values()) >= 2, seen
    assert _expand(seen[str(run.pid)]) == cpus, seen  # the controller's own thread
    (run_json,) = glob.glob(str(tmp_path / "run=*" / "run.json"))
    assert json.load(open(run_json))["cpu_placement"] == {"p0": cpus[0], "c0": cpus[0]}
