"""Sweeps as a user meets them: real (tiny) runs, bad input rejected before anything runs,
failed runs recorded while the sweep goes on, Ctrl-C, the TOML form, the report hand-off."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
import types

import pytest

from conftest import end_with_the_test, free_ports, read_meta, zmqload_cli
from zmqload import cli
from zmqload.plan import sweep as sweeps
from zmqload.cli import report_after, sweep as sweep_command
from zmqload.errors import ConfigError


def sweep_json(out: str) -> dict:
    files = glob.glob(os.path.join(out, "sweep-*.json"))
    assert len(files) == 1, files
    with open(files[0]) as f:
        return json.load(f)


@pytest.mark.slow  # several runs: out of make test-fast, in make test
def test_2x2_sweep_makes_four_runs_and_a_sweep_json(tmp_path):
    out = str(tmp_path / "runs")
    proc = zmqload_cli(
        "sweep",
        "--pattern",
        "push-pull,pub-sub",
        "--size",
        "64,128",
        "--count",
        "2000",
        "--sndhwm",
        "1000",
        "--out",
        out,
        "--name",
        "t2x2",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("4 runs, about ")
    run_dirs = sorted(glob.glob(os.path.join(out, "run=*")))
    assert [os.path.basename(d) for d in run_dirs] == [
        "run=t2x2-000-push-pull_size64",
        "run=t2x2-001-push-pull_size128",
        "run=t2x2-002-pub-sub_size64",
        "run=t2x2-003-pub-sub_size128",
    ]
    combos = [("push-pull", 64), ("push-pull", 128), ("pub-sub", 64), ("pub-sub", 128)]
    for run_dir, (pattern, size) in zip(run_dirs, combos):
        meta = read_meta(run_dir)
        assert meta["status"] == "complete"
        w = meta["workload"]
        assert (w["pattern"], w["size"], w["count"], w["sndhwm"]) == (pattern, size, 2000, 1000)
        assert w["label"] == {"pattern": pattern, "size": size}
    s = sweep_json(out)
    assert s["sweep_id"] == "t2x2" and s["status"] == "complete"
    assert s["axes"] == {"pattern": ["push-pull", "pub-sub"], "size": [64, 128]}
    assert s["fixed"] == {"count": 2000, "sndhwm": 1000}
    assert [p["status"] for p in s["points"]] == ["complete"] * 4
    assert [p["run_dir"] for p in s["points"]] == run_dirs
    assert [p["values"] for p in s["points"]] == [{"pattern": p, "size": z} for p, z in combos]
    assert all(p["summary"]["sent"] == 2000 for p in s["points"])


@pytest.mark.parametrize(
    "args, option",
    [
        (["--size", "64,8"], "--size"),
        (["--rate", "10k,fast"], "--rate"),
        (["--pattern", "push-pull,star"], "--pattern"),
        (["--size", "64,64"], "--size"),
        (["--count", "1000,"], "--count"),
        (["--immediate", "maybe"], "--immediate"),
        (["--pattern", "pair", "--producers", "1,2"], "--producers"),
        (["--endpoint", "tcp://127.0.0.1:{busy}"], "--endpoint"),
    ],
)
def test_invalid_axis_value_is_one_line_exit_2_before_any_run(args, option, tmp_path, busy_port):
    out = str(tmp_path / "runs")
    args = [a.format(busy=busy_port) for a in args]
    # the bad value comes last, so every earlier point would have been runnable
    proc = zmqload_cli("sweep", "--count", "500", *args, "--out", out)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "accepted" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not os.path.exists(out)


@pytest.mark.slow  # a Spark session or many runs: out of make test-fast, in make test
def test_failed_point_is_recorded_and_the_sweep_goes_on(tmp_path):
    """A point that fails at run time (here: a device in the middle that nobody runs, so its
    warm-up never arrives; a point that cannot bind is refused before anything starts, exit 2)."""
    out = str(tmp_path / "runs")
    front, back = free_ports(2)
    path = tmp_path / "sweep.toml"
    path.write_text(f"""
[sweep]
count = 1000
out = "{out}"
drain_timeout_ms = 200
warmup_timeout_s = 2

[[points]]
producers_connect = "tcp://127.0.0.1:{front}"
consumers_connect = "tcp://127.0.0.1:{back}"

