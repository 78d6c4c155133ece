"""zmqload's header written from docs/RECORDS.md alone, the way a user's producer writes it (no
zmqload code), and the garbage real producers send: the test peers' shared vocabulary."""

from __future__ import annotations

import random
import struct

M64 = (1 << 64) - 1


def check(stream: int, seq: int, t_sent_ns: int, key: int = 0) -> int:
    """The 16-bit check of a header; key 0 is the public key of runs with a side of the user's."""
    h = ((stream << 48) | seq) ^ key
    h ^= (t_sent_ns * 0x9E3779B97F4A7C15) & M64
    return (((h * 0xC2B2AE3D27D4EB4F) & M64) >> 48) ^ 0x5A5A


def header(stream: int, seq: int, t_sent_ns: int, key: int = 0) -> bytes:
    """The 16 bytes: the check's high byte, the stream, its low byte and seq, then t_sent_ns."""
    c = check(stream, seq, t_sent_ns, key)
    return struct.pack(
        "<QQ", (c >> 8) << 56 | stream << 48 | (c & 0xFF) << 40 | seq, t_sent_ns & M64
    )


def hostile_messages(now_ns: int) -> tuple[list[list[bytes]], int]:
    """(messages as frame lists, how many carry a valid check but cannot be a run's): zeros, text,
    random bytes, small integers, a truncated header, a multipart message with a 3-byte first frame,
    and forged headers with extreme streams, seqs and send times."""
    rng = random.Random(38)
    plain = (
        [bytes(n) for n in (16, 64, 1000)]
        + [b"GET /metrics HTTP/1.1 line %d\n" % i for i in range(50)]
        + [rng.randbytes(rng.randint(16, 300)) for _ in range(200)]
        + [struct.pack("<QQ", i, i + 1) for i in range(50)]
        + [header(0, 7, now_ns)[:8]]
    )
    forged = [
        header(100, 1, now_ns),
        header(0xFE, 1, now_ns),
        header(0xFF, 9999, now_ns),
        header(0, (1 << 40) - 1, now_ns),
        header(1, 1 << 39, now_ns),
        header(0, 3, 0),
        header(0, 3, -1),
        header(0, 3, (1 << 63) - 1),
        header(0, 3, now_ns + 10_000_000_000),
        header(0, 3, now_ns - 120_000_000_000),
    ]
    messages = [[m] for m in plain + forged] + [[b"abc", header(0, 5, now_ns) + bytes(16)]]
    rng.shuffle(messages)
    return messages, len(forged)
