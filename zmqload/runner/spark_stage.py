"""Workers as one Spark barrier stage (--master): each a task, all started together or none. Only
the launcher changes; the controller stays on the driver. What Spark does on its own (too few slots,
a failed task) becomes one line (docs/CLUSTER.md)."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import re
import socket
import sys
import threading
import time
from typing import Any, Callable, Iterable, Iterator

from ..contract.curve import CurveKeys
from ..contract.ids import Role, WorkerId
from ..contract.masters import on_this_host
from ..contract.workload import OPTIONS
from ..errors import ConfigError, RunError, ZmqloadError
from .clocks import ClockServer
from .spec import WorkerSpec
from .task_out import BEGUN, DONE, upload_bound_s

DEFAULT_HOST = OPTIONS["host"].default

SESSION_TIMEOUT_S = 60.0
"""How long a cluster's master may take to accept the driver and give it an executor: the driver's
JVM alone took 10-40 s to start on a busy 2-core machine."""
EXECUTORS_WAIT_S = 60
"""How long the executors of a cluster may take to register before their slots are counted."""
TASK_KILL_TIMEOUT = "1h"
"""With an --out URI: how long a task Spark kills (its stage failed) may go on before its Python
process is killed (Spark's default: 2 s), so the other tasks of a stage that failed stop their
workers and copy their records up. The driver's wait for the copies is bounded
(runner/task_out.py), then spark.stop() ends the executors and their tasks."""
COPY_BEGIN_S = 15.0
"""With an --out URI: how long after the run's end each living task may take to begin copying its
records up. A task begins once its worker has stopped and converted its chunks (seconds on a busy
executor): 2 s lost whole workers' records on a loaded 2-core machine."""
SLOT_CHECK_INTERVAL_S = 1
SLOT_CHECK_FAILURES = 3
"""How long Spark may wait for enough free task slots before the stage fails (it checks every
interval, up to this many times): a few seconds, not Spark's default of minutes."""


def control_host(master: str) -> str:
    """The address the executors reach the controller at: loopback for a master on this host
    (local, local-cluster) unless SPARK_LOCAL_IP says otherwise, else this host's address."""
    if os.environ.get("SPARK_LOCAL_IP"):
        return os.environ["SPARK_LOCAL_IP"]
    if on_this_host(master):
        return "127.0.0.1"
    return socket.gethostbyname(socket.gethostname())


def run_task(
    clock: str, specs: list[str], placement: str | None, partition: Iterator[int]
) -> Iterator[dict[str, Any]]:
    """One task of the stage, in an executor: finds its worker (the task's own with no --placement,
    else by where Spark put every task: `assign`), puts this process's clock onto the driver's
    (runner/clocks.py), tells the driver where it runs, waits at the barrier until every task has,
    then runs the worker to its end; yields where it ran (run.json's PlacedWorker, as plain data).
    A task left without a worker passes the barrier and ends."""
    from pyspark import BarrierTaskContext
    from . import clocks
    from .workers import run_worker

    context = BarrierTaskContext.get()
    me = context.partitionId()
    executors = [info.address for info in context.getTaskInfos()]
    given = (
        dict(enumerate(range(len(specs))))
        if placement is None
        else assign(executors, [WorkerSpec.from_json(text).role for text in specs], placement)
    )
    if me not in given:
        context.barrier()
        return
    spec = WorkerSpec.from_json(specs[given[me]])
    _skew_for_tests(spec.name)
    found = clocks.align(clock, spec.control_curve)
    address = _address_towards(clock)
    spec = _bind_at(spec, address)
    where = {
        "worker": spec.name,
        "task": me,
        "address": address,
        "executor": executors[me],
        "executor_id": _executor_id(),
        **_this_node(),
        "pid": os.getpid(),
        "clock_offset_ns": found.offset_ns,
        "clock_uncertainty_ns": found.uncertainty_ns,
    }
    clocks.report_placed(clock, where, spec.control_curve)
    context.barrier()
    if spec.upload_to is None:
        run_worker(spec)
    else:  # recorded on this host, then copied to the URI (runner/task_out.py)
        from .task_out import run_and_upload

        run_and_upload(spec, run_worker, functools.partial(_tell, clock, spec.control_curve))
    yield where


def _tell(clock: str, keys: CurveKeys | None, kind: str, news: dict[str, Any]) -> None:
    """The driver hears how this task's copy goes; a driver that stopped listening does not stop it."""
    import zmq

    from . import clocks

    try:
        clocks.report_upload(clock, kind, news, keys)
    except (RunError, zmq.ZMQError):
        pass


def assign(executors: list[str], roles: list[Role], placement: str) -> dict[int, int]:
    """--placement: task index -> worker index, from the executor ("host:port") of every task.
    Tasks are ordered by host, then executor. spread: producers take tasks from the front,
    consumers from the back, so they share an executor (or host) only where the slots run out;
    pack: a producer, then a consumer, from the front, so each producer sits beside a consumer."""
    order = sorted(
        range(len(executors)),
        key=lambda task: (executors[task].rsplit(":", 1)[0], executors[task], task),
    )
    producers = [worker for worker, role in enumerate(roles) if role is Role.PRODUCER]
    consumers = [worker for worker, role in enumerate(roles) if role is not Role.PRODUCER]
    if placement == "pack":
        paired = [
            worker
            for pair in itertools.zip_longest(producers, consumers)
            for worker in pair
            if worker is not None
        ]
        return dict(zip(order, paired))
    given = dict(zip(order, producers))
    given.update(zip(reversed(order[len(producers) :]), consumers))
    return given


SKEW_ENV = "ZMQLOAD_TEST_CLOCK_SKEW"
"""Tests only: "c0=5000000000" puts c0's clock 5 s ahead before it is aligned, a host whose clock
is off, on one machine where every clock is one (tests/test_spark_placement.py)."""


def _skew_for_tests(worker: str) -> None:
    from .. import _engine

    for item in filter(None, os.environ.get(SKEW_ENV, "").split(",")):
        name, skew = item.split("=")
        if name == worker:
            _engine.set_clock_offset(-int(skew))


def _address_towards(endpoint: str) -> str:
    """This host's address on the route to the driver (a UDP socket's own end once connected:
    nothing is sent): where the others reach a worker here."""
    host = endpoint.split("://", 1)[1].rsplit(":", 1)[0].strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))
        return str(probe.getsockname()[0])