[[points]]
pattern = "push-pull"
""")
    proc = zmqload_cli("sweep", "--config", str(path))
    assert proc.returncode == 1, proc.stderr
    s = sweep_json(out)
    assert s["status"] == "complete"
    first, second = s["points"]
    assert first["status"] == "failed" and "nobody answered" in first["error"]
    assert read_meta(first["run_dir"])["status"] == "failed"
    assert second["status"] == "complete" and read_meta(second["run_dir"])["status"] == "complete"
    assert "1 complete, 1 failed" in proc.stdout


SWEEP_TOML = """
[sweep]
count = 1000
out = "{out}"
name = "toml"

[axes]
pattern = ["push-pull", "pub-sub"]
rate = ["100k", "max"]

[[points]]
pattern = "pub-sub"
rcvhwm = 10
"""


@pytest.mark.slow  # several runs: out of make test-fast, in make test
def test_toml_sweep_with_explicit_points(tmp_path):
    out = str(tmp_path / "runs")
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP_TOML.format(out=out))
    spec = sweeps.load_toml(str(path))
    sweep = sweeps.plan(spec)
    assert sweep.varying == ["pattern", "rate", "rcvhwm"]
    assert [p.values for p in sweep.points] == [
        {"pattern": "push-pull", "rate": 100_000, "rcvhwm": None},
        {"pattern": "push-pull", "rate": 0, "rcvhwm": None},
        {"pattern": "pub-sub", "rate": 100_000, "rcvhwm": None},
        {"pattern": "pub-sub", "rate": 0, "rcvhwm": None},
        {"pattern": "pub-sub", "rate": 0, "rcvhwm": 10},
    ]
    assert not os.path.exists(out)  # planning creates nothing
    sweeps.execute(sweep)
    assert sweep_json(out)["status"] == "complete"
    metas = [read_meta(p.run_dir) for p in sweep.points]
    assert [m["status"] for m in metas] == ["complete"] * 5
    explicit = metas[-1]["workload"]
    assert (explicit["pattern"], explicit["rcvhwm"], explicit["rate"], explicit["count"]) == (
        "pub-sub",
        10,
        0,
        1000,
    )
    assert explicit["label"] == {"pattern": "pub-sub", "rate": 0, "rcvhwm": 10}
    assert (
        os.path.basename(sweep.points[0].run_dir) == "run=toml-000-push-pull_rate100k_rcvhwmdefault"
    )


@pytest.mark.parametrize(
    "text, words",
    [
        ("[axes]\nsizes = [64]\n", ["'sizes'", "accepted", "size"]),
        ("[sweep]\nrepeat = 3\n", ["'repeat'", "accepted", "out"]),
        ("[foo]\n", ["'foo'", "[axes]"]),
        ('[sweep]\nrate = "fast"\n', ["--rate", "fast", "accepted"]),
        ("[axes]\nsize = []\n", ["--size", "empty"]),
        ("[[points]]\nsize = 8\n", ["--size", "[[points]] #1", "accepted"]),
        ("[axes\n", ["--config", "TOML"]),
    ],
)
def test_bad_toml_names_the_key_and_what_is_accepted(tmp_path, text, words):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        sweeps.plan(sweeps.load_toml(str(path)))
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_command_line_replaces_the_files_entries(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text(
        '[sweep]\nsize = 128\nout = "x"\n[axes]\nrate = ["10k", "max"]\nsndhwm = [1, 10]\n'
    )
    parser = cli.build_parser()
    args = parser.parse_args(
        [
            "sweep",
            "--config",
            str(path),
            "--rate",
            "1M",
            "--size",
            "64,256",
            "--linger=-1,0",
            "--no-warmup",
            "--out",
            "y",
        ]
    )
    spec = sweep_command.build_spec(args)
    assert spec.fixed == {"rate": 1_000_000, "warmup": False}
    assert spec.axes == {"sndhwm": [1, 10], "size": [64, 256], "linger_ms": [-1, 0]}
    assert spec.out == "y"


def test_run_names_are_readable_safe_and_short():
    name = sweeps.run_name(
        "20261122-101010-abcd",
        7,
        3,
        {
            "pattern": "pub-sub",
            "rate": 0,
            "sndhwm": 10_000,
            "immediate": False,
            "endpoint": "tcp://127.0.0.1:5555",
            "consumer_delay_us": 2.5,
            "io_threads": 1,
            "linger_ms": -1,
            "send_mode": "dontwait",
            "close_order": "consumer-first",
            "drain_timeout_ms": 1000,
        },
    )
    assert name.startswith(
        "20261122-101010-abcd-007-pub-sub_ratemax_sndhwm10k_noimmediate_endpointtcp-127.0.0.1-5555"
    )
    assert len(name) <= 100
    assert all(c.isalnum() or c in "_.-" for c in name)


def test_estimate_uses_durations_and_rates(tmp_path):
    spec = sweeps.SweepSpec(fixed={"duration": 5}, axes={"rate": [1000, 0]}, out=str(tmp_path))
    sweep = sweeps.plan(spec)
    total, unknown = sweep.estimate()
    assert unknown == 0 and total == pytest.approx(10 + 2 * sweeps.RUN_OVERHEAD_S)
    assert sweep_command.estimate_line(sweep).startswith("2 runs, about 12 s")
    spec = sweeps.SweepSpec(fixed={"count": 1000}, axes={"rate": [100, 0]}, out=str(tmp_path))
    assert sweeps.plan(spec).estimate() == (pytest.approx(10 + 2 * sweeps.RUN_OVERHEAD_S), 1)


def test_interrupt_stops_the_sweep_and_records_it(tmp_path):
    out = str(tmp_path / "runs")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zmqload",
            "sweep",
            "--size",
            "64,128,256",
            "--rate",
            "5k",
            "--duration",
            "60",
            "--out",
            out,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    end_with_the_test(proc)  # not left running 3 x 60 s if the test fails before the signal
    deadline = time.monotonic() + 30
    while not glob.glob(os.path.join(out, "run=*", "run.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # into the first run
    proc.send_signal(signal.SIGINT)
    stopped = time.monotonic()
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert time.monotonic() - stopped < 5
    assert "interrupted" in stderr and len(stderr.strip().splitlines()) == 1
    s = sweep_json(out)
    assert s["status"] == "interrupted"
    assert [p["status"] for p in s["points"]] == ["interrupted", "not run", "not run"]
    assert read_meta(s["points"][0]["run_dir"])["status"] == "interrupted"
    assert len(glob.glob(os.path.join(out, "run=*"))) == 1


def test_report_missing_is_one_line_exit_2_before_any_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(report_after, "REPORT_MODULE", "zmqload.no_such_report_module")
    out = str(tmp_path / "runs")
    assert cli.main(["sweep", "--count", "500", "--out", out, "--report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--report" in err[0]
    assert not os.path.exists(out)


def test_report_gets_the_sweeps_out_dir(tmp_path, monkeypatch):
    calls = []
    fake = types.ModuleType("fake_report_command")
    fake.add_arguments = lambda parser: (
        parser.add_argument("paths", nargs="+"),
        parser.add_argument("--out", default="report"),
    )
    fake.run = lambda args: calls.append(args) or 0
    monkeypatch.setitem(sys.modules, "fake_report_command", fake)
    monkeypatch.setattr(report_after, "REPORT_MODULE", "fake_report_command")
    out, report = str(tmp_path / "runs"), str(tmp_path / "report")
    assert (
        cli.main(
            ["sweep", "--count", "500", "--out", out, "--report", "--report-out", report, "--quiet"]
        )
        == 0
    )
    assert len(calls) == 1 and calls[0].paths == [out] and calls[0].out == report
    assert sweep_json(out)["counts"]["complete"] == 1


def test_restarts_joined_by_plus_stay_in_one_point_and_a_comma_makes_an_axis(tmp_path, capsys):
    from conftest import in_process

    out = str(tmp_path / "runs")
    argv = ["sweep", "--restart", "c0@0.5+c1@1.5,c0@1", "--consumers", "2", "--duration", "2"]
    r = in_process(capsys, *argv, "--out", out, "--dry-run")
    assert r.returncode == 0, r.stderr
    points = [line.split()[-1] for line in r.stdout.splitlines()[1:]]
    assert [p.split("-", 4)[-1] for p in points] == ["restartc0-0.5-c1-1.5", "restartc0-1"], points
    assert not os.path.exists(out)
