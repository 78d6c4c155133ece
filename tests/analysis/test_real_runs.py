"""The Spark report against run.json on real runs: every total the report computes from the
Parquet records equals what the run reconciled from the workers' bit maps (two independent
paths to the same figures: packed maps in measure/reconcile.py, Spark over the records), per run,
per stream and per fan-out consumer, fates included; and numpy straight over the Parquet
files for the fates, a fan-out consumer's own latency and the throughput."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

import zmqload
from zmqload.analysis import analyze, discover_runs
from zmqload.analysis.metrics import ALL
from zmqload.contract.fates import AMBIGUOUS_TAIL, FATES, LOST, TAIL_AMBIGUOUS

PAIRS = (
    ("attempted", "attempted"),
    ("sent", "sent"),
    ("eagain", "eagain"),
    ("timeout", "timeout"),
    ("expected", "expected"),
    ("received", "received"),
    ("unique", "unique_received"),
    ("duplicates", "duplicates"),
    ("lost", "lost"),
    *((f, f) for f in FATES),
    ("dropped", "dropped"),
)
DRAIN_PAIRS = ((AMBIGUOUS_TAIL, AMBIGUOUS_TAIL),)  # run.json keeps the run's total under "drain"


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("real"))
    common = dict(out=out, transport="tcp")
    results = [
        # fan-out 1x2, mid-run drops at a full pipe, a drained backlog
        zmqload.run(
            pattern="pub-sub",
            size=1024,
            rate=4000,
            duration=0.5,
            consumers=2,
            sndhwm=10,
            rcvhwm=10,
            rcvbuf=4096,
            sndbuf=4096,
            consumer_delay_us=2000,
            run_name="fanout-drops",
            **common,
        ),
        # refused sends (EAGAIN), nothing dropped
        zmqload.run(
            pattern="push-pull",
            size=64,
            count=5000,
            send_mode="dontwait",
            sndhwm=1,
            rcvhwm=1,
            sndbuf=4096,
            rcvbuf=4096,
            consumer_delay_us=500,
            run_name="eagain",
            **common,
        ),
        # two producers, round robin to two consumers, stranded by --drain none
        zmqload.run(
            pattern="push-pull",
            size=512,
            rate=3000,
            duration=0.5,
            producers=2,
            consumers=2,
            sndhwm=100_000,
            rcvhwm=100_000,
            consumer_delay_us=3000,
            drain="none",
            run_name="stranded",
            **common,
        ),
        # a slow subscriber with a large RCVHWM: its backlog is drained, nothing dropped
        zmqload.run(
            pattern="pub-sub",
            size=256,
            rate=2000,
            duration=0.5,
            sndhwm=100_000,
            rcvhwm=100_000,
            consumer_delay_us=2000,
            run_name="slow-sub",
            **common,
        ),
        # a tiny HWM under an unpaced publisher: drops mid-run. It often outruns every arrival,
        # so its drops come after the last one: closing after the drain places them (issue 11).
        zmqload.run(
            pattern="pub-sub",
            size=64,
            count=20_000,
            sndhwm=1,
            rcvhwm=1,
            sndbuf=4096,
            rcvbuf=4096,
            consumer_delay_us=20,
            close_order="after-drain",
            run_name="tiny-hwm",
            **common,
        ),
        # fan-out 2x2 with late joiners (issue 14: each consumer's own latency)
        zmqload.run(
            pattern="pub-sub",
            size=64,
            rate=20_000,
            duration=1.0,
            producers=2,
            consumers=2,
            join_delay_ms=300,
            run_name="fanout-2x2",
            **common,
        ),
    ]
    return out, {r.run_id: r for r in results}


@pytest.fixture(scope="module")
def analysis(spark, real_runs):
    out, _ = real_runs
    runs, _ = discover_runs(out)
    return analyze(spark, runs)


def test_each_run_shows_the_fate_it_was_built_for(real_runs):
    _, results = real_runs
    fan = results["fanout-drops"]
    assert fan.dropped_mid > 0 and fan.expected == 2 * fan.sent
    assert results["eagain"].eagain > 0 and results["eagain"].dropped == 0
    assert results["stranded"].stranded > 0 and results["stranded"].dropped == 0
    assert (
        results["slow-sub"].drained > 0
        and results["slow-sub"].dropped == 0
        and results["slow-sub"].stranded == 0
    )
    assert results["tiny-hwm"].dropped_mid > 0
    assert results["fanout-2x2"].dropped_start > 0


def test_report_totals_equal_run_json(analysis, real_runs):
    _, results = real_runs
    totals = {r.run: r.columns() for r in analysis.summary if r.is_run_total}
    assert set(totals) == set(results)
    for run_id, result in results.items():
        row = totals[run_id]
        for report_name, run_name in PAIRS:
            assert row[report_name] == getattr(result, run_name), (run_id, report_name)
        for report_name, run_name in DRAIN_PAIRS:
            assert row[report_name] == result.drain[run_name], (run_id, report_name)
        assert (
            row["lost"]
            == sum(row[f] for f in LOST)
            == result.dropped + result.stranded + result.unknown
        )
        assert row["unknown"] == result.unknown == 0, run_id  # complete runs: no worker died
        assert row["expected"] == sum(row[f] for f in FATES), run_id
        # throughput by run's own definition, from the records
        assert row["recv_rate"] == pytest.approx(result.throughput_msgs, rel=1e-9), run_id


def test_report_streams_and_consumers_equal_run_json(analysis, real_runs):
    _, results = real_runs
    for run_id, result in results.items():
        fanout = result.workload["pattern"] == "pub-sub"
        for stream in result.streams:
            rows = [
                r.columns()
                for r in analysis.summary
                if r.run == run_id and r.stream == stream["stream"]
            ]
            assert rows, (run_id, stream["stream"])
            for name in ("lost", *FATES, "dropped", AMBIGUOUS_TAIL):
                assert sum(r[name] for r in rows) == stream[name], (run_id, stream["stream"], name)
            assert sum(r["unique"] for r in rows) == stream["unique_received"]
            for r in rows:  # the identity per row: every sent message has one fate
                assert r["sent"] == sum(r[f] for f in FATES), (run_id, r["consumer"], r["stream"])
            if fanout:
                # these runs are complete: no worker died, nothing is unknown (failed runs: test_failed_runs.py)
                assert all(f["unknown"] == 0 for f in stream["fates_by_consumer"].values()), run_id
                by_consumer = {
                    int(c): {name: f[name] for name in FATES}
                    for c, f in stream["fates_by_consumer"].items()
                }
                assert {r["consumer"]: {f: r[f] for f in FATES} for r in rows} == by_consumer, (
                    run_id
                )
            else:
                assert [r["sent"] for r in rows] == [stream["sent"]]


def _table(run_dir, kind):
    files = sorted(glob.glob(os.path.join(run_dir, kind, "*.parquet")))
    return pq.ParquetDataset(files).read().to_pydict() if files else {}


def _np(run_dir, kind):
    return {k: np.asarray(v) for k, v in _table(run_dir, kind).items()}


def test_fates_from_numpy_over_the_parquet(analysis, real_runs):
    """The fan-out runs' fates per consumer straight from the Parquet files and run.json
    (drain complete: every missing message is a drop, placed by seq; a PUB closed right after
    its last send cannot tell a tail drop at a full pipe from one at close: dropped_tail,
    every one of them counted again as ambiguous)."""
    _, results = real_runs
    for run_id in ("fanout-drops", "slow-sub", "fanout-2x2"):
        run_dir = results[run_id].run_dir
        meta = json.load(open(os.path.join(run_dir, "run.json")))
        assert meta["drain"]["completed"] and meta["drain"]["tail_placement"] == TAIL_AMBIGUOUS
        s, r = _np(run_dir, "sends"), _np(run_dir, "recvs")
        t_drain = {c["worker"]: c["t_drain_ns"] for c in meta["consumers"]}
        for row in (x.columns() for x in analysis.summary if x.run == run_id and x.stream != ALL):
            c, stream = row["consumer"], row["stream"]
            ok = np.unique(s["seq"][(s["stream"] == stream) & (s["status"] == 0)])
            mine = (r["stream"] == stream) & (r["consumer"] == (0 if c == ALL else c))
            got = np.unique(r["seq"][mine])
            early = np.unique(r["seq"][mine & (r["t_recv_ns"] < t_drain[0 if c == ALL else c])])
            missing = np.setdiff1d(ok, got)
            start = int((missing < got.min()).sum()) if len(got) else len(missing)
            tail = int((missing > got.max()).sum()) if len(got) else 0
            truth = {
                "delivered": len(early),
                "drained": len(got) - len(early),
                "dropped_start": start,
                "dropped_mid": len(missing) - start - tail,
                "dropped_tail": tail,
                "dropped_reset": 0,
                "dropped_restart": 0,  # no restart in these runs
                "stranded": 0,
                "unknown": 0,
            }
            assert {f: row[f] for f in FATES} == truth, (run_id, c, stream)
            assert row[AMBIGUOUS_TAIL] == tail, (run_id, c, stream)
    assert analysis and results["slow-sub"].drained > 0


def test_fanout_consumers_have_their_own_latency(analysis, real_runs):
    """pub-sub 2x2 with a 300 ms late join: each (consumer, stream) row's p50 is that
    consumer's, from numpy over its receive records (within the histogram's 1%)."""
    _, results = real_runs
    run_dir = results["fanout-2x2"].run_dir
    r = _np(run_dir, "recvs")
    rows = [x.columns() for x in analysis.summary if x.run == "fanout-2x2" and x.stream != ALL]
    assert {(x["consumer"], x["stream"]) for x in rows} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    for x in rows:
        m = (r["consumer"] == x["consumer"]) & (r["stream"] == x["stream"])
        lat = np.sort(r["t_recv_ns"][m] - r["t_intended_ns"][m])
        for name, q in (("p50", 0.5), ("p99", 0.99)):
            exact = lat[max(int(np.ceil(q * len(lat))) - 1, 0)] / 1e3
            assert x[f"latency_intended_{name}_us"] == pytest.approx(exact, rel=0.0101), (
                x["consumer"],
                x["stream"],
            )
    total = next(x.columns() for x in analysis.summary if x.run == "fanout-2x2" and x.stream == ALL)
    # offered counts every copy: 2 producers x 20k/s x 2 consumers
    assert total["offered_rate"] == pytest.approx(80_000, rel=0.02)
    assert total["recv_rate"] <= total["offered_rate"] * 1.02
