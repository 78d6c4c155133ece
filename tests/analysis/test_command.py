"""`zmqload report` end to end on synthetic runs, and every kind of bad input: one line, exit 2."""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from zmqload.analysis import javacheck
from zmqload.analysis.verdicts import parse_bytes
from zmqload.contract import run_record as rr
from zmqload.store import record_files
from zmqload.contract.states import RunStatus
from zmqload.cli import report as command  # the report's command line (add_arguments, run)

from .synth import make_run


def parse(argv):
    p = argparse.ArgumentParser()
    command.add_arguments(p)
    return p.parse_args(argv)


def one_line_error(capsys, rc):
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith("zmqload report: error: "), err
    assert "Traceback" not in err[0]
    return err[0]


def test_missing_directory(tmp_path, capsys):
    assert "no such directory" in one_line_error(
        capsys, command.run(parse([str(tmp_path / "nope")]))
    )


def test_not_a_run(tmp_path, capsys):
    (tmp_path / "x.txt").write_text("hi")
    assert "not a zmqload run" in one_line_error(capsys, command.run(parse([str(tmp_path)])))


def test_unknown_schema_version(tmp_path, capsys):
    r = make_run(str(tmp_path), "v9", streams=1, count=100, schema_version=9)
    assert "unknown record schema version 9" in one_line_error(capsys, command.run(parse([r.path])))


def test_empty_run(tmp_path, capsys):
    d = tmp_path / "run=empty"
    d.mkdir()
    record_files.write_run(str(d), rr.RunRecord(run_id="empty", status=RunStatus.COMPLETE))
    assert "no send or receive records" in one_line_error(capsys, command.run(parse([str(d)])))


def test_bad_memory_budget(tmp_path, capsys):
    r = make_run(str(tmp_path), "ok", streams=1, count=100)
    assert "--memory-budget" in one_line_error(
        capsys, command.run(parse([r.path, "--memory-budget", "lots"]))
    )


