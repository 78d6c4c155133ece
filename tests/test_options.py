"""The option table (zmqload.contract.workload.OPTIONS) as every surface meets it: the Python API, the
argument parsers built from it, sweeps, and the option reference generated from it (docs/OPTIONS.md)."""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import re

import numpy as np
import pytest

from zmqload import OPTIONS, RunResult, Workload, cli
from zmqload.contract.workload import SLO_OPTIONS
from zmqload.contract import patterns
from zmqload.plan import sweep as sweeps
from zmqload.errors import ConfigError
from zmqload.measure.histogram import Histogram
from conftest import children, help_entries

OPTIONS_PAGE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "OPTIONS.md"
)


def test_workload_takes_the_text_the_command_line_takes():
    w = Workload(
        rate="10k", count="1M", duration="2.5", size="1.1k", immediate="true", linger_ms="-1"
    )
    assert (w.rate, w.count, w.duration, w.size, w.immediate, w.linger_ms) == (
        10_000,
        1_000_000,
        2.5,
        1100,
        True,
        -1,
    )
    assert Workload(rate="max").rate == Workload(rate=0).rate == 0
    assert Workload(warmup="off").warmup is False


@pytest.mark.parametrize(
    "values, option",
    [
        (dict(pattern="pubsub", size=8), "--pattern"),  # the first field is named first
        (dict(size=8), "--size"),
        (dict(size=64.0), "--size"),
        (dict(size="abc"), "--size"),
        (dict(rate="fast"), "--rate"),
        (dict(rate=-1), "--rate"),
        (dict(duration=0), "--duration"),
        (dict(duration=float("nan")), "--duration"),
        (dict(immediate="maybe"), "--immediate"),
        (dict(linger_ms=-2), "--linger"),
        (dict(host="a b"), "--host"),
        (dict(endpoint="http://x"), "--endpoint"),
        (dict(endpoint="tcp://127.0.0.1:99999"), "--endpoint"),
        (dict(port=65535, consumers=2), "--port"),
        (dict(run_name="a/b"), "--run-name"),
        (dict(chunk_rows=10), "--chunk-rows"),
        (dict(count=10**12, rate=1000), "--count"),
        # the patterns' own rules (Pattern.check)
        (dict(pattern="pair", producers=2), "--producers"),
        (dict(pattern="pair", consumers=3), "--consumers"),
        (dict(pattern="proxy", endpoint="tcp://127.0.0.1:5555"), "--endpoint"),
        (dict(pattern="req-rep", send_mode="dontwait"), "--send-mode"),
        (dict(pattern="push-pull", join_delay_ms=100), "--join-delay-ms"),
    ],
)
def test_bad_values_are_refused_on_construction_naming_the_option(values, option):
    with pytest.raises(ConfigError) as info:
        Workload(**values)
    assert info.value.option == option
    assert re.match(r"got .+; accepted: .+", info.value.message), info.value.message
    assert "\n" not in str(info.value)


def test_pattern_error_lists_every_registered_pattern():
    with pytest.raises(ConfigError) as info:
        Workload(pattern="pubsub")
    assert info.value.message.endswith("accepted: " + ", ".join(patterns.PATTERNS))
    assert {"proxy", "req-rep"} <= set(patterns.PATTERNS)


def test_construction_and_validate_do_no_io_and_preflight_probes_the_port(busy_port):
    from zmqload.runner.preflight import preflight

    w = Workload(port=busy_port)  # what a worker process does: no probe
    assert Workload.from_dict(w.to_dict()).port == busy_port
    w.validate()  # the values only
    with pytest.raises(ConfigError, match="in use") as info:
        preflight(w)
    assert info.value.option == "--port"


def test_validate_rechecks_fields_set_after_construction_and_fills_defaults():
    w = Workload(endpoint="ipc:///tmp/zmqload-x")
    assert w.count is None and w.transport == "tcp"
    w.validate()
    assert w.count == 100_000 and w.transport == "ipc"
    w.size = 8
    with pytest.raises(ConfigError, match="--size"):
        w.validate()


def test_messages_per_producer_of_a_paced_workload_before_validate():
    # neither count nor duration yet: the bound without a schedule end, not a TypeError
    assert Workload(rate=1000).messages_per_producer == Workload().messages_per_producer
    assert Workload(rate=1000, duration=2).messages_per_producer == 2000


