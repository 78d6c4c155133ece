"""`zmqload report PATH... --out DIR`: Spark analysis of run directories into an HTML report.

The report's command line: its arguments, `run(args)` (the `zmqload report` command, also
what `sweep --report` and `capacity --report` run) and `main(argv)` (`python -m
zmqload.report`, spark-submit's script). The report itself is zmqload.report.command's.
Always listed; without the `report` extra it says which to install.

Bad input (missing directory, not a run, unknown schema version, nothing recorded, no
usable Java or a stale JAVA_HOME, the `report` extra not installed, a bad option value, a
Spark master that is malformed or does not answer within --master-timeout) is one line on
stderr and exit status 2; runs that can be reported but deserve a caveat (interrupted,
failed, empty among others, an unreadable part left out) are warnings. `--strict` makes an
unreadable file bad input.
"""
from __future__ import annotations

import argparse
from typing import Callable, Sequence

from ..analysis.session import check_driver_memory, check_master
from ..contract.workload import Option, rate_option
from ..errors import ConfigError, ExitStatus
from ..report import command
from ..report.build import DEFAULT_SLO_P99_US, PROG
from .common import OneLineParser, guarded
from .options import help_text, option_type

NAME = "report"
HELP = "Spark analysis and HTML capacity report of run directories (pip install 'zmqload[report]')"

TARGET_RATE = rate_option("msgs/s (all producers) the recommendation must carry", per_producer=False,
                          flag="--target-rate", default_text="the highest clean rate seen")
SLO_P99_US = Option(float, "microseconds > 0", "latency SLO for capacity planning: p99 from intended send, "
                    "microseconds", low=0, low_open=True, flag="--slo-p99-us", default=DEFAULT_SLO_P99_US,
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
        # the SLO stays None when not given: a capacity search's own SLO then applies (report.build)
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


def run(args: argparse.Namespace) -> ExitStatus:
    """The report; bad input is one line and exit status 2 (zmqload.errors)."""
    return guarded(PROG, command.run, args)


def main(argv: Sequence[str] | None = None) -> ExitStatus:
    """The report's command line on its own: `python -m zmqload.report`."""
    parser = OneLineParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return ExitStatus(e.code or ExitStatus.OK) if not isinstance(e.code, str) else ExitStatus.BAD_INPUT
    return run(args)


__all__ = ["NAME", "HELP", "add_arguments", "run", "main"]
