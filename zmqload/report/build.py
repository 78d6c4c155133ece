"""The report made in this process: the run directories checked and read (`prepare`), then Spark's
figures, the verdicts, the page, the summary files and the terminal summary (`make`). What the
command and the warm report server both run."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

from ..errors import ConfigError, ExitStatus, ReportInputError, RunError, ZmqloadError

if TYPE_CHECKING:
    from ..analysis.pipeline import Analysis
    from ..analysis.summary_row import SummaryRow
    from ..analysis.runs import RunInfo

PROG = "zmqload report"


def _warn(msg: str) -> None:
    print(f"{PROG}: warning: {msg}", file=sys.stderr)


@dataclass
class Inputs:
    """What `prepare` found: the runs to report, the warnings to say, --memory-budget in bytes."""

    runs: list[RunInfo]
    warnings: list[str]
    budget: int | None


def prepare(args: argparse.Namespace) -> Inputs:
    """The runs under args.paths, checked: ConfigError for a bad --memory-budget,
    ReportInputError when no run is usable, nothing was recorded, or (--strict) a file is
    unreadable. Says no warning: `make` does, wherever the report is made."""
    from ..analysis.verdicts import parse_bytes
    from ..analysis.runs import BadFileWarning, discover_runs

    budget = None
    if args.memory_budget:
        try:
            budget = parse_bytes(args.memory_budget)
        except ValueError:
            raise ConfigError(
                "--memory-budget",
                f"got {args.memory_budget!r}; accepted: bytes, e.g. 64MiB, 1GiB, 500MB",
            ) from None
    runs, warnings = discover_runs(args.paths)
    if args.strict:
        bad = [w for w in warnings if isinstance(w, BadFileWarning)]
        if bad:
            raise ReportInputError(
                f"{bad[0]} (--strict{f'; {len(bad) - 1} more' if len(bad) > 1 else ''})"
            )
    if not runs:
        for w in warnings:
            _warn(w)
        raise ReportInputError("no usable runs in " + " ".join(args.paths))
    if all(not any(r.parts_of(k) for k in ("recvs", "sends", "foreign")) for r in runs):
        for w in warnings:
            if "is empty" not in w:
                _warn(w)
        raise ReportInputError(
            "nothing to report: "
            + ("the run has" if len(runs) == 1 else "every run has")
            + " no send or receive records"
        )
    return Inputs(runs, warnings, budget)


def make(args: argparse.Namespace, inputs: Inputs) -> ExitStatus:
    """The report of `prepare`'s runs, in this process: its warnings on stderr, a progress
    line on a terminal, an unexpected error as a RunError of one line unless --debug."""
    for w in inputs.warnings:
        _warn(w)
    progress = Progress(enabled=sys.stderr.isatty() and not args.timings)
    try:
        return _report(args, inputs.runs, inputs.warnings, inputs.budget, progress)
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
NEEDS_RECVS = (
    "received",
    "unique",
    "duplicates",
    "reordered",
    "lost",
    "loss_ratio",
    "recv_rate",
    "recv_mb_s",
    "depth_max",
    "depth_peak_at_s",
    "depth_mean",
    "depth_p99",
    "queued_bytes_max",
    "queued_bytes_mean",
    "backlog_went_in",
    "backlog_came_out",
)
NEEDS_SENDS = (
    "attempted",
    "sent",
    "eagain",
    "timeout",
    "errors",
    "dropped_sender",
    "expected",
    "lost",
    "loss_ratio",
    "offered_rate",
    "send_rate",
    "depth_max",
    "depth_peak_at_s",
    "depth_mean",
    "depth_p99",
    "queued_bytes_max",
    "queued_bytes_mean",
)  # and the stall_* latency columns
PARTIAL = " (partial)"  # appended to the status of such a run in the summary


def _hit_rows(info: RunInfo, kind: str) -> Callable[[SummaryRow], bool]:
    """Which summary rows of `info` an unreadable `kind` part touches: the run total always;
    a sends part of producer k, stream k's rows; a recvs part of consumer k, consumer k's
    rows in a fan-out run (elsewhere any consumer may hold any message: every row)."""
    from ..analysis.pipeline import ALL
    from ..contract.ids import WorkerId

    workers = set()
    for part, _ in info.unreadable.get(kind, ()):
        try:
            # a restarted worker's later processes record as "c0.g1" (contract/ids.incarnation)
            name = os.path.basename(part).split("-")[1].split(".")[0]
            workers.add(WorkerId.parse(name).index)
        except (ValueError, IndexError):
            return lambda row: True
    if kind in ("sends", "replies"):  # both written by the stream's producer
        return lambda row: row.stream == ALL or row.stream in workers
    if info.fanout:
        return lambda row: row.consumer == ALL or row.consumer in workers
    return lambda row: True


def mark_damaged(analysis: Analysis, runs: list[RunInfo]) -> set[str]:
    """Blank the figures that unreadable parts would have fed (in the rows they feed) and
    the queue depth over time of those runs; the ids of the runs with such parts."""
    from ..analysis.finish import SERVICE_COLUMNS
    from ..analysis.pipeline import LATENCY_COLUMNS

    needs = {
        "recvs": NEEDS_RECVS,
        "sends": NEEDS_SENDS + tuple(c for c in LATENCY_COLUMNS if c.startswith("stall_")),
        "replies": (
            "round_trips",
            *(c for c in LATENCY_COLUMNS if c.startswith("round_trip_")),
            *SERVICE_COLUMNS,
        ),
    }
    # a service's answers (replies/) stand for its receipts (analysis/finish.py answered)
    damaged = {
        r.run_id: [
            (
                _hit_rows(r, kind),
                cols + (NEEDS_RECVS if kind == "replies" and r.workload.serves else ()),
            )
            for kind, cols in needs.items()
            if r.unreadable.get(kind)
        ]
        for r in runs
        if r.damaged
    }
    for i, row in enumerate(analysis.summary):
        for hit, cols in damaged.get(row.run, ()):
            if hit(row):
                status = row.status or ""
                partial = status if status.endswith(PARTIAL) else status + PARTIAL
                row = replace(row.blanked(cols), status=partial)
        analysis.summary[i] = row
    analysis.depth = [d for d in analysis.depth if not damaged.get(d["run"])]
    return set(damaged)


def page_modules_loading() -> threading.Thread:
    """The page's modules (matplotlib: ~0.7 s of imports) imported in a thread while Spark's JVM
    starts, which keeps one core busy and the other idle. None of them imports pyspark or the
    session module, what the caller imports meanwhile, so the two never wait on each other's
    imports (tests/test_report_layering.py). A failure is left to the caller's own import,
    which says it."""

    def load() -> None:
        try:
            from . import html, markdown  # noqa: F401
        except Exception:  # noqa: BLE001 - said by the caller's import of the same modules
            pass

    thread = threading.Thread(target=load, name="page-imports", daemon=True)
    thread.start()
    return thread


def _session(args: argparse.Namespace, log: Callable[[str], None] | None) -> Any:
    """The report's Spark: a Spark Connect session on --remote's server, else the local or
    --master session (analysis.session)."""
    from ..analysis.session import connect, get_spark

    if args.remote is None:
        return get_spark(
            args.master,
            driver_memory=args.driver_memory,
            master_timeout_s=args.master_timeout,
            debug=args.debug,
            log=log,
        )
    for flag, given in (("--master", args.master), ("--driver-memory", args.driver_memory)):
        if given is not None:  # the server is where Spark runs, with its own master and memory
            raise ConfigError(
                "--remote",
                f"given with {flag}; accepted: --remote alone (the Connect server's "
                "master and memory are its own)",
            )
    return connect(args.remote, args.master_timeout, log=log)


def two_groups(paths: list[str], warnings: list[str]) -> Any:
    """Given two paths, a run or a directory of runs each: the second's runs compared with the
    first's (measure/compare.py), else None; why not, as a warning, when they cannot be."""
    if len(paths) != 2:
        return None
    from ..measure.compare import Group, compare, load_runs

    try:
        base, candidate = (Group(p, load_runs(p, name)) for p, name in zip(paths, ("base", "cand")))
        return compare(base, candidate)
    except ZmqloadError as exc:
        warnings.append(f"no comparison of the two paths: {exc}")
        return None


