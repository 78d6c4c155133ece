"""--reset-at, the connection-reset fault: its rules, the privilege it needs (refused up front in one
line), and real runs whose resets and losses are checked against numpy over the Parquet records
and against a plain pyzmq PUSH/PULL pair with the same reset injected (ss -K, no zmqload code)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from zmqload import Workload
from zmqload.errors import ConfigError
from conftest import check_identity, read_meta, read_table

RESETS = "0.5,1.2"


@pytest.mark.parametrize("values, says", [
    (dict(reset_at="1,0.5"), "must increase"),
    (dict(reset_at="1,1"), "must increase"),
    (dict(reset_at="soon"), "got 'soon'"),
    (dict(reset_at="-1"), "got '-1'"),
    (dict(reset_at="2", duration=2), "not within --duration 2"),
    (dict(reset_at="1", transport="ipc"), "over ipc"),
    (dict(reset_at="1", transport="inproc"), "over inproc"),
    (dict(reset_at="1", endpoint="ipc:///tmp/zl-reset"), "over ipc"),
    (dict(reset_at="1", producers_connect="tcp://127.0.0.1:5998", consumers_connect="tcp://127.0.0.1:5999"),
     "a device or consumer of yours"),
    (dict(reset_at="1", role="producer", producers_connect="tcp://127.0.0.1:5999"), "a device or consumer of yours"),
])
def test_reset_at_is_refused_in_one_line(values, says):
    with pytest.raises(ConfigError) as info:
        Workload(**values)
    assert info.value.option == "--reset-at" and says in info.value.message, info.value.message
    assert "accepted: " in info.value.message and "\n" not in str(info.value)


def test_reset_at_is_read_as_increasing_seconds():
    assert Workload(reset_at="0.5, 1,2.25", duration=3).reset_times == (0.5, 1.0, 2.25)
    assert Workload(reset_at="4", count=1000).reset_times == (4.0,)     # no --duration: not bounded by it
    assert Workload().reset_times == ()


@pytest.mark.skipif(shutil.which("capsh") is None or os.geteuid() != 0, reason="needs root and capsh to drop "
                    "CAP_NET_ADMIN")
def test_without_the_privilege_the_run_is_refused_up_front(tmp_path):
    """A process without CAP_NET_ADMIN cannot destroy sockets (ss -K kills nothing and exits 0): refused
    before anything starts, one line naming what is needed, exit 2, nothing left behind."""
    out = tmp_path / "runs"
    command = " ".join([sys.executable, "-m", "zmqload", "run", "--duration", "1", "--rate", "1k",
                        "--reset-at", "0.5", "--out", str(out)])
    done = subprocess.run(["capsh", "--drop=cap_net_admin", "--", "-c", command], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--reset-at" in lines[0] and "CAP_NET_ADMIN" in lines[0], done.stderr
    assert "Traceback" not in done.stderr and not out.exists()


def _sent_minus_received(run_dir: str) -> int:
    """Straight from the Parquet records: distinct seqs sent ok minus distinct seqs received (1 stream)."""
    sends = read_table(run_dir, "sends")
    recvs = read_table(run_dir, "recvs")
    ok = sends["seq"].to_numpy()[sends["status"].to_numpy() == 0]
    return len(np.unique(ok)) - len(np.intersect1d(np.unique(recvs["seq"].to_numpy()), ok))


def test_a_run_with_resets_records_them_and_counts_the_loss(run_workload):
    result = run_workload(rate=20_000, duration=2, reset_at=RESETS)
    meta = read_meta(result.run_dir)
    t0 = meta["schedule"]["t0_ns"]
    assert [r["connections"] for r in meta["resets"]] == [1, 1]      # one PUSH -> PULL connection each time
    for reset, due in zip(meta["resets"], (0.5, 1.2)):
        # made when due, within the controller's 20 ms poll and one ss call
        assert 0 <= reset["t_ns"] - (t0 + due * 1e9) < 0.2e9 and reset["at_s"] == pytest.approx(due, abs=0.2)
    assert result.resets == meta["resets"]
    check_identity(result)
    assert result.lost == _sent_minus_received(result.run_dir) == meta["counters"]["lost"]
    assert result.sent == 40_000 and result.duplicates == 0
