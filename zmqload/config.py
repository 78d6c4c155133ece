"""The workload model and its validation: the one place for every limit.

Every check raises ConfigError naming the command-line option and what it accepts, so the
CLI, the Python API and sweeps all reject bad input the same way.
"""
from __future__ import annotations

import dataclasses
import os
import re
import socket
from dataclasses import dataclass, field
from typing import Optional

from . import patterns
from .errors import ConfigError

HEADER_SIZE = 16                 # docs/RECORDS.md: the wire header
MAX_SIZE = 256 * 1024 * 1024
MAX_SEQ = 2 ** 48 - 1            # seq is 48 bits on the wire
MAX_STREAMS = 64                 # warm-up tracks producers in a 64-bit mask
TRANSPORTS = ("tcp", "ipc", "inproc")
SEND_MODES = ("block", "dontwait", "timeout")
COMPRESSIONS = ("none", "snappy", "lz4", "zstd")
CLOSE_ORDERS = ("producer-first", "consumer-first")
DRAIN_MODES = ("fast", "slow", "none")
DEFAULT_COUNT = 100_000

_ENDPOINT = re.compile(
    r"^(tcp://(?P<host>[A-Za-z0-9_.\-]+|\[[0-9a-fA-F:]+\]):(?P<port>\d+|\*)"
    r"|ipc://(?P<path>.+)|inproc://(?P<name>[A-Za-z0-9_.\-]+))$")


# Fields whose command-line option is not simply --field-name.
_OPTION_NAMES = {"linger_ms": "--linger"}


def _option(name: str) -> str:
    return _OPTION_NAMES.get(name, "--" + name.replace("_", "-"))


