"""Shared helpers for the engine and run tests: real sockets on loopback only."""

from __future__ import annotations

import contextlib
import fcntl
import glob
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pyarrow.parquet as pq
import pytest

import zmqload

# The tests that interrupt a run do it as a user at a terminal does. A suite started in the background
# without job control (`make test &` in a script, some CI runners) has SIGINT ignored, which every
# run it starts would inherit, and zmqload keeps an ignored SIGINT ignored (nohup, `&`): give the
# runs the terminal's disposition back.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Parallel workers (pytest-xdist, `make test`): each its own temporary directory, so that what lives
# there per user (the warm report server's socket, ipc endpoints, staging copies) is per worker, and
# a worker's session end stops only its own report server.
_worker_tmp = None  # removed at the session's end
if os.environ.get("PYTEST_XDIST_WORKER"):
    import tempfile

    _worker_tmp = os.path.join(
        tempfile.gettempdir(), f"zmqload-tests-{os.getpid()}-{os.environ['PYTEST_XDIST_WORKER']}"
    )
    os.makedirs(_worker_tmp, exist_ok=True)
    os.environ["TMPDIR"] = tempfile.tempdir = _worker_tmp


# The files whose tests take many seconds each (a Spark report, a scenario's repeated runs, a
# capacity search, CPU placement's unpaced runs): marked `slow` (and single tests like them, by
# hand), so `make test-fast` (-m "not slow") is a developer's loop under 3 minutes; `make test`
# and CI run everything.
SLOW_FILES = frozenset(
    {
        "test_scenarios.py",
        "test_scenarios_000_003.py",
        "test_scenarios_001_002.py",
        "test_scenarios_user.py",
        "test_scenarios_conflate.py",
        "test_scenarios_resets.py",
        "test_scenarios_restart_claims.py",
        "test_consumer_side.py",
        "test_out_uri.py",
        "test_topics.py",
        "test_service_report.py",
        "analysis/test_queue_figure.py",
        "analysis/test_remote_report.py",
        "analysis/test_one_answer.py",
        "test_capacity.py",
        "test_placement.py",
        "test_search_record.py",
        "test_devices.py",
        "test_one_side.py",
        "test_spark_placement.py",
        "test_curve.py",
        "test_netns_cluster.py",
        "analysis/test_report_server.py",
        "analysis/test_search_section.py",
        "analysis/test_command.py",
        "analysis/test_report_errors.py",
        "analysis/test_capacity_report.py",
        "analysis/test_plots.py",
        "analysis/test_round_trips.py",
        "analysis/test_real_runs.py",
        "analysis/test_percentile_rule.py",
        "analysis/test_failed_runs.py",
        "analysis/test_tail_placement.py",
        "analysis/test_page.py",
    }
)


# The system tests: what needs a cluster (Spark's local-cluster, network namespaces, an object
# store), a fault injected into a whole run (SIGKILL, SIGSTOP, a full disk, reset connections, a
# signal in each phase), a scenario's repeated runs, a browser, a server's lifecycle, or the CPUs
# to itself. Marked `system`: `make test` runs the others, `make test-system` these (CI runs both).
SYSTEM_FILES = frozenset(
    {
        "test_spark_placement.py",
        "test_netns_cluster.py",
        "test_out_uri.py",
        "analysis/test_remote_report.py",
        "test_faults.py",
        "test_signal_phases.py",
        "test_resets.py",
        "test_scenarios.py",
        "test_scenarios_000_003.py",
        "test_scenarios_001_002.py",
        "test_scenarios_user.py",
        "test_scenarios_conflate.py",
        "test_scenarios_resets.py",
        "test_scenarios_restart_claims.py",
        "analysis/test_page.py",
        "analysis/test_report_server.py",
        "test_placement.py",
        "test_restarts.py",
        "analysis/test_restart_report.py",
        "test_sockopt_effects.py",
    }
)


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(os.path.abspath(__file__))
    files = {item: os.path.relpath(str(item.fspath), here) for item in items}
    slow = {
        item: files[item] in SLOW_FILES or item.get_closest_marker("slow") is not None
        for item in items
    }
    for item in items:
        if slow[item]:
            item.add_marker(pytest.mark.slow)
        # a test that needs the CPUs to itself (`alone`) is a system test too
        if files[item] in SYSTEM_FILES or item.get_closest_marker("alone") is not None:
            item.add_marker(pytest.mark.system)
    # the long files first: parallel workers (`make test`) then end together instead of one of them
    # starting a long file last; the system set's longest in LONGEST_SYSTEM_FILES' order, the tests
    # marked `alone` last (at the end the other worker is often idle anyway, so waiting costs less)
    items.sort(
        key=lambda item: (
            _longest_rank(files[item]),
            item.get_closest_marker("alone") is not None,
            not slow[item],
        )
    )


