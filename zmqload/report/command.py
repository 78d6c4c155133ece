"""`zmqload report PATH... --out DIR`: Spark analysis of run directories into an HTML report.

Bad input (missing directory, not a run, unknown schema version, nothing recorded, no
usable Java, the `report` extra not installed, a bad option value) is one line on stderr and
exit status 2; runs that can be
reported but deserve a caveat (interrupted, failed, empty among others) are warnings.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from typing import TYPE_CHECKING, Sequence

from ..cli.common import OneLineParser, guarded
from ..cli.options import help_text, option_type
from ..config import Option
from ..errors import ConfigError, ExitStatus, ReportInputError, RunError, ZmqloadError

if TYPE_CHECKING:
    from ..analysis.runs import RunInfo

PROG = "zmqload report"
NEEDS = ("pyspark", "matplotlib")        # the `report` extra of pyproject.toml

TARGET_RATE = Option(float, "messages per second > 0 (e.g. 200000, 200k, 1M), as --rate of run",
                     "msgs/s the recommendation must carry", low=0, low_open=True, flag="--target-rate",
                     default_text="the highest clean rate seen")
SLO_P99_US = Option(float, "microseconds > 0", "latency SLO for capacity planning: p99 from intended send, "
                    "microseconds", low=0, low_open=True, flag="--slo-p99-us", default=1000.0)
WINDOW_MS = Option(float, "milliseconds > 0", "time window for rates and queue depth", low=0, low_open=True,
                   flag="--window-ms", default=100.0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="run directories, or directories holding run=*/ directories (a sweep)")
    parser.add_argument("--out", default="report", help="output directory (default: report)")
    parser.add_argument("--master", default=None,
                        help="Spark master URL, e.g. spark://host:7077 (default: embedded local[*])")
    for opt in (SLO_P99_US, TARGET_RATE, WINDOW_MS):
        parser.add_argument(opt.flag, type=option_type(opt), default=opt.default, help=help_text(opt))
    parser.add_argument("--memory-budget", default=None,
                        help="memory budget for queued messages when recommending HWM, e.g. 64MiB, 1GiB")
    parser.add_argument("--reorder", choices=("auto", "on", "off"), default="auto",
                        help="count reordered messages: needs a sort of every record per stream; auto = on up to "
                             "20M receive records (default auto)")
    parser.add_argument("--driver-memory", default=None, help="Spark driver memory for the embedded session (default 4g)")
    parser.add_argument("--timings", action="store_true", help="print the wall time of each Spark step on stderr")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for unexpected errors")


def check_installed() -> None:
    """ReportInputError naming the extra when what the report needs is not installed."""
    missing = [name for name in NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        raise ReportInputError(f"the report needs {' and '.join(missing)}, not installed here; "
                               "install it with: pip install 'zmqload[report]'")


def _warn(msg: str) -> None:
    print(f"{PROG}: warning: {msg}", file=sys.stderr)


def run(args: argparse.Namespace) -> ExitStatus:
    """The report; bad input is one line and exit status 2 (zmqload.errors)."""
    return guarded(PROG, _run, args)


def _run(args: argparse.Namespace) -> ExitStatus:
    check_installed()
    from ..analysis.capacity import parse_bytes
    from ..analysis.runs import discover_runs

    budget = None
    if args.memory_budget:
        try:
            budget = parse_bytes(args.memory_budget)
        except ValueError:
            raise ConfigError("--memory-budget", f"got {args.memory_budget!r}; accepted: bytes, e.g. 64MiB, "
                                                 "1GiB, 500MB") from None
    runs, warnings = discover_runs(args.paths)
    if not runs:
        for w in warnings:
            _warn(w)
        raise ReportInputError("no usable runs in " + " ".join(args.paths))
    if all(not r.parts.get("recvs") and not r.parts.get("sends") for r in runs):
        for w in warnings:
            if "is empty" not in w:
                _warn(w)
        raise ReportInputError("nothing to report: " + ("the run has" if len(runs) == 1 else "every run has")
                               + " no send or receive records")
    for w in warnings:
        _warn(w)
    try:
        return _report(args, runs, warnings, budget)
    except ZmqloadError:
        raise
    except Exception as e:  # noqa: BLE001 - one line unless --debug
        if args.debug:
            raise
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise RunError(f"{e.__class__.__name__}: {first} (rerun with --debug for details)") from e


def _report(args: argparse.Namespace, runs: list[RunInfo], warnings: list[str], budget: int | None) -> ExitStatus:
    from ..analysis.capacity import capacity_table, recommend
    from ..analysis.pipeline import analyze
    from ..analysis.session import get_spark
    from . import html, markdown, outputs

    t0 = time.perf_counter()
    log = (lambda m: print(f"{PROG}: {m}", file=sys.stderr)) if args.timings else None
    spark = get_spark(args.master, driver_memory=args.driver_memory)
    if log:
        log(f"spark session: {time.perf_counter() - t0:.2f} s")
    analysis = analyze(spark, runs, window_ms=args.window_ms, reorder={"on": True, "off": False}.get(args.reorder, "auto"), log=log)
    run_rows = analysis.run_rows()
    capacity = capacity_table(run_rows, args.slo_p99_us, runs)
    recs = recommend(capacity, budget, args.target_rate, args.slo_p99_us)
    os.makedirs(args.out, exist_ok=True)
    outputs.write_summary(analysis.summary, args.out, capacity, args.slo_p99_us)
    page = html.render(analysis, capacity, recs, warnings, slo_p99_us=args.slo_p99_us, memory_budget=budget)
    tmp = os.path.join(args.out, ".index.html.tmp")
    with open(tmp, "w") as f:
        f.write(page)
    os.replace(tmp, os.path.join(args.out, "index.html"))
    if log:
        log(f"total: {time.perf_counter() - t0:.2f} s")
    print(markdown.summary(analysis, capacity, recs, args.out))
    return ExitStatus.OK


def main(argv: Sequence[str] | None = None) -> ExitStatus:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return ExitStatus(e.code or ExitStatus.OK) if not isinstance(e.code, str) else ExitStatus.BAD_INPUT
    return run(args)
