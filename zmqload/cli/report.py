"""`zmqload report PATH... --out DIR`: Spark analysis of run directories into an HTML report.

The report's command line: its arguments (PATH... and the report's option table,
zmqload.contract.report_options, every option's one definition), `run(args)` (the `zmqload
report` command, also what `sweep --report` and `capacity --report` run; `--stop-server`) and
`main(argv)` (`python -m zmqload.report`, spark-submit's script). The report itself is
zmqload.report.command's. Always listed; without the `report` extra it says which to install.

Bad input (missing directory, not a run, unknown schema version, nothing recorded, no
usable Java or a stale JAVA_HOME, the `report` extra not installed, a bad option value, a
Spark master that is malformed or does not answer within --master-timeout) is one line on
stderr and exit status 2; runs that can be reported but deserve a caveat (interrupted,
failed, empty among others, an unreadable part left out) are warnings. `--strict` makes an
unreadable file bad input.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from ..contract.report_options import REPORT_OPTIONS
from ..errors import ExitStatus
from ..report import command
from ..report.build import PROG
from .common import OneLineParser, guarded
from .options import add_workload_arguments

NAME = "report"
HELP = "Spark analysis and HTML capacity report of run directories (pip install 'zmqload[report]')"
DESCRIPTION = (__doc__ or "").splitlines()[0].replace("`", "")
PATHS_HELP = "run directories, or directories holding run=*/ directories (a sweep)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """PATH... and every option of the report's option table (zmqload.contract.report_options),
    each parsed, checked and described by its one entry there."""
    if parser.description is None:
        parser.description = DESCRIPTION
    parser.epilog = ("On a terminal: the answers and where the page is; the full Markdown tables are in "
                     "--out/summary.md. docs/REPORT.md.")
    parser.add_argument("paths", nargs="*", metavar="PATH", help=PATHS_HELP)
    add_workload_arguments(parser, table=REPORT_OPTIONS)


def run(args: argparse.Namespace) -> ExitStatus:
    """The report (or --stop-server); bad input is one line and exit status 2 (zmqload.errors)."""
    if args.stop_server:
        from ..report.server import stop_servers
        stopped = stop_servers()
        print(f"{PROG}: stopped {stopped} warm report server{'s' * (stopped != 1)}" if stopped
              else f"{PROG}: no warm report server was running")
        return ExitStatus.OK
    if not args.paths:          # argparse's words, as when PATH was required of it
        print(f"{PROG}: error: the following arguments are required: PATH", file=sys.stderr)
        return ExitStatus.BAD_INPUT
    return guarded(PROG, _joined_then_reported, args)


def _joined_then_reported(args: argparse.Namespace) -> ExitStatus:
    """The halves of split runs among the paths joined first (runner/halves.py), then the report."""
    from ..runner.halves import join_found
    args.paths = join_found(args.paths)
    return command.run(args)


def main(argv: Sequence[str] | None = None) -> ExitStatus:
    """The report's command line on its own: `python -m zmqload.report`."""
    parser = OneLineParser(prog=PROG, description=DESCRIPTION)
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return ExitStatus(e.code or ExitStatus.OK) if not isinstance(e.code, str) else ExitStatus.BAD_INPUT
    return run(args)


__all__ = ["NAME", "HELP", "add_arguments", "run", "main"]
