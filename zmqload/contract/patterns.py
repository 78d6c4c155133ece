"""Messaging patterns as data: socket types, which side binds, fan-out, envelope, round trip, the
device a user may put in the middle. Topology, accounting and validation read only this
(`Pattern.check`, `Pattern.topology`), so a new pattern is one `register()` call
(docs/ARCHITECTURE.md, "Endpoints")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

from ..errors import ConfigError
from .states import Word


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
    @property
    def producers_connect(self) -> Optional[str]: ...
    @property
    def producers_bind(self) -> Optional[str]: ...
    @property
    def consumers_connect(self) -> Optional[str]: ...
    @property
    def consumers_bind(self) -> Optional[str]: ...
    @property
    def role(self) -> str: ...
    @property
    def reply_timeout_ms(self) -> Optional[int]: ...


class Attach(Word):
    """How one of zmqload's sides reaches the other (run.json `topology`)."""

    BIND = "bind"
    CONNECT = "connect"


SIDES = ("producers", "consumers")
ENDPOINT_FIELDS = tuple(f"{side}_{how.value}" for side in SIDES for how in Attach)
"""The Workload fields of the endpoints per side: producers_bind, producers_connect, ..."""


def flag_of(side: str, attach: Attach) -> str:
    return f"--{side}-{attach.value}"


def split_endpoints(text: Optional[str]) -> list[str]:
    """An endpoints option's value ("EP[,EP...]") -> its endpoints, in order."""
    return [part.strip() for part in text.split(",")] if text else []


@dataclass(frozen=True)
class Side:
    """One of zmqload's sides as the options name it: `attach` None = not given (the pattern's own)."""

    name: str  # "producers" or "consumers"
    attach: Optional[Attach]
    endpoints: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        return flag_of(self.name, self.attach) if self.attach is not None else ""

    @property
    def given(self) -> bool:
        return self.attach is not None


@dataclass(frozen=True)
class Topology:
    """Who binds and who connects in one run, as the pattern's rules admit it."""

    producers: Side
    consumers: Side
    binder: Optional[str]  # "producer", "consumer", "proxy", or None: nobody of zmqload binds
    device: bool  # both sides connect: the user's device is between them
    producers_alone: bool = False  # --role producer: the consumers are the user's
    consumers_alone: bool = False  # --role consumer: the producers are the user's

    @property
    def given(self) -> bool:
        """The endpoints were named by the options (else the pattern's own topology)."""
        return self.producers.given or self.consumers.given

    def side(self, role: str) -> Side:
        return self.producers if role == "producer" else self.consumers

    @property
    def user_listens(self) -> bool:
        """zmqload connects to the user's system: a device, or a consumer (--role producer) or a producer
        (--role consumer) of the user's."""
        return self.device or (
            (self.producers_alone or self.consumers_alone) and self.binder is None
        )


@dataclass(frozen=True)
class Device:
    """What sits between a pattern's two sides when both connect: the user's component."""

    what: str  # how a user writes it, e.g. "a PULL|PUSH forwarder (...)"
    envelope_frames: int  # frames before the payload at zmqload's consumer through it


