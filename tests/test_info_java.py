"""`zmqload info` reports the Java the Spark report will run: javacheck's one rule
(JAVA_HOME's bin/java whenever JAVA_HOME is set, else java on PATH), not a probe of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from zmqload import info
from zmqload.analysis import javacheck
from zmqload.errors import ConfigError


def _fake_java(directory, version: str) -> str:
    """A `java` in `directory` that says `version` as `java -version` does (on stderr)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "java")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2024-01-16' >&2\n")
    os.chmod(path, 0o755)
    return path


@pytest.fixture
def two_javas(tmp_path, monkeypatch):
    """JAVA_HOME with a Java 21, and a Java 17 first on PATH."""
    home = tmp_path / "jdk-21"
    home_java = _fake_java(home / "bin", "21.0.2")
    path_java = _fake_java(tmp_path / "path-bin", "17.0.9")
    monkeypatch.setenv("JAVA_HOME", str(home))
    monkeypatch.setenv("PATH", f"{tmp_path / 'path-bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    return home_java, path_java


def test_info_reports_the_java_home_java_the_report_runs_not_the_one_on_path(
    two_javas, monkeypatch
):
    home_java, path_java = two_javas
    assert javacheck.check_java() == (home_java, 21)
    assert info.java_version() == "21.0.2"
    monkeypatch.delenv("JAVA_HOME")
    assert javacheck.check_java() == (path_java, 17)
    assert info.java_version() == "17.0.9"


def test_info_has_no_java_where_the_report_refuses_java_home(two_javas, tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk-gone"))
    with pytest.raises(ConfigError, match="JAVA_HOME"):
        javacheck.check_java()
    assert info.java_version() is None  # not the java on PATH, which the report would not run


def test_zmqload_info_json_says_the_java_home_version(two_javas):
    proc = subprocess.run(
        [sys.executable, "-m", "zmqload", "info", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["java"] == "21.0.2"
