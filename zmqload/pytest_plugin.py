"""pytest plugin (pytest11): ZeroMQ capacity checks in users' test suites. Fixtures `zmqload` (a run
in the test's own directory) and `zmqload_benchmark` (timed by pytest-benchmark). Run directories
are removed after a passing test, kept after a failing one (docs/PYTEST.md)."""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import importlib.util
import io
import os
import re
import shutil
import statistics
import warnings
from typing import TYPE_CHECKING, Any, Generator, Iterator, Optional

import pytest

from .contract.run_record import RunRecord
from .errors import RecordError
from .store.record_files import read_run

if TYPE_CHECKING:
    from pluggy import Result

    from .contract.workload import Workload
    from .measure.result import RunResult

SECTION = "zmqload runs"
TIMINGS = ("message", "wall")
FULL_SUMMARIES = 5  # a failure report shows this many runs in full, earlier ones in a line
DEFAULT_FAIL_IF = "p99=+10%,lost=+0,throughput=-5%"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("zmqload", "zmqload capacity tests")
    group.addoption(
        "--zmqload-keep",
        action="store_true",
        default=False,
        help="keep every zmqload run directory (default: only those of failed tests)",
    )
    group.addoption(
        "--zmqload-out",
        metavar="DIR",
        default=None,
        help="put zmqload run directories under DIR, one sub-directory per test "
        "(default: pytest's temporary directory)",
    )
    group.addoption(
        "--zmqload-metrics",
        metavar="HOST:PORT",
        default=None,
        help="serve every run's live figures there for Prometheus (a run's own --metrics: "
        "docs/METRICS.md); one run at a time on the port, so not with parallel workers",
    )
    group.addoption(
        "--zmqload-metrics-linger",
        metavar="SECONDS",
        default=None,
        help="with --zmqload-metrics: how long each run's final figures stay served after it "
        "(a run's --metrics-linger)",
    )
    group.addoption(
        "--zmqload-save-baseline",
        metavar="FILE",
        default=None,
        help="store each passing test's zmqload runs in FILE as its baseline (added to what FILE "
        "holds; a test's entry replaced)",
    )
    group.addoption(
        "--zmqload-baseline",
        metavar="FILE",
        default=None,
        help="fail a test whose zmqload runs regressed against its baseline in FILE (zmqload "
        "compare's rule and --zmqload-fail-if's limits)",
    )
    group.addoption(
        "--zmqload-fail-if",
        metavar="LIMITS",
        default=DEFAULT_FAIL_IF,
        help="what counts as a regression against --zmqload-baseline, as zmqload compare "
        f"--fail-if takes it (default {DEFAULT_FAIL_IF})",
    )


_FIXTURE_KEY = pytest.StashKey["ZmqloadFixture"]()


def _slug(nodeid: str) -> str:
    """A directory name for a test id: readable, filesystem-safe, bounded in length."""
    name = re.sub(r"[^A-Za-z0-9_.\-]+", "_", nodeid.replace("::", "__")).strip("_.") or "test"
    if len(name) > 100:
        name = name[:90] + "-" + hashlib.sha1(nodeid.encode()).hexdigest()[:8]
    return name


def _new_test_dir(base: str, nodeid: str) -> str:
    """A directory that no other test (or rerun of this one) uses: created, never reused."""
    os.makedirs(base, exist_ok=True)
    stem = os.path.join(base, _slug(nodeid))
    path, n = stem, 1
    while True:
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            n += 1
            path = f"{stem}-{n}"