# The system set's longest files, longest first (seconds per file, --durations=0 summed, of one
# `make test-system` on the 2-core machine). With `--dist loadfile --no-loadscope-reorder` (make
# test-system) each worker takes the next file in collection order when it is nearly done: the
# longest first, so that no long file starts last while the other worker idles (xdist's own
# order, by count of tests, had one worker end 85 s before the other). Unlisted files follow; a
# rough list is enough (re-rank it from `make test-system`'s --durations when it drifts).
LONGEST_SYSTEM_FILES = (
    "analysis/test_page.py",  # 238 s
    "test_spark_placement.py",  # 206
    "test_out_uri.py",  # 109
    "test_scenarios_user.py",  # 77
    "test_netns_cluster.py",  # 71
    "analysis/test_remote_report.py",  # 68
    "test_scenarios_conflate.py",  # 66
    "test_scenarios_000_003.py",  # 60
    "test_scenarios.py",  # 57
    "test_faults.py",  # 56
    "analysis/test_report_server.py",  # 50
    "test_placement.py",  # 46
    "test_restarts.py",  # 43
)


def _longest_rank(file: str) -> int:
    return (
        LONGEST_SYSTEM_FILES.index(file)
        if file in LONGEST_SYSTEM_FILES
        else len(LONGEST_SYSTEM_FILES)
    )


# -- what a test starts ends with it ---------------------------------------------------------------
# A thread, socket, context or process a test starts must not outlive it, passed or failed: a user's
# PUSH thread (UserPush._send of tests/test_consumer_side.py, also test_curve.py's ClientPush) left in
# a blocking send on its own libzmq context while later tests ran aborted the whole pytest process
# (SIGABRT in libzmq) once. Each is handed to end_with_the_test() where it starts; the autouse
# fixtures below end what was handed to them in their scope (a test, or a module's or the session's
# fixtures), last first; then a test fails if a thread started by code of tests/ is still alive
# THREAD_GRACE_S after its teardown (a library's own threads, pyzmq's, py4j's, are not looked at).
# A socket is closed by the thread that uses it, or after that thread is joined: never under it.
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
THREAD_GRACE_S = 10.0  # a thread of the tests' may take this long to end after its test's teardown
PROCESS_GRACE_S = (
    15.0  # a process left running: SIGINT (a run stops its workers, exit 130), then SIGKILL
)
_to_end: list = []


def end_with_the_test(*things):
    """Ends each of `things` when the running test ends (or, handed over by a module's or the session's
    fixture, when that scope ends), passed or failed, last first: a callable (a helper's stop) is called,
    a subprocess.Popen still running is stopped (SIGINT, then SIGKILL; its process group if it leads
    one) and reaped, a thread is joined (bounded: the test fails if it does not end). Returns the
    first of them."""
    _to_end.extend(things)
    return things[0] if things else None


def _end(thing) -> str | None:
    """Ends one thing handed to end_with_the_test; what is wrong with it, or None."""
    if isinstance(thing, subprocess.Popen):
        _end_process(thing)
        return None
    if isinstance(thing, threading.Thread):
        thing.join(THREAD_GRACE_S)
        return (
            f"thread {thing.name} did not end within {THREAD_GRACE_S} s"
            if thing.is_alive()
            else None
        )
    thing()
    return None


def _end_process(proc: subprocess.Popen) -> None:
    """A process still running: SIGINT, then SIGKILL, each given PROCESS_GRACE_S; reaped, its pipes closed."""

    def signal_it(sig: int) -> None:
        try:
            if os.getpgid(proc.pid) == proc.pid:  # start_new_session: its whole group
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        except ProcessLookupError:
            pass

    for sig, grace in ((signal.SIGINT, PROCESS_GRACE_S), (signal.SIGKILL, PROCESS_GRACE_S)):
        if proc.poll() is not None:
            break
        signal_it(sig)
        try:
            try:
                proc.communicate(timeout=grace)  # its pipes drained, so it cannot block on them
            except ValueError:  # the test closed one of them
                proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def _end_from(mark: int) -> list[str]:
    problems = []
    while len(_to_end) > mark:
        thing = _to_end.pop()
        try:
            problem = _end(thing)
        except Exception as e:  # the others are ended all the same
            problem = f"ending {thing!r}: {type(e).__name__}: {e}"
        if problem:
            problems.append(problem)
    return problems


