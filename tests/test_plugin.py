"""The pytest plugin (zmqload.pytest_plugin), exercised as users meet it: inner pytest sessions
in subprocesses (pytester), with the plugin loaded from the installed entry point."""

from __future__ import annotations

import itertools
import json
import os
import re
import textwrap

import pytest

from zmqload import Workload
from zmqload.pytest_plugin import ZmqloadBenchmark, ZmqloadFixture, _new_test_dir, _slug
from zmqload.versions import versions

pytest_plugins = ["pytester"]

INNER_TIMEOUT_S = 120


@pytest.fixture
def inner(pytester, monkeypatch):
    """Run an inner pytest session in a subprocess (workers are spawned processes)."""
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)  # the entry point must load
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    for name in list(os.environ):  # when this suite itself runs under xdist: the inner session
        if name.startswith(
            "PYTEST_XDIST_"
        ):  # is no xdist worker (pytest-benchmark would disable itself)
            monkeypatch.delenv(name)

    def run(source: str, *args: str):
        pytester.makepyfile(test_inner=textwrap.dedent(source))
        return pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", *args, timeout=INNER_TIMEOUT_S
        )

    return run


def _section(output: str, title: str, rule: str = "-") -> str:
    """The text of one titled section ('---- title ----' up to the next rule of any kind)."""
    r = re.escape(rule)
    match = re.search(
        rf"^{r}+ {re.escape(title)} {r}+$\n(.*?)(?=^[-=_]{{5,}} |\Z)", output, re.M | re.S
    )
    assert match, f"no {title!r} section in:\n{output}"
    return match.group(1)


def test_passing_slo_passes_and_removes_its_run_directory(inner, tmp_path):
    log = tmp_path / "log.json"
    result = inner(f"""
        import json, os

        def test_feed_capacity(zmqload):
            result = zmqload.run(pattern="pub-sub", rate=20_000, size=512, duration=0.5,
                                 sndhwm=1000, rcvhwm=1000)
            assert os.path.isfile(os.path.join(result.run_dir, "run.json"))
            with open({str(log)!r}, "w") as f:
                json.dump({{"run_dir": result.run_dir, "out_dir": zmqload.out_dir,
                           "sent": result.sent}}, f)
            assert result.lost == 0
            assert result.latency_us(99) < 500_000
    """)
    result.assert_outcomes(passed=1)
    facts = json.loads(log.read_text())
    assert 0 < facts["sent"] <= 10_000  # rate x duration, whichever bound ends first
    assert (
        os.path.dirname(facts["run_dir"]) == facts["out_dir"]
    )  # records went to the test's directory
    assert not os.path.exists(facts["out_dir"])  # and it was removed after the pass
    assert "zmqload runs" not in result.stdout.str()
    assert "run directories kept" not in result.stdout.str()


LOSSY = dict(
    pattern="pub-sub", size=1024, count=30_000, sndhwm=100, rcvhwm=100, consumer_delay_us=20
)


def test_failing_slo_reports_the_runs_and_keeps_their_records(inner):
    result = inner(f"""
        def test_slow_subscriber(zmqload):
            result = zmqload.run(**{LOSSY!r})
            assert result.lost == 0
    """)
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    lost = int(re.search(r"assert (\d+) == 0", output).group(1))
    assert lost > 0
    report = _section(output, "zmqload runs")
    # the figures of the run that failed the assertion
    assert "pub-sub over tcp, 1024 B, unpaced, 1x1" in report
    assert re.search(rf"lost\s*\S\s*{lost:,} \(", report), report
    assert re.search(r"attempted\s*\S\s*30,000\b", report), report
    assert re.search(r"latency from intended \(µs\)\s*\S\s*p50 [\d,.]+\s+p99 [\d,.]+", report), (
        report
    )
    # where the loss happened: sequence ranges missing at the consumer
    missing = re.search(r"missing seqs of stream 0 at consumer 0: (.+)", report)
    assert missing, report
    ranges = [
        tuple(int(x) for x in part.split("-")) for part in missing.group(1).rstrip(" .").split(", ")
    ]
    assert sum(r[-1] - r[0] + 1 for r in ranges) <= lost
    assert all(0 <= r[0] <= r[-1] < 30_000 for r in ranges)
    # the records survive for the Spark report, and the report says how to get it
    run_dir = re.search(r"^records: (\S+)$", report, re.M).group(1)
    with open(os.path.join(run_dir, "run.json")) as f:
        meta = json.load(f)
    assert meta["status"] == "complete" and meta["counters"]["lost"] == lost
    assert "kept because the test failed" in report
    assert f"Spark report: python -m zmqload report {os.path.dirname(run_dir)}" in report
    summary = _section(output, "zmqload", rule="=")
    assert f"test_inner.py::test_slow_subscriber: {os.path.dirname(run_dir)}" in summary


