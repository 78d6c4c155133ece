"""The report's error paths, on real invocations of `python -m zmqload report`: each bad
Spark setting is one line naming the option, exit 2, in bounded time (the bounds here are
hang guards, not speed targets); a bad file among real runs costs only its own figures,
which are checked against pyarrow/numpy reading the same Parquet files."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

import zmqload
from conftest import report_here
from zmqload.contract.wire import SendStatus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HANG_GUARD_S = 300  # a JVM start on a loaded 2-core machine took up to ~60 s


def report(*args, env=None, timeout=HANG_GUARD_S):
    """(exit status, stdout, stderr lines, seconds) of `python -m zmqload report ARGS`."""
    environ = dict(os.environ, PYTHONPATH=ROOT)
    environ.update(env or {})
    for k, v in list(environ.items()):
        if v is None:
            del environ[k]
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "zmqload", "report", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ,
        cwd=ROOT,
    )
    return p.returncode, p.stdout, p.stderr.splitlines(), time.monotonic() - t0


def assert_one_line(rc, err, option):
    assert rc == 2, err
    assert len(err) == 1, err
    assert err[0].startswith(f"zmqload report: error: {option}: "), err
    return err[0]


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("good"))
    return zmqload.run(
        pattern="push-pull", size=64, count=3000, rate=20000, out=out, run_name="good"
    ).run_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "option, value, accepted",
    [
        ("--master", "foo", "spark://HOST:PORT"),
        ("--master", "spark://", "spark://HOST:PORT"),
        ("--driver-memory", "lots", "at least 512m"),
        ("--driver-memory", "1024", "at least 512m"),  # the JVM would read bytes
        ("--driver-memory", "100m", "at least 512m"),
        ("--master-timeout", "0", "seconds > 0"),
    ],
)
def test_bad_spark_option_is_one_line(good_run, option, value, accepted):
    rc, out, err, _ = report(good_run, "--out", os.devnull, option, value)
    assert accepted in assert_one_line(rc, err, option) and not out


def test_yarn_without_a_cluster(good_run, tmp_path):
    rc, _, err, _ = report(
        good_run,
        "--out",
        str(tmp_path),
        "--master",
        "yarn",
        env={"HADOOP_CONF_DIR": None, "YARN_CONF_DIR": None},
    )
    assert "HADOOP_CONF_DIR" in assert_one_line(rc, err, "--master")


def test_driver_memory_from_the_environment(good_run, tmp_path):
    rc, _, err, _ = report(
        good_run, "--out", str(tmp_path), env={"ZMQLOAD_SPARK_DRIVER_MEMORY": "lots"}
    )
    assert_one_line(rc, err, "ZMQLOAD_SPARK_DRIVER_MEMORY")


def test_stale_java_home(good_run, tmp_path):
    """Spark's launcher runs $JAVA_HOME/bin/java whenever JAVA_HOME is set, PATH or not."""
    # TMPDIR: no warm report server to ask (its own Java works): one would be started, after the check.
    rc, _, err, _ = report(
        good_run,
        "--out",
        str(tmp_path / "out"),
        env={"JAVA_HOME": str(tmp_path / "jdk-gone"), "TMPDIR": str(tmp_path)},
    )
    assert "jdk-gone" in assert_one_line(rc, err, "JAVA_HOME")
    assert not (tmp_path / "out" / "index.html").exists() and not list(
        tmp_path.glob("zmqload-report-*/*/server.pid")
    )


def test_nothing_listening_at_the_master(good_run, tmp_path):
    port = free_port()
    rc, _, err, _ = report(
        good_run, "--out", str(tmp_path), "--master", f"spark://127.0.0.1:{port}"
    )
    assert "no Spark master answers" in assert_one_line(rc, err, "--master")


def _spark_jvms_for(master: str) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [ln for ln in ps.splitlines() if f"spark.master={master}" in ln]


