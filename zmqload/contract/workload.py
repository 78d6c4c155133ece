"""The workload model and its option table `OPTIONS`: every flag, parser, limit, choice and help
text, in one place. Validation, the `run` and `sweep` parsers, sweep files and the Python API all
use it, so each refuses a bad value with the same ConfigError."""

from __future__ import annotations

import dataclasses
import decimal
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, NoReturn, Optional, TypeVar, Union

from . import patterns, uris
from . import topics as topic_rule
from .curve import KEY_FILE_FORMS, SECRET_FILE_FORMS
from .masters import MASTER_FORM, MASTERS_ACCEPTED
from .sizes import (
    MAX_SIZE,
    PAYLOAD_ACCEPTED,
    SIZE_ACCEPTED,
    SIZE_FORM,
    Sizes,
    reads_file,
    spec_of,
    table_of,
)
from .wire import HEADER_SIZE, MAX_SEQ, MAX_STREAMS, SEND_MODES, SendModeWord
from ..errors import ConfigError

MAX_PARTS = 64
MAX_PACED = (2**63 - 1) // 10**9  # paced: seq * 1e9 / rate must fit the int64 schedule
MAX_RATE = 100_000_000
MAX_INT32 = 2**31 - 1  # libzmq's int socket options
MAX_MS = 3_600_000
TRANSPORTS = ("tcp", "ipc", "inproc")
COMPRESSIONS = ("none", "snappy", "lz4", "zstd")
CLOSE_ORDERS = ("producer-first", "consumer-first", "after-drain")
DRAIN_MODES = ("fast", "slow", "none")
ROLES = ("both", "producer", "consumer")
CONFLATES = ("off", "consumers", "producers", "both")
CONFLATE_SOCKETS = ("PUSH", "PULL", "PUB", "SUB", "DEALER")
"""The socket types libzmq applies ZMQ_CONFLATE to (it ignores the option on the others)."""
MAX_HEARTBEAT_TTL_MS = 6_553_599
"""libzmq keeps ZMQ_HEARTBEAT_TTL in tenths of a second, at most 65535 of them."""
HEARTBEAT_OPTIONS = ("heartbeat_ivl_ms", "heartbeat_ttl_ms", "heartbeat_timeout_ms")
LIBZMQ_SINCE = {
    "router_handover": (4, 1),
    "xpub_nodrop": (4, 1),
    **{name: (4, 2) for name in HEARTBEAT_OPTIONS},
}
"""The first libzmq release with each socket option zmqload may set (older ones refuse it, EINVAL)."""
SERVICE_REPLY_TIMEOUT_MS = 5000
"""--reply-timeout-ms unset, against a service of the user's: it may stop answering."""


def reply_timeout_in_effect(reply_timeout_ms: Optional[int], role: str) -> int:
    """--reply-timeout-ms as given, else SERVICE_REPLY_TIMEOUT_MS against a service of the user's
    (--role producer), else 0: wait for every reply (zmqload's own REP always answers)."""
    if reply_timeout_ms is not None:
        return reply_timeout_ms
    return SERVICE_REPLY_TIMEOUT_MS if role == "producer" else 0


CPU_PLACEMENTS = ("auto", "none")
CURVES = ("off", "on")
SECURITY_GROUP = "security (the data sockets)"
PLACEMENTS = ("spread", "pack")
PACINGS = ("spin", "sleep")
DEFAULT_COUNT = 100_000
UNPACED_RATE_GUESS = 5_000_000
"""Messages per second one unpaced producer is assumed to reach where only --duration bounds a
run (loopback's ceiling here, docs/BENCHMARKS.md "Engine throughput"): what its workers prepare
spill files for."""
SOCKET_OPTIONS = "socket options (unset: libzmq's default)"  # a help group
T = TypeVar("T")

_ENDPOINT = re.compile(
    r"^(tcp://(?P<host>[A-Za-z0-9_.\-]+|\[[0-9a-fA-F:]+\]):(?P<port>\d+|\*)"
    r"|ipc://(?P<path>.+)|inproc://(?P<name>[A-Za-z0-9_.\-]+))$"
)
_LISTED = (
    r"(?:tcp://(?:[A-Za-z0-9_.\-]+|\*|\[[0-9a-fA-F:]+\]):(?:\d+|\*)"
    r"|ipc://[^,]+|inproc://[A-Za-z0-9_.\-]+)"
)
_ENDPOINT_LIST = re.compile(rf"\s*{_LISTED}(?:\s*,\s*{_LISTED})*\s*")
PLACEMENT_GROUP = "placement (beyond this host's processes)"
METRICS_GROUP = "live metrics (Prometheus)"
_PORT = r"(?:6553[0-5]|655[0-2]\d|65[0-4]\d\d|6[0-4]\d{3}|[1-5]\d{4}|[1-9]\d{0,3})"
ENDPOINTS_GROUP = "endpoints per side (a system of yours between the producers and the consumers)"
IPC_PATH_MAX = 107  # bytes of a unix socket path (sun_path, its NUL excluded)
_RESET_LIST = re.compile(r"\s*\d+(?:\.\d*)?(?:\s*,\s*\d+(?:\.\d*)?)*\s*")
RESET_ACCEPTED = (
    "seconds after the start, one or an increasing comma-separated list (e.g. 1.5 or 1,2.5), "
    "each below --duration"
)
_RESTART_ITEM = r"[pc]\d{1,3}@\d+(?:\.\d*)?"
# a comma or a "+" between restarts: in sweep and capacity a comma makes an axis, "+" does not
_RESTART_LIST = re.compile(rf"\s*{_RESTART_ITEM}(?:\s*[,+]\s*{_RESTART_ITEM})*\s*")
RESTART_ACCEPTED = (
    "WORKER@SECONDS, one or a list joined by commas or + (e.g. c0@2.5, c0@1,p0@2 or c0@1+p0@2: "
    "in sweep and capacity a comma makes an axis, + keeps them in one run): a producer or "
    "consumer of zmqload's (p0, c1, ...) and seconds after the start, each below --duration"
)
RESTART_MODES = ("kill", "close", "freeze")
_MULTIPLIERS = {"k": 10**3, "m": 10**6, "g": 10**9}
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


MAX_NUMBER_TEXT = 64
"""Characters of a number's text at most (no option takes a longer one)."""
MAX_MAGNITUDE = 40
"""A whole number's decimal exponent at most: beyond every option's range (int() of 1e999999 would take
seconds and a million digits of memory before any range check)."""
_EXACT = decimal.Context(prec=2 * MAX_NUMBER_TEXT + 10)  # exact for every text of MAX_NUMBER_TEXT


def parse_number(text: str, integer: bool) -> Union[int, float]:
    """'250000', '10k', '1M', '2.5', '1e6', '1_000' -> a number; ValueError if it is none
    (or, with `integer`, not a whole one)."""
    t = text.strip().lower().replace("_", "")
    if len(t) > MAX_NUMBER_TEXT:
        raise ValueError(text)
    factor = 1
    if t and t[-1] in _MULTIPLIERS:
        factor, t = _MULTIPLIERS[t[-1]], t[:-1]
    if not integer:
        return float(t) * factor
    try:
        value = decimal.Decimal(t)
    except decimal.InvalidOperation:
        raise ValueError(text) from None
    if not value.is_finite() or (value and not -MAX_MAGNITUDE <= value.adjusted() <= MAX_MAGNITUDE):
        raise ValueError(text)
    value = _EXACT.multiply(value, factor)  # exact: 1.1k is 1100, not 1100.0000000000002
    if value != value.to_integral_value():
        raise ValueError(text)
    return int(value)


def flag_of(name: str) -> str:
    """A field's name as its flag in an error's line (`rate` -> `--rate`); a name that could be none
    (a line break, a hundred characters) as its repr, cut short."""
    return (
        "--" + name.replace("_", "-")
        if re.fullmatch(r"[A-Za-z0-9_\-]{1,40}", name)
        else f"option {shown(name)}"
    )


