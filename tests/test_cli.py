"""The command line as a user meets it: bad input, interrupts, info, JSON output."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from conftest import children, end_with_the_test, in_process, read_meta, zmqload_cli


BAD_INPUTS = [
    (["--size", "8"], "--size"),
    (["--size", "0"], "--size"),
    (["--size", "abc"], "--size"),
    (["--count", "0"], "--count"),
    (["--count", "-5"], "--count"),
    (["--duration", "0"], "--duration"),
    (["--duration", "-1"], "--duration"),
    (["--rate", "-10"], "--rate"),
    (["--rate", "fast"], "--rate"),
    (["--producers", "0"], "--producers"),
    (["--consumers", "100"], "--consumers"),
    (["--pattern", "star"], "--pattern"),
    (["--transport", "udp"], "--transport"),
    (["--send-mode", "sometimes"], "--send-mode"),
    (["--sndhwm", "-1"], "--sndhwm"),
    (["--rcvhwm", "x"], "--rcvhwm"),
    (["--linger", "-2"], "--linger"),
    (["--io-threads", "0"], "--io-threads"),
    (["--consumer-delay-us", "-1"], "--consumer-delay-us"),
    (["--endpoint", "tcp://127.0.0.1"], "--endpoint"),
    (["--endpoint", "http://example"], "--endpoint"),
    (["--endpoint", "tcp://127.0.0.1:99999"], "--endpoint"),
    (["--port", "70000"], "--port"),
    (["--out", "/proc/version/runs"], "--out"),
    (["--compression", "rar"], "--compression"),
    (["--pattern", "pair", "--producers", "2"], "--producers"),
]


@pytest.mark.parametrize("args,option", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2(args, option, tmp_path, capsys):
    if "--out" not in args:
        args = [*args, "--out", str(tmp_path)]
    before = children()
    proc = in_process(capsys, "run", *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert option in lines[0] and "Traceback" not in proc.stderr
    assert "accepted" in lines[0] or "invalid choice" in lines[0] or "expected" in lines[0]
    assert not glob.glob(str(tmp_path / "run=*")), "nothing may start on bad input"
    assert children() <= before, "a refused run started a process"


def test_bad_input_in_a_real_process_is_one_line_exit_2(tmp_path):
    """`python -m zmqload` itself: a value the command refuses (zmqload's own check, not argparse's)
    is exit status 2 and one line, no traceback; the other refusals are checked in this process."""
    proc = zmqload_cli("run", "--pattern", "pair", "--producers", "2", "--out", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "--producers" in lines[0] and "Traceback" not in proc.stderr and "accepted" in lines[0]
    assert not glob.glob(str(tmp_path / "run=*")), "nothing may start on bad input"


def test_port_in_use_is_bad_input(busy_port, tmp_path, capsys):
    proc = in_process(
        capsys, "run", "--port", str(busy_port), "--count", "10", "--out", str(tmp_path)
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--port" in proc.stderr and "in use" in proc.stderr


def test_endpoint_in_use_is_bad_input(busy_port, tmp_path, capsys):
    proc = in_process(
        capsys,
        "run",
        "--endpoint",
        f"tcp://127.0.0.1:{busy_port}",
        "--count",
        "10",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "in use" in proc.stderr


@pytest.mark.alone
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_promptly_and_keeps_readable_records(tmp_path, sig):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zmqload",
            "run",
            "--rate",
            "20k",
            "--duration",
            "60",
            "--out",
            str(tmp_path),
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    end_with_the_test(proc)  # not left running 60 s if the test fails before the signal
    deadline = time.monotonic() + 60
    t0_ns = None
    while time.monotonic() < deadline and t0_ns is None:  # wait until the schedule began
        time.sleep(0.1)
        for path in glob.glob(str(tmp_path / "run=*" / "run.json")):
            with contextlib.suppress(ValueError, OSError):
                t0_ns = (read_meta(os.path.dirname(path)).get("schedule") or {}).get("t0_ns")
    assert t0_ns is not None, "the run never started"
    # t0 is CLOCK_MONOTONIC, as time.monotonic_ns(): let 1.5 s of the schedule (30k messages) pass
    while time.monotonic_ns() < t0_ns + 1_500_000_000:
        time.sleep(0.05)
    proc.send_signal(sig)
    sent_at = time.monotonic()
    _, stderr = proc.communicate(timeout=30)
    stopped_in = time.monotonic() - sent_at
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stopped_in < 2.5, stopped_in  # stops within a second or so, records flushed
    run_dir = glob.glob(str(tmp_path / "run=*"))[0]
    meta = read_meta(run_dir)
    assert meta["status"] == "interrupted"
    total = 0
    for kind in ("sends", "recvs", "samples"):
        files = glob.glob(os.path.join(run_dir, kind, "*.parquet"))
        assert files, kind
        for f in files:
            total += pq.read_table(f).num_rows
    assert not glob.glob(os.path.join(run_dir, "*", ".*.tmp"))
    assert meta["counters"]["sent"] > 10_000
    assert total > 0


def test_json_summary_and_info(tmp_path, capsys):
    proc = in_process(capsys, "run", "--count", "5000", "--json", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["sent"] == 5000 and summary["lost"] == 0
    assert summary["latency_intended_ns"]["p99"] > 0
    info = in_process(capsys, "info", "--json")
    assert info.returncode == 0
    facts = json.loads(info.stdout)
    assert facts["versions"]["libzmq"].count(".") == 2
    assert facts["socket_defaults"]["PUSH"]["SNDHWM"] > 0
    assert facts["socket_defaults"]["PUSH"]["LINGER"] in (-1, 0, 30000)


def test_mistyped_option_names_the_command_and_the_closest_option(capsys):
    # the first in a real process (`python -m zmqload`: argparse's refusal is exit status 2, one line)
    proc = zmqload_cli("run", "--szie", "64")
    assert proc.returncode == 2
    assert proc.stderr == "zmqload run: error: unrecognized option --szie; did you mean --size?\n"
    proc = in_process(capsys, "sweep", "--sndhmw=1,10")
    assert proc.returncode == 2
    assert (
        proc.stderr
        == "zmqload sweep: error: unrecognized option --sndhmw; did you mean --sndhwm?\n"
    )


def test_a_command_without_its_action_shows_its_usage(capsys):
    for args, usage in ((["scenario"], "usage: zmqload scenario"), ([], "usage: zmqload ")):
        proc = in_process(capsys, *args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(usage) and "Traceback" not in proc.stderr
        assert (
            proc.stderr.strip()
            .splitlines()[-1]
            .endswith(
                "error: missing command; accepted: "
                + (
                    "list, run"
                    if args
                    else "run, info, sweep, capacity, scenario, report, compare, repair"
                )
            )
        )


def test_info_fits_80_columns_and_version():
    proc = subprocess.run(
        [sys.executable, "-m", "zmqload", "info"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, COLUMNS="80"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "SNDHWM" in proc.stdout and "PUSH" in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80


def test_version(capsys):
    import zmqload

    version = in_process(capsys, "--version")
    assert version.returncode == 0 and version.stdout == f"zmqload {zmqload.__version__}\n"


def test_report_target_rate_takes_what_run_rate_takes(capsys):
    from zmqload import cli

    parser = cli.build_parser()
    assert parser.parse_args(["report", "runs", "--target-rate", "200k"]).target_rate == 200_000
    assert parser.parse_args(["run", "--rate", "200k"]).rate == 200_000
    proc = in_process(capsys, "report", "runs", "--target-rate", "fast")
    assert proc.returncode == 2
    assert proc.stderr.startswith("zmqload report: error: --target-rate: got 'fast'; accepted: ")


# Python that runs with pyspark and matplotlib made unimportable, as without the extra.
WITHOUT_REPORT_EXTRA = "import sys; sys.modules['pyspark'] = sys.modules['matplotlib'] = None; "


def test_report_without_its_extra_is_listed_and_names_the_extra(tmp_path):
    code = WITHOUT_REPORT_EXTRA + "from zmqload.cli import main; sys.exit(main(sys.argv[1:]))"
    listed = subprocess.run(
        [sys.executable, "-c", code, "--help"], capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0 and re.search(r"^\s+report\s", listed.stdout, re.M), listed.stdout
    proc = subprocess.run(
        [sys.executable, "-c", code, "report", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(
        "zmqload report: error: the report needs "
    )
    assert proc.stderr.rstrip().endswith("install it with: pip install 'zmqload[report]'")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "sweep",
            "--count",
            "10",
            "--report",
            "--out",
            str(tmp_path / "runs"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--report" in proc.stderr and "zmqload[report]" in proc.stderr
    assert not os.path.exists(tmp_path / "runs")


def test_run_api_plugin_and_cli_never_import_the_report_extra(tmp_path):
    code = (
        WITHOUT_REPORT_EXTRA
        + f"""
import zmqload, zmqload.pytest_plugin
from zmqload import cli
result = zmqload.run(count=1000, out={str(tmp_path)!r})
assert result.status == "complete", result
cli.build_parser()
sys.exit(cli.main(["run", "--count", "1000", "--quiet", "--out", {str(tmp_path)!r}]))
"""
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(glob.glob(str(tmp_path / "run=*"))) == 2
