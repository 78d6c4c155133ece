"""Scenarios for claims 000-3, 000-4 (the zeromq-dev post) and 003-4, 003-5 (the LINGER blog
post), each in its fast form: the measurements and the verdict rules (recomputed here from
the figures, never a fixed verdict string), and one key figure cross-checked against a
plain pyzmq measurement written here that shares no code with zmqload (pyzmq bundles its
own libzmq, zmq.zmq_version())."""

from __future__ import annotations

import tempfile
import threading
import time

import pytest
import zmq

from test_scenarios import _check_verdicts, scenario_out  # noqa: F401  (the module's fixture)
from zmqload.contract.fates import FATES
from zmqload.scenarios import run_scenario
from zmqload.scenarios.framework import DOES_NOT_HOLD, HOLDS
from zmqload.scenarios.seed_000 import (
    BOUNDED_RSS_SHARE,
    CANDIDATES_000_4,
    LONG_PAUSE,
    ONCE,
    RSS_NOISE_MIB,
    SHORT_PAUSE,
)


def _check_form(outcome, scenario):
    _check_verdicts(outcome, scenario)
    assert all(v.measurements for v in outcome.verdicts)


# -- plain pyzmq probes (no zmqload code) ---------------------------------------------------------


def _ipc() -> str:
    return f"ipc://{tempfile.mkdtemp(prefix='pyzmq-check-')}/s"


def _pyzmq_term_with_open_socket(wait_s: float = 0.5) -> dict:
    """ctx.term() in a thread with a fresh PUSH (LINGER 0, nothing sent) still open."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 0)
    thread = threading.Thread(target=ctx.term, daemon=True)
    thread.start()
    thread.join(wait_s)
    blocked = thread.is_alive()
    closed_at = time.monotonic()
    sock.close()
    thread.join(5)
    return {
        "blocked": blocked,
        "returned_after_close_s": time.monotonic() - closed_at,
        "returned": not thread.is_alive(),
    }


def _pyzmq_capacity(sndhwm: int, rcvhwm: int, size: int = 32 * 1024, cap: int = 1000) -> int:
    """Messages a PUSH accepts (DONTWAIT, retried while the io threads move them) before it
    refuses, towards a bound PULL over ipc that never reads."""
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, rcvhwm)
    endpoint = _ipc()
    pull.bind(endpoint)
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, sndhwm)
    push.connect(endpoint)
    accepted, refusals, payload = 0, 0, b"x" * size
    while accepted < cap and refusals < 4:
        try:
            push.send(payload, zmq.DONTWAIT)
            accepted, refusals = accepted + 1, 0
        except zmq.Again:
            refusals += 1
            time.sleep(0.05)
    push.close(0)
    pull.close(0)
    ctx.term()
    return accepted


def _pyzmq_lost_at_close(
    transport: str, count: int, size: int, hwm: int, rcvhwm: int | None = None, pause_s: float = 0.0
) -> int:
    """PUSH (SNDHWM hwm, own context) sends `count` messages unpaced to a PULL (RCVHWM hwm, or
    rcvhwm) reading one per ms, then pauses `pause_s` and closes + terms (LINGER -1); how
    many never arrive."""
    rctx, sctx = zmq.Context(), zmq.Context()
    pull = rctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, hwm if rcvhwm is None else rcvhwm)
    if transport == "ipc":
        endpoint = _ipc()
        pull.bind(endpoint)
    else:
        endpoint = f"tcp://127.0.0.1:{pull.bind_to_random_port('tcp://127.0.0.1')}"
    push = sctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, hwm)
    push.connect(endpoint)
    got = []

    def reader():
        while pull.poll(500):
            got.append(pull.recv())
            time.sleep(0.001)

    thread = threading.Thread(target=reader)
    thread.start()
    for i in range(count):
        push.send(b"%08d" % i + b" " * (size - 8))
    time.sleep(pause_s)
    push.close()
    sctx.term()
    thread.join(60)
    pull.close(0)
    rctx.term()
    return count - len(got)


def _pyzmq_close_then_term(linger_ms: int) -> float:
    """Seconds ctx.term() takes after close() of a PUSH with 5 messages queued for nobody."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, linger_ms)
    sock.connect(_ipc())
    for i in range(5):
        sock.send(b"m%d" % i, zmq.DONTWAIT)
    sock.close()
    start = time.monotonic()
    ctx.term()
    return time.monotonic() - start