def shown(value: object, limit: int = 80) -> str:
    """A value as an error's line shows it: its repr, cut short (a 5000-digit int has no repr at all)."""
    try:
        text = repr(value)
    except ValueError:  # int beyond sys.get_int_max_str_digits()
        return f"<an integer of {value.bit_length() if isinstance(value, int) else '?'} bits>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Option:
    """One option as every surface sees it. `convert` is the one parser and check."""

    kind: type  # int, float, bool or str: what a value becomes
    accepted: str  # the "accepted: ..." part of an error ("": the choices)
    help: str
    group: str = "workload"
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False  # low itself is refused (duration > 0)
    choices: Union[tuple[str, ...], Callable[[], tuple[str, ...]], None] = (
        None  # callable: read when used (patterns)
    )
    form: Optional[re.Pattern[str]] = None  # text values must match it whole
    text_form: Optional[re.Pattern[str]] = (
        None  # a number's option: other text kept as it is if it matches
    )
    words: dict[str, object] = field(
        default_factory=dict
    )  # text that stands for a value: {"max": 0}
    nullable: bool = False  # None is accepted: unset, libzmq's default
    negation: Optional[str] = None  # a flag that sets a boolean to false (--no-warmup)
    cli: bool = True  # False: sweep files and the Python API only
    default_text: Optional[str] = None  # the default as help shows it, when not str(default)
    flag: str = ""  # filled from the field: --field-name unless given
    field: str = ""
    default: Any = None

    @property
    def choice_list(self) -> tuple[str, ...]:
        return tuple(self.choices() if callable(self.choices) else self.choices or ())

    @property
    def accepts(self) -> str:
        """What the option accepts, as its errors say it."""
        return self.accepted or ", ".join(self.choice_list)

    def convert(self, value: object) -> Any:  # a value of `kind` (or None)
        """A value from any surface -> the typed, checked value; ConfigError naming the flag
        otherwise. Text is parsed as on the command line; other values must have the type."""
        if value is None and self.nullable:
            return None
        if isinstance(value, str) and self.kind is not str:
            value = self._parse_text(value)
        if not self._has_type(value):
            raise self.refuse(value)
        self._check(value)
        return value

    def refuse(self, value: object, why: str = "") -> ConfigError:
        """The one error shape: `--flag: got X[why]; accepted: ...`."""
        return ConfigError(self.flag, f"got {shown(value)}{why}; accepted: {self.accepts}")

    def _parse_text(self, text: str) -> object:
        word = text.strip().lower()
        if word in self.words:
            return self.words[word]
        if self.text_form is not None and self.text_form.fullmatch(text.strip()):
            return text.strip()
        if self.kind is bool:
            if word in _TRUE or word in _FALSE:
                return word in _TRUE
            raise self.refuse(text)
        try:
            return parse_number(text, integer=self.kind is int)
        except ValueError:
            raise self.refuse(text) from None

    def _has_type(self, value: object) -> bool:
        if isinstance(value, str) and self.text_form is not None:
            return bool(self.text_form.fullmatch(value))
        if self.kind is bool or self.kind is str:
            return isinstance(value, self.kind)
        if isinstance(value, bool):
            return False
        if self.kind is int:
            return isinstance(value, int)
        return isinstance(value, (int, float)) and value == value  # float: not NaN

    def _check(self, value: Any) -> None:  # of `kind` (_has_type)
        choices = self.choice_list
        if choices and value not in choices:
            raise self.refuse(value)
        if self.form is not None and not self.form.fullmatch(value):
            raise self.refuse(value)
        if isinstance(value, str) and self.kind is not str:  # text_form's: the field's own check
            return
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            raise self.refuse(value)
        if self.high is not None and value > self.high:
            raise self.refuse(value)


def rate_option(
    help: str, *, unpaced: bool = False, per_producer: bool = True, **details: Any
) -> Option:
    """Every option that takes a rate (run and sweep --rate, capacity --start-rate, report
    --target-rate): one parser (whole messages per second, k/M/G suffixes, see parse_number)
    and one "accepted" text, so `200k` means the same and is refused the same everywhere.
    `unpaced`: max or 0 mean no schedule. A total over producers (not `per_producer`) may
    reach MAX_RATE per stream."""
    low, high = (
        (0, MAX_RATE) if unpaced else (1, MAX_RATE if per_producer else MAX_RATE * MAX_STREAMS)
    )
    accepted = (
        f"messages per second{' per producer' if per_producer else ''} from {low} to {high}, "
        f"a whole number, k/M suffixes allowed (e.g. 50000, 10k, 1.5M)"
        + ("; max or 0: unpaced" if unpaced else "")
    )
    return Option(
        int, accepted, help, low=low, high=high, words={"max": 0} if unpaced else {}, **details
    )


def option(default: T, kind: type, accepted: str, help: str, **details: Any) -> T:
    """A Workload field that is an option (see Option for `details`)."""
    return field(default=default, metadata={"option": Option(kind, accepted, help, **details)})


def _ms(low: int, what: str, default: int, **details: Any) -> int:
    return option(
        default, int, f"milliseconds from {low} to {MAX_MS}", what, low=low, high=MAX_MS, **details
    )


def _hwm(what: str) -> Optional[int]:
    return option(
        None,
        int,
        f"an integer from 0 (no limit) to {MAX_INT32}",
        what,
        low=0,
        high=MAX_INT32,
        nullable=True,
        group=SOCKET_OPTIONS,
    )


def _endpoints(attach: str, what: str) -> Optional[str]:
    return option(
        None,
        str,
        "one or more tcp://HOST:PORT or ipc://PATH endpoints separated by commas"
        + (
            " (HOST * binds every interface, PORT * any free port)"
            if attach == "bind"
            else " (HOST a host name or address, PORT a port number)"
        ),
        what,
        form=_ENDPOINT_LIST,
        nullable=True,
        group=ENDPOINTS_GROUP,
        default_text="unset: the pattern's own topology",
    )


