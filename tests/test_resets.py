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
from conftest import check_identity, end_with_the_test, read_meta, read_table

from tests.oracle.resets import pair_with_resets, seq_runs
from zmqload import Workload
from zmqload.errors import ConfigError
from zmqload.measure.queue_depth import frame_bytes

RESETS = "0.5,1.2"
OUT_BATCH_BYTES = 8192  # libzmq's ZMQ_OUT_BATCH_SIZE, left at its default by zmqload


@pytest.mark.parametrize(
    "values, says",
    [
        (dict(reset_at="1,0.5"), "must increase"),
        (dict(reset_at="1,1"), "must increase"),
        (dict(reset_at="soon"), "got 'soon'"),
        (dict(reset_at="-1"), "got '-1'"),
        (dict(reset_at="2", duration=2), "not within --duration 2"),
        (dict(reset_at="1", transport="ipc"), "over ipc"),
        (dict(reset_at="1", transport="inproc"), "over inproc"),
        (dict(reset_at="1", endpoint="ipc:///tmp/zl-reset"), "over ipc"),
        (
            dict(
                reset_at="1",
                producers_connect="tcp://127.0.0.1:5998",
                consumers_connect="tcp://127.0.0.1:5999",
            ),
            "a device, consumer or producer of yours",
        ),
        (
            dict(reset_at="1", role="producer", producers_connect="tcp://127.0.0.1:5999"),
            "a device, consumer or producer of yours",
        ),
    ],
)
def test_reset_at_is_refused_in_one_line(values, says):
    with pytest.raises(ConfigError) as info:
        Workload(**values)
    assert info.value.option == "--reset-at" and says in info.value.message, info.value.message
    assert "accepted: " in info.value.message and "\n" not in str(info.value)


def test_reset_at_is_read_as_increasing_seconds():
    assert Workload(reset_at="0.5, 1,2.25", duration=3).reset_times == (0.5, 1.0, 2.25)
    assert Workload(reset_at="4", count=1000).reset_times == (
        4.0,
    )  # no --duration: not bounded by it
    assert Workload().reset_times == ()


