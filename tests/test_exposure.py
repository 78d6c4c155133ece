"""Sockets beyond loopback (contract/exposure.py): a bind beyond loopback without --curve on or
--insecure is refused before the run in one line, exit 2, nothing written; with --insecure or
--curve on the run is made (accounting checked against pyarrow over its records); with --curve on
the control channel is a CURVE server that a plain pyzmq peer (NULL, or CURVE without the run's
server key) cannot hand a message."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import zmq

from zmqload.contract import control
from zmqload.runner.preflight import beyond_loopback, preflight
from zmqload.contract.ids import Role, WorkerId
from zmqload.contract.workload import Workload
from zmqload.runner.channel import ControlClient, ControlServer, new_endpoint
from zmqload.runner.curve import client_view, control_keys
from conftest import read_meta, read_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _zmqload(*args, env=None):
    environ = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "zmqload", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=environ,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    "endpoint, beyond",
    [
        ("tcp://127.0.0.1:5555", False),
        ("tcp://127.9.9.9:*", False),
        ("tcp://[::1]:5555", False),
        ("tcp://localhost:0", False),
        ("tcp://lo:5555", False),
        ("ipc:///tmp/x", False),
        ("inproc://x", False),
        ("tcp://*:5555", True),
        ("tcp://0.0.0.0:*", True),
        ("tcp://[::]:5555", True),
        ("tcp://10.1.2.3:5555", True),
        ("tcp://192.168.0.1:0", True),
        ("tcp://eth-that-is-no-name:5555", True),
    ],
)
def test_what_is_beyond_loopback(endpoint, beyond):
    assert beyond_loopback(endpoint) is beyond


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--host", "0.0.0.0"], "--host"),
        (["--endpoint", "tcp://0.0.0.0:*"], "--endpoint"),
        (["--consumers-bind", "tcp://10.200.0.1:0"], "--consumers-bind"),
        (
            ["--master", "local[2]"],
            "--master",
        ),  # SPARK_LOCAL_IP below: the driver's address is not loopback
    ],
)
def test_a_bind_beyond_loopback_in_the_clear_is_refused_in_one_line(tmp_path, args, flag):
    out = tmp_path / "runs"
    p = _zmqload(
        "run", "--count", "1000", "--out", str(out), *args, env={"SPARK_LOCAL_IP": "10.200.0.1"}
    )
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"zmqload run: error: {flag}: got "), lines
    assert "--insecure" in lines[0] and "--curve on" in lines[0] and "Traceback" not in p.stderr
    assert not out.exists() or not os.listdir(out)


def _exact(run_dir: str, count: int) -> None:
    """Every message sent was received once: pyarrow over the run's Parquet, not zmqload's figures."""
    sends, recvs = read_table(run_dir, "sends"), read_table(run_dir, "recvs")
    assert sends.num_rows == count and np.all(sends.column("status").to_numpy() == 0)
    assert np.array_equal(np.sort(recvs.column("seq").to_numpy()), np.arange(count))


@pytest.mark.parametrize(
    "extra, security", [(["--insecure"], "null"), (["--curve", "on"], "curve")]
)
def test_with_insecure_or_curve_the_wildcard_bind_runs(tmp_path, extra, security):
    out = tmp_path / "runs"
    p = _zmqload(
        "run",
        "--host",
        "0.0.0.0",
        "--count",
        "5000",
        "--rate",
        "50k",
        "--out",
        str(out),
        "--run-name",
        "wide",
        *extra,
    )
    assert p.returncode == 0, p.stderr
    run_dir = str(out / "run=wide")
    meta = read_meta(run_dir)
    assert meta["status"] == "complete" and meta["security"] == security
    assert meta["workload"]["insecure"] is (security == "null")
    _exact(run_dir, 5000)
    with open(os.path.join(run_dir, "run.json")) as f:
        assert "secret" not in f.read().lower()


def test_the_workload_refuses_it_too():
    """The Python API, sweeps and capacity preflight the same Workload (runner/preflight.py, after
    Workload.validate, which checks the values only)."""
    from zmqload.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^--host: got 'tcp://0.0.0.0:0'"):
        preflight(Workload(host="0.0.0.0").validate())
    preflight(Workload(host="0.0.0.0", insecure=True).validate())
    preflight(Workload(host="127.0.0.1").validate())


@pytest.fixture
def curve_control():
    """A control server of a --curve on run on loopback tcp, and its keys."""
    keys = control_keys(Workload(curve="on").validate())
    endpoint, directory = new_endpoint("127.0.0.1")
    server = ControlServer(endpoint, keys)
    yield server, keys
    server.close()
    shutil.rmtree(directory, ignore_errors=True)


def _plain_peer(
    endpoint: str, curve_server_key: bytes | None = None
) -> tuple[zmq.Context, zmq.Socket]:
    """A plain pyzmq DEALER named like a worker: NULL, or a CURVE client of `curve_server_key`."""
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.ROUTING_ID, b"p0")
    sock.setsockopt(zmq.LINGER, 0)
    # a refused handshake leaves it without a pipe for a while: a send then blocks (for ever, once)
    sock.setsockopt(zmq.SNDTIMEO, 1000)
    if curve_server_key is not None:
        public, secret = zmq.curve_keypair()
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = (
            curve_server_key,
            public,
            secret,
        )
    sock.connect(endpoint)
    return context, sock


def test_a_null_peer_cannot_hand_the_controller_a_message(curve_control):
    server, keys = curve_control
    assert server.endpoint.startswith("tcp://127.0.0.1:") and server.client_keys == client_view(
        keys
    )
    intruder = control.Failed("injected", None, "")
    wrong_key, _ = zmq.curve_keypair()
    for server_key in (None, wrong_key):
        context, sock = _plain_peer(server.endpoint, server_key)
        try:
            for _ in range(5):
                try:
                    sock.send_multipart([bytes(f) for f in control.encode(intruder)])
                except zmq.Again:  # not even queued: no connection would take it
                    break
            assert server.recv(1500) is None  # nothing reached the controller
        finally:
            sock.close(0)
            context.term()
    # the run's own worker, with the keys of its spec, is heard
    client = ControlClient(server.endpoint, WorkerId(Role.PRODUCER, 0), server.client_keys)
    try:
        client.send(control.Ready(["tcp://127.0.0.1:1"]))
        got = server.recv(5000)
        assert (
            got is not None
            and got[0] == WorkerId(Role.PRODUCER, 0)
            and got[1] == control.Ready(["tcp://127.0.0.1:1"])
        )
    finally:
        client.close(0)


def test_without_curve_the_same_null_peer_is_heard():
    """The control: the injection above fails because of CURVE, not because the peer is wrong."""
    endpoint, directory = new_endpoint("127.0.0.1")
    server = ControlServer(endpoint)
    context, sock = _plain_peer(server.endpoint)
    try:
        sock.send_multipart(
            [bytes(f) for f in control.encode(control.Failed("injected", None, ""))]
        )
        got = server.recv(5000)
        assert got is not None and got[1] == control.Failed("injected", None, "")
    finally:
        sock.close(0)
        context.term()
        server.close()
        shutil.rmtree(directory, ignore_errors=True)