@dataclass
class Workload:
    """What to run. Field names match the CLI options (`--consumer-delay-us` is
    `consumer_delay_us`, `--linger` is `linger_ms`); None means "libzmq's default" for socket
    options. Values are checked when the Workload is made (text as on the command line is
    accepted: `Workload(rate="10k")`); `validate()` is the full check before a run."""

    pattern: str = option(
        "push-pull",
        str,
        "",
        "messaging pattern: pair = exactly one producer and one consumer; proxy = PUB -> XSUB|zmq_proxy|XPUB -> "
        "SUB, zmqload's own proxy in the middle; req-rep = round trips (--send-mode block only)",
        choices=lambda: tuple(patterns.PATTERNS),
    )
    transport: str = option("tcp", str, "", "transport", choices=TRANSPORTS)
    host: str = option(
        "127.0.0.1",
        str,
        "an IP address or host name",
        "tcp host the binding side binds and the other connects to",
        form=re.compile(r"[A-Za-z0-9_.\-:]+"),
    )
    port: int = option(
        0,
        int,
        "a tcp port from 0 to 65535 (0 = any free port)",
        "first tcp port; each binding socket takes the next one",
        low=0,
        high=65535,
        default_text="0: any free port",
    )
    endpoint: Optional[str] = option(
        None,
        str,
        "tcp://HOST:PORT, ipc://PATH or inproc://NAME",
        "explicit endpoint, overrides --transport/--host/--port (e.g. tcp://127.0.0.1:5555, ipc:///tmp/x); "
        "not with --pattern proxy",
        form=_ENDPOINT,
        nullable=True,
    )
    producers_connect: Optional[str] = _endpoints(
        "connect",
        "every producer connects to all of these; with --consumers-connect a device of yours "
        "sits between the two sides (push-pull: a PULL|PUSH forwarder, pub-sub: an XSUB|XPUB proxy, dealer-router: "
        "a ROUTER|DEALER broker); with --consumers-bind, the endpoints they bind",
    )
    producers_bind: Optional[str] = _endpoints(
        "bind",
        "the producers bind these (one per producer, or one they count up from: the next tcp "
        "port, ipc PATH-1, PATH-2...); the consumers connect to them",
    )
    consumers_connect: Optional[str] = _endpoints(
        "connect",
        "every consumer connects to all of these; with --producers-connect a device of yours "
        "sits between the two sides; with --producers-bind, the endpoints they bind",
    )
    consumers_bind: Optional[str] = _endpoints(
        "bind",
        "the consumers bind these (one per consumer, or one they count up from); the producers "
        "connect to them",
    )
    role: str = option(
        "both",
        str,
        "",
        "which of zmqload's sides run: both; producer = the producers alone, loading a consumer of yours at "
        "--producers-connect or --producers-bind (what they sent and how it pushed back; what it received is "
        "not seen: no loss accounting); consumer = the consumers alone, recording what a producer of yours sends at "
        "--consumers-bind or --consumers-connect for --duration (messages without zmqload's header counted as "
        "foreign; a producer half of zmqload's with the same --run-name is joined with it by `report`)",
        choices=ROLES,
        group=ENDPOINTS_GROUP,
    )
    reply_timeout_ms: Optional[int] = option(
        None,
        int,
        f"milliseconds from 1 to {MAX_MS}",
        "req-rep: a request with no reply after this long is counted unanswered and the next one is sent "
        "(ZMQ_REQ_RELAXED and ZMQ_REQ_CORRELATE on the REQ: a late reply is dropped by libzmq)",
        low=1,
        high=MAX_MS,
        nullable=True,
        default_text=f"{SERVICE_REPLY_TIMEOUT_MS} against a service of yours (--role producer), else none (wait)",
    )
    size: Union[int, str] = option(
        64,
        int,
        SIZE_ACCEPTED,
        "message size in bytes (the first frame, header included), or sizes that vary: A:B uniform, @FILE "
        "listed; the message with seq s takes entry s mod the table's length (contract/sizes.py)",
        low=HEADER_SIZE,
        high=MAX_SIZE,
        text_form=SIZE_FORM,
    )
    payload: Optional[str] = option(
        None,
        str,
        PAYLOAD_ACCEPTED,
        "a file of message bodies, one record per line: the message with seq s is the header then record s mod "
        "the records, so it is 16 + the record's bytes (an empty line: the header alone)",
        nullable=True,
    )
    parts: int = option(
        1,
        int,
        f"an integer from 1 to {MAX_PARTS}",
        "frames per message: zmqload's header in the first, each frame the message's --size bytes (the rest "
        "zeros), sent as "
        "one multipart message; a consumer counts every message whose frame count differs (frame_mismatches). "
        "Not with req-rep or --conflate (libzmq's CONFLATE drops the other frames)",
        low=1,
        high=MAX_PARTS,
    )
    topics: int = option(
        0,
        int,
        f"an integer from 0 (no topics) to {topic_rule.MAX_TOPICS}",
        "pub-sub, proxy: each message's first frame starts with one of this many topics, t0..t{N-1} (zero-padded "
        "to one width), zmqload's header after it; message seq carries topic seq mod N (or --topic-weights). "
        "Accounted per topic; what a consumer did not subscribe to is not lost (docs/RECORDS.md)",
        low=0,
        high=topic_rule.MAX_TOPICS,
        default_text="0: no topics",
    )
    topic_weights: Optional[str] = option(
        None,
        str,
        f"one whole number from 1 to {topic_rule.MAX_WEIGHT} per topic, separated by commas, summing to at "
        f"most {topic_rule.MAX_PERIOD} (e.g. 5,3,1)",
        "with --topics: topic i takes weight i of every sum(weights) messages, in topic order "
        "(5,3,1: seqs 0-4 t0, 5-7 t1, 8 t2, then again)",
        form=re.compile(r"[0-9, ]+"),
        nullable=True,
        default_text="unset: round robin",
    )
    subscribe: Optional[str] = option(
        None,
        str,
        "topic name prefixes separated by commas, for every consumer, or one such list per consumer "
        "separated by ';' (e.g. t0,t1;t2)",
        "with --topics: what zmqload's consumers subscribe to (every topic whose name starts with a prefix); "
        "one list for all, or one per consumer in order",
        form=re.compile(r"[^;]+(;[^;]+)*"),
        nullable=True,
        default_text="unset: every topic",
    )
    count: Optional[int] = option(
        None,
        int,
        f"a positive integer up to {MAX_SEQ} (e.g. 1000000 or 1M)",
        "messages per producer",
        low=1,
        high=MAX_SEQ,
        nullable=True,
        default_text=f"{DEFAULT_COUNT} unless --duration",
    )
    duration: Optional[float] = option(
        None,
        float,
        "seconds > 0, up to 7 days",
        "wall-clock seconds; with --count, whichever ends first",
        low=0,
        low_open=True,
        high=7 * 86400,
        nullable=True,
    )
    rate: int = field(
        default=0,
        metadata={
            "option": rate_option(
                "messages per second per producer on an open-loop schedule; max or 0: unpaced, as fast as possible",
                unpaced=True,
                default_text="max",
            )
        },
    )
    pacing: str = option(
        "spin",
        str,
        "",
        "how a paced producer waits for each send's time: spin = sleep to 40 us before it, then spin (sends "
        "closer to the schedule, spending CPU on the spin); sleep = sleep to it (each send as late as the "
        "kernel wakes the thread, tens of us, as an application's sleeping sender). The choice moves the "
        "one-way latency at low rates, differently by transport: docs/BENCHMARKS.md, 'One-way latency'",
        choices=PACINGS,
    )
    producers: int = option(
        1,
        int,
        f"an integer from 1 to {MAX_STREAMS}",
        "number of producer processes, threads with inproc",
        low=1,
        high=MAX_STREAMS,
    )
    consumers: int = option(
        1,
        int,
        "an integer from 1 to 64",
        "number of consumer processes, threads with inproc",
        low=1,
        high=64,
    )
    send_mode: SendModeWord = option(
        "block",
        str,
        "",
        "block: wait at HWM; dontwait: drop on EAGAIN, recorded; timeout: drop after --sndtimeo-ms",
        choices=SEND_MODES,
    )
    sndtimeo_ms: int = _ms(1, "SNDTIMEO for --send-mode timeout", 100)
    sndhwm: Optional[int] = _hwm("producers' SNDHWM")
    rcvhwm: Optional[int] = _hwm("consumers' RCVHWM")
    linger_ms: Optional[int] = option(
        None,
        int,
        f"-1 (wait forever), 0, or milliseconds up to {MAX_INT32}",
        "producers' LINGER in milliseconds",
        low=-1,
        high=MAX_INT32,
        nullable=True,
        flag="--linger",
        group=SOCKET_OPTIONS,
    )
    sndbuf: Optional[int] = option(
        None,
        int,
        f"bytes from 0 (the OS default) to {MAX_INT32}",
        "producers' SO_SNDBUF",
        low=0,
        high=MAX_INT32,
        nullable=True,
        group=SOCKET_OPTIONS,
    )
    rcvbuf: Optional[int] = option(
        None,
        int,
        f"bytes from 0 (the OS default) to {MAX_INT32}",
        "consumers' SO_RCVBUF",
        low=0,
        high=MAX_INT32,
        nullable=True,
        group=SOCKET_OPTIONS,
    )
    immediate: bool = option(
        False, bool, "true or false", "ZMQ_IMMEDIATE on both sides", group=SOCKET_OPTIONS
    )
    conflate: str = option(
        "off",
        str,
        "",
        "ZMQ_CONFLATE (keep only the last message in each queue; libzmq then ignores that side's HWM) on the "
        "consumers', the producers' or both sides' data sockets, set before bind/connect; messages stay single-part. "
        f"Sockets: {', '.join(CONFLATE_SOCKETS)} (patterns push-pull, pub-sub, proxy; dealer-router's producers)",
        choices=CONFLATES,
        group=SOCKET_OPTIONS,
    )
    router_mandatory: bool = option(
        False,
        bool,
        "true or false",
        "ZMQ_ROUTER_MANDATORY: it changes only a ROUTER's sends (a routing id with no peer fails with "
        "EHOSTUNREACH instead of being dropped); zmqload's ROUTERs (dealer-router's consumers) only receive, "
        "so it is refused: set it on a ROUTER of yours",
        group=SOCKET_OPTIONS,
    )
    router_handover: bool = option(
        False,
        bool,
        "true or false",
        "ZMQ_ROUTER_HANDOVER on zmqload's ROUTERs (dealer-router's consumers): a DEALER that connects with a "
        "routing id whose old connection is still open (one of yours come back, --role consumer; zmqload's own "
        "--restart ends the old process first) takes it over; without it nothing from the newcomer is "
        "received while the old one holds the id. libzmq 4.1 and later",
        group=SOCKET_OPTIONS,
    )
    xpub_nodrop: bool = option(
        False,
        bool,
        "true or false",
        "ZMQ_XPUB_NODROP on zmqload's XPUB (the proxy pattern's): at its SNDHWM the proxy waits instead of "
        "dropping, so the loss moves back to the producers' PUBs. libzmq 4.1 and later",
        group=SOCKET_OPTIONS,
    )
    heartbeat_ivl_ms: Optional[int] = option(
        None,
        int,
        f"milliseconds from 0 (no heartbeats) to {MAX_INT32}",
        "ZMQ_HEARTBEAT_IVL: a ZMTP PING every so often on each tcp or ipc connection of zmqload's data "
        "sockets (both sides, the proxy's too); libzmq 4.2 and later",
        low=0,
        high=MAX_INT32,
        nullable=True,
        group=SOCKET_OPTIONS,
    )
    heartbeat_ttl_ms: Optional[int] = option(
        None,
        int,
        f"milliseconds from 0 to {MAX_HEARTBEAT_TTL_MS} (libzmq keeps whole tenths of a second)",
        "ZMQ_HEARTBEAT_TTL: sent in each PING: how long the peer, after a PING, waits for more traffic "
        "before it closes the connection; with --heartbeat-ivl-ms",
        low=0,
        high=MAX_HEARTBEAT_TTL_MS,
        nullable=True,
        group=SOCKET_OPTIONS,
    )
    heartbeat_timeout_ms: Optional[int] = option(
        None,
        int,
        f"milliseconds from 0 to {MAX_INT32}",
        "ZMQ_HEARTBEAT_TIMEOUT: how long a socket waits for any traffic after its PING before it closes "
        "the connection (a frozen or vanished peer; a connecting socket then reconnects); with "
        "--heartbeat-ivl-ms",
        low=0,
        high=MAX_INT32,
        nullable=True,
        group=SOCKET_OPTIONS,
        default_text="unset: --heartbeat-ivl-ms",
    )
    io_threads: int = option(
        1,
        int,
        "an integer from 1 to 64",
        "libzmq I/O threads per context (one context per process)",
        low=1,
        high=64,
        group=SOCKET_OPTIONS,
    )
    libzmq: str = option(
        "pyzmq",
        str,
        "pyzmq, system, or the path of a libzmq 4.x file",
        "the libzmq the run's engine loads: pyzmq = the one pyzmq runs in this Python (your pyzmq code's, "
        "installed with zmqload), system = the one the dynamic linker finds (libzmq.so.5), or a file of yours (another version, your build); run.json records its file, version, "
        "sha256 and capabilities, `zmqload info` lists those found",
        form=re.compile(r".+"),
        group=SOCKET_OPTIONS,
    )
    cpu_placement: str = option(
        "auto",
        str,
        "",
        "auto: an unpaced run pins each worker process (with its libzmq I/O thread) to a CPU of its own, "
        "libzmq's fast placement, or where workers outnumber the CPUs, producers and consumers to CPUs of "
        "their side's (not pub-sub, not with a consumer delay), and an inproc pair on one CPU; "
        "none: the scheduler places every thread",
        choices=CPU_PLACEMENTS,
        group=SOCKET_OPTIONS,
    )
    curve: str = option(
        "off",
        str,
        "",
        "on: CURVE (libzmq's encryption and authentication) on every data socket of the run, zmqload's proxy's "
        "too: the binding side is the server, the connecting side the client, keys made per run and handed to "
        "the workers only (run.json says `security`, never a secret key); the control channel (and with "
        "--master the clock server) a CURVE server too, a key pair of its own; against a CURVE server of yours, "
        "--curve-server-key. tcp and ipc (libzmq applies no mechanism to inproc)",
        choices=CURVES,
        group=SECURITY_GROUP,
    )
    curve_server_key: Optional[str] = option(
        None,
        str,
        f"a key file: {KEY_FILE_FORMS}",
        "with --curve on, the public key of your CURVE server that zmqload connects to (--producers-connect "
        "with --role producer, or a device of yours between both sides: one key for all its endpoints); the "
        "file is read when the run starts",
        form=re.compile(r".+"),
        nullable=True,
        group=SECURITY_GROUP,
        default_text="unset: zmqload's own server keys, made per run",
    )
    curve_server_cert: Optional[str] = option(
        None,
        str,
        f"a key file: {SECRET_FILE_FORMS}",
        "with --curve on, the key pair zmqload's binding sockets serve with, for a CURVE client of yours that "
        "connects to zmqload (--role consumer --consumers-bind, --role producer --producers-bind) and holds the "
        "public half (a split half of zmqload's own connects with --curve-server-key and that public half); the "
        "file is read when the run starts, the keys never recorded",
        form=re.compile(r".+"),
        nullable=True,
        group=SECURITY_GROUP,
        default_text="unset: a server pair made per run",
    )
    insecure: bool = option(
        False,
        bool,
        "true or false",
        "bind sockets beyond loopback in the clear: a wildcard or another host's address (--host, --endpoint, "
        "--producers-bind, --consumers-bind) or, with --master, the workers and the controller on a cluster's "
        "hosts; without it they are refused unless --curve on protects them (contract/exposure.py)",
        group=SECURITY_GROUP,
    )
    master: Optional[str] = option(
        None,
        str,
        MASTERS_ACCEPTED,
        "run the producers and consumers as one Spark barrier stage on this master, each worker a task (all "
        "start together or none; the executors need this zmqload and its libzmq); unset: processes on this host",
        form=MASTER_FORM,
        nullable=True,
        group=PLACEMENT_GROUP,
    )
    placement: Optional[str] = option(
        None,
        str,
        "",
        "with --master: spread = producers and consumers on different executors (hosts first) where the "
        "cluster has room, pack = each producer beside a consumer on as few executors as the slots allow; "
        "the stage then takes every free task slot and gives the workers to the tasks where Spark put them",
        choices=PLACEMENTS,
        nullable=True,
        group=PLACEMENT_GROUP,
        default_text="unset: where Spark puts each task",
    )
    consumer_delay_us: float = option(
        0.0,
        float,
        "microseconds from 0 to 60000000",
        "simulated work per received message, a slow consumer",
        low=0,
        high=60_000_000,
    )
    drain_timeout_ms: int = _ms(
        1, "once the producers are done, consumers stop after this long without a message", 1000
    )
    drain: str = option(
        "fast",
        str,
        "",
        "once the producers are done: fast = consumers stop their simulated work and read what is queued, "
        "slow = keep it, none = close at once (unreceived: stranded)",
        choices=DRAIN_MODES,
    )
    drain_limit_s: float = option(
        60.0,
        float,
        "seconds > 0, up to 7 days",
        "cut the drain short after this long (unreceived: stranded)",
        low=0,
        low_open=True,
        high=7 * 86400,
    )
    warmup: bool = option(
        True,
        bool,
        "true or false",
        "wait until every consumer hears every producer before the start; --no-warmup for slow-joiner studies",
        negation="--no-warmup",
    )
    warmup_timeout_s: float = option(
        15.0,
        float,
        "seconds > 0, up to 3600",
        "how long the start may wait for the warm-up, or for the endpoints of a device or a consumer of yours "
        "to answer; past it the run fails in one line naming the silent endpoints",
        low=0,
        low_open=True,
        high=3600,
    )
    join_delay_ms: int = _ms(
        0,
        "consumers connect this long after the producers start, a slow joiner; "
        "needs consumers that connect: pub-sub, proxy",
        0,
    )
    close_pause_ms: int = _ms(0, "producers pause this long after their last send, then close", 0)
    close_order: str = option(
        "producer-first",
        str,
        "",
        "producer-first: producers close after their last send while consumers drain; consumer-first: consumers "
        "close before the producers; after-drain: producers keep their sockets open until the consumers have "
        "drained, then close (separates losses at close from losses during the run)",
        choices=CLOSE_ORDERS,
    )
    reset_at: Optional[str] = option(
        None,
        str,
        RESET_ACCEPTED,
        "tcp: at each of these times every tcp connection of the run's data sockets is aborted by the kernel, as "
        "a reset from the network would (Linux's sock_destroy, what ss -K does: needs root or CAP_NET_ADMIN); "
        "libzmq reconnects and the run goes on; a message lost across a reset is dropped_reset",
        form=_RESET_LIST,
        nullable=True,
        group="faults",
    )
    restart: Optional[str] = option(
        None,
        str,
        RESTART_ACCEPTED,
        "at each of these times that worker's process ends (--restart-mode) and, --restart-gap-ms later, "
        "a new process takes its place on the same endpoints with the same socket options (a SUB "
        "subscribes again, a DEALER keeps its routing id, a producer goes on with its stream's seqs and "
        "schedule); each process's records are kept apart (c0, c0.g1, ...) and joined in the "
        "accounting; a message lost at a restart is dropped_restart",
        form=_RESTART_LIST,
        nullable=True,
        group="faults",
    )
    restart_mode: str = option(
        "kill",
        str,
        "",
        "how a restarted worker's process ends: kill = SIGKILL (what it held in memory and its queues "
        "die with it); close = a clean close of its socket and context, then it exits; freeze = SIGSTOP "
        "(hung, its connections still open, the kernel's buffers filling) for --restart-gap-ms, then "
        "SIGKILL as the new process starts",
        choices=RESTART_MODES,
        group="faults",
    )
    restart_gap_ms: int = _ms(
        0,
        "with --restart, how long a restarted worker stays down before its new process (started "
        "with the run, waiting) binds or connects in its place",
        0,
        group="faults",
    )
    proxy_sndhwm: Optional[int] = _hwm("pattern proxy: SNDHWM of the proxy's XPUB side")
    proxy_rcvhwm: Optional[int] = _hwm("pattern proxy: RCVHWM of the proxy's XSUB side")
    out: str = option(
        "runs",
        str,
        f"a directory path (not file://), or {uris.URI_ACCEPTED}",
        "parent directory of run directories, or a filesystem URI each run directory is copied to when the run "
        "ends (recorded first in a staging directory under $TMPDIR, else /tmp; with --master each task's on its "
        "own host, copied up as its worker ends)",
        form=re.compile(r"(?!file://).+", re.DOTALL),
        group="recording",
    )
    run_name: Optional[str] = option(
        None,
        str,
        "1-100 letters, digits, '.', '_' or '-'",
        "run directory name, run=NAME",
        form=re.compile(r"[A-Za-z0-9_.\-]{1,100}"),
        nullable=True,
        group="recording",
        default_text="time-pattern-transport-id",
    )
    metrics: Optional[str] = option(
        None,
        str,
        "HOST:PORT, HOST a name or address ([ADDRESS] for IPv6), PORT from 1 to 65535",
        "serve the run's live figures at http://HOST:PORT/metrics for Prometheus (OpenMetrics or its "
        "text format): messages sent, received and each fate, EAGAIN and blocked sends, queue depth, "
        "rates, latency histograms, each worker's memory, disk; refreshed as the workers report (10/s), "
        "labelled by run, role, worker and stream; beyond loopback only with --insecure (docs/METRICS.md)",
        form=re.compile(rf"(?:[A-Za-z0-9_.\-]+|\[[0-9a-fA-F:.]+\]):{_PORT}"),
        nullable=True,
        group=METRICS_GROUP,
    )
    metrics_linger: float = option(
        15.0,
        float,
        "seconds from 0 to 3600",
        "with --metrics, keep serving the run's final figures this long after it ended, so a scrape after "
        "the last send still sees its totals (Prometheus stamps a value when it scrapes): at least the "
        "scrape interval (each run of a sweep or a search waits it too)",
        low=0,
        high=3600,
        group=METRICS_GROUP,
    )
    compression: str = option(
        "none",
        str,
        "",
        "Parquet codec on top of delta encoding, which does most of the work",
        choices=COMPRESSIONS,
        group="recording",
    )
    chunk_rows: int = option(
        262_144,
        int,
        "rows per Parquet chunk, from 1024 to 16777216",
        "rows per record chunk",
        low=1024,
        high=16_777_216,
        cli=False,
        group="recording internals",
    )
    slice_ms: int = option(
        20,
        int,
        "milliseconds from 1 to 1000",
        "longest engine loop between returns to Python",
        low=1,
        high=1000,
        cli=False,
        group="recording internals",
    )
    label: dict[str, Any] = field(default_factory=dict)  # free-form tags copied into run.json

    def __post_init__(self) -> None:
        for name, opt in OPTIONS.items():
            setattr(self, name, opt.convert(getattr(self, name)))
        if not isinstance(self.label, dict) or not all(isinstance(k, str) for k in self.label):
            raise ConfigError(
                "label", f"got {shown(self.label)}; accepted: a mapping of names to values"
            )
        self._check_together()

    # -- derived -----------------------------------------------------------------------
    @property
    def messages_per_producer(self) -> int:
        """Upper bound of messages each producer attempts."""
        if self.count is not None:
            return self.count
        if self.rate and self.duration is not None:
            return max(1, int(self.rate * self.duration))
        return MAX_SEQ

    @property
    def expected_sends_per_producer(self) -> int:
        """messages_per_producer, or where only --duration bounds it, what an unpaced producer
        is likely to send (UNPACED_RATE_GUESS)."""
        if self.messages_per_producer < MAX_SEQ or self.duration is None:
            return self.messages_per_producer
        return max(1, int(UNPACED_RATE_GUESS * self.duration))

    @property
    def expected_receives_per_consumer(self) -> int:
        """What one consumer receives if nothing is lost: every message with fan-out, its
        share of them without."""
        total = self.producers * self.expected_sends_per_producer
        return total if self.fanout else -(-total // self.consumers)

    @property
    def fanout(self) -> bool:
        return patterns.get(self.pattern).fanout

    @property
    def serves(self) -> bool:
        """A run against a service of the user's (contract/patterns.py `serves`)."""
        return patterns.serves(self.pattern, self.role)

    @property
    def reply_timeout(self) -> int:
        """--reply-timeout-ms in effect (`reply_timeout_in_effect`)."""
        return reply_timeout_in_effect(self.reply_timeout_ms, self.role)

    @property
    def consumer_workers(self) -> int:
        """zmqload's consumers that run: none when the consumers are the user's (--role producer)."""
        return 0 if self.role == "producer" else self.consumers

    @property
    def producer_workers(self) -> int:
        """zmqload's producers that run: none when the producers are the user's (--role consumer)."""
        return 0 if self.role == "consumer" else self.producers

    @property
    def topology(self) -> patterns.Topology:
        """Who binds and who connects (the endpoints per side, by the pattern's rules)."""
        return patterns.get(self.pattern).topology(self)

    def bind_endpoints(self, count: int) -> list[str]:
        """Where the binding side's `count` sockets bind when the options name it (--producers-bind,
        --consumers-bind, --endpoint); [] when zmqload chooses (runner/endpoints.py)."""
        topology = self.topology
        if topology.binder in ("producer", "consumer") and topology.side(topology.binder).given:
            return expand_bind(list(topology.side(topology.binder).endpoints), count)
        if self.endpoint is not None:
            return expand_bind([self.endpoint], count)
        return []

    @property
    def reset_times(self) -> tuple[float, ...]:
        """--reset-at as seconds after the start, in order; () without resets."""
        return tuple(float(t) for t in self.reset_at.split(",")) if self.reset_at else ()

    @property
    def restarts(self) -> tuple[tuple[str, float], ...]:
        """--restart as (worker name, seconds after the start), in time order; () without."""
        if not self.restart:
            return ()
        items: list[tuple[str, float]] = []
        for item in re.split(r"[,+]", self.restart):
            name, _, at = item.strip().partition("@")
            items.append((name, float(at)))
        return tuple(sorted(items, key=lambda item: item[1]))

    @property
    def heartbeats(self) -> dict[str, Optional[int]]:
        """The heartbeat options by libzmq's names (HEARTBEAT_IVL, ...), None where unset: every data
        socket of zmqload's gets them."""
        return {
            "HEARTBEAT_IVL": self.heartbeat_ivl_ms,
            "HEARTBEAT_TTL": self.heartbeat_ttl_ms,
            "HEARTBEAT_TIMEOUT": self.heartbeat_timeout_ms,
        }

    @property
    def consumer_delay_ns(self) -> int:
        """--consumer-delay-us in the engine's unit: whole nanoseconds of work per message
        (the consumer's Receiver, and the slow drain's patience)."""
        return round(self.consumer_delay_us * 1000)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Workload":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConfigError(
                flag_of(unknown[0]), f"unknown option; accepted: {', '.join(sorted(names))}"
            )
        return cls(**values)

    # -- validation ----------------------------------------------------------------------
    def validate(self) -> "Workload":
        """The full check of the values before a run: every value again (fields may have been set
        since construction), and defaults that depend on others filled in (count, and transport,
        host and port from --endpoint). No I/O: what touches the machine (key and size files read,
        ports probed free, names resolved, output directories made) is runner/preflight.py's, once
        before a run. Returns self."""
        self.__post_init__()
        if self.topology.consumers_alone and self.duration is None:
            raise ConfigError(
                "--duration",
                "unset with --role consumer: the consumers alone cannot know when your "
                "producer is done; accepted: --duration SECONDS, how long to record (then "
                "the drain: until nothing came for --drain-timeout-ms)",
            )
        if self.restart and self.duration is None and not (self.count is not None and self.rate):
            # checked here, not on construction: a capacity search's template has no length yet
            raise ConfigError(
                "--restart",
                f"got {self.restart!r} without a run length in time; accepted: {RESTART_ACCEPTED}, "
                "with --duration, or --count and a --rate",
            )
        if self.count is None and self.duration is None:
            self.count = DEFAULT_COUNT
        if self.payload is not None and self.size != OPTIONS["size"].default:
            raise ConfigError(
                "--size",
                f"got {self.size!r} with --payload: the records set each message's size; "
                "accepted: --size at its default (unset) with --payload",
            )
        if not reads_file(self.size, self.payload):
            table_of(self.size)  # checked now; a file's table is read by runner/preflight.py
        topology = self.topology
        if topology.given:
            # the endpoints name their transport (the producers' first, where the sides differ)
            first = (topology.producers.endpoints or topology.consumers.endpoints)[0]
            self.transport = first.split("://", 1)[0]
            return self
        self.transport, self.host, self.port = self._address()
        return self

    def _check_together(self) -> None:
        """Rules between options; no I/O (workers rebuild their Workload from to_dict())."""
        patterns.get(self.pattern).check(self)
        if self.topology.given:
            self._check_endpoints_per_side()
        if self.topology.producers_alone:
            self._one_side_only("producer", self.CONSUMER_OPTIONS, "consumers")
        if self.topology.consumers_alone:
            self._one_side_only("consumer", self.PRODUCER_OPTIONS, "producers")
        if self.master is not None:
            self._check_placed()
        elif self.placement is not None:
            raise ConfigError(
                "--placement",
                f"got {self.placement!r} without --master: the workers are this host's "
                "processes; accepted: --placement with --master",
            )
        if self.conflate != "off":
            self._check_conflate()
        self._check_socket_options()
        if self.parts > 1:
            self._check_parts()
        if self.topics or self.topic_weights is not None or self.subscribe is not None:
            self._check_topics()
        if self.reset_at is not None:
            self._check_resets()
        if self.restart is not None:
            self._check_restarts()
        if (
            self.curve != "off"
            or self.curve_server_key is not None
            or self.curve_server_cert is not None
        ):
            self._check_curve()
        if (
            self.rate
            and (self.count is not None or self.duration is not None)
            and self.messages_per_producer > MAX_PACED
        ):
            flag, value = (
                ("--count", self.count) if self.count is not None else ("--duration", self.duration)
            )
            raise ConfigError(
                flag,
                f"got {value!r} at --rate {self.rate}: too many messages for the nanosecond "
                f"send schedule; accepted: at most {MAX_PACED} messages per producer",
            )
        if self.topology.given:
            return
        transport, host, port = self._address()
        binders = self._binding_sockets()
        if transport == "tcp" and port + binders - 1 > 65535:
            raise ConfigError(
                "--endpoint" if self.endpoint else "--port",
                f"got {port} with {binders} binding sockets, one port each; "
                f"accepted: a port up to {65536 - binders}, or 0 for any",
            )

    CONSUMER_OPTIONS = (
        "consumers",
        "rcvhwm",
        "rcvbuf",
        "consumer_delay_us",
        "join_delay_ms",
        "drain",
        "drain_timeout_ms",
        "drain_limit_s",
        "close_order",
        "subscribe",
        "router_handover",
    )
    """What zmqload's consumers do: refused with --role producer, where the consumers are the user's."""

    PRODUCER_OPTIONS = (
        "producers",
        "count",
        "rate",
        "pacing",
        "size",
        "payload",
        "topics",
        "topic_weights",
        "send_mode",
        "sndtimeo_ms",
        "sndhwm",
        "linger_ms",
        "sndbuf",
        "close_pause_ms",
        "close_order",
        "join_delay_ms",
    )
    """What zmqload's producers do: refused with --role consumer, where the producers are the user's."""

    def _one_side_only(self, role: str, others: tuple[str, ...], theirs: str) -> None:
        """--role producer / consumer: the other side's options are the user's to set, not zmqload's."""
        for name in others:
            option = OPTIONS[name]
            if getattr(self, name) != option.default:
                got, default = getattr(self, name), option.default_text or option.default
                # a switch as the command line writes it (true, false), anything else as its repr
                said = (lambda v: str(v).lower()) if option.kind is bool else repr
                raise ConfigError(
                    option.flag,
                    f"got {said(got)} with --role {role}, where the {theirs} are yours; "
                    f"accepted: {said(default)} (the default: it is not used)",
                )

    def _check_conflate(self) -> None:
        """--conflate: a socket type libzmq conflates on, on each side asked, and zmqload's own consumers."""

        def socket_of(pattern: patterns.Pattern, side: str) -> str:
            return pattern.producer_socket if side == "producers" else pattern.consumer_socket

        alone = {
            "producer": (self.topology.producers_alone, "consumers"),
            "consumer": (self.topology.consumers_alone, "producers"),
        }
        for role, (only, theirs) in alone.items():
            if only and self.conflate in (theirs, "both"):
                mine = "producers" if theirs == "consumers" else "consumers"
                raise ConfigError(
                    "--conflate",
                    f"got {self.conflate!r} with --role {role}, where the {theirs} "
                    f"are yours; accepted: off or {mine}",
                )
        for side in patterns.SIDES:
            socket_type = socket_of(patterns.get(self.pattern), side)
            if self.conflate in (side, "both") and socket_type not in CONFLATE_SOCKETS:
                able = ", ".join(
                    p.name
                    for p in patterns.PATTERNS.values()
                    if socket_of(p, side) in CONFLATE_SOCKETS
                )
                raise ConfigError(
                    "--conflate",
                    f"got {self.conflate!r} with pattern {self.pattern}, whose {side} "
                    f"are {socket_type} sockets (libzmq conflates only "
                    f"{', '.join(CONFLATE_SOCKETS)}); accepted: off, or --conflate "
                    f"{side} with {able}",
                )

    def _check_socket_options(self) -> None:
        """--router-mandatory, --router-handover, --xpub-nodrop and the heartbeats: each where one
        of zmqload's sockets has the type (and the transport) libzmq applies it to."""
        pattern = patterns.get(self.pattern)
        if self.router_mandatory:
            raise ConfigError(
                "--router-mandatory",
                "got true: ROUTER_MANDATORY changes only what a ROUTER sends, and zmqload's ROUTERs "
                "(dealer-router's consumers) only receive; accepted: false (it has effect on a "
                "ROUTER of yours that sends by routing id)",
            )
        if self.router_handover:
            routers = ", ".join(
                p.name for p in patterns.PATTERNS.values() if p.consumer_socket == "ROUTER"
            )
            if pattern.consumer_socket != "ROUTER":
                raise ConfigError(
                    "--router-handover",
                    f"got true with pattern {self.pattern}, which has no ROUTER (its consumers are "
                    f"{pattern.consumer_socket} sockets); accepted: false, or true with {routers}",
                )
        if self.xpub_nodrop and not pattern.proxy:
            proxies = ", ".join(p.name for p in patterns.PATTERNS.values() if p.proxy)
            raise ConfigError(
                "--xpub-nodrop",
                f"got true with pattern {self.pattern}, where zmqload has no XPUB (a PUB is not an "
                f"XPUB; a proxy of yours sets its own); accepted: false, or true with {proxies}",
            )
        beats = [name for name in HEARTBEAT_OPTIONS if getattr(self, name) is not None]
        if not beats:
            return
        if self.heartbeat_ivl_ms is None:
            flag = OPTIONS[beats[0]].flag
            raise ConfigError(
                flag,
                f"got {getattr(self, beats[0])} without --heartbeat-ivl-ms: libzmq sends no "
                f"heartbeats then, so {flag} has no effect; accepted: {flag} with --heartbeat-ivl-ms",
            )
        if self._transport_in_use() == "inproc":
            flag = OPTIONS[beats[0]].flag
            raise ConfigError(
                flag,
                f"got {getattr(self, beats[0])} with transport inproc: ZMTP heartbeats go over tcp "
                "and ipc connections only; accepted: tcp or ipc",
            )

    def _transport_in_use(self) -> str:
        """The transport of zmqload's data sockets: the endpoints' (the producers' first), or its own."""
        if self.topology.given:
            first = (self.topology.producers.endpoints or self.topology.consumers.endpoints)[0]
            return first.split("://", 1)[0]
        return self._address()[0]

    def _check_parts(self) -> None:
        """--parts: multipart messages where every frame travels (not a round trip, not conflated)."""
        if patterns.get(self.pattern).round_trip:
            raise ConfigError(
                "--parts",
                f"got {self.parts} with pattern {self.pattern}: a request and its reply "
                "are single frames here; accepted: 1 with round trips",
            )
        if self.conflate != "off":
            raise ConfigError(
                "--parts",
                f"got {self.parts} with --conflate {self.conflate}: libzmq's CONFLATE keeps "
                "only the last frame of a message; accepted: 1 with --conflate",
            )

    def _check_topics(self) -> None:
        """--topics, --topic-weights, --subscribe: a pattern whose consumers subscribe (SUB), zmqload's
        producers writing them, room in --size for topic and header."""
        pattern = patterns.get(self.pattern)
        for name in ("topic_weights", "subscribe"):
            if getattr(self, name) is not None and not self.topics:
                raise OPTIONS[name].refuse(getattr(self, name), " without --topics")
        if not pattern.subscribe:
            able = ", ".join(p.name for p in patterns.PATTERNS.values() if p.subscribe)
            raise ConfigError(
                "--topics",
                f"got {self.topics} with pattern {self.pattern}, whose consumers do not "
                f"subscribe; accepted: 0, or --topics with {able}",
            )
        topics = self.topic_set
        assert topics is not None
        if self.payload is not None:
            raise ConfigError(
                "--payload",
                f"got {self.payload!r} with --topics {self.topics}: a record follows the "
                "header where a topic would lead; accepted: --topics 0 with --payload",
            )
        if not reads_file(self.size, self.payload):  # a file's table: checked where it is read
            self.check_topic_room(table_of(self.size))

    @property
    def topic_set(self) -> Optional[topic_rule.Topics]:
        """The run's topics and each consumer's subscription (contract/topics.py); None without."""
        return topic_rule.Topics.of(self.topics, self.topic_weights, self.subscribe, self.consumers)

    def check_topic_room(self, sizes: Sizes) -> None:
        """--topics: the smallest first frame of the run's table holds its topic and the header."""
        topics = self.topic_set
        if topics is not None and int(sizes.sizes.min()) < HEADER_SIZE + topics.width:
            raise ConfigError(
                "--size",
                f"got {self.size} with --topics {self.topics}: the first frame holds a "
                f"{topics.width}-byte topic and the {HEADER_SIZE}-byte header; accepted: "
                f"from {HEADER_SIZE + topics.width} to {MAX_SIZE}",
            )

    @property
    def size_spec(self) -> str:
        """The sizes as the report groups runs by them: "64", "64:1024", "@FILE", "payload FILE"."""
        return spec_of(self.size, self.payload)

    def _check_resets(self) -> None:
        """--reset-at: increasing times within the run, tcp connections of zmqload's own sockets (a
        device's or a consumer's of the user's would be aborted for their other clients too)."""
        times, topology = self.reset_times, self.topology

        def refuse(why: str) -> ConfigError:
            return ConfigError(
                "--reset-at",
                f"got {self.reset_at!r}{why}; accepted: {RESET_ACCEPTED}, "
                "over tcp between zmqload's own sockets",
            )

        if any(b <= a for a, b in zip(times, times[1:])):
            raise refuse(": the times must increase, each once")
        if self.duration is not None and times[-1] >= self.duration:
            raise refuse(f": {times[-1]:g} s is not within --duration {self.duration:g}")
        transport = self._transport_in_use()
        if transport != "tcp":
            raise refuse(f" over {transport}: only tcp connections can be reset")
        if topology.producers_alone or topology.consumers_alone or topology.device:
            raise refuse(
                " with a device, consumer or producer of yours in the path: its other clients would be "
                "reset too"
            )

    def _check_restarts(self) -> None:
        """--restart: zmqload's own consumer processes, at times within the run. Workers that are
        threads (inproc), tasks elsewhere (--master), a service's round trip and a user's worker
        cannot be restarted by zmqload."""

        def refuse(why: str) -> ConfigError:
            return ConfigError(
                "--restart",
                f"got {self.restart!r}{why}; accepted: {RESTART_ACCEPTED}, with tcp or ipc",
            )

        pattern = patterns.get(self.pattern)
        last: dict[str, float] = {}
        for name, at in self.restarts:
            role, index = name[0], int(name[1:])
            side, count = (
                ("producer", self.producers) if role == "p" else ("consumer", self.consumers)
            )
            if self.role not in ("both", side):
                raise refuse(
                    f": with --role {self.role} the {side}s are yours ({name} is not zmqload's)"
                )
            if index >= count or name != f"{role}{index}":
                raise refuse(f": {name} is not one of the {count} {side}(s) {role}0..")
            if at <= 0:
                raise refuse(f": {name}@{at:g} is not after the start")
            if name in last and at <= last[name] + self.restart_gap_ms / 1000:
                raise refuse(f": {name} restarts again before its new process is due")
            last[name] = at
            end = self.duration
            if end is None and self.count is not None and self.rate:
                end = self.count / self.rate  # the schedule's length
            if end is not None and at >= end:
                raise refuse(f": {name}@{at:g} is not within the run's {end:g} s")
        if self._transport_in_use() == "inproc":
            raise refuse(" over inproc: the workers are threads of one process")
        if self.master is not None:
            raise refuse(" with --master: the workers are Spark tasks, not processes of this host")
        if pattern.round_trip:
            raise refuse(
                f" with pattern {self.pattern}: a request would wait for its reply forever"
            )
        if self.topics:
            raise refuse(" with --topics: a restart's cost is counted over every seq of a stream")

    def _check_curve(self) -> None:
        """--curve on: a transport libzmq secures, a server key exactly where zmqload connects to a
        server of the user's, and no client of the user's that would need the per-run key."""
        key, pair = OPTIONS["curve_server_key"], OPTIONS["curve_server_cert"]
        if self.curve == "off":
            given, value = (
                (key, self.curve_server_key)
                if self.curve_server_key is not None
                else (pair, self.curve_server_cert)
            )
            raise ConfigError(
                given.flag,
                f"got {value!r} with --curve off; accepted: --curve on with it, or no {given.flag}",
            )
        if self.transport == "inproc" or (self.endpoint or "").startswith("inproc://"):
            raise ConfigError(
                "--curve",
                "got 'on' with --transport inproc: libzmq applies no security mechanism to "
                "inproc (nothing leaves the process); accepted: off, or tcp or ipc",
            )
        topology = self.topology
        if (
            (topology.producers_alone or topology.consumers_alone)
            and topology.binder is not None
            and self.curve_server_cert is None
        ):
            side = topology.side(topology.binder)
            yours = "consumer" if topology.producers_alone else "producer"
            raise pair.refuse(
                None,
                f" with --curve on and --role {self.role} {side.flag}: your {yours} connects "
                f"as a CURVE client and needs the server's public key, which a per-run key "
                f"would keep from it",
            )
        if topology.binder is None and self.curve_server_cert is not None:
            yours = ", ".join(
                e for side in (topology.producers, topology.consumers) for e in side.endpoints
            )
            raise ConfigError(
                pair.flag,
                f"got {self.curve_server_cert!r}: zmqload binds no socket here, it "
                f"connects to yours at {yours}; accepted: no {pair.flag} (--curve-server-key "
                "names the public key of the server zmqload connects to)",
            )
        if topology.user_listens and self.curve_server_key is None:
            yours = ", ".join(
                e
                for side in (topology.producers, topology.consumers)
                if side.attach is patterns.Attach.CONNECT
                for e in side.endpoints
            )
            raise key.refuse(
                None,
                f" with --curve on while zmqload connects to your system at {yours}: its "
                "server's public key is needed",
            )
        if not topology.user_listens and self.curve_server_key is not None:
            own = (
                "the key pair of --curve-server-cert"
                if self.curve_server_cert is not None
                else "a key pair made per run, or --curve-server-cert's"
            )
            raise ConfigError(
                key.flag,
                f"got {self.curve_server_key!r}: zmqload connects to no server of yours "
                f"here (its binding sockets serve with {own}); accepted: no {key.flag}, "
                "or --curve-server-key where zmqload connects to a CURVE server of yours "
                "(--role producer --producers-connect, --role consumer --consumers-connect, "
                "or a device of yours between both sides)",
            )

    def _check_placed(self) -> None:
        """--master: each worker a Spark task, a process of its own."""
        if self.transport == "inproc":
            raise ConfigError(
                "--transport",
                f"got 'inproc' with --master {self.master}: inproc workers are threads "
                "of one process, nothing to place; accepted: tcp or ipc (ipc: one host)",
            )
        if patterns.get(self.pattern).own_endpoints:
            raise ConfigError(
                "--master",
                f"got {self.master!r} with pattern {self.pattern}: the Spark stage places "
                "producers and consumers, not zmqload's own proxy; accepted: no --master "
                "with pattern "
                f"{self.pattern}, or --pattern pub-sub with --producers-connect and "
                "--consumers-connect to an XSUB|XPUB proxy of yours (the workers placed "
                "by --master)",
            )

    def _check_endpoints_per_side(self) -> None:
        """Each endpoint of --producers-connect ... --consumers-bind on its own, then the two sides
        together: a connecting side connects to what the other side binds."""
        topology = self.topology
        named = topology.producers.flag or topology.consumers.flag
        if self.port:
            raise ConfigError(
                "--port",
                f"got {self.port} with {named}: the endpoints per side name their own ports; "
                "accepted: 0 (unset) with endpoints per side",
            )
        if self.transport == "inproc":
            raise ConfigError(
                "--transport",
                f"got 'inproc' with {named}: nothing outside zmqload's own context "
                "reaches an inproc endpoint; accepted: tcp or ipc (the endpoints name it)",
            )
        for side in (topology.producers, topology.consumers):
            if not side.given:
                continue
            text, seen = ",".join(side.endpoints), set()
            for endpoint in side.endpoints:
                if endpoint in seen:
                    raise ConfigError(
                        side.flag, f"got {text!r}: {endpoint!r} twice; accepted: each endpoint once"
                    )
                seen.add(endpoint)
                if endpoint.startswith("inproc://"):
                    raise ConfigError(
                        side.flag,
                        f"got {endpoint!r}: nothing outside zmqload's own context reaches "
                        "an inproc endpoint; accepted: tcp://HOST:PORT or ipc://PATH "
                        "(--transport inproc for zmqload's own topology)",
                    )
                host, port = tcp_parts(endpoint)
                if port is not None and port != "*" and int(port) > 65535:
                    raise ConfigError(
                        side.flag,
                        f"got {endpoint!r}: the port is above 65535; accepted: a tcp port "
                        "from 1 to 65535",
                    )
                if side.attach is patterns.Attach.CONNECT and (
                    "*" in (host, port) or port == "0" or endpoint == "ipc://*"
                ):
                    example = (
                        "ipc:///tmp/NAME"
                        if port is None
                        else f"tcp://{'127.0.0.1' if host == '*' else host}:{'5599' if port in ('*', '0') else port}"
                    )
                    why = "* is for binding" if "*" in endpoint else "port 0 is for binding"
                    raise ConfigError(
                        side.flag,
                        f"got {endpoint!r}: a connecting side needs a named host and "
                        f"port (or path), {why}; accepted: "
                        f"{self._listener(side.name)}, e.g. {example}",
                    )
            if side.attach is patterns.Attach.BIND:
                count = self._side_count(side.name)
                if len(side.endpoints) not in (1, count):
                    raise ConfigError(
                        side.flag,
                        f"got {len(side.endpoints)} endpoints for {count} {side.name}; "
                        f"accepted: one per {side.name[:-1]} ({count}), or one they count "
                        "up from (the next tcp port, ipc PATH-1, PATH-2...)",
                    )
                bound = self.bind_endpoints(count)
                last = tcp_parts(bound[-1])[1]
                if last is not None and last != "*" and int(last) > 65535:
                    raise ConfigError(
                        side.flag,
                        f"got {text!r} for {count} {side.name}, a port each: the last is "
                        f"{last}; accepted: a first port up to {65536 - count}",
                    )
        if topology.device or topology.binder not in ("producer", "consumer"):
            return
        binder = topology.side(topology.binder)
        other = topology.consumers if binder is topology.producers else topology.producers
        if other.given:  # it names what it connects to: the binder's own endpoints
            bound = self.bind_endpoints(self._side_count(binder.name))
            wanted = {_address_key(e) for e in bound}
            if (
                any(key[1] == "*" for key in wanted)
                or {_address_key(e) for e in other.endpoints} != wanted
            ):
                raise ConfigError(
                    other.flag,
                    f"got {','.join(other.endpoints)!r} while the {binder.name} bind "
                    f"{','.join(bound)!r}; accepted: the endpoints the {binder.name} bind "
                    f"(or leave {other.flag} out: the {other.name} connect to them; a "
                    f"device in the middle: both sides connect)",
                )

    def _listener(self, side: str) -> str:
        """Where zmqload's connecting `side` connects to, as a refusal names it."""
        topology = self.topology
        if topology.producers_alone:
            return f"where your {'service' if self.serves else 'consumer'} listens"
        if topology.consumers_alone:
            return "where your producer (or zmqload's producer half) listens"
        if topology.device:
            return "where your device listens"
        other = "consumers" if side == "producers" else "producers"
        return f"the endpoints the {other} bind (--{other}-bind)"

    def _side_count(self, side: str) -> int:
        return self.producers if side == "producers" else self.consumers

    def _address(self) -> tuple[str, str, int]:
        """(transport, host, port) in effect: --endpoint's when given."""
        if self.endpoint is None:
            return self.transport, self.host, self.port
        match = _ENDPOINT.match(self.endpoint)
        assert match is not None  # convert() refused an endpoint not of this form
        transport = self.endpoint.split("://", 1)[0]
        if transport != "tcp":
            return transport, self.host, self.port
        port = match.group("port")
        port = 0 if port == "*" else int(port)
        if port > 65535:
            raise OPTIONS["endpoint"].refuse(self.endpoint, ": the port is above 65535")
        return transport, match.group("host").strip("[]"), port

    def _binding_sockets(self) -> int:
        return patterns.get(self.pattern).binding_sockets(self.producers, self.consumers)


