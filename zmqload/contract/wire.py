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
"""The header's first word is stream << SEQ_BITS | seq."""
SEQ_MASK: Final = (1 << SEQ_BITS) - 1
MAX_SEQ: Final = SEQ_MASK
"""The largest seq the header carries (so the largest per-producer count)."""
WARMUP_STREAM: Final = 0xFFFF
"""Stream id of warm-up messages, sent before the measured run starts."""
FOREIGN_STREAM: Final = 0xFFFE
"""Stream id a consumer records a foreign message under (--role consumer): one without zmqload's
header by csrc/zl_wire.h's rule (too short, a stream id above MAX_STREAMS, or a send time not
within the hour before it arrived), seq 0, t_sent 0."""
FOREIGN_AGE_NS: Final = 3_600_000_000_000
FOREIGN_SLACK_NS: Final = 1_000_000
MAX_TOPIC_WIDTH: Final = 48
"""With --topics the first frame is topic (a run's fixed width, at most this) + header + the rest:
the receiver reads topic and header into a 64-byte buffer (contract/topics.py names the topics)."""
MAX_STREAMS: Final = 64
"""Producers per run: the receiver marks each producer's warm-up in one 64-bit mask."""


class SendStatus(enum.IntEnum):
    """Per-message status in the sends records (the `status` column)."""
    OK = 0
    EAGAIN = 1      # dontwait at HWM: dropped by the sender
    TIMEOUT = 2     # timeout mode: SNDTIMEO expired, dropped
    ERROR = 3


class SendMode(enum.IntEnum):
    """What a send does at HWM; the lower-case name is the --send-mode word."""
    BLOCK = 0       # wait (in SNDTIMEO-sized steps, so a stop is seen within a slice)
    DONTWAIT = 1    # drop at once: SendStatus.EAGAIN
    TIMEOUT = 2     # drop after --sndtimeo-ms: SendStatus.TIMEOUT

    @property
    def word(self) -> str:
        return self.name.lower()


SEND_MODES: Final = tuple(mode.word for mode in SendMode)
"""The accepted --send-mode words, in SendMode order."""
SendModeWord = Literal["block", "dontwait", "timeout"]
"""SEND_MODES as a type (a Workload's send_mode; the engine's Sender takes it)."""