def _elapsed(runs: list[RunInfo]) -> list[float | None]:
    return [r.record.summary.elapsed_s if r.record.summary else None for r in runs]


def _report(
    args: argparse.Namespace,
    runs: list[RunInfo],
    warnings: list[str],
    budget: int | None,
    progress: Progress,
) -> ExitStatus:
    from ..analysis.verdicts import capacity_table, recommend
    from ..analysis import one_side
    from ..analysis.metrics import window_ns_for
    from ..analysis.pipeline import Analysis, analyze
    from . import outputs, search_answer

    searches, search_warnings = search_answer.load(args.paths)
    warnings = [*warnings, *search_warnings]
    # No SLO is invented: every run is judged by the SLOs it was made under (run.json), a capacity
    # probe by its search's; --slo-p99-us, when given, is a what-if in place of their p99 SLO.
    what_if = args.slo_p99_us
    t0 = time.perf_counter()
    log = (lambda m: print(f"{PROG}: {m}", file=sys.stderr)) if args.timings else progress
    progress("starting Spark")
    page_modules_loading()
    spark = _session(args, log if args.timings else None)
    # the comparison of two paths reads the runs' own files, not Spark's: made beside its jobs
    comparison_warnings: list[str] = []
    comparing = ThreadPoolExecutor(1, thread_name_prefix="compare")
    compared = comparing.submit(two_groups, args.paths, comparison_warnings)
    comparing.shutdown(wait=False)
    from . import html, markdown

    log(
        f"spark session: {time.perf_counter() - t0:.2f} s"
        if args.timings
        else "reading the records"
    )
    # runs of one side: what the user's other side sent or received is not seen, nothing to reconcile
    sides = [r for r in runs if r.consumer_only]
    producers = [r for r in runs if r.producer_only]
    runs = [r for r in runs if not r.consumer_only and not r.producer_only]
    try:
        analysis = (
            analyze(
                spark,
                runs,
                window_ms=args.window_ms,
                reorder={"on": True, "off": False}.get(args.reorder, "auto"),
                log=log,
            )
            if runs
            else Analysis(
                runs=[],
                window_ns=window_ns_for(args.window_ms, _elapsed(sides + producers)),
                summary=[],
                rates=[],
                depth=[],
                hist=[],
            )  # fmt: skip
        )
        consumer_sides = one_side.consumer_sides(spark, sides, analysis.window_ns)
        producer_sides = one_side.producer_sides(spark, producers, analysis.window_ns)
    finally:
        if args.remote is not None:
            spark.stop()  # the server-side session and what it cached; the server lives on
    damaged = mark_damaged(analysis, runs)
    progress("writing the report")
    # A run with parts left out has no known loss: it cannot show a rate to be clean.
    run_rows = [r for r in analysis.run_rows() if r.run not in damaged]
    capacity = capacity_table(run_rows, what_if, runs, searches)
    search_answer.word_groups(capacity, searches)
    warnings += search_answer.disagreements(capacity, run_rows, runs, searches)
    recs = recommend(capacity, budget, args.target_rate, what_if)
    os.makedirs(args.out, exist_ok=True)
    outputs.write_summary(analysis.summary, args.out, capacity, what_if, searches)
    outputs.write_topics(analysis.topics, args.out)
    comparison = compared.result()
    warnings += comparison_warnings
    page = html.render(
        analysis,
        capacity,
        recs,
        warnings,
        slo_p99_us=what_if,
        memory_budget=budget,
        searches=searches,
        comparison=comparison,
        consumer_sides=consumer_sides,
        producer_sides=producer_sides,
    )
    tmp = os.path.join(args.out, ".index.html.tmp")
    with open(tmp, "w") as f:
        f.write(page)
    os.replace(tmp, os.path.join(args.out, "index.html"))
    if args.timings:
        log(f"total: {time.perf_counter() - t0:.2f} s")
    progress.done()
    print(
        markdown.summary(
            analysis, capacity, recs, args.out, searches, consumer_sides, producer_sides
        )
    )
    return ExitStatus.OK
