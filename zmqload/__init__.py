"""zmqload: load generator and capacity-planning tool for ZeroMQ.

    from zmqload import Workload, run
    result = run(Workload(pattern="push-pull", size=64, count=1_000_000))
    print(result.throughput_msgs, result.lost, result.latency_us(99))
"""
__version__ = "0.1.0"

from .config import Workload                     # noqa: E402
from .errors import ConfigError, RunError, ZmqloadError   # noqa: E402
from .result import RunResult                    # noqa: E402


def run(workload: "Workload | None" = None, progress=None, **options) -> "RunResult":
    """Run one workload (a Workload, or its fields as keyword arguments) and return its
    RunResult. Records are written under `workload.out` (default ./runs)."""
    from .runner import run as _run
    if workload is None:
        workload = Workload(**options)
    elif options:
        raise TypeError("pass either a Workload or keyword options, not both")
    return _run(workload, progress=progress)


__all__ = ["Workload", "RunResult", "run", "ConfigError", "RunError", "ZmqloadError", "__version__"]
