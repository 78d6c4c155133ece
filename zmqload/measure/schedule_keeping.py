"""Did the producers keep their open-loop schedule, and if not, whose fault was it? Lag not
explained by time blocked in full sockets is the generator's own; when sustained, the run is
`generator_limited` (docs/ARCHITECTURE.md, "Judging a run")."""

from __future__ import annotations

from ..contract.control import ProducerFinal
from ..contract.run_record import GeneratorVerdict
from .histogram import Histogram

LAG_SHARE = 0.02  # unexplained lag above 2% of the sending span: the schedule was not kept
LAG_FLOOR_NS = 2_000_000  # below 2 ms of lag, a scheduling hiccup at the very end, not a limit


def schedule_keeping(
    rate: int, t0_ns: int, producers: list[ProducerFinal], round_trip: bool = False
) -> GeneratorVerdict:
    """The verdict on one run from the producers' finals (attempted, t_last_send_ns, blocked_ns
    and the lateness histogram). Unpaced runs have no schedule to keep. A
    round-trip run's lag is the wait for the replies (a REQ sends its next request once answered):
    pushback by the service, all of it, so its schedule counts the requests the lag held back
    (a service answering 300/s offered 25k/s was "achieved 1.0" on its attempts alone) and
    `generator_limited` stays False (the wait for a reply is not timed apart from the generator's)."""
    verdict = GeneratorVerdict(scheduled_rate=rate * len(producers), t0_ns=t0_ns)
    if not rate or not t0_ns:
        return verdict
    reached, limited, scheduled = 0.0, False, 0
    lags: list[int] = []
    blocked: list[int] = []
    late_p90: list[int] = []
    for p in producers:
        # ints, not numpy's: a salvaged final's counters come from the records
        attempted, t_last = int(p.counters.attempted), int(p.counters.t_last_send_ns)
        if attempted < 2 or t_last <= t0_ns:
            continue
        span_ns = t_last - t0_ns
        lag_ns = max(0, t_last - (t0_ns + (attempted - 1) * 10**9 // rate))
        blocked_ns = int(p.counters.blocked_ns)
        reached += (attempted - 1) * 1e9 / span_ns
        # what the schedule called for until the producer stopped, counting the lag the sockets
        # caused (pushback held back load that was offered) but not the generator's own (a late
        # wake-up just before the end skips the rest of the schedule: never offered)
        pushback_ns = lag_ns if round_trip else min(lag_ns, blocked_ns)
        scheduled += attempted + pushback_ns * rate // 10**9
        lateness = Histogram.from_payload(p.lateness).percentile(90) if p.lateness else lag_ns
        lags.append(lag_ns)
        blocked.append(blocked_ns)
        late_p90.append(lateness or 0)
        tolerated = max(LAG_FLOOR_NS, LAG_SHARE * span_ns)
        limited |= (
            not round_trip and lag_ns - blocked_ns > tolerated and (lateness or 0) > tolerated
        )
    if lags:
        verdict = GeneratorVerdict(
            generator_limited=limited,
            scheduled_rate=verdict.scheduled_rate,
            reached_rate=round(reached, 1),
            lag_ms=max(lags) / 1e6,
            blocked_ms=max(blocked) / 1e6,
            lateness_p90_ms=max(late_p90) / 1e6,
            scheduled_messages=scheduled,
            t0_ns=t0_ns,
        )
    return verdict


def describe(verdict: GeneratorVerdict) -> str | None:
    """One line for a run whose generator could not keep its schedule, else None."""
    if not verdict.generator_limited:
        return None
    return (
        f"generator limited: the producers reached {verdict.reached_rate or 0:,.0f} msg/s of the "
        f"{verdict.scheduled_rate:,} scheduled, {verdict.lag_ms or 0:,.1f} ms behind with only "
        f"{verdict.blocked_ms or 0:,.1f} ms blocked by the sockets (the load generator, not the system "
        f"under test, set the pace: add --producers or lower --rate)"
    )