@pytest.mark.slow  # two inner sessions, a run each
def test_a_regression_against_the_saved_baseline_fails_with_the_comparison(
    inner, tmp_path, monkeypatch
):
    """One session stores the test's run as its baseline; a second, with the consumer made 6x
    slower, fails the same test, its report the comparison naming what regressed."""
    source = """
        import os
        def test_pipeline(zmqload):
            delay = float(os.environ["ZL_TEST_DELAY_US"])
            zmqload.run(pattern="push-pull", rate=0, duration=1, consumer_delay_us=delay)
    """
    baseline = str(tmp_path / "baseline.json")
    monkeypatch.setenv("ZL_TEST_DELAY_US", "5")
    inner(source, f"--zmqload-save-baseline={baseline}").assert_outcomes(passed=1)
    with open(baseline) as f:
        (runs,) = json.load(f)["tests"].values()
    assert len(runs) == 1 and sum(runs[0]["windows"]["messages"]) > 0
    monkeypatch.setenv("ZL_TEST_DELAY_US", "30")
    result = inner(source, f"--zmqload-baseline={baseline}")
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    said = re.search(r"zmqload runs regressed against the baseline: (.*)", output)
    assert said and "throughput=-5%: -" in said.group(1), output
    assert re.search(r"throughput \(msg/s\) .* lower", output), output
    assert _section(output, "zmqload runs")  # the run's own summary too


@pytest.mark.slow  # a Spark session or many runs: out of make test-fast, in make test
def test_parallel_workers_share_no_endpoint_or_directory(inner, tmp_path):
    """Two xdist workers run tcp, ipc and inproc runs at the same time, all with one run name and
    one --zmqload-out: every message arrives exactly once and every run has its own directory.
    One test fails on purpose: its report and kept directory must cross from worker to controller."""
    logs, shared = tmp_path / "logs", tmp_path / "shared"
    logs.mkdir()
    result = inner(
        f"""
        import json, os, time
        import pytest

        @pytest.mark.parametrize("copy", range(2))
        @pytest.mark.parametrize("transport", ["tcp", "ipc", "inproc"])
        def test_run(zmqload, transport, copy):
            started = time.time()
            result = zmqload.run(pattern="push-pull", transport=transport, size=64, rate=40_000,
                                 count=24_000, run_name="same")
            finished = time.time()
            with open(os.path.join({str(logs)!r}, f"{{transport}}-{{copy}}.json"), "w") as f:
                json.dump({{"worker": os.environ["PYTEST_XDIST_WORKER"], "started": started,
                           "finished": finished, "run_dir": result.run_dir}}, f)
            assert result.status == "complete"
            assert result.sent == result.received == result.unique_received == 24_000
            assert result.lost == 0 and result.duplicates == 0

        def test_impossible_slo(zmqload):
            result = zmqload.run(pattern="push-pull", size=64, count=20_000)
            assert result.latency_us(99) < 0.001
    """,
        "-n",
        "2",
        "--zmqload-out",
        str(shared),
        "--zmqload-keep",
    )
    result.assert_outcomes(passed=6, failed=1)
    runs = [json.loads(p.read_text()) for p in sorted(logs.iterdir())]
    assert len(runs) == 6
    assert {r["worker"] for r in runs} == {"gw0", "gw1"}
    assert len({r["run_dir"] for r in runs}) == 6
    assert all(
        os.path.isfile(os.path.join(r["run_dir"], "run.json")) for r in runs
    )  # --zmqload-keep
    overlapping = [
        (a, b)
        for a, b in itertools.combinations(runs, 2)
        if a["worker"] != b["worker"]
        and a["started"] < b["finished"]
        and b["started"] < a["finished"]
    ]
    assert overlapping, "the two workers never ran at the same time"
    output = result.stdout.str()
    report = _section(output, "zmqload runs")
    assert "push-pull over tcp, 64 B, unpaced, 1x1" in report
    assert "run directories kept (--zmqload-keep)" in report
    assert "run directories kept for 7 test(s)" in output
    assert output.count(str(shared)) >= 7


