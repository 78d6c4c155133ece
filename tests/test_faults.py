"""Faults lose nothing: a killed consumer, producer or controller, and a full disk, each
injected into a real run (real processes, loopback tcp, real Parquet), each checked on
its status, the fate identity, run.json's counters against numpy over the records (no
zmqload code reads them in the check), and that nothing is left behind.

The injection and the independent checks live in tests/fault_table.py, which `make faults`
also runs to print the fault table of docs/RELIABILITY.md.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import fault_table as ft
from zmqload.measure.reconcile import fates
from zmqload.contract.fates import FATES


def one_error_line(stderr: str) -> str:
    """The command's error: exactly one line, no traceback."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, stderr
    return errors[0]


def assert_consistent(outcome: ft.Outcome) -> None:
    counters = outcome.meta["counters"]
    assert ft.identity_holds(counters), counters
    for key, value in outcome.records.items():  # run.json == numpy over the Parquet records
        assert counters[key] == value, (key, counters, outcome.records)
    for stream in outcome.meta["streams"]:
        assert stream["expected"] == sum(stream[f] for f in FATES), stream
    assert outcome.left == [], outcome.left


def assert_json_agrees(outcome: ft.Outcome, stdout: str) -> None:
    summary = json.loads(stdout)
    assert {k: summary[k] for k in outcome.meta["counters"]} == outcome.meta["counters"]


def test_fates_of_a_dead_path_are_unknown_never_dropped():
    sent = np.packbits(np.ones(16, bool))
    got = np.packbits(np.arange(16) < 6)
    none = np.zeros(2, np.uint8)
    cut_short = fates(sent, got, none, certain_below=-1, drain_completed=False)
    died = fates(sent, got, none, certain_below=-1, drain_completed=False, died=True)
    assert cut_short["stranded"] == 10 and cut_short["unknown"] == 0
    assert died["unknown"] == 10 and died["stranded"] == 0
    assert died["dropped_start"] + died["dropped_mid"] + died["dropped_tail"] == 0
    # a gap below a later arrival was dropped for sure, dead consumer or not
    gap = np.packbits(np.isin(np.arange(16), [0, 1, 3, 4]))
    assert (
        fates(sent, gap, none, certain_below=4, drain_completed=False, died=True)["dropped_mid"]
        == 1
    )


@pytest.mark.parametrize("worker", ["c0", "p0"])
def test_killed_worker(tmp_path, worker):
    outcome = ft.kill_worker(str(tmp_path), worker)
    assert outcome.exit == 1
    line = one_error_line(outcome.stderr)
    assert f"worker {worker} ended (killed by SIGKILL)" in line
    assert outcome.meta["status"] == "failed" and "killed by SIGKILL" in outcome.meta["error"]
    assert outcome.seconds_to_end < 5, outcome.seconds_to_end
    assert_consistent(outcome)
    c = outcome.meta["counters"]
    assert c["sent"] > 0 and c["received"] > 0, c
    assert c["dropped"] == 0, c  # nothing here was dropped: a process died
    assert outcome.meta["salvaged"]["died"] == [worker]
    if worker == "c0":
        # what the consumer held when it died (its last second of records, its queue) is unknown
        assert c["unknown"] == c["sent"] - c["unique_received"] > 0, c
    else:
        # the producer's last send records died with it; every message that arrived counts as sent
        assert c["sent"] >= c["unique_received"] == c["received"], c
    assert_json_agrees(outcome, outcome.stdout)


def test_a_consumer_killed_in_the_drain_ends_the_run(tmp_path):
    # it never heard of the drain, so nothing it could send would end it: the run ends at once
    outcome = ft.kill_in_drain(str(tmp_path))
    assert outcome.exit == 1
    assert "worker c0 ended (killed by SIGKILL) while draining" in one_error_line(outcome.stderr)
    assert outcome.meta["status"] == "failed" and outcome.seconds_to_end < 5, outcome.seconds_to_end
    assert_consistent(outcome)
    c = outcome.meta["counters"]
    assert c["sent"] > 0 and c["unknown"] == c["sent"] - c["unique_received"] > 0, c
    assert outcome.meta["salvaged"]["died"] == ["c0"]
    assert_json_agrees(outcome, outcome.stdout)


