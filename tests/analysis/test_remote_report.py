"""`zmqload report --remote sc://HOST:PORT`: the report computed by a real Spark Connect server
(pyspark's own SparkConnectServer, started here through spark-submit on a loopback port) equals
the report made in-process, figure for figure, on a real run; its counts are also checked
against pyarrow reading the run's Parquet directly. A server that is absent or silent is one
line naming --remote, exit 2, in bounded time, with nothing written."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import zmqload
from zmqload.contract.wire import SendStatus

from .test_report_errors import HANG_GUARD_S, assert_one_line, free_port, report, silent_listener

START_S = 240  # a Connect server's JVM on a loaded 2-core machine


def _spark_submit() -> str:
    from pyspark.find_spark_home import _find_spark_home

    return os.path.join(_find_spark_home(), "bin", "spark-submit")


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    """sc://127.0.0.1:PORT of a Spark Connect server (local[2]) of this test's own, stopped after."""
    pytest.importorskip(
        "grpc", reason="Spark Connect's client is not installed: pip install 'zmqload[remote]'"
    )
    port = free_port()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    with open(tmp_path_factory.mktemp("connect") / "server.log", "wb") as log:
        # spark-submit execs its JVM: this pid is the server's
        proc = subprocess.Popen(
            [
                _spark_submit(),
                "--class",
                "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--master",
                "local[2]",
                "--conf",
                "spark.ui.enabled=false",
                "--conf",
                "spark.connect.grpc.binding.address=127.0.0.1",
                "--conf",
                f"spark.connect.grpc.binding.port={port}",
            ],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_S
    try:
        while True:
            assert proc.poll() is None, (
                f"the Connect server exited ({proc.returncode}): see {log.name}"
            )
            assert time.monotonic() < deadline, (
                f"no Connect server on port {port} within {START_S} s"
            )
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """Two producers, two consumers over tcp, paced and bounded: a real run with two streams."""
    out = str(tmp_path_factory.mktemp("remote-runs"))
    return zmqload.run(
        pattern="push-pull",
        transport="tcp",
        producers=2,
        consumers=2,
        size=64,
        count=4000,
        rate=20000,
        out=out,
        run_name="remote",
    ).run_dir


def _summary(out: str):
    table = pq.read_table(os.path.join(out, "summary.parquet"))
    return table.sort_by([("run", "ascending"), ("consumer", "ascending"), ("stream", "ascending")])


def test_the_report_through_spark_connect_equals_the_local_one(connect_server, real_run, tmp_path):
    local, remote = str(tmp_path / "local"), str(tmp_path / "remote")
    rc, _, err, _ = report(real_run, "--out", local, "--master", "local[2]")
    assert rc == 0, err
    rc, stdout, err, _ = report(real_run, "--out", remote, "--remote", connect_server)
    assert rc == 0, err
    assert err == [], err  # no warning of Connect's client reaches the report
    mine, theirs = _summary(local), _summary(remote)
    assert mine.schema == theirs.schema and mine.num_rows == theirs.num_rows > 0
    for name in mine.column_names:  # figure for figure
        assert mine.column(name).to_pylist() == theirs.column(name).to_pylist(), name
    with (
        open(os.path.join(local, "summary.csv")) as a,
        open(os.path.join(remote, "summary.csv")) as b,
    ):
        assert a.read() == b.read()
    assert "remote" in stdout and os.path.getsize(os.path.join(remote, "index.html")) > 0

    # The counts, from the Parquet files alone (pyarrow, no zmqload).
    sends = pq.read_table(os.path.join(real_run, "sends"))
    recvs = pq.read_table(os.path.join(real_run, "recvs"))
    sent = int(pc.sum(pc.equal(sends.column("status"), SendStatus.OK)).as_py())
    total = theirs.filter(
        pc.and_(pc.equal(theirs.column("stream"), -1), pc.equal(theirs.column("consumer"), -1))
    )
    assert total.num_rows == 1
    assert total.column("sent")[0].as_py() == sent == 8000
    assert total.column("received")[0].as_py() == recvs.num_rows == 8000
    seqs = np.asarray(recvs.column("seq"))
    assert total.column("unique")[0].as_py() == len(
        np.unique(np.asarray(recvs.column("stream")).astype(np.int64) << 48 | seqs)
    )


def test_nothing_listening_at_the_remote(real_run, tmp_path):
    out = tmp_path / "none"
    rc, _, err, took = report(
        real_run, "--out", str(out), "--remote", f"sc://127.0.0.1:{free_port()}"
    )
    assert "no Spark Connect server answers at sc://127.0.0.1:" in assert_one_line(
        rc, err, "--remote"
    )
    assert took < HANG_GUARD_S and not out.exists()


def test_a_silent_remote_ends_at_the_timeout(real_run, tmp_path):
    """A port that accepts and never speaks (Connect's client would retry it for minutes): one
    line at --master-timeout."""
    out = tmp_path / "silent"
    with silent_listener() as port:
        rc, _, err, took = report(
            real_run,
            "--out",
            str(out),
            "--remote",
            f"sc://127.0.0.1:{port}/;token=SECRET",
            "--master-timeout",
            "3",
        )
    line = assert_one_line(rc, err, "--remote")
    assert "within 3 s (--master-timeout)" in line and "SECRET" not in line
    assert 3 <= took < HANG_GUARD_S and not out.exists()


@pytest.mark.parametrize(
    "value", ["http://h:15002", "sc://h", "sc://h:0", "sc://:15002", "sc://h:15002/;token"]
)
def test_a_malformed_remote_is_one_line(real_run, tmp_path, value):
    rc, _, err, _ = report(real_run, "--out", str(tmp_path / "x"), "--remote", value)
    assert "accepted: sc://HOST:PORT" in assert_one_line(rc, err, "--remote")


@pytest.mark.parametrize("other", [["--master", "local[2]"], ["--driver-memory", "2g"]])
def test_remote_with_a_local_spark_option_is_one_line(real_run, tmp_path, other):
    out = tmp_path / "both"
    rc, _, err, _ = report(
        real_run, "--out", str(out), "--remote", f"sc://127.0.0.1:{free_port()}", *other
    )
    assert f"given with {other[0]}" in assert_one_line(rc, err, "--remote")
    assert not out.exists()