def _started_by_the_tests(thread: threading.Thread) -> str | None:
    """Where the code a thread runs is defined (file:line), if under tests/; else None."""
    run = getattr(thread, "_target", None) or type(thread).run
    run = getattr(run, "func", run)  # functools.partial
    code = getattr(getattr(run, "__func__", run), "__code__", None)
    if code is None or not os.path.abspath(code.co_filename).startswith(TESTS_DIR + os.sep):
        return None
    return f"{os.path.relpath(code.co_filename, TESTS_DIR)}:{code.co_firstlineno} {code.co_name}"


def children() -> set[int]:
    """The pids of this process's children (from /proc): a refusal must start none."""
    import contextlib

    pids: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/children") as f:
            pids.update(int(pid) for pid in f.read().split())
    return pids


def in_process(capsys, *argv: str) -> subprocess.CompletedProcess:
    """`zmqload ARGV` in this process, through the CLI's own entry (`python -m zmqload` is
    sys.exit(cli.main())), as a CompletedProcess; argparse's refusals exit as a process would.
    What only a real process shows (no traceback, the interpreter's exit) is checked on one refusal
    of each kind in a real process (tests/test_cli.py)."""
    from zmqload import cli

    capsys.readouterr()
    try:
        status = cli.main(list(argv))
    except SystemExit as exc:
        status = exc.code
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(["zmqload", *argv], status, captured.out, captured.err)


@pytest.fixture(scope="session")
def spark():
    """One local[2] Spark session for the whole test session (each xdist worker's own): every
    analysis and every report made in this process uses it."""
    from zmqload.analysis.session import get_spark

    session = get_spark("local[2]")
    yield session
    session.stop()


def report_here(*argv: str) -> subprocess.CompletedProcess:
    """`zmqload report ARGV` in this process, on its Spark session (ask for the `spark` fixture):
    the command a user runs, without a JVM of its own. Output captured as a process's would be."""
    from zmqload import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli.main(["report", *argv, "--no-server"])
        except SystemExit as exc:
            status = exc.code
    return subprocess.CompletedProcess(
        ["zmqload", "report", *argv], status, out.getvalue(), err.getvalue()
    )


def recv_until(sock, ended: threading.Event, multipart: bool = False):
    """sock.recv() (or recv_multipart()) in a thread of a test, as the socket's RCVTIMEO has it
    (zmq.Again once it passes), but in polls of at most 100 ms, so that it ends sooner, with
    zmq.Again, once `ended` is set: the test is over and its thread must let go of the socket."""
    import zmq

    timeout_ms = sock.getsockopt(zmq.RCVTIMEO)
    deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000
    while not ended.is_set():
        left_ms = 100 if deadline is None else (deadline - time.monotonic()) * 1000
        if sock.poll(max(0, min(100, int(left_ms) + 1))):
            return sock.recv_multipart() if multipart else sock.recv()
        if deadline is not None and time.monotonic() >= deadline:
            break
    raise zmq.Again()


@pytest.fixture(autouse=True, scope="session")
def _the_sessions_ends():
    mark = len(_to_end)
    yield
    problems = _end_from(mark)
    # `zmqload report` starts a warm server that outlives it (zmqload/report/server.py): the session
    # stops the one its reports started
    from zmqload.report.server import stop_server

    stop_server()
    if _worker_tmp:
        shutil.rmtree(_worker_tmp, ignore_errors=True)
    assert not problems, "; ".join(problems)


@pytest.fixture(autouse=True, scope="module")
def _a_modules_ends():
    mark = len(_to_end)
    yield
    problems = _end_from(mark)
    assert not problems, "; ".join(problems)


def join_the_tests_threads(before: set, timeout: float = THREAD_GRACE_S) -> list[str]:
    """Joins (within `timeout` in all) the threads started by code of tests/ that are not in `before`
    (a set of threading.enumerate()); those still alive after it, named with where their code is."""
    deadline, left = time.monotonic() + timeout, []
    for thread in threading.enumerate():
        where = None if thread in before else _started_by_the_tests(thread)
        if where is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                left.append(f"{thread.name} ({where})")
    return left


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Parallel workers share two locks in the session's directory: every test holds `running`
    shared, a test marked `alone` holds it exclusively, so it runs while no other test does (the
    `turnstile` keeps new tests from starving it). Held over the whole protocol, so that the module
    and session fixtures a test sets up or tears down (a capacity search, a report) wait too. Only
    where pytest-xdist runs workers."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    shared = item.config._tmp_path_factory.getbasetemp().parent
    with (
        open(shared / "turnstile.lock", "a") as turnstile,
        open(shared / "running.lock", "a") as running,
    ):
        if item.get_closest_marker("alone"):
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            fcntl.flock(running, fcntl.LOCK_EX)
        else:
            fcntl.flock(turnstile, fcntl.LOCK_SH)
            fcntl.flock(running, fcntl.LOCK_SH)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield  # closing the files releases the locks