def _bind_at(spec: WorkerSpec, address: str) -> WorkerSpec:
    """A binder of a run that named no address binds at its host's address (the default
    127.0.0.1 reaches no other host); what the options name stays as named."""
    w = spec.workload
    if (
        not spec.bind
        or w.transport != "tcp"
        or w.endpoint
        or w.topology.given
        or w.host != DEFAULT_HOST
    ):
        return spec
    host = f"[{address}]" if ":" in address else address
    return dataclasses.replace(
        spec, bind=[f"tcp://{host}:{w.port + spec.worker.index}" if w.port else f"tcp://{host}:*"]
    )


def _executor_id() -> str:
    """Spark's id of the executor running this task: the --executor-id its JVM was started
    with (an ancestor of this process), "driver" where tasks run in the driver (local[N])."""
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if b"--executor-id" in args[:-1]:
            return args[args.index(b"--executor-id") + 1].decode()
        pid = parent
    return "driver"


def _this_node() -> dict[str, Any]:
    """What a task finds where it runs: the host, its CPUs and the libzmq zmqload's engine uses
    there (importing the engine is the check that zmqload is installed on that node)."""
    from .. import _engine

    return {
        "host": socket.gethostname(),
        "cpus": os.cpu_count() or 0,
        "libzmq": ".".join(map(str, _engine.libzmq_version())),
    }


def check_nodes(slots: Iterable[int]) -> list[dict[str, Any]]:
    """A plain task per slot, before the stage: what each node has (`_this_node`)."""
    return [_this_node() for _ in slots]