BENCH_SOURCE = """
    from zmqload import RunResult

    def test_engine_throughput(zmqload_benchmark, zmqload):
        result = zmqload_benchmark(pattern="push-pull", size=64, count=30_000, rounds=3)
        assert isinstance(result, RunResult) and result is zmqload.results[-1]
        assert len(zmqload.results) == 3 and result.sent == 30_000
"""


@pytest.mark.slow  # several runs: out of make test-fast, in make test
def test_benchmark_fixture_writes_throughput_to_json(inner, tmp_path):
    out = tmp_path / "bench.json"
    result = inner(
        BENCH_SOURCE
        + """
    def test_wall_time(zmqload_benchmark, zmqload):
        zmqload_benchmark(pattern="push-pull", size=64, count=30_000, rounds=2, timing="wall",
                          run_name="named")
        assert [r.run_id for r in zmqload.results] == ["named-1", "named-2"]

    def test_not_a_benchmark(zmqload):
        pass
    """,
        f"--benchmark-json={out}",
        "--benchmark-only",
    )
    result.assert_outcomes(passed=2, skipped=1)  # --benchmark-only knows the fixture for one
    benches = {b["name"]: b for b in json.loads(out.read_text())["benchmarks"]}
    engine, wall = benches["test_engine_throughput"], benches["test_wall_time"]

    info = engine["extra_info"]
    assert info["timing"] == "message" and info["rounds"] == engine["stats"]["rounds"] == 3
    assert info["pattern"] == "push-pull" and info["size"] == 64 and info["count"] == 30_000
    assert info["sent"] == info["expected"] == 90_000 and info["lost"] == 0
    assert len(info["throughput_msgs_rounds"]) == 3 and min(info["throughput_msgs_rounds"]) > 10_000
    assert info["throughput_mb"] == pytest.approx(info["throughput_msgs"] * 64 / 1e6, rel=1e-6)
    assert 0 < info["latency_p50_us"] <= info["latency_p99_us"] <= info["latency_max_us"]
    assert info["libzmq"] == versions()["libzmq"]
    # the timed quantity is the engine's time per delivered message: OPS is msg/s
    assert engine["stats"]["median"] * info["throughput_msgs"] == pytest.approx(1.0, rel=1e-6)
    assert engine["stats"]["ops"] == pytest.approx(1 / engine["stats"]["mean"])

    winfo = wall["extra_info"]
    assert winfo["timing"] == "wall" and wall["stats"]["rounds"] == 2
    # wall time covers the whole run call: more than the engine's own elapsed time
    assert wall["stats"]["min"] > max(winfo["elapsed_s_rounds"]) > 0


def _scale_times(path, factor: float) -> None:
    data = json.loads(path.read_text())
    for bench in data["benchmarks"]:
        stats = bench["stats"]
        for key in (
            "min",
            "max",
            "mean",
            "median",
            "stddev",
            "iqr",
            "q1",
            "q3",
            "ld15iqr",
            "hd15iqr",
            "total",
        ):
            stats[key] *= factor
        stats["data"] = [x * factor for x in stats.get("data", [])]
        stats["ops"] /= factor
    path.write_text(json.dumps(data))


@pytest.mark.slow  # a Spark session or many runs: out of make test-fast, in make test
def test_benchmark_compare_fail_guards_throughput(inner, tmp_path):
    storage = tmp_path / "storage"
    saved = inner(BENCH_SOURCE, f"--benchmark-storage=file://{storage}", "--benchmark-save=base")
    saved.assert_outcomes(passed=1)
    (baseline,) = storage.rglob("0001_base.json")
    slower, faster = baseline.with_name("0002_slower.json"), baseline.with_name("0003_faster.json")
    slower.write_text(baseline.read_text())
    faster.write_text(baseline.read_text())
    _scale_times(slower, 4.0)  # a baseline 4x slower: today is no regression
    _scale_times(faster, 0.25)  # a baseline 4x faster: today lost 75% of the throughput

    common = (f"--benchmark-storage=file://{storage}", "--benchmark-compare-fail=min:50%")
    ok = inner(BENCH_SOURCE, *common, "--benchmark-compare=0002")
    assert ok.ret == 0, ok.stdout.str()
    assert "Performance has regressed" not in ok.stdout.str()
    regressed = inner(BENCH_SOURCE, *common, "--benchmark-compare=0003")
    assert regressed.ret != 0
    said = regressed.stdout.str() + regressed.stderr.str()  # pytest-benchmark reports on stderr
    assert re.search(
        r"Performance has regressed:\s*\n\s*test_engine_throughput \(0003_faster\) - "
        r"Field 'min' has failed PercentageRegressionCheck",
        said,
    ), said


# -- without an inner session ----------------------------------------------------------------