@pytest.fixture(autouse=True)
def _a_tests_ends():
    mark, before = len(_to_end), set(threading.enumerate())
    yield
    problems = _end_from(mark)
    left = join_the_tests_threads(before)
    if left:
        problems.append(
            f"threads of the test still alive {THREAD_GRACE_S:.0f} s after its teardown: "
            + ", ".join(left)
        )
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)


@pytest.fixture
def out_dir(tmp_path):
    return str(tmp_path / "runs")


def check_identity(result) -> None:
    """Every accepted message has exactly one fate, per stream and in total."""
    from zmqload.contract.fates import FATES

    assert result.expected == sum(getattr(result, f) for f in FATES), result.summary()
    assert result.lost == result.dropped + result.stranded + result.unknown
    for stream in result.streams:
        assert stream["expected"] == sum(stream[f] for f in FATES), stream


@pytest.fixture
def run_workload(out_dir):
    """Run a workload with records under the test's temporary directory; the fate
    identity is checked on every run."""

    def run(**options):
        options.setdefault("out", out_dir)
        result = zmqload.run(**options)
        check_identity(result)
        return result

    return run


def read_table(run_dir: str, kind: str):
    """All parts of one record kind of a run, as a pyarrow Table (parts in name order)."""
    files = sorted(glob.glob(os.path.join(run_dir, kind, "part-*.parquet")))
    assert files, f"no {kind} parts in {run_dir}"
    return pq.ParquetDataset(files).read()


def read_meta(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "run.json")) as f:
        return json.load(f)


def zmqload_cli(*args, timeout=120):
    """`python -m zmqload ARGS` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "zmqload", *args], capture_output=True, text=True, timeout=timeout
    )


def free_ports(n, consecutive=False):
    """Loopback tcp ports nobody listens on (now); `consecutive`: p, p+1, ..."""
    while True:
        probes = []
        try:
            first = socket.socket()
            first.bind(("127.0.0.1", 0))
            probes.append(first)
            base = first.getsockname()[1]
            for i in range(1, n):
                s = socket.socket()
                probes.append(s)
                s.bind(("127.0.0.1", base + i if consecutive else 0))
            return [s.getsockname()[1] for s in probes]
        except OSError:
            continue
        finally:
            for s in probes:
                s.close()


@pytest.fixture(scope="module")
def busy_port():
    """A loopback tcp port held open (listening) for the module's tests."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()


def help_entries(text: str) -> dict[str, str]:
    """argparse help -> {first flag: its help text on one line ("" if it has none)}."""
    entries: dict[str, str] = {}
    flag = None
    for line in text.splitlines():
        if re.match(r"^  -", line):
            invocation, _, help_text = line.strip().partition("  ")
            flag = invocation.split()[0].rstrip(",")
            entries[flag] = help_text.strip()
        elif flag and line.startswith("      "):
            entries[flag] = (entries[flag] + " " + line.strip()).strip()
        else:
            flag = None
    return entries


def until_listening(port: int, within_s: float = 60) -> None:
    """Until something accepts tcp connections on loopback `port` (bounded)."""
    import time

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listened on {port} within {within_s:g} s")


def moto_server(log=subprocess.DEVNULL):
    """`python -m moto.server` (an S3 API server) on a free loopback port, answering: (port, process).
    The caller ends it (end_with_the_test)."""
    import time

    pytest.importorskip(
        "moto.server", reason="the S3 API server of the tests: pip install 'moto[server]'"
    )
    (port,) = free_ports(1)
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    end_with_the_test(server)  # ended with its scope also when it never answered
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return port, server
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, (
                "moto's server did not start"
            )
            time.sleep(0.1)


def wait_for_schedule(run_json_glob: str, within_s: float = 60) -> int:
    """t0 (CLOCK_MONOTONIC ns) once a run.json matching `run_json_glob` has it (the workers have the
    start): polled on the run's own progress, bounded."""
    import time

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for path in glob.glob(run_json_glob, recursive=True):
            try:
                with open(path) as f:
                    t0 = (json.load(f).get("schedule") or {}).get("t0_ns")
            except (OSError, ValueError):
                continue
            if t0:
                return int(t0)
        time.sleep(0.05)
    raise AssertionError("the run never started")


def scrape(port: int) -> dict[str, dict[tuple, float]]:
    """A --metrics endpoint's samples on loopback, read by prometheus-client's own parser: name ->
    {sorted label items: value}."""
    import urllib.request
    from collections import defaultdict

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    out: dict[str, dict[tuple, float]] = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
    return out


def by(samples: dict[tuple, float], label: str) -> dict[str, float]:
    """One series' samples by one of their labels."""
    return {dict(key)[label]: value for key, value in samples.items()}
