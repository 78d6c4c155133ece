"""`zmqload report PATH... --out DIR`: Spark analysis of run directories into an HTML report.

Bad input (missing directory, not a run, unknown schema version, nothing recorded, no
usable Java, a bad option value) is one line on stderr and exit status 2; runs that can be
reported but deserve a caveat (interrupted, failed, empty among others) are warnings.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

PROG = "zmqload report"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="run directories, or directories holding run=*/ directories (a sweep)")
    parser.add_argument("--out", default="report", help="output directory (default: report)")
    parser.add_argument("--master", default=None,
                        help="Spark master URL, e.g. spark://host:7077 (default: embedded local[*])")
    parser.add_argument("--slo-p99-us", type=float, default=1000.0,
                        help="latency SLO for capacity planning: p99 from intended send, microseconds (default 1000)")
    parser.add_argument("--memory-budget", default=None,
                        help="memory budget for queued messages when recommending HWM, e.g. 64MiB, 1GiB")
    parser.add_argument("--target-rate", type=float, default=None,
                        help="msgs/s the recommendation must carry (default: the highest clean rate seen)")
    parser.add_argument("--window-ms", type=float, default=100.0, help="time window for rates and queue depth (default 100)")
    parser.add_argument("--reorder", choices=("auto", "on", "off"), default="auto",
                        help="count reordered messages: needs a sort of every record per stream; auto = on up to "
                             "20M receive records (default auto)")
    parser.add_argument("--driver-memory", default=None, help="Spark driver memory for the embedded session (default 4g)")
    parser.add_argument("--timings", action="store_true", help="print the wall time of each Spark step on stderr")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for unexpected errors")


def _error(msg: str) -> int:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return 2


def _warn(msg: str) -> None:
    print(f"{PROG}: warning: {msg}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from ..analysis.capacity import parse_bytes
    from ..analysis.errors import ReportInputError
    from ..analysis.runs import discover_runs

    budget = None
    if args.memory_budget:
        try:
            budget = parse_bytes(args.memory_budget)
        except ValueError as e:
            return _error(f"--memory-budget: {e}")
    if args.window_ms <= 0:
        return _error("--window-ms must be positive")
    if args.slo_p99_us <= 0:
        return _error("--slo-p99-us must be positive")
    try:
        runs, warnings = discover_runs(args.paths)
    except ReportInputError as e:
        return _error(str(e))
    if not runs:
        for w in warnings:
            _warn(w)
        return _error("no usable runs in " + " ".join(args.paths))
    if all(not r.parts.get("recvs") and not r.parts.get("sends") for r in runs):
        for w in warnings:
            if "is empty" not in w:
                _warn(w)
        return _error("nothing to report: " + ("the run has" if len(runs) == 1 else "every run has")
                      + " no send or receive records")
    for w in warnings:
        _warn(w)
    try:
        return _report(args, runs, warnings, budget)
    except ReportInputError as e:
        return _error(str(e))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - one line unless --debug
        if args.debug:
            raise
        first = (str(e).strip().splitlines() or [""])[0][:300]
        print(f"{PROG}: error: {e.__class__.__name__}: {first} (rerun with --debug for details)", file=sys.stderr)
        return 1


def _report(args, runs, warnings, budget) -> int:
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
    capacity = capacity_table(run_rows, args.slo_p99_us)
    recs = recommend(capacity, budget, args.target_rate, args.slo_p99_us)
    os.makedirs(args.out, exist_ok=True)
    outputs.write_summary(analysis.summary, args.out)
    page = html.render(analysis, capacity, recs, warnings, slo_p99_us=args.slo_p99_us, memory_budget=budget)
    tmp = os.path.join(args.out, ".index.html.tmp")
    with open(tmp, "w") as f:
        f.write(page)
    os.replace(tmp, os.path.join(args.out, "index.html"))
    if log:
        log(f"total: {time.perf_counter() - t0:.2f} s")
    print(markdown.summary(analysis, capacity, recs, args.out))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    return run(args)