def _option_table(cls: type) -> dict[str, Option]:
    return {
        f.name: dataclasses.replace(
            f.metadata["option"],
            field=f.name,
            default=f.default,
            flag=f.metadata["option"].flag or "--" + f.name.replace("_", "-"),
        )
        for f in dataclasses.fields(cls)
        if "option" in f.metadata
    }


OPTIONS: dict[str, Option] = _option_table(Workload)
"""field name -> Option, in field order: the one option table."""

SLO_GROUP = "service-level objectives (run: unset = not checked, exit 3 when broken)"


@dataclass
class Slos:
    """The service-level objectives a run is judged by (`run` gates, exit status 3; every
    probe of `capacity`, which sets max_loss 0 and min_achieved 0.99 when they are unset).
    Not part of the Workload: they judge a run, they do not change it."""

    max_loss: Optional[float] = option(
        None,
        float,
        "a ratio from 0 to 1 (0 = nothing lost)",
        "largest share of expected deliveries lost (dropped + stranded + unknown; with --restart, "
        "apart from dropped_restart, which --slo-restart-lost bounds per restart)",
        low=0,
        high=1,
        nullable=True,
        group=SLO_GROUP,
        default_text="capacity: 0",
    )
    slo_p99_us: Optional[float] = option(
        None,
        float,
        "microseconds > 0",
        "largest p99 latency from the intended send time",
        low=0,
        low_open=True,
        nullable=True,
        group=SLO_GROUP,
    )
    min_achieved: Optional[float] = option(
        None,
        float,
        "a ratio from 0 to 1",
        "smallest share of the offered messages received (paced: what the schedule called for; "
        "with --restart, what the restarts lost counted as received: --slo-restart-lost bounds it)",
        low=0,
        high=1,
        nullable=True,
        group=SLO_GROUP,
        default_text="capacity: 0.99",
    )
    slo_restart_lost: Optional[int] = option(
        None,
        int,
        "a count of messages from 0",
        "with --restart, the most messages any one restart may lose (its dropped_restart)",
        low=0,
        nullable=True,
        group=SLO_GROUP,
    )
    slo_recovery_ms: Optional[float] = option(
        None,
        float,
        "milliseconds > 0",
        "with --restart, the longest recovery of any restart: from its new process up to the last "
        "arrival of what the restart held back (else its first arrival; none: broken)",
        low=0,
        low_open=True,
        nullable=True,
        group=SLO_GROUP,
    )

    def __post_init__(self) -> None:
        for name, opt in SLO_OPTIONS.items():
            setattr(self, name, opt.convert(getattr(self, name)))

    @property
    def given(self) -> bool:
        """Any SLO is set (a run made without any records none)."""
        return any(getattr(self, name) is not None for name in SLO_OPTIONS)

    def check_with(self, w: Workload, command: str = "run") -> None:
        """Every SLO judges what was sent against what was received: with --role producer what was
        received is not seen (but a service's answers are), with --role consumer what was sent."""
        given = [name for name in SLO_OPTIONS if getattr(self, name) is not None]
        if (
            w.role != "both"
            and not patterns.serves(w.pattern, w.role)
            and (given or command == "capacity")
        ):
            refuse_unjudged(
                w.role,
                SLO_OPTIONS[given[0]].flag if given else None,
                getattr(self, given[0]) if given else None,
            )
        self.check_restarts(w)

    def check_restarts(self, w: Workload) -> None:
        """The SLOs on restarts judge what --restart made: without it they could only pass."""
        for name in RESTART_SLOS:
            value = getattr(self, name)
            if value is not None and not w.restart:
                flag = SLO_OPTIONS[name].flag
                raise ConfigError(
                    flag,
                    f"got {value:g} without --restart; accepted: {flag} with --restart "
                    f"{RESTART_ACCEPTED}",
                )

    def with_search_defaults(self) -> "Slos":
        """The capacity search's SLOs: nothing lost and 99% received unless told otherwise."""
        return dataclasses.replace(
            self,
            max_loss=0.0 if self.max_loss is None else self.max_loss,
            min_achieved=0.99 if self.min_achieved is None else self.min_achieved,
        )