class ZmqloadFixture:
    """`run(**options)` is `zmqload.run` with records in this test's directory (`out_dir`).

    `results` holds every RunResult of the test, in order; `last` the latest one."""

    def __init__(self, out_dir: str, keep: bool, metrics: Optional[dict[str, str]] = None):
        self.out_dir = out_dir
        self.keep = keep
        self.metrics = metrics or {}  # --zmqload-metrics[-linger]: for runs that set none
        self.results: list[RunResult] = []
        self.failed = False
        self.reported = False

    @property
    def last(self) -> Optional[RunResult]:
        return self.results[-1] if self.results else None

    def workload(self, workload: Optional[Workload] = None, **options: Any) -> Workload:
        """The Workload a run would use (records in this test's directory unless `out` is given)."""
        from zmqload import Workload

        if workload is None:
            options.setdefault("out", self.out_dir)
            if options.get("metrics") is None:
                options.update(self.metrics)
            return Workload(**options)
        if options:
            raise TypeError("pass either a Workload or keyword options, not both")
        if workload.out == Workload.out:  # the default "runs": redirect it here
            workload = dataclasses.replace(workload, out=self.out_dir)
        if workload.metrics is None and self.metrics:
            workload = dataclasses.replace(workload, **self.metrics)  # type: ignore[arg-type]
        return workload

    def run(self, workload: Optional[Workload] = None, **options: Any) -> RunResult:
        """Run one workload (a Workload or its fields as keywords) and return its RunResult. SLOs
        among the keywords (`max_loss=0`, `slo_restart_lost=100`: `run`'s SLO options) are kept in
        run.json and judged as `run` judges them: a broken one fails the test in one line."""
        __tracebackhide__ = True  # the failure points at the test's line, not at this method
        from zmqload.contract.workload import SLO_OPTIONS, Slos
        from zmqload.runner import run as run_workload

        slos = Slos(**{name: options.pop(name) for name in list(options) if name in SLO_OPTIONS})
        w = self.workload(workload, **options)
        if slos.given:
            slos.check_with(w)
        result = run_workload(w, slos=slos if slos.given else None)
        self.results.append(result)
        if slos.given and result.status == "complete":
            from zmqload.plan.slo import judge

            breaches = judge(result, slos)
            if breaches:
                pytest.fail(f"zmqload: SLO broken: {'; '.join(b.text for b in breaches)}")
        return result

    # -- the failure report -------------------------------------------------------------
    def run_dirs(self) -> list[str]:
        """Run directories this test made in its own directory, oldest first."""
        return sorted(
            glob.glob(os.path.join(glob.escape(self.out_dir), "run=*")), key=os.path.getmtime
        )

    def describe(self) -> str:
        """Every run of the test: its summary table, missing sequence ranges, where its records
        are and how to get the Spark report."""
        from rich.console import Console
        from zmqload.cli.display import print_summary

        buffer = io.StringIO()
        console = Console(
            file=buffer,
            width=100,
            force_terminal=False,
            color_system=None,
            highlight=False,
            soft_wrap=True,
        )
        known = {os.path.abspath(r.run_dir) for r in self.results}
        unfinished = [d for d in self.run_dirs() if os.path.abspath(d) not in known]
        total = len(self.results) + len(unfinished)
        for i, result in enumerate(self.results, 1):
            if (
                i <= len(self.results) - FULL_SUMMARIES
            ):  # a long series: one line for the early runs
                p99 = result.latency_us(99)
                console.print(
                    f"run {i} of {total}: {result.run_id}: lost {result.lost:,} of {result.expected:,}, "
                    f"{result.throughput_msgs:,.0f} msg/s, p99 "
                    f"{'-' if p99 is None else format(p99, ',.1f')} µs; records: {result.run_dir}"
                )
                continue
            console.print(f"run {i} of {total}: {result.run_id}")
            print_summary(result, console)
            console.print()
        for d in (
            unfinished
        ):  # runs that raised (RunError, interrupted): no RunResult, run.json says why
            record = _read_record(d)
            status = "unknown" if record is None else record.status.value
            error = record.error if record is not None else None
            console.print(
                f"run {os.path.basename(d)[4:]}: status {status}"
                + (f", error: {error}" if error else "")
            )
            console.print(f"records: {d}")
            console.print()
        if self.keep:
            console.print("run directories kept (--zmqload-keep)")
        else:
            console.print(
                "run directories kept because the test failed (passing tests' are removed; "
                "--zmqload-keep keeps all)"
            )
        parents = [os.path.dirname(os.path.abspath(r.run_dir)) for r in self.results]
        parents += [os.path.abspath(self.out_dir)] if unfinished else []
        for parent in dict.fromkeys(parents):
            console.print(f"Spark report: python -m zmqload report {parent}")
        return buffer.getvalue().rstrip() + "\n"

    def cleanup(self) -> bool:
        """Remove this test's directory unless it must be kept. True if it was kept."""
        if (self.keep or self.failed) and self.run_dirs():
            return True
        shutil.rmtree(self.out_dir, ignore_errors=True)
        return False


