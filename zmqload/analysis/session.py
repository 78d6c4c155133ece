"""The report's SparkSession, sized for a small machine unless --master says otherwise, or a Spark
Connect session (--remote). Every way Spark can fail to start becomes one line before the JVM prints
a trace: options checked here, the JVM's output to a log file, connecting bounded."""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import socket
import sys
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Callable, TypeVar

from ..contract.masters import MASTERS_ACCEPTED, remote_address, remote_shown, spark_master
from ..contract.report_options import DEFAULT_DRIVER_MEMORY, jvm_heap_size
from ..errors import ConfigError, ReportInputError, RunError
from . import class_archive
from .javacheck import check_java

if TYPE_CHECKING:
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

T = TypeVar("T")


_LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
"""

DEFAULT_MASTER_TIMEOUT_S = 20.0
# Huge methods JIT-compiled too: a scan's generated method with the latency buckets'
# comparisons passes HotSpot's 8000-byte limit and would run interpreted (a 1M-record latency
# scan 1.25 s instead of 0.3-0.45 s). For the driver, and for a cluster's executors.
JIT_OPTIONS = "-XX:-DontCompileHugeMethods"
# The rules of --master and --driver-memory are the report's option table's.
check_master = spark_master
check_driver_memory = jvm_heap_size


def _check_reachable(master: str, timeout_s: float) -> None:
    """Fail fast where nothing listens at the master's address (Spark retries for ~60 s)."""
    if master == "yarn":
        if not (os.environ.get("HADOOP_CONF_DIR") or os.environ.get("YARN_CONF_DIR")):
            raise ConfigError(
                "--master",
                "got 'yarn' but neither HADOOP_CONF_DIR nor YARN_CONF_DIR is set; "
                f"accepted: {MASTERS_ACCEPTED}",
            )
        return
    if not master.startswith("spark://"):
        return
    reasons = []
    for hostport in master[len("spark://") :].split(","):
        host, _, port = hostport.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=min(timeout_s, 5.0)):
                return
        except OSError as e:
            reasons.append(f"{hostport}: {e.strerror or e.__class__.__name__}")
    raise ConfigError(
        "--master",
        f"no Spark master answers at {master} ({'; '.join(reasons)}); "
        "start it or give a reachable one, or leave --master out for the embedded local Spark",
    )


def _quiet_log4j() -> str:
    """A log4j2 config at ERROR, so the report's stderr is its own one-line messages."""
    path = os.path.join(tempfile.gettempdir(), f"zmqload-log4j2-{os.getuid()}.properties")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(_LOG4J)
        os.replace(tmp, path)
    return path


def _jvm_log_path() -> str:
    return os.path.join(tempfile.gettempdir(), f"zmqload-spark-{os.getuid()}-{os.getpid()}.log")


