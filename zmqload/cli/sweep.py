"""`zmqload sweep`: the cartesian product of option lists (or a TOML file), one run each.

    zmqload sweep --pattern push-pull,pub-sub --sndhwm 1,1000 --size 64,1024 --rate 10k,max \\
        --duration 5 --out runs/
    zmqload sweep --config sweep.toml --report
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from ..contract.workload import UNPACED_RATE_GUESS, Workload
from ..plan import sweep as sweeps
from ..errors import ExitStatus
from .common import disk_warning, megabytes
from .options import add_workload_arguments
from .report_after import report_module, run_report

NAME = "sweep"
HELP = "run the cartesian product of option lists, one run directory each"

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run the cartesian product of option lists, one run directory each. Any option of "
        "`run` takes a comma-separated list (an axis) or one value (fixed for every point). "
        "Every point is validated before the first run starts."
    )
    parser.epilog = (
        "Exit status as README.md says (1: some run failed, recorded; the sweep went on). "
        "TOML form: docs/SWEEPS.md."
    )
    s = parser.add_argument_group("sweep")
    s.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="TOML sweep file: [sweep] fixed values and out, [axes] lists, [[points]] explicit points; "
        "options given here replace the file's [sweep]/[axes] entries",
    )
    s.add_argument(
        "--out",
        default=argparse.SUPPRESS,
        help="parent of the run directories and of sweep-<id>.json (default runs)",
    )
    s.add_argument(
        "--name",
        default=argparse.SUPPRESS,
        help="sweep id, the prefix of every run name (default: time and a random suffix)",
    )
    s.add_argument(
        "--report",
        action="store_true",
        default=None,
        help="afterwards, run the Spark report (zmqload report) over --out",
    )
    s.add_argument(
        "--report-out",
        default=None,
        metavar="DIR",
        help="where the report goes (passed as its --out)",
    )
    s.add_argument(
        "--dry-run", action="store_true", help="validate and list the points; run nothing"
    )
    s.add_argument("--quiet", action="store_true", help="print nothing but errors")
    add_workload_arguments(parser, axes=True, skip=sweeps.RESERVED)


def _seconds(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    minutes, seconds = divmod(int(round(s)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {seconds:02d} s"


def run_bytes(w: Workload) -> tuple[int, bool]:
    """(bytes one run is expected to keep, whether its length was guessed): runner.run's
    kept_bytes (imported when asked: the command starts without the runner); an unpaced
    --duration run counted at UNPACED_RATE_GUESS."""
    from ..contract.wire import MAX_SEQ
    from ..runner.run import kept_bytes

    return kept_bytes(w, w.expected_sends_per_producer), w.messages_per_producer >= MAX_SEQ


def expected_write(sweep: sweeps.Sweep) -> tuple[int, int]:
    """(bytes the sweep's runs are expected to keep, how many of them were guessed)."""
    sizes = [run_bytes(p.workload) for p in sweep.points]
    return sum(n for n, _ in sizes), sum(guessed for _, guessed in sizes)


def estimate_line(sweep: sweeps.Sweep) -> str:
    """How many runs, how long and how much they write: said before the first run starts."""
    total, unknown = sweep.estimate()
    n = len(sweep.points)
    line = f"{n} run{'s' if n != 1 else ''}, about {_seconds(total)}"
    if unknown:
        line += f" (plus the sending time of {unknown} run{'s' if unknown != 1 else ''} bounded only by an unpaced --count)"
    written, guessed = expected_write(sweep)
    line += f", writing up to about {megabytes(written)} to {sweep.out}"
    if guessed:
        line += (
            f" ({guessed} unpaced --duration run{'s' if guessed != 1 else ''} counted at "
            f"{UNPACED_RATE_GUESS:,} msg/s per producer)"
        )
    return line


class RichReporter(sweeps.SweepReporter):
    """A progress bar over runs with the time left (on a terminal), and one line per run."""

    def __init__(self, quiet: bool = False) -> None:
        from rich.console import Console

        self.console = Console(highlight=False, soft_wrap=True)
        self.quiet = quiet
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def sweep_started(self, sweep: sweeps.Sweep) -> None:
        if self.quiet or not self.console.is_terminal:
            return
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("[bold]sweep {task.fields[sweep]}"),
            BarColumn(),
            TextColumn("run {task.fields[run]}/{task.total:.0f}"),
            TimeElapsedColumn(),
            TextColumn("about {task.fields[left]} left"),
            TextColumn("{task.description}"),
            console=self.console,
            transient=True,
        )
        self.task = self.progress.add_task(
            "",
            total=len(sweep.points),
            sweep=sweep.sweep_id,
            run=0,
            left=_seconds(sweep.time_left()),
        )
        self.progress.start()

    def _bar(self, **fields: Any) -> None:
        """Update the progress bar, if there is one."""
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, **fields)

    def run_started(self, sweep: sweeps.Sweep, point: sweeps.Point) -> None:
        self._bar(
            completed=point.index,
            run=point.index + 1,
            description=sweeps.point_tag(point.values),
            left=_seconds(sweep.time_left(point)),
        )

    def run_progress(
        self,
        sweep: sweeps.Sweep,
        point: sweeps.Point,
        fraction: float,
        sent: int,
        received: int,
        elapsed_s: float,
    ) -> None:
        self._bar(
            completed=point.index + fraction,
            left=_seconds(sweep.time_left(point, elapsed_s)),
            description=f"{sweeps.point_tag(point.values)}  sent {sent:,} received {received:,}",
        )

    def run_finished(self, sweep: sweeps.Sweep, point: sweeps.Point) -> None:
        self._bar(completed=point.index + 1, left=_seconds(sweep.time_left()))
        if self.quiet:
            return
        s = point.summary
        figures = (
            f"sent {s.sent:,} lost {s.lost:,} eagain {s.eagain:,} {s.throughput_msgs:,.0f} msg/s"
            if s is not None
            else (point.error or "")
        )
        style = {"complete": "green", "failed": "red"}.get(point.status, "yellow")
        self.console.print(
            f"[{point.index + 1}/{len(sweep.points)}] [{style}]{point.status}[/] "
            f"{os.path.basename(point.run_dir)}  {figures}",
            markup=True,
            soft_wrap=True,
        )

    def sweep_finished(self, sweep: sweeps.Sweep) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def build_spec(args: argparse.Namespace) -> sweeps.SweepSpec:
    spec = sweeps.load_toml(args.config) if args.config else sweeps.SweepSpec()
    for name in args.given or []:
        spec.set_option(name, getattr(args, name))
    if hasattr(args, "out"):
        spec.out = args.out
    if hasattr(args, "name"):
        spec.name = args.name
    if args.report is not None:
        spec.report = args.report
    return spec


