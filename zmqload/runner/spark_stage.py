"""Workers as one Spark barrier stage (--master): each producer and consumer a task, all
started together or none (`RDD.barrier()`), on the executors Spark gives. Spark is the
scheduler, zmqload writes no agent daemon of its own.

The controller stays on the driver and plays its usual part over its control channel (tcp
here, the executors may be other hosts): the binders report what they bound, the others are
told where to connect, the start, the drain and the finals travel as in a local run. This
module only replaces the launcher: where the workers run and how their end is known.

What Spark does on its own is turned into one line: a cluster with fewer free task slots than
workers (Spark re-checks for minutes by default: bounded here), an executor without zmqload,
a task that failed (a barrier result stage is not retried)."""
from __future__ import annotations

import os
import re
import socket
import sys
import threading
from typing import Any, Iterable, Iterator

from ..contract.ids import WorkerId
from ..errors import ConfigError, RunError
from .spec import WorkerSpec

SLOT_CHECK_INTERVAL_S = 1
SLOT_CHECK_FAILURES = 3
"""How long Spark may wait for enough free task slots before the stage fails (it checks every
interval, up to this many times): a few seconds, not Spark's default of minutes."""


def control_host(master: str) -> str:
    """The address the executors reach the controller at: loopback for a master on this host
    (local, local-cluster) unless SPARK_LOCAL_IP says otherwise, else this host's address."""
    if os.environ.get("SPARK_LOCAL_IP"):
        return os.environ["SPARK_LOCAL_IP"]
    if master.startswith("local"):
        return "127.0.0.1"
    return socket.gethostbyname(socket.gethostname())


def run_task(specs: Iterator[str]) -> Iterator[dict[str, Any]]:
    """One worker, in an executor: waits at the barrier until every task runs, then runs the
    worker to its end; yields where it ran (run.json's PlacedWorker, as plain data)."""
    from pyspark import BarrierTaskContext
    from .workers import run_worker
    context = BarrierTaskContext.get()
    spec = WorkerSpec.from_json(next(iter(specs)))
    where = {"worker": spec.name, "executor": context.getTaskInfos()[context.partitionId()].address,
             **_this_node(), "pid": os.getpid()}
    context.barrier()
    run_worker(spec)
    yield where


def _this_node() -> dict[str, Any]:
    """What a task finds where it runs: the host, its CPUs and the libzmq zmqload's engine uses
    there (importing the engine is the check that zmqload is installed on that node)."""
    from .. import _engine
    return {"host": socket.gethostname(), "cpus": os.cpu_count() or 0,
            "libzmq": ".".join(map(str, _engine.libzmq_version()))}


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
                return line[line.index(marker):]
    known = (("Python worker exited unexpectedly", "a task's Python process died (crashed or killed)"),
             ("ExecutorLostFailure", "an executor was lost"),
             ("Barrier execution mode does not allow run a barrier stage that requires more slots",
              "the cluster has fewer free task slots than the run has workers"),
             ("cancelled", "the stage was cancelled"))
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

    def __init__(self, master: str):
        self.master = master
        self.workers: dict[WorkerId, WorkerSpec] = {}
        self.thread: threading.Thread | None = None
        self.error: str | None = None
        self.failed: WorkerId | None = None       # the worker whose task failed the stage, when Spark says
        self.placed: list[dict[str, Any]] = []
        self.spark: Any = None

    def start(self, spec: WorkerSpec) -> None:
        self.workers[spec.worker] = spec

    def all_started(self) -> None:
        from ..analysis.session import get_spark
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)      # the executors' Python: yours, else this one
        extra = {"spark.executorEnv.PYTHONPATH": package_parent,
                 "spark.executorEnv.OPENBLAS_NUM_THREADS": "1",
                 "spark.dynamicAllocation.enabled": "false",       # barrier mode refuses it
                 "spark.python.worker.reuse": "false",             # each worker a fresh process
                 "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": f"{SLOT_CHECK_INTERVAL_S}s",
                 "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": str(SLOT_CHECK_FAILURES)}
        try:
            self.spark = get_spark(self.master, app_name="zmqload run", extra=extra)
        except ConfigError as exc:          # a master that does not answer, gives no executor
            raise RunError(str(exc)) from None
        self.spark.sparkContext.setLogLevel("ERROR")
        needed = len(self.workers)
        slots = self.spark.sparkContext.defaultParallelism
        if slots < needed:
            raise RunError(f"--master {self.master}: {slots} task slot{'s' * (slots != 1)}, the run needs {needed} "
                           "(one per producer and consumer): a bigger cluster, or fewer workers")
        try:       # every executor imports zmqload's engine, before anything starts
            nodes = self.spark.sparkContext.parallelize(range(slots), slots).mapPartitions(check_nodes).collect()
        except Exception as exc:
            raise RunError(f"--master {self.master}: an executor cannot run zmqload ({_one_line(exc)}); install "
                           "the same zmqload and libzmq on every node (docs: README, --master)") from None
        versions = sorted({node["libzmq"] for node in nodes})
        if len(versions) > 1:
            raise RunError(f"--master {self.master}: the executors run different libzmq versions "
                           f"({', '.join(versions)}): one version is measured at a time")
        self.thread = threading.Thread(target=self._stage, name="zmqload-stage", daemon=True)
        self.thread.start()

    def _stage(self) -> None:
        specs = [spec.to_json() for spec in self.workers.values()]
        try:
            rdd = self.spark.sparkContext.parallelize(specs, len(specs)).barrier().mapPartitions(run_task)
            self.placed = list(rdd.collect())
        except Exception as exc:         # any task failed: the stage failed (not retried)
            failed = re.search(r"barrier task ResultTask\(\d+, (\d+)\)", str(exc))
            if failed is not None and int(failed.group(1)) < len(self.workers):
                self.failed = list(self.workers)[int(failed.group(1))]       # a partition is a worker
            self.error = _one_line(exc)

    def pids(self) -> dict[str, int]:
        return {}           # the workers are executors' processes: where they ran is `placed`

    def alive(self, worker: WorkerId) -> bool:
        return self.error is None and (self.thread is None or self.thread.is_alive())

    def dead(self, workers: Iterable[WorkerId]) -> list[WorkerId]:
        """With the stage failed, every worker of it is gone: the one whose task failed first."""
        if self.error is None:
            return []
        return sorted(workers, key=lambda w: w != self.failed)

    def how_it_ended(self, worker: WorkerId) -> str:
        if self.error is None:
            return "its task ended"
        if self.failed is not None and worker != self.failed:
            return f"stopped with the Spark stage, which failed in {self.failed}'s task: {self.error}"
        return f"its Spark task failed: {self.error}"

    def finish(self, timeout: float) -> None:
        if self.thread is not None:
            self.thread.join(timeout)
            if self.thread.is_alive() and self.spark is not None:
                self.spark.sparkContext.cancelAllJobs()
                self.thread.join(10)
        if self.spark is not None:
            self.spark.stop()