def _pyzmq_post_example(linger_ms: int, sub_after_s: float) -> dict:
    """The LINGER post's publisher and subscriber in pyzmq (threads, own contexts): PUB binds,
    sends 'Message 0..4' 0.1 s apart, close, term; the SUB starts sub_after_s after the bind,
    10 DONTWAIT tries with 0.2 s sleep after each miss, then reads on until idle."""
    pub_ctx, sub_ctx = zmq.Context(), zmq.Context()
    pub = pub_ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    pub.setsockopt(zmq.LINGER, linger_ms)
    got = []

    def subscriber():
        time.sleep(sub_after_s)
        sub = sub_ctx.socket(zmq.SUB)
        sub.connect(f"tcp://127.0.0.1:{port}")
        sub.setsockopt_string(zmq.SUBSCRIBE, "")
        for _ in range(10):
            try:
                got.append(int(sub.recv_string(zmq.DONTWAIT).split()[-1]))
            except zmq.Again:
                time.sleep(0.2)
        while sub.poll(300):
            got.append(int(sub.recv_string().split()[-1]))
        sub.close(0)
        sub_ctx.term()

    thread = threading.Thread(target=subscriber, daemon=True)
    thread.start()
    for i in range(5):
        pub.send_string(f"Message {i}")
        time.sleep(0.1)
    pub.close()
    pub_ctx.term()
    thread.join(10)
    first = min(got) if got else 5
    return {
        "received": len(got),
        "missed_at_start": first,
        "missed_later": 5 - first - len(set(got)),
    }


# -- 000-3 -------------------------------------------------------------------------------------


def test_sender_ending_term_blocks_on_an_open_socket(scenario_out):
    outcome = run_scenario("sender-ending", scenario_out, fast=True)
    _check_form(outcome, "sender-ending")
    limit_s, cases = outcome.figures["limit_s"], outcome.figures["cases"]
    assert outcome.figures["versions"]["engine"].startswith("4.")
    open_cases = [c for c in cases if c["ending"] == "term-open"]
    assert {c["lib"] for c in open_cases} == {"engine", "pyzmq"} and len(open_cases) == 3
    for c in cases:
        if c["sent"]:
            assert c["received"] + len(c["missing"]) == c["sent"] == 10
            assert c["exit_code"] == 0  # every sender process ended by itself
        if c["ending"] != "term-open":  # nothing held: exit well before any limit
            assert c["process_exit_ms"] is not None and c["process_exit_ms"] < 1000 * limit_s, c
    held = [c for c in open_cases if c["term_blocked_for_at_least_s"] == limit_s]
    for c in held:  # held by the socket: released by its close
        assert c["term_returned"] and c["term_returned_after_close_ms"] < 500, c
    expected = HOLDS if len(held) == len(open_cases) else DOES_NOT_HOLD if not held else None
    verdict = outcome.verdict("000-3").verdict
    assert verdict == expected if expected else verdict.startswith("depends: ")
    # cross-check: plain pyzmq, a fresh socket left open holds term; closing it releases term
    plain = _pyzmq_term_with_open_socket()
    bare = next(c for c in open_cases if c["transport"] == "none")
    assert plain["returned"] and plain["returned_after_close_s"] < 0.5
    assert plain["blocked"] == (bare["term_blocked_for_at_least_s"] is not None)


# -- 000-4 -------------------------------------------------------------------------------------


