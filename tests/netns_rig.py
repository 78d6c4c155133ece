"""Hosts on one machine: network namespaces joined by a bridge, each a host with its own address
and host name, and a standalone Spark cluster across them (the master on h0, a worker on each
other host), started with pip's `spark-class` (it has no start scripts). The namespaces have no
route out, so nothing sent inside them leaves them.

Used by tests/test_netns_cluster.py and bench/bench_hosts.py (which pins each host to a CPU of
its own, so that a host's load cannot borrow another host's core)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator

PREFIX = "zlt-"
SUBNET = "10.213.0"
HOSTS = ("h0", "h1", "h2")  # h0: the master and the driver; h1, h2: a Spark worker each


def why_not() -> str:
    """Why the rig cannot be made here ('' when it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc", "ss", "unshare", "java", "taskset"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    try:
        import pyspark
    except ImportError:
        return "needs pyspark"
    if not os.path.exists(os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")):
        return "pip's pyspark without bin/spark-class"
    return ""


def ns(host: str) -> str:
    return PREFIX + host


def address(host: str) -> str:
    return f"{SUBNET}.{HOSTS.index(host) + 1}"


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


def in_host(host: str, *args: str) -> list[str]:
    """A command in `host`'s namespace under its own host name (a UTS namespace of its own)."""
    return [
        "ip",
        "netns",
        "exec",
        ns(host),
        "unshare",
        "--uts",
        "sh",
        "-c",
        f'hostname {ns(host)} && exec "$@"',
        "sh",
        *args,
    ]


def remove() -> None:
    for host in (*HOSTS, "sw"):
        name = ns(host)
        if not os.path.exists(f"/run/netns/{name}"):
            continue
        pids = subprocess.run(
            ["ip", "netns", "pids", name], capture_output=True, text=True
        ).stdout.split()
        for pid in pids:  # processes of ours, in the namespace the rig made
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)
    try:
        os.rmdir("/etc/netns")  # when nothing else is there
    except OSError:
        pass


def make() -> None:
    sh("ip", "netns", "add", ns("sw"))
    sh("ip", "-n", ns("sw"), "link", "add", "name", "br0", "type", "bridge")
    sh("ip", "-n", ns("sw"), "link", "set", "dev", "br0", "up")
    for i, host in enumerate(HOSTS):
        sh("ip", "netns", "add", ns(host))
        sh(
            "ip",
            "-n",
            ns("sw"),
            "link",
            "add",
            "name",
            f"port{i}",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns(host),
        )
        sh("ip", "-n", ns("sw"), "link", "set", "dev", f"port{i}", "master", "br0")
        sh("ip", "-n", ns("sw"), "link", "set", "dev", f"port{i}", "up")
        sh("ip", "-n", ns(host), "addr", "add", f"{address(host)}/24", "dev", "eth0")
        sh("ip", "-n", ns(host), "link", "set", "dev", "eth0", "up")
        sh("ip", "-n", ns(host), "link", "set", "dev", "lo", "up")
        # `ip netns exec` mounts these over /etc: the rig's names resolve at once, and no lookup
        # waits for a name server the namespace cannot reach (the JVMs look up their host's name)
        os.makedirs(f"/etc/netns/{ns(host)}", exist_ok=True)
        with open(f"/etc/netns/{ns(host)}/hosts", "w") as f:
            f.write("127.0.0.1 localhost\n" + "".join(f"{address(h)} {ns(h)}\n" for h in HOSTS))
        open(f"/etc/netns/{ns(host)}/resolv.conf", "w").close()


def wait_for(path: str, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if os.path.exists(path) and text in open(path, errors="replace").read():
            return
        time.sleep(0.5)
    tail = open(path, errors="replace").read()[-3000:]
    raise AssertionError(f"{text!r} not in {path} after {timeout_s:g} s:\n{tail}")


@contextlib.contextmanager
def spark_cluster(
    base: str, worker_cores: int = 1, cpus: dict[str, int] | None = None
) -> Iterator[dict]:
    """The namespaces, the master on h0 and a worker of `worker_cores` task slots on h1 and on h2
    (`cpus`: host -> the one CPU its daemons, executors and workers may run on); removed after.
    Yields {"master": URL, "conf": SPARK_CONF_DIR}."""
    import pyspark

    spark_class = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
    conf = os.path.join(base, "conf")
    os.makedirs(conf, exist_ok=True)
    # small JVMs: three daemons and two executors beside the driver on a small machine
    with open(os.path.join(conf, "spark-defaults.conf"), "w") as f:
        f.write("spark.executor.memory 512m\n")
    remove()
    make()
    daemons: list[subprocess.Popen] = []
    master = f"spark://{address('h0')}:7077"
    try:

        def start(host: str, *args: str) -> str:
            log = os.path.join(base, f"{host}.log")
            env = dict(
                os.environ,
                SPARK_LOCAL_IP=address(host),
                SPARK_DAEMON_MEMORY="256m",
                SPARK_CONF_DIR=conf,
                SPARK_WORKER_DIR=os.path.join(base, f"work-{host}"),
            )
            pin = [] if cpus is None or host not in cpus else ["taskset", "-c", str(cpus[host])]
            daemons.append(
                subprocess.Popen(
                    in_host(host, *pin, spark_class, *args),
                    stdout=open(log, "w"),
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            )
            return log

        log = start(
            "h0",
            "org.apache.spark.deploy.master.Master",
            "--host",
            address("h0"),
            "--port",
            "7077",
            "--webui-port",
            "0",
        )
        wait_for(log, "I have been elected leader", 90)
        for host in ("h1", "h2"):
            start(
                host,
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                address(host),
                "--cores",
                str(worker_cores),
                "--memory",
                "1g",
                "--webui-port",
                "0",
                master,
            )
        for host in ("h1", "h2"):
            wait_for(os.path.join(base, f"{host}.log"), "Successfully registered with master", 90)
        yield {"master": master, "conf": conf}
    finally:
        for daemon in daemons:
            try:
                os.killpg(daemon.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            daemon.wait(10)
        remove()
        assert not any(os.path.exists(f"/run/netns/{ns(h)}") for h in (*HOSTS, "sw"))
