"""The words a run's figures are said in: a service of the user's (req-rep, --role producer) is
sent requests, answers them, is measured by round trips and is what limits a search; zmqload's
own patterns send messages that consumers receive. Lines that name them take them from here."""

from __future__ import annotations

from dataclasses import dataclass

from . import patterns


@dataclass(frozen=True)
class Words:
    unit: str  # "msg" in "msg/s"
    items: str  # "messages" / "requests"
    received: str  # what the far side did with them: "received" / "answered"
    latency: str  # what the p99 is of
    limit: str  # the component that falls behind, as a subject

    def rate(self) -> str:
        """'msg/s' / 'req/s'."""
        return f"{self.unit}/s"


MESSAGES = Words(
    unit="msg",
    items="messages",
    received="received",
    latency="latency from intended send",
    limit="the consumer",
)
REQUESTS = Words(
    unit="req",
    items="requests",
    received="answered",
    latency="round trip from intended send",
    limit="your service",
)


def words_for(pattern: str, role: str) -> Words:
    """The words of a run of `pattern` with `role` (a foreign file's unknown pattern: messages)."""
    return REQUESTS if pattern in patterns.PATTERNS and patterns.serves(pattern, role) else MESSAGES