def _read_record(run_dir: str) -> Optional[RunRecord]:
    try:
        return read_run(run_dir)
    except RecordError:
        return None


def _base_dir(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> str:
    out: Optional[str] = config.getoption("--zmqload-out")
    if out:
        return os.path.abspath(out)
    return str(tmp_path_factory.getbasetemp() / "zmqload")


@pytest.fixture
def zmqload(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ZmqloadFixture]:
    """Run zmqload workloads from a test: `zmqload.run(pattern="pub-sub", rate=50_000, ...)`
    returns a RunResult to assert on; a failing test's report shows every run's summary."""
    keep = request.config.getoption("--zmqload-keep")
    out_dir = _new_test_dir(_base_dir(request.config, tmp_path_factory), request.node.nodeid)
    fixture = ZmqloadFixture(out_dir, keep, _metrics(request.config))
    request.node.stash[_FIXTURE_KEY] = fixture
    yield fixture
    # The call phase's report is made before this teardown runs, so `failed` is settled.
    if fixture.cleanup():
        request.node.stash[_KEPT_KEY] = fixture.out_dir


def _metrics(config: pytest.Config) -> dict[str, str]:
    """--zmqload-metrics and its linger as Workload fields (text: checked as the flags are)."""
    address = config.getoption("--zmqload-metrics")
    if address is None:
        return {}
    linger = config.getoption("--zmqload-metrics-linger")
    return {"metrics": address, **({"metrics_linger": linger} if linger is not None else {})}


_KEPT_KEY = pytest.StashKey[str]()


# -- baselines: a test's runs against those of an earlier session ---------------------------
@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """After a passing test's call: its runs stored as its baseline and/or compared with it; a
    regression fails the test with the comparison as its message."""
    result = yield  # a failing test's exception goes on as it is
    fixture = item.stash.get(_FIXTURE_KEY, None)
    config = item.config
    save, against = (
        config.getoption("--zmqload-save-baseline"),
        config.getoption("--zmqload-baseline"),
    )
    if fixture is None or not fixture.results or not (save or against):
        return result
    from .contract.comparison import parse_fail_if
    from .measure.run_figures import run_figures

    runs = [run_figures(r.run_dir) for r in fixture.results]
    if against:
        limits = parse_fail_if(config.getoption("--zmqload-fail-if"), "--zmqload-fail-if")
        message = _regressed(item.nodeid, runs, against, limits)
        if message:
            pytest.fail(message, pytrace=False)
    if save:
        _save_baseline(save, item.nodeid, runs)
    return result


def _regressed(nodeid: str, runs: list[Any], path: str, limits: list[Any]) -> Optional[str]:
    """The comparison's table when the runs regressed against the test's baseline, else None
    (also when the baseline has no entry for the test: nothing to compare with)."""
    from rich.console import Console

    from .cli.compare import print_comparison
    from .measure.compare import Group, compare

    baseline = _read_baseline(path).tests.get(nodeid)
    if not baseline:  # said, not failed: a new test has no baseline until one is saved
        warnings.warn(pytest.PytestWarning(f"zmqload: {path} holds no baseline for {nodeid}"))
        return None
    result = compare(Group(f"baseline ({path})", baseline), Group("this run", runs), limits)
    if not result.regressed:
        return None
    buffer = io.StringIO()
    console = Console(file=buffer, width=100, color_system=None, highlight=False, soft_wrap=True)
    console.print(f"zmqload runs regressed against the baseline: {'; '.join(result.regressed)}")
    print_comparison(result, console)
    return buffer.getvalue().rstrip()


def _read_baseline(path: str) -> Any:
    from .contract.codec import decode
    from .contract.comparison import Baseline

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise pytest.UsageError(f"--zmqload-baseline: {path}: {exc.strerror}") from None
    try:
        return decode(data, Baseline, path)
    except RecordError as exc:
        raise pytest.UsageError(f"--zmqload-baseline: {exc}") from None


def _save_baseline(path: str, nodeid: str, runs: list[Any]) -> None:
    """The test's entry set in FILE, under a lock (xdist's workers share the file)."""
    import fcntl

    from .contract.codec import encode
    from .contract.comparison import Baseline

    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        data = f.read()
        baseline = _read_baseline(path) if data.strip() else Baseline()
        baseline.tests[nodeid] = runs
        f.seek(0)
        f.truncate()
        f.write(encode(baseline))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Result[pytest.TestReport], None]:
    outcome = yield
    report = outcome.get_result()
    fixture = item.stash.get(_FIXTURE_KEY, None)
    if fixture is None:
        return
    if report.failed:
        fixture.failed = True
        if (
            not fixture.reported
            and report.when != "teardown"
            and (fixture.results or fixture.run_dirs())
        ):
            fixture.reported = True
            report.sections.append((SECTION, fixture.describe()))
    if report.when == "teardown":
        kept = item.stash.get(_KEPT_KEY, None)
        if kept:  # travels with the report to the xdist controller for the terminal summary
            setattr(report, "zmqload_kept", kept)  # an attribute of zmqload's own


