"""req-rep round trips in the report (issue 14 item 5): the Spark figures against numpy straight
over the replies Parquet (exact count, percentiles within the histogram's 1%) and against the
run's own run.json (its log-linear histogram: within both histograms' error), on real runs
over real libzmq sockets; and the report's outputs (summary.parquet, Markdown, HTML) carry them."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

import zmqload
from conftest import report_here
from zmqload.analysis import analyze, discover_runs
from zmqload.analysis.metrics import ALL
from zmqload.contract import histogram as rule

QUANTILES = (("p50", 0.50), ("p99", 0.99), ("p99_9", 0.999))
RUN_JSON_KEYS = {"p50": "p50", "p99": "p99", "p99_9": "p99.9"}


@pytest.fixture(scope="module")
def rr_runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("rr"))
    results = [
        zmqload.run(
            pattern="req-rep",
            transport="tcp",
            producers=2,
            rate=2000,
            count=3000,
            run_name="rr-tcp-2p",
            out=out,
        ),
        zmqload.run(
            pattern="req-rep", transport="ipc", count=4000, run_name="rr-ipc-unpaced", out=out
        ),
        # not a round-trip pattern: no replies, no round-trip figures
        zmqload.run(pattern="push-pull", transport="tcp", count=2000, run_name="pp", out=out),
    ]
    return out, {r.run_id: r for r in results}


@pytest.fixture(scope="module")
def analysis(spark, rr_runs):
    out, _ = rr_runs
    runs, _ = discover_runs(out)
    return analyze(spark, runs)


def _rtt_ns(run_dir: str) -> dict[int, np.ndarray]:
    """Round-trip times (reply - intended send), ns, per stream, from the Parquet files alone."""
    files = sorted(glob.glob(os.path.join(run_dir, "replies", "*.parquet")))
    t = pq.ParquetDataset(files).read().to_pydict()
    stream = np.asarray(t["stream"])
    rtt = np.asarray(t["t_reply_ns"], dtype=np.int64) - np.asarray(
        t["t_intended_ns"], dtype=np.int64
    )
    return {int(s): np.sort(rtt[stream == s]) for s in np.unique(stream)}


def _true_quantile(sorted_ns: np.ndarray, q: float) -> int:
    """The value of rank ceil(q * n) (the rule of zmqload/contract/histogram.py, computed
    here from numpy with the rank in exact integers)."""
    return int(sorted_ns[rule.rank(rule.ppm(q * 100), len(sorted_ns)) - 1])


def _assert_close_to_truth(row: dict, values_ns: np.ndarray, what: str) -> None:
    assert row["round_trips"] == len(values_ns), what
    assert row["round_trip_max_us"] == pytest.approx(values_ns.max() / 1e3, abs=1e-6), what
    for name, q in QUANTILES:
        truth_us = _true_quantile(values_ns, q) / 1e3
        got = row[f"round_trip_{name}_us"]
        # its bucket's midpoint (capped at the exact max): within half a bucket, < 1/256 of it
        assert abs(got - truth_us) <= truth_us / 256 + 1e-3, (what, name, got, truth_us)


def test_round_trips_per_run_and_stream_against_numpy(analysis, rr_runs):
    out, results = rr_runs
    rows = {(r.run, r.consumer, r.stream): r.columns() for r in analysis.summary}
    for run_id in ("rr-tcp-2p", "rr-ipc-unpaced"):
        per_stream = _rtt_ns(results[run_id].run_dir)
        assert (
            sum(len(v) for v in per_stream.values()) == results[run_id].sent
        )  # one reply per request
        _assert_close_to_truth(
            rows[(run_id, ALL, ALL)],
            np.sort(np.concatenate(list(per_stream.values()))),
            f"{run_id} total",
        )
        for stream, values in per_stream.items():
            stream_rows = [r for k, r in rows.items() if k[0] == run_id and k[2] == stream]
            assert stream_rows, (run_id, stream)
            for r in stream_rows:
                _assert_close_to_truth(r, values, f"{run_id} stream {stream}")
    assert len(_rtt_ns(results["rr-tcp-2p"].run_dir)) == 2
    pp = rows[("pp", ALL, ALL)]
    assert pp["round_trips"] is None and pp["round_trip_p99_us"] is None


def test_round_trips_against_run_json(analysis, rr_runs):
    """run.json's round_trip_ns and the report's come from one histogram layout and rule
    (zmqload/contract/histogram.py): equal to the nanosecond, max exact."""
    _, results = rr_runs
    totals = {r.run: r.columns() for r in analysis.run_rows()}
    for run_id in ("rr-tcp-2p", "rr-ipc-unpaced"):
        with open(os.path.join(results[run_id].run_dir, "run.json")) as f:
            own = json.load(f)["summary"]["round_trip_ns"]
        assert own, run_id
        row = totals[run_id]
        assert row["round_trip_max_us"] == pytest.approx(own["max"] / 1e3, abs=1e-6)
        for name, _ in QUANTILES:
            assert row[f"round_trip_{name}_us"] == pytest.approx(
                own[RUN_JSON_KEYS[name]] / 1e3, abs=1e-6
            ), (run_id, name)


def test_report_outputs_carry_round_trips(analysis, rr_runs, tmp_path):
    """The real command (in this process, on the session's Spark): summary.parquet, the Markdown
    (summary.md) and index.html show each req-rep run's round trips, and only theirs."""
    out, results = rr_runs
    report = str(tmp_path / "report")
    p = report_here(out, "--out", report)
    assert p.returncode == 0, p.stderr[-2000:]
    summary = pq.read_table(os.path.join(report, "summary.parquet")).to_pylist()
    totals = {r["run"]: r for r in summary if r["consumer"] == ALL and r["stream"] == ALL}
    expected = {r.run: r.columns() for r in analysis.run_rows()}
    for run_id in ("rr-tcp-2p", "rr-ipc-unpaced"):
        assert totals[run_id]["round_trips"] == results[run_id].sent
        assert totals[run_id]["round_trip_p99_us"] == pytest.approx(
            expected[run_id]["round_trip_p99_us"]
        )
    assert totals["pp"]["round_trips"] is None
    with open(
        os.path.join(report, "summary.md")
    ) as f:  # the report's tables (stdout: its short summary)
        md = f.read().split("## Round trips", 1)[1].split("\n## ", 1)[0]
    md_rows = {
        line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| rr-")
    }
    assert set(md_rows) == {"rr-tcp-2p", "rr-ipc-unpaced"}
    assert f"| {results['rr-tcp-2p'].sent} |" in md_rows["rr-tcp-2p"]
    page = open(os.path.join(report, "index.html")).read()
    assert "<h3>Round trips and answers</h3>" in page
    assert page.count("replies)</td>") == 2  # the per-run latency row of each req-rep run