def test_every_option_has_a_flag_help_and_what_it_accepts():
    for name, opt in OPTIONS.items():
        assert opt.field == name and opt.flag.startswith("--"), name
        assert opt.help and opt.accepts, name
    assert OPTIONS["linger_ms"].flag == "--linger"
    assert "label" not in OPTIONS


def _help_of(parser, command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parser.parse_args([command, "--help"])
    return out.getvalue()


def test_run_help_shows_every_option_with_its_help(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapped help text
    entries = help_entries(_help_of(cli.build_parser(), "run"))
    for opt in OPTIONS.values():
        assert (opt.flag in entries) == opt.cli, opt.flag
        if opt.cli:
            assert opt.help in entries[opt.flag], entries[opt.flag]
    assert "unpaced" in entries["--rate"] and "--warmup false" in entries["--no-warmup"]
    assert {"-h", "--json", "--quiet"} <= set(entries)
    assert all(entries.values()), [flag for flag, text in entries.items() if not text]


def test_run_and_sweep_parse_values_alike():
    parser = cli.build_parser()
    run = parser.parse_args(
        ["run", "--rate", "10k", "--linger=-1", "--immediate", "--no-warmup", "--count", "1M"]
    )
    assert (run.rate, run.linger_ms, run.immediate, run.warmup, run.count) == (
        10_000,
        -1,
        True,
        False,
        1_000_000,
    )
    assert (
        parser.parse_args(["run", "--rate", "0"]).rate
        == parser.parse_args(["run", "--rate", "max"]).rate
        == 0
    )
    sweep = parser.parse_args(
        ["sweep", "--rate", "10k,max", "--immediate", "true,false", "--no-warmup"]
    )
    assert (sweep.rate, sweep.immediate, sweep.warmup) == ([10_000, 0], [True, False], [False])
    assert sweep.given == ["rate", "immediate", "warmup"]


def test_sweeps_take_every_table_option_but_the_ones_they_set(tmp_path):
    assert set(sweeps.options()) == set(OPTIONS) - {"out", "run_name"}
    spec = sweeps.SweepSpec(fixed={"count": "2k"}, axes={"rate": ["10k", 10_000]})
    with pytest.raises(ConfigError, match="--rate: got 10000 twice"):
        sweeps.plan(spec)
    spec = sweeps.SweepSpec(
        fixed={"size": 64, "count": "2k"}, points=[{"size": "1k"}, {}], out=str(tmp_path), name="t"
    )
    assert [(p.workload.size, p.workload.count) for p in sweeps.plan(spec).points] == [
        (1000, 2000),
        (64, 2000),
    ]


def test_options_page_is_what_the_option_tables_generate():
    """docs/OPTIONS.md is generated (`make docs`) from the parsers `--help` prints, whose options come
    from the option tables: a changed option, help text or default without `make docs` fails here."""
    from zmqload.cli import options_doc

    with open(OPTIONS_PAGE, encoding="utf-8") as f:
        written = f.read()
    generated = options_doc.page()
    if written != generated:
        diff = difflib.unified_diff(
            written.splitlines(),
            generated.splitlines(),
            "docs/OPTIONS.md",
            "generated",
            lineterm="",
            n=0,
        )
        pytest.fail(
            "docs/OPTIONS.md differs from what the option tables generate: run `make docs`\n"
            + "\n".join(list(diff)[:40]),
            pytrace=False,
        )


def test_options_page_lists_every_run_flag_once_and_every_option_with_help():
    from zmqload.cli import options_doc

    page = options_doc.page()
    run = page.split("\n## `zmqload run`\n", 1)[1].split("\n## ", 1)[0]
    listed = [
        flag
        for cell in re.findall(r"^\| ([^|]*) \|", run, re.M)
        for flag in re.findall(r"`(--[a-z0-9-]+)`", cell)
    ]
    assert len(listed) == len(set(listed)), "a flag is listed twice"
    expected = {opt.flag for opt in OPTIONS.values() if opt.cli}
    expected |= {opt.negation for opt in OPTIONS.values() if opt.cli and opt.negation}
    assert set(listed) == expected | {"--json", "--quiet"} | {
        opt.flag for opt in SLO_OPTIONS.values()
    }
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert rows and all(not line.rstrip().endswith("|  |") for line in rows), [
        line for line in rows if line.rstrip().endswith("|  |")
    ]  # every option of every command has help
    pattern_row = next(line for line in run.splitlines() if line.startswith("| `--pattern` |"))
    assert set(re.findall(r"[a-z]+(?:-[a-z]+)?", pattern_row.split(" | ")[1])) >= set(
        patterns.PATTERNS
    )


def test_latency_us_takes_a_percent_not_a_fraction():
    hist = Histogram()
    hist.record(np.arange(1_000, 101_000, 1_000, dtype=np.int64))  # 1..100 us
    result = RunResult("r", "runs/run=r", "complete", {}, latency_intended=hist)
    assert result.latency_us(100) == 100.0 and 98 <= result.latency_us(99) <= 100
    with pytest.raises(ValueError, match="did you mean 99"):
        result.latency_us(0.99)
    for q in (0, -1, 100.5, 1000):
        with pytest.raises(ValueError, match="from 1 to 100"):
            result.latency_us(q)


# Every option that takes a rate, as (command line before the flag, flag, argparse dest, what
# the parsed value holds: a sweep axis is a list). One parser (config.rate_option) for all.
RATE_OPTIONS = [
    (["run"], "--rate", "rate", lambda v: v),
    (["sweep"], "--rate", "rate", lambda v: v[0]),
    (["capacity"], "--start-rate", "start_rate", lambda v: v),
    (["report", "runs"], "--target-rate", "target_rate", lambda v: v),
]
RATE_SPELLINGS = [
    ("200k", 200_000),
    ("200K", 200_000),
    ("1.5M", 1_500_000),
    ("1.5m", 1_500_000),
    ("250000", 250_000),
    ("250_000", 250_000),
    ("1e5", 100_000),
    ("2.5k", 2_500),
]
RATE_COMMON = "a whole number, k/M suffixes allowed (e.g. 50000, 10k, 1.5M)"


@pytest.mark.parametrize(
    "before, flag, dest, value_of", RATE_OPTIONS, ids=lambda x: x if isinstance(x, str) else None
)
@pytest.mark.parametrize("text, value", RATE_SPELLINGS)
def test_every_rate_option_takes_the_same_spellings(before, flag, dest, value_of, text, value):
    args = cli.build_parser().parse_args([*before, flag, text])
    got = value_of(getattr(args, dest))
    assert got == value and isinstance(got, int)


def test_sweep_files_and_the_api_take_rate_spellings_too():
    assert sweeps.parse_value("rate", "200k") == Workload(rate="200k").rate == 200_000
    from zmqload.contract.workload import SearchPlan

    assert SearchPlan(start_rate="1.5M").start_rate == 1_500_000


@pytest.mark.parametrize(
    "before, flag, dest, value_of", RATE_OPTIONS, ids=lambda x: x if isinstance(x, str) else None
)
@pytest.mark.parametrize("text", ["2x", "fast", "-5", "0.5", "1.0001k", "k", "1e12"])
def test_every_rate_option_refuses_alike_in_one_line_with_exit_2(
    before, flag, dest, value_of, text, capsys
):
    """In this process, through the CLI's own entry (`python -m zmqload` is sys.exit(cli.main()); that a
    real process exits 2 in one line without a traceback is test_cli.py's): nothing on stdout, no process."""
    started = children()
    try:
        status = cli.main([*before, f"{flag}={text}"])
    except SystemExit as exc:  # argparse's refusals exit as a process would
        status = exc.code
    captured = capsys.readouterr()
    assert status == 2, captured.err
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    command = before[0]
    # an out-of-range number is quoted as parsed (got -5), text that is no number as given
    assert re.match(
        rf"zmqload {command}: error: {flag}: got ('{re.escape(text)}'|-?[0-9.e+]+); "
        r"accepted: messages per second",
        lines[0],
    ), lines[0]
    assert RATE_COMMON in lines[0]
    assert children() <= started, "a refused command started a process"


@pytest.mark.parametrize(
    "before, flag, accepted",
    [
        (["run"], "--rate", True),
        (["sweep"], "--rate", True),
        (["capacity"], "--start-rate", False),
        (["report", "runs"], "--target-rate", False),
    ],
)
def test_zero_and_max_mean_unpaced_only_where_a_run_can_be_unpaced(before, flag, accepted):
    parser = cli.build_parser()
    for text in ("0", "max"):
        if accepted:
            assert parser.parse_args([*before, flag, text]) is not None
        else:
            with (
                pytest.raises(SystemExit) as info,
                contextlib.redirect_stderr(io.StringIO()) as err,
            ):
                parser.parse_args([*before, flag, text])
            assert info.value.code == 2
            assert (
                f"{flag}: got" in err.getvalue()
                and "accepted: messages per second" in err.getvalue()
            )