class _KeptDirs:
    """On the controller (with or without xdist): which tests left run directories."""

    def __init__(self) -> None:
        self.kept: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        kept = getattr(report, "zmqload_kept", None)
        if report.when == "teardown" and kept:
            self.kept.append((report.nodeid, kept))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.kept:
            return
        terminalreporter.section("zmqload")
        terminalreporter.line(f"run directories kept for {len(self.kept)} test(s):")
        for nodeid, path in self.kept:
            terminalreporter.line(f"  {nodeid}: {path}")
        terminalreporter.line(
            "Spark report of one test's runs: python -m zmqload report <directory>"
        )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_KeptDirs(), "zmqload-kept-dirs")


# -- pytest-benchmark -------------------------------------------------------------------


class ZmqloadBenchmark:
    """`zmqload_benchmark(**options)`: time zmqload runs with pytest-benchmark.

    timing="message" (default): each round's time is the run's own elapsed time (first send
    to last receive, CLOCK_MONOTONIC in the workers) divided by the messages delivered, so
    pytest-benchmark's OPS column is msg/s and `--benchmark-compare-fail` guards throughput.
    timing="wall": the wall time of the whole zmqload.run call, which adds spawning worker
    processes, the warm-up handshake and writing Parquet (about 0.5 s on a small machine).
    """

    def __init__(
        self, benchmark: Any, runs: ZmqloadFixture
    ):  # pytest-benchmark's fixture (optional)
        self.benchmark = benchmark
        self.runs = runs

    def __call__(
        self,
        workload: Optional[Workload] = None,
        *,
        rounds: int = 3,
        warmup_rounds: int = 0,
        timing: str = "message",
        **options: Any,
    ) -> RunResult:
        if timing not in TIMINGS:
            raise ValueError(f"timing must be one of {', '.join(TIMINGS)}, not {timing!r}")
        from .runner.preflight import preflight

        w = preflight(
            self.runs.workload(workload, **options).validate()
        )  # bad options fail before any timing
        results: list[RunResult] = []
        elapsed = [0.0]  # the message clock: engine time, advanced by each run

        def engine_time_per_message() -> float:
            return elapsed[0]

        def one_run() -> RunResult:
            # a run name is a directory name: every round needs its own
            name = w.run_name and f"{w.run_name}-{len(results) + 1}"
            result = self.runs.run(dataclasses.replace(w, run_name=name))
            if result.unique_received == 0 or result.elapsed_s <= 0:
                raise RuntimeError(
                    f"run {result.run_id} delivered no messages: nothing to time "
                    f"(lost {result.lost:,} of {result.expected:,})"
                )
            elapsed[0] += result.elapsed_s / result.unique_received
            results.append(result)
            return result

        if timing == "message":
            if not hasattr(self.benchmark, "_timer"):
                raise RuntimeError(
                    "this pytest-benchmark version offers no timer hook; "
                    "use zmqload_benchmark(..., timing='wall')"
                )
            self.benchmark._timer = engine_time_per_message
        last: RunResult = self.benchmark.pedantic(
            one_run, rounds=rounds, warmup_rounds=warmup_rounds, iterations=1
        )
        measured = results[-rounds:]  # warm-up rounds come first
        self.benchmark.extra_info.update(_extra_info(w, measured, timing, rounds))
        return last