def run(args: argparse.Namespace) -> ExitStatus:
    spec = build_spec(args)
    report = None
    if (spec.report or args.report_out) and not args.dry_run:
        report = report_module()  # ConfigError (exit 2) before anything runs
    sweep = sweeps.plan(spec)  # likewise
    reporter = RichReporter(quiet=args.quiet)
    if not args.quiet:
        reporter.console.print(estimate_line(sweep))
    if not args.dry_run:
        disk_warning("zmqload sweep", sweep.out, expected_write(sweep)[0], "the sweep is")
    if args.dry_run:
        for point in sweep.points:
            print(f"{point.index:>4}  run={point.run_id}")
        return ExitStatus.OK
    try:
        sweeps.execute(sweep, reporter)
    except KeyboardInterrupt as exc:
        raise KeyboardInterrupt(
            f"after {sweep.count('complete') + sweep.count('failed')} of {len(sweep.points)} "
            f"runs; records kept, {sweep.path} says interrupted"
        ) from exc
    failed = sweep.count("failed")
    if not args.quiet:
        reporter.console.print(
            f"{sweep.count('complete')} complete, {failed} failed; sweep: {sweep.path}"
        )
    status = ExitStatus.FAILED if failed else ExitStatus.OK
    if report is not None:
        report_status = run_report(report, sweep.out, args.report_out)
        status = status or report_status
    return status
