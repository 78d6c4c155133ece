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
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

PREFIX = "zlt-"
SUBNET = "10.213.0"
HOSTS = ("h0", "h1", "h2")          # h0: the master and the driver; h1, h2: a Spark worker each
LINK_RATE_BITS = 4_000_000          # the token bucket on h1's link: 4 Mbit/s
WORKTREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _why_not() -> str:
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc", "ss", "unshare", "java"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    try:
        import pyspark
    except ImportError:
        return "needs pyspark"
    if not os.path.exists(os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")):
        return "pip's pyspark without bin/spark-class"
    return ""


pytestmark = pytest.mark.skipif(bool(_why_not()), reason=_why_not() or "-")


def _ns(host: str) -> str:
    return PREFIX + host


def _address(host: str) -> str:
    return f"{SUBNET}.{HOSTS.index(host) + 1}"


def _sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


def _in(host: str, *args: str) -> list[str]:
    """A command in `host`'s namespace under its own host name (a UTS namespace of its own)."""
    return ["ip", "netns", "exec", _ns(host), "unshare", "--uts", "sh", "-c",
            f'hostname {_ns(host)} && exec "$@"', "sh", *args]


def _remove_rig() -> None:
    for host in (*HOSTS, "sw"):
        name = _ns(host)
        if not os.path.exists(f"/run/netns/{name}"):
            continue
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
        for pid in pids:        # processes of ours, in the namespace the test made
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)
    try:
        os.rmdir("/etc/netns")      # when nothing else is there
    except OSError:
        pass


def _make_rig() -> None:
    _sh("ip", "netns", "add", _ns("sw"))
    _sh("ip", "-n", _ns("sw"), "link", "add", "name", "br0", "type", "bridge")
    _sh("ip", "-n", _ns("sw"), "link", "set", "dev", "br0", "up")
    for i, host in enumerate(HOSTS):
        _sh("ip", "netns", "add", _ns(host))
        _sh("ip", "-n", _ns("sw"), "link", "add", "name", f"port{i}", "type", "veth", "peer", "name", "eth0",
            "netns", _ns(host))
        _sh("ip", "-n", _ns("sw"), "link", "set", "dev", f"port{i}", "master", "br0")
        _sh("ip", "-n", _ns("sw"), "link", "set", "dev", f"port{i}", "up")
        _sh("ip", "-n", _ns(host), "addr", "add", f"{_address(host)}/24", "dev", "eth0")
        _sh("ip", "-n", _ns(host), "link", "set", "dev", "eth0", "up")
        _sh("ip", "-n", _ns(host), "link", "set", "dev", "lo", "up")
        # `ip netns exec` mounts these over /etc: the rig's names resolve at once, and no lookup
        # waits for a name server the namespace cannot reach (the JVMs look up their host's name)
        os.makedirs(f"/etc/netns/{_ns(host)}", exist_ok=True)
        with open(f"/etc/netns/{_ns(host)}/hosts", "w") as f:
            f.write("127.0.0.1 localhost\n" + "".join(f"{_address(h)} {_ns(h)}\n" for h in HOSTS))
        open(f"/etc/netns/{_ns(host)}/resolv.conf", "w").close()


