"""A signal in any phase of a run leaves a final record.

Each test starts a real `python -m zmqload run` (or sweep, capacity), waits until the phase it
means has begun, by what can be seen from outside where there is something (the first warm-up
message reaching a device of the test's, the schedule's t0 in run.json) and otherwise by the
tests' pause (ZMQLOAD_TEST_PAUSE_IN=PHASE: the run prints `zmqload: test pause in PHASE` and waits
there for a signal; runner/signals.py), sends SIGTERM or SIGINT, and checks: the exit status, the
final run.json (never `running`), every Parquet file read with pyarrow, no hidden half-written
file, no worker process left, and the time from the signal to the exit under STOP_BOUND_S.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pyarrow.parquet as pq
import pytest

import conftest
from conftest import free_ports, moto_server, read_meta

STOP_BOUND_S = 10.0
"""Signal to exit, any phase (measured 0.1-4 s on the shared 2-core machine: docs/RELIABILITY.md)."""
START_BOUND_S = 60.0
"""How long a run may take to reach the phase a test waits for (a loaded machine)."""
INPROC = ("--transport", "inproc")
"""Workers as threads of the controller (a run starts in half the time): for the phases after the
workers, where processes or threads make no difference to what is tested."""


class Run:
    """A zmqload command in its own process, its stderr read as it comes."""

    def __init__(
        self,
        args: list[str],
        pause: str | None = None,
        env: dict[str, str] | None = None,
        session: bool = False,
    ):
        env = dict(os.environ if env is None else env)
        env.pop("ZMQLOAD_TEST_PAUSE_IN", None)
        if pause is not None:
            env["ZMQLOAD_TEST_PAUSE_IN"] = pause
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "zmqload", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=session,
        )
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.signalled_at = 0.0

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def wait_for_line(self, text: str) -> None:
        deadline = time.monotonic() + START_BOUND_S
        with self.changed:
            while not any(text in line for line in self.lines):
                assert self.proc.poll() is None, f"ended before {text!r}: {self.stderr}"
                assert time.monotonic() < deadline, (
                    f"no {text!r} within {START_BOUND_S} s: {self.stderr}"
                )
                self.changed.wait(0.1)

    def wait_for_pause(self, phase: str) -> None:
        self.wait_for_line(f"zmqload: test pause in {phase}")

    def signal(self, sig: int, group: bool = False) -> None:
        """`group`: to the whole process group, as `timeout`, a terminal or a service manager sends it."""
        self.signalled_at = time.monotonic()
        if group:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)

    def ended(self) -> tuple[int, float]:
        """(exit status, seconds from the last signal to the exit)."""
        try:
            code = self.proc.wait(timeout=START_BOUND_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"still running {START_BOUND_S} s after the signal: {self.stderr}")
        took = time.monotonic() - self.signalled_at
        self.reader.join(5)
        return code, took


def run_args(out, *options: str) -> list[str]:
    return ["run", "--quiet", "--out", str(out), *options]


def the_run_dir(out) -> str:
    (run_dir,) = glob.glob(os.path.join(str(out), "**", "run=*"), recursive=True)
    return run_dir


def wait_for_schedule(out) -> int:
    """t0 once run.json has it: the workers have the start."""
    return conftest.wait_for_schedule(
        os.path.join(str(out), "**", "run=*", "run.json"), START_BOUND_S
    )


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def final_record(run_dir: str, status: str, took: float, figures: bool = True) -> dict:
    """run.json final with `status`, figures or none, every Parquet file readable with pyarrow,
    nothing half written, no worker left, in time."""
    print(f"signal to exit: {took:.2f} s, run.json {status}")  # shown by pytest -rP
    assert took < STOP_BOUND_S, took
    meta = read_meta(run_dir)
    assert meta["status"] == status, meta["status"]
    assert meta["finished_at"]
    assert (meta["counters"] is not None) == figures, meta["counters"]
    if not figures:
        assert "figures" in meta["error"], meta["error"]
    for path in glob.glob(os.path.join(run_dir, "**", "*.parquet"), recursive=True):
        pq.read_table(path)
    assert not glob.glob(os.path.join(run_dir, "**", ".*.tmp"), recursive=True)
    assert not os.path.exists(os.path.join(run_dir, ".run.json.reserve"))
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in meta["worker_pids"].values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in meta["worker_pids"].values()), meta["worker_pids"]
    return meta


def one_line(stderr: str, *said: str) -> None:
    """One line on stderr (the tests' pause line aside) saying `said`."""
    assert "Traceback" not in stderr, stderr
    lines = [
        line
        for line in stderr.strip().splitlines()
        if not line.startswith("zmqload: test pause in ")
    ]
    assert len(lines) == 1, stderr
    assert all(s in stderr for s in said), stderr


# -- the phases of the workers -------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_warm_up(tmp_path, sig):
    """Both sides connect to a device of the test's that takes what the producer sends and forwards
    nothing: its first warm-up message says the run is in its warm-up (which would wait 15 s)."""
    import zmq

    front, back = free_ports(2)
    context = zmq.Context()
    device = context.socket(zmq.PULL)
    device.bind(f"tcp://127.0.0.1:{front}")
    try:
        run = Run(
            run_args(
                tmp_path,
                "--count",
                "1000",
                "--producers-connect",
                f"tcp://127.0.0.1:{front}",
                "--consumers-connect",
                f"tcp://127.0.0.1:{back}",
            )
        )
        assert device.poll(START_BOUND_S * 1000), run.stderr
        run.signal(sig)
        code, took = run.ended()
    finally:
        device.close(0)
        context.term()
    assert code == 130, run.stderr
    one_line(run.stderr, "interrupted", "run.json status: interrupted")
    meta = final_record(the_run_dir(tmp_path), "interrupted", took)
    assert not (meta["schedule"] or {}).get("t0_ns")  # it never started
    assert meta["counters"]["sent"] == 0


def test_loop_sigterm_to_the_process_group(tmp_path):
    """The group's SIGTERM (as `timeout` sends it) reaches the workers too: they ignore it and are
    stopped by their controller, so their records are whole (no worker died, nothing unknown).
    SIGINT and SIGTERM to the controller alone in the loop: tests/test_cli.py."""
    run = Run(run_args(tmp_path, "--rate", "5k", "--duration", "30"), session=True)
    t0_ns = wait_for_schedule(tmp_path)
    time.sleep(
        max(0.0, (t0_ns + 500_000_000 - time.monotonic_ns()) / 1e9)
    )  # half a second of the schedule
    run.signal(signal.SIGTERM, group=True)
    code, took = run.ended()
    assert code == 130, run.stderr
    one_line(run.stderr, "run.json status: interrupted")
    meta = final_record(the_run_dir(tmp_path), "interrupted", took)
    assert meta["counters"]["sent"] > 1000
    assert not (meta["salvaged"] or {}).get("died") and meta["counters"]["unknown"] == 0
    recvs = pq.ParquetDataset(
        glob.glob(os.path.join(the_run_dir(tmp_path), "recvs", "*.parquet"))
    ).read()
    assert recvs.num_rows == meta["counters"]["received"]


@pytest.mark.parametrize(
    "phase,sig",
    [("drain", signal.SIGTERM), ("collect", signal.SIGINT)],
    ids=["drain-SIGTERM", "collect-SIGINT"],
)
def test_drain_and_collect(tmp_path, phase, sig):
    run = Run(run_args(tmp_path, "--count", "2000", "--rate", "20k"), pause=phase)
    run.wait_for_pause(phase)
    run.signal(sig)
    code, took = run.ended()
    assert code == 130, run.stderr
    meta = final_record(the_run_dir(tmp_path), "interrupted", took)
    assert meta["counters"]["sent"] == 2000
    sends = pq.ParquetDataset(
        glob.glob(os.path.join(the_run_dir(tmp_path), "sends", "*.parquet"))
    ).read()
    assert sends.num_rows == 2000


# -- after the workers: the figures, run.json, the copy ----------------------------------------------


def test_reconcile_of_a_consumer_only_run_sigterm(tmp_path):
    """The report's case: `--role consumer` stopped by SIGTERM while its figures were computed
    ended with run.json `running`; now `interrupted`, without figures, exit 130."""
    (port,) = free_ports(1)
    run = Run(
        run_args(
            tmp_path,
            "--role",
            "consumer",
            "--consumers-bind",
            f"tcp://127.0.0.1:{port}",
            "--duration",
            "0.5",
        ),
        pause="reconcile",
        session=True,
    )
    run.wait_for_pause("reconcile")
    run.signal(signal.SIGTERM, group=True)
    code, took = run.ended()
    assert code == 130, run.stderr
    one_line(run.stderr, "run.json status: interrupted")
    final_record(the_run_dir(tmp_path), "interrupted", took, figures=False)


def test_reconcile_sigint(tmp_path):
    run = Run(run_args(tmp_path, "--count", "2000", "--rate", "20k", *INPROC), pause="reconcile")
    run.wait_for_pause("reconcile")
    run.signal(signal.SIGINT)
    code, took = run.ended()
    assert code == 130, run.stderr
    meta = final_record(the_run_dir(tmp_path), "interrupted", took, figures=False)
    assert meta["drain"]["completed"]  # the run itself had ended
    sends = pq.ParquetDataset(
        glob.glob(os.path.join(the_run_dir(tmp_path), "sends", "*.parquet"))
    ).read()
    recvs = pq.ParquetDataset(
        glob.glob(os.path.join(the_run_dir(tmp_path), "recvs", "*.parquet"))
    ).read()
    assert sends.num_rows == recvs.num_rows == 2000  # the records are whole


def test_a_second_signal_while_the_workers_stop(tmp_path):
    """SIGTERM in the loop, then Ctrl-C while the workers are being stopped: the stopping finishes
    (bounded), the figures are skipped, run.json says `interrupted` at once."""
    run = Run(run_args(tmp_path, "--rate", "5k", "--duration", "30"), pause="stopping")
    wait_for_schedule(tmp_path)
    run.signal(signal.SIGTERM)
    run.wait_for_pause("stopping")
    run.signal(signal.SIGINT)
    code, took = run.ended()
    assert code == 130, run.stderr
    one_line(run.stderr, "run.json status: interrupted")
    final_record(the_run_dir(tmp_path), "interrupted", took, figures=False)


def test_a_second_signal_while_the_figures_of_an_interrupted_run_are_computed(tmp_path):
    run = Run(run_args(tmp_path, "--rate", "5k", "--duration", "30"), pause="reconcile")
    wait_for_schedule(tmp_path)
    run.signal(signal.SIGINT)
    run.wait_for_pause("reconcile")
    run.signal(signal.SIGTERM)
    code, took = run.ended()
    assert code == 130, run.stderr
    final_record(the_run_dir(tmp_path), "interrupted", took, figures=False)


@pytest.fixture
def s3_port():
    """`python -m moto.server` on a free loopback port (as tests/test_out_uri.py starts it)."""
    port, server = moto_server()
    yield port
    server.terminate()
    server.wait(timeout=10)


def test_the_copy_to_a_uri(tmp_path, s3_port):
    """SIGTERM while the records are copied to an --out URI: the copy stops, the staging copy is
    kept and named, its run.json keeps the run's status (complete) and says why it is there; the
    bucket holds no run.json (a copy cut short never reads as a run)."""
    import test_out_uri as s3

    bucket = ("runs", s3_port)
    s3.filesystem(s3_port).create_dir("runs")
    run = Run(
        ["run", "--quiet", "--count", "2000", "--rate", "20k", *INPROC, "--out", s3.uri(bucket)],
        pause="copy",
        env=s3.user_env(tmp_path),
    )
    run.wait_for_pause("copy")
    run.signal(signal.SIGTERM)
    code, took = run.ended()
    assert code == 130, run.stderr
    (kept,) = glob.glob(str(tmp_path / "tmp" / "zmqload-out-*" / "run=*"))
    one_line(run.stderr, f"records are complete in {kept}", "run.json status: complete")
    meta = final_record(kept, "complete", took)
    assert any("copy to" in w and "interrupted" in w for w in meta["warnings"])
    assert meta["counters"]["received"] == 2000
    for path in s3.uploaded_runs(bucket):
        assert "run.json" not in s3.run_entries(s3_port, path)


# -- sweeps and capacity searches: the run inside them ---------------------------------------------


def test_sweep_sigterm_in_a_run_s_figures(tmp_path):
    run = Run(
        [
            "sweep",
            "--quiet",
            "--count",
            "1000",
            "--rate",
            "10k",
            "--size",
            "64,128",
            *INPROC,
            "--out",
            str(tmp_path),
        ],
        pause="reconcile",
    )
    run.wait_for_pause("reconcile")
    run.signal(signal.SIGTERM)
    code, took = run.ended()
    assert code == 130, run.stderr
    final_record(the_run_dir(tmp_path), "interrupted", took, figures=False)
    (path,) = glob.glob(str(tmp_path / "sweep-*.json"))
    with open(path) as f:
        sweep = json.load(f)
    assert sweep["status"] == "interrupted"
    assert [p["status"] for p in sweep["points"]] == ["interrupted", "not run"]


def test_capacity_sigterm_in_a_probe_s_figures(tmp_path):
    run = Run(
        [
            "capacity",
            "--quiet",
            "--probe-duration",
            "0.3",
            "--start-rate",
            "1k",
            *INPROC,
            "--out",
            str(tmp_path),
        ],
        pause="reconcile",
    )
    run.wait_for_pause("reconcile")
    run.signal(signal.SIGTERM)
    code, took = run.ended()
    assert code == 130, run.stderr
    final_record(the_run_dir(tmp_path), "interrupted", took, figures=False)
    with open(tmp_path / "capacity-search.json") as f:
        assert json.load(f)["status"] == "interrupted"


# -- the rule itself, in this process ------------------------------------------------------------


def test_raised_held_and_pending():
    """runner/signals.py without a signal sent: its handler called as the interpreter would."""
    from zmqload.runner.signals import RunSignals

    sigs = RunSignals()
    with pytest.raises(KeyboardInterrupt):  # outside any section: raised
        sigs.handler(signal.SIGTERM, None)
    with sigs.mode(raised=False):  # held: counted, pending
        sigs.handler(signal.SIGINT, None)
        sigs.handler(signal.SIGTERM, None)
    assert (sigs.count, sigs.pending) == (3, 2)
    with pytest.raises(KeyboardInterrupt):  # a raised section begins with what is pending
        with sigs.mode(raised=False):
            with sigs.mode(raised=True):
                pytest.fail("not reached")
    assert sigs.pending == 0 and sigs.modes == []
    with pytest.raises(KeyboardInterrupt):  # a write inside a raised phase: raised once written
        with sigs.mode(raised=True):
            with sigs.mode(raised=False, then_raise=True):
                sigs.handler(signal.SIGTERM, None)
                written = True
    assert written and sigs.pending == 0
    with sigs.mode(raised=False):
        with sigs.mode(raised=False, then_raise=True):  # held around it: stays pending
            sigs.handler(signal.SIGTERM, None)
        assert sigs.take() and not sigs.take()
