"""`zmqload compare` (zmqload/measure/compare.py, zmqload/cli/compare.py): its windows against numpy
over the records, its verdicts on groups made alike and made to differ (synthetic, in-process), the
--fail-if spec and the command's exits in-process; and, marked slow, its verdicts on real runs
made to differ by a known amount (consumer delay 10 us against 20 us) and on the same workload
repeated."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import end_with_the_test, in_process
from zmqload.contract import run_record as rr
from zmqload.contract.comparison import Limit, RunFigures, Windows, parse_fail_if
from zmqload.contract.histogram import N_BUCKETS
from zmqload.contract.records import RECVS
from zmqload.contract.states import RunStatus
from zmqload.contract.workload import Workload
from zmqload.errors import ConfigError
from zmqload.measure.compare import (
    CHANGE_DOWN,
    CHANGE_UP,
    SAME,
    UNJUDGED,
    Group,
    compare,
    load_runs,
    split_by,
)
from zmqload.measure.histogram import Histogram, bucket_index
from zmqload.store.record_files import write_run

T0 = 1_000_000_000_000
RATE = 50_000  # receipts per second of a synthetic run


def latencies(rng: np.random.Generator, n: int, scale: float = 1.0) -> np.ndarray:
    """Log-normal latencies around 50 us, with a tail (ns)."""
    return (rng.lognormal(np.log(50_000), 0.5, n) * scale).astype(np.int64)


def synthetic_run(
    parent: str,
    name: str,
    rng: np.random.Generator,
    scale: float = 1.0,
    rate: float = RATE,
    seconds: float = 1.0,
    delay_us: float = 0.0,
) -> str:
    """A run directory written from numpy: run.json (figures from the same numbers) and recvs."""
    n = int(rate * seconds)
    t_intended = T0 + np.sort(rng.integers(0, int(seconds * 1e9), n))
    lat = latencies(rng, n, scale)
    t_recv = t_intended + lat
    run_dir = os.path.join(parent, f"run={name}")
    os.makedirs(os.path.join(run_dir, "recvs"))
    table = pa.table(
        {
            "consumer": np.zeros(n, np.int32),
            "stream": np.zeros(n, np.int32),
            "seq": np.arange(n, dtype=np.int64),
            "t_intended_ns": t_intended,
            "t_sent_ns": t_intended,
            "t_recv_ns": t_recv,
            "size": np.full(n, 64, np.int32),
        },
        schema=RECVS.arrow,
    )
    pq.write_table(table, os.path.join(run_dir, "recvs", "part-c0-00000.parquet"))
    hist = Histogram()
    hist.record(lat)
    span = (int(t_recv.max()) - T0) / 1e9
    record = rr.RunRecord(
        run_id=name,
        status=RunStatus.COMPLETE,
        workload=Workload(consumer_delay_us=delay_us),
        producers=[rr.ProducerEntry(t_first_send_ns=T0, max_rss_kb=1000)],
        consumers=[
            rr.ConsumerEntry(
                t_first_recv_ns=int(t_recv.min()), t_last_recv_ns=int(t_recv.max()), max_rss_kb=900
            )
        ],
        counters=rr.Counters(expected=n, received=n, unique_received=n, delivered=n),
        summary=rr.Summary(
            throughput_msgs=n / span,
            latency_intended_ns=rr.LatencySummary(
                p50=hist.percentile(50), p99=hist.percentile(99), p99_9=hist.percentile(99.9)
            ),
            queue_peak=rr.QueuePeak(messages=10),
        ),
    )
    write_run(run_dir, record)
    return run_dir


def figures(
    rng: np.random.Generator, scale: float = 1.0, rate: float = RATE, windows: int = 10
) -> RunFigures:
    """A run's figures made in memory as run_figures makes them of files: windows of 0.1 s."""
    per = int(rate / windows)
    counts = [np.bincount(bucket_index(latencies(rng, per, scale)), minlength=N_BUCKETS)]
    counts += [
        np.bincount(bucket_index(latencies(rng, per, scale)), minlength=N_BUCKETS)
        for _ in range(windows - 1)
    ]
    stacked = np.array(counts)
    used = np.flatnonzero(stacked.sum(axis=0))
    messages = rng.poisson(per, windows)
    return RunFigures(
        run_id="synthetic",
        figures={"throughput": float(messages.sum()), "lost": 0.0, "peak_rss_kb": 1000.0},
        windows=Windows(
            seconds=[1 / windows] * windows,
            messages=messages.tolist(),
            buckets=used.tolist(),
            counts=stacked[:, used].tolist(),
        ),
    )