def _wait_for(path: str, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.path.exists(path) and text in open(path, errors="replace").read():
            return
        time.sleep(0.5)
    tail = open(path, errors="replace").read()[-3000:]
    raise AssertionError(f"{text!r} not in {path} after {timeout_s:g} s:\n{tail}")


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    """The namespaces, the master on h0 and a worker of one core on h1 and on h2; removed after."""
    import pyspark
    spark_class = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
    base = tmp_path_factory.mktemp("rig")
    conf = base / "conf"
    conf.mkdir()
    # small JVMs: three daemons and two executors beside the driver on a small machine
    (conf / "spark-defaults.conf").write_text("spark.executor.memory 512m\n")
    _remove_rig()
    _make_rig()
    daemons: list[subprocess.Popen] = []
    master = f"spark://{_address('h0')}:7077"
    try:
        def start(host: str, *args: str) -> str:
            log = str(base / f"{host}.log")
            env = dict(os.environ, SPARK_LOCAL_IP=_address(host), SPARK_DAEMON_MEMORY="256m",
                       SPARK_CONF_DIR=str(conf), SPARK_WORKER_DIR=str(base / f"work-{host}"))
            daemons.append(subprocess.Popen(_in(host, spark_class, *args), stdout=open(log, "w"),
                                            stderr=subprocess.STDOUT, env=env, start_new_session=True))
            return log
        log = start("h0", "org.apache.spark.deploy.master.Master", "--host", _address("h0"), "--port", "7077",
                    "--webui-port", "0")
        _wait_for(log, "I have been elected leader", 90)
        for host in ("h1", "h2"):
            log = start(host, "org.apache.spark.deploy.worker.Worker", "--host", _address(host), "--cores", "1",
                        "--memory", "1g", "--webui-port", "0", master)
        for host in ("h1", "h2"):
            _wait_for(str(base / f"{host}.log"), "Successfully registered with master", 90)
        yield {"master": master, "conf": str(conf)}
    finally:
        for daemon in daemons:
            try:
                os.killpg(daemon.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            daemon.wait(10)
        _remove_rig()
        assert not any(os.path.exists(f"/run/netns/{_ns(h)}") for h in (*HOSTS, "sw"))


def _run(rig, out, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`zmqload run` as the driver on h0, the master's host."""
    env = dict(os.environ, SPARK_LOCAL_IP=_address("h0"), SPARK_CONF_DIR=rig["conf"], PYTHONPATH=WORKTREE)
    return subprocess.run(_in("h0", sys.executable, "-m", "zmqload", "run", "--master", rig["master"],
                              "--placement", "spread", "--json", "--out", str(out), *args),
                          capture_output=True, text=True, timeout=timeout, env=env)


def _record(out) -> tuple[str, dict]:
    run_dir = glob.glob(os.path.join(out, "run=*"))[0]
    return run_dir, json.load(open(os.path.join(run_dir, "run.json")))


def test_a_run_across_hosts_accounts_exactly_on_distinct_hosts_with_aligned_clocks(rig, tmp_path):
    """With --curve on: every socket that crosses the bridge is CURVE."""
    done = _run(rig, tmp_path, "--count", "20000", "--rate", "10k", "--curve", "on")
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    run_dir, record = _record(tmp_path)
    recvs = pq.read_table(os.path.join(run_dir, "recvs"), columns=["seq", "t_sent_ns", "t_recv_ns"]).to_pydict()
    assert np.array_equal(np.sort(recvs["seq"]), np.arange(20_000)) and got["lost"] == 0
    placed = {w["worker"]: w for w in record["placement"]["workers"]}
    # spread: the producer on one worker host, the consumer on the other (ordered by address)
    assert (placed["p0"]["host"], placed["p0"]["address"]) == (_ns("h1"), _address("h1"))
    assert (placed["c0"]["host"], placed["c0"]["address"]) == (_ns("h2"), _address("h2"))
    assert placed["p0"]["executor_id"] != placed["c0"]["executor_id"]
    # the consumer bound at its host's address, and the producer reached it there
    assert record["topology"]["consumers"]["endpoints"][0].startswith(f"tcp://{_address('h2')}:")
    for worker in placed.values():      # one kernel clock under every namespace: the true offset is 0
        assert 0 < worker["clock_uncertainty_ns"] < 10_000_000
        assert abs(worker["clock_offset_ns"]) <= worker["clock_uncertainty_ns"], worker
    one_way = np.asarray(recvs["t_recv_ns"]) - np.asarray(recvs["t_sent_ns"])
    assert one_way.min() >= -got["clock_uncertainty_ns"]
    assert record["security"] == "curve" and "secret" not in open(os.path.join(run_dir, "run.json")).read().lower()


def test_a_run_across_hosts_in_the_clear_without_insecure_is_refused(rig, tmp_path):
    """The driver's address (SPARK_LOCAL_IP) is h0's, not loopback: neither --curve on nor --insecure
    is one line naming --master, exit 2, before Spark starts, nothing written."""
    done = _run(rig, tmp_path / "runs", "--count", "1000", timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zmqload run: error: --master: got 'tcp://10.213.0.1:*'"), lines
    assert "--insecure" in lines[0] and not (tmp_path / "runs").exists()


def test_a_rate_limited_link_shows_where_the_messages_wait(rig, tmp_path):
    """h1's link limited to 4 Mbit/s by a token bucket, the producer there offering ~4x that: what
    arrives is the link's rate, and the messages wait on the sender's side, in its kernel send
    queue (ss, read by the test itself, sees it; so do zmqload's samples) and in libzmq up to the
    HWM (the producer's sends were held), not in the receiver's kernel queue. In the clear
    (--insecure): the bytes on the link are the messages' own."""
    _sh("ip", "netns", "exec", _ns("h1"), "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate",
        f"{LINK_RATE_BITS // 1000}kbit", "burst", "16kb", "latency", "400ms")
    seen: list[tuple[int, int]] = []        # (peer port, Send-Q bytes) of h1's connections to h2
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            lines = subprocess.run(["ip", "netns", "exec", _ns("h1"), "ss", "-tnH", "state", "established",
                                    "dst", _address("h2")], capture_output=True, text=True).stdout.splitlines()
            for line in lines:
                _, send_q, _, peer = line.split()[:4]
                seen.append((int(peer.rsplit(":", 1)[1]), int(send_q)))
            time.sleep(0.2)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        done = _run(rig, tmp_path, "--duration", "8", "--rate", "2000", "--size", "1000", "--sndhwm", "200",
                    "--sndbuf", "65536", "--insecure")
    finally:
        stop.set()
        watcher.join(5)
        _sh("ip", "netns", "exec", _ns("h1"), "tc", "qdisc", "del", "dev", "eth0", "root")
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    run_dir, record = _record(tmp_path)
    port = int(record["topology"]["consumers"]["endpoints"][0].rsplit(":", 1)[1])
    sends = pq.read_table(os.path.join(run_dir, "sends"), columns=["seq", "status"]).to_pydict()
    recvs = pq.read_table(os.path.join(run_dir, "recvs"), columns=["seq", "size", "t_recv_ns"]).to_pydict()
    ok = np.asarray(sends["seq"])[np.asarray(sends["status"]) == 0]
    assert np.array_equal(np.sort(recvs["seq"]), np.sort(ok)) and got["lost"] == 0     # late, never lost
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
    role, sendq, recvq = (np.asarray(samples[c]) for c in ("role", "tcp_sendq_bytes", "tcp_recvq_bytes"))
    # most of the time (the medians of the samples ~10/s: a consumer on a busy machine lags a moment)
    assert np.median(sendq[role == "producer"]) >= 16_384
    assert np.median(recvq[role == "consumer"]) < np.median(sendq[role == "producer"]) / 4