def test_java_missing_or_old_is_one_line(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(javacheck.shutil, "which", lambda _: None)
    with pytest.raises(
        javacheck.ReportInputError,
        match="install a Java 17\\+ runtime: sudo apt-get install openjdk-17",
    ):
        javacheck.check_java()
    old = tmp_path / "java"
    old.write_text("#!/bin/sh\necho 'java version \"1.8.0_292\"' >&2\n")
    old.chmod(0o755)
    monkeypatch.setattr(javacheck.shutil, "which", lambda _: str(old))
    with pytest.raises(javacheck.ReportInputError, match="is Java 8, Spark needs 17\\+"):
        javacheck.check_java()
    assert javacheck.parse_java_version('openjdk version "17.0.15" 2025-04-15') == 17
    assert javacheck.parse_java_version('openjdk version "21" 2023-09-19') == 21


def test_parse_bytes():
    assert (
        parse_bytes("64MiB") == 64 * 2**20
        and parse_bytes("1GiB") == 2**30
        and parse_bytes("500MB") == 5 * 10**8
    )
    with pytest.raises(ValueError):
        parse_bytes("12 parsecs")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    runs = []
    for i, (rate, hwm, mid) in enumerate(
        [(20_000, 100, 0), (50_000, 100, 30), (20_000, 1000, 0), (50_000, 1000, 0)]
    ):
        runs.append(
            make_run(
                str(root),
                f"s{i}",
                streams=1,
                count=3000,
                rate=rate,
                sndhwm=hwm,
                rcvhwm=hwm,
                lost_middle=mid,
                seed=10 + i,
            )
        )
    runs.append(
        make_run(
            str(root), "cut", streams=1, count=1000, rate=20_000, run_status="interrupted", seed=20
        )
    )
    return root, runs


def test_report_on_a_sweep_writes_every_output(spark, sweep, tmp_path, capsys):
    root, runs = sweep
    out = tmp_path / "report"
    rc = command.run(
        parse([str(root), "--out", str(out), "--memory-budget", "64MiB", "--window-ms", "20"])
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "run cut was interrupted" in captured.err and "Traceback" not in captured.err
    assert captured.out.startswith("# zmqload report") and "| s1 |" in captured.out
    page = (out / "index.html").read_text()
    assert page.count("data:image/png;base64,") >= 3 * 5 + 1 and "interrupted" in page
    assert "<script" not in page and "http" not in page.replace("http-equiv", "")
    table = pq.read_table(out / "summary.parquet").to_pylist()
    totals = {r["run"]: r for r in table if r["stream"] == -1 and r["consumer"] == -1}
    assert set(totals) == {"s0", "s1", "s2", "s3", "cut"}
    assert (
        totals["s1"]["lost"] == 30
        and totals["s1"]["dropped_mid"] == 30
        and totals["s0"]["lost"] == 0
    )
    assert totals["cut"]["interrupted"] is True
    for r in runs:
        assert totals[r.run_id]["received"] == len(r.recvs["seq"])
    with open(out / "summary.csv") as f:
        assert len(list(csv.DictReader(f))) == len(table)
    # SNDHWM=1000 is clean at 50k/s, SNDHWM=100 loses: the verdicts say so.
    assert "sndhwm=100, rcvhwm=100: clean up to 20.0k/s, fails at 50.0k/s: loss" in captured.out
    assert (
        "To carry 50.0k/s within 64.0 MiB: sndhwm=1000, rcvhwm=1000 (clean at 50.0k/s"
        in captured.out
    )


def test_module_entry_point_bad_input_exit_2(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "zmqload.report", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "no such directory" in p.stderr
    )


def test_script_entry_point_as_spark_submit_runs_it(tmp_path):
    """spark-submit runs the file, not the module: it must import zmqload by itself, and its
    own directory (which has an html module) must not shadow the standard library."""
    import zmqload.report

    script = os.path.join(os.path.dirname(zmqload.report.__file__), "__main__.py")
    p = subprocess.run(
        [sys.executable, script, str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
    )
    assert p.returncode == 2 and "no such directory" in p.stderr
    r = make_run(str(tmp_path), "file", streams=1, count=500, lost_tail=4)
    p = subprocess.run(
        [sys.executable, script, r.path, "--out", str(tmp_path / "out"), "--master", "local[1]"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
    )
    assert p.returncode == 0, p.stderr[-1500:]
    rows = pq.read_table(tmp_path / "out" / "summary.parquet").to_pylist()
    assert [(x["lost"], x["dropped_tail"]) for x in rows if x["stream"] == -1] == [(4, 4)]


@pytest.mark.parametrize(
    "option, value", [("--window-ms", "0"), ("--slo-p99-us", "-5"), ("--target-rate", "fast")]
)
def test_bad_option_value_is_one_line_exit_2(tmp_path, option, value):
    p = subprocess.run(
        [sys.executable, "-m", "zmqload.report", str(tmp_path), option, value],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert (
        p.stderr.startswith(f"zmqload report: error: {option}: got ") and "accepted: " in p.stderr
    )


@pytest.mark.slow  # a Spark report: 19 s at load average 7
def test_two_paths_get_a_comparison_section(spark, tmp_path, capsys):
    """Two directories of runs (written from numpy, the candidate's latency x1.5): the page holds
    `zmqload compare`'s table and verdicts."""
    import numpy as np

    from tests.test_compare import synthetic_run

    rng = np.random.default_rng(3)
    for i in range(2):
        synthetic_run(str(tmp_path / "base"), f"b{i}", rng)
        synthetic_run(str(tmp_path / "cand"), f"c{i}", rng, scale=1.5)
    out = tmp_path / "report"
    paths = [str(tmp_path / "base"), str(tmp_path / "cand")]
    rc = command.run(parse([*paths, "--out", str(out)]))
    assert rc == 0, capsys.readouterr().err
    page = (out / "index.html").read_text()
    section = page[page.index("<h2>Comparison</h2>") :]
    assert f"Candidate {paths[1]} (2 run(s)) against base {paths[0]} (2 run(s))" in section
    assert "<td class='l'>p50 (µs)</td><td>" in section
    p50 = section[section.index("p50 (µs)") : section.index("p99 (µs)")]
    assert "<b>higher</b>" in p50 and "+5" in p50  # +50 %
    throughput = section[section.index("throughput (msg/s)") : section.index("p50 (µs)")]
    assert "no difference" in throughput
    assert "changed: p50 higher (+" in section
