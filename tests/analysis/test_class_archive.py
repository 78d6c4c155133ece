"""The class archive made at setup (analysis/class_archive.py): the report's JVM maps it, and an
archive made for another java or Spark, or none, leaves the JVM as it was."""

from __future__ import annotations

import json

import pytest

from zmqload.analysis import class_archive
from zmqload.analysis.class_archive import ARCHIVE, KEY


def test_the_reports_jvm_maps_the_archive_made_at_setup(spark):
    path = class_archive.usable()
    assert path, "no class archive for this java and Spark: `make build` makes it"
    # the kernel's word, not the JVM's: the file is mapped into the session's JVM
    with open(f"/proc/{spark.sparkContext._gateway.proc.pid}/maps") as f:
        assert path in f.read()
    with open(path[: -len(ARCHIVE)] + KEY) as f:
        classpath = json.load(f)["classpath"]
    assert class_archive.maps(path, classpath)


def test_an_archive_for_another_java_or_spark_or_none_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setattr(class_archive, "directory", lambda: str(tmp_path))
    assert class_archive.java_option() == ""  # none made
    archive = tmp_path / ARCHIVE
    archive.write_bytes(b"not an archive")
    key = class_archive.depends_on()
    assert key is not None
    for made_for, used in (
        (key, True),
        ({**key, "pyspark": "3.5.0"}, False),
        ({**key, "java_mtime_ns": 1}, False),
        ({**key, "java": "/opt/other/bin/java"}, False),
    ):
        (tmp_path / KEY).write_text(json.dumps({"key": made_for, "classpath": ""}))
        assert class_archive.java_option() == (f"-XX:SharedArchiveFile={archive}" if used else "")
    (tmp_path / KEY).write_text("{not json")
    assert class_archive.java_option() == ""
    # what make() checks before it keeps an archive: java refuses to map this one
    assert not class_archive.maps(str(archive), "")


@pytest.fixture(autouse=True)
def _java():
    if class_archive.find_java() is None:
        pytest.skip("no java (make test installs one)")