@contextlib.contextmanager
def silent_listener():
    """The port of a listener that accepts connections and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held, stop = [], threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        listener.close()


def test_a_silent_master_ends_at_the_timeout(good_run, tmp_path):
    """Something listens but never speaks Spark (Spark itself retries for ~60 s): the report
    ends at --master-timeout with one line, and leaves no JVM behind."""
    with silent_listener() as port:
        master = f"spark://127.0.0.1:{port}"
        rc, _, err, took = report(
            good_run, "--out", str(tmp_path), "--master", master, "--master-timeout", "3"
        )
    line = assert_one_line(rc, err, "--master")
    assert "within 3 s (--master-timeout)" in line
    assert took >= 3  # it did wait for the master
    assert not _spark_jvms_for(master)


# ---- a bad file among real runs -------------------------------------------------------------


@pytest.fixture(scope="module")
def damaged_runs(tmp_path_factory):
    """Three real runs, then: run `fan` loses consumer c1's receive part (truncated), run
    `push` gets an empty extra receive part, run `nometa` a run.json cut in half."""
    out = str(tmp_path_factory.mktemp("damaged"))
    common = dict(out=out, size=64, count=4000, rate=40000)
    zmqload.run(pattern="pub-sub", consumers=2, run_name="fan", **common)
    zmqload.run(pattern="push-pull", run_name="push", **common)
    zmqload.run(pattern="push-pull", run_name="nometa", **common)
    truth = {
        name: {
            kind: [
                pq.read_table(os.path.join(out, f"run={name}", kind, f))
                for f in sorted(os.listdir(os.path.join(out, f"run={name}", kind)))
            ]
            for kind in ("sends", "recvs")
        }
        for name in ("fan", "push")
    }
    fan_c1 = os.path.join(out, "run=fan", "recvs", "part-c1-00000.parquet")
    with open(fan_c1, "r+b") as f:
        f.truncate(os.path.getsize(fan_c1) // 2)
    open(os.path.join(out, "run=push", "recvs", "part-c9-00000.parquet"), "wb").close()
    meta = os.path.join(out, "run=nometa", "run.json")
    text = open(meta).read()
    with open(meta, "w") as f:
        f.write(text[: len(text) // 2])
    return out, truth


def test_a_bad_file_costs_only_its_own_figures(spark, damaged_runs, tmp_path):
    """In this process, on the session's Spark (a real process's stderr, JVM and all, is
    test_corrupt_pages_...'s)."""
    out, truth = damaged_runs
    done = report_here(out, "--out", str(tmp_path))
    rc, stdout, err = done.returncode, done.stdout, done.stderr.splitlines()
    assert rc == 0, err
    # One warning per bad file's run, naming the file and the run; nothing else.
    assert len(err) == 3, err
    assert all(line.startswith("zmqload report: warning: ") for line in err), err
    fan = next(line for line in err if "run fan:" in line)
    assert "recvs/part-c1-00000.parquet" in fan and "truncated" in fan
    push = next(line for line in err if "run push:" in line)
    assert "recvs/part-c9-00000.parquet (empty file)" in push
    nometa = next(line for line in err if "run=nometa" in line)
    assert "run.json" in nometa and "skipped" in nometa

    rows = pq.read_table(tmp_path / "summary.parquet").to_pylist()
    assert {r["run"] for r in rows} == {"fan", "push"}
    total = {r["run"]: r for r in rows if r["consumer"] == -1 and r["stream"] == -1}

    # push: the empty file held nothing, but the report cannot know that: receive figures are
    # marked not computed; send figures are the records' (numpy over the same parts).
    sends = truth["push"]["sends"][0]
    status = np.asarray(sends.column("status"))
    assert total["push"]["received"] is None and total["push"]["lost"] is None
    assert total["push"]["status"].endswith("(partial)")
    assert total["push"]["attempted"] == len(status)
    assert total["push"]["sent"] == int((status == int(SendStatus.OK)).sum())

    # fan: consumer c0's figures are whole (its part is fine), c1's and the run total's are not.
    c0 = truth["fan"]["recvs"][0]
    assert [r for r in rows if r["run"] == "fan" and r["consumer"] == 0][0][
        "received"
    ] == c0.num_rows
    assert [r for r in rows if r["run"] == "fan" and r["consumer"] == 0][0]["unique"] == len(
        np.unique(np.asarray(c0.column("seq")))
    )
    c1 = [r for r in rows if r["run"] == "fan" and r["consumer"] == 1]
    assert c1 and all(r["received"] is None and r["lost"] is None for r in c1)
    assert total["fan"]["received"] is None and total["fan"]["status"].endswith("(partial)")
    fan_status = np.asarray(truth["fan"]["sends"][0].column("status"))
    assert total["fan"]["sent"] == int((fan_status == int(SendStatus.OK)).sum()) > 0
    assert "| fan | complete (partial) |" in stdout and "| push | complete (partial) |" in stdout


def test_strict_makes_a_bad_file_bad_input(damaged_runs, tmp_path):
    out, _ = damaged_runs
    rc, _, err, _ = report(out, "--out", str(tmp_path), "--strict")
    assert rc == 2 and len(err) == 1 and err[0].startswith("zmqload report: error: "), err
    assert "(--strict; 2 more)" in err[0]
    assert not (tmp_path / "out" / "index.html").exists() and not list(
        tmp_path.glob("zmqload-report-*/*/server.pid")
    )


def test_only_damaged_parts_is_nothing_to_report(good_run, tmp_path):
    run = tmp_path / "run=good"
    shutil.copytree(good_run, run)
    for kind in ("sends", "recvs"):
        for f in os.listdir(run / kind):
            (run / kind / f).write_bytes(b"PAR1 not really")
    rc, _, err, _ = report(str(run), "--out", str(tmp_path / "out"))
    assert rc == 2 and err[-1].startswith("zmqload report: error: nothing to report"), err
    assert json.loads((run / "run.json").read_text())["run_id"] == "good"


def test_corrupt_pages_behind_a_sound_footer_are_one_line_naming_the_file(good_run, tmp_path):
    """The footer check cannot see damage inside the pages; Spark fails on it, and the error
    is still one line naming the file (exit 1: the report could not be carried out). A real
    process with a JVM of its own: nothing of the JVM's (Spark's task failure) reaches stderr."""
    run = tmp_path / "run=good"
    shutil.copytree(good_run, run)
    part = sorted((run / "recvs").iterdir())[
        0
    ]  # one part, or several where a loaded machine spilled by time
    size = part.stat().st_size
    with open(part, "r+b") as f:
        f.seek(64)
        f.write(bytes(range(256)) * ((size // 2) // 256))
    assert pq.ParquetFile(part).metadata.num_rows > 0  # the footer still reads
    rc, _, err, _ = report(str(run), "--out", str(tmp_path / "out"), "--master", "local[1]")
    assert rc == 1 and len(err) == 1, err
    assert (
        err[0].startswith("zmqload report: error: ")
        and str(part) in err[0]
        and "Traceback" not in err[0]
    )
