"""Messaging patterns as pluggable units.

A pattern says which socket types the producers and consumers use, which side binds,
whether every consumer should see every message (fan-out), and any envelope frames the
consumer must skip. Topology code, accounting and validation read only this description
(the rules a pattern puts on a workload are `Pattern.check`), so a new pattern is one
`register()` call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

from ..errors import ConfigError


class Settings(Protocol):
    """What a pattern's rules read of a workload (contract.workload.Workload has it all): the pattern
    table stands below the option table that names its patterns."""
    @property
    def producers(self) -> int: ...
    @property
    def consumers(self) -> int: ...
    @property
    def endpoint(self) -> Optional[str]: ...
    @property
    def send_mode(self) -> str: ...
    @property
    def join_delay_ms(self) -> int: ...


@dataclass(frozen=True)
class Pattern:
    name: str
    producer_socket: str          # libzmq socket type name, e.g. "PUSH"
    consumer_socket: str          # e.g. "PULL"
    fanout: bool                  # every consumer should receive every message
    binder: str                   # "consumer" or "producer": which side binds
    description: str
    subscribe: bool = False       # consumer must subscribe (SUB)
    envelope_frames: int = 0      # frames before the payload at the consumer (ROUTER: 1)
    proxy: bool = False           # producers and consumers both connect to a proxy between them
    round_trip: bool = False      # every request waits for its reply (REQ/REP)
    max_peers: Optional[int] = None   # most producers and most consumers (PAIR: exactly one pair)

    def binding_sockets(self, producers: int, consumers: int) -> int:
        """Sockets that bind an endpoint (each takes its own tcp port)."""
        return {"consumer": consumers, "producer": producers, "proxy": 2}[self.binder]

    def check(self, w: Settings) -> None:
        """The rules this pattern puts on a workload `w`: ConfigError naming the option."""
        if self.max_peers is not None:
            for flag, n in (("--producers", w.producers), ("--consumers", w.consumers)):
                if n > self.max_peers:
                    most = "1" if self.max_peers == 1 else f"1 to {self.max_peers}"
                    raise ConfigError(flag, f"got {n}; pattern {self.name} takes at most {self.max_peers} on "
                                            f"each side; accepted: {most}")
        if self.proxy and w.endpoint is not None:
            raise ConfigError("--endpoint", f"got {w.endpoint!r}; pattern {self.name} binds its own two "
                                            "endpoints; accepted: no --endpoint (--host and --port place them)")
        if self.round_trip and w.send_mode != "block":
            raise ConfigError("--send-mode", f"got {w.send_mode!r}; pattern {self.name} waits for every reply; "
                                             "accepted: block")
        if w.join_delay_ms and self.binder == "consumer":
            late = ", ".join(p.name for p in PATTERNS.values() if p.binder != "consumer")
            raise ConfigError("--join-delay-ms", f"got {w.join_delay_ms}; the consumers of pattern {self.name} "
                                                 f"bind, so they cannot join late; accepted: 0, or a pattern "
                                                 f"whose consumers connect ({late})")


PATTERNS: dict[str, Pattern] = {}


def register(pattern: Pattern) -> Pattern:
    PATTERNS[pattern.name] = pattern
    return pattern


def get(name: str) -> Pattern:
    return PATTERNS[name]


register(Pattern(
    "push-pull", "PUSH", "PULL", fanout=False, binder="consumer",
    description="PUSH producers round-robin to PULL consumers; blocks at HWM"))
register(Pattern(
    "pub-sub", "PUB", "SUB", fanout=True, binder="producer", subscribe=True,
    description="PUB producers fan out to SUB consumers; drops at HWM"))
register(Pattern(
    "pair", "PAIR", "PAIR", fanout=False, binder="consumer", max_peers=1,
    description="one PAIR to one PAIR (exclusive pair); blocks at HWM"))
register(Pattern(
    "dealer-router", "DEALER", "ROUTER", fanout=False, binder="consumer", envelope_frames=1,
    description="DEALER producers to ROUTER consumers (routing id frame skipped); blocks at HWM"))
register(Pattern(
    "proxy", "PUB", "SUB", fanout=True, binder="proxy", subscribe=True, proxy=True,
    description="PUB -> XSUB | zmq_proxy | XPUB -> SUB, the proxy's HWMs set apart"))
register(Pattern(
    "req-rep", "REQ", "REP", fanout=False, binder="consumer", round_trip=True,
    description="REQ -> REP round trips (one request in flight per producer); rate-controlled"))
