"""The Spark report against run.json on real runs: every total the report computes from the
Parquet records equals what the run reconciled from the workers' bit maps (two independent
paths to the same figures), per run and per stream, fates included."""
from __future__ import annotations

import pytest

import zmqload
from zmqload.analysis import analyze, discover_runs
from zmqload.analysis.metrics import ALL

PAIRS = (("attempted", "attempted"), ("sent", "sent"), ("eagain", "eagain"), ("timeout", "timeout"),
         ("expected", "expected"), ("received", "received"), ("unique", "unique_received"),
         ("duplicates", "duplicates"), ("lost", "lost"))


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("real"))
    common = dict(out=out, transport="tcp")
    results = [
        # fan-out, mid-run drops at a full pipe, a drained backlog
        zmqload.run(pattern="pub-sub", size=1024, rate=4000, duration=0.5, consumers=2, sndhwm=10, rcvhwm=10,
                    rcvbuf=4096, sndbuf=4096, consumer_delay_us=2000, run_name="fanout-drops", **common),
        # refused sends (EAGAIN), nothing dropped
        zmqload.run(pattern="push-pull", size=64, count=5000, send_mode="dontwait", sndhwm=1, rcvhwm=1,
                    sndbuf=4096, rcvbuf=4096, consumer_delay_us=500, run_name="eagain", **common),
        # two producers, round robin to two consumers, stranded by a cut drain
        zmqload.run(pattern="push-pull", size=512, rate=3000, duration=0.5, producers=2, consumers=2,
                    sndhwm=100_000, rcvhwm=100_000, consumer_delay_us=3000, drain="none", run_name="stranded",
                    **common),
    ]
    return out, {r.run_id: r for r in results}


def test_report_totals_equal_run_json(spark, real_runs):
    out, results = real_runs
    runs, _ = discover_runs(out)
    analysis = analyze(spark, runs)
    totals = {r["run"]: r for r in analysis.summary if r["stream"] == ALL and r["consumer"] == ALL}
    assert set(totals) == set(results)
    for run_id, result in results.items():
        row = totals[run_id]
        for report_name, run_name in PAIRS:
            assert row[report_name] == getattr(result, run_name), (run_id, report_name)
        assert row["lost"] == result.dropped + result.stranded
    # each run shows the fate it was built for, so the comparison above covers them
    assert results["fanout-drops"].dropped_mid > 0 and results["fanout-drops"].expected == 2 * results["fanout-drops"].sent
    assert results["eagain"].eagain > 0 and results["eagain"].dropped == 0
    assert results["stranded"].stranded > 0 and results["stranded"].dropped == 0


def test_report_streams_equal_run_json(spark, real_runs):
    out, results = real_runs
    runs, _ = discover_runs(out)
    analysis = analyze(spark, runs)
    for run_id, result in results.items():
        fanout = result.workload["pattern"] == "pub-sub"
        for stream in result.streams:
            rows = [r for r in analysis.summary if r["run"] == run_id and r["stream"] == stream["stream"]]
            assert rows, (run_id, stream["stream"])
            assert sum(r["lost"] for r in rows) == stream["lost"], (run_id, stream["stream"])
            assert sum(r["unique"] for r in rows) == stream["unique_received"]
            if not fanout:
                assert [r["sent"] for r in rows] == [stream["sent"]]
