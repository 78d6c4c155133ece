"""`zmqload report PATH... --out DIR`: Spark analysis of run directories into an HTML report.

Bad input (missing directory, not a run, unknown schema version, nothing recorded, no
usable Java or a stale JAVA_HOME, the `report` extra not installed, a bad option value, a
Spark master that is malformed or does not answer within --master-timeout) is one line on
stderr and exit status 2; runs that can be reported but deserve a caveat (interrupted,
failed, empty among others, an unreadable part left out) are warnings. `--strict` makes an
unreadable file bad input.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..cli.common import OneLineParser, guarded
from ..cli.options import help_text, option_type
from ..config import Option, rate_option
from ..analysis.session import check_driver_memory, check_master
from ..errors import ConfigError, ExitStatus, ReportInputError, RunError, ZmqloadError

if TYPE_CHECKING:
    from ..analysis.pipeline import Analysis
    from ..analysis.runs import RunInfo

PROG = "zmqload report"
NEEDS = ("pyspark", "matplotlib")        # the `report` extra of pyproject.toml

TARGET_RATE = rate_option("msgs/s (all producers) the recommendation must carry", per_producer=False,
                          flag="--target-rate", default_text="the highest clean rate seen")
SLO_P99_US = Option(float, "microseconds > 0", "latency SLO for capacity planning: p99 from intended send, "
                    "microseconds", low=0, low_open=True, flag="--slo-p99-us", default=1000.0,
                    default_text="the SLO of the capacity search among the inputs, else 1000")
MASTER_TIMEOUT_S = Option(float, "seconds > 0", "seconds to reach a cluster master (--master) and get an executor",
                          low=0, low_open=True, flag="--master-timeout", default=20.0)
WINDOW_MS = Option(float, "milliseconds > 0", "time window for rates and queue depth", low=0, low_open=True,
                   flag="--window-ms", default=None,
                   default_text="100, finer (down to 1) so that the shortest run has 30 windows")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="run directories, or directories holding run=*/ directories (a sweep)")
    parser.add_argument("--out", default="report", help="output directory (default: report)")
    parser.add_argument("--master", default=None, type=_checked(check_master),
                        help="Spark master URL, e.g. spark://host:7077 (default: embedded local[*])")
    for opt in (MASTER_TIMEOUT_S, SLO_P99_US, TARGET_RATE, WINDOW_MS):
        # the SLO stays None when not given: a capacity search's own SLO then applies (_report)
        parser.add_argument(opt.flag, type=option_type(opt), default=None if opt is SLO_P99_US else opt.default,
                            help=help_text(opt))
    parser.add_argument("--memory-budget", default=None,
                        help="memory budget for queued messages when recommending HWM, e.g. 64MiB, 1GiB")
    parser.add_argument("--reorder", choices=("auto", "on", "off"), default="auto",
                        help="count reordered messages: needs a sort of every record per stream; auto = on up to "
                             "20M receive records (default auto)")
    parser.add_argument("--driver-memory", default=None, type=_checked(check_driver_memory),
                        help="Spark driver memory for the embedded session, e.g. 2g, 4096m (default 4g)")
    parser.add_argument("--strict", action="store_true",
                        help="an unreadable file (a run.json, a Parquet part) is an error (exit 2), not a warning")
    parser.add_argument("--timings", action="store_true", help="print the wall time of each Spark step on stderr")
    parser.add_argument("--no-server", action="store_true",
                        help="run Spark in this process, not in the warm report server (docs/REPORT.md)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for unexpected errors")


def _checked(check: Callable[[str], str]) -> Callable[[str], str]:
    """argparse `type=` from a ConfigError-raising check: its message as argparse's one line."""
    def parse(text: str) -> str:
        try:
            return check(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None
    return parse


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


def _server_may_run(args: argparse.Namespace) -> bool:
    """Whether the warm report server (zmqload.report.server) may run this report: the
    embedded local Spark with its default memory, from a process without a session of its own."""
    if getattr(args, "in_server", False) or args.no_server or args.debug:
        return False
    if args.master is not None or args.driver_memory is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    if os.environ.get("ZMQLOAD_SPARK_DRIVER_MEMORY") or os.environ.get("ZMQLOAD_REPORT_SERVER", "1") == "0":
        return False
    if "pyspark.sql" in sys.modules:
        from pyspark.sql import SparkSession
        if SparkSession.getActiveSession() is not None:
            return False
    return True


def _run(args: argparse.Namespace) -> ExitStatus:
    check_installed()
    from ..analysis.capacity import parse_bytes
    from ..analysis.runs import BadFileWarning, discover_runs

    budget = None
    if args.memory_budget:
        try:
            budget = parse_bytes(args.memory_budget)
        except ValueError:
            raise ConfigError("--memory-budget", f"got {args.memory_budget!r}; accepted: bytes, e.g. 64MiB, "
                                                 "1GiB, 500MB") from None
    runs, warnings = discover_runs(args.paths)
    if args.strict:
        bad = [w for w in warnings if isinstance(w, BadFileWarning)]
        if bad:
            raise ReportInputError(f"{bad[0]} (--strict{f'; {len(bad) - 1} more' if len(bad) > 1 else ''})")
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
    if _server_may_run(args):
        from . import server
        # The report's own options only (the CLI adds its handler); the server says the warnings.
        status = server.run_remote({k: v for k, v in vars(args).items()
                                    if isinstance(v, (str, int, float, bool, list, type(None)))})
        if status is not None:
            return ExitStatus(status)
    for w in warnings:
        _warn(w)
    progress = Progress(enabled=sys.stderr.isatty() and not args.timings)
    try:
        return _report(args, runs, warnings, budget, progress)
    except ZmqloadError:
        raise
    except Exception as e:  # noqa: BLE001 - one line unless --debug
        if args.debug:
            raise
        raise RunError(f"{_one_line(e)} (rerun with --debug for details)") from e
    finally:
        progress.done()


def _one_line(e: BaseException) -> str:
    """The first line that says what went wrong. For an error thrown in the JVM, not py4j's
    "An error occurred while calling o123" nor Spark's wrappers ("Exception thrown in
    awaitResult"): the cause that names a file, if one does, and the root cause."""
    java = getattr(e, "java_exception", None)
    if java is None:
        return (f"{e.__class__.__name__}: {e}".strip().splitlines() or [""])[0][:300]
    causes: list[str] = []
    try:
        while java is not None and len(causes) < 20:
            causes.append((str(java.toString()).strip().splitlines() or [""])[0])
            java = java.getCause()
    except Exception:  # noqa: BLE001 - the JVM may be gone
        causes = causes or [(str(e).strip().splitlines() or [""])[0]]
    on_file = next((c for c in causes if ".parquet" in c), None)
    root = causes[-1]
    return (root if on_file in (None, root) else f"{on_file}; cause: {root}")[:400]


class Progress:
    """One progress line on a terminal, rewritten at each step and erased at the end, so a
    long report shows where it is and leaves only its own output behind."""

    def __init__(self, enabled: bool):
        self.enabled, self.shown = enabled, False

    def __call__(self, step: str) -> None:
        if self.enabled:
            print(f"\r\x1b[K{PROG}: {step}", end="", file=sys.stderr, flush=True)
            self.shown = True

    def done(self) -> None:
        if self.shown:
            print("\r\x1b[K", end="", file=sys.stderr, flush=True)
            self.shown = False


# The figures that need each kind of record: not computed (None) for a run with an
# unreadable part of that kind, rather than computed from part of the records.
NEEDS_RECVS = ("received", "unique", "duplicates", "reordered", "lost", "loss_ratio", "lost_start", "lost_middle",
               "lost_tail", "recv_rate", "recv_mb_s", "depth_max", "depth_mean", "depth_p99", "queued_bytes_max",
               "queued_bytes_mean")
NEEDS_SENDS = ("attempted", "sent", "eagain", "timeout", "errors", "dropped_sender", "expected", "lost", "loss_ratio",
               "lost_start", "lost_middle", "lost_tail", "offered_rate", "send_rate", "depth_max", "depth_mean",
               "depth_p99", "queued_bytes_max", "queued_bytes_mean")      # and the stall_* latency columns
PARTIAL = " (partial)"      # appended to the status of such a run in the summary


def _hit_rows(info: RunInfo, kind: str) -> Callable[[dict[str, Any]], bool]:
    """Which summary rows of `info` an unreadable `kind` part touches: the run total always;
    a sends part of producer k, stream k's rows; a recvs part of consumer k, consumer k's
    rows in a fan-out run (elsewhere any consumer may hold any message: every row)."""
    from ..analysis.pipeline import ALL
    from ..contract.ids import WorkerId

    workers = set()
    for part, _ in info.unreadable.get(kind, ()):
        try:
            workers.add(WorkerId.parse(os.path.basename(part).split("-")[1]).index)
        except (ValueError, IndexError):
            return lambda row: True
    if kind in ("sends", "replies"):        # both written by the stream's producer
        return lambda row: row["stream"] == ALL or row["stream"] in workers
    if info.fanout:
        return lambda row: row["consumer"] == ALL or row["consumer"] in workers
    return lambda row: True


def mark_damaged(analysis: Analysis, runs: list[RunInfo]) -> set[str]:
    """Blank the figures that unreadable parts would have fed (in the rows they feed) and
    the queue depth over time of those runs; the ids of the runs with such parts."""
    from ..analysis.pipeline import LATENCY_COLUMNS
    needs = {"recvs": NEEDS_RECVS, "sends": NEEDS_SENDS + tuple(c for c in LATENCY_COLUMNS if c.startswith("stall_")),
             "replies": ("round_trips", *(c for c in LATENCY_COLUMNS if c.startswith("round_trip_")))}
    damaged = {r.run_id: [(_hit_rows(r, kind), cols) for kind, cols in needs.items() if r.unreadable.get(kind)]
               for r in runs if r.damaged}
    for row in analysis.summary:
        for hit, cols in damaged.get(row["run"], ()):
            if hit(row):
                if not row["status"].endswith(PARTIAL):
                    row["status"] += PARTIAL
                row.update(dict.fromkeys(cols))
    analysis.depth = [d for d in analysis.depth if not damaged.get(d["run"])]
    return set(damaged)


def _report(args: argparse.Namespace, runs: list[RunInfo], warnings: list[str], budget: int | None,
            progress: Progress) -> ExitStatus:
    from ..analysis.capacity import capacity_table, recommend
    from ..analysis.pipeline import analyze
    from ..analysis.session import get_spark
    from . import html, markdown, outputs, search_answer

    searches, search_warnings = search_answer.load(args.paths)
    warnings = [*warnings, *search_warnings]
    if args.slo_p99_us is None:     # judge the probes by the SLO they were searched with
        args.slo_p99_us = search_answer.slo_p99_us(searches) or SLO_P99_US.default
    t0 = time.perf_counter()
    log = (lambda m: print(f"{PROG}: {m}", file=sys.stderr)) if args.timings else progress
    progress("starting Spark")
    spark = get_spark(args.master, driver_memory=args.driver_memory, master_timeout_s=args.master_timeout,
                      debug=args.debug, log=log if args.timings else None)
    log(f"spark session: {time.perf_counter() - t0:.2f} s" if args.timings else "reading the records")
    analysis = analyze(spark, runs, window_ms=args.window_ms, reorder={"on": True, "off": False}.get(args.reorder, "auto"), log=log)
    damaged = mark_damaged(analysis, runs)
    progress("writing the report")
    # A run with parts left out has no known loss: it cannot show a rate to be clean.
    run_rows = [r for r in analysis.run_rows() if r["run"] not in damaged]
    capacity = capacity_table(run_rows, args.slo_p99_us, runs)
    recs = recommend(capacity, budget, args.target_rate, args.slo_p99_us)
    os.makedirs(args.out, exist_ok=True)
    outputs.write_summary(analysis.summary, args.out, capacity, args.slo_p99_us, searches)
    page = html.render(analysis, capacity, recs, warnings, slo_p99_us=args.slo_p99_us, memory_budget=budget,
                       searches=searches)
    tmp = os.path.join(args.out, ".index.html.tmp")
    with open(tmp, "w") as f:
        f.write(page)
    os.replace(tmp, os.path.join(args.out, "index.html"))
    if args.timings:
        log(f"total: {time.perf_counter() - t0:.2f} s")
    progress.done()
    print(markdown.summary(analysis, capacity, recs, args.out, searches))
    return ExitStatus.OK


def main(argv: Sequence[str] | None = None) -> ExitStatus:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return ExitStatus(e.code or ExitStatus.OK) if not isinstance(e.code, str) else ExitStatus.BAD_INPUT
    return run(args)
