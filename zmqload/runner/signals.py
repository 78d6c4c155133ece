"""SIGINT and SIGTERM while a run is recorded, so that every phase ends with a final run.json:
raised in the phases that can stop at once, held (counted, acted on after) in the others; and the
tests' pause, ZMQLOAD_TEST_PAUSE_IN (docs/RELIABILITY.md, "Signals")."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any, Iterator

PAUSE_ENV = "ZMQLOAD_TEST_PAUSE_IN"
PAUSE_IN = os.environ.get(PAUSE_ENV, "")
"""The phase a test asked the run to wait in ("" none): read once, when zmqload starts."""
PAUSE_LIMIT_S = 60.0


class RunSignals:
    """SIGINT and SIGTERM of one run: counted; raised as KeyboardInterrupt in a raised section,
    else pending until something acts on them (take(), or a raised section beginning)."""

    def __init__(self) -> None:
        self.count = 0  # signals received since the run began
        self.pending = 0  # of those, received while held and not acted on yet
        self.modes: list[bool] = []  # innermost last; True raised, False held (none: raised)
        self.installed: dict[int, Any] = {}  # signal -> the handler it had before

    def raising(self) -> bool:
        return not self.modes or self.modes[-1]

    def handler(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.raising():
            self.pending = 0
            raise KeyboardInterrupt
        self.pending += 1

    def take(self) -> bool:
        """Whether a signal came while held since the last look (it is acted on now)."""
        came, self.pending = self.pending > 0, 0
        return came

    def install(self) -> None:
        """On the main thread only (elsewhere the caller's own handling stays)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous = signal.getsignal(sig)
            if sig == signal.SIGINT and previous is not signal.default_int_handler:
                continue  # ignored (`&`, nohup) or the caller's own: left as it is
            self.installed[sig] = signal.signal(sig, self.handler)

    def restore(self) -> None:
        for sig, previous in self.installed.items():
            signal.signal(sig, previous)
        self.installed.clear()

    @contextlib.contextmanager
    def mode(self, raised: bool, then_raise: bool = False) -> Iterator[None]:
        """A section raised or held. A raised one begins by raising what is pending; a held one
        with `then_raise` raises what came in it once it ended (a write inside a raised phase)."""
        self.modes.append(raised)
        try:
            if raised and self.pending:
                self.pending = 0
                raise KeyboardInterrupt
            yield
        finally:
            self.modes.pop()
        if then_raise and self.pending and self.raising():
            self.pending = 0
            raise KeyboardInterrupt


_active: list[RunSignals] = []


@contextlib.contextmanager
def handled() -> Iterator[RunSignals]:
    """The run's signals from here to the end of the block (a sweep's or a search's, and the runs
    in it, share the outermost one)."""
    if _active:
        yield _active[-1]
        return
    signals = RunSignals()
    signals.install()
    _active.append(signals)
    try:
        yield signals
    finally:
        _active.pop()
        signals.restore()


def current() -> RunSignals:
    """The running run's signals (an idle one, never signalled, outside a run)."""
    return _active[-1] if _active else RunSignals()


def held(then_raise: bool = False) -> contextlib.AbstractContextManager[None]:
    """A step that must finish: a signal in it is counted, not raised (nothing held outside a
    run); `then_raise`: raised once the step is done, if the section around it is raised."""
    return _active[-1].mode(False, then_raise) if _active else contextlib.nullcontext()


def raised() -> contextlib.AbstractContextManager[None]:
    """A step a signal stops (KeyboardInterrupt), one pending included."""
    return _active[-1].mode(True) if _active else contextlib.nullcontext()


def pause_in(phase: str) -> None:
    """The tests' pause (ZMQLOAD_TEST_PAUSE_IN, above): wait here until a signal comes."""
    if PAUSE_IN != phase:
        return
    count = _active[-1].count if _active else 0  # before the line: a test signals once it reads it
    print(f"zmqload: test pause in {phase}", file=sys.stderr, flush=True)
    deadline = time.monotonic() + PAUSE_LIMIT_S
    while (_active[-1].count if _active else 0) == count and time.monotonic() < deadline:
        time.sleep(0.01)  # a raised signal ends it with KeyboardInterrupt, a held one by its count
