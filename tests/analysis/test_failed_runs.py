"""The Spark report on failed runs against run.json: a push-pull run whose consumer is
SIGKILLed mid-run, and one whose producer is (real processes on loopback, real Parquet,
tests/fault_table.py injects the fault). What a dead worker may have held is `unknown` in
both, never stranded or dropped, per stream and in total; the received counts are
checked with numpy straight over the Parquet files."""

from __future__ import annotations

import glob
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

import fault_table as ft
from zmqload.analysis import analyze, discover_runs
from zmqload.analysis.metrics import ALL
from zmqload.contract.fates import DROPPED, FATES, LOST

# report column -> run.json name, for the counts both have
PAIRS = (
    ("attempted", "attempted"),
    ("sent", "sent"),
    ("expected", "expected"),
    ("received", "received"),
    ("unique", "unique_received"),
    ("duplicates", "duplicates"),
    ("lost", "lost"),
    ("dropped", "dropped"),
    *((f, f) for f in FATES),
)
KILLED = ("c0", "p0")


@pytest.fixture(scope="module")
def failed_runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("failed"))
    outcomes = {name: ft.kill_worker(out, name) for name in KILLED}
    for name, outcome in outcomes.items():
        assert outcome.meta["status"] == "failed" and outcome.meta["salvaged"]["died"] == [name], (
            outcome.stderr
        )
    return out, outcomes


@pytest.fixture(scope="module")
def analysis(spark, failed_runs):
    out, _ = failed_runs
    runs, _ = discover_runs(out)
    return analyze(spark, runs)


def _received(run_dir: str) -> int:
    files = sorted(glob.glob(os.path.join(run_dir, "recvs", "*.parquet")))
    return sum(pq.read_metadata(f).num_rows for f in files)


def _unique(run_dir: str) -> int:
    files = sorted(glob.glob(os.path.join(run_dir, "recvs", "*.parquet")))
    t = pq.ParquetDataset(files).read(columns=["stream", "seq"])
    pairs = np.stack([t.column("stream").to_numpy(), t.column("seq").to_numpy()], axis=1)
    return len(np.unique(pairs, axis=0))


@pytest.mark.parametrize("name", KILLED)
def test_report_totals_on_a_failed_run_equal_run_json(analysis, failed_runs, name):
    _, outcomes = failed_runs
    counters = outcomes[name].meta["counters"]
    row = next(r.columns() for r in analysis.run_rows() if r.run == f"kill-{name}")
    assert row["status"] == "failed"
    assert {ours: row[ours] for ours, _ in PAIRS} == {
        ours: counters[theirs] for ours, theirs in PAIRS
    }
    # the identity, with unknown: every expected message has one fate; lost is what no consumer got
    assert row["expected"] == sum(row[f] for f in FATES)
    assert row["lost"] == sum(row[f] for f in LOST) == row["expected"] - row["unique"]
    assert (
        row["dropped"] == sum(row[f] for f in DROPPED) == 0
    )  # a process died: nothing is called dropped
    assert row["stranded"] == 0, row
    if name == "c0":
        # what the consumer held when it died (its last records, its queue) is unknown
        assert row["unknown"] == row["sent"] - row["unique"] > 0, row
    # numpy over the Parquet files, no zmqload code; a message counts as sent if its send
    # record says ok or a consumer received it (a killed producer's last records died with it)
    run_dir = os.path.join(failed_runs[0], f"run=kill-{name}")
    assert row["received"] == _received(run_dir) > 0
    assert row["unique"] == _unique(run_dir)
    by_numpy = outcomes[name].records
    assert {k: row[k] for k in ("attempted", "sent", "received")} == {
        k: by_numpy[k] for k in ("attempted", "sent", "received")
    }
    assert row["unique"] == by_numpy["unique_received"]


@pytest.mark.parametrize("name", KILLED)
def test_report_streams_on_a_failed_run_equal_run_json(analysis, failed_runs, name):
    _, outcomes = failed_runs
    streams = outcomes[name].meta["streams"]
    assert streams
    for stream in streams:
        rows = [
            r.columns()
            for r in analysis.summary
            if r.run == f"kill-{name}" and r.stream == stream["stream"]
        ]
        assert [r["consumer"] for r in rows] == [ALL]  # push-pull: one view, round robin
        row = rows[0]
        assert {f: row[f] for f in (*FATES, "lost", "dropped")} == {
            f: stream[f] for f in (*FATES, "lost", "dropped")
        }
        assert (row["sent"], row["unique"]) == (stream["sent"], stream["unique_received"])
        assert row["sent"] == sum(row[f] for f in FATES)