def _one_line(exc: BaseException) -> str:
    """Spark's error (a Java stack trace of ~100 lines) as one line: the Python error a task
    raised, else what happened to the task or the stage."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for marker in ("ModuleNotFoundError", "ImportError", "ZMQError", "RunError", "OSError"):
        for line in lines:
            if marker in line:
                return line[line.index(marker) :]
    known = (
        ("Python worker exited unexpectedly", "a task's Python process died (crashed or killed)"),
        ("ExecutorLostFailure", "an executor was lost"),
        (
            "Barrier execution mode does not allow run a barrier stage that requires more slots",
            "the cluster has fewer free task slots than the run has workers",
        ),
        ("cancelled", "the stage was cancelled"),
    )
    for marker, said in known:
        if any(marker in line for line in lines):
            return said
    for line in lines:
        if "Most recent failure reason:" in line:
            return line.split("Most recent failure reason:", 1)[1].strip()[:300]
    return (lines[0] if lines else type(exc).__name__)[:300]


class StageLauncher:
    """The Launcher of a placed run: `start` collects the workers, `all_started` submits them as
    one barrier stage (in a thread of the driver), the rest answers the controller's questions."""

    def __init__(
        self,
        master: str,
        placement: str | None = None,
        keys: CurveKeys | None = None,
        upload_to: str | None = None,
    ):
        self.master = master
        self.placement = placement
        self.keys = keys  # --curve on: the clock server's, as the control channel's
        self.upload_to = (
            upload_to  # --out URI: the run's directory there, where each task copies its records
        )
        self.uploads_lost: dict[str, str] = {}  # worker -> why its records did not reach upload_to
        self.workers: dict[WorkerId, WorkerSpec] = {}
        self.thread: threading.Thread | None = None
        self.error: str | None = None
        self.failed: WorkerId | None = (
            None  # the worker whose task failed the stage, when Spark says
        )
        self.slots = 0
        self.clock: ClockServer | None = (
            None  # the reference clock, and where each task said it runs
        )
        self.spark: Any = None

    def start(self, spec: WorkerSpec) -> None:
        self.workers[spec.worker] = dataclasses.replace(spec, upload_to=self.upload_to)

    def all_started(self) -> None:
        from ..analysis.session import get_spark

        package_parent = os.path.dirname(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        )
        os.environ.setdefault(
            "PYSPARK_PYTHON", sys.executable
        )  # the executors' Python: yours, else this one
        extra = {
            "spark.executorEnv.PYTHONPATH": package_parent,
            "spark.executorEnv.OPENBLAS_NUM_THREADS": "1",
            "spark.dynamicAllocation.enabled": "false",  # barrier mode refuses it
            "spark.python.worker.reuse": "false",  # each worker a fresh process
            "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": f"{SLOT_CHECK_INTERVAL_S}s",
            "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": str(SLOT_CHECK_FAILURES),
        }
        if self.upload_to is not None:
            extra["spark.python.task.killTimeout"] = TASK_KILL_TIMEOUT
        try:
            self.spark = get_spark(
                self.master, app_name="zmqload run", extra=extra, master_timeout_s=SESSION_TIMEOUT_S
            )
        except ConfigError as exc:  # a master that does not answer, gives no executor
            raise RunError(str(exc)) from None
        self.spark.sparkContext.setLogLevel("ERROR")
        needed = len(self.workers)
        self.slots = slots = self._registered_slots(needed)
        if slots < needed:
            raise RunError(
                f"--master {self.master}: {slots} task slot{'s' * (slots != 1)}, the run needs {needed} "
                "(one per producer and consumer): a bigger cluster, or fewer workers"
            )
        try:  # every executor imports zmqload's engine, before anything starts
            nodes = (
                self.spark.sparkContext.parallelize(range(slots), slots)
                .mapPartitions(check_nodes)
                .collect()
            )
        except Exception as exc:
            raise RunError(
                f"--master {self.master}: an executor cannot run zmqload ({_one_line(exc)}); install "
                'the same zmqload and libzmq on every node (docs/CLUSTER.md, "What every node needs")'
            ) from None
        versions = sorted({node["libzmq"] for node in nodes})
        if len(versions) > 1:
            raise RunError(
                f"--master {self.master}: the executors run different libzmq versions "
                f"({', '.join(versions)}): one version is measured at a time"
            )
        self.clock = ClockServer(control_host(self.master), self.keys)
        self.thread = threading.Thread(target=self._stage, name="zmqload-stage", daemon=True)
        self.thread.start()

    def _registered_slots(self, needed: int) -> int:
        """Task slots of the executors registered: a cluster's executors register one by one after
        the session starts, so wait (bounded) for local-cluster's all, or for as many as the run
        needs; local[N] has its N at once."""
        context = self.spark.sparkContext
        cluster = re.fullmatch(r"local-cluster\[(\d+),(\d+),\d+\]", self.master)
        if self.master.startswith("local") and cluster is None:
            return int(context.defaultParallelism)
        expected = int(cluster.group(1)) * int(cluster.group(2)) if cluster else needed
        deadline = time.monotonic() + EXECUTORS_WAIT_S
        while context.defaultParallelism < expected and time.monotonic() < deadline:
            time.sleep(0.5)
        return int(context.defaultParallelism)

    def _stage(self) -> None:
        assert self.clock is not None
        specs = [spec.to_json() for spec in self.workers.values()]
        # --placement: a task on every slot, the workers given to tasks once each knows where all are
        tasks = len(specs) if self.placement is None else self.slots
        body = functools.partial(run_task, self.clock.endpoint, specs, self.placement)
        try:
            self.spark.sparkContext.parallelize(range(tasks), tasks).barrier().mapPartitions(
                body
            ).collect()
        except Exception as exc:  # any task failed: the stage failed (not retried)
            failed = re.search(r"barrier task ResultTask\(\d+, (\d+)\)", str(exc))
            if failed is not None:  # the worker of the failed task (a task without one: none)
                task = int(failed.group(1))
                self.failed = next(
                    (
                        worker
                        for worker in self.workers
                        if any(
                            placed["worker"] == str(worker) and placed["task"] == task
                            for placed in self.placed
                        )
                    ),
                    None,
                )
            self.error = _one_line(exc)

    @property
    def placed(self) -> list[dict[str, Any]]:
        """Where each worker runs, as its task told the driver before the start (a task that
        died later included), in the workers' order."""
        told = self.clock.placed if self.clock is not None else {}
        return [told[str(worker)] for worker in self.workers if str(worker) in told]

    def pids(self) -> dict[str, int]:
        return {}  # the workers are executors' processes: where they ran is `placed`

    def alive(self, worker: WorkerId) -> bool:
        if self.error is None:
            return self.thread is None or self.thread.is_alive()
        # the stage failed: with an --out URI the other tasks go on (TASK_KILL_TIMEOUT) until their
        # workers stop and their records are copied
        return (
            self.upload_to is not None and worker != self.failed and not self._copied(str(worker))
        )

    def _copied(self, worker: str) -> bool:
        return self.clock is not None and DONE in self.clock.uploads.get(worker, {})

    def dead(self, workers: Iterable[WorkerId]) -> list[WorkerId]:
        """With the stage failed, every worker of it is gone: the one whose task failed first."""
        if self.error is None:
            return []
        return sorted(workers, key=lambda w: w != self.failed)

    def how_it_ended(self, worker: WorkerId) -> str:
        if self.error is None:
            return "its task ended"
        if self.failed is not None and worker != self.failed:
            return (
                f"stopped with the Spark stage, which failed in {self.failed}'s task: {self.error}"
            )
        return f"its Spark task failed: {self.error}"

    def stand_by(self, worker: WorkerId) -> None:
        """A task cannot be restarted (Workload refuses --restart with --master)."""
        raise RunError(f"--restart: {worker} is a task of a Spark stage, not a process here")

    def end(self, worker: WorkerId, mode: str) -> None:
        """A task cannot be restarted (Workload refuses --restart with --master)."""
        raise RunError(f"--restart: {worker} is a task of a Spark stage, not a process here")

    def reap(self, worker: WorkerId) -> None:
        """A task cannot be restarted (Workload refuses --restart with --master)."""
        raise RunError(f"--restart: {worker} is a task of a Spark stage, not a process here")

    def finish(self, timeout: float, hurry: Callable[[], bool] | None = None) -> None:
        """The stage ended: its tasks given `timeout` to end, and with an --out URI each living
        task that long (COPY_BEGIN_S at least) to begin copying its records, then the copy's own bound
        (task_out.upload_bound_s); what is still running then is cancelled. `hurry` is not
        heeded: the tasks' copies are what the driver's records are made of."""
        try:
            if self.upload_to is not None and self.clock is not None:
                self.uploads_lost = self._await_uploads(max(timeout, COPY_BEGIN_S))
            if self.thread is not None:
                self.thread.join(0 if self.uploads_lost else timeout)
                if self.thread.is_alive() and self.spark is not None:
                    self.spark.sparkContext.cancelAllJobs()
                    self.thread.join(10)
        finally:
            if self.spark is not None:
                self.spark.stop()
            if self.clock is not None:
                self.clock.close()

    def _await_uploads(self, timeout: float) -> dict[str, str]:
        """Until every placed worker's task (but the one whose failure failed the stage) said its
        copy is done, or has not begun it within `timeout`, or not ended it in its bound: the
        workers whose records did not reach the URI and why."""
        assert self.clock is not None
        begin_by = time.monotonic() + timeout
        copying = [name for name in self.clock.placed if name != str(self.failed)]
        while True:
            news = {name: dict(self.clock.uploads.get(name, {})) for name in copying}
            waiting = [name for name in copying if DONE not in news[name]]
            # every task ended: what has not said its copy is done never will
            ended = self.thread is not None and not self.thread.is_alive() and self.error is None
            late: dict[str, str] = {}
            for name in waiting:
                begun = news[name].get(BEGUN)
                if ended:
                    late[name] = "its task ended without saying its copy was done"
                elif begun is None and time.monotonic() > begin_by:
                    late[name] = (
                        f"its task did not begin copying them within {timeout:g} s of the run's end"
                    )
                elif begun is not None and time.monotonic() > begun["at"] + upload_bound_s(
                    begun["bytes"]
                ):
                    late[name] = (
                        f"its copy of {begun['bytes']:,} bytes was not done in "
                        f"{upload_bound_s(begun['bytes']):.0f} s"
                    )
            if len(late) == len(waiting):
                return {
                    **late,
                    **{
                        name: news[name][DONE]["error"]
                        for name in copying
                        if news[name].get(DONE, {}).get("error")
                    },
                }
            time.sleep(0.1)

    def discard_records(self) -> None:
        """With an --out URI, a run that ends as bad input: what the tasks copied there removed."""
        from ..store import remote_runs

        if self.upload_to is None:
            return
        try:
            remote = remote_runs.open_remote(self.upload_to, "--out")
            remote.fs.delete_dir(remote.path)
        except (ZmqloadError, OSError, ValueError):
            pass  # nothing was copied (the directory was never made), or the URI is gone

    def take_records(self, run_dir: str, finals: dict[WorkerId, Any]) -> str:
        """With an --out URI, once the stage is over: what the tasks copied there copied into the
        driver's `run_dir` and their finals pointed at it; the finals of workers whose records did
        not arrive dropped, so the salvage rebuilds them from what did. '' or what was lost, for
        the error line."""
        from . import task_out
        from ..contract import uris

        if self.upload_to is None:
            return ""
        shown = uris.without_secrets(self.upload_to)
        lost = dict(self.uploads_lost)
        if (
            self.failed is not None
            and self.clock is not None
            and str(self.failed) in self.clock.placed
            and not self._copied(str(self.failed))
        ):
            lost[str(self.failed)] = "its task died before copying them"
        said = [
            f"{name}'s records did not reach {shown}: {why}" for name, why in sorted(lost.items())
        ]
        try:
            task_out.download(self.upload_to, run_dir)
        except (ZmqloadError, OSError, ValueError) as exc:
            why = uris.scrubbed(str(exc) or type(exc).__name__, self.upload_to)
            lost = {str(worker): why for worker in self.workers}
            said.append(
                f"the records the tasks copied to {shown} could not be copied here ({why}): "
                "the figures are rebuilt from what was"
            )
        for worker in list(finals):
            if str(worker) in lost:
                del finals[worker]
            else:
                finals[worker] = task_out.rebased(finals[worker], run_dir)
        return "; ".join(said)