def test_windows_are_the_records_cut_by_receive_time(tmp_path):
    rng = np.random.default_rng(1)
    run_dir = synthetic_run(str(tmp_path), "a", rng)
    (run,) = load_runs(run_dir, "BASE", windows=8)
    assert run.windows is not None
    t = pq.read_table(os.path.join(run_dir, "recvs"))
    t_recv = t.column("t_recv_ns").to_numpy()
    lat = t_recv - t.column("t_intended_ns").to_numpy()
    # numpy's own cut of the span (first send to last receipt) into 8 windows
    edges = np.linspace(T0, t_recv.max() + 1, 9)
    expected, _ = np.histogram(t_recv, bins=edges)
    assert run.windows.messages == expected.tolist()
    assert [sum(c) for c in run.windows.counts] == expected.tolist()
    assert sum(run.windows.seconds) == pytest.approx((t_recv.max() + 1 - T0) / 1e9)
    # the windows merged give run.json's percentile exactly (the same buckets, the same rule)
    merged = np.zeros(N_BUCKETS, np.int64)
    merged[run.windows.buckets] = np.sum(run.windows.counts, axis=0)
    assert Histogram(merged, int(lat.min()), int(lat.max())).percentile(99) == run.figures["p99"]


def test_groups_made_alike_are_no_difference_and_made_apart_a_change():
    """Two runs a side (the floor is the buckets' 1 %): 8 pairs drawn alike, a verdict of chance
    (5 % expected per figure); 8 with latency x1.1 and throughput x0.9, a change."""
    rng = np.random.default_rng(7)
    alike = {name: 0 for name in ("throughput", "p50", "p99", "p99.9")}
    apart = dict(alike)
    for _ in range(8):
        same = compare(
            Group("a", [figures(rng), figures(rng)]), Group("b", [figures(rng), figures(rng)])
        )
        for row in same.rows[:4]:
            alike[row.figure] += row.verdict == SAME
        slower = [figures(rng, 1.1, RATE * 0.9), figures(rng, 1.1, RATE * 0.9)]
        moved = compare(Group("a", [figures(rng), figures(rng)]), Group("b", slower))
        for row in moved.rows[:4]:
            apart[row.figure] += row.verdict == (
                CHANGE_DOWN if row.figure == "throughput" else CHANGE_UP
            )
    assert all(count >= 7 for count in alike.values()), alike
    assert all(count >= 7 for count in apart.values()), apart


def test_one_run_a_side_needs_a_change_over_the_floor():
    """Windows show the spread within a run only: 5 % apart is outside their interval but under
    the single-run floor (10 %), 25 % is a change; with the floor at 2 %, 5 % is one too."""
    rng = np.random.default_rng(11)
    base, five, quarter = figures(rng), figures(rng, 1.05), figures(rng, 1.25)
    p50 = compare(Group("a", [base]), Group("b", [five])).rows[1]
    assert p50.figure == "p50" and p50.low > 0 and p50.verdict == SAME, p50
    assert (
        compare(Group("a", [base]), Group("b", [five]), single_run_change=0.02).rows[1].verdict
        == CHANGE_UP
    )
    assert compare(Group("a", [base]), Group("b", [quarter])).rows[1].verdict == CHANGE_UP


