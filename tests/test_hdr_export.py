"""The HdrHistogram files a run leaves in hdr/ (zmqload/measure/hdr_export.py), read back by the
`hdrhistogram` package and held against run.json's percentiles and against the package fed the
raw latencies from the Parquet with numpy (no zmqload code on that side). One real run."""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from tests.conftest import read_meta, read_table

HIGHEST = 2**55


def bucket_width(value: int) -> int:
    """Width of contract/histogram.py's bucket holding `value`: 1 below 256, then 2**(bits - 8)."""
    return max(1, 1 << max(int(value).bit_length() - 8, 0))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    import zmqload

    out = tmp_path_factory.mktemp("hdr")
    result = zmqload.run(
        pattern="push-pull", consumers=2, rate=20_000, duration=1, out=str(out), warmup=True
    )
    table = read_table(result.run_dir, "recvs")
    raw = table.column("t_recv_ns").to_numpy() - table.column("t_intended_ns").to_numpy()
    return result.run_dir, read_meta(result.run_dir), raw, table.column("consumer").to_numpy()


def hgrm_rows(path: str) -> list[tuple[float, float, int]]:
    """(value in us, percentile as a fraction, total count) of each line of an .hgrm."""
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and not line.startswith("#") and parts[0] != "Value":
                rows.append((float(parts[0]), float(parts[1]), int(parts[2])))
    return rows


def test_the_interval_log_reads_back_as_run_jsons_percentiles(run):
    run_dir, meta, raw, _ = run
    assert sorted(os.listdir(os.path.join(run_dir, "hdr"))) == [
        "latency.hlog",
        "latency_us-c0.hgrm",
        "latency_us-c1.hgrm",
        "latency_us.hgrm",
    ]
    reader = HistogramLogReader(
        os.path.join(run_dir, "hdr", "latency.hlog"), HdrHistogram(1, HIGHEST, 2)
    )
    total, intervals = HdrHistogram(1, HIGHEST, 2), 0
    while (interval := reader.get_next_interval_histogram()) is not None:
        total.add(interval)
        intervals += 1
    assert intervals >= 1 and reader.get_start_time_sec() > 1.7e9  # seconds since the epoch
    assert total.get_total_count() == len(raw) == meta["counters"]["received"]
    latency = meta["summary"]["latency_intended_ns"]
    n = total.get_total_count()
    quantiles = {"p50": 500_000, "p90": 900_000, "p99": 990_000, "p99.9": 999_000, "max": 1_000_000}
    for name, q_ppm in quantiles.items():
        # run.json's rank is ceil(q * n) (docs/REPORT.md); the package rounds q * n to the nearest,
        # which in a sparse tail is another latency: it is asked for run.json's rank exactly
        rank = max(1, -(-q_ppm * n // 1_000_000))
        theirs = total.get_value_at_percentile(100 * rank / n)
        assert abs(theirs - latency[name]) <= bucket_width(latency[name]), (name, theirs)


def test_the_percentile_distribution_is_the_raw_latencies(run):
    """Each line of the run's .hgrm (a value, and how many latencies are at most it) against numpy's
    sorted raw latencies, and its percentiles against the package fed every raw latency (3
    digits): apart by no more than zmqload's bucket there, the package's resolution (0.1 %) and
    the file's 0.01 us."""
    run_dir, _, raw, consumer = run
    ordered = np.sort(raw)
    rows = hgrm_rows(os.path.join(run_dir, "hdr", "latency_us.hgrm"))
    assert len(rows) > 20 and rows[-1][1] == 1.0 and rows[-1][2] == len(raw)
    for value_us, _, count in rows:
        largest = int(ordered[count - 1])  # the largest latency the line counts
        slack = bucket_width(largest) + largest * 0.001 + 10
        assert abs(value_us * 1000 - largest) <= slack, (count, value_us, largest)
    values, counts = np.unique(raw, return_counts=True)
    exact, ours = HdrHistogram(1, HIGHEST, 3), HdrHistogram(1, HIGHEST, 2)
    for value, count in zip(values.tolist(), counts.tolist()):
        exact.record_value(value, count)
    reader = HistogramLogReader(os.path.join(run_dir, "hdr", "latency.hlog"), ours)
    while (interval := reader.get_next_interval_histogram()) is not None:
        ours.add(interval)
    for q in (50, 90, 99, 99.9, 100):
        truth = exact.get_value_at_percentile(q)
        slack = bucket_width(truth) + truth * 0.001
        assert abs(ours.get_value_at_percentile(q) - truth) <= slack, q
    for c in (0, 1):  # each consumer's file counts its own receipts
        mine = hgrm_rows(os.path.join(run_dir, "hdr", f"latency_us-c{c}.hgrm"))
        assert mine[-1][2] == int(np.count_nonzero(consumer == c)) > 0
        assert abs(mine[-1][0] * 1000 - raw[consumer == c].max()) <= bucket_width(
            raw[consumer == c].max()
        )


def test_the_report_links_them(run):
    from zmqload.report.html import hdr_links

    run_dir = run[0]
    (line,) = hdr_links(run_dir)
    for name in ("latency_us.hgrm", "latency_us-c0.hgrm", "latency_us-c1.hgrm", "latency.hlog"):
        uri = pathlib.Path(run_dir, "hdr", name).resolve().as_uri()  # "=" escaped: %3D
        assert f"<a href='{uri}'>{name}</a>" in line
    assert hdr_links(os.path.dirname(run_dir)) == []  # no hdr/ there: no line


def test_counts_by_key_are_numpys_even_for_keys_far_apart():
    """The exporter's per-interval counts (dense over a batch's keys, split when they lie far
    apart) against numpy's bincount per key."""
    from zmqload.measure.hdr_export import _Counts
    from zmqload.measure.histogram import bucket_index

    rng = np.random.default_rng(2)
    key = np.concatenate([rng.integers(0, 5, 5000), [10**6] * 3, rng.integers(700, 760, 2000)])
    latency = rng.integers(0, 10**9, len(key))
    counts = _Counts()
    counts.add(key, bucket_index(latency), latency)
    got = counts.by_key()
    assert sorted(got) == sorted(np.unique(key).tolist())
    for k, (buckets, n) in got.items():
        mine = latency[key == k]
        expected = np.bincount(bucket_index(mine))
        assert buckets.tolist() == np.flatnonzero(expected).tolist()
        assert n.tolist() == expected[buckets].tolist()
        assert (counts.low[k], counts.high[k]) == (mine.min(), mine.max())
