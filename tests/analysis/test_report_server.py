"""The warm report server on real `python -m zmqload report` invocations: reused by the next
report, replaced when it died, gone (with its JVM) after its idle time. Its figures are the
synthetic run's known truth. Speed is measured in bench/, not here."""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pyarrow.parquet as pq
import pytest

from .synth import make_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HANG_GUARD_S = 900  # a cold report of 10k records took 200-300 s on the loaded 2-core test machine
IDLE_S = 25  # the first server's: it is killed long before
LAST_IDLE_S = 8  # the replacing server's, whose idle stop the test waits for (read when it starts)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is not alive
        return f.read().split(") ")[-1][0] != "Z"


def children(pid: int) -> list[int]:
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True
    ).stdout
    return [int(x) for x in out.split()]


def wait_until(cond, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


@pytest.fixture
def private_tmp():
    """The server's socket and pid file live under TMPDIR: this test's own, so it never
    meets a user's server, and its leftovers are visible. Not under pytest's basetemp,
    which another pytest session of the same user may prune while this test waits."""
    # Deep, as a user's TMPDIR can be: the socket's path (about 190 bytes) is longer than an
    # AF_UNIX address takes (107), and the server is still started, reached and reused.
    top = tempfile.mkdtemp(prefix="zl-server-", dir="/tmp")
    d = os.path.join(top, "a-user-s-deep-temporary-directory" * 4)
    os.makedirs(d)
    assert len(os.path.join(d, "zmqload-report-0", "0123456789ab", "server.sock")) > 107
    yield d
    shutil.rmtree(top, ignore_errors=True)


def report(run_path, out, tmpdir, idle_s=IDLE_S):
    env = dict(
        os.environ, PYTHONPATH=ROOT, TMPDIR=str(tmpdir), ZMQLOAD_REPORT_SERVER_IDLE_S=str(idle_s)
    )
    env.pop("ZMQLOAD_REPORT_SERVER", None)
    p = subprocess.run(
        [sys.executable, "-m", "zmqload", "report", run_path, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        env=env,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stderr == "", p.stderr  # no JVM noise, no server chatter
    return p


def server_pid(tmpdir) -> int:
    pidfiles = glob.glob(os.path.join(tmpdir, "zmqload-report-*", "*", "server.pid"))
    logs = glob.glob(os.path.join(tmpdir, "zmqload-report-*", "*", "server.log"))
    assert len(pidfiles) == 1, [open(log, errors="replace").read()[-3000:] for log in logs]
    return int(open(pidfiles[0]).read())


def check_figures(out, synth):
    rows = pq.read_table(os.path.join(out, "summary.parquet")).to_pylist()
    total = [r for r in rows if r["stream"] == -1 and r["consumer"] == -1]
    assert len(total) == 1
    assert total[0]["received"] == len(synth.recvs["seq"]) and total[0]["lost"] == 7


def test_server_is_reused_replaced_and_stops_when_idle(private_tmp):
    tmp_path = os.path.join(private_tmp, "data")
    os.makedirs(tmp_path)
    synth = make_run(tmp_path, "srv", streams=1, count=2000, lost_middle=7, seed=5)

    report(synth.path, os.path.join(tmp_path, "r1"), private_tmp)  # starts the server
    first = server_pid(private_tmp)
    assert alive(first)
    check_figures(os.path.join(tmp_path, "r1"), synth)

    report(synth.path, os.path.join(tmp_path, "r2"), private_tmp)  # reuses it
    assert server_pid(private_tmp) == first
    check_figures(os.path.join(tmp_path, "r2"), synth)
    # what `make demo` says last: the server that stays, how long, its memory, how to stop it
    said = status_of(private_tmp)
    rss_mb = sum(
        int(subprocess.run(["ps", "-o", "rss=", "-p", str(p)], capture_output=True, text=True)
            .stdout or 0) for p in [first, *children(first)]
    ) / 1024  # fmt: skip
    found = re.search(
        r"warm for 25 s after the last report \(pid (\d+), ([\d,]+) MB resident", said
    )
    assert found and int(found.group(1)) == first, said
    assert 0.7 * rss_mb <= int(found.group(2).replace(",", "")) <= 1.3 * rss_mb, (said, rss_mb)
    assert said.endswith("stop it now: zmqload report --stop-server"), said

    jvms = children(first)
    assert jvms, "the server's Spark runs in a JVM it started"
    os.kill(first, signal.SIGKILL)  # a crashed server...
    assert wait_until(lambda: not any(alive(p) for p in jvms), 60), "its JVM outlived it"
    report(
        synth.path, os.path.join(tmp_path, "r3"), private_tmp, idle_s=LAST_IDLE_S
    )  # ...is replaced
    second = server_pid(private_tmp)
    assert second != first and alive(second)
    jvms = children(second)  # read at once: LAST_IDLE_S after the report it stops
    assert jvms, "the new server's Spark runs in a JVM it started"
    check_figures(os.path.join(tmp_path, "r3"), synth)

    assert wait_until(lambda: not alive(second), LAST_IDLE_S + 60), "the idle server did not stop"
    assert wait_until(lambda: not any(alive(p) for p in jvms), 60), "its JVM outlived it"
    assert not glob.glob(os.path.join(private_tmp, "zmqload-report-*", "*", "server.sock"))
    assert status_of(private_tmp) == ""  # none runs: nothing said


def status_of(tmpdir) -> str:
    """The line `make demo` prints last, as it prints it."""
    env = dict(os.environ, PYTHONPATH=ROOT, TMPDIR=str(tmpdir), ZMQLOAD_REPORT_SERVER_IDLE_S="25")
    code = "from zmqload.report.server import status_line; print(status_line())"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()
