"""zmqload: load generator and capacity-planning tool for ZeroMQ.

    from zmqload import Workload, run
    result = run(Workload(pattern="push-pull", size=64, count=1_000_000))
    print(result.throughput_msgs, result.lost, result.latency_us(99))
    print(result.run_dir)        # ./runs/run=<id>: run.json and every message, in Parquet

`Workload` fields accept what the command line accepts (`Workload(rate="10k")`);
`OPTIONS` is the option table behind both (flag, range, help of every field).
"""

from typing import TYPE_CHECKING, Any  # noqa: E402

from .versions import ZMQLOAD_VERSION as __version__  # noqa: E402
from .contract.workload import OPTIONS, Option, Workload  # noqa: E402
from .errors import ConfigError, RunError, ZmqloadError  # noqa: E402
from .measure.result import RunResult  # noqa: E402

if TYPE_CHECKING:
    from .runner.state import ProgressListener


def run(
    workload: "Workload | None" = None, progress: "ProgressListener | None" = None, **options: Any
) -> "RunResult":
    """Run one workload (a Workload, or its fields as keyword arguments, checked as
    `Workload(**options)` is) and return its RunResult.

    Every run writes a directory `<out>/run=<run_id>/` (run.json and Parquet records):
    `out` is the Workload's `out` field, default "runs", relative to the current working
    directory; `RunResult.run_dir` is the directory written. Raises ConfigError for bad
    options before anything is written, RunError when the run fails (its run.json says so),
    and KeyboardInterrupt after an interrupted run was recorded."""
    from .runner import run as _run

    if workload is None:
        workload = Workload(**options)
    elif options:
        raise TypeError("pass either a Workload or keyword options, not both")
    return _run(workload, progress=progress)


__all__ = [
    "Workload",
    "OPTIONS",
    "Option",
    "RunResult",
    "run",
    "ConfigError",
    "RunError",
    "ZmqloadError",
    "__version__",
]