def test_connection_reset(tmp_path):
    """--reset-at mid-run: the run completes (exit 0), consistent with the records, and what the
    reset cost is placed as dropped_reset (checked in fault_table.connection_reset)."""
    outcome = ft.connection_reset(str(tmp_path))
    assert outcome.exit == 0 and outcome.meta["status"] == "complete", outcome.stderr
    assert_consistent(outcome)
    assert_json_agrees(outcome, outcome.stdout)
    assert outcome.meta["counters"]["dropped_reset"] > 0


def test_killed_proxy(tmp_path):
    outcome = ft.kill_worker(str(tmp_path), "x0", ft.PACED_PROXY)
    assert outcome.exit == 1
    assert "worker x0 ended (killed by SIGKILL)" in one_error_line(outcome.stderr)
    assert outcome.meta["status"] == "failed"
    assert_consistent(outcome)
    assert_json_agrees(outcome, outcome.stdout)
    c = outcome.meta["counters"]
    assert c["received"] > 0, c
    # what the proxy held when it died is unknown, on every stream, never stranded
    assert c["unknown"] > 0 and c["stranded"] == 0, c


def test_killed_controller(tmp_path):
    outcome = ft.kill_controller(str(tmp_path))
    assert outcome.meta["status"] == "failed"
    assert "the controller" in outcome.meta["error"] and "died" in outcome.meta["error"]
    assert outcome.seconds_to_end < 10, outcome.seconds_to_end
    assert_consistent(outcome)
    c = outcome.meta["counters"]
    assert c["sent"] > 0 and c["received"] > 0, c
    # the workers stopped by themselves (none died): unreceived is stranded, never dropped
    assert c["unknown"] == 0 and c["dropped"] == 0, c


def test_repair_finishes_a_run_left_running(tmp_path):
    run_dir, meta = ft.kill_everything(str(tmp_path))
    assert ft.read_meta(run_dir)["status"] == "running"
    done = ft.repair(run_dir)
    assert done.returncode == 0, done.stderr
    meta = ft.read_meta(run_dir)
    assert meta["status"] == "failed" and "repair" in meta["error"]
    outcome = ft.Outcome(
        "repair",
        0,
        0.0,
        meta,
        done.stderr,
        ft.figures_from_records(run_dir),
        ft.leftovers(run_dir, meta),
    )
    assert_consistent(outcome)
    assert_json_agrees(outcome, done.stdout)
    assert meta["counters"]["sent"] > 0 and meta["counters"]["dropped"] == 0
    again = ft.repair(run_dir)
    assert again.returncode == 2
    assert "not 'running'" in one_error_line(again.stderr)


@pytest.fixture
def small_disk():
    reason = ft.can_mount()
    if reason is not None:
        pytest.skip(reason)
    try:
        with ft.SmallDisk("5m") as disk:
            yield disk
    except PermissionError as exc:
        pytest.skip(str(exc))


def test_disk_full(small_disk):
    outcome = ft.disk_full(small_disk)
    assert outcome.exit == 1
    assert "warning:" in outcome.stderr and "bytes free" in outcome.stderr  # said before the run
    line = one_error_line(outcome.stderr)
    assert "No space left on device" in line and small_disk in line
    assert "needed" in line and "bytes free" in line
    assert outcome.meta["status"] == "failed" and "No space left on device" in outcome.meta["error"]
    assert_consistent(outcome)
    assert_json_agrees(outcome, outcome.stdout)
    # the next run on that disk: the same one line, and again a run.json that says failed
    again = ft.disk_full(small_disk, "disk-full-again")
    assert again.exit == 1
    assert "No space left on device" in one_error_line(again.stderr)
    assert again.meta["status"] == "failed"
    assert_consistent(again)


