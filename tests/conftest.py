"""Shared helpers for the engine and run tests: real sockets on loopback only."""
from __future__ import annotations

import glob
import json
import os
import re
import socket
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

import zmqload


# The files whose tests take many seconds each (a Spark report, a scenario's repeated runs, a
# capacity search, CPU placement's unpaced runs): marked `slow`, so `make test-fast` (-m "not
# slow") is a developer's loop of a few minutes; `make test` and CI run everything.
SLOW_FILES = frozenset({
    "test_scenarios.py", "test_scenarios_000_003.py", "test_scenarios_001_002.py", "test_scenarios_user.py",
    "test_scenarios_conflate.py",
    "test_capacity.py", "test_placement.py", "test_search_record.py", "test_devices.py", "test_one_side.py",
    "test_spark_placement.py", "test_curve.py", "test_netns_cluster.py",
    "analysis/test_report_server.py", "analysis/test_search_section.py", "analysis/test_command.py",
    "analysis/test_report_errors.py", "analysis/test_capacity_report.py", "analysis/test_plots.py",
    "analysis/test_round_trips.py", "analysis/test_real_runs.py", "analysis/test_percentile_rule.py",
    "analysis/test_failed_runs.py", "analysis/test_tail_placement.py", "analysis/test_page.py",
})


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        if os.path.relpath(str(item.fspath), here) in SLOW_FILES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def out_dir(tmp_path):
    return str(tmp_path / "runs")


def check_identity(result) -> None:
    """Every accepted message has exactly one fate, per stream and in total."""
    from zmqload.contract.fates import FATES
    assert result.expected == sum(getattr(result, f) for f in FATES), result.summary()
    assert result.lost == result.dropped + result.stranded + result.unknown
    for stream in result.streams:
        assert stream["expected"] == sum(stream[f] for f in FATES), stream


@pytest.fixture
def run_workload(out_dir):
    """Run a workload with records under the test's temporary directory; the fate
    identity is checked on every run."""
    def run(**options):
        options.setdefault("out", out_dir)
        result = zmqload.run(**options)
        check_identity(result)
        return result
    return run


def read_table(run_dir: str, kind: str):
    """All parts of one record kind of a run, as a pyarrow Table (parts in name order)."""
    files = sorted(glob.glob(os.path.join(run_dir, kind, "part-*.parquet")))
    assert files, f"no {kind} parts in {run_dir}"
    return pq.ParquetDataset(files).read()


def read_meta(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "run.json")) as f:
        return json.load(f)


def zmqload_cli(*args, timeout=120):
    """`python -m zmqload ARGS` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "zmqload", *args], capture_output=True, text=True,
                          timeout=timeout)


def free_ports(n, consecutive=False):
    """Loopback tcp ports nobody listens on (now); `consecutive`: p, p+1, ..."""
    while True:
        probes = []
        try:
            first = socket.socket()
            first.bind(("127.0.0.1", 0))
            probes.append(first)
            base = first.getsockname()[1]
            for i in range(1, n):
                s = socket.socket()
                probes.append(s)
                s.bind(("127.0.0.1", base + i if consecutive else 0))
            return [s.getsockname()[1] for s in probes]
        except OSError:
            continue
        finally:
            for s in probes:
                s.close()


@pytest.fixture(scope="module")
def busy_port():
    """A loopback tcp port held open (listening) for the module's tests."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()


def help_entries(text: str) -> dict[str, str]:
    """argparse help -> {first flag: its help text on one line ("" if it has none)}."""
    entries: dict[str, str] = {}
    flag = None
    for line in text.splitlines():
        if re.match(r"^  -", line):
            invocation, _, help_text = line.strip().partition("  ")
            flag = invocation.split()[0].rstrip(",")
            entries[flag] = help_text.strip()
        elif flag and line.startswith("      "):
            entries[flag] = (entries[flag] + " " + line.strip()).strip()
        else:
            flag = None
    return entries
