"""What `sweep` and `capacity` say before their first run: how much they will keep (runner.run's
kept_bytes over the runs, or the probes a search is expected to make; a service's search:
tests/test_service_report.py), within 2x of what the runs hold; a warning when the disk holds
less. A `run` expected to need more than the disk holds is refused."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from zmqload.cli import capacity as capacity_cli
from zmqload.cli import common
from zmqload.cli import sweep as sweep_cli
from zmqload.contract.workload import UNPACED_RATE_GUESS, SearchPlan, Workload
from zmqload.plan import sweep as sweeps
from zmqload.plan.capacity_search import Probe, find_max_rate
from zmqload.runner.run import expected_bytes, kept_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRITES = re.compile(r"writing up to about ([\d,.]+) MB to (\S+)")


def _cli(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=ROOT, COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "zmqload", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def _megabytes(line: str) -> float:
    match = WRITES.search(line)
    assert match, line
    return float(match.group(1).replace(",", ""))


def _kept(path: str) -> int:
    """The bytes of every file under `path`: what a run or search kept."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def _within_2x(said: float, kept: float) -> bool:
    return 0.5 <= kept / said <= 2.0


@pytest.mark.slow  # several runs: out of make test-fast, in make test
def test_the_sweep_says_what_it_writes_before_its_first_run(tmp_path):
    """A paced and an unpaced run of 20,000 messages: the line before the first run says what
    they keep, within 2x of the bytes their directories hold, and so does each point's figure."""
    out = str(tmp_path / "runs")
    p = _cli(
        "sweep",
        "--pattern",
        "push-pull",
        "--rate",
        "40k,max",
        "--count",
        "20000",
        "--out",
        out,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("2 runs, about ") and "writing up to about" in lines[0], lines
    assert (
        lines.index(next(ln for ln in lines if ln.startswith("[1/2]"))) > 0
    )  # after the line, not before
    assert WRITES.search(lines[0]).group(2) == out
    kept = _kept(out)
    assert _within_2x(_megabytes(lines[0]) * 1e6, kept), (lines[0], kept)
    spec = sweeps.SweepSpec(
        fixed={"pattern": "push-pull", "count": 20000}, axes={"rate": [40_000, 0]}, out=out
    )
    runs = sorted(d for d in os.listdir(out) if d.startswith("run="))
    for point, run in zip(sweeps.plan(spec).points, runs):
        said = sweep_cli.run_bytes(point.workload)[0]
        assert _within_2x(said, _kept(os.path.join(out, run))), (run, said)


def test_a_dry_run_says_it_too_and_counts_unbounded_runs_at_the_guess():
    p = _cli("sweep", "--rate", "10k,max", "--duration", "2", "--dry-run", timeout=120)
    assert p.returncode == 0, p.stderr
    first = p.stdout.splitlines()[0]
    assert (
        "writing up to about" in first
        and f"1 unpaced --duration run counted at {UNPACED_RATE_GUESS:,}" in first
    )
    guessed = kept_bytes(Workload(rate=UNPACED_RATE_GUESS, duration=2).validate())
    paced = kept_bytes(Workload(rate=10_000, duration=2).validate())
    assert _megabytes(first) == pytest.approx((guessed + paced) / 1e6, rel=0.01)


@pytest.mark.slow  # several runs: out of make test-fast, in make test
def test_the_capacity_search_says_what_it_writes_before_its_first_probe(tmp_path):
    out = str(tmp_path / "cap")
    p = _cli(
        "capacity",
        "--pattern",
        "push-pull",
        "--start-rate",
        "20000",
        "--probe-duration",
        "0.3",
        "--max-probes",
        "2",
        "--out",
        out,
        timeout=300,
    )
    assert p.returncode in (0, 1), p.stderr  # two probes may or may not settle it
    lines = p.stdout.splitlines()
    assert lines[0].startswith(
        "1 search, probes of 0.3 s (at most 2 per search); about 2 probes writing up to about"
    ), lines
    assert any(ln.startswith("search 1/1") for ln in lines[1:]) and not lines[
        0
    ].lstrip().startswith("probe")
    # two probes at 20k and 40k msg/s (the ramp), 0.3 s each: what they kept
    assert _within_2x(_megabytes(lines[0]) * 1e6, _kept(out)), (lines[0], _kept(out))


def test_a_producer_only_run_keeps_its_sends_alone(tmp_path):
    """--role producer against a user's PULL: its rows are sends only (no receive is recorded):
    runner.run's kept_bytes within 2x of what the run kept."""
    from test_one_side import UserPull

    user = UserPull("tcp://127.0.0.1:*").start()
    args = dict(role="producer", producers_connect=user.endpoint, rate=20_000, count=20_000)
    p = _cli(
        "run",
        "--role", "producer", "--producers-connect", user.endpoint, "--rate", "20k",
        "--count", "20000", "--out", str(tmp_path), "--quiet",
        timeout=120,
    )  # fmt: skip
    user.join()
    assert p.returncode == 0, p.stderr
    (run,) = os.listdir(tmp_path)
    said = kept_bytes(Workload(**args).validate())
    assert _within_2x(said, _kept(os.path.join(str(tmp_path), run))), said


def test_the_probes_expected_are_the_searchs_own():
    """The probe count comes from find_max_rate itself, with probes that pass up to the guess."""
    plan = SearchPlan(start_rate=20_000, precision=0.05, probe_duration=1, max_probes=20)
    rates = capacity_cli.expected_probes(plan, 50_000)
    assert (
        rates[:3] == [20_000, 40_000, 80_000] and rates[-1] == rates[-2] <= 50_000 < 80_000
    )  # confirmed
    real = find_max_rate(lambda r: Probe(r, r <= 50_000), plan)
    assert rates == [p.rate for p in real.probes] and len(rates) <= plan.max_probes
    assert len(capacity_cli.expected_probes(SearchPlan(start_rate=1, max_probes=3), 10**9)) == 3


def test_the_guess_is_the_consumers_work_ceiling_or_the_generators():
    assert capacity_cli.likely_capacity(Workload(consumer_delay_us=20)) == (
        50_000,
        "the consumers' work ceiling",
    )
    # round robin shares the work among consumers; fan-out gives each all of it
    assert (
        capacity_cli.likely_capacity(Workload(consumer_delay_us=20, consumers=2, producers=4))[0]
        == 25_000
    )
    assert (
        capacity_cli.likely_capacity(
            Workload(pattern="pub-sub", consumer_delay_us=20, consumers=2, producers=2)
        )[0]
        == 25_000
    )
    assert capacity_cli.likely_capacity(Workload())[0] == UNPACED_RATE_GUESS


def test_a_disk_with_too_little_room_is_one_warning_line(tmp_path, capsys):
    common.disk_warning("zmqload sweep", str(tmp_path / "not" / "yet"), 10**18, "the sweep is")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"zmqload sweep: warning: {tmp_path / 'not' / 'yet'}: "
    )
    assert "the sweep is expected to write about 1,000,000,000,000,000,000" in err[0]
    common.disk_warning("zmqload sweep", str(tmp_path), 1, "the sweep is")
    assert capsys.readouterr().err == ""


