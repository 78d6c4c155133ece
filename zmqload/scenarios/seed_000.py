"""Claims of the 2014 zeromq-dev post (000): PUSH/PULL, RCVHWM on the PULL, a sender that
terminates its context right after sending."""
from __future__ import annotations

from .framework import (DOES_NOT_HOLD, HOLDS, Outcome, Scenario, ScenarioRunner, Verdict, depends, facts,
                        fates_line, ms)


def linger_tail(r: ScenarioRunner) -> Outcome:
    # The post's script: 10 messages sent over 2 s, received over 4 s, default LINGER.
    gap_s, work_s = r.scale(0.2, 0.02), r.scale(0.4, 0.04)
    measured, figures = [], {"runs": []}
    for transport in ("ipc", "tcp"):
        for rcvhwm in (1, 10, None):
            res = r.run(f"{transport}-rcvhwm-{rcvhwm or 'default'}", pattern="push-pull", transport=transport,
                        size=64, count=10, rate=round(1 / gap_s), rcvhwm=rcvhwm, consumer_delay_us=work_s * 1e6,
                        drain="slow", drain_timeout_ms=int(work_s * 5000))
            f = facts(res)
            f["missing"] = res.streams[0]["missing_ranges"]["all"]
            f["last_recv_after_term_ms"] = _last_recv_after_term_ms(res)
            figures["runs"].append(f)
            measured.append(f"{transport}, RCVHWM {rcvhwm or 'default'}: {res.unique_received}/10 arrived "
                            f"({fates_line(f)}); context term blocked {ms(f['term_ns'])}, the PULL's last receive "
                            f"came {f['last_recv_after_term_ms']:,.0f} ms after term returned")
    runs = figures["runs"]
    lossy = {(f["transport"], f["rcvhwm"]) for f in runs if f["dropped_tail"]}
    small = [f for f in runs if f["rcvhwm"] == 1]
    larger = [f for f in runs if f["rcvhwm"] != 1]
    if lossy and all((f["transport"], 1) in lossy for f in small) and not any(f["dropped_tail"] for f in larger):
        v2 = Verdict("000-2", HOLDS, f"RCVHWM 1 lost the tail on {', '.join(sorted(t for t, _ in lossy))}; "
                     "RCVHWM 10 and the default lost nothing", {"lossy": sorted(map(str, lossy))})
    elif lossy:
        where = "; ".join(f"{t} RCVHWM {h or 'default'}" for t, h in sorted(lossy, key=str))
        v2 = Verdict("000-2", depends(f"on the transport and RCVHWM: tail lost with {where}"),
                     f"tail losses (dropped at close) with {where}; none elsewhere", {"lossy": sorted(map(str, lossy))})
    else:
        v2 = Verdict("000-2", DOES_NOT_HOLD, "every run delivered all 10 messages, RCVHWM 1 included", {})
    complete = [f for f in larger if f["delivered"] + f["drained"] == 10]
    waited = [f for f in complete if f["last_recv_after_term_ms"] <= 0]
    if complete and not waited:
        v1 = Verdict("000-1", depends("on what 'has' means: every message arrives, but term returns once they "
                                      "left the PUSH side, not when the PULL received them"),
                     f"with RCVHWM 10/default all 10 arrived, yet the PULL's last receive came up to "
                     f"{max(f['last_recv_after_term_ms'] for f in complete):,.0f} ms after term returned", {})
    elif complete:
        v1 = Verdict("000-1", HOLDS, "term returned only after the PULL had received every message", {})
    else:
        v1 = Verdict("000-1", DOES_NOT_HOLD, "messages were lost even with RCVHWM 10/default", {})
    return Outcome([v1, v2], measured, figures)


def _last_recv_after_term_ms(res) -> float:
    """How long after the sender's context term returned the PULL got its last message."""
    p, c = res.producers[0], res.consumers[0]
    t_term_end = p.get("t_last_send_ns", 0) + p.get("close_ns", 0) + p.get("term_ns", 0)
    return (c.get("t_last_recv_ns", 0) - t_term_end) / 1e6


SCENARIOS = (
    Scenario("linger-tail", "PUSH/PULL, slow receiver, sender terminates right after sending (RCVHWM 1/10/default, "
             "ipc and tcp)", ("000-1", "000-2"), linger_tail),
)
