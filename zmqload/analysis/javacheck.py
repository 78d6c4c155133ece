"""Is there a Java runtime Spark can use? Checked before starting Spark, so a missing or
old Java is one line naming what to install rather than a JVM stack trace."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from ..errors import ConfigError
from .errors import ReportInputError

MIN_JAVA = 17
INSTALL_HINT = (
    "install a Java 17+ runtime: sudo apt-get install openjdk-17-jre-headless (or set JAVA_HOME)"
)


def find_java() -> str | None:
    """The java Spark's launcher will run: $JAVA_HOME/bin/java whenever JAVA_HOME is set
    (spark-class never falls back to PATH then, so neither may we), else java on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if not os.access(candidate, os.X_OK):
            raise ConfigError(
                "JAVA_HOME",
                f"got {home!r}, which has no bin/java; accepted: the directory of a "
                f"Java {MIN_JAVA}+ runtime, or unset JAVA_HOME to use java on PATH",
            )
        return candidate
    return shutil.which("java")


def parse_java_version(text: str) -> int | None:
    """Major version from `java -version` output ("1.8.0_292" -> 8, "17.0.15" -> 17)."""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not m:
        m = re.search(r"\b(?:openjdk|java) (\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    major = int(m.group(1))
    if major == 1 and m.group(2):
        major = int(m.group(2))
    return major


def check_java() -> tuple[str, int]:
    """(path, major version) of a usable Java, else ReportInputError with a one-line hint."""
    java = find_java()
    if java is None:
        raise ReportInputError(f"java not found; {INSTALL_HINT}")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ReportInputError(
            f"cannot run {java} ({e.__class__.__name__}); {INSTALL_HINT}"
        ) from None
    major = parse_java_version(out.stderr + out.stdout)
    if major is None:
        raise ReportInputError(f"cannot tell the version of {java}; {INSTALL_HINT}")
    if major < MIN_JAVA:
        raise ReportInputError(f"{java} is Java {major}, Spark needs {MIN_JAVA}+; {INSTALL_HINT}")
    return java, major
