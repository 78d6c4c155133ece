"""The restart claims U-9..U-12 in their fast form: the scenarios' measurements and verdict rules,
each cross-checked against plain pyzmq (its bundled libzmq, no zmqload code) doing the same in
this process: the peer restarted by closing its socket and context and making new ones."""

from __future__ import annotations

import time

import pytest
import zmq
from scenario_checks import check_verdict

from zmqload.scenarios import SCENARIOS, run_scenario, unsettled_claims
from zmqload.scenarios.framework import DOES_NOT_HOLD, HOLDS

CLAIMS = {"publisher-restart": ("U-9", "U-12"), "send-without-peer": ("U-10",)}
CLAIMS["dealer-restart"] = ("U-11",)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("restart-claims"))
    return {name: run_scenario(name, out, fast=True) for name in CLAIMS}


def test_the_claims_are_settled():
    for name, claims in CLAIMS.items():
        assert SCENARIOS[name].claims == claims
    assert not {"U-9", "U-10", "U-11", "U-12"} & set(unsettled_claims())


# ------------------------------------------------------------------------------- U-9, U-12
def _topic(i: int) -> bytes:
    return b"t%05d" % i


def _pyzmq_pub(endpoint: str):
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.linger, pub.sndhwm = 0, 0
    pub.bind(endpoint)
    return ctx, pub


def _pyzmq_heard(pub, subs: dict, topics: int) -> dict:
    """Publish every topic once a round until two rounds hear the same, some (bounded): per SUB,
    the topics it heard in the last round."""
    counts: dict = {k: [] for k in subs}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for i in range(topics):
            pub.send(_topic(i))
        for key, sub in subs.items():
            heard = set()
            while sub.poll(150):
                heard.add(sub.recv())
            counts[key].append(len(heard))
        if all(len(c) >= 2 and c[-1] == c[-2] and c[-1] for c in counts.values()):
            break
    return {k: c[-1] for k, c in counts.items()}


def _pyzmq_publisher_restart(subs_spec: dict) -> dict:
    """SUBs (topics, SNDHWM or None) subscribed a batch at a time under a PUB that is closed (its
    context terminated) and made again on the same endpoint: topics heard before and after."""
    ctx_sub = zmq.Context()
    ctx_pub, pub = _pyzmq_pub("tcp://127.0.0.1:0")
    endpoint = pub.getsockopt_string(zmq.LAST_ENDPOINT)
    subs = {}
    try:
        for key, (n, sndhwm) in subs_spec.items():
            sub = ctx_sub.socket(zmq.SUB)
            sub.linger, sub.rcvhwm = 0, 0
            if sndhwm is not None:
                sub.sndhwm = sndhwm
            sub.connect(endpoint)
            subs[key] = sub
        for sub in subs.values():
            sub.subscribe(_topic(0))
        _pyzmq_heard(pub, subs, 1)  # connected
        for key, (n, _) in subs_spec.items():  # a batch at a time, its last topic heard
            for start in range(1, n, 250):
                last = min(n, start + 250) - 1
                for i in range(start, last + 1):
                    subs[key].subscribe(_topic(i))
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    pub.send(_topic(last))
                    if subs[key].poll(5):
                        break
                while subs[key].poll(5):
                    subs[key].recv()
        most = max(n for n, _ in subs_spec.values())
        before = _pyzmq_heard(pub, subs, most)
        pub.close()
        ctx_pub.term()
        ctx_pub, pub = _pyzmq_pub(endpoint)
        after = _pyzmq_heard(pub, subs, most)
        return {k: (before[k], after[k]) for k in subs}
    finally:
        pub.close()
        ctx_pub.term()
        for sub in subs.values():
            sub.close()
        ctx_sub.term()


def test_publisher_restart(outcomes):
    outcome = outcomes["publisher-restart"]
    u9 = check_verdict(outcome, "publisher-restart", "U-9")
    u12 = check_verdict(outcome, "publisher-restart", "U-12")
    cells = outcome.figures["restarts"]
    assert set(cells) == {"tcp/close", "tcp/kill"}
    for cell in cells.values():
        for key, c in cell.items():
            assert c["before"] == c["n"], (key, c)  # every subscription in force before
        # each SUB keeps min(topics, its SNDHWM) across the restart; SNDHWM 0 keeps all
        assert cell["5000/default"]["after"] == 1000
        assert cell["5000/sndhwm-2000"]["after"] == 2000
        assert cell["5000/sndhwm-0"]["after"] == 5000
        assert cell["1000/default"]["after"] == 1000 and cell["1/default"]["after"] == 1
    assert u9.verdict == HOLDS and u9.measurements["kept_is_sndhwm"]
    # U-12: the SUB resends its subscriptions, in process and in zmqload's run (--restart p0)
    run = outcome.figures["runs"]["kill"]
    assert run["received_after"] > 0 and run["first_after_up_ms"] is not None
    assert run["received_after"] + run["dropped_before_subscribed"] <= run["sent_after"]
    assert u12.verdict == DOES_NOT_HOLD

    # plain pyzmq, the PUB closed and made again: the same counts
    pyzmq = _pyzmq_publisher_restart(
        {"1": (1, None), "5000": (5000, None), "5000/sndhwm-0": (5000, 0)}
    )
    assert pyzmq["1"] == (1, 1)
    assert pyzmq["5000"] == (5000, cells["tcp/close"]["5000/default"]["after"])
    assert pyzmq["5000/sndhwm-0"] == (5000, cells["tcp/close"]["5000/sndhwm-0"]["after"])