SLO_OPTIONS: dict[str, Option] = _option_table(Slos)
RESTART_SLOS = ("slo_restart_lost", "slo_recovery_ms")
"""The SLOs judged per restart (run.json restarts), refused without --restart."""


def refuse_unjudged(role: str, flag: Optional[str] = None, value: Any = None) -> NoReturn:
    """One side alone (--role producer or consumer, not a service) judged by an SLO `flag`, or
    searched by capacity (flag None): what the other side did is not seen. A service of the
    user's (req-rep, --role producer) is judged by its answers: the refusal points at it."""
    unseen = "your consumer received" if role == "producer" else "your producer sent"
    services = ", ".join(p.name for p in patterns.PATTERNS.values() if p.round_trip)
    service = f"--pattern {services} against a service of yours (judged by its answers)"
    if flag:
        accepted = f"no SLO options with --role {role}" + (
            f", or {service}" if role == "producer" else ""
        )
    elif role == "producer":
        accepted = f"--role both (probes judged by what zmqload's consumers receive), or --role producer with {service}"
    else:
        accepted = f"--role both (the search sets the rate of zmqload's producers), or --role producer with {service}"
    raise ConfigError(
        flag or "--role",
        f"got {value if flag else role!r} {f'with --role {role}' if flag else 'in capacity'}: "
        f"what {unseen} is not seen, so nothing can judge it; accepted: {accepted}",
    )