@dataclass
class Workload:
    """What to run. Field names match the CLI options (`--consumer-delay-us` is
    `consumer_delay_us`). None means "libzmq's default" for socket options."""

    pattern: str = "push-pull"
    transport: str = "tcp"
    host: str = "127.0.0.1"
    port: int = 0                        # 0: any free port
    endpoint: Optional[str] = None       # explicit endpoint, overrides transport/host/port
    size: int = 64
    count: Optional[int] = None          # per producer
    duration: Optional[float] = None     # seconds, wall clock bound
    rate: int = 0                        # msg/s per producer, 0 = as fast as possible
    producers: int = 1
    consumers: int = 1
    send_mode: str = "block"
    sndtimeo_ms: int = 100               # for send_mode="timeout"
    sndhwm: Optional[int] = None
    rcvhwm: Optional[int] = None
    linger_ms: Optional[int] = None
    sndbuf: Optional[int] = None
    rcvbuf: Optional[int] = None
    immediate: bool = False
    io_threads: int = 1
    consumer_delay_us: float = 0.0
    drain_timeout_ms: int = 1000         # consumers stop after this long idle once producers are done
    drain: str = "fast"                  # fast: consumers stop their work and read; slow: keep it; none: close at once
    drain_limit_s: float = 60.0          # the drain is cut short after this long (unreceived: stranded)
    warmup: bool = True                  # wait until every consumer hears every producer
    join_delay_ms: int = 0               # consumers connect this long after producers start (slow joiner)
    close_pause_ms: int = 0              # producers pause this long after their last send, then close
    close_order: str = "producer-first"  # consumer-first: consumers close before producers do
    proxy_sndhwm: Optional[int] = None   # pattern proxy: the XPUB side's SNDHWM
    proxy_rcvhwm: Optional[int] = None   # pattern proxy: the XSUB side's RCVHWM
    out: str = "runs"
    run_name: Optional[str] = None
    compression: str = "none"            # on top of delta encoding, which does most of the work
    chunk_rows: int = 262_144
    slice_ms: int = 20
    label: dict = field(default_factory=dict)   # free-form tags copied into run.json

    # -- derived -----------------------------------------------------------------------
    @property
    def messages_per_producer(self) -> int:
        """Upper bound of messages each producer attempts."""
        if self.count is not None:
            return self.count
        if self.rate:
            return max(1, int(self.rate * self.duration))
        return MAX_SEQ

    @property
    def fanout(self) -> bool:
        return patterns.get(self.pattern).fanout

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "Workload":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConfigError(_option(unknown[0]), f"unknown option; accepted: {', '.join(sorted(names))}")
        return cls(**values)

    # -- validation ----------------------------------------------------------------------
    def validate(self) -> "Workload":
        """Check every value; fill defaults that depend on others. Returns self."""
        if self.pattern not in patterns.PATTERNS:
            raise ConfigError("--pattern", f"unknown pattern {self.pattern!r}; accepted: {', '.join(patterns.PATTERNS)}")
        if self.transport not in TRANSPORTS:
            raise ConfigError("--transport", f"unknown transport {self.transport!r}; accepted: {', '.join(TRANSPORTS)}")
        _int_range("size", self.size, HEADER_SIZE, MAX_SIZE,
                   f"an integer from {HEADER_SIZE} (the wire header) to {MAX_SIZE}")
        if self.count is not None:
            _int_range("count", self.count, 1, MAX_SEQ, f"a positive integer up to {MAX_SEQ}")
        if self.duration is not None:
            _number_range("duration", self.duration, 0, 7 * 86400, "seconds > 0", low_open=True)
        if self.count is None and self.duration is None:
            self.count = DEFAULT_COUNT
        _int_range("rate", self.rate, 0, 100_000_000, "messages per second per producer, 0 (unpaced) up to 100000000")
        if self.rate and self.messages_per_producer * 1_000_000_000 >= 2 ** 63:
            raise ConfigError("--count", "count too large for the schedule; accepted: count < 9e9")
        _int_range("producers", self.producers, 1, MAX_STREAMS, f"an integer from 1 to {MAX_STREAMS}")
        _int_range("consumers", self.consumers, 1, 64, "an integer from 1 to 64")
        if self.pattern == "pair" and (self.producers != 1 or self.consumers != 1):
            raise ConfigError("--producers", "pattern pair connects exactly one pair; accepted: --producers 1 --consumers 1")
        if self.pattern == "proxy" and self.endpoint:
            raise ConfigError("--endpoint", "pattern proxy binds its own two endpoints; accepted: --host/--port")
        if self.pattern == "req-rep" and self.send_mode != "block":
            raise ConfigError("--send-mode", "pattern req-rep waits for every reply; accepted: block")
        if self.send_mode not in SEND_MODES:
            raise ConfigError("--send-mode", f"unknown send mode {self.send_mode!r}; accepted: {', '.join(SEND_MODES)}")
        _int_range("sndtimeo_ms", self.sndtimeo_ms, 1, 3_600_000, "milliseconds from 1 to 3600000")
        _int_range("close_pause_ms", self.close_pause_ms, 0, 3_600_000, "milliseconds >= 0")
        _int_range("join_delay_ms", self.join_delay_ms, 0, 3_600_000, "milliseconds >= 0")
        if self.join_delay_ms and patterns.get(self.pattern).binder == "consumer":
            raise ConfigError("--join-delay-ms", "consumers must be the connecting side; accepted with "
                              "pub-sub or proxy (or 0)")
        if self.close_order not in CLOSE_ORDERS:
            raise ConfigError("--close-order", f"unknown order {self.close_order!r}; accepted: {', '.join(CLOSE_ORDERS)}")
        for name in ("sndhwm", "rcvhwm", "proxy_sndhwm", "proxy_rcvhwm"):
            value = getattr(self, name)
            if value is not None:
                _int_range(name, value, 0, 2 ** 31 - 1, "an integer >= 0 (0 = no limit)")
        if self.linger_ms is not None:
            _int_range("linger_ms", self.linger_ms, -1, 2 ** 31 - 1, "-1 (wait forever), 0, or milliseconds")
        for name in ("sndbuf", "rcvbuf"):
            value = getattr(self, name)
            if value is not None:
                _int_range(name, value, 0, 2 ** 31 - 1, "bytes >= 0 (0 = OS default)")
        if not isinstance(self.immediate, bool):
            raise ConfigError("--immediate", "accepted: true or false")
        _int_range("io_threads", self.io_threads, 1, 64, "an integer from 1 to 64")
        _number_range("consumer_delay_us", self.consumer_delay_us, 0, 60_000_000, "microseconds >= 0")
        _int_range("drain_timeout_ms", self.drain_timeout_ms, 1, 3_600_000, "milliseconds from 1 to 3600000")
        if self.drain not in DRAIN_MODES:
            raise ConfigError("--drain", f"unknown drain {self.drain!r}; accepted: {', '.join(DRAIN_MODES)}")
        _number_range("drain_limit_s", self.drain_limit_s, 0, 7 * 86400, "seconds > 0", low_open=True)
        if self.compression not in COMPRESSIONS:
            raise ConfigError("--compression", f"unknown codec {self.compression!r}; accepted: {', '.join(COMPRESSIONS)}")
        _int_range("chunk_rows", self.chunk_rows, 1024, 16_777_216, "an integer from 1024 to 16777216")
        _int_range("slice_ms", self.slice_ms, 1, 1000, "milliseconds from 1 to 1000")
        if self.run_name is not None and not re.fullmatch(r"[A-Za-z0-9_.\-]{1,100}", self.run_name):
            raise ConfigError("--run-name", "accepted: 1-100 letters, digits, '.', '_' or '-'")
        self._validate_endpoint()
        return self

    def _validate_endpoint(self) -> None:
        if self.endpoint is not None:
            match = _ENDPOINT.match(self.endpoint)
            if not match:
                raise ConfigError("--endpoint", f"malformed endpoint {self.endpoint!r}; accepted: "
                                  "tcp://HOST:PORT, ipc://PATH or inproc://NAME")
            self.transport = self.endpoint.split("://", 1)[0]
            if match.group("port") not in (None, "*"):
                _int_range("endpoint", int(match.group("port")), 0, 65535, "a tcp port from 0 to 65535")
            if self.transport == "tcp":
                self.host = match.group("host").strip("[]")
                self.port = 0 if match.group("port") == "*" else int(match.group("port"))
        _int_range("port", self.port, 0, 65535, "a tcp port from 0 to 65535 (0 = any free port)")
        if self.transport == "tcp":
            if not re.fullmatch(r"[A-Za-z0-9_.\-:]+", self.host or ""):
                raise ConfigError("--host", f"malformed host {self.host!r}; accepted: an IP address or host name")
            binder = patterns.get(self.pattern).binder
            binders = {"consumer": self.consumers, "producer": self.producers, "proxy": 2}[binder]
            if self.port and self.port + binders - 1 > 65535:
                raise ConfigError("--port", "port + number of binding sockets exceeds 65535")
            if self.port:
                for offset in range(binders):
                    _check_port_free("--endpoint" if self.endpoint else "--port", self.host, self.port + offset)


def _int_range(name: str, value, low: int, high: int, accepted: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(_option(name), f"got {value!r}; accepted: {accepted}")


def _number_range(name: str, value, low: float, high: float, accepted: str, low_open: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    if ok:
        ok = (value > low if low_open else value >= low) and value <= high
    if not ok:
        raise ConfigError(_option(name), f"got {value!r}; accepted: {accepted}")


def _check_port_free(option: str, host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    probe = socket.socket(family, socket.SOCK_STREAM)
    # libzmq binds with SO_REUSEADDR, so a port in TIME_WAIT is free for it: probe alike
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind((host, port))
    except OSError as exc:
        raise ConfigError(option, f"cannot bind {host}:{port} ({exc.strerror}); accepted: a free local port, or 0 for any")
    finally:
        probe.close()


def check_output_dir(path: str, option: str = "--out") -> None:
    """The output directory must exist or be creatable, and be writable."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ConfigError(option, f"cannot create {path!r} ({exc.strerror}); accepted: a writable directory")
    if not os.path.isdir(path) or not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(option, f"{path!r} is not a writable directory; accepted: a writable directory")
