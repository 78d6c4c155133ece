"""Versions and host facts recorded in every run and shown by `zmqload info`."""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
from typing import Any

ZMQLOAD_VERSION = "0.1.0"
"""This zmqload's version (pyproject.toml's); `zmqload.__version__` hands it on."""


def versions(libzmq: str | None = None) -> dict[str, str]:
    """`libzmq`: the version of a run's libzmq (--libzmq); None: the one this process's engine runs."""
    import numpy
    import pyarrow
    import zmq

    from . import _engine

    return {
        "zmqload": ZMQLOAD_VERSION,
        "libzmq": libzmq or ".".join(map(str, _engine.libzmq_version())),
        "pyzmq": zmq.__version__,
        "pyzmq_libzmq": zmq.zmq_version(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "pyarrow": pyarrow.__version__,
    }


def host() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python_executable": sys.executable,
    }


def clock_pair() -> dict[str, Any]:
    """A (realtime, monotonic) pair taken together, so runs of several hosts can be aligned."""
    from . import _engine

    before = _engine.now_ns()
    realtime = time.time_ns()
    after = _engine.now_ns()
    # how the loops read it per message (csrc/zl_clock.h): "tsc" (CLOCK_MONOTONIC through one
    # rdtsc, anchored each slice) or "clock_gettime"
    return {
        "source": "CLOCK_MONOTONIC",
        "realtime_ns": realtime,
        "monotonic_ns": (before + after) // 2,
        "pair_uncertainty_ns": after - before,
        "stamps": "tsc" if _engine.TICK_STAMPS else "clock_gettime",
    }