def test_directory_names_are_safe_and_never_reused(tmp_path):
    nodeid = "tests/test_x.py::test_feed[tcp://127.0.0.1:* / 512B]"
    assert re.fullmatch(r"[A-Za-z0-9_.\-]+", _slug(nodeid))
    assert len(_slug("t.py::" + "x" * 500)) <= 100
    assert _slug("t.py::" + "x" * 500 + "a") != _slug("t.py::" + "x" * 500 + "b")
    first, second = _new_test_dir(str(tmp_path), nodeid), _new_test_dir(str(tmp_path), nodeid)
    assert first != second and os.path.isdir(first) and os.path.isdir(second)


def test_workloads_go_to_the_tests_directory_unless_told_otherwise(tmp_path):
    fixture = ZmqloadFixture(str(tmp_path), keep=False)
    assert fixture.workload(pattern="pub-sub").out == str(tmp_path)
    assert fixture.workload(Workload(size=128)).out == str(tmp_path)
    assert fixture.workload(Workload(out="/elsewhere")).out == "/elsewhere"
    assert fixture.workload(out="/elsewhere").out == "/elsewhere"
    with pytest.raises(TypeError):
        fixture.workload(Workload(), size=128)


def test_zmqload_metrics_is_every_runs_unless_it_sets_its_own(tmp_path):
    given = {"metrics": "127.0.0.1:9464", "metrics_linger": "2"}  # as the flags give them
    fixture = ZmqloadFixture(str(tmp_path), keep=False, metrics=given)
    for w in (fixture.workload(rate=10), fixture.workload(Workload(rate=10))):
        assert (w.metrics, w.metrics_linger) == ("127.0.0.1:9464", 2.0)
    own = fixture.workload(metrics="127.0.0.1:9500")
    assert (own.metrics, own.metrics_linger) == ("127.0.0.1:9500", Workload.metrics_linger)
    assert fixture.workload(Workload(metrics="127.0.0.1:9500")).metrics == "127.0.0.1:9500"
    assert ZmqloadFixture(str(tmp_path), keep=False).workload().metrics is None


def test_benchmark_rejects_an_unknown_timing(tmp_path):
    bench = ZmqloadBenchmark(benchmark=None, runs=ZmqloadFixture(str(tmp_path), keep=False))
    with pytest.raises(ValueError, match="timing"):
        bench(pattern="push-pull", timing="cpu")


SERVICE = '''
import threading, zmq

def user_service(stop_after=None):
    """The user's REP service, plain pyzmq in a thread; stops answering after `stop_after`."""
    context = zmq.Context.instance()
    rep = context.socket(zmq.REP)
    rep.setsockopt(zmq.RCVTIMEO, 2000)
    port = rep.bind_to_random_port("tcp://127.0.0.1")
    def serve():
        n = 0
        try:
            while stop_after is None or n < stop_after:
                rep.send(rep.recv())
                n += 1
            rep.recv()
        except zmq.Again:
            pass
    threading.Thread(target=serve, daemon=True).start()
    return f"tcp://127.0.0.1:{port}"
'''


@pytest.mark.slow  # several runs: out of make test-fast, in make test
def test_the_fixture_points_at_a_users_service(inner):
    """The `zmqload` fixture loads a service of the user's (req-rep, --role producer): a test
    asserts its answers; a service that stops answering fails it with the answered and unanswered
    counts in the report."""
    result = inner(
        SERVICE
        + """
def test_service_answers_everything(zmqload):
    result = zmqload.run(pattern="req-rep", role="producer", producers_connect=user_service(),
                         rate=2000, count=1000)
    assert result.answered == 1000 and result.unanswered == 0
    assert result.service["echoed"] == 1000 and result.service["by_order"] == 0
    assert result.latency_us(99, "round_trip") < 500_000

def test_service_that_stops(zmqload):
    result = zmqload.run(pattern="req-rep", role="producer", producers_connect=user_service(stop_after=20),
                         rate=1000, count=40, reply_timeout_ms=50)
    assert result.unanswered == 0
"""
    )
    result.assert_outcomes(passed=1, failed=1)
    output = result.stdout.str()
    assert "assert 20 == 0" in output
    report = _section(output, "zmqload runs")
    assert "1 producer(s) -> your service" in report
    assert re.search(r"echoed / by order\s*\S\s*20 / 0\b", report), report
    assert re.search(r"answered\s*\S\s*20\b", report) and re.search(
        r"unanswered\s*\S\s*20 \(no reply within 50 ms\)", report
    ), report