@pytest.mark.alone
def test_bounded_reliable_repeats_each_candidate_and_names_the_condition(scenario_out):
    outcome = run_scenario("bounded-reliable", scenario_out, fast=True)
    _check_form(outcome, "bounded-reliable")
    figures = outcome.figures
    count, repeats = figures["count"], figures["repeats"]
    runs = {(f["condition"], f["candidate"], f["repeat"]): f for f in figures["runs"]}
    cells = {(c, n) for c, n, _ in runs}
    of = {
        (c, n): 1 if n in ONCE else repeats for c, n in cells
    }  # ONCE's: their HWMs alone fail them
    assert (
        repeats >= 2 and len(outcome.run_dirs) == len(runs) == sum(of.values()) and len(cells) >= 4
    )
    for f in runs.values():
        # facts() leave out `unknown` and `dropped_restart`: no worker dies or restarts here
        assert (
            sum(f[k] for k in FATES if k not in ("unknown", "dropped_restart"))
            == f["sent"]
            == count
        )
        assert f["reliable"] == (f["delivered"] + f["drained"] == f["sent"])
        assert f["works"] == (f["reliable"] and f["bounded"])
    for c, n in cells:
        cell = figures["cells"][f"{c} / {n}"]
        works = sum(runs[(c, n, k)]["works"] for k in range(1, of[(c, n)] + 1))
        assert (cell["works"], cell["of"]) == (works, of[(c, n)])
        assert cell["state"] == (
            "always" if works == of[(c, n)] else "never" if not works else "sometimes"
        )
        assert n not in ONCE or not works
    for k in range(1, repeats + 1):
        small, unlimited = runs[("ipc 32 KiB", "hwm-10-10", k)], runs[("ipc 32 KiB", "hwm-0-0", 1)]
        assert small["queue_peak"]["libzmq_messages"] < count / 10  # sends blocked: little waited
        # without HWMs the backlog sat in the processes: in libzmq at the queue's peak (the exact
        # figure), and the memory grew past what the judge lets a bounded run grow. Against half the
        # volume, the peak RSS over the other runs' least failed 2 of 6 runs on a quiet machine (6.2
        # and 8.9 of 18.75 MiB, 15-19 otherwise) with the same ~580 messages in libzmq: a peak over
        # other processes' peaks is the allocator's as much as the backlog's
        assert (
            unlimited["queue_peak"]["libzmq_messages"]
            >= 0.9 * unlimited["backlog_at_last_send"]
            > 0
        )
        growth = unlimited["producer_growth_mib"] + unlimited["consumer_growth_mib"]
        assert growth >= max(RSS_NOISE_MIB, BOUNDED_RSS_SHARE * unlimited["volume_mib"]), unlimited
        assert not unlimited["bounded"] and small["bounded"]
    # the judgement does not hang on where the kernel sample fell: the same tcp run, its queue peak split
    # 0 / all in the kernel at the peak's instant, is judged alike (at 64 B that split flipped between runs)
    from zmqload.scenarios.seed_000 import _judge

    tcp = dict(runs[("tcp 64 B", "hwm-10-10", 1)])
    judged = []
    for kernel in (0, tcp["queue_peak"]["messages"]):
        f = dict(
            tcp,
            queue_peak=dict(
                tcp["queue_peak"],
                kernel_messages=kernel,
                libzmq_messages=tcp["queue_peak"]["messages"] - kernel,
            ),
        )
        _judge(
            f,
            count,
            min(r["producer_rss_kb"] for r in runs.values()),
            min(r["consumer_rss_kb"] for r in runs.values()),
        )
        judged.append((f["bounded"], f["works"]))
    assert judged[0] == judged[1] == (tcp["bounded"], tcp["works"])
    # the rule: a candidate that works in every run under every condition is named; else one that
    # works everywhere in some runs only (timing decides: the verdict says on what); else the one
    # that works reliably most widely
    conditions = figures["conditions"]
    names = list(dict.fromkeys(n for _, n in cells))
    state = {(c, n): figures["cells"][f"{c} / {n}"]["state"] for c, n in cells}
    verdict = outcome.verdict("000-4")
    paused = [c for c in conditions if (c, LONG_PAUSE) in cells and (c, SHORT_PAUSE) in cells]
    pause_matters = (
        bool(paused)
        and all(state[(c, LONG_PAUSE)] == "always" for c in paused)
        and any(state[(c, SHORT_PAUSE)] != "always" for c in paused)
    )
    universal = [
        n
        for n in names
        if all(state.get((c, n)) == "always" for c in conditions)
        and not (pause_matters and n == LONG_PAUSE)
    ]
    racy = [
        n
        for n in names
        if n not in universal
        and all(state.get((c, n)) in ("always", "sometimes") for c in conditions)
    ]
    always = {n: [c for c in conditions if state.get((c, n)) == "always"] for n in names}
    if universal:
        assert verdict.verdict == HOLDS and verdict.measurements["setup"] == universal[0]
    elif pause_matters:
        assert verdict.verdict.startswith(
            "depends: on timing: SNDHWM 10 + RCVHWM 1 with a pause before close"
        )
        assert verdict.measurements["setup"] == LONG_PAUSE
    elif racy:
        assert (
            verdict.verdict.startswith("depends: on timing")
            and verdict.measurements["setup"] in racy
        )
    elif any(always.values()):
        assert verdict.verdict.startswith("depends: on the transport and the message size")
        assert len(always[verdict.measurements["setup"]]) == max(len(w) for w in always.values())
    else:
        assert verdict.verdict == DOES_NOT_HOLD
    # cross-check with plain pyzmq: HWM 10/10 caps what waits for 32 KiB messages at a few
    # dozen, and with 64 B messages the sender's close + term loses the backlog on ipc (the
    # kernel held it) but not on tcp -- zmqload's runs fall on the same sides
    cap_small = _pyzmq_capacity(10, 10)
    assert cap_small <= 60
    assert all(
        runs[("ipc 32 KiB", "hwm-10-10", k)]["queue_peak"]["messages"] <= 3 * cap_small + 10
        for k in range(1, repeats + 1)
    )
    for transport in ("ipc", "tcp"):
        lost = _pyzmq_lost_at_close(transport, count, 64, 10)
        zmqload_lost = [
            runs[(f"{transport} 64 B", "hwm-10-10", k)]["dropped_tail"]
            for k in range(1, repeats + 1)
        ]
        # how much of the backlog the kernel held at the disconnect varies from run to run in
        # both tools (pyzmq lost 84 and 580 of 600 on ipc in two runs here): compare whether
        # the close lost anything, which the transport decides
        assert (lost > 0) == (max(zmqload_lost) > 0) == (min(zmqload_lost) > 0), (
            transport,
            lost,
            zmqload_lost,
        )
    # ... and a pause before close saves that backlog when it outlasts the PULL's work on it, not when shorter
    # (pyzmq's backlog at its last send varies too: with the 250 ms pause it lost 84 and 342
    # of 600 here, and once 0 in CI; so up to three tries, and whether any of them lost)
    for name in (SHORT_PAUSE, LONG_PAUSE):
        pause_s = CANDIDATES_000_4[name][1]["close_pause_ms"] / 1000
        tries: list[int] = []
        while len(tries) < 3 and not any(tries):
            tries.append(_pyzmq_lost_at_close("ipc", count, 64, 10, rcvhwm=1, pause_s=pause_s))
        zmqload_lost = [runs[("ipc 64 B", name, k)]["dropped_tail"] for k in range(1, repeats + 1)]
        assert any(tries) == (min(zmqload_lost) > 0), (name, tries, zmqload_lost)


