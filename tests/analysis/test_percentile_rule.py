"""One histogram rule for `run` and the report (contract/histogram.py, issue 14 item 6): the
Spark buckets and the report's percentiles equal zmqload.measure.histogram's on the same values,
and on a real run the report's p50 / p99 / p99.9 equal run.json's exactly."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from zmqload.contract import histogram as rule
from zmqload.measure.histogram import Histogram, bucket_index


from zmqload.analysis import finish, metrics


def _edge_values() -> np.ndarray:
    """Every power of two and its neighbours up to 2**62 (where log2 of a double rounds the
    wrong way), 0, negatives, and random values of every magnitude."""
    powers = np.array([1 << k for k in range(63)], dtype=np.int64)
    rng = np.random.default_rng(14)
    spread = (2.0 ** rng.uniform(0, 62, 20_000)).astype(np.int64)
    return np.concatenate(
        [
            powers,
            powers - 1,
            powers + 1,
            [0, -1, -5, 255, 256, 257],
            spread,
            np.arange(0, 2000, dtype=np.int64),
        ]
    )


def test_spark_buckets_are_the_runs_buckets(spark):
    values = _edge_values()
    df = spark.createDataFrame([(int(v),) for v in values], "v long")
    got = np.array([r[0] for r in df.select(metrics.log_bucket("v")).collect()], dtype=np.int64)
    assert np.array_equal(got, bucket_index(values))


def test_rank_is_exact_where_floating_point_is_not():
    # 99.9 / 100 * 1000 = 999.0000000000001 in floating point: ceil would give 1000
    assert rule.rank(rule.ppm(99.9), 1000) == 999
    assert rule.rank(rule.ppm(50), 1) == 1 and rule.rank(rule.ppm(50), 3) == 2
    assert rule.rank(rule.ppm(99.99), 10**12 + 7) == -(-(9999 * (10**12 + 7)) // 10000)


@pytest.mark.parametrize("n", [1, 2, 999, 1000, 100_000])
def test_report_percentiles_equal_the_runs(n):
    """Same values, both sides: identical percentiles (lognormal latencies, counts where
    q * n is an integer, just under one, and a single value)."""
    rng = np.random.default_rng(n)
    values = rng.lognormal(12, 1.3, n).astype(np.int64)
    hist = Histogram()
    hist.record(values)
    idx, counts = np.unique(bucket_index(values), return_counts=True)
    rows = [
        {
            "run": 0,
            "consumer": 0,
            "stream": 0,
            "metric": "latency_intended",
            "bucket": int(b),
            "count": int(c),
            "max": int(values[bucket_index(values) == b].max()),
            "sum": int(values[bucket_index(values) == b].sum()),
        }
        for b, c in zip(idx, counts)
    ]
    [got] = finish.percentiles(rows)
    for name, q in metrics.PERCENTILES:
        assert got[name] == hist.percentile(q * 100), (name, n)
    assert got["max"] == hist.percentile(100) == values.max()


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    import zmqload

    out = str(tmp_path_factory.mktemp("pct"))
    zmqload.run(
        pattern="pub-sub",
        size=256,
        rate=20_000,
        duration=1.0,
        rcvhwm=100,
        consumer_delay_us=40,
        out=out,
        run_name="slow-sub",
    )
    zmqload.run(
        pattern="push-pull",
        size=64,
        rate=30_000,
        duration=1.0,
        producers=2,
        consumers=2,
        out=out,
        run_name="tcp-2x2",
    )
    return out


def test_real_runs_report_percentiles_equal_run_json(spark, real_runs):
    """The same run's p50 / p90 / p99 / p99.9 / p99.99 / max from `run` (run.json) and from
    the report, from the intended and from the actual send time: equal to the nanosecond."""
    from zmqload.analysis import analyze, discover_runs

    runs, _ = discover_runs(real_runs)
    rows = {r.run: r.columns() for r in analyze(spark, runs).run_rows()}
    assert set(rows) == {"slow-sub", "tcp-2x2"}
    for run_id, row in rows.items():
        with open(os.path.join(real_runs, f"run={run_id}", "run.json")) as f:
            summary = json.load(f)["summary"]
        for since in ("intended", "sent"):
            theirs = summary[f"latency_{since}_ns"]
            assert theirs["p99"] > 0
            for ours, key in (
                ("p50", "p50"),
                ("p90", "p90"),
                ("p99", "p99"),
                ("p99_9", "p99.9"),
                ("p99_99", "p99.99"),
                ("max", "max"),
            ):
                got = row[f"latency_{since}_{ours}_us"]
                assert round(got * 1000) == theirs[key], (run_id, since, key, got, theirs[key])


def test_spark_buckets_follow_the_layout_written_out_here(spark):
    """The same values against the layout as contract/histogram.py describes it, computed with
    Python's int.bit_length (no zmqload code): a bucket per value below 256; above, 128 per
    power of two (the value's top 8 bits), the last bucket (6271) for 2**55 and above."""

    def bucket(v: int) -> int:
        if v < 256:
            return max(v, 0)
        shift = min(v.bit_length() - 8, 47)
        return min((shift + 1) * 128 + (v >> shift) - 128, 6271)

    values = _edge_values()
    df = spark.createDataFrame([(int(v),) for v in values], "v long")
    got = [r[0] for r in df.select(metrics.log_bucket("v")).collect()]
    assert got == [bucket(int(v)) for v in values]