def _jvm_failure(log_path: str) -> str:
    """The line of the JVM's log that says why it stopped (first error or exception)."""
    try:
        with open(log_path, errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
    except OSError:
        return "no output"
    for ln in lines:
        if re.search(r"Exception|Error|Invalid|[Cc]ould not", ln) and not ln.startswith("at "):
            return ln[:300]
    return lines[-1][:300] if lines else "no output"


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def _launch_gateway(conf: SparkConf, log_path: str, debug: bool) -> None:
    """Start the JVM with its stdout/stderr in `log_path` (or inherited with --debug), as
    pyspark would; `conf` reaches spark-submit, so the driver memory applies at launch."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:  # a JVM from an earlier session in this process
        return
    if debug:
        gateway = launch_gateway(conf)  # type: ignore[no-untyped-call]
    else:
        with open(log_path, "ab") as log:
            try:
                gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})  # type: ignore[no-untyped-call]
            except Exception:  # noqa: BLE001 - pyspark's error names no cause; the log does
                raise RunError(
                    f"Spark did not start: {_jvm_failure(log_path)} (log: {log_path})"
                ) from None
        # Kept only when the JVM did not start (the error names it); the JVM may write to it
        # until this process exits, which on Linux an unlink does not disturb.
        atexit.register(_remove, log_path)
    SparkContext._ensure_initialized(gateway=gateway)


def _bounded(what: str, timeout_s: float, call: Callable[[], T]) -> T:
    """call(), or ConfigError('--master') once `timeout_s` has passed: the JVM is killed, which
    ends the call blocked in it (Spark retries an unreachable master for ~60 s)."""
    from pyspark import SparkContext

    expired = threading.Event()

    def kill() -> None:
        expired.set()
        proc = getattr(SparkContext._gateway, "proc", None)
        if proc is not None:
            proc.kill()

    timer = threading.Timer(timeout_s, kill)
    timer.daemon = True
    timer.start()
    try:
        return call()
    except Exception:  # noqa: BLE001 - after the kill any error is the timeout's
        if expired.is_set():
            raise ConfigError(
                "--master",
                f"{what} within {timeout_s:g} s (--master-timeout); accepted: a master "
                "that answers and has a worker free",
            ) from None
        raise
    finally:
        timer.cancel()


def _wait_for_executor(spark: SparkSession, master: str, deadline: float, timeout_s: float) -> None:
    """A cluster master can accept the application and give it no executor (no worker, no
    room): jobs would wait forever, so wait for one here, boundedly."""
    sc = spark.sparkContext._jsc.sc()
    while sc.getExecutorMemoryStatus().size() < 2:  # the driver counts as one
        if time.monotonic() > deadline:
            spark.stop()
            raise ConfigError(
                "--master",
                f"{master} gave no executor within {timeout_s:g} s (--master-timeout); "
                "accepted: a master with a worker free",
            )
        time.sleep(0.2)


SQL_SETTINGS = {
    "spark.sql.adaptive.enabled": "true",
    # Overflow checks on every arithmetic op cost ~40% of the aggregation time (measured
    # 21.8 -> 13.6 s per 100M rows); the metric arithmetic is bounded by construction. Also what
    # the metrics' semantics assume (a division by zero is null), so a Connect session sets it too.
    "spark.sql.ansi.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.files.maxPartitionBytes": str(64 * 1024 * 1024),
}
"""The session settings the report's figures and speed rest on: runtime SQL settings, so a Spark
Connect session (--remote) sets them on its own server-side session too."""


def _connect_installed() -> None:
    """ReportInputError naming what Spark Connect's client needs and is not installed here."""
    from pyspark.errors import PySparkImportError
    from pyspark.sql.connect.utils import check_dependencies

    try:
        check_dependencies()
    except PySparkImportError as e:
        raise ReportInputError(
            f"--remote needs Spark Connect's client: {(str(e).splitlines() or [''])[0]}; "
            "install it with: pip install 'zmqload[remote]'"
        ) from None


def _silent(what: str, timeout_s: float) -> ConfigError:
    return ConfigError(
        "--remote",
        f"{what} within {timeout_s:g} s (--master-timeout); accepted: a Spark Connect "
        "server that answers",
    )


def connect(
    remote: str,
    timeout_s: float = DEFAULT_MASTER_TIMEOUT_S,
    log: Callable[[str], None] | None = None,
) -> SparkSession:
    """A Spark Connect session on the server at `remote` (sc://HOST:PORT...), with SQL_SETTINGS;
    ConfigError('--remote') within `timeout_s` when nothing answers there. No Java here: the
    server is Spark. The client retries an unavailable server for minutes on its own: its
    first answer is waited for in a thread, bounded."""
    shown = remote_shown(remote)
    host, port = remote_address(remote)
    _connect_installed()
    try:
        socket.create_connection((host, port), timeout=min(timeout_s, 5.0)).close()
    except OSError as e:
        raise ConfigError(
            "--remote",
            f"no Spark Connect server answers at {shown} "
            f"({e.strerror or e.__class__.__name__}); start one or give a reachable one, "
            "or leave --remote out for the embedded local Spark",
        ) from None
    import grpc
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client import DefaultChannelBuilder

    t0 = time.perf_counter()
    # HTTP/2 first, on a channel made as the client makes its own: a port that accepts and never
    # speaks is told here. (A client that has made its session waits at exit for the server to
    # answer its clean-up, so none is made before the server has answered this.)
    channel = DefaultChannelBuilder(remote).toChannel()
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout_s)
    except grpc.FutureTimeoutError:
        raise _silent(f"no answer from {shown}", timeout_s) from None
    finally:
        channel.close()
    result: list[SparkSession] = []
    failed: list[BaseException] = []

    def first_answer() -> None:
        try:
            builder = SparkSession.builder.remote(remote)
            for k, v in SQL_SETTINGS.items():
                builder = builder.config(k, v)
            spark = builder.create()  # a session of its own on the server, never one shared
            spark.range(1).count()
            result.append(spark)
        except BaseException as e:  # noqa: BLE001 - said below, in one line
            failed.append(e)

    worker = threading.Thread(target=first_answer, name="spark-connect", daemon=True)
    worker.start()
    worker.join(max(0.0, timeout_s - (time.perf_counter() - t0)))
    if worker.is_alive():
        raise _silent(f"no answer from {shown}", timeout_s)
    if failed:
        first = (str(failed[0]).strip().splitlines() or [failed[0].__class__.__name__])[0][:300]
        raise ConfigError(
            "--remote",
            f"{shown} did not answer as a Spark Connect server: {first}; "
            "accepted: a Spark Connect server that answers",
        )
    if log:
        log(f"spark connect session: {time.perf_counter() - t0:.2f} s")
    return result[0]


