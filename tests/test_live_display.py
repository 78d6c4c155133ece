"""The live display of a long run (issue 30: a soak run shows throughout what it holds): memory of
every process of the run and the disk its directory takes and has left, each checked, while the
run goes on, against what the kernel says about the same processes and files (/proc, du, df)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import threading
import time

from rich.console import Console

import zmqload
from conftest import read_meta
from zmqload.cli.display import LiveProgress

MIB = 1024


def _vm_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def _du_bytes(directory: str) -> int:
    out = subprocess.run(
        ["du", "-s", "-B1", directory], capture_output=True, text=True, check=True
    ).stdout
    return int(out.split()[0])


def _df_avail_bytes(directory: str) -> int:
    out = subprocess.run(
        ["df", "-B1", "--output=avail", directory], capture_output=True, text=True, check=True
    ).stdout
    return int(out.split()[-1])


class Watching(LiveProgress):
    """The live display, and beside each fresh footprint the kernel's own figures for the run's
    processes (VmRSS from /proc) and directory (du, df) at the same moment."""

    def __init__(self, console: Console, out_dir: str):
        super().__init__(console, total_s=3.0)
        self.out_dir = out_dir
        self.checks: list[tuple] = []  # (snapshot, the kernel's rss sum, du, df readings)
        self._seen_disk = -1
        # The disk's free space read every 50 ms: other processes (the suite's other worker) can
        # write hundreds of MB in the second a footprint may be old, so a footprint is held to
        # the readings of its last 1.5 s, one of which was taken when it was.
        self._free: list[tuple[float, int]] = []
        self.done = threading.Event()
        threading.Thread(target=self._sample_free, daemon=True).start()

    def _sample_free(self) -> None:
        while True:
            st = os.statvfs(os.path.dirname(self.out_dir))  # exists before the run makes out_dir
            self._free.append((time.monotonic(), st.f_bavail * st.f_frsize))
            if self.done.wait(0.05):
                return

    def update(self, snapshot):
        super().update(snapshot)
        if (
            snapshot.phase != "running"
            or snapshot.disk_bytes == self._seen_disk
            or snapshot.rss_kb < 0
        ):
            return
        self._seen_disk = snapshot.disk_bytes
        run_dir = os.path.join(self.out_dir, "run=live")
        try:
            pids = read_meta(run_dir)["worker_pids"]
            rss = sum(_vm_rss_kb(pid) for pid in pids.values()) + _vm_rss_kb(os.getpid())
        except (OSError, KeyError, ValueError):
            return
        since = time.monotonic() - 1.5
        recent = [free for t, free in self._free if t >= since]
        self.checks.append((snapshot, rss, _du_bytes(run_dir), [_df_avail_bytes(run_dir), *recent]))


def test_the_live_display_shows_memory_and_disk_as_the_kernel_counts_them(out_dir):
    screen = io.StringIO()
    live = Watching(Console(file=screen, force_terminal=True, width=220), out_dir)
    result = zmqload.run(
        zmqload.Workload(
            pattern="push-pull",
            transport="tcp",
            rate=20_000,
            duration=3,
            run_name="live",
            out=out_dir,
        ),
        progress=live,
    )
    live.done.set()
    assert result.status == "complete"
    assert len(live.checks) >= 2, "the footprint is measured once a second"
    for snap, rss_kb, du, avail in live.checks:
        # each worker's VmRSS is sent with its progress (~10/s): the processes' memory, within 10%
        assert abs(snap.rss_kb - rss_kb) <= 0.1 * rss_kb, (snap.rss_kb, rss_kb)
        assert snap.rss_kb > 3 * 20 * MIB  # three Python processes with numpy: not a token figure
        # the directory grows while it runs, and the footprint is up to a second old
        assert 0 < snap.disk_bytes <= du and du - snap.disk_bytes <= 0.1 * du + 4_000_000, (
            snap.disk_bytes,
            du,
        )
        nearest = min(abs(snap.disk_free_bytes - free) for free in avail)
        assert nearest <= 64_000_000 + (du - snap.disk_bytes), (snap.disk_free_bytes, avail)
        assert 0 <= snap.in_flight <= snap.sent
    shown = screen.getvalue()
    assert "memory " in shown and " MiB" in shown and " written" in shown and " free" in shown
    assert "in flight ~" in shown


def test_a_run_on_a_terminal_shows_memory_and_disk(tmp_path):
    """As a user sees it: `zmqload run` on a pseudo-terminal (script(1)) draws the live lines."""
    if shutil.which("script") is None:
        raise AssertionError("script(1) (util-linux) is needed to give the run a terminal")
    command = (
        f"{sys.executable} -m zmqload run --pattern push-pull --rate 10k --duration 2.5 "
        f"--out {tmp_path} --run-name tty"
    )
    proc = subprocess.run(
        ["script", "-qfec", command, os.devnull],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, COLUMNS="220", LINES="40"),
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "memory " in proc.stdout and " written" in proc.stdout and " free" in proc.stdout, (
        proc.stdout[-2000:]
    )
    assert read_meta(os.path.join(str(tmp_path), "run=tty"))["status"] == "complete"


def test_a_stopped_display_stays_stopped():
    """The run stops its display before the collect, then pumps the workers' last finals, which
    update it again: that started a new display whose refresh thread redrew a frozen frame
    (`running`, 0 msg/s) through an hour-long run's 41 s collect. Once stopped, nothing is drawn."""
    from zmqload.runner.state import ProgressSnapshot

    screen = io.StringIO()
    progress = LiveProgress(Console(file=screen, force_terminal=True, width=200))
    snapshot = ProgressSnapshot("push-pull", "tcp", "running", 5.0, 100, 0, 90, 1, 0)
    progress.start(snapshot)
    progress.started -= 5.0  # the run has lasted five seconds: the display shows
    progress.update(snapshot)
    time.sleep(0.4)  # the display's refresh thread draws 8 frames a second
    assert progress.live is not None and "received 90" in screen.getvalue()
    progress.stop()
    drawn = len(screen.getvalue())
    progress._last -= 1.0  # long enough since the last frame for a new one
    progress.update(ProgressSnapshot("push-pull", "tcp", "stopping", 6.0, 100, 0, 95, 1, 0))
    time.sleep(0.4)
    assert progress.live is None and len(screen.getvalue()) == drawn
