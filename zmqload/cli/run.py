"""`zmqload run`: one workload, every message recorded, a summary."""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from ..errors import ExitStatus, RunError

if TYPE_CHECKING:
    from ..result import RunResult
from .options import add_workload_arguments, workload_from_args

NAME = "run"
HELP = "run one workload and record every message"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Run one workload and record every message to Parquet under --out. Rates and counts "
                          "take 10k / 1M; socket options left unset keep libzmq's defaults.")
    add_workload_arguments(parser)
    shown = parser.add_argument_group("output")
    shown.add_argument("--json", action="store_true", help="print the summary as JSON")
    shown.add_argument("--quiet", action="store_true", help="print nothing but errors")


def run(args: argparse.Namespace) -> ExitStatus:
    from ..display import LiveProgress
    from ..runner import run as run_workload

    workload = workload_from_args(args).validate()
    progress = None if args.json or args.quiet else LiveProgress()
    try:
        result = run_workload(workload, progress=progress)
    except KeyboardInterrupt as exc:
        raise KeyboardInterrupt("what was recorded is kept (run.json status: interrupted)") from exc
    except RunError as exc:     # a failed run still has figures (from its records): show them, then the error
        failed: RunResult | None = getattr(exc, "result", None)
        if failed is not None:
            show(failed, args)
        raise
    show(result, args)
    return ExitStatus.OK if result.status == "complete" else ExitStatus.FAILED


def show(result: "RunResult", args: argparse.Namespace) -> None:
    from rich.console import Console

    from ..display import print_summary
    if args.json:
        print(json.dumps(result.summary(), default=str))
    elif not args.quiet:
        print_summary(result, Console())