@pytest.mark.skipif(
    shutil.which("capsh") is None or os.geteuid() != 0,
    reason="needs root and capsh to drop CAP_NET_ADMIN",
)
def test_without_the_privilege_the_run_is_refused_up_front(tmp_path):
    """A process without CAP_NET_ADMIN cannot destroy sockets (ss -K kills nothing and exits 0): refused
    before anything starts, one line naming what is needed, exit 2, nothing left behind."""
    out = tmp_path / "runs"
    command = " ".join(
        [
            sys.executable,
            "-m",
            "zmqload",
            "run",
            "--duration",
            "1",
            "--rate",
            "1k",
            "--reset-at",
            "0.5",
            "--out",
            str(out),
        ]
    )
    done = subprocess.run(
        ["capsh", "--drop=cap_net_admin", "--", "-c", command],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
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
    assert [r["connections"] for r in meta["resets"]] == [
        1,
        1,
    ]  # one PUSH -> PULL connection each time
    for reset, due in zip(meta["resets"], (0.5, 1.2)):
        # made when due, within the controller's 20 ms poll and one ss call
        assert 0 <= reset["t_ns"] - (t0 + due * 1e9) < 0.2e9 and reset["at_s"] == pytest.approx(
            due, abs=0.2
        )
    assert result.resets == meta["resets"]
    check_identity(result)
    assert result.lost == _sent_minus_received(result.run_dir) == meta["counters"]["lost"]
    # blocking sends: every attempt went out (a send blocked while the connection was down, so
    # --duration may end before all 40,000 were tried)
    assert result.sent == result.attempted > 30_000 and result.duplicates == 0


# ------------------------------------------------------------------- the fate, checked from the records
SIZE = 64
SLOW_US = 80  # the consumer's work per message: 12.5k/s against 20k/s sent, a backlog at each reset


def _lost_at_resets_from_parquet(run_dir: str, resets: list[dict]) -> tuple[int, np.ndarray]:
    """Restated from the records alone (one producer, one consumer): for each reset, the seqs
    after the highest received when it was asked for, up to the first received at or after the
    first sent once it was made; the unreceived ok sends among them. Returns (their count, every unreceived ok seq)."""
    sends, recvs = read_table(run_dir, "sends"), read_table(run_dir, "recvs")
    seq, t_sent = sends["seq"].to_numpy(), sends["t_sent_ns"].to_numpy()
    ok = np.unique(seq[sends["status"].to_numpy() == 0])
    got, t_recv = recvs["seq"].to_numpy(), recvs["t_recv_ns"].to_numpy()
    missing = np.setdiff1d(ok, got)
    lost = np.zeros(len(missing), bool)
    for reset in resets:  # asked for at t_ns - took_ns, made by t_ns
        high = got[t_recv <= reset["t_ns"] - reset["took_ns"]].max(initial=-1)
        k = seq[t_sent > reset["t_ns"]].min()
        back = got[got >= k]
        if len(back):
            lost |= (missing > high) & (missing < back.min())
    return int(lost.sum()), missing


def test_a_slow_consumer_loses_what_was_in_flight_at_each_reset(run_workload):
    result = run_workload(
        rate=20_000, duration=2, size=SIZE, consumer_delay_us=SLOW_US, reset_at=RESETS
    )
    meta = read_meta(result.run_dir)
    resets_ns = [r["t_ns"] for r in meta["resets"]]
    placed, missing = _lost_at_resets_from_parquet(result.run_dir, meta["resets"])
    assert result.dropped_reset == placed == meta["counters"]["dropped_reset"] > 0
    # nothing else was lost: PUSH blocks at HWM and the drain completed
    assert result.lost == result.dropped_reset == _sent_minus_received(result.run_dir)
    assert result.dropped_start == result.dropped_mid == result.dropped_tail == result.stranded == 0
    assert result.duplicates == 0
    # which ones: one run of seqs per reset, beginning with what was in flight when it was made
    # (libzmq's and the kernel's buffers). Its tail may hold messages sent after ss returned, but
    # at most one of the PUSH engine's output batches: the first batch it takes from its queue
    # after the kill fails to write, and libzmq stops writing until it reads the error
    # (stream_engine_base_t::out_event). Seen on a loaded machine: the last lost one sent 0.75 ms after.
    sends = read_table(result.run_dir, "sends")
    seq, t_sent = sends["seq"].to_numpy(), sends["t_sent_ns"].to_numpy()
    one_batch = (OUT_BATCH_BYTES - 1) // frame_bytes(SIZE) + 1
    runs = seq_runs(missing)
    assert len(runs) == 2, runs
    for (first, last), t in zip(runs, resets_ns):
        assert t_sent[seq == first].min() <= t
        assert np.count_nonzero((seq >= first) & (seq <= last) & (t_sent > t)) <= one_batch


# ----------------------------------------------------- the same reset on a plain pyzmq PUSH/PULL pair
def test_a_plain_pyzmq_pair_loses_the_same_kind_of_messages_at_a_reset(tmp_path, run_workload):
    """The oracle: plain pyzmq (its own libzmq), the same slow PULL and the same resets by ss -K. Both
    lose a run of messages at each reset, all sent before it, then deliver again; no duplicates."""
    sent, got, boundaries = pair_with_resets(str(tmp_path), 20_000, 2.0, [0.5, 1.2], SLOW_US)
    assert len(got) == len(set(got))  # no duplicates
    missing = np.setdiff1d(np.arange(sent), np.array(got))
    runs = seq_runs(missing)
    assert missing.size > 0 and 1 <= len(runs) <= 2, runs  # a run lost at a reset
    assert all(last < boundaries[-1] for _, last in runs)  # sent before a reset: in flight
    assert max(got) == sent - 1  # delivered again after the last reset
    result = run_workload(rate=20_000, duration=2, consumer_delay_us=SLOW_US, reset_at=RESETS)
    assert (
        result.dropped_reset > 0 and result.duplicates == 0 and result.lost == result.dropped_reset
    )


def test_a_reset_that_cannot_be_made_mid_run_fails_the_run_in_one_line(monkeypatch, tmp_path):
    """ss proven before the run but gone when a reset is due: a RunError naming the reset, no traceback
    of subprocess's."""
    from zmqload.errors import RunError
    from zmqload.runner.resets import Resets

    made: list = []
    resets = Resets(0, [0], frozenset({5999}), made)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no ss
    with pytest.raises(RunError, match=r"the connection reset due at -?\d.* failed: ss: "):
        resets.poll()
    assert made == []


def test_a_repaired_run_keeps_its_resets_and_their_losses(tmp_path):
    """run.json holds each reset as it is made (seen while the run is still `running`), so a run its
    controller never finished is repaired with them: `zmqload repair` over the same records places the
    reset losses as dropped_reset, as the run itself did and as the records' own restatement does."""
    import json
    import time

    import fault_table as ft

    out = str(tmp_path)
    run_dir = os.path.join(out, "run=reset-repair")
    proc = end_with_the_test(
        ft.start_run(
            out,
            "reset-repair",
            [
                "--rate",
                "20k",
                "--duration",
                "2",
                "--consumer-delay-us",
                str(SLOW_US),
                "--reset-at",
                RESETS,
            ],
        )
    )
    ft.wait_started(run_dir)
    seen_running = 0
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        meta = ft.read_meta(run_dir)
        if meta.get("status") == "running":
            seen_running = max(seen_running, len(meta.get("resets") or []))
        time.sleep(0.02)
    assert proc.wait(60) == 0 and seen_running == 2
    finished = ft.read_meta(run_dir)
    # as a controller that died after its resets leaves it: running, without the end's figures
    left = dict(
        finished,
        status="running",
        finished_at=None,
        counters=None,
        summary=None,
        drain=None,
        streams=[],
        producers=[],
        consumers=[],
    )
    with open(os.path.join(run_dir, "run.json"), "w") as f:
        json.dump(left, f)
    done = ft.repair(run_dir)
    assert done.returncode == 0, done.stderr
    meta = ft.read_meta(run_dir)
    placed, _ = _lost_at_resets_from_parquet(run_dir, meta["resets"])
    assert meta["status"] == "failed" and meta["resets"] == finished["resets"]
    assert meta["counters"]["dropped_reset"] == finished["counters"]["dropped_reset"] == placed > 0