# -- 003-4 -------------------------------------------------------------------------------------


def test_term_waits_for_the_linger_and_for_open_sockets(scenario_out):
    outcome = run_scenario("term-and-linger", scenario_out, fast=True)
    _check_form(outcome, "term-and-linger")
    limit_s = outcome.figures["limit_s"]
    by = {c["case"]: c for c in outcome.figures["cases"]}
    assert all(c.get("queued", 5) == 5 for c in by.values())
    linger, forever = by["close-then-term-linger-1000"], by["close-then-term-linger-forever"]
    early, still_open = (
        by["close-then-term-linger-1000-peer-at-0.3s"],
        by["term-socket-open-linger-1000"],
    )
    recv = by["term-interrupts-blocked-recv"]
    py_term, py_destroy = by["pyzmq-term-socket-open"], by["pyzmq-destroy-socket-open"]
    assert linger["delivered_to_late_peer"] == 0  # nobody came: discarded at expiry
    assert early["delivered_to_late_peer"] == forever["delivered_to_late_peer"] == 5
    assert early["term_took_ms"] < 1000  # returns when the backlog has left
    assert "terminated" in recv["recv_error"] and recv["recv_interrupted_after_ms"] < 1000
    assert recv["term_blocked_for_at_least_s"] is None
    assert py_destroy["socket_closed_by_it"] and py_destroy["term_took_ms"] >= 900
    interrupts = (linger["term_took_ms"] is not None and linger["term_took_ms"] < 900) or forever[
        "term_blocked_for_at_least_s"
    ] is None
    closes = (
        still_open["term_blocked_for_at_least_s"] is None
        or py_term["term_blocked_for_at_least_s"] is None
    )
    verdict = outcome.verdict("003-4").verdict
    if interrupts == closes:
        assert verdict == (HOLDS if interrupts else DOES_NOT_HOLD)
    else:
        assert verdict.startswith("depends: ")
    if not closes:  # held past its own 1 s linger, then the linger ran from the close
        assert still_open["term_blocked_for_at_least_s"] == limit_s > 1.0
        assert 900 <= still_open["term_after_release_ms"] < 1000 + 500
    # cross-check with plain pyzmq: close then term with LINGER 300 and 5 queued for nobody
    # waits the whole linger too (ratio term time / linger, engine vs pyzmq)
    engine_ratio = linger["term_took_ms"] / 1000
    pyzmq_ratio = _pyzmq_close_then_term(300) / 0.3
    assert pyzmq_ratio >= 0.9 and engine_ratio >= 0.9
    assert abs(engine_ratio - pyzmq_ratio) < 0.5