def test_once_a_run_figures_need_runs_to_judge():
    def run(rss: float, lost: float) -> RunFigures:
        return RunFigures(figures={"peak_rss_kb": rss, "lost": lost})

    four = [run(v, 0) for v in (100, 101, 99, 100)]
    more = [run(v, 0) for v in (120, 121, 119, 122)]
    rows = {r.figure: r for r in compare(Group("a", four), Group("b", more)).rows}
    assert rows["peak_rss_kb"].verdict == CHANGE_UP
    assert rows["peak_rss_kb"].p_value == pytest.approx(2 / 70)  # the two extreme splits of 8
    assert rows["lost"].verdict == SAME and rows["lost"].method == "equal in every run"
    mixed = [run(v, 0) for v in (100, 121, 99, 119)]
    assert {r.figure: r for r in compare(Group("a", four), Group("b", mixed)).rows}[
        "peak_rss_kb"
    ].verdict == SAME
    one = {r.figure: r for r in compare(Group("a", [run(100, 0)]), Group("b", [run(200, 5)])).rows}
    assert one["peak_rss_kb"].verdict == UNJUDGED and one["lost"].verdict == UNJUDGED


def test_fail_if_spec():
    assert parse_fail_if("p99=+10%,lost=+0,throughput=-5%") == [
        Limit("p99", 1, 0.10, True),
        Limit("lost", 1, 0.0, False),
        Limit("throughput", -1, 0.05, True),
    ]
    assert Limit("p99", 1, 0.10, True).exceeded(100, 111)
    assert not Limit("p99", 1, 0.10, True).exceeded(100, 109)
    assert not Limit("p99", 1, 0.10, True).exceeded(100, 50)  # better is no regression
    assert Limit("lost", 1, 0, False).exceeded(0, 1) and not Limit("lost", 1, 0, False).exceeded(
        3, 3
    )
    assert Limit("throughput", -1, 0.05, True).exceeded(1000, 940)
    for bad in ("p99=10%", "p98=+1%", "p99=+x", "p99=+1%,p99=+2%", "", "p99=+1%%"):
        with pytest.raises(ConfigError) as caught:
            parse_fail_if(bad)
        assert str(caught.value).startswith("--fail-if: got ") and "\n" not in str(caught.value)


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory):
    """base: two runs alike; slower: two with latency x1.5 and 0.7x the receipts."""
    parent = tmp_path_factory.mktemp("compare")
    rng = np.random.default_rng(3)
    base, slower = str(parent / "base"), str(parent / "slower")
    for i in range(2):
        synthetic_run(base, f"b{i}", rng, delay_us=10)
        synthetic_run(slower, f"s{i}", rng, scale=1.5, rate=RATE * 0.7, delay_us=20)
    return base, slower


def test_command_names_what_regressed_and_exits_3(capsys, run_dirs):
    base, slower = run_dirs
    done = in_process(
        capsys, "compare", base, slower, "--fail-if", "p99=+10%,lost=+0,throughput=-5%"
    )
    assert done.returncode == 3, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("zmqload compare: regressed: p99=+10%: +")
    assert "throughput=-5%: -" in line and "lost" not in line
    assert "p99 higher" in done.stdout and "throughput lower" in done.stdout
    same = in_process(capsys, "compare", base, base, "--fail-if", "p99=+10%")
    assert same.returncode == 0, same.stderr
    assert "no difference beyond the runs' spread in any figure judged" in same.stdout