@dataclass(frozen=True)
class Pattern:
    name: str
    producer_socket: str  # libzmq socket type name, e.g. "PUSH"
    consumer_socket: str  # e.g. "PULL"
    fanout: bool  # every consumer should receive every message
    binder: str  # "consumer" or "producer": which side binds
    description: str
    subscribe: bool = False  # consumer must subscribe (SUB)
    envelope_frames: int = 0  # frames before the payload at the consumer (ROUTER: 1)
    proxy: bool = False  # producers and consumers both connect to a proxy between them
    round_trip: bool = False  # every request waits for its reply (REQ/REP)
    max_peers: Optional[int] = None  # most producers and most consumers (PAIR: exactly one pair)
    device: Optional[Device] = None  # both sides may connect to the user's device, this one
    no_device: str = ""  # why both sides cannot connect (no `device`)
    own_endpoints: bool = False  # a process of zmqload's own binds (proxy): no endpoints per side

    def binding_sockets(self, producers: int, consumers: int) -> int:
        """Sockets that bind an endpoint (each takes its own tcp port) in the pattern's own topology."""
        return {"consumer": consumers, "producer": producers, "proxy": 2}[self.binder]

    def consumer_envelope_frames(self, topology: Topology) -> int:
        """Frames before the payload at a consumer: the device's count with a device between."""
        return (
            self.device.envelope_frames
            if topology.device and self.device is not None
            else self.envelope_frames
        )

    def check(self, w: Settings) -> None:
        """The rules this pattern puts on a workload `w`: ConfigError naming the option."""
        if self.max_peers is not None:
            for flag, n in (("--producers", w.producers), ("--consumers", w.consumers)):
                if n > self.max_peers:
                    most = "1" if self.max_peers == 1 else f"1 to {self.max_peers}"
                    raise ConfigError(
                        flag,
                        f"got {n}; pattern {self.name} takes at most {self.max_peers} on "
                        f"each side; accepted: {most}",
                    )
        if self.proxy and w.endpoint is not None:
            raise ConfigError(
                "--endpoint",
                f"got {w.endpoint!r}; pattern {self.name} binds its own two "
                "endpoints; accepted: no --endpoint (--host and --port place them)",
            )
        if self.round_trip and w.send_mode != "block":
            raise ConfigError(
                "--send-mode",
                f"got {w.send_mode!r}; pattern {self.name} waits for every reply; accepted: block",
            )
        if w.reply_timeout_ms is not None and not self.round_trip:
            able = ", ".join(p.name for p in PATTERNS.values() if p.round_trip)
            raise ConfigError(
                "--reply-timeout-ms",
                f"got {w.reply_timeout_ms}; pattern {self.name} waits for no "
                f"replies; accepted: --reply-timeout-ms with {able}",
            )
        topology = self.topology(w)
        if w.join_delay_ms and topology.binder == "consumer":
            if topology.consumers.given:
                raise ConfigError(
                    "--join-delay-ms",
                    f"got {w.join_delay_ms}; the consumers bind (--consumers-bind), "
                    "so they cannot join late; accepted: 0, or consumers that "
                    "connect (--consumers-connect to a device, or --producers-bind)",
                )
            late = ", ".join(p.name for p in PATTERNS.values() if p.binder != "consumer")
            raise ConfigError(
                "--join-delay-ms",
                f"got {w.join_delay_ms}; the consumers of pattern {self.name} "
                f"bind, so they cannot join late; accepted: 0, or a pattern "
                f"whose consumers connect ({late}; or --producers-bind)",
            )

    def topology(self, w: Settings) -> Topology:
        """Who binds and who connects, from the endpoints per side; ConfigError for a combination
        this pattern cannot carry (the rules in the module's docstring)."""
        sides = []
        for name in SIDES:
            given = [(how, getattr(w, f"{name}_{how.value}")) for how in Attach]
            given = [(how, text) for how, text in given if text is not None]
            if len(given) == 2:
                (_, bound), (_, connected) = given
                raise ConfigError(
                    flag_of(name, Attach.CONNECT),
                    f"got {connected!r} with {flag_of(name, Attach.BIND)} {bound!r}; a side either "
                    f"binds or connects; accepted: one of {flag_of(name, Attach.BIND)}, "
                    f"{flag_of(name, Attach.CONNECT)}",
                )
            how, text = given[0] if given else (None, None)
            sides.append(Side(name, how, tuple(split_endpoints(text))))
        producers, consumers = sides
        if w.role == "producer":
            return self._producers_alone(w, producers, consumers)
        if w.role == "consumer":
            return self._consumers_alone(w, producers, consumers)
        if not (producers.given or consumers.given):
            return Topology(producers, consumers, self.binder, device=False)
        named = producers if producers.given else consumers
        value = ",".join(named.endpoints)
        if w.endpoint is not None:
            raise ConfigError(
                "--endpoint",
                f"got {w.endpoint!r} with {named.flag} {value!r}; accepted: "
                "--endpoint (zmqload's own topology) or the endpoints per side, not both",
            )
        if self.own_endpoints:
            raise ConfigError(
                named.flag,
                f"got {value!r}; pattern {self.name} runs zmqload's own proxy, which "
                "binds both endpoints; accepted: no endpoints per side (for your own "
                "XSUB|XPUB proxy: --pattern pub-sub with --producers-connect and "
                "--consumers-connect)",
            )
        if producers.attach is Attach.BIND and consumers.attach is Attach.BIND:
            raise ConfigError(
                flag_of("consumers", Attach.BIND),
                f"got {','.join(consumers.endpoints)!r} with --producers-bind; when both sides bind "
                "nobody connects; accepted: one side binds and the other connects to it, or both "
                "connect to a device in the middle",
            )
        if producers.attach is Attach.BIND or consumers.attach is Attach.BIND:
            return Topology(
                producers,
                consumers,
                "producer" if producers.attach is Attach.BIND else "consumer",
                device=False,
            )
        if not (producers.given and consumers.given):
            raise ConfigError(
                named.flag,
                f"got {value!r} without endpoints for the {self._other(named)}; accepted: "
                + self._one_side_ways(named),
            )
        if self.device is None:
            able = ", ".join(p.name for p in PATTERNS.values() if p.device is not None)
            service = (
                "--role producer with --producers-connect alone (your broker's frontend or your service "
                "answers zmqload's requests), "
                if self.round_trip
                else ""
            )
            raise ConfigError(
                flag_of("consumers", Attach.CONNECT),
                f"got {','.join(consumers.endpoints)!r} with --producers-connect; pattern {self.name} "
                f"cannot have a device between its sides ({self.no_device}); accepted: {service}one "
                f"side binds (--producers-bind or --consumers-bind), or a pattern whose sides can both "
                f"connect: {able}",
            )
        return Topology(producers, consumers, None, device=True)

    @staticmethod
    def _other(named: Side) -> str:
        return "consumers" if named.name == "producers" else "producers"

    def _one_side_ways(self, named: Side) -> str:
        """What a run whose endpoints name one connecting side only (`named`, both roles running)
        can be instead: the other side's endpoints too (a device of the user's between both sides,
        or that side binding), or zmqload's `named` side alone against the user's other side
        (--role; a service of the user's with a round-trip pattern)."""
        other = self._other(named)
        ways = []
        if self.device is not None:
            ways.append(
                f"{flag_of(other, Attach.CONNECT)} too (a device of yours between both sides)"
            )
        ways.append(
            f"{flag_of(other, Attach.BIND)} (the {other} bind, the {named.name} connect to them)"
        )
        if named.name == "producers":
            yours = "a request-reply service of yours" if self.round_trip else "a consumer of yours"
            ways.append(f"--role producer to load {yours} alone at {named.flag}")
        elif not self.round_trip:
            ways.append(
                f"--role consumer with --duration SECONDS to record a producer of yours alone at {named.flag}"
            )
        return ", or ".join([", ".join(ways[:-1]), ways[-1]] if len(ways) > 2 else ways)

    def _producers_alone(self, w: Settings, producers: Side, consumers: Side) -> Topology:
        """--role producer: zmqload's producers load a consumer of the user's at their endpoints."""
        mine = self._one_side_alone(w, "producer", producers, consumers)
        return Topology(
            producers,
            consumers,
            "producer" if mine.attach is Attach.BIND else None,
            device=False,
            producers_alone=True,
        )

    def _consumers_alone(self, w: Settings, producers: Side, consumers: Side) -> Topology:
        """--role consumer: zmqload's consumers record what a producer of the user's sends."""
        if self.round_trip:
            raise ConfigError(
                "--role",
                f"got 'consumer' with pattern {self.name}: a REP answers each request, "
                "and a service's requests are not a run of zmqload's; accepted: --role "
                "consumer with "
                + ", ".join(
                    p.name for p in PATTERNS.values() if not p.round_trip and not p.own_endpoints
                ),
            )
        mine = self._one_side_alone(w, "consumer", consumers, producers)
        return Topology(
            producers,
            consumers,
            "consumer" if mine.attach is Attach.BIND else None,
            device=False,
            consumers_alone=True,
        )

    def _one_side_alone(self, w: Settings, role: str, mine: Side, theirs: Side) -> Side:
        """The rules of --role producer and --role consumer: only zmqload's side names endpoints
        (where the user's other side is, or what it connects to); returns that side."""
        other = "consumers" if role == "producer" else "producers"
        if theirs.given:
            raise ConfigError(
                theirs.flag,
                f"got {','.join(theirs.endpoints)!r} with --role {role}; the {other} "
                f"are yours; accepted: no {other[:-1]} endpoints (--{mine.name}-connect "
                f"or --{mine.name}-bind name where yours are)",
            )
        if not mine.given:
            raise ConfigError(
                "--role",
                f"got {role!r} without --{mine.name}-connect or --{mine.name}-bind; accepted: "
                f"--role {role} with the endpoints of your {other[:-1]} (connect) or those "
                f"your {other[:-1]} connects to (bind)",
            )
        if w.endpoint is not None:
            raise ConfigError(
                "--endpoint", f"got {w.endpoint!r} with --role {role}; accepted: {mine.flag} alone"
            )
        if self.own_endpoints:
            able = ", ".join(p.name for p in PATTERNS.values() if not p.own_endpoints)
            raise ConfigError(
                "--role",
                f"got {role!r} with pattern {self.name}, which runs zmqload's own proxy; "
                f"accepted: --role {role} with {able}",
            )
        return mine


