"""Beyond one machine on one machine (issue 28, section 5): three network namespaces joined by a
bridge, each a host with its own address and host name; a standalone Spark master (with the
driver) on the first, one Spark worker on each of the two others, started with pip's
`spark-class` (it has no start scripts). Runs placed across them: exact accounting (numpy over
the Parquet), distinct hosts in the record, clock offsets within their uncertainty of 0 (one
kernel clock: the built-in truth), and a link limited with tc's token bucket, where the test
watches the kernel's queues itself (ss) to see where the messages wait. The sockets bind at the
namespaces' addresses, beyond loopback: a run across them is CURVE (--curve on: data, control and
clock sockets), in the clear only with --insecure, and refused in one line with neither.

The test makes the rig and removes it (root needed, skipped with the reason otherwise); the
namespaces have no route out, so nothing it sends leaves them."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

import netns_rig

LINK_RATE_BITS = 4_000_000  # the token bucket on h1's link: 4 Mbit/s
WORKTREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(bool(netns_rig.why_not()), reason=netns_rig.why_not() or "-")
_ns, _address, _sh, _in = netns_rig.ns, netns_rig.address, netns_rig.sh, netns_rig.in_host


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    """The namespaces, the master on h0 and a worker of one core on h1 and on h2; removed after."""
    with netns_rig.spark_cluster(str(tmp_path_factory.mktemp("rig"))) as cluster:
        yield cluster


def _run(rig, out, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`zmqload run` as the driver on h0, the master's host."""
    env = dict(
        os.environ, SPARK_LOCAL_IP=_address("h0"), SPARK_CONF_DIR=rig["conf"], PYTHONPATH=WORKTREE
    )
    return subprocess.run(
        _in(
            "h0",
            sys.executable,
            "-m",
            "zmqload",
            "run",
            "--master",
            rig["master"],
            "--placement",
            "spread",
            "--json",
            "--out",
            str(out),
            *args,
        ),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _record(out) -> tuple[str, dict]:
    run_dir = glob.glob(os.path.join(out, "run=*"))[0]
    return run_dir, json.load(open(os.path.join(run_dir, "run.json")))


def test_a_run_across_hosts_accounts_exactly_on_distinct_hosts_with_aligned_clocks(rig, tmp_path):
    """With --curve on: every socket that crosses the bridge is CURVE."""
    done = _run(rig, tmp_path, "--count", "20000", "--rate", "10k", "--curve", "on")
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    run_dir, record = _record(tmp_path)
    recvs = pq.read_table(
        os.path.join(run_dir, "recvs"), columns=["seq", "t_sent_ns", "t_recv_ns"]
    ).to_pydict()
    assert np.array_equal(np.sort(recvs["seq"]), np.arange(20_000)) and got["lost"] == 0
    placed = {w["worker"]: w for w in record["placement"]["workers"]}
    # spread: the producer on one worker host, the consumer on the other (ordered by address)
    assert (placed["p0"]["host"], placed["p0"]["address"]) == (_ns("h1"), _address("h1"))
    assert (placed["c0"]["host"], placed["c0"]["address"]) == (_ns("h2"), _address("h2"))
    assert placed["p0"]["executor_id"] != placed["c0"]["executor_id"]
    # the consumer bound at its host's address, and the producer reached it there
    assert record["topology"]["consumers"]["endpoints"][0].startswith(f"tcp://{_address('h2')}:")
    for worker in placed.values():  # one kernel clock under every namespace: the true offset is 0
        assert 0 < worker["clock_uncertainty_ns"] < 10_000_000
        assert abs(worker["clock_offset_ns"]) <= worker["clock_uncertainty_ns"], worker
    one_way = np.asarray(recvs["t_recv_ns"]) - np.asarray(recvs["t_sent_ns"])
    assert one_way.min() >= -got["clock_uncertainty_ns"]
    assert (
        record["security"] == "curve"
        and "secret" not in open(os.path.join(run_dir, "run.json")).read().lower()
    )


def test_a_run_across_hosts_in_the_clear_without_insecure_is_refused(rig, tmp_path):
    """The driver's address (SPARK_LOCAL_IP) is h0's, not loopback: neither --curve on nor --insecure
    is one line naming --master, exit 2, before Spark starts, nothing written."""
    done = _run(rig, tmp_path / "runs", "--count", "1000", timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "zmqload run: error: --master: got 'tcp://10.213.0.1:*'"
    ), lines
    assert "--insecure" in lines[0] and not (tmp_path / "runs").exists()


def test_a_rate_limited_link_shows_where_the_messages_wait(rig, tmp_path):
    """h1's link limited to 4 Mbit/s by a token bucket, the producer there offering ~4x that: what
    arrives is the link's rate, and the messages wait on the sender's side, in its kernel send
    queue (ss, read by the test itself, sees it; so do zmqload's samples) and in libzmq up to the
    HWM (the producer's sends were held), not in the receiver's kernel queue. In the clear
    (--insecure): the bytes on the link are the messages' own."""
    _sh(
        "ip",
        "netns",
        "exec",
        _ns("h1"),
        "tc",
        "qdisc",
        "add",
        "dev",
        "eth0",
        "root",
        "tbf",
        "rate",
        f"{LINK_RATE_BITS // 1000}kbit",
        "burst",
        "16kb",
        "latency",
        "400ms",
    )
    seen: list[tuple[int, int]] = []  # (peer port, Send-Q bytes) of h1's connections to h2
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            lines = subprocess.run(
                [
                    "ip",
                    "netns",
                    "exec",
                    _ns("h1"),
                    "ss",
                    "-tnH",
                    "state",
                    "established",
                    "dst",
                    _address("h2"),
                ],
                capture_output=True,
                text=True,
            ).stdout.splitlines()
            for line in lines:
                _, send_q, _, peer = line.split()[:4]
                seen.append((int(peer.rsplit(":", 1)[1]), int(send_q)))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        done = _run(
            rig,
            tmp_path,
            "--duration",
            "8",
            "--rate",
            "2000",
            "--size",
            "1000",
            "--sndhwm",
            "200",
            "--sndbuf",
            "65536",
            "--insecure",
        )
    finally:
        stop.set()
        watcher.join(5)
        _sh("ip", "netns", "exec", _ns("h1"), "tc", "qdisc", "del", "dev", "eth0", "root")
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    run_dir, record = _record(tmp_path)
    port = int(record["topology"]["consumers"]["endpoints"][0].rsplit(":", 1)[1])
    sends = pq.read_table(os.path.join(run_dir, "sends"), columns=["seq", "status"]).to_pydict()
    recvs = pq.read_table(
        os.path.join(run_dir, "recvs"), columns=["seq", "size", "t_recv_ns"]
    ).to_pydict()
    ok = np.asarray(sends["seq"])[np.asarray(sends["status"]) == 0]
    assert (
        np.array_equal(np.sort(recvs["seq"]), np.sort(ok)) and got["lost"] == 0
    )  # late, never lost
    # what arrived came at the link's rate (payload under the link's bits), far under what was offered
    t = np.asarray(recvs["t_recv_ns"])
    arrived_bits = 8 * np.asarray(recvs["size"]).sum() / ((t.max() - t.min()) / 1e9)
    assert 0.5 * LINK_RATE_BITS < arrived_bits < 1.05 * LINK_RATE_BITS, arrived_bits
    assert got["send_rate"] < 0.5 * 2000
    # where they waited: the sender's kernel queue on that connection (ss), libzmq's pipe behind it
    # (the producer's sends were held at the HWM), not the receiver's kernel queue
    queued = [q for peer, q in seen if peer == port]
    assert queued and np.median(queued) >= 16_384, seen[-20:]
    assert got["producers"][0]["blocked_sends"] > 0 and got["queue_peak"]["libzmq_messages"] > 0
    samples = pq.read_table(os.path.join(run_dir, "samples")).to_pydict()
    role, sendq, recvq = (
        np.asarray(samples[c]) for c in ("role", "tcp_sendq_bytes", "tcp_recvq_bytes")
    )
    # most of the time (the medians of the samples ~10/s: a consumer on a busy machine lags a moment)
    assert np.median(sendq[role == "producer"]) >= 16_384
    assert np.median(recvq[role == "consumer"]) < np.median(sendq[role == "producer"]) / 4
