"""The user-report scenarios (U-1..U-3) in their fast form: the measurements and the verdict
rules, and for each a key figure cross-checked against plain pyzmq (its bundled libzmq,
no zmqload code: tests/../zmqload is never imported by the pyzmq checks) or, for U-3's
latency, the same trip in bare C (bench/baseline_oneway.c)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time

import pytest
import zmq

from tests.oracle.close_order import close_order_run
from zmqload.contract.fates import AMBIGUOUS_TAIL, TAIL_AMBIGUOUS, TAIL_MID_RUN
from zmqload.scenarios import SCENARIOS, run_scenario, unsettled_claims
from zmqload.scenarios.framework import DOES_NOT_HOLD, HOLDS
from zmqload.scenarios.user_reports import GAP_FACTOR, GAP_LATENCY_NS, IDLE_ENOUGH, MOST_LOST
from scenario_checks import check_verdict, fates_add_up

SEQ = struct.Struct("<qq")  # the pyzmq checks' own header: seq, send time (ns)


@pytest.fixture(scope="module")
def scenario_out(tmp_path_factory):
    return str(tmp_path_factory.mktemp("user-scenarios"))


def test_user_claims_are_settled():
    assert {"hwm-zero-after-bind", "hwm1-slow-subscriber", "idle-gap-latency"} <= set(SCENARIOS)
    assert not {"U-1", "U-2", "U-3"} & set(unsettled_claims())


# ------------------------------------------------------------------------------- U-1
def _pyzmq_subscribed(pub, sub) -> None:
    """Publish probes until the SUB hears one (bounded), then swallow the probes."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        pub.send(b"P")
        if sub.poll(10):
            break
    while sub.poll(100):
        sub.recv()