PATTERNS: dict[str, Pattern] = {}


def register(pattern: Pattern) -> Pattern:
    PATTERNS[pattern.name] = pattern
    return pattern


def get(name: str) -> Pattern:
    return PATTERNS[name]


def serves(pattern: str, role: str) -> bool:
    """A run against a request-reply service of the user's: zmqload's producers alone (--role
    producer) with a round-trip pattern. Its figures are the service's answers (answered,
    unanswered, the round trip); a consumer of the user's other than a service is not seen at all."""
    return role == "producer" and get(pattern).round_trip


register(
    Pattern(
        "push-pull",
        "PUSH",
        "PULL",
        fanout=False,
        binder="consumer",
        description="PUSH producers round-robin to PULL consumers; blocks at HWM",
        device=Device(
            "a PULL|PUSH forwarder: its PULL binds for the producers, its PUSH for the consumers "
            "(zmq.proxy(pull, push))",
            envelope_frames=0,
        ),
    )
)
register(
    Pattern(
        "pub-sub",
        "PUB",
        "SUB",
        fanout=True,
        binder="producer",
        subscribe=True,
        description="PUB producers fan out to SUB consumers; drops at HWM",
        device=Device(
            "an XSUB|XPUB proxy: its XSUB binds for the producers, its XPUB for the consumers "
            "(zmq.proxy(xsub, xpub))",
            envelope_frames=0,
        ),
    )
)
register(
    Pattern(
        "pair",
        "PAIR",
        "PAIR",
        fanout=False,
        binder="consumer",
        max_peers=1,
        description="one PAIR to one PAIR (exclusive pair); blocks at HWM",
        no_device="an exclusive PAIR talks to its one peer; for a device between use push-pull or dealer-router",
    )
)
register(
    Pattern(
        "dealer-router",
        "DEALER",
        "ROUTER",
        fanout=False,
        binder="consumer",
        envelope_frames=1,
        description="DEALER producers to ROUTER consumers (routing id frame skipped); blocks at HWM",
        # the consumer's ROUTER adds the broker's routing id before the one the broker's ROUTER added
        device=Device(
            "a ROUTER|DEALER broker: its ROUTER binds for the producers, its DEALER for the consumers "
            "(zmq.proxy(router, dealer)); the consumers skip both routing id frames",
            envelope_frames=2,
        ),
    )
)
register(
    Pattern(
        "proxy",
        "PUB",
        "SUB",
        fanout=True,
        binder="proxy",
        subscribe=True,
        proxy=True,
        own_endpoints=True,
        description="PUB -> XSUB | zmq_proxy | XPUB -> SUB, the proxy's HWMs set apart",
        no_device="zmqload runs its own proxy there",
    )
)
register(
    Pattern(
        "req-rep",
        "REQ",
        "REP",
        fanout=False,
        binder="consumer",
        round_trip=True,
        description="REQ -> REP round trips (one request in flight per producer); rate-controlled",
        no_device="round trips through a broker of yours are measured against the services behind it, not "
        "zmqload's REPs",
    )
)
