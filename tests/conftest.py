"""Shared helpers for the engine and run tests: real sockets on loopback only."""
from __future__ import annotations

import glob
import json
import os
import socket
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

import zmqload


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


@pytest.fixture(scope="module")
def busy_port():
    """A loopback tcp port held open (listening) for the module's tests."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()
