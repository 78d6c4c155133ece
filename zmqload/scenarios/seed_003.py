"""Claims of the blog post on LINGER at close (003)."""
from __future__ import annotations

from .. import _engine
from .framework import DOES_NOT_HOLD, HOLDS, Outcome, Scenario, ScenarioRunner, Verdict, facts, fates_line, ms


def linger_on_close(r: ScenarioRunner) -> Outcome:
    """A sender with a backlog queued at close (a PUSH well ahead of a slow PULL, with room
    in its pipe), closed with LINGER 0, 1000 and -1; the receiver drains what it can."""
    from ..info import socket_defaults
    defaults = socket_defaults()
    version = ".".join(map(str, _engine.libzmq_version()))
    measured = [f"libzmq {version}: a fresh socket's LINGER is "
                + ", ".join(f"{s} {d['LINGER']}" for s, d in defaults.items())]
    figures = {"default_linger": defaults["PUB"]["LINGER"], "defaults": defaults}
    rate, duration = r.scale(20_000, 20_000), r.scale(1.0, 0.3)
    for linger in (0, 1000, -1):
        res = r.run(f"linger-{linger}", pattern="push-pull", transport="tcp", size=256, rate=rate,
                    duration=duration, sndhwm=1_000_000, rcvhwm=1000, consumer_delay_us=200, linger_ms=linger)
        f = facts(res)
        figures[linger] = f
        measured.append(f"LINGER={linger}: backlog at the sender's close up to {f['queue_peak'].get('messages', 0):,}; "
                        f"{fates_line(f)}; close blocked {ms(f['close_ns'])}, term blocked {ms(f['term_ns'])}")
    lingers = {d["LINGER"] for d in defaults.values()}
    v1 = Verdict("003-1", HOLDS if lingers == {0} else DOES_NOT_HOLD,
                 f"libzmq {version}'s default LINGER is {', '.join(map(str, sorted(lingers)))}", {"defaults": defaults})
    zero, forever = figures[0], figures[-1]
    v3 = Verdict("003-3", HOLDS if zero["dropped_tail"] > 0 and forever["dropped_tail"] == 0 else DOES_NOT_HOLD,
                 f"LINGER 0: {zero['dropped_tail']:,} queued messages discarded at close; LINGER -1: "
                 f"{forever['dropped_tail']:,} (term blocked {ms(forever['term_ns'])} until they left)", {})
    v2 = Verdict("003-2", HOLDS if forever["close_ns"] > 100_000_000 else DOES_NOT_HOLD,
                 f"close() blocked {ms(forever['close_ns'])} with LINGER -1 and a backlog; the wait happens in "
                 f"context term ({ms(forever['term_ns'])})", {})
    return Outcome([v1, v2, v3], measured, figures)


def slow_joiner(r: ScenarioRunner) -> Outcome:
    join_ms = 50
    res = r.run("join-late", pattern="pub-sub", transport="tcp", size=64, rate=r.scale(100_000, 50_000),
                count=r.scale(20_000, 10_000), join_delay_ms=join_ms, sndhwm=0, rcvhwm=0)
    f = facts(res)
    missing = res.streams[0]["missing_ranges"].get(0, [])
    measured = [f"PUB at {res.workload['rate']:,} msg/s; the SUB connected {join_ms} ms after the start: {fates_line(f)}"]
    holds = f["dropped_start"] > 0
    because = (f"the first {f['dropped_start']:,} messages were sent before the subscription arrived" if holds
               else "nothing was missed at the start")
    return Outcome([Verdict("X-1", HOLDS if holds else DOES_NOT_HOLD, because, {})], measured,
                   {"dropped_start": f["dropped_start"], "lost": res.lost, "missing": missing})


SCENARIOS = (
    Scenario("linger-on-close", "A sender with a backlog at close: LINGER 0 / 1000 / -1, and the real default",
             ("003-1", "003-2", "003-3"), linger_on_close),
    Scenario("slow-joiner", "PUB starts sending before the SUB has connected", ("X-1",), slow_joiner),
)
