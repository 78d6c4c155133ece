"""The receiver's parsing of a peer's bytes, fuzzed like the other parsers (test_fuzz_inputs.fuzz:
derandomized and short here, `make fuzz` runs it long): zl_classify through the engine against the rule of docs/RECORDS.md
written again below, and a Receiver fed arbitrary multipart messages through a real socket, whose
counts must add up to what was sent with nothing recorded outside the run's bounds."""

from __future__ import annotations

import struct

import numpy as np
from hypothesis import example, given, strategies as st

from test_fuzz_inputs import bounded, fuzz
from users_header import M64, check
from zmqload import _engine

NOW = 10**15  # a monotonic time well past boot
FLOOR = NOW - 60 * 10**9


def rule(head: bytes, now: int, key: int, streams: int, floor: int, origin: int, rate: int) -> str:
    """docs/RECORDS.md "Which messages are zmqload's", on its own."""
    if len(head) < 16:
        return "foreign"
    word, t = struct.unpack_from("<Qq", head)
    stream, seq = (word >> 48) & 0xFF, word & ((1 << 40) - 1)
    if ((word >> 40) & 0xFF) | (word >> 56) << 8 != check(stream, seq, t, key):
        return "foreign"
    if t < floor or t > now + 10**9:
        return "implausible"
    if stream == 0xFF:
        return "warmup" if seq < streams else "implausible"
    if stream >= streams:
        return "implausible"
    rate = rate if 0 < rate < (1 << 25) else (1 << 25)
    since = t - (origin or floor) + 10**9
    return "ours" if since >= 0 and seq * 10**9 <= since * rate else "implausible"


def forged(draw_stream: int, seq: int, t: int, key: int) -> bytes:
    c = check(draw_stream, seq, t, key)
    return struct.pack("<QQ", (c >> 8) << 56 | draw_stream << 48 | (c & 0xFF) << 40 | seq, t & M64)


headers = st.one_of(
    st.binary(max_size=40),
    st.builds(
        forged,
        st.sampled_from([0, 1, 5, 63, 64, 200, 0xFE, 0xFF]),
        st.one_of(st.integers(0, 100), st.integers(0, (1 << 40) - 1)),
        st.one_of(
            st.just(NOW),
            st.integers(FLOOR - 10**10, NOW + 2 * 10**9),
            st.integers(-(2**63), 2**63 - 1),
        ),
        st.sampled_from([0, 7, M64]),
    ),
)


@fuzz(400)
@given(
    head=headers,
    key=st.sampled_from([0, 7, M64]),
    streams=st.integers(1, 64),
    origin=st.sampled_from([0, FLOOR, NOW - 10**9, NOW]),
    rate=st.sampled_from([0, 1, 1000, 10**6, 1 << 30]),
)
@example(head=bytes(16), key=0, streams=64, origin=0, rate=0)
@example(head=forged(0, 0, NOW, 0), key=0, streams=1, origin=NOW, rate=1)
@example(
    head=forged(0, 2, NOW, 0), key=0, streams=1, origin=NOW, rate=1
)  # 2 in a second at 1/s: no
def test_the_engines_rule_is_the_documented_rule(head, key, streams, origin, rate):
    with bounded("receiver_rule", len(head)):
        kind, word = _engine.classify(head, NOW, key, streams, FLOOR, origin, rate)
    assert kind == rule(head, NOW, key, streams, FLOOR, origin, rate)
    if kind in ("ours", "warmup"):
        assert word >> 48 == head[6] and word & ((1 << 48) - 1) == int.from_bytes(
            head[:5], "little"
        )


frames = st.lists(st.binary(max_size=48), min_size=1, max_size=4)


@fuzz(40)
@example(
    messages=[[b"", b"", b""]], parts=1, record_foreign=False, router=True
)  # a frame read as envelope
@given(
    messages=st.lists(
        st.one_of(
            frames,
            st.builds(lambda s: [forged(0, s, _engine.now_ns(), 0)], st.integers(0, 1 << 39)),
        ),
        max_size=60,
    ),
    parts=st.sampled_from([1, 2]),
    record_foreign=st.booleans(),
    router=st.booleans(),
)
def test_a_receiver_counts_every_message_whatever_its_frames(
    messages, parts, record_foreign, router
):
    """Through real sockets: each message (each frame, where a PULL's receiver expects single frames
    and keeps no foreign records: reading on for frames costs the loop its speed) is received or
    foreign exactly once, and every recorded seq is one the run could have sent: at most 2^25 a second from
    60 s before the receiver was made. A ROUTER's receiver reads the routing id first (its envelope)."""
    with bounded("receiver_frames", sum(map(len, messages)), trace=False):
        _exchange(messages, parts, record_foreign, router)


def _exchange(messages: list[list[bytes]], parts: int, record_foreign: bool, router: bool) -> None:
    ctx = _engine.Context(1)
    pull = _engine.Socket(ctx, _engine.SOCKET_TYPES["ROUTER" if router else "PULL"])
    push = _engine.Socket(ctx, _engine.SOCKET_TYPES["DEALER" if router else "PUSH"])
    try:
        for sock in (pull, push):
            sock.set_option(_engine.SOCKET_OPTION_IDS["LINGER"], 0)
        pull.bind("inproc://fuzz")
        push.connect("inproc://fuzz")
        made = _engine.now_ns()
        receiver = _engine.Receiver(
            pull, envelope_frames=int(router), record_foreign=record_foreign, parts=parts
        )
        for message in messages:
            for i, frame in enumerate(message):
                push.send_bytes(frame, more=i < len(message) - 1)
        whole = parts > 1 or record_foreign or router
        expected = len(messages) if whole else sum(len(m) for m in messages)
        columns = (
            np.zeros(expected + 1, np.uint64),
            np.zeros(expected + 1, np.int64),
            np.zeros(expected + 1, np.int64),
            np.zeros(expected + 1, np.intc),
        )
        got = 0
        while receiver.received + receiver.foreign < expected:
            before = receiver.received + receiver.foreign
            got = receiver.run_slice(*columns, got, _engine.now_ns() + 200_000_000)
            assert receiver.received + receiver.foreign > before, "a message went missing"
        assert receiver.received + receiver.foreign == expected and receiver.warmups == 0
        words = columns[0][:got]
        ours = words[(words >> np.uint64(48)) != 0xFFFE]
        assert len(ours) == receiver.received
        bound = ((_engine.now_ns() - made) / 1e9 + 62) * (1 << 25)
        assert all(int(w) & ((1 << 48) - 1) <= bound for w in ours)
        assert len(words) - len(ours) == (receiver.foreign if record_foreign else 0)
    finally:
        pull.close(0)
        push.close(0)
        ctx.term()