# ------------------------------------------------------------------------------- U-10
def _pyzmq_queued_without_peer(kind: int, peer_kind: int, immediate: bool) -> tuple[int, int]:
    """A socket that connects to an endpoint nobody is at: sends accepted with DONTWAIT; then a
    peer binds: how many arrive."""
    with zmq.Context() as probe_ctx:  # a port just freed: its context ended, its listener gone
        probe = probe_ctx.socket(zmq.PULL)
        probe.bind("tcp://127.0.0.1:0")
        endpoint = probe.getsockopt_string(zmq.LAST_ENDPOINT)
        probe.close(0)
    ctx = zmq.Context()
    sock, peer = ctx.socket(kind), ctx.socket(peer_kind)
    try:
        sock.linger = peer.linger = 0
        sock.immediate = int(immediate)
        sock.connect(endpoint)
        accepted = 0
        while accepted < 20_000:
            try:
                sock.send(b"%d" % accepted, zmq.DONTWAIT)
            except zmq.Again:
                break
            accepted += 1
        peer.bind(endpoint)
        arrived = 0
        while peer.poll(200):
            peer.recv()
            arrived += 1
        return accepted, arrived
    finally:
        sock.close()
        peer.close()
        ctx.term()


def test_send_without_peer(outcomes):
    outcome = outcomes["send-without-peer"]
    v = check_verdict(outcome, "send-without-peer")
    f = outcome.figures
    for kind in ("PUSH", "DEALER"):
        assert f[f"tcp/{kind}/connect/default"]["accepted"] == 1000
        assert f[f"tcp/{kind}/connect/default"]["arrived"] == 1000
        assert f[f"tcp/{kind}/connect/sndhwm-10"]["accepted"] == 10
        assert f[f"tcp/{kind}/connect/immediate"]["accepted"] == 0
        assert f[f"tcp/{kind}/bind/default"]["accepted"] == 0
        assert all(p["accepted_once_peer_came"] for p in f.values())
    assert v.verdict == HOLDS

    for kind, peer in ((zmq.PUSH, zmq.PULL), (zmq.DEALER, zmq.DEALER)):
        name = "PUSH" if kind == zmq.PUSH else "DEALER"
        queued = f[f"tcp/{name}/connect/default"]
        assert _pyzmq_queued_without_peer(kind, peer, False) == (
            queued["accepted"],
            queued["arrived"],
        )
        assert _pyzmq_queued_without_peer(kind, peer, True) == (0, 0)


# ------------------------------------------------------------------------------- U-11
def _pyzmq_dealer(endpoint: str):
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.linger = 0
    dealer.routing_id = b"dealer-1"
    dealer.connect(endpoint)
    return ctx, dealer


def _pyzmq_dealer_restart(handover: bool) -> dict:
    """A ROUTER (ROUTER_MANDATORY) sends to a DEALER's fixed identity every ms; the DEALER closes
    (and its context ends) and a new one with the same identity connects at once; sends go on
    for 1 s or until the new one has 100: the sends' outcomes after the restart."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.linger = 0
    router.router_mandatory = 1
    router.router_handover = int(handover)
    router.bind("tcp://127.0.0.1:0")
    endpoint = router.getsockopt_string(zmq.LAST_ENDPOINT)
    out = {"unreachable": 0, "accepted": 0, "received": 0}
    ctx_d, dealer = _pyzmq_dealer(endpoint)
    try:

        def send() -> bool:
            try:
                router.send_multipart([b"dealer-1", b"x"], zmq.DONTWAIT)
                return True
            except zmq.ZMQError as exc:
                assert exc.errno == zmq.EHOSTUNREACH
                return False

        deadline = time.monotonic() + 5
        while not dealer.poll(1) and time.monotonic() < deadline:
            send()
        dealer.close()
        ctx_d.term()
        ctx_d, dealer = _pyzmq_dealer(endpoint)
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline and out["received"] < 100:
            out["accepted" if send() else "unreachable"] += 1
            if dealer.poll(1):  # a send a millisecond, or sooner when one arrives
                while dealer.poll(0):
                    dealer.recv()
                    out["received"] += 1
        return out
    finally:
        dealer.close()
        ctx_d.term()
        router.close()
        ctx.term()


def test_dealer_restart(outcomes):
    outcome = outcomes["dealer-restart"]
    v = check_verdict(outcome, "dealer-restart")
    cells = {k: c[0] for k, c in outcome.figures["cells"].items()}
    for mode in ("close", "kill", "kill-late"):  # every send fails, none reaches the new DEALER
        c = cells[f"tcp/{mode}/handover-0"]  # (the first few may go to the old one's pipe: lost)
        assert c["to_new"] == 0 and c["lost"] == c["accepted"] < 10, (mode, c)
        assert c["unreachable"] + c["accepted"] == c["sends_after"], (mode, c)
        assert c["new_handshakes"] >= 1, (mode, c)  # connected again, all the same
    hung = cells["tcp/freeze/handover-0"]  # the hung one takes every send, and loses them
    assert hung["to_new"] == 0 and hung["lost"] == hung["accepted"] > 0 and not hung["unreachable"]
    for mode in ("close", "kill", "freeze"):  # ROUTER_HANDOVER: the new one has the flow at once
        c = cells[f"tcp/{mode}/handover-1"]
        assert c["to_new"] >= 100 and c["first_new_ms"] < 1000, (mode, c)
    assert v.verdict.startswith("depends: without ROUTER_HANDOVER")
    assert "ROUTER_HANDOVER 1 fixes every mode" in v.verdict

    # plain pyzmq, the DEALER closed and made again with the same identity
    without, with_ = _pyzmq_dealer_restart(False), _pyzmq_dealer_restart(True)
    assert without["received"] == 0 and without["accepted"] < 10 < without["unreachable"]
    assert with_["received"] >= 100
