"""Messaging patterns as pluggable units.

A pattern says which socket types the producers and consumers use, which side binds,
whether every consumer should see every message (fan-out), and any envelope frames the
consumer must skip. Topology code and accounting read only this description, so a new
pattern is one `register()` call.
"""
from __future__ import annotations

from dataclasses import dataclass


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
    "pair", "PAIR", "PAIR", fanout=False, binder="consumer",
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
