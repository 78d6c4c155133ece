"""Make the class archive (analysis/class_archive.py) at setup: a 2,000-message run analysed by a
JVM told to archive its classes as it exits. `make build` runs it; it does nothing when a usable
archive is there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Callable

from .class_archive import ARCHIVE, KEY, depends_on, directory, maps, usable


def make(say: Callable[[str], object] = print) -> bool:
    """Make the archive unless a usable one exists: a 2,000-message run, its analysis in a JVM
    told to archive its classes at exit, the JVM ended as pyspark ends it (its stdin closed)
    and waited for. Whether a usable archive is there afterwards."""
    if usable():
        return True
    key = depends_on()
    if key is None:
        say("zmqload: no java, so no class archive (the report starts without it)")
        return False
    say("zmqload: archiving Spark's classes for a faster first report (once, about 30 s)")
    t0 = time.monotonic()
    where = directory()
    os.makedirs(where, exist_ok=True)
    partial = os.path.join(where, f"{ARCHIVE}.{os.getpid()}")
    with tempfile.TemporaryDirectory(prefix="zmqload-classes-") as tmp:
        subprocess.run(
            [sys.executable, "-m", "zmqload", "run", "--pattern", "push-pull", "--count", "2000"]
            + ["--out", tmp, "--quiet"],
            check=True,
            timeout=120,
        )
        from pyspark import SparkContext

        from .pipeline import analyze
        from .runs import discover_runs
        from .session import get_spark

        spark = get_spark("local[*]", java_options=f"-XX:ArchiveClassesAtExit={partial}")
        classpath = str(spark.sparkContext._jvm.System.getProperty("java.class.path"))  # type: ignore[union-attr]
        analyze(spark, discover_runs(tmp)[0])
        proc = SparkContext._gateway.proc  # type: ignore[union-attr]
        spark.stop()
        proc.stdin.close()  # the gateway's JVM exits on end of input, and writes the archive
        proc.wait(timeout=120)
    if not (os.path.isfile(partial) and maps(partial, classpath)):
        say("zmqload: this java made no usable class archive (the report starts without it)")
        if os.path.exists(partial):
            os.remove(partial)
        return False
    os.replace(partial, os.path.join(where, ARCHIVE))
    with open(os.path.join(where, KEY), "w") as f:
        json.dump({"key": key, "classpath": classpath}, f)
    size_mb = os.path.getsize(os.path.join(where, ARCHIVE)) / 1e6
    say(
        f"zmqload: Spark's classes archived for a faster first report "
        f"({size_mb:,.0f} MB in {where}, {time.monotonic() - t0:.0f} s)"
    )
    return True


if __name__ == "__main__":
    try:
        make()
    except Exception as e:  # noqa: BLE001 - an archive only speeds the report up: setup goes on
        print(
            f"zmqload: no class archive ({e.__class__.__name__}: {e}); the report starts without it"
        )
