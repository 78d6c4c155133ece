"""The Spark report as a library call, `run(options)`: made in the warm report server when it may be
and fits its heap, else in this process (report/build.py). Bad input raises a ZmqloadError of exit
status 2; caveats are warnings (docs/REPORT.md)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from ..errors import ExitStatus, ReportInputError
from . import build

NEEDS = ("pyspark", "matplotlib")  # the `report` extra of pyproject.toml


def check_installed() -> None:
    """ReportInputError naming the extra when what the report needs is not installed."""
    missing = [name for name in NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        raise ReportInputError(
            f"the report needs {' and '.join(missing)}, not installed here; "
            "install it with: pip install 'zmqload[report]'"
        )


def server_may_run(options: argparse.Namespace) -> bool:
    """Whether the warm report server (zmqload.report.server) may make this report: the
    embedded local Spark with its default memory, from a process without a session of its own
    (not --master, --remote, --driver-memory)."""
    if options.no_server or options.debug:
        return False
    if (
        options.master is not None
        or options.remote is not None
        or options.driver_memory is not None
        or "PYSPARK_GATEWAY_PORT" in os.environ
    ):
        return False
    if (
        os.environ.get("ZMQLOAD_SPARK_DRIVER_MEMORY")
        or os.environ.get("ZMQLOAD_REPORT_SERVER", "1") == "0"
    ):
        return False
    if "pyspark.sql" in sys.modules:
        from pyspark.sql import SparkSession

        if SparkSession.getActiveSession() is not None:
            return False
    return True


def receive_records(inputs: build.Inputs) -> int:
    """The receive records of the runs to report, from their Parquet footers (a part whose
    footer cannot be read again counts none: the report leaves it out)."""
    import pyarrow.parquet as pq

    total = 0
    for info in inputs.runs:
        for part in info.parts_of("recvs"):
            try:
                total += pq.read_metadata(part).num_rows
            except Exception:  # noqa: BLE001 - pyarrow raises ArrowInvalid and others on bad bytes
                pass
    return total


def run(options: argparse.Namespace) -> ExitStatus:
    """The report; its exit status, or a ZmqloadError (bad input: exit status 2)."""
    check_installed()
    inputs = build.prepare(options)
    from . import server

    if server_may_run(options) and receive_records(inputs) <= server.MAX_RECEIVE_RECORDS:
        # The report's own options only (the CLI adds its handler); the server says the warnings.
        status = server.run_remote(
            {
                k: v
                for k, v in vars(options).items()
                if isinstance(v, (str, int, float, bool, list, type(None)))
            }
        )
        if status is not None:
            return ExitStatus(status)
    return build.make(options, inputs)