# -- 003-5 -------------------------------------------------------------------------------------


def test_five_messages_linger_vs_join_time(scenario_out):
    outcome = run_scenario("five-messages", scenario_out, fast=True)
    _check_form(outcome, "five-messages")
    trials, by_linger, by_join = (outcome.figures[k] for k in ("trials", "by_linger", "by_join"))
    for t in trials:
        assert t["in_loop"] + t["after_loop"] + t["missed_at_start"] + t["missed_later"] == 5, t
        assert t["term_ms"] is not None  # no publisher was left blocked
    for t in trials:
        if t["pause_ms"]:  # control: the subscription was in first
            assert t["missed_at_start"] == 0, t
        elif t["offset_ms"] >= 150:  # the SUB started after 'Message 0' went out
            assert t["missed_at_start"] >= 1, t
    zero, thousand = by_linger[0], by_linger[1000]
    if (
        zero["missed_later"] > thousand["missed_later"]
        and thousand["mean_in_loop"] > zero["mean_in_loop"]
    ):
        expected = HOLDS
    elif zero["missed_later"] == 0:
        expected = DOES_NOT_HOLD
    else:
        expected = None
    verdict = outcome.verdict("003-5").verdict
    assert verdict == expected if expected else verdict.startswith("depends: ")
    # cross-check with plain pyzmq: the post's example with the SUB 150 ms late misses the
    # same messages at the start whatever the LINGER, and none after its first arrival
    engine = [t["missed_at_start"] for t in trials if t["offset_ms"] == 150 and not t["pause_ms"]]
    for linger_ms in (0, 1000):
        plain = _pyzmq_post_example(linger_ms, 0.15)
        assert plain["missed_later"] == 0
        assert min(engine) - 1 <= plain["missed_at_start"] <= max(engine) + 1
    assert by_join["+150 ms"]["mean_missed_at_start"] >= 1