def _extra_info(w: Workload, results: list[RunResult], timing: str, rounds: int) -> dict[str, Any]:
    from zmqload.measure.histogram import Histogram

    latency = Histogram()
    for result in results:
        latency.merge(result.latency_intended)

    def us(q: float) -> Optional[float]:
        value = latency.percentile(q)
        return None if value is None else round(value / 1000.0, 3)

    versions = results[-1].versions
    return {
        "timing": timing,
        "pattern": w.pattern,
        "transport": w.transport,
        "size": w.size,
        "count": w.count,
        "duration": w.duration,
        "rate": w.rate,
        "producers": w.producers,
        "consumers": w.consumers,
        "sndhwm": w.sndhwm,
        "rcvhwm": w.rcvhwm,
        "rounds": len(results),
        "throughput_msgs": statistics.median(r.throughput_msgs for r in results),
        "throughput_mb": statistics.median(r.throughput_mb for r in results),
        "throughput_msgs_rounds": [round(r.throughput_msgs, 1) for r in results],
        "elapsed_s_rounds": [r.elapsed_s for r in results],
        "sent": sum(r.sent for r in results),
        "expected": sum(r.expected for r in results),
        "lost": sum(r.lost for r in results),
        "refused": sum(r.refused for r in results),
        "dropped": sum(r.dropped for r in results),
        "stranded": sum(r.stranded for r in results),
        "latency_p50_us": us(50),
        "latency_p99_us": us(99),
        "latency_max_us": us(100),
        "libzmq": versions.libzmq,
        "pyzmq_libzmq": versions.pyzmq_libzmq,
        "zmqload": versions.zmqload,
    }


if importlib.util.find_spec("pytest_benchmark") is not None:
    # `benchmark` must be a declared dependency: pytest-benchmark picks the tests for
    # --benchmark-only / --benchmark-skip by the fixture names they use.
    @pytest.fixture
    def zmqload_benchmark(benchmark: Any, zmqload: ZmqloadFixture) -> ZmqloadBenchmark:
        """Time zmqload runs with pytest-benchmark: `zmqload_benchmark(pattern="push-pull",
        size=64, count=1_000_000)` returns the last RunResult; msg/s, MB/s, loss, latency and
        the libzmq version go to `benchmark.extra_info` (and so to --benchmark-json)."""
        return ZmqloadBenchmark(benchmark, zmqload)
else:

    @pytest.fixture
    def zmqload_benchmark(zmqload: ZmqloadFixture) -> ZmqloadBenchmark:
        """Needs pytest-benchmark (not installed)."""
        pytest.fail(
            "zmqload_benchmark needs pytest-benchmark: pip install pytest-benchmark", pytrace=False
        )
