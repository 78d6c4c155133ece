"""What `zmqload report` prints is short: no line over 120 columns, at most 20 runs in its table,
the answers and where the rest is; every table is in summary.md under --out (a real report, on
synthetic runs with known figures)."""

from __future__ import annotations

import argparse

import pytest

from zmqload.analysis.summary_row import SummaryRow
from zmqload.cli import report as command
from zmqload.report import markdown

from .synth import make_run

pytestmark = pytest.mark.slow  # a Spark report

LONG_ID = "20261126-101500-ab12-021-pub-sub_sndhwm1000_rcvhwm1000_size1024_rate100k_consumer_delay_us40_linger-1"


@pytest.fixture(scope="module")
def many_runs(tmp_path_factory):
    """22 runs (more than the terminal's table shows), one with a sweep's long run name."""
    root = tmp_path_factory.mktemp("many")
    runs = [
        make_run(
            str(root),
            f"r{i:02d}",
            streams=1,
            count=300,
            rate=10_000 * (1 + i % 4),
            sndhwm=100 if i % 2 else 1000,
            rcvhwm=100 if i % 2 else 1000,
            lost_middle=3 * (i % 3),
            seed=100 + i,
        )
        for i in range(21)
    ]
    runs.append(
        make_run(str(root), LONG_ID, streams=1, count=300, rate=20_000, lost_tail=2, seed=99)
    )
    return root, runs


def test_the_terminal_gets_a_short_summary_and_summary_md_every_table(
    spark, many_runs, tmp_path, capsys
):
    root, runs = many_runs
    out = tmp_path / "report"
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    rc = command.run(parser.parse_args([str(root), "--out", str(out)]))
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    lines = captured.out.splitlines()
    assert max(len(line) for line in lines) <= markdown.WIDTH, max(lines, key=len)
    assert lines[0] == "# zmqload report"
    # the runs table: the first 20, narrow; the long id cut at the front, its distinctive end kept
    rows = [ln for ln in lines if ln.startswith("| ") and not ln.startswith("| run |")]
    assert len(rows) == markdown.RUNS_SHOWN
    assert "## Runs (22)" in lines and "(and 2 more: summary.md)" in lines
    assert "| r00 | complete |" in captured.out
    # where the page and the tables are
    assert f"Report: {out / 'index.html'}" in lines
    assert f"Tables: {out / 'summary.md'}" in captured.out
    # the verdicts, wrapped, whole
    verdicts = captured.out.split("## Capacity verdicts", 1)[1]
    assert "Grouped by:" in verdicts and "sndhwm" in verdicts
    # summary.md: every run, every column, as wide as it is
    md = (out / "summary.md").read_text()
    assert md.startswith("# zmqload report")
    head = next(ln for ln in md.splitlines() if ln.startswith("| run | status | group |"))
    assert len(head) > markdown.WIDTH and "dropped | stranded | sender drops" in head
    for r in runs:
        assert f"| {r.run_id} | " in md
    assert (out / "index.html").exists() and (out / "summary.parquet").exists()


def test_a_long_run_name_is_cut_at_the_front():
    rows = [
        SummaryRow.of(
            {
                "run": LONG_ID,
                "status": "complete (partial)",
                "recv_rate": 123456.0,
                "loss_ratio": 0.0123,
                "latency_intended_p99_us": 123456789.0,
                "offered_rate": 5e6,
                "consumers": 64,
                "fanout": True,
            }
        )
    ]
    (line,) = markdown.runs_table(rows)[2:]
    assert len(line) <= markdown.WIDTH and line.startswith(f"| {markdown.ELLIPSIS}")
    assert LONG_ID[-20:] in line
    assert markdown.runs_table([SummaryRow(run="short", status="complete")])[2].startswith(
        "| short | complete |"
    )


def test_prose_wraps_at_the_width_and_keeps_paths_whole():
    path = "/very/long/" + "x" * 130
    text = markdown.wrap("- " + "word " * 60 + path)
    lines = text.splitlines()
    assert all(len(ln) <= markdown.WIDTH for ln in lines[:-1]) and lines[-1].strip() == path
    assert all(ln.startswith("  ") for ln in lines[1:])
