"""`zmqload repair RUN_DIR`: finish a run left `running` (its controller was killed, or the
machine went down) from its records: counters rebuilt, run.json marked `failed`."""

from __future__ import annotations

import argparse
import json

from ..contract.fates import BRIEF
from ..errors import ConfigError, ExitStatus

NAME = "repair"
HELP = "rebuild the counters of a run left 'running' from its records and mark it failed"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Rebuild the counters of a run whose run.json still says 'running' (its controller "
        "died) from its Parquet parts and raw _spill/ chunks, and mark it failed."
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run's directory (runs/run=...)")
    parser.add_argument("--json", action="store_true", help="print the rebuilt summary as JSON")


def run(args: argparse.Namespace) -> ExitStatus:
    from ..runner.repair import process_alive, read_running, repair_run

    pid = read_running(args.run_dir).controller_pid
    if pid and process_alive(pid):
        raise ConfigError(
            "RUN_DIR",
            f"{args.run_dir} is still being run by process {pid}; "
            "accepted: a run whose controller is gone",
        )
    # nobody saw how its workers ended: what they may have held is `unknown`
    result = repair_run(
        args.run_dir,
        "left running (its controller died); figures rebuilt by zmqload repair",
        workers_died=True,
    )
    summary = result.summary()
    if args.json:
        print(json.dumps(summary, default=str))
    else:
        fates = ", ".join(f"{k} {summary[k]:,}" for k in BRIEF)
        print(
            f"{args.run_dir}: marked failed; sent {summary['sent']:,}, received {summary['received']:,} ({fates})"
        )
    return ExitStatus.OK