def test_megabytes():
    assert common.megabytes(1_008_000_000) == "1,008 MB" and common.megabytes(412_000) == "0.4 MB"
    assert sweep_cli.run_bytes(Workload(rate=0, duration=1).validate())[1] is True
    assert sweep_cli.run_bytes(Workload(count=1000).validate())[1] is False


def test_a_run_that_cannot_fit_is_refused_before_anything_is_made(tmp_path):
    """`run` (issue 30): 10 billion unpaced messages (~490 GB expected at the peak) onto this disk:
    one line naming --out with what is free and what the run would write, exit 2, no directory
    made. The figure is runner.run's expected_bytes: ~12 bytes per push-pull message kept, and
    its 37 raw bytes (9 sent, 28 received), which may all wait beside unpaced loops."""
    out = tmp_path / "not" / "yet"
    done = _cli("run", "--count", "10000000000", "--out", str(out), timeout=60)
    free = int(re.search(r"([\d,]+) bytes free", done.stderr).group(1).replace(",", ""))
    needed = int(re.search(r"write about ([\d,]+)", done.stderr).group(1).replace(",", ""))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("zmqload run: error: --out: ") and "accepted:" in done.stderr
    assert needed == expected_bytes(Workload(count=10_000_000_000).validate()) > free
    assert 4.9e11 < needed < 5e11
    assert not (tmp_path / "not").exists()


def test_a_long_run_says_what_it_writes(tmp_path, capsys):
    from zmqload.cli import run as run_cli

    long_run = Workload(count=100_000_000, out=str(tmp_path)).validate()
    run_cli.say_disk(long_run)
    line = capsys.readouterr().err
    assert line.startswith(
        f"zmqload run: writing about {common.megabytes(kept_bytes(long_run))} to {tmp_path}, "
    )  # what it keeps (12 B a push-pull message), not its peak need (its raw rows waiting too)
    assert "a disk that fills ends the run failed" in line
    run_cli.say_disk(Workload(count=1_000_000, out=str(tmp_path)).validate())
    assert capsys.readouterr().err == ""
