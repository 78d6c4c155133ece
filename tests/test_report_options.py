"""The report's option table (zmqload/contract/report_options.py) and the parser built from it;
what `run --help` shows of each option's range. No Spark: every test here is quick."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re

import pytest

from zmqload import cli
from zmqload.analysis import session
from zmqload.cli import report as report_cli
from zmqload.cli.common import OneLineParser
from zmqload.contract import report_options as ro
from zmqload.contract.report_options import REPORT_OPTIONS, ReportOptions
from zmqload.contract.workload import OPTIONS
from zmqload.errors import ConfigError
from conftest import help_entries

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _parser() -> OneLineParser:
    parser = OneLineParser(prog="zmqload report")
    report_cli.add_arguments(parser)
    return parser


def _refused(argv: list[str], capsys) -> str:
    """The one line a bad command line gets (exit status 2)."""
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("zmqload report: error: "), err
    return err[0]


def _help(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.build_parser().parse_args([*argv, "--help"])
    return out.getvalue()


def test_every_report_option_is_one_table_entry_and_one_argument():
    args = _parser().parse_args(["runs"])
    table_dests = set(REPORT_OPTIONS)
    assert set(vars(args)) == table_dests | {"paths"}
    for name, opt in REPORT_OPTIONS.items():
        assert opt.flag == "--" + name.replace("_", "-") and opt.help and opt.accepts, name
        assert getattr(args, name) == opt.default, name  # the table's default, unparsed
    assert ReportOptions(["runs"]) == ReportOptions(
        paths=["runs"], **{n: getattr(args, n) for n in REPORT_OPTIONS}
    )


def test_report_help_shows_every_option_with_what_it_accepts(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    entries = help_entries(_help(["report"]))
    for opt in REPORT_OPTIONS.values():
        assert opt.help in entries[opt.flag], opt.flag
        if not getattr(opt, "switch", False):
            assert (opt.accepted or ", ".join(opt.choice_list)) in entries[opt.flag], opt.flag
    assert "default 20.0" in entries["--master-timeout"] and "default auto" in entries["--reorder"]


def test_values_parse_as_the_table_says():
    args = _parser().parse_args(
        [
            "a",
            "b",
            "--window-ms",
            "20",
            "--target-rate",
            "1.5M",
            "--master",
            "local[2]",
            "--driver-memory",
            " 2g",
            "--slo-p99-us",
            "500",
            "--reorder",
            "off",
            "--memory-budget",
            "64MiB",
            "--master-timeout",
            "3",
        ]
    )
    assert args.paths == ["a", "b"] and args.window_ms == 20.0 and args.target_rate == 1_500_000
    assert (args.master, args.driver_memory, args.slo_p99_us, args.reorder) == (
        "local[2]",
        "2g",
        500.0,
        "off",
    )
    assert (args.memory_budget, args.master_timeout) == ("64MiB", 3.0)


def test_a_switch_takes_no_value_so_a_path_after_it_stays_a_path():
    args = _parser().parse_args(["--strict", "runs", "more", "--timings", "--no-server", "--debug"])
    assert (
        args.paths == ["runs", "more"]
        and args.strict
        and args.timings
        and args.no_server
        and args.debug
    )


@pytest.mark.parametrize(
    "option, value, accepted",
    [
        ("--window-ms", "0", "milliseconds > 0"),
        ("--slo-p99-us", "-5", "microseconds > 0"),
        ("--target-rate", "fast", "messages per second from 1"),
        ("--master-timeout", "0", "seconds > 0"),
        ("--master", "foo", ro.MASTERS_ACCEPTED),
        ("--remote", "http://h:15002", ro.REMOTES_ACCEPTED),
        ("--driver-memory", "1024", "at least 512m"),
        ("--driver-memory", "100m", "at least 512m"),
        ("--reorder", "sometimes", "auto, on, off"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_option(capsys, option, value, accepted):
    line = _refused(["runs", option, value], capsys)
    assert (
        line.startswith(f"zmqload report: error: {option}: got ")
        and "; accepted: " in line
        and accepted in line
    )


def test_no_path_is_one_line(capsys):
    assert report_cli.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["zmqload report: error: the following arguments are required: PATH"]


@pytest.mark.parametrize(
    "text",
    [
        "local",
        "local[2]",
        "local[*]",
        "local[2,3]",
        "local-cluster[2,1,1024]",
        "spark://h:7077",
        "spark://a:1,b:2",
        "yarn",
        "k8s://https://h:6443",
        "foo",
        "spark://",
        "local[0]",
        "k8s://",
        "mesos://h:5050",
    ],
)
def test_the_master_rule_is_the_sessions(text):
    """The table's rule and analysis.session's check (what get_spark asks of a master given in
    Python) accept and refuse alike, with the same line."""
    assert _outcome(ro.spark_master, text) == _outcome(session.check_master, text)


@pytest.mark.parametrize(
    "text", ["512m", "4g", " 2G ", "1t", "524288k", "511m", "1024", "lots", "0g", "2 g"]
)
def test_the_heap_rule_is_the_sessions(text):
    assert _outcome(ro.jvm_heap_size, text) == _outcome(session.check_driver_memory, text)


def _outcome(check, text):
    """What a rule says of `text`: the value it accepts, or its one-line refusal."""
    try:
        return check(text)
    except ConfigError as e:
        return str(e)


def test_defaults_stated_once_agree_with_where_they_are_used():
    assert ro.DEFAULT_DRIVER_MEMORY == session.DEFAULT_DRIVER_MEMORY
    assert ro.heap_mib("2g") == 2048 and ro.heap_mib("512m") == 512


def test_report_doc_lists_exactly_the_table_flags():
    with open(os.path.join(ROOT, "docs", "REPORT.md")) as f:
        text = f.read()
    table = re.search(
        r"^## Options\n.*?^\| option \| default \| meaning \|\n\|---\|---\|---\|\n((?:\|[^\n]*\n)+)",
        text,
        re.M | re.S,
    )
    assert table, "docs/REPORT.md has no options table"
    listed = [re.match(r"\| `(--[a-z0-9-]+)", row).group(1) for row in table.group(1).splitlines()]
    assert sorted(listed) == sorted(opt.flag for opt in REPORT_OPTIONS.values())


def test_sweep_and_capacity_report_after_them_parse_through_the_table():
    """`sweep --report` / `capacity --report` build the report's arguments with the same parser."""
    from zmqload.cli.report_after import report_module

    parser = OneLineParser(prog="zmqload report")
    report_module().add_arguments(parser)
    args = parser.parse_args(["runs/x", "--out", "rep"])
    assert isinstance(args, argparse.Namespace) and args.paths == ["runs/x"] and args.out == "rep"


# -- run --help: every range --------------------------------------------------------------------

RANGED = ("size", "producers", "consumers", "sndhwm", "rcvhwm", "proxy_sndhwm", "proxy_rcvhwm")


def test_run_help_shows_the_range_of_every_numeric_option(monkeypatch):
    """`zmqload run --help` (and docs/OPTIONS.md) shows every range and default. The range is the option's
    "accepted" text, the one its errors give."""
    monkeypatch.setenv("COLUMNS", "1000")
    entries = help_entries(_help(["run"]))
    for name in RANGED:
        opt = OPTIONS[name]
        assert opt.accepted in entries[opt.flag], (opt.flag, entries[opt.flag])
    assert "bytes from 16" in entries["--size"] and "to 268435456" in entries["--size"]
    assert "from 1 to 64" in entries["--producers"] and "from 1 to 64" in entries["--consumers"]
    assert "from 0 (no limit) to 2147483647" in entries["--sndhwm"]
    assert "default 64" in entries["--size"] and "default 1" in entries["--producers"]
    for opt in OPTIONS.values():  # and every other option with a range or choices
        if opt.cli and opt.kind is not bool:
            assert opt.accepts in entries[opt.flag], opt.flag
