"""`--report` / `--report-out` of `zmqload sweep` and `zmqload capacity`: the Spark report over
their --out once they are done. The report command is imported before anything runs, so a
missing `report` extra is one line naming --report (exit 2) before the first run, not after
the last."""

from __future__ import annotations

import argparse
import importlib
from types import ModuleType
from typing import Optional

from ..errors import ConfigError, ExitStatus, ReportInputError
from .common import OneLineParser

REPORT_MODULE = "zmqload.cli.report"
"""The report command's module (NAME, add_arguments, run), as `zmqload report` runs it."""


def report_module() -> ModuleType:
    """The Spark report command, imported only when asked for; ConfigError naming --report
    when it (or the `report` extra it needs) is missing."""
    from ..report.command import check_installed

    try:
        check_installed()
        return importlib.import_module(REPORT_MODULE)
    except ReportInputError as exc:
        raise ConfigError("--report", f"{exc}; accepted: no --report") from None
    except ImportError as exc:
        raise ConfigError(
            "--report",
            f"the Spark report is not available ({exc}); "
            f"accepted: a zmqload with {REPORT_MODULE}, or no --report",
        ) from None


def run_report(module: ModuleType, out: str, report_out: Optional[str]) -> ExitStatus:
    """`zmqload report OUT [--out REPORT_OUT]` through `module` (report_module())."""
    parser = OneLineParser(prog="zmqload report")
    module.add_arguments(parser)
    argv = [out] + (["--out", report_out] if report_out else [])
    try:
        args: argparse.Namespace = parser.parse_args(argv)
        return ExitStatus(module.run(args))
    except SystemExit as exc:  # the report's parser refused the arguments
        return ExitStatus(exc.code) if isinstance(exc.code, int) else ExitStatus.BAD_INPUT
