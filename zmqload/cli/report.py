"""`zmqload report PATH... --out DIR`: Spark analysis of run directories into an HTML report.

The report's command line, its parser built from contract/report_options.py: `run(args)` (also
`sweep --report`, `capacity --report`) and `main(argv)`. Bad input is one line and exit status 2
(docs/REPORT.md)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from typing import Sequence

from ..contract import uris
from ..store import remote_runs
from ..contract.masters import on_this_host
from ..contract.report_options import REPORT_OPTIONS
from ..errors import ConfigError, ExitStatus
from ..report import command
from ..report.build import PROG
from .common import OneLineParser, guarded, megabytes
from .options import add_workload_arguments

NAME = "report"
HELP = "Spark analysis and HTML capacity report of run directories (pip install 'zmqload[report]')"
DESCRIPTION = (__doc__ or "").splitlines()[0].replace("`", "")
PATHS_HELP = (
    "run directories, or directories holding run=*/ directories (a sweep); either may be a filesystem URI "
    "(s3://...: copied here first)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """PATH... and every option of the report's option table (zmqload.contract.report_options),
    each parsed, checked and described by its one entry there."""
    if parser.description is None:
        parser.description = DESCRIPTION
    parser.epilog = (
        "On a terminal: the answers and where the page is; the full Markdown tables are in "
        "--out/summary.md. docs/REPORT.md."
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help=PATHS_HELP)
    add_workload_arguments(parser, table=REPORT_OPTIONS)


def run(args: argparse.Namespace) -> ExitStatus:
    """The report (or --stop-server); bad input is one line and exit status 2 (zmqload.errors)."""
    if args.stop_server:
        from ..report.server import stop_servers

        stopped = stop_servers()
        print(
            f"{PROG}: stopped {stopped} warm report server{'s' * (stopped != 1)}"
            if stopped
            else f"{PROG}: no warm report server was running"
        )
        return ExitStatus.OK
    if not args.paths:  # argparse's words, as when PATH was required of it
        print(f"{PROG}: error: the following arguments are required: PATH", file=sys.stderr)
        return ExitStatus.BAD_INPUT
    return guarded(PROG, _joined_then_reported, args)


def _joined_then_reported(args: argparse.Namespace) -> ExitStatus:
    """Runs at a URI copied here first, the halves of split runs among the paths joined
    (runner/halves.py), then the report; the copies removed after it."""
    from ..runner.halves import join_found

    staging = (
        tempfile.mkdtemp(prefix=STAGING_PREFIX) if any(uris.is_uri(p) for p in args.paths) else None
    )
    try:
        if staging is not None:
            args.paths = copied_here(args, staging)
        args.paths = join_found(args.paths)
        return command.run(args)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


STAGING_PREFIX = "zmqload-report-in-"
"""The local copy of runs given by URI: $TMPDIR (else /tmp)/zmqload-report-in-<random>/, removed
after the report."""


def copied_here(args: argparse.Namespace, staging: str) -> list[str]:
    """The paths, each URI's runs copied under `staging` (store/remote_runs.py) and said in
    one line. A URI with a Spark that is not on this host is refused: the copy is this host's."""
    for flag, value in (("--master", args.master), ("--remote", args.remote)):
        if value is not None and not (flag == "--master" and on_this_host(value)):
            uri = uris.without_secrets(next(p for p in args.paths if uris.is_uri(p)))
            instead = (
                "no --master or a local[...] one"
                if flag == "--master"
                else "no --remote (the embedded Spark)"
            )
            raise ConfigError(
                flag,
                f"got {value!r} with {uri}: runs at a URI are copied to this host, where "
                f"that Spark's executors cannot read them; accepted: {instead} with a URI, or "
                "a path the cluster shares",
            )
    paths = []
    for i, path in enumerate(args.paths):
        if not uris.is_uri(path):
            paths.append(path)
            continue
        local, copied = remote_runs.download_runs(path, os.path.join(staging, str(i)))
        print(
            f"{PROG}: copied {megabytes(copied)} of runs from {uris.without_secrets(path)} to {local} "
            "(removed after the report)",
            file=sys.stderr,
        )
        paths.append(local)
    return paths


def main(argv: Sequence[str] | None = None) -> ExitStatus:
    """The report's command line on its own: `python -m zmqload.report`."""
    parser = OneLineParser(prog=PROG, description=DESCRIPTION)
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return (
            ExitStatus(e.code or ExitStatus.OK)
            if not isinstance(e.code, str)
            else ExitStatus.BAD_INPUT
        )
    return run(args)


__all__ = ["NAME", "HELP", "add_arguments", "run", "main"]
