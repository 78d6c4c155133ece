"""`zmqload run`: one workload, every message recorded, a summary."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from ..contract.workload import SLO_OPTIONS, Slos, Workload
from ..errors import ExitStatus, RunError
from .common import megabytes
from .options import add_workload_arguments, workload_from_args

if TYPE_CHECKING:
    from ..measure.result import RunResult
    from ..plan.slo import Breach

NAME = "run"
HELP = "run one workload and record every message"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run one workload and record every message to Parquet under --out. Rates and counts "
        "take 10k / 1M; socket options left unset keep libzmq's defaults."
    )
    add_workload_arguments(parser)
    add_workload_arguments(parser, table=SLO_OPTIONS)
    shown = parser.add_argument_group("output")
    shown.add_argument("--json", action="store_true", help="print the summary as JSON")
    shown.add_argument("--quiet", action="store_true", help="print nothing but errors")


def run(args: argparse.Namespace) -> ExitStatus:
    from .display import LiveProgress
    from ..runner import run as run_workload
    from ..runner.preflight import preflight

    workload = preflight(workload_from_args(args).validate())
    slos = Slos(**{name: getattr(args, name) for name in SLO_OPTIONS})
    slos.check_with(workload)
    from ..plan.sweep import estimate_run_s

    progress = None if args.json or args.quiet else LiveProgress(total_s=estimate_run_s(workload))
    if progress is not None:
        say_disk(workload)
    try:
        result = run_workload(workload, progress=progress, slos=slos if slos.given else None)
    except KeyboardInterrupt as exc:  # its message: where a run copied to an --out URI went
        status = getattr(
            exc, "status", "interrupted"
        )  # errors.Interrupted: it came after the last run.json
        raise KeyboardInterrupt(
            f"{str(exc) or 'what was recorded is kept'} (run.json status: {status})"
        ) from exc
    except (
        RunError
    ) as exc:  # a failed run still has figures (from its records): show them, then the error
        failed: RunResult | None = getattr(exc, "result", None)
        # a run that sent and received nothing (nobody listening) has only zeros to show: the
        # error line alone says it (--json still prints them, for a script)
        if failed is not None and (args.json or failed.attempted or failed.received):
            show(failed, [], args)
        raise
    from ..plan.slo import judge

    breaches = judge(result, slos) if result.status == "complete" else []
    show(result, breaches, args)
    if result.status != "complete":
        return ExitStatus.FAILED
    if breaches:  # one line, the first SLO that broke first
        print(f"zmqload run: SLO broken: {'; '.join(b.text for b in breaches)}", file=sys.stderr)
        return ExitStatus.SLO_VIOLATED
    return ExitStatus.OK


SAY_BYTES = 1_000_000_000
"""A run expected to write at least this much says so before it starts (a soak run: ~12 GB per
billion messages)."""


def say_disk(w: Workload) -> None:
    """How much a long run will write and what a full disk does to it, one line before it starts
    (a run that cannot fit was refused already: runner.run.check_space)."""
    from ..runner.remote_out import local_out
    from ..runner.run import expected_write, free_space, kept_bytes

    (needed, guessed), free = expected_write(w), free_space(local_out(w))
    kept = kept_bytes(w, w.expected_sends_per_producer)  # what it keeps; `needed`: its peak
    if kept >= SAY_BYTES and (guessed or free >= needed):
        print(
            f"zmqload run: writing about {megabytes(kept)}{' (guessed: unpaced, --duration)' if guessed else ''} "
            f"to {local_out(w)}, {megabytes(max(free, 0))} free; a disk that fills ends the run failed, "
            "what was recorded kept",
            file=sys.stderr,
        )


def show(result: RunResult, breaches: list[Breach], args: argparse.Namespace) -> None:
    from rich.console import Console

    from .display import print_summary

    topology = result.topology
    if args.json:
        from ..contract.codec import to_builtins

        print(
            json.dumps(
                {
                    **result.shown(),
                    "topology": to_builtins(topology) if topology else None,
                    "slo_breaches": [b.to_dict() for b in breaches],
                },
                default=str,
            )
        )
    elif not args.quiet:
        console = Console()
        print_summary(result, console)
        if topology is not None and topology.device_in_path:
            console.print(f"device in the path: {topology.note}", soft_wrap=True, markup=False)
