"""The summary table a person reads, on a real failed run: a consumer SIGKILLed mid-run
(tests/fault_table.py injects it) shows an `unknown` row with run.json's figure, and the
`lost` line says what it sums; a complete run shows no `unknown` row."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import fault_table as ft
from conftest import end_with_the_test, read_meta


def _figure(stdout: str, label: str) -> str:
    """The value cell of the summary row whose figure is `label`."""
    for line in stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│|]", line) if c.strip()]
        if len(cells) == 2 and cells[0] == label:
            return cells[1]
    raise AssertionError(f"no {label!r} row in:\n{stdout}")


def _run(out: str, name: str, *args: str) -> subprocess.Popen:
    return end_with_the_test(
        subprocess.Popen(
            [sys.executable, "-m", "zmqload", "run", *args, "--out", out, "--run-name", name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(ft.environment(), COLUMNS="200"),
        )
    )  # one line per row


def test_summary_shows_unknown_when_a_consumer_died(tmp_path):
    out = str(tmp_path)
    run_dir = os.path.join(out, "run=shown")
    proc = _run(out, "shown", *ft.PACED)
    try:
        pid = ft.wait_started(run_dir)["worker_pids"]["c0"]
        time.sleep(ft.KILL_AFTER_S)
        os.kill(pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "Traceback" not in stderr, stderr
    counters = read_meta(run_dir)["counters"]
    assert counters["unknown"] > 0, counters
    assert _figure(stdout, "unknown (a worker died)") == f"{counters['unknown']:,}"
    lost = _figure(stdout, "lost")
    assert lost.startswith(f"{counters['lost']:,} ") and lost.endswith(
        "= dropped + stranded + unknown"
    ), lost
    assert counters["lost"] == counters["dropped"] + counters["stranded"] + counters["unknown"]


def test_summary_has_no_unknown_row_on_a_complete_run(tmp_path):
    proc = _run(
        str(tmp_path), "complete", "--pattern", "push-pull", "--transport", "tcp", "--count", "2000"
    )
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "unknown (a worker died)" not in stdout
    counters = read_meta(os.path.join(str(tmp_path), "run=complete"))["counters"]
    assert _figure(stdout, "lost").startswith(f"{counters['lost']:,} ")