SEARCH_GROUP = "search"


@dataclass
class SearchPlan:
    """How `zmqload capacity` looks for the highest rate that meets the SLOs."""

    start_rate: int = field(
        default=10_000,
        metadata={
            "option": rate_option(
                "first probe's rate; the search doubles it until a probe fails, then bisects",
                group=SEARCH_GROUP,
            )
        },
    )
    precision: float = option(
        0.05,
        float,
        "a ratio from 0.001 to 1",
        "stop when the bracket [highest passing, lowest failing] is this close (0.05 = within 5%)",
        low=0.001,
        high=1,
        group=SEARCH_GROUP,
    )
    probe_duration: float = option(
        3.0,
        float,
        "seconds from 0.2 to 3600",
        "sending time of each probe (an open-loop --duration run)",
        low=0.2,
        high=3600,
        group=SEARCH_GROUP,
    )
    max_probes: int = option(
        20,
        int,
        "an integer from 2 to 200",
        "give up (exit 1) after this many probes per combination",
        low=2,
        high=200,
        group=SEARCH_GROUP,
    )

    def __post_init__(self) -> None:
        for name, opt in SEARCH_OPTIONS.items():
            setattr(self, name, opt.convert(getattr(self, name)))


SEARCH_OPTIONS: dict[str, Option] = _option_table(SearchPlan)


