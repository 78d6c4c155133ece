"""The words a run's record uses for its state, as str-valued enums: the JSON keeps the
plain words ("complete", "fast", ...), and a member compares equal to its word, so a
Workload's `drain="fast"` and `DrainMode.FAST` are the same value."""

from __future__ import annotations

import enum


class Word(str, enum.Enum):
    """A str enum that reads as its word everywhere: str(), f-strings, JSON (Python 3.11's
    f-string of a plain (str, Enum) member is "RunStatus.COMPLETE")."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class RunStatus(Word):
    """run.json["status"]: how the run ended (README, "Exit status")."""

    RUNNING = "running"  # written at the start; a run left so died with its controller
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM: what was recorded is kept
    FAILED = "failed"  # a worker died or failed, the disk filled, the controller died

    @property
    def cut_short(self) -> bool:
        """Its figures cover only what was recorded before it stopped."""
        return self in (RunStatus.RUNNING, RunStatus.INTERRUPTED)


class DrainMode(Word):
    """--drain: what the consumers do once the producers are done."""

    FAST = "fast"  # stop the simulated work, read what is queued
    SLOW = "slow"  # keep the simulated work
    NONE = "none"  # close at once (what is unreceived is stranded)


class DrainEnd(Word):
    """run.json["drain"]["ended"]: why the drain stopped."""

    COMPLETE = "complete"  # everything expected arrived
    IDLE = "idle"  # nothing arrived for --drain-timeout-ms: what is missing was dropped
    LIMIT = "limit"  # cut short at --drain-limit-s: what is missing is stranded
    NONE = "none"  # no drain (--drain none, --close-order consumer-first)

    @property
    def completed(self) -> bool:
        """The drain showed the queues empty: a missing message was dropped, not stranded."""
        return self in (DrainEnd.COMPLETE, DrainEnd.IDLE)


class CloseOrder(Word):
    """--close-order: who closes first once the producers are done."""

    PRODUCER_FIRST = "producer-first"
    CONSUMER_FIRST = "consumer-first"
    AFTER_DRAIN = "after-drain"


class SearchStatus(Word):
    """capacity-search.json["status"]: how far `zmqload capacity` got (docs/CAPACITY.md)."""

    RUNNING = "running"  # written before the first probe and after every probe; left so: killed
    COMPLETE = "complete"  # every combination searched (each found an answer or said why not)
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM: the probes so far are kept
    FAILED = "failed"  # an error stopped the search (said on stderr)

    @property
    def cut_short(self) -> bool:
        """The search stopped inside a combination: its last search has no ending of its own."""
        return self is not SearchStatus.COMPLETE


class Slo(Word):
    """A service-level objective by its option's name (zmqload.plan.slo.ORDER, the order breaches are
    named in), and `generator`: the load generator, not the system, was the limit (a search's
    failed_slo only)."""

    MAX_LOSS = "max-loss"
    MIN_ACHIEVED = "min-achieved"
    BACKLOG = "backlog"
    SLO_P99_US = "slo-p99-us"
    SLO_RESTART_LOST = "slo-restart-lost"
    SLO_RECOVERY_MS = "slo-recovery-ms"
    GENERATOR = "generator"


class SweepStatus(Word):
    """sweep-<id>.json["status"] (docs/SWEEPS.md)."""

    RUNNING = "running"  # rewritten after every run; left so: the sweep was killed
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM


class PointStatus(Word):
    """A sweep point's status: its run's (RunStatus) once run, else pending or not run."""

    PENDING = "pending"
    COMPLETE = "complete"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    NOT_RUN = "not run"  # the sweep was interrupted before it


def words(kind: type[enum.Enum]) -> tuple[str, ...]:
    """The accepted words of one of these enums, in order (the option table's choices)."""
    return tuple(str(member.value) for member in kind)