def test_command_json_and_by(capsys, run_dirs, tmp_path):
    base, slower = run_dirs
    done = in_process(capsys, "compare", base, slower, "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["figure"]: row for row in json.loads(done.stdout)["rows"]}
    assert rows["p50"]["verdict"] == CHANGE_UP and rows["p50"]["low"] > 0.3
    assert rows["throughput"]["verdict"] == CHANGE_DOWN
    # one directory, split by the setting that differs (its first run's value is the base)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for side in (base, slower):
        for name in os.listdir(side):
            os.symlink(os.path.join(side, name), mixed / name)
    base_runs, candidate_runs = split_by(load_runs(str(mixed), "BASE"), "consumer-delay-us")
    assert base_runs.name == "consumer-delay-us=10.0" and len(candidate_runs.runs) == 2
    by = in_process(capsys, "compare", str(mixed), "--by", "consumer-delay-us", "--json")
    assert json.loads(by.stdout)["rows"][0]["verdict"] == CHANGE_DOWN


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--fail-if", "p99=10%"], "--fail-if: got 'p99=10%'; accepted: "),
        (["--windows", "1"], "--windows: got '1'; accepted: an integer from 2 to 1000"),
        (["--single-run-change", "x"], "--single-run-change: got 'x'; accepted: a percent from"),
        (["--by", "rcvhwm"], "--by: the runs hold 1 values of rcvhwm"),
        (["--by", "colour"], "--by: got 'colour'; accepted: a run option's name"),
        ([], "CANDIDATE: accepted: BASE CANDIDATE, or one directory BASE with --by SETTING"),
    ],
)
def test_command_refusals(capsys, run_dirs, argv, says):
    base, _ = run_dirs
    done = in_process(capsys, "compare", base, *argv)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()[-1:]
    assert says in line, done.stderr


def test_command_refuses_what_is_not_a_run(capsys, tmp_path):
    done = in_process(capsys, "compare", str(tmp_path), str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"zmqload compare: error: BASE: {tmp_path}: holds no run directory (run=*/run.json)"
    )


def real_runs(out: str, turn: int) -> tuple[RunFigures, RunFigures, RunFigures]:
    """Three 2 s unpaced push-pull runs, one after another in an order that rotates with `turn`
    (so that a drift of the machine falls on each side alike): consumer delay 10 us (a, c) and
    20 us (b, half the consumer's pace)."""
    sides = (("a", 10), ("b", 20), ("c", 10))
    for side, delay in sides[turn % 3 :] + sides[: turn % 3]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "zmqload", "run", "--pattern", "push-pull", "--rate", "0"]
            + ["--duration", "2", "--consumer-delay-us", str(delay), "--quiet"]
            + ["--out", os.path.join(out, side)],
            stderr=subprocess.PIPE,
            text=True,
        )
        end_with_the_test(proc)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    a, b, c = (load_runs(os.path.join(out, side), side)[0] for side in "abc")
    return a, b, c


def verdicts(base: list[RunFigures], candidate: list[RunFigures]) -> dict[str, tuple]:
    """compare's (verdict, change) on throughput and latency."""
    rows = compare(Group("base", base), Group("candidate", candidate)).rows[:4]
    return {row.figure: (row.verdict, row.change) for row in rows}


REPEATS = 3


@pytest.mark.slow
@pytest.mark.alone  # a consumer's speed is its share of a CPU: the runs need the machine
def test_real_runs_made_to_differ_are_a_change_and_the_same_workload_is_not(tmp_path):
    """Consumer delay 10 us against 20 us: throughput lower; 10 us against 10 us: no difference
    in throughput or latency; judged over 3 repeats as repeated runs a side (each repeat's own
    pair is shown on failure; how often a single pair is right: docs/COMPARE.md)."""
    triples = [real_runs(str(tmp_path / str(i)), i) for i in range(REPEATS)]
    a, b, c = ([t[i] for t in triples] for i in range(3))
    pairs = [(verdicts([x], [y]), verdicts([x], [z])) for x, y, z in triples]
    apart, alike = verdicts(a, b), verdicts(a, c)
    assert apart["throughput"][0] == CHANGE_DOWN, (apart, pairs)
    assert {verdict for verdict, _ in alike.values()} == {SAME}, (alike, pairs)
