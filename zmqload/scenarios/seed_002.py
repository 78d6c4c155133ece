"""Claims of the blog post on a fast PUB and a slow SUB (002)."""
from __future__ import annotations

from .framework import DOES_NOT_HOLD, HOLDS, Outcome, Scenario, ScenarioRunner, Verdict, depends, facts, fates_line, ms


def slow_subscriber(r: ScenarioRunner) -> Outcome:
    """The post's setup (~1000 msg/s, 100 ms of work per message) and a heavier one
    (4 KiB at 2000 msg/s) whose volume overflows the kernel buffers, at RCVHWM 10, 1000,
    10000; the subscriber drains what is queued at the end, so what it misses is what was
    really dropped."""
    work_us = r.scale(100_000, 10_000)
    rate, duration = r.scale(2_000, 4_000), r.scale(3.0, 1.0)
    measured, figures = [], {}
    for hwm in (10, 1000, 10000):
        res = r.run(f"rcvhwm-{hwm}", pattern="pub-sub", transport="tcp", size=4096, rate=rate, duration=duration,
                    rcvhwm=hwm, consumer_delay_us=work_us)
        f = facts(res)
        figures[hwm] = f
        measured.append(f"RCVHWM={hwm}: {fates_line(f)}; queue peak {f['queue_peak'].get('messages', 0):,}; latency "
                        f"p50 {ms(f['latency_p50_ns'])} max {ms(f['latency_max_ns'])}; consumer RSS "
                        f"{f['consumer_rss_kb'] / 1024:,.0f} MiB")
    small, large = figures[10], figures[10000]
    dropped = {h: f["dropped_mid"] + f["dropped_tail"] + f["dropped_start"] for h, f in figures.items()}
    during = {h: f["delivered"] for h, f in figures.items()}
    v1 = Verdict("002-1", depends("on the HWM: with RCVHWM 10 the missing were dropped, with a large HWM they "
                                  "were queued, not dropped") if dropped[10] and not dropped[10000] else
                 (HOLDS if all(dropped.values()) else DOES_NOT_HOLD),
                 "; ".join(f"RCVHWM {h}: {during[h]:,} received during the run, {figures[h]['drained']:,} still "
                           f"queued at its end, {dropped[h]:,} dropped" for h in figures), {"dropped": dropped})
    extra_mib = (large["consumer_rss_kb"] - small["consumer_rss_kb"]) / 1024
    v2 = Verdict("002-2", depends("on the run: a larger HWM turns drops into a backlog (nothing lost while it "
                                  "fits) but the subscriber is no faster") if dropped[10] and not dropped[10000]
                 else DOES_NOT_HOLD,
                 f"RCVHWM 10: {dropped[10]:,} dropped; RCVHWM 10000: {dropped[10000]:,} dropped, "
                 f"{extra_mib:,.0f} MiB more consumer memory, max latency {ms(small['latency_max_ns'])} -> "
                 f"{ms(large['latency_max_ns'])}; received during the run: {during[10]:,} vs {during[10000]:,}",
                 {"extra_mib": extra_mib})
    return Outcome([v1, v2], measured, figures)


SCENARIOS = (
    Scenario("slow-subscriber", "Fast PUB, SUB doing 100 ms of work per message, RCVHWM 10/1000/10000",
             ("002-1", "002-2"), slow_subscriber),
)