def _pyzmq_drain(sub, seen: set) -> set:
    """Receive until 300 ms pass without a message (bounded), adding the seqs to seen."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and sub.poll(300):
        m = sub.recv()
        if len(m) >= SEQ.size:
            seen.add(SEQ.unpack_from(m)[0])
    return seen


def _pyzmq_burst(pub_after: bool, sub_opts: dict, n: int, size: int = 1024) -> dict:
    """Plain pyzmq: a PUB with SNDHWM=RCVHWM=0 set before or after bind, a SUB with
    sub_opts set before connect that reads nothing during a burst of n messages; then
    the drain. Returns arrived/dropped."""
    ctx_p, ctx_s = zmq.Context(), zmq.Context()
    pub, sub = ctx_p.socket(zmq.PUB), ctx_s.socket(zmq.SUB)
    try:
        for s in (pub, sub):
            s.linger = 0
        pub_opts = {zmq.SNDBUF: 4096, zmq.RCVBUF: 4096} if sub_opts.get(zmq.RCVHWM) == 1 else {}
        for k, v in pub_opts.items():
            pub.setsockopt(k, v)
        if not pub_after:
            pub.sndhwm = pub.rcvhwm = 0
        pub.bind("tcp://127.0.0.1:0")
        if pub_after:
            pub.sndhwm = pub.rcvhwm = 0
        for k, v in sub_opts.items():
            sub.setsockopt(k, v)
        sub.subscribe(b"")
        sub.connect(pub.getsockopt_string(zmq.LAST_ENDPOINT))
        _pyzmq_subscribed(pub, sub)
        body = b"y" * (size - SEQ.size)
        for i in range(n):
            pub.send(SEQ.pack(i, 0) + body)
        time.sleep(0.3)
        seen = _pyzmq_drain(sub, set())
        return {"arrived": len(seen), "dropped": n - len(seen)}
    finally:
        pub.close(0)
        sub.close(0)
        ctx_p.term()
        ctx_s.term()


def test_hwm_zero_after_bind(scenario_out):
    outcome = run_scenario("hwm-zero-after-bind", scenario_out, fast=True)
    v = check_verdict(outcome, "hwm-zero-after-bind")
    matrix, pub_force, runs = (
        outcome.figures["matrix"],
        outcome.figures["pub_in_force"],
        outcome.figures["runs"],
    )
    n = next(iter(matrix.values()))["sent"]
    for key, p in matrix.items():
        assert p["subscribed"] and p["arrived"] + p["dropped"] == n, key
        pub_when, sub_when = key.split("/")[1:]
        # getsockopt reports the option as set, whenever it was set
        assert p["pub_sndhwm"] == (1000 if pub_when == "pub-never" else 0), key
        assert p["sub_rcvhwm"] == (1000 if sub_when == "sub-never" else 0), key
        if pub_when == "pub-before":  # an unlimited PUB cannot drop
            assert p["dropped"] == 0, key
    # the PUB's HWM in force: none when set before bind, the default 1000 when set after
    assert (
        pub_force["tcp/pub-before"]["held"] is None and pub_force["tcp/pub-before"]["dropped"] == 0
    )
    for when in ("after", "never"):
        assert 900 <= pub_force[f"tcp/pub-{when}"]["held"] <= 1100, pub_force
    # the SUB's: none when set before or after connect (it empties the kernel buffers), else 1000
    assert v.measurements["sub_hwm_in_force"] == {
        "tcp/sub-before": "no limit",
        "tcp/sub-after": "no limit",
        "tcp/sub-never": "limited",
    }
    for f in runs.values():
        fates_add_up(f)
    assert (
        runs["hwm-0"]["dropped_mid"] + runs["hwm-0"]["dropped_tail"] == 0
        and runs["hwm-0"]["stranded"] == 0
    )
    assert runs["hwm-default"]["dropped_mid"] > 0
    # the rule, from the numbers
    both = {k: p for k, p in matrix.items() if "never" not in k}
    lossy = {k for k, p in both.items() if p["dropped"]}
    if lossy == set(both):
        assert v.verdict == HOLDS
    elif not lossy:
        assert v.verdict == DOES_NOT_HOLD
    else:
        assert v.verdict.startswith("depends: ")
        if lossy == {k for k in both if "/pub-after/" in k}:
            assert "after bind" in v.verdict
    assert v.measurements["pub_hwm_in_force"]["tcp/pub-after"] == pub_force["tcp/pub-after"]["held"]

    # cross-check with plain pyzmq: the same burst, HWM 0 on the PUB before / after bind
    before = _pyzmq_burst(False, {zmq.SNDHWM: 0, zmq.RCVHWM: 0}, n)
    after = _pyzmq_burst(True, {zmq.SNDHWM: 0, zmq.RCVHWM: 0}, n)
    assert before["dropped"] == 0 == matrix["tcp/pub-before/sub-before"]["dropped"]
    assert (after["dropped"] > 0) == (matrix["tcp/pub-after/sub-before"]["dropped"] > 0)
    # ... and the PUB's HWM in force after bind, behind a SUB that holds ~nothing
    held = _pyzmq_burst(True, {zmq.RCVHWM: 1, zmq.SNDBUF: 4096, zmq.RCVBUF: 4096}, n)["arrived"]
    assert abs(held - pub_force["tcp/pub-after"]["held"]) <= 100, (held, pub_force["tcp/pub-after"])


# ------------------------------------------------------------------------------- U-2
def _pyzmq_hwm1_pair(ctx, transport: str, tmp_path):
    pub, sub = ctx.socket(zmq.PUB), ctx.socket(zmq.SUB)
    for s in (pub, sub):
        s.linger = 0
        s.sndhwm = s.rcvhwm = 1
    if transport == "tcp":
        pub.bind("tcp://127.0.0.1:0")
    else:
        pub.bind(f"ipc://{tmp_path}/u2-{time.monotonic_ns()}")
    sub.subscribe(b"")
    sub.connect(pub.getsockopt_string(zmq.LAST_ENDPOINT))
    _pyzmq_subscribed(pub, sub)
    return pub, sub


def _pyzmq_hwm1_slow_sub(
    transport: str, size: int, n: int, rate: int, tmp_path, reads_every: int = 10
) -> int:
    """Plain pyzmq, one thread: PUB and SUB with HWM 1 (before bind/connect), n messages
    paced at `rate`, the SUB reading one message per `reads_every` sent (0: never), then
    the drain. Returns how many arrived."""
    ctx = zmq.Context()
    pub, sub = _pyzmq_hwm1_pair(ctx, transport, tmp_path)
    try:
        seen, body = set(), b"z" * (size - SEQ.size)
        t0 = time.monotonic()
        for i in range(n):
            time.sleep(max(0.0, t0 + i / rate - time.monotonic()))
            pub.send(SEQ.pack(i, 0) + body)
            if reads_every and i % reads_every == reads_every - 1 and sub.poll(0):
                seen.add(SEQ.unpack_from(sub.recv())[0])
        time.sleep(0.3)
        return len(_pyzmq_drain(sub, seen))
    finally:
        pub.close(0)
        sub.close(0)
        ctx.term()


def test_hwm1_slow_subscriber(scenario_out, tmp_path):
    outcome = run_scenario("hwm1-slow-subscriber", scenario_out, fast=True)
    v = check_verdict(outcome, "hwm1-slow-subscriber")
    by_transport, tiny, held = (
        outcome.figures["sizes"],
        outcome.figures["tiny_buffers"],
        outcome.figures["held"],
    )
    closing = outcome.figures["close_at_once"]
    assert set(by_transport) == set(held) == {"tcp", "ipc"}
    runs = (
        [f for sizes in by_transport.values() for f in sizes.values()]
        + list(tiny.values())
        + list(closing.values())
    )
    for f in runs:
        fates_add_up(f)
        assert f["stranded"] == 0 and f["drain"] in ("idle", "complete")
        assert f["sndhwm"] == f["rcvhwm"] == 1
    assert all(
        f["close_order"] == "after-drain" for sizes in by_transport.values() for f in sizes.values()
    )
    assert (
        set(closing) == {min(by_transport["ipc"])}
        and closing[min(closing)]["close_order"] == "producer-first"
    )
    # the sockets stayed open until the SUB drained to idle: nothing missing can have died at close
    for f in [f for sizes in by_transport.values() for f in sizes.values()] + list(tiny.values()):
        assert (
            f["tail_placement"] == TAIL_MID_RUN and f["dropped_tail"] == f[AMBIGUOUS_TAIL] == 0
        ), f
    # closing at once, the PUB's drops after the last arrival may be mid-run or at close: tail, flagged
    at_once = closing[min(closing)]
    assert (
        at_once["tail_placement"] == TAIL_AMBIGUOUS
        and at_once[AMBIGUOUS_TAIL] == at_once["dropped_tail"]
    )
    assert (
        v.measurements["closing_at_once_tail"][min(closing)][AMBIGUOUS_TAIL]
        == at_once[AMBIGUOUS_TAIL]
    )
    assert (
        f"({at_once[AMBIGUOUS_TAIL]:,} after the last arrival: mid-run or at close)" in v.because
    ), v.because
    sizes = by_transport["tcp"]
    small, large = sizes[min(sizes)], sizes[max(sizes)]
    peak = small["queue_peak"]
    # tcp, 64 B: a backlog builds and waits, mostly in the kernel's buffers (HWM 1 holds ~nothing). The
    # kernel's share is its peak over the run: its value at the queue peak's instant hangs on when the
    # kernel queues were last sampled (10/s), which is not what is asked here
    assert small["drained"] > 10 and peak["messages"] > 10, (small, peak)
    assert peak["kernel_peak_bytes"] // (small["size"] + 2) >= peak["messages"] / 2, peak
    assert large["lost"] > small["lost"], (small, large)  # 1 MiB x the backlog does not fit
    assert large["queue_peak"]["kernel_peak_bytes"] > 1_000_000, large
    assert all(f["lost"] > 0 for f in tiny.values()), (
        tiny
    )  # 4 KiB socket buffers: small messages lost too
    # what held the backlog, per transport and size: every message the non-reading SUB's path kept is
    # either in the kernel's buffers or in libzmq; with HWM 1 the kernel holds most of a 64 B backlog
    for transport, by_size in held.items():
        for size, h in by_size.items():
            assert h["subscribed"] and h["held"] + h["dropped"] == h["sent"], h
            assert h["kernel_messages"] + h["libzmq_messages"] == h["held"], h
            assert h["kernel_bytes"] <= h["held"] * (size + 9), h
        smallest = by_size[min(by_size)]
        assert smallest["kernel_messages"] > smallest["libzmq_messages"], (transport, smallest)
    # ipc's kernel buffers hold far fewer bytes than tcp's: its backlog of large messages does not fit
    big = max(held["ipc"])
    assert held["ipc"][big]["kernel_bytes"] < held["tcp"][big]["kernel_bytes"], (
        held["ipc"][big],
        held["tcp"][big],
    )
    # the rule, from the numbers: per transport, sizes up to the first that lost most
    regimes = {}
    for transport, fs in by_transport.items():
        ordered = sorted(fs)
        share = {s: fs[s]["lost"] / fs[s]["sent"] for s in ordered}
        kept = [
            s for i, s in enumerate(ordered) if all(share[t] <= MOST_LOST for t in ordered[: i + 1])
        ]
        most = [s for s in ordered if share[s] > MOST_LOST]
        regimes[transport] = (kept[-1] if kept else None, most[0] if most else None)
        assert (
            v.measurements["regimes"][transport]["kept_up_to"],
            v.measurements["regimes"][transport]["most_lost_from"],
        ) == regimes[transport]
    every = [f for fs in by_transport.values() for f in fs.values()] + list(tiny.values())
    if not any(f["lost"] for f in every):
        assert v.verdict == HOLDS
    elif all(kept is None for kept, _ in regimes.values()):
        assert v.verdict == DOES_NOT_HOLD
    else:
        assert v.verdict.startswith("depends: on the message size and transport")
        for transport, (kept, most) in regimes.items():
            if kept is not None:
                assert f"over {transport} up to {kept:,} B " in v.verdict
            if kept is not None and most is not None:
                assert f"from {most:,} B most were lost" in v.verdict

    # cross-check with plain pyzmq, tcp and ipc: the same setup in one thread keeps most 64 B messages
    # and loses most 1 MiB ones where zmqload does. (Both drop a few small ones now and then under
    # load, 0-4 of 60 measured, so the exact small counts are not compared.)
    for transport, fs in by_transport.items():
        share = {s: f["lost"] / f["sent"] for s, f in fs.items()}
        lo, hi = fs[min(fs)], fs[max(fs)]
        py_small, py_large = (
            f["sent"] - _pyzmq_hwm1_slow_sub(transport, f["size"], f["sent"], f["rate"], tmp_path)
            for f in (lo, hi)
        )
        assert py_small / lo["sent"] <= MOST_LOST and share[min(fs)] <= MOST_LOST, (
            transport,
            py_small,
            lo["lost"],
        )
        assert (py_large / hi["sent"] > MOST_LOST) == (share[max(fs)] > MOST_LOST), (
            transport,
            py_large,
            hi["lost"],
        )
    # ... and closing at once over ipc: plain pyzmq (the PUB in its own process) loses a tail too, and more
    # than when the SUB drained to idle before the close, with nothing in flight then (tests/oracle/
    # close_order.py; the SUB 10x slower than the PUB, as in the scenario). How many were still in flight
    # at the close varies with load (zmqload: 25 to 50 of 60 lost), so the counts are not compared.
    py_at_once = close_order_run(
        "ipc",
        "producer-first",
        n=at_once["sent"],
        rate=at_once["rate"],
        delay_s=10 / at_once["rate"],
        size=at_once["size"],
    )
    py_held = close_order_run(
        "ipc",
        "after-drain",
        n=at_once["sent"],
        rate=at_once["rate"],
        delay_s=10 / at_once["rate"],
        size=at_once["size"],
    )
    assert py_held["arrived_after_close"] == 0, py_held
    assert py_at_once["missing_after_last_arrival"] > py_held["missing"], (py_at_once, py_held)
    assert at_once[AMBIGUOUS_TAIL] > by_transport["ipc"][min(closing)]["lost"], at_once
    # ... and what a non-reading SUB's path holds lands on the same side of half the messages
    for transport, size in (("ipc", 64), ("ipc", 16384), ("tcp", 16384)):
        h = held[transport][size]
        py_held = _pyzmq_hwm1_slow_sub(
            transport, size, h["sent"], lo["rate"], tmp_path, reads_every=0
        )
        assert (py_held < h["sent"] / 2) == (h["held"] < h["sent"] / 2), (
            transport,
            size,
            py_held,
            h["held"],
        )


# ------------------------------------------------------------------------------- U-3
def _c_gap_latency(interval_us: int, count: int) -> int:
    """The bare C one-way trip (bench/baseline_oneway.c: no zmqload code, nothing recorded),
    tcp, 64 B, one message every `interval_us`, the sender waiting as zmqload's default
    pacing does: its p50 in ns."""
    sys.path.insert(
        0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
    )
    try:
        from paired import build_c, free_port
    finally:
        sys.path.pop(0)
    out = subprocess.run(
        [
            build_c("baseline_oneway"),
            f"tcp://127.0.0.1:{free_port()}",
            str(count),
            str(1e6 / interval_us),
            "64",
            "spin",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.split()
    assert int(out[0]) == count, out
    return int(out[2])


def test_idle_gap_latency(scenario_out):
    outcome = run_scenario("idle-gap-latency", scenario_out, fast=True)
    v = check_verdict(outcome, "idle-gap-latency")
    holding, effect = set(), set()
    for cond, cell in outcome.figures.items():
        for interval, m in cell["intervals"].items():
            assert m["received"] == m["sent"] > 0, (cond, interval)
            assert 0 < m["p50_ns"] <= m["p99_ns"] <= m["max_ns"], (cond, interval)
        iv = cell["intervals"]
        base, gap = iv[min(iv)]["p50_ns"], iv[max(iv)]["p50_ns"]
        m = v.measurements[cond]
        assert (m["p50_back_to_back_ns"], m["p50_after_gap_ns"]) == (base, gap)
        assert m["far_higher"] == (gap >= GAP_FACTOR * base) and m["above_200us"] == (
            gap > GAP_LATENCY_NS
        )
        assert m["holds"] == (m["far_higher"] and m["above_200us"])
        holding |= {cond} if m["holds"] else set()
        effect |= {cond} if m["far_higher"] else set()
        if cond.endswith("/busy"):  # the spinners ran and the CPUs never idled
            assert cell["spinner_cpu_share"] > 0 and cell["cpu_idle_share"] < 0.2, cell
    if holding == set(outcome.figures):
        assert v.verdict == HOLDS
    elif not effect:
        assert v.verdict == DOES_NOT_HOLD
    else:
        assert v.verdict.startswith("depends: ")
        for cond in holding:  # named by the CPU state measured
            cell = outcome.figures[cond]
            state = (
                "when CPUs are kept busy"
                if cond.endswith("/busy")
                else "when CPUs idle"
                if cell["cpu_idle_share"] >= IDLE_ENOUGH
                else "yet busy with other work"
            )
            assert f"over {cond.split('/')[0]} " in v.verdict and state in v.verdict

    # cross-check with the same trip in bare C over tcp, CPUs left alone: the p50 after the
    # gap within 2x of zmqload's (0.93-0.96 of it in three runs here; the C trip's own p50
    # ranged 100-135 us over five runs). (A plain pyzmq receiver was the yardstick before; its
    # own wake-up after a 10 ms gap, ~200-380 us here, came to 3x zmqload's ~120 us once the
    # receive loop stopped waking for a timeout: it measured Python, not the trip.)
    iv = outcome.figures["tcp/idle"]["intervals"]
    long = max(iv)
    c = _c_gap_latency(long, max(iv[long]["sent"], 20))
    ours = iv[long]["p50_ns"]
    assert 1 / 2 <= c / ours <= 2, (c, ours)