def test_a_run_that_cannot_fit_is_refused(small_disk):
    """2M messages are expected to write ~25 MB: onto 5 MiB, refused before anything starts, in one
    line naming --out; no run directory."""
    refused = ft.disk_full(small_disk, "too-long", ("--count", "2M"))
    assert refused.exit == 2 and not refused.meta
    line = one_error_line(refused.stderr)
    assert "--out" in line and "bytes free" in line and "accepted:" in line
    assert not os.path.exists(os.path.join(small_disk, "runs", "run=too-long"))


def test_repair_converts_raw_chunks_like_the_worker(tmp_path):
    """Raw chunks left in _spill/ (a worker died before converting them) become the very
    parts the worker would have written: a finished run's last parts are turned back into
    raw chunks, the run is set back to `running`, and `zmqload repair` must rebuild both
    the parts and the run's counters."""
    import glob
    import os

    import pyarrow.parquet as pq

    import zmqload

    result = zmqload.run(
        pattern="push-pull", transport="tcp", count=20_000, chunk_rows=4096, out=str(tmp_path)
    )
    run_dir = result.run_dir
    originals = {}
    for kind, worker in (("sends", "p0"), ("recvs", "c0")):
        last = sorted(glob.glob(os.path.join(run_dir, kind, f"part-{worker}-*.parquet")))[-1]
        table = pq.read_table(last)
        originals[last] = table
        c = {name: table.column(name).to_numpy() for name in table.column_names}
        if kind == "sends":  # the producer's raw columns: send time, status
            raw = [c["t_sent_ns"].astype(np.int64), c["status"].astype(np.int8)]
        else:  # the consumer's: header word, send time, receive time, size
            words = (c["stream"].astype(np.uint64) << np.uint64(48)) | c["seq"].astype(np.uint64)
            raw = [
                words,
                c["t_sent_ns"].astype(np.int64),
                c["t_recv_ns"].astype(np.int64),
                c["size"].astype(np.int32),
            ]
        index = int(os.path.basename(last).rsplit("-", 1)[1].split(".")[0])
        os.makedirs(os.path.join(run_dir, "_spill", worker), exist_ok=True)
        with open(os.path.join(run_dir, "_spill", worker, f"{index:06d}.raw"), "wb") as f:
            for column in raw:
                column.tofile(f)
        os.remove(last)
    meta = ft.read_meta(run_dir)
    meta["status"] = "running"
    del meta["controller_pid"]  # this very process ran it; repair refuses a live controller's run
    with open(os.path.join(run_dir, "run.json"), "w") as f:
        json.dump(meta, f)
    done = ft.repair(run_dir)
    assert done.returncode == 0, done.stderr
    for path, table in originals.items():
        assert pq.read_table(path).equals(table), path
    repaired = ft.read_meta(run_dir)
    assert repaired["salvaged"]["converted_rows"] == {
        ("p0" if "sends" in p else "c0"): t.num_rows for p, t in originals.items()
    }
    for key in ("attempted", "sent", "received", "unique_received"):
        assert (
            repaired["counters"][key]
            == getattr(result, key)
            == ft.figures_from_records(run_dir)[key]
        )
    assert repaired["counters"]["unknown"] == 0 and ft.identity_holds(repaired["counters"])
    assert not os.path.exists(os.path.join(run_dir, "_spill"))


@pytest.mark.timeout(60, method="thread")
def test_an_inproc_worker_that_fails_after_opening_its_socket_ends_the_run(tmp_path, monkeypatch):
    """inproc workers are threads sharing the controller's context, whose termination waits
    for every socket in it: a worker failing with its socket open once hung the run there."""
    import zmqload
    from zmqload.errors import RunError
    from zmqload.runner import producer

    def broken(*args, **kwargs):
        raise RuntimeError("injected: no pipeline")

    monkeypatch.setattr(producer, "ChunkPipeline", broken)
    with pytest.raises(RunError, match="injected: no pipeline"):
        zmqload.run(pattern="push-pull", transport="inproc", count=1_000, out=str(tmp_path))