def expand_bind(endpoints: list[str], count: int) -> list[str]:
    """One endpoint per binding socket: the `count` given, or from one: tcp ports counted up
    from its port (port * or 0: any free port, each), ipc paths PATH, PATH-1, PATH-2..."""
    if len(endpoints) == count:
        return list(endpoints)
    base = endpoints[0]
    if base.startswith("tcp://"):
        host_part, _, port = base.rpartition(":")
        if port in ("*", "0"):
            return [f"{host_part}:*"] * count
        return [f"{host_part}:{int(port) + i}" for i in range(count)]
    return [base if i == 0 else f"{base}-{i}" for i in range(count)]


def tcp_parts(endpoint: str) -> tuple[Optional[str], Optional[str]]:
    """(host, port) of a tcp endpoint as written (host without brackets); (None, None) otherwise."""
    if not endpoint.startswith("tcp://"):
        return None, None
    host, _, port = endpoint[len("tcp://") :].rpartition(":")
    return host.strip("[]"), port


def _address_key(endpoint: str) -> tuple[str, str]:
    """What makes a bound endpoint and one connecting to it the same place: the tcp port (hosts may
    be spelled apart: 0.0.0.0, 127.0.0.1, a name), the ipc path."""
    host, port = tcp_parts(endpoint)
    if port is not None:
        return "tcp", "*" if port in ("*", "0") else str(int(port))
    transport, _, where = endpoint.partition("://")
    return transport, os.path.abspath(where) if transport == "ipc" and not where.startswith(
        "@"
    ) else where
