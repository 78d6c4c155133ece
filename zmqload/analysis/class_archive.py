"""Spark's classes in a class-data archive (Java's CDS), made once at setup
(analysis/make_class_archive.py): a report's JVM that maps it starts and runs its first jobs
without reading and verifying ~17k classes again. Used only while its Java and Spark are the
ones it was made with."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .javacheck import find_java

ARCHIVE = "spark-classes.jsa"
KEY = "spark-classes.json"


def directory() -> str:
    """Beside the Python that runs zmqload when it can be written there (a venv: removed with
    it), else the user's cache directory."""
    home = os.path.join(sys.prefix, "share", "zmqload")
    if os.access(sys.prefix, os.W_OK):
        return home
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "zmqload")


def depends_on() -> dict[str, object] | None:
    """What the archive depends on beside its classpath (which the JVM checks itself): the java
    that runs Spark and the Spark it runs. None without a java."""
    java = find_java()
    if java is None:
        return None
    import pyspark

    real = os.path.realpath(java)
    return {
        "java": real,
        "java_mtime_ns": os.stat(real).st_mtime_ns,
        "pyspark": pyspark.__version__,
    }


def usable() -> str | None:
    """The archive's path when it was made for this java and this Spark, else None."""
    where = directory()
    try:
        with open(os.path.join(where, KEY)) as f:
            made_for = json.load(f)
    except (OSError, ValueError):
        return None
    path = os.path.join(where, ARCHIVE)
    if not isinstance(made_for, dict) or "key" not in made_for or not os.path.isfile(path):
        return None
    key = depends_on()
    return path if key is not None and made_for["key"] == key else None


def java_option() -> str:
    """The driver's option that maps the archive, or "" (a JVM that cannot map it, or finds
    its classpath changed, runs without it: sharing is never required)."""
    path = usable()
    return f"-XX:SharedArchiveFile={path}" if path else ""


def maps(path: str, classpath: str) -> bool:
    """Whether this java maps the archive with this classpath (-Xshare:on refuses otherwise)."""
    java = find_java()
    if java is None:
        return False
    done = subprocess.run(
        [java, "-Xshare:on", f"-XX:SharedArchiveFile={path}", "-cp", classpath, "-version"],
        capture_output=True,
        timeout=60,
    )
    return done.returncode == 0
