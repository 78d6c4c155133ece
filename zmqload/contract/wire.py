"""The wire header and the engine's per-message codes, for Python.

csrc/zl_wire.h states the same for C; tests/test_contract.py checks the two agree through
the constants the engine exports. docs/RECORDS.md describes the layout.
"""

from __future__ import annotations

import enum
from typing import Final, Literal

HEADER_SIZE: Final = 16
"""Bytes of the header at the start of every message: the smallest message size."""
SEQ_BITS: Final = 48
"""A recorded word is stream << SEQ_BITS | seq (on the wire the stream is bits 48-55, the check
bits 40-47 and 56-63: docs/RECORDS.md)."""
SEQ_MASK: Final = (1 << SEQ_BITS) - 1
WIRE_SEQ_BITS: Final = 40
"""Bits of seq on the wire."""
MAX_SEQ: Final = (1 << WIRE_SEQ_BITS) - 1
"""The largest seq the header carries (so the largest per-producer count)."""
WARMUP_STREAM: Final = 0xFF
"""Stream id of warm-up messages, sent before the measured run starts."""
FOREIGN_STREAM: Final = 0xFFFE
"""Stream id a consumer records a foreign message under (--role consumer): seq 0, t_sent 0."""
LOOKBACK_NS: Final = 60_000_000_000
"""A message of the run was sent no earlier than this before its receiver started."""
FUTURE_NS: Final = 1_000_000_000
"""... and no later than this after it arrived (the clocks of a placed run agree within it)."""
MAX_RATE: Final = 1 << 25
"""msg/s a producer is held to where its pace is not known (unpaced, or the user's)."""
MAX_TOPIC_WIDTH: Final = 48
"""With --topics the first frame is topic (a run's fixed width, at most this) + header + the rest:
the receiver reads topic and header into a 64-byte buffer (contract/topics.py names the topics)."""
MAX_STREAMS: Final = 64
"""Producers per run: the receiver marks each producer's warm-up in one 64-bit mask."""


def check(stream: int, seq: int, t_sent_ns: int, key: int = 0) -> int:
    """The header's check (csrc/zl_wire.h zl_check): 16 bits of the other fields and the run's key,
    0x5A5A for all zeros. A producer of yours writing zmqload's header uses key 0."""
    m = (1 << 64) - 1
    h = (((stream & 0xFF) << SEQ_BITS) | (seq & MAX_SEQ)) ^ key
    h ^= (t_sent_ns * 0x9E3779B97F4A7C15) & m
    h = (h * 0xC2B2AE3D27D4EB4F) & m
    return (h >> 48) ^ 0x5A5A


def header(stream: int, seq: int, t_sent_ns: int, key: int = 0) -> bytes:
    """The 16 bytes a message of (stream, seq) sent at t_sent_ns starts with."""
    c = check(stream, seq, t_sent_ns, key)
    word = (
        (seq & MAX_SEQ) | (c & 0xFF) << WIRE_SEQ_BITS | (stream & 0xFF) << SEQ_BITS | (c >> 8) << 56
    )
    return word.to_bytes(8, "little") + (t_sent_ns & ((1 << 64) - 1)).to_bytes(8, "little")


class SendStatus(enum.IntEnum):
    """Per-message status in the sends records (the `status` column)."""

    OK = 0
    EAGAIN = 1  # dontwait at HWM: dropped by the sender
    TIMEOUT = 2  # timeout mode: SNDTIMEO expired, dropped
    ERROR = 3


class SendMode(enum.IntEnum):
    """What a send does at HWM; the lower-case name is the --send-mode word."""

    BLOCK = 0  # wait (in SNDTIMEO-sized steps, so a stop is seen within a slice)
    DONTWAIT = 1  # drop at once: SendStatus.EAGAIN
    TIMEOUT = 2  # drop after --sndtimeo-ms: SendStatus.TIMEOUT

    @property
    def word(self) -> str:
        return self.name.lower()


SEND_MODES: Final = tuple(mode.word for mode in SendMode)
"""The accepted --send-mode words, in SendMode order."""
SendModeWord = Literal["block", "dontwait", "timeout"]
"""SEND_MODES as a type (a Workload's send_mode; the engine's Sender takes it)."""
