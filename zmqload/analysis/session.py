"""One SparkSession for the report, sized for a small machine unless --master says otherwise."""
from __future__ import annotations

import os
import sys
import tempfile
from typing import TYPE_CHECKING

from .javacheck import check_java

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


_LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
"""


def _quiet_log4j() -> str:
    """A log4j2 config at ERROR, so the report's stderr is its own one-line messages."""
    path = os.path.join(tempfile.gettempdir(), f"zmqload-log4j2-{os.getuid()}.properties")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(_LOG4J)
        os.replace(tmp, path)
    return path


def get_spark(master: str | None = None, app_name: str = "zmqload-report",
              driver_memory: str | None = None) -> SparkSession:
    """The active SparkSession, or a new one on `master` (default local[*]).

    Under spark-submit the master and memory come from spark-submit; we only add settings
    that are not already set. Shuffle partitions stay small: after the per-stream partial
    aggregation only aggregates move, and 200 default partitions would be 200 tiny tasks.
    """
    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active
    builder = SparkSession.builder.appName(app_name)
    # spark-submit runs the script with a gateway already up; its --master and memory win.
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if master:
        builder = builder.master(master)
    elif not under_submit:
        builder = builder.master("local[*]")
    cores = os.cpu_count() or 2
    settings = {
        "spark.sql.shuffle.partitions": str(max(4, 2 * cores)),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.adaptive.enabled": "true",
        # Overflow checks on every arithmetic op cost ~40% of the aggregation time (measured
        # 21.8 -> 13.6 s per 100M rows); the metric arithmetic is bounded by construction.
        "spark.sql.ansi.enabled": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.files.maxPartitionBytes": str(64 * 1024 * 1024),
        # The parallel collector: G1's concurrent threads compete with the two task threads on
        # a small machine while the JIT warms up (first 100M-record scan 15.1 s -> 10.3 s).
        # Metaspace starts large enough for Spark's classes: growing it cost 8 collections,
        # 4 of them full (0.24 s of pauses in a flight recording of a 100M-record report).
        "spark.driver.extraJavaOptions": (f"-Dlog4j.configurationFile=file:{_quiet_log4j()} "
                                          "-XX:+UseParallelGC -XX:MetaspaceSize=256m"),
    }
    if (master or "local").startswith("local") and not under_submit:
        # The part files are listed by us and passed by name; above 32 paths Spark would
        # start a whole job just to stat them (measured ~1.7 s per report). On a cluster,
        # with files on a remote store, that parallel listing pays, so it stays there.
        settings["spark.sql.sources.parallelPartitionDiscovery.threshold"] = "100000"
    if driver_memory or not under_submit:
        settings["spark.driver.memory"] = driver_memory or os.environ.get("ZMQLOAD_SPARK_DRIVER_MEMORY", "4g")
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
