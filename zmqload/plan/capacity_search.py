"""The max-sustainable-rate search behind `zmqload capacity`: ramp, bisect, re-run the final pass
(docs/CAPACITY.md). `find_max_rate` is the pure search over any probe function; `probe_once` the
real probe, a run judged with the backlog rule."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

from ..contract.workload import MAX_RATE, SearchPlan, Slos, Workload
from ..contract.codec import convert, to_builtins
from ..contract.search_record import BreachEntry, Figures, ProbeEntry
from ..contract.states import Slo
from .slo import Breach, judge
from .slo import figures as judge_figures

if TYPE_CHECKING:
    from ..measure.result import RunResult
    from ..runner.state import ProgressListener

RAMP_FACTOR = 2


@dataclass
class Probe:
    """One probe: its rate per producer and the verdict."""

    rate: int
    passed: bool
    breaches: list[Breach] = field(default_factory=list)  # in slo.ORDER
    generator_limited: bool = False
    confirm: bool = False  # the re-run of the final pass
    error: Optional[str] = None  # the run itself failed (not a verdict)
    run_dir: Optional[str] = None
    figures: Optional[Figures] = None  # None: the probe's run failed before it had figures

    @property
    def failed_slo(self) -> Optional[str]:
        if self.generator_limited and not self.passed:
            return "generator"
        return self.breaches[0].slo if self.breaches else None

    def to_record(self) -> ProbeEntry:
        """The probe as capacity-search.json holds it (contract/search_record.py)."""
        failed = self.failed_slo
        return ProbeEntry(
            rate=self.rate,
            passed=self.passed,
            confirm=self.confirm,
            generator_limited=self.generator_limited,
            failed_slo=None if failed is None else Slo(failed),
            breaches=[
                BreachEntry(
                    slo=Slo(b.slo),
                    measured=b.measured if math.isfinite(b.measured) else None,
                    limit=b.limit,
                    text=b.text,
                )
                for b in self.breaches
            ],
            error=self.error,
            run_dir=self.run_dir,
            figures=self.figures,
        )

    def to_dict(self) -> dict[str, Any]:
        plain: dict[str, Any] = to_builtins(self.to_record())
        return plain


@dataclass
class Outcome:
    """What one search found. `max_sustainable_rate` (per producer) is set only when the
    search converged; `bracket` is [highest passing, lowest failing], either may be None."""

    converged: bool
    max_sustainable_rate: Optional[int]
    bracket: list[Optional[int]]
    failed_slo: Optional[str]
    generator_limited: bool
    reason: str
    probes: list[Probe]

    def to_dict(self) -> dict[str, Any]:
        return {
            "converged": self.converged,
            "max_sustainable_rate": self.max_sustainable_rate,
            "bracket": self.bracket,
            "failed_slo": self.failed_slo,
            "generator_limited": self.generator_limited,
            "reason": self.reason,
            "probes": [p.to_dict() for p in self.probes],
        }


def find_max_rate(
    probe: Callable[[int], Probe],
    plan: SearchPlan,
    max_rate: int = MAX_RATE,
    on_probe: Optional[Callable[[Outcome], None]] = None,
) -> Outcome:
    """Search with `probe(rate) -> Probe` as the module docstring says; at most
    plan.max_probes probes. `on_probe(so_far)`, after every probe that does not end the search:
    the search so far (not converged, its bracket so far), e.g. to record it."""
    probes: list[Probe] = []
    lo: Optional[int] = None  # highest passing rate not since failed
    hi: Optional[int] = None  # lowest failing rate

    def outcome(converged: bool, reason: str, generator: bool = False) -> Outcome:
        at_hi = [p for p in probes if p.rate == hi and not p.passed]
        failed = at_hi[-1].failed_slo if at_hi else None
        return Outcome(
            converged, lo if converged else None, [lo, hi], failed, generator, reason, probes
        )

    step_to: Optional[int] = None  # one precision step below a failed re-run: the next probe
    while len(probes) < plan.max_probes:
        confirm = False
        if step_to is not None:
            rate, step_to = step_to, None
        elif hi is None:
            if lo is not None and lo >= max_rate:
                return outcome(
                    False, f"every probe passed, up to the highest rate {max_rate:,} msg/s"
                )
            rate = plan.start_rate if lo is None else min(lo * RAMP_FACTOR, max_rate)
        elif lo is None:
            if hi <= 1:
                return outcome(False, "every probe failed, down to 1 msg/s")
            rate = max(hi // RAMP_FACTOR, 1)
        else:
            mid = int(round(math.sqrt(lo * hi)))
            if hi - lo > plan.precision * lo and lo < mid < hi:
                rate = mid
            else:
                rate, confirm = lo, True
        result = probe(rate)
        result.confirm = confirm
        probes.append(result)
        if result.error:
            return outcome(False, f"the probe at {rate:,} msg/s could not run: {result.error}")
        if result.generator_limited and not result.passed:
            hi = rate
            return outcome(
                False,
                f"the load generator could not keep its schedule at {rate:,} msg/s per producer "
                f"(reached {(result.figures and result.figures.reached_rate) or 0:,.0f} msg/s in all) "
                f"without pushback from the sockets: add --producers",
                generator=True,
            )
        if result.passed and confirm:
            return outcome(True, f"within {plan.precision:.0%}, the final pass confirmed")
        if result.passed:
            lo = rate
        else:
            hi = rate
            if confirm:  # the pass did not repeat: the next lower pass is the new lower end
                failed_rates = {p.rate for p in probes if not p.passed}
                passes = [
                    p.rate
                    for p in probes
                    if p.passed and p.rate < hi and p.rate not in failed_rates
                ]
                lo = max(passes, default=None)
                below = math.ceil(hi / (1 + plan.precision))
                if lo is not None and lo < below < hi:
                    step_to = below
        if on_probe is not None:
            on_probe(
                outcome(False, f"searching: {len(probes)} probe{'s' * (len(probes) > 1)} so far")
            )
    return outcome(False, f"no answer within --max-probes {plan.max_probes}")


# -- the real probe ------------------------------------------------------------------------------
def probe_workload(template: Workload, rate: int, duration: float, run_name: str) -> Workload:
    """The template at `rate` msg/s per producer for `duration` seconds."""
    values = dataclasses.asdict(template)
    values.update(rate=rate, duration=duration, count=None, run_name=run_name)
    from ..runner.preflight import preflight

    return preflight(Workload(**values).validate())


def figures(result: RunResult) -> Figures:
    """What a probe shows of its run: rates, loss, latency, the queue and memory. A service of
    the user's (req-rep, --role producer): what its answers say, as the judge reads them."""
    judged = judge_figures(result)
    service = result.serves
    since = "round_trip" if service else "intended"

    def us(q: float) -> Optional[float]:
        value = result.latency_us(q, since)
        return None if value is None else round(value, 1)

    peak = result.queue_peak_figures()
    rss = [c.max_rss_kb for c in result.consumers]
    made: Figures = convert(
        {
            "offered_rate": result.workload["rate"] * result.workload["producers"],
            "reached_rate": result.generator.reached_rate,
            # a service's: its answers' rate (run.json summary.service, the report's recv_rate)
            "throughput_msgs": round(
                result.service["answer_rate"] if service else result.throughput_msgs, 1
            ),
            "achieved": None if judged.achieved is None else round(judged.achieved, 6),
            "loss_ratio": judged.judged_loss_ratio,
            "lost": judged.lost,
            "dropped": result.dropped,
            "dropped_restart": result.dropped_restart,
            "stranded": result.stranded,
            "drained": result.drained,
            "eagain": result.eagain,
            "p99_us": us(99),
            "p99_9_us": us(99.9),
            "queue_peak": {
                k: peak.get(k) for k in ("messages", "kernel_messages", "libzmq_messages")
            }
            if peak
            else None,
            "consumer_max_rss_kb": max(rss) if rss else None,
            "lag_ms": result.generator.lag_ms,
            "blocked_ms": result.generator.blocked_ms,
        },
        Figures,
    )
    return made


def probe_once(
    template: Workload,
    slos: Slos,
    rate: int,
    duration: float,
    run_name: str,
    progress: Optional[ProgressListener] = None,
) -> Probe:
    """One real run at `rate`, judged by `slos` (backlog check on)."""
    from ..errors import RunError
    from ..runner import run

    w = probe_workload(template, rate, duration, run_name)
    try:
        result = run(w, progress=progress, slos=slos)
    except RunError as exc:
        return Probe(rate, False, error=str(exc))
    if result.status != "complete":
        return Probe(rate, False, error=f"run {result.status}", run_dir=result.run_dir)
    breaches: list[Breach] = judge(result, slos, backlog=True)
    return Probe(
        rate,
        not breaches and not result.generator_limited,
        breaches,
        result.generator_limited,
        run_dir=result.run_dir,
        figures=figures(result),
    )
