"""`zmqload compare BASE CANDIDATE`: two runs, or two groups of runs, figure by figure, a change
told from the runs' own spread (zmqload/measure/compare.py; docs/COMPARE.md); `--fail-if` exits 3
naming what regressed."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from ..contract.comparison import FAIL_IF, FAIL_IF_ACCEPTED, parse_fail_if
from ..errors import ConfigError, ExitStatus

if TYPE_CHECKING:
    from rich.console import Console

    from ..measure.compare import Comparison

NAME = "compare"
HELP = "compare two runs or two groups of runs: which figures changed beyond their spread"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..measure.compare import SINGLE_RUN_CHANGE
    from ..measure.run_figures import WINDOWS

    parser.description = (
        "Compare a candidate with a base: two run directories, two directories of repeated runs, "
        "or one directory split in two by a setting (--by). Throughput, lost and each fate, "
        "p50/p99/p99.9 latency, queue peak and peak RSS side by side; a difference is called a "
        "change only when the runs' own spread (their windows, and repeated runs) cannot explain "
        "it (docs/COMPARE.md)."
    )
    parser.add_argument("base", metavar="BASE", help="a run directory or a directory of runs")
    parser.add_argument(
        "candidate",
        metavar="CANDIDATE",
        nargs="?",
        help="a run directory or a directory of runs (left out with --by)",
    )
    parser.add_argument(
        "--by",
        metavar="SETTING",
        help="split BASE's runs in two by this run option (e.g. rcvhwm, libzmq): the first run's "
        "value is the base",
    )
    parser.add_argument(
        FAIL_IF,
        metavar="LIMITS",
        type=_limits,
        default=None,
        # argparse formats help with %
        help=f"exit 3 when a figure changed (beyond its spread) by more than this; "
        f"{FAIL_IF_ACCEPTED}".replace("%", "%%"),
    )
    parser.add_argument(
        "--windows",
        metavar="N",
        type=_windows,
        default=WINDOWS,
        help="windows each run is cut into for its spread (2 to 1000)",
    )
    parser.add_argument(
        "--single-run-change",
        metavar="PERCENT",
        type=_percent,
        default=SINGLE_RUN_CHANGE * 100,
        help="smallest change called one when a side has a single run, whose windows cannot "
        "show how much runs differ from one another (a percent from 0 to 1000)",
    )
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")


def _limits(text: str) -> object:
    try:
        return parse_fail_if(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _percent(text: str) -> float:
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"got {text!r}; accepted: a percent from 0 to 1000")
    return value


def _windows(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 2 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"got {text!r}; accepted: an integer from 2 to 1000")
    return value


def run(args: argparse.Namespace) -> ExitStatus:
    from ..measure.compare import Group, compare, load_runs, split_by

    if (args.by is None) == (args.candidate is None):
        raise ConfigError(
            "CANDIDATE", "accepted: BASE CANDIDATE, or one directory BASE with --by SETTING"
        )
    if args.by is not None:
        base, candidate = split_by(load_runs(args.base, "BASE", args.windows), args.by)
    else:
        base = Group(args.base, load_runs(args.base, "BASE", args.windows))
        candidate = Group(args.candidate, load_runs(args.candidate, "CANDIDATE", args.windows))
    result = compare(base, candidate, args.fail_if or (), args.single_run_change / 100)
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        from rich.console import Console

        print_comparison(result, Console())
    if result.regressed:
        print(f"zmqload compare: regressed: {'; '.join(result.regressed)}", file=sys.stderr)
        return ExitStatus.SLO_VIOLATED
    return ExitStatus.OK


def print_comparison(result: Comparison, console: Console) -> None:
    """The table, then one line of what changed (or that nothing did) and what regressed."""
    from rich.table import Table

    from ..measure.compare import COLUMNS

    console.print(f"base: {result.base} ({_runs(result.base_runs)})")
    console.print(f"candidate: {result.candidate} ({_runs(result.candidate_runs)})")
    table = Table(show_header=True, header_style="bold")
    for title in COLUMNS:
        left = title in ("figure", "verdict")
        table.add_column(title, justify="left" if left else "right", no_wrap=True)
    for row in result.rows:
        table.add_row(*row.cells())
    console.print(table)
    console.print(result.said())
    if len(result.base_runs) == 1 or len(result.candidate_runs) == 1:
        console.print(
            "one run a side: the spread is each run's own windows, and a change must be over "
            "--single-run-change; repeated runs tell more (docs/COMPARE.md)"
        )
    for line in result.regressed:
        console.print(f"REGRESSED {line}")


def _runs(ids: list[str]) -> str:
    return f"{len(ids)} run" + ("s" if len(ids) != 1 else "")
