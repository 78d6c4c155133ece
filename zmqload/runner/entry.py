"""A worker process's entry point: `python -m zmqload.runner.entry` with its WorkerSpec as
JSON on standard input.

Workers are started as this module, not by multiprocessing's spawn, which re-imports the
caller's __main__: that crashed a plain script without an `if __name__ == "__main__":`
guard (and would run its top level again in every worker).
"""

from __future__ import annotations

import signal
import sys

from ..errors import ZmqloadError
from .spec import WorkerSpec
from .workers import run_worker


def main() -> None:
    # The controller handles Ctrl-C and SIGTERM and tells the workers to stop, so a signal to the
    # whole process group (a terminal's Ctrl-C, `timeout`, a service manager's stop) ends the run
    # `interrupted` with every worker's records whole; a worker whose controller is gone stops by
    # itself (its watchdog). SIGKILL still kills a worker (the fault table's way).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    text = sys.stdin.buffer.read()
    if not text.strip():  # the controller was interrupted before it handed over the spec
        return
    try:
        spec = WorkerSpec.from_json(text)
    except (
        ZmqloadError
    ) as exc:  # one line, no traceback (the controller reports how the worker ended)
        print(f"zmqload worker: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_status)
    run_worker(spec)


if __name__ == "__main__":
    main()