def get_spark(
    master: str | None = None,
    app_name: str = "zmqload-report",
    driver_memory: str | None = None,
    master_timeout_s: float = DEFAULT_MASTER_TIMEOUT_S,
    debug: bool = False,
    log: Callable[[str], None] | None = None,
    extra: dict[str, str] | None = None,
    java_options: str = "",
) -> SparkSession:
    """The active SparkSession, or a new one on `master` (default local[*]).

    Under spark-submit the master and memory come from spark-submit; we only add settings
    that are not already set. Shuffle partitions stay small: after the per-stream partial
    aggregation only aggregates move, and 200 default partitions would be 200 tiny tasks.
    `java_options` replace the class archive's (analysis/class_archive.py) on the driver.
    """
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if master is not None:
        check_master(master)
    if driver_memory is not None:
        check_driver_memory(driver_memory)
    env_memory = os.environ.get("ZMQLOAD_SPARK_DRIVER_MEMORY")
    if env_memory:
        check_driver_memory(env_memory, "ZMQLOAD_SPARK_DRIVER_MEMORY")
    if not under_submit:
        check_java()
    if master is not None:
        _check_reachable(master, master_timeout_s)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active
    cores = os.cpu_count() or 2
    settings = {
        "spark.app.name": app_name,
        "spark.sql.shuffle.partitions": str(max(4, 2 * cores)),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # Applied as the context starts: under spark-submit, whose JVM (and log4j setup) is
        # up before this script runs, it is what quiets the context's ~40 INFO lines.
        "spark.log.level": "ERROR",
        **SQL_SETTINGS,
        # The parallel collector: G1's concurrent threads compete with the two task threads on
        # a small machine while the JIT warms up (first 100M-record scan 15.1 s -> 10.3 s).
        # Metaspace starts large enough for Spark's classes: growing it cost 8 collections,
        # 4 of them full (0.24 s of pauses in a flight recording of a 100M-record report).
        "spark.driver.extraJavaOptions": (
            f"-Dlog4j.configurationFile=file:{_quiet_log4j()} "
            f"-XX:+UseParallelGC -XX:MetaspaceSize=256m {JIT_OPTIONS} "
            f"{java_options or class_archive.java_option()}"
        ).rstrip(),
    }
    settings.update(extra or {})  # the caller's own (runner/spark_stage.py: a barrier stage's)
    # spark-submit runs the script with a gateway already up; its --master and memory win.
    if master:
        settings["spark.master"] = master
    elif not under_submit:
        settings["spark.master"] = "local[*]"
    target = settings.get("spark.master", "")
    if target.startswith("local") and not under_submit:
        # The part files are listed by us and passed by name; above 32 paths Spark would
        # start a whole job just to stat them (measured ~1.7 s per report). On a cluster,
        # with files on a remote store, that parallel listing pays, so it stays there.
        settings["spark.sql.sources.parallelPartitionDiscovery.threshold"] = "100000"
    if target and not target.startswith("local") and not under_submit:
        # A cluster's executors run the scans. (Under spark-submit the JVMs' options are the submitter's.)
        settings["spark.executor.extraJavaOptions"] = JIT_OPTIONS
    if driver_memory or not under_submit:
        settings["spark.driver.memory"] = driver_memory or env_memory or DEFAULT_DRIVER_MEMORY
    t0 = time.perf_counter()
    if not under_submit:
        _launch_gateway(
            SparkConf(loadDefaults=False).setAll(list(settings.items())), _jvm_log_path(), debug
        )
    if log:
        log(f"jvm start: {time.perf_counter() - t0:.2f} s")
        t0 = time.perf_counter()
    builder = SparkSession.builder
    for k, v in settings.items():
        builder = builder.config(k, v)
    deadline = time.monotonic() + master_timeout_s
    remote = bool(target) and not target.startswith("local")
    spark = (
        _bounded(f"no answer from {target}", master_timeout_s, builder.getOrCreate)
        if remote
        else builder.getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    if log:
        log(f"spark context: {time.perf_counter() - t0:.2f} s")
    if remote:
        _wait_for_executor(spark, target, deadline, master_timeout_s)
    return spark
