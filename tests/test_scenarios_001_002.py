"""Scenarios of sources 001 and 002 (hwm-defaults, rcvhwm-full, monitor-at-hwm, size-vs-hwm,
hwm-option, multipart-memory) in their fast form: the measurements and the verdict rules,
not fixed verdict strings; and for each a key figure cross-checked against a minimal
plain-pyzmq measurement written here, sharing no code with zmqload."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import zmq

from zmqload.contract.fates import AMBIGUOUS_TAIL, TAIL_MID_RUN
from zmqload.scenarios import SCENARIOS, run_scenario
from zmqload.scenarios.framework import DOES_NOT_HOLD, HOLDS


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    """Each scenario runs once (fast) for the module: its own test and its cross-check share it."""
    out, done = str(tmp_path_factory.mktemp("scenarios_001_002")), {}

    def run(name):
        if name not in done:
            done[name] = run_scenario(name, out, fast=True)
        return done[name]

    return run


def _check_verdicts(outcome, scenario):
    assert [v.claim for v in outcome.verdicts] == list(SCENARIOS[scenario].claims)
    for v in outcome.verdicts:
        assert v.verdict in (HOLDS, DOES_NOT_HOLD) or v.verdict.startswith("depends: "), v
        assert v.because and any(ch.isdigit() for ch in v.because), v
        assert v.measurements, v
    json.dumps(outcome.figures)  # the CLI prints them with --json


def _fates_add_up(f):
    return (
        f["delivered"]
        + f["drained"]
        + f["dropped_start"]
        + f["dropped_mid"]
        + f["dropped_tail"]
        + f["stranded"]
    ) == f["expected"]


# --- plain pyzmq, written out here ------------------------------------------------------------------------------


def _py_pair(ctx, snd_type, rcv_type, endpoint, sndhwm=None, rcvhwm=None, rcvbuf=None, sndbuf=None):
    rcv, snd = ctx.socket(rcv_type), ctx.socket(snd_type)
    for s in (rcv, snd):
        s.setsockopt(zmq.LINGER, 0)
    if sndhwm is not None:
        snd.setsockopt(zmq.SNDHWM, sndhwm)
    if rcvhwm is not None:
        rcv.setsockopt(zmq.RCVHWM, rcvhwm)
    if rcvbuf:
        rcv.setsockopt(zmq.RCVBUF, rcvbuf)
    if sndbuf:
        snd.setsockopt(zmq.SNDBUF, sndbuf)
    if rcv_type == zmq.SUB:
        rcv.setsockopt(zmq.SUBSCRIBE, b"")
    rcv.bind(endpoint)
    snd.connect(rcv.getsockopt_string(zmq.LAST_ENDPOINT))
    return snd, rcv


def _py_accepted(ctx, endpoint, hwm, size, frames=1, limit=100_000):
    """DONTWAIT messages a PUSH gets into a PULL that never reads."""
    snd, rcv = _py_pair(ctx, zmq.PUSH, zmq.PULL, endpoint, hwm, hwm)
    time.sleep(0.05)
    n = 0
    try:
        while n < limit:
            try:
                if frames == 1:
                    snd.send(b"x" * size, zmq.DONTWAIT)
                else:
                    snd.send_multipart([b"x" * size] * frames, zmq.DONTWAIT)
            except zmq.Again:
                break
            n += 1
    finally:
        snd.close(0)
        rcv.close(0)
    return n


# --- 001-1 ------------------------------------------------------------------------------------------------------


def test_hwm_defaults(scenario):
    outcome = scenario("hwm-defaults")
    _check_verdicts(outcome, "hwm-defaults")
    fig = outcome.figures
    assert len(fig["engine"]) == 12 and len(fig["pyzmq"]) >= 12
    values = {v for d in (fig["engine"], fig["pyzmq"]) for hw in d.values() for v in hw.values()}
    assert (outcome.verdict("001-1").verdict == HOLDS) == (values == {1000})
    # a PUSH/PULL inproc pair queues both ends' HWM; the zmqload run with DONTWAIT refused at about that point
    assert fig["capacity_engine"] == fig["capacity_pyzmq"]
    assert fig["run_first_refused"] is not None
    assert abs(fig["run_first_refused"] - fig["capacity_engine"]) <= 0.05 * fig["capacity_engine"]
    assert _fates_add_up(fig["run"]) and fig["run"]["dropped_mid"] + fig["run"]["dropped_tail"] == 0


def test_hwm_defaults_cross_check_pyzmq(scenario):
    outcome = scenario("hwm-defaults")
    ctx = zmq.Context()
    try:
        for name, engine in outcome.figures["engine"].items():
            s = ctx.socket(getattr(zmq, name))
            assert (s.getsockopt(zmq.SNDHWM), s.getsockopt(zmq.RCVHWM)) == (
                engine["SNDHWM"],
                engine["RCVHWM"],
            ), name
            s.close(0)
        assert (
            _py_accepted(ctx, "inproc://t-defaults", None, 64) == outcome.figures["capacity_engine"]
        )
    finally:
        ctx.term()


# --- 001-3 ------------------------------------------------------------------------------------------------------


def test_rcvhwm_full(scenario):
    outcome = scenario("rcvhwm-full")
    _check_verdicts(outcome, "rcvhwm-full")
    fig = outcome.figures
    for f in fig.values():
        assert _fates_add_up(f) and f["stranded"] == 0 and f["rcvhwm"] == 10
        # closed after a drain that ran out: every drop is placed during the run, none at close
        assert f["tail_placement"] == TAIL_MID_RUN and f[AMBIGUOUS_TAIL] == 0, f
    unlimited = {k: f for k, f in fig.items() if k.endswith("sndhwm=0")}
    default = {k: f for k, f in fig.items() if k.endswith("sndhwm=default")}
    lost = {
        k: f["dropped_start"] + f["dropped_mid"] + f["dropped_tail"] for k, f in unlimited.items()
    }
    waited = {k: f["queue_peak"]["messages"] for k, f in unlimited.items()}
    rule = not any(lost.values()) and all(w > 100 for w in waited.values())
    assert (outcome.verdict("001-3").verdict == DOES_NOT_HOLD) == rule
    # the backlog sat on the sender's side: its process grew, the receiver's did not grow more than it
    for k, f in unlimited.items():
        assert (
            f["producer_rss_kb"]
            > default[k.replace("sndhwm=0", "sndhwm=default")]["producer_rss_kb"]
        )
    pub_default = [f for k, f in default.items() if "/PUB/" in k]
    push_default = [f for k, f in default.items() if "/PUSH/" in k]
    # a PUB at its own SNDHWM drops (after the SUB's last arrival too: it read too few to free the pipe)
    assert all(f["dropped_mid"] + f["dropped_tail"] > 0 for f in pub_default)
    assert all(f["dropped_mid"] + f["dropped_tail"] == 0 for f in push_default)
    assert all(
        f["attempted"] < 0.8 * f["scheduled"] for f in push_default
    )  # ... a PUSH blocks instead


def test_rcvhwm_full_cross_check_pyzmq(scenario):
    """Plain pyzmq: RCVHWM 10 on a receiver that does not read, the sender unlimited; every
    message arrives once it reads (the receiver discarded none)."""
    outcome = scenario("rcvhwm-full")
    n, got = 2000, {}
    ctx = zmq.Context()
    try:
        for snd_type, rcv_type in ((zmq.PUSH, zmq.PULL), (zmq.PUB, zmq.SUB)):
            snd, rcv = _py_pair(ctx, snd_type, rcv_type, "tcp://127.0.0.1:0", sndhwm=0, rcvhwm=10)
            deadline = time.monotonic() + 3
            while not rcv.poll(10) and time.monotonic() < deadline:  # connected (SUB: subscribed)
                snd.send(b"probe")
            while rcv.poll(50):
                rcv.recv()
            for i in range(n):
                snd.send(i.to_bytes(4, "little") + b"x" * 4092, zmq.DONTWAIT)
            time.sleep(0.3)
            seen = set()
            while rcv.poll(500):
                seen.add(int.from_bytes(rcv.recv()[:4], "little"))
            got[snd_type] = len(seen)
            snd.close(0)
            rcv.close(0)
    finally:
        ctx.term()
    assert got == {zmq.PUSH: n, zmq.PUB: n}
    unlimited_lost = [
        f["dropped_mid"] + f["dropped_tail"]
        for k, f in outcome.figures.items()
        if k.endswith("sndhwm=0")
    ]
    assert unlimited_lost and not any(unlimited_lost)  # zmqload measured the same: none lost


# --- 001-6 ------------------------------------------------------------------------------------------------------


def test_monitor_at_hwm(scenario):
    outcome = scenario("monitor-at-hwm")
    _check_verdicts(outcome, "monitor-at-hwm")
    fig, v = outcome.figures, outcome.verdict("001-6")
    assert "ZMQ_EVENT_CONNECTED" in fig["header_events"] and "CONNECTED" in fig["pyzmq_events"]
    hwm_names = [e for e in fig["header_events"] + fig["pyzmq_events"] if "HWM" in e]
    for m in fig["runs"]:
        assert m["eagain"] > 0 if m["sender"] == "PUSH" else m["dropped"] > 0, (
            m
        )  # really at the HWM
        assert "HANDSHAKE_SUCCEEDED" in m["events_setup"]  # the monitor works
    during = {e for m in fig["runs"] for e in m["events_at_hwm"]}
    assert {m["library"] for m in fig["runs"]} == {"engine", "pyzmq"}
    assert (v.verdict == DOES_NOT_HOLD) == (not hwm_names and not during)


def test_monitor_at_hwm_cross_check_pyzmq(scenario):
    outcome = scenario("monitor-at-hwm")
    assert not hasattr(zmq, "EVENT_SND_HWM") and "SND_HWM" not in zmq.Event.__members__
    ctx = zmq.Context()
    events = []
    try:
        snd, rcv = _py_pair(
            ctx,
            zmq.PUSH,
            zmq.PULL,
            "tcp://127.0.0.1:0",
            sndhwm=1,
            rcvhwm=1,
            rcvbuf=2048,
            sndbuf=2048,
        )
        mon = snd.get_monitor_socket()
        time.sleep(0.3)
        while mon.poll(10):
            mon.recv_multipart()
        refused, deadline = 0, time.monotonic() + 5
        while refused < 20 and time.monotonic() < deadline:
            try:
                snd.send(b"x" * 1024, zmq.DONTWAIT)
            except zmq.Again:
                refused += 1
                time.sleep(0.01)
        while mon.poll(100):
            events.append(mon.recv_multipart()[0][:2])
        snd.disable_monitor()
        for s in (mon, snd, rcv):
            s.close(0)
    finally:
        ctx.term()
    assert refused == 20 and events == []
    assert outcome.verdict("001-6").measurements["events_while_at_hwm"] == []


# --- 001-7 ------------------------------------------------------------------------------------------------------


def test_size_vs_hwm(scenario):
    outcome = scenario("size-vs-hwm")
    _check_verdicts(outcome, "size-vs-hwm")
    fig = outcome.figures
    for key, f in fig.items():
        assert _fates_add_up(f) and f["dropped_mid"] == 0, (
            key
        )  # a PUSH blocks, it does not drop mid-run
        assert f["first_stop"] is not None and f["sndhwm"] == f["rcvhwm"] == 100, key
        assert f["stop"] == f["first_stop"]  # push-pull: the first block
    inproc = (fig["push-pull/inproc/64"]["stop"], fig["push-pull/inproc/65536"]["stop"])
    tcp = (fig["push-pull/tcp/64"]["stop"], fig["push-pull/tcp/65536"]["stop"])
    assert abs(inproc[0] - inproc[1]) <= 0.05 * inproc[0]  # HWM counts messages ...
    assert tcp[0] > 10 * tcp[1]  # ... the kernel's buffers count bytes
    assert fig["push-pull/tcp/65536"]["bytes_at_stop"] > fig["push-pull/tcp/64"]["bytes_at_stop"]
    m = outcome.verdict("001-7").measurements
    assert (outcome.verdict("001-7").verdict.startswith("depends: ")) == bool(
        m["same_count"] and m["large_stop_sooner"]
    )


def test_size_vs_hwm_cross_check_pyzmq(scenario):
    outcome = scenario("size-vs-hwm")
    ctx = zmq.Context()
    try:
        small = _py_accepted(ctx, "inproc://t-size-small", 100, 64)
        large = _py_accepted(ctx, "inproc://t-size-large", 100, 65536)
    finally:
        ctx.term()
    assert small == large == 200
    for size in (64, 65536):
        stop = outcome.figures[f"push-pull/inproc/{size}"]["stop"]
        assert abs(stop - small) <= 0.1 * small, (size, stop, small)


# --- 002-3 ------------------------------------------------------------------------------------------------------


def test_hwm_option(scenario):
    outcome = scenario("hwm-option")
    _check_verdicts(outcome, "hwm-option")
    calls, cap = outcome.figures["calls"], outcome.figures["capacity"]
    failed = [lib for lib in ("pyzmq", "engine") if calls[lib]["setsockopt"] != "ok"]
    raised = [
        lib
        for lib in ("pyzmq", "engine")
        if calls[lib]["setsockopt"] == "ok"
        and calls[lib]["SNDHWM"] == calls[lib]["RCVHWM"] == 10000
    ]
    assert (outcome.verdict("002-3").verdict == DOES_NOT_HOLD) == (not raised)
    for lib in failed:
        assert (calls[lib]["SNDHWM"], calls[lib]["RCVHWM"]) == (1000, 1000)
    assert calls["pyzmq_hwm_property"] == {"SNDHWM": 10000, "RCVHWM": 10000}
    assert cap["engine/inproc/before"] > cap["engine/inproc/default"]
    assert cap["engine/inproc/default"] <= cap["engine/inproc/after"] <= cap["engine/inproc/before"]


def test_hwm_option_cross_check_pyzmq(scenario):
    outcome = scenario("hwm-option")
    ctx = zmq.Context()
    try:
        sub = ctx.socket(zmq.SUB)
        with pytest.raises(zmq.ZMQError) as err:
            sub.setsockopt(zmq.HWM, 10000)
        assert err.value.errno == zmq.EINVAL
        assert outcome.figures["calls"]["pyzmq"]["setsockopt"].startswith(
            f"ZMQError errno {zmq.EINVAL}"
        )
        sub.close(0)
        # HWM 10000 set after connect, written out with SNDHWM/RCVHWM
        pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
        pull.bind("inproc://t-after")
        push.connect("inproc://t-after")
        push.setsockopt(zmq.SNDHWM, 10000)
        pull.setsockopt(zmq.RCVHWM, 10000)
        n = 0
        while n < 100_000:
            try:
                push.send(b"x", zmq.DONTWAIT)
            except zmq.Again:
                break
            n += 1
        for s in (push, pull):
            s.close(0)
    finally:
        ctx.term()
    assert n == outcome.figures["capacity"]["pyzmq/inproc/after"]
    assert n < outcome.figures["capacity"]["pyzmq/inproc/before"]


# --- 002-5 ------------------------------------------------------------------------------------------------------


def test_multipart_memory(scenario):
    from zmqload.scenarios.seed_002 import REDUCED

    outcome = scenario("multipart-memory")
    _check_verdicts(outcome, "multipart-memory")
    fig = outcome.figures
    for key, m in fig["runs"].items():
        assert "error" not in m, m
        assert m["bytes_received"] == m["bytes_queued"] and m["rss_growth_kb"] > 0, key
    ratios = fig["ratios"]
    assert set(ratios) == {f"{t}/multipart-{n}" for t in ("inproc", "tcp") for n in (16, 1024)}
    assert (outcome.verdict("002-5").verdict == DOES_NOT_HOLD) == all(
        r >= REDUCED for r in ratios.values()
    )
    counts = outcome.verdict("002-5").measurements["hwm_counting"]
    assert (
        counts["16 x 4096 B"] == counts["1 x 4096 B"] == counts["1 x 65536 B"]
    )  # one message, however many parts


_PYZMQ_MULTIPART = r"""
import json, sys, time, zmq
frames = int(sys.argv[1]); items = 128; part = 65536 // frames
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:"))
ctx = zmq.Context(); pull = ctx.socket(zmq.PULL); push = ctx.socket(zmq.PUSH)
for s in (pull, push):
    s.sndhwm = s.rcvhwm = 0
