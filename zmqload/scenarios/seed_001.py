"""Claims of the blog post on HWM "not dropping" behind a proxy (001)."""
from __future__ import annotations

from .framework import DOES_NOT_HOLD, HOLDS, Outcome, Scenario, ScenarioRunner, Verdict, depends, facts, fates_line, ms


def hwm_behaviour(r: ScenarioRunner) -> Outcome:
    """Drop or block at HWM: a stalled consumer, blocking sends with SNDTIMEO (a send that
    cannot complete in time blocks) and DONTWAIT sends (EAGAIN or not)."""
    count, timeout_ms = r.scale(20_000, 10_000), 50
    tight = dict(size=1024, count=count, sndhwm=1, rcvhwm=1, sndbuf=4096, rcvbuf=4096,
                 consumer_delay_us=r.scale(100_000, 50_000), duration=r.scale(3.0, 1.5),
                 drain_timeout_ms=200, linger_ms=0)
    measured, figures, found = [], {}, {}
    for pattern, socket in (("push-pull", "PUSH"), ("dealer-router", "DEALER"), ("pub-sub", "PUB")):
        blocking = r.run(f"{pattern}-timeout", pattern=pattern, transport="tcp", send_mode="timeout",
                         sndtimeo_ms=timeout_ms, **tight)
        nowait = r.run(f"{pattern}-dontwait", pattern=pattern, transport="tcp", send_mode="dontwait", **tight)
        fb, fn = facts(blocking), facts(nowait)
        blocks = blocking.timeout > 0
        drops = blocking.dropped_mid + blocking.dropped_tail > 0 and not blocks
        found[socket] = "blocks" if blocks else "drops" if drops else "neither (queues had room)"
        figures[pattern] = {"timeouts": blocking.timeout, "dropped_blocking": blocking.dropped,
                            "eagain": nowait.eagain, "attempted_dontwait": nowait.attempted,
                            "dropped_dontwait": nowait.dropped, "behaviour": found[socket],
                            "blocking": fb, "dontwait": fn}
        measured.append(f"{socket}: blocking send, SNDTIMEO {timeout_ms} ms -> {blocking.timeout:,} timed out, "
                        f"{fates_line(fb)}; DONTWAIT -> EAGAIN on {nowait.eagain:,} of {nowait.attempted:,}, "
                        f"{fates_line(fn)}")
    claimed = {"PUSH": "drops", "PUB": "drops", "DEALER": "blocks"}
    wrong = [s for s, b in claimed.items() if found[s] != b]
    v2 = Verdict("001-2", DOES_NOT_HOLD if wrong else HOLDS,
                 "; ".join(f"{s} {found[s]} ({figures[p]['timeouts']:,} sends timed out, "
                           f"{figures[p]['dropped_blocking']:,} dropped; claimed: {claimed[s]})"
                           for p, s in (("push-pull", "PUSH"), ("pub-sub", "PUB"), ("dealer-router", "DEALER"))),
                 {"measured": found, "claimed": claimed})
    pub = figures["pub-sub"]
    v4 = Verdict("001-4", DOES_NOT_HOLD if pub["eagain"] == 0 else HOLDS,
                 f"PUB with DONTWAIT at HWM 1: EAGAIN on {pub['eagain']:,} of {pub['attempted_dontwait']:,} sends, "
                 f"while {pub['dropped_dontwait']:,} accepted messages were dropped silently", {})
    push = figures["push-pull"]
    v24 = Verdict("002-4", depends("on the socket type: PUSH/DEALER block (EAGAIN with DONTWAIT), PUB neither "
                                   "blocks nor errors, it drops"),
                  f"PUSH: {push['timeouts']:,} sends timed out, EAGAIN {push['eagain']:,}; PUB: "
                  f"{pub['timeouts']:,} timeouts, {pub['eagain']:,} EAGAIN, {pub['dropped_blocking']:,} dropped", {})
    return Outcome([v2, v4, v24], measured, figures)


def proxy_pileup(r: ScenarioRunner) -> Outcome:
    """PUB -> XSUB | proxy | XPUB -> slow SUB with SNDHWM 100 on the PUB, then on the
    proxy's XPUB too: where do messages wait, and do drops appear."""
    rate, duration = r.scale(20_000, 10_000), r.scale(2.0, 0.5)
    measured, figures = [], {}
    for variant, extra in (("pub-only", {}), ("pub-and-proxy", {"proxy_sndhwm": 100})):
        res = r.run(variant, pattern="proxy", transport="tcp", size=256, rate=rate, duration=duration,
                    sndhwm=100, consumer_delay_us=200, drain_timeout_ms=500, **extra)
        f = facts(res)
        figures[variant] = f
        peak = f["queue_peak"]
        measured.append(f"SNDHWM=100 on {variant.replace('-', ' ')}: {fates_line(f)}; queue peak "
                        f"{peak.get('messages', 0):,} messages ({peak.get('kernel_messages', 0):,} in kernel "
                        f"buffers, {peak.get('libzmq_messages', 0):,} in libzmq pipes); p99 latency "
                        f"{ms(res.latency_summary()['p99'])}")
    a, b = figures["pub-only"], figures["pub-and-proxy"]
    bound = 4 * 100
    peak_a, peak_b = a["queue_peak"].get("messages", 0), b["queue_peak"].get("messages", 0)
    drops_b = b["dropped_mid"] + b["dropped_tail"]
    verdict = HOLDS if peak_b <= bound and drops_b else DOES_NOT_HOLD
    because = (f"with SNDHWM 100 on the PUB only up to {peak_a:,} messages waited; with the XPUB at 100 too "
               f"{peak_b:,} ({b['queue_peak'].get('kernel_messages', 0):,} of them in kernel buffers), and "
               f"{drops_b:,} were dropped")
    return Outcome([Verdict("001-5", verdict, because, {"bound": bound})], measured, figures)


SCENARIOS = (
    Scenario("hwm-behaviour", "Drop or block at HWM, with blocking sends and with DONTWAIT",
             ("001-2", "001-4", "002-4"), hwm_behaviour),
    Scenario("proxy-pileup", "PUB -> XSUB/XPUB proxy -> slow SUB, SNDHWM 100 on the PUB (and the XPUB)",
             ("001-5",), proxy_pileup),
)
