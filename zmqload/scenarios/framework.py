"""What every scenario shares: runs labelled for the report, the standard measurements of
a run, bounded waits, and verdicts computed from numbers.

A scenario settles one or more claims (zmqload.scenarios.claims). It runs ordinary
zmqload runs (their run directories feed the Spark report too) or, where a claim is about
a socket call itself, probes the engine's libzmq directly; then states per claim a verdict
computed from the measurements: "holds", "does not hold", or "depends: <condition>".
`fast=True` shrinks counts and delays for the test suite; questions and rules stay.
Each scenario declares how long its full form takes (`expected_s`, measured): `scenario
list` and `scenario run` say it, and `run` says when a scenario took much longer.

A scenario leaves nothing in the temp directory: a directory it needs there (an ipc
endpoint's) comes from `scratch_dir`, and `run_scenario` removes them all when the scenario
ends, however it ends.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence, TypeVar

from ..contract.fates import AMBIGUOUS_TAIL
from ..contract.workload import Workload

if TYPE_CHECKING:
    from ..measure.result import RunResult

T = TypeVar("T")

HOLDS, DOES_NOT_HOLD = "holds", "does not hold"

_scratch: list[str] = []  # scratch_dir's directories not yet removed


def scratch_dir(prefix: str) -> str:
    """A new private directory in the temp directory (for ipc endpoints), removed with
    everything in it (socket files) by remove_scratch_dirs when the scenario ends."""
    path = tempfile.mkdtemp(prefix=prefix)
    _scratch.append(path)
    return path


def remove_scratch_dirs() -> None:
    """Remove every scratch_dir made so far (run_scenario calls it once the scenario ends)."""
    while _scratch:
        shutil.rmtree(_scratch.pop(), ignore_errors=True)


def depends(condition: str) -> str:
    return f"depends: {condition}"


@dataclass
class Verdict:
    claim: str  # claim id
    verdict: str  # holds / does not hold / depends: ...
    because: str  # one line, with the numbers
    measurements: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    verdicts: list[Verdict]
    measured: list[str]  # lines a person reads
    figures: dict[Any, Any] = field(
        default_factory=dict
    )  # by name (or by the value varied): JSON-ready
    run_dirs: list[str] = field(default_factory=list)

    def verdict(self, claim_id: str) -> Verdict:
        return next(v for v in self.verdicts if v.claim == claim_id)


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    claims: tuple[str, ...]  # claim ids it settles
    body: Callable[["ScenarioRunner"], Outcome]
    # its full form's wall time in seconds on the 2-core machine, quiet. Measured while the machine was
    # shared (load 4-8), times 0.85: the same 19 scenarios took 13 min quiet, 15.3 min shared
    expected_s: int
    reads_header: bool = False  # reads libzmq's zmq.h (seed_001.zmq_header): refused without it


class ScenarioRunner:
    """Runs the workloads of one scenario, labelled so the report can group them."""

    def __init__(self, scenario: Scenario, out: str, fast: bool, libzmq: Optional[str] = None):
        self.scenario, self.out, self.fast, self.libzmq = scenario, out, fast, libzmq
        self.run_dirs: list[str] = []

    def scale(self, full: T, fast: T) -> T:
        return fast if self.fast else full

    def run(self, variant: str, **options: Any) -> RunResult:
        from ..runner import run

        options.setdefault("out", self.out)
        if self.libzmq is not None:  # None: --libzmq's default
            options.setdefault("libzmq", self.libzmq)
        label = {"scenario": self.scenario.name, "variant": variant, "fast": self.fast}
        result = run(Workload(label=label, **options))
        self.run_dirs.append(result.run_dir)
        return result


def facts(result: RunResult) -> dict[str, Any]:
    """The standard measurements of one run: settings, counts by fate, queue peak by
    place, latency, memory and the time shutdown blocked."""
    w = result.workload
    lat = result.latency_summary()
    producers, consumers = result.producers, result.consumers
    return {
        "libzmq": result.versions.get("libzmq"),
        "pattern": w["pattern"],
        "transport": w["transport"],
        "size": w["size"],
        "rate": w["rate"],
        "sndhwm": w["sndhwm"],
        "rcvhwm": w["rcvhwm"],
        "linger_ms": w["linger_ms"],
        "attempted": result.attempted,
        "sent": result.sent,
        "eagain": result.eagain,
        "timeouts": result.timeout,
        "delivered": result.delivered,
        "drained": result.drained,
        "dropped_start": result.dropped_start,
        "dropped_mid": result.dropped_mid,
        "dropped_tail": result.dropped_tail,
        "dropped_reset": result.dropped_reset,
        "stranded": result.stranded,
        "expected": result.expected,
        "drain": result.drain.get("ended"),
        "tail_placement": result.drain.get("tail_placement"),
        AMBIGUOUS_TAIL: result.drain.get(AMBIGUOUS_TAIL, 0),
        "queue_peak": result.queue.get("peak", {}),
        "latency_p50_ns": lat["p50"],
        "latency_max_ns": lat["max"],
        "consumer_rss_kb": max((c.get("max_rss_kb", 0) for c in consumers), default=0),
        "producer_rss_kb": max((p.get("max_rss_kb", 0) for p in producers), default=0),
        "close_ns": max((p.get("close_ns", 0) for p in producers), default=0),
        "term_ns": max((p.get("term_ns", 0) for p in producers), default=0),
    }


def fates_line(f: dict[str, Any]) -> str:
    return (
        f"sent {f['sent']:,}: delivered {f['delivered']:,}, drained {f['drained']:,}, dropped "
        f"{f['dropped_start'] + f['dropped_mid'] + f['dropped_tail']:,} (start {f['dropped_start']:,} / mid "
        f"{f['dropped_mid']:,} / tail {f['dropped_tail']:,}{_ambiguous(f)}), stranded {f['stranded']:,}"
    )


def _ambiguous(f: dict[str, Any]) -> str:
    n = f.get(AMBIGUOUS_TAIL) or 0
    return f", {n:,} of the tail ambiguous: mid-run or at close" if n else ""


def bounded(call: Callable[[], object], limit_s: float) -> tuple[float, bool]:
    """Run a call that may block forever (zmq_ctx_term) in a thread: (seconds it took or
    the limit, whether it returned). A call still blocked at the limit is left to the
    caller to release (close the socket it waits for)."""
    thread = threading.Thread(target=call, daemon=True)
    start = time.monotonic()
    thread.start()
    thread.join(limit_s)
    return time.monotonic() - start, not thread.is_alive()


def blocked_until(
    call: Callable[[], object],
    limit_s: float,
    release: Callable[[], object] | None = None,
    release_limit_s: float = 10.0,
) -> dict[str, Any]:
    """Run a call that may block forever (zmq_ctx_term) in a thread. If it is still blocked
    after limit_s, run release() (close the socket it waits for, bind the peer its backlog
    waits for) and time how long the call then takes to return.

    Returns {"returned": bool, "took_s": seconds until it returned (None if it never did),
    "blocked_for_at_least_s": limit_s if it was still blocked at the limit (else None),
    "after_release_ms": time from release() to the return (None if not released or never
    returned)}."""
    done: list[float] = []

    def timed() -> None:
        call()
        done.append(time.monotonic())

    start = time.monotonic()
    _, returned = bounded(timed, limit_s)
    out: dict[str, Any] = {
        "returned": returned,
        "took_s": None,
        "blocked_for_at_least_s": None,
        "after_release_ms": None,
    }
    if returned:
        out["took_s"] = done[0] - start
        return out
    out["blocked_for_at_least_s"] = round(limit_s, 3)
    if release is None:
        return out
    released = time.monotonic()
    release()
    deadline = released + release_limit_s
    while not done and time.monotonic() < deadline:
        time.sleep(0.001)
    if done:
        out.update(
            returned=True, took_s=done[0] - start, after_release_ms=(done[0] - released) * 1000
        )
    return out


def ms(ns: Optional[float]) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.1f} ms"


def ranges(pairs: Iterable[Sequence[int]]) -> str:
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in pairs) or "none"