pull.bind("inproc://m"); push.connect("inproc://m")
data = [b"y" * part] * frames
r0 = rss()
for _ in range(items):
    push.send_multipart(data, copy=True)
time.sleep(0.3)
r1 = rss()
got = 0
while pull.poll(200):
    got += sum(len(f) for f in pull.recv_multipart())
print(json.dumps({"growth_kb": r1 - r0, "bytes": got}))
"""


def test_multipart_memory_cross_check_pyzmq(scenario):
    from zmqload.scenarios.seed_002 import REDUCED

    outcome = scenario("multipart-memory")
    growth = {}
    for frames in (1, 16, 1024):
        proc = subprocess.run(
            [sys.executable, "-c", _PYZMQ_MULTIPART, str(frames)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        r = json.loads(proc.stdout)
        assert r["bytes"] == 128 * 65536
        growth[frames] = r["growth_kb"]
    assert (
        growth[16] >= REDUCED * growth[1] and growth[1024] >= REDUCED * growth[1]
    )  # no reduction in pyzmq either
    assert growth[1024] > 1.5 * growth[1]  # tiny parts cost more
    assert outcome.figures["ratios"]["inproc/multipart-1024"] > 1.5
    ctx = zmq.Context()
    try:
        assert (
            _py_accepted(ctx, "inproc://t-mp-hwm", 10, 4096, frames=16)
            == outcome.verdict("002-5").measurements["hwm_counting"]["16 x 4096 B"]
        )
    finally:
        ctx.term()
