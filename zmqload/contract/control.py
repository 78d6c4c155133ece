"""The control messages between the controller and its workers: frozen dataclasses, sent as data (a
JSON frame, then the numpy arrays' raw bytes), never pickled. Their order in a run:
docs/ARCHITECTURE.md, "Process model"."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

import numpy as np

from ..errors import RunError
from .bitmaps import Bits
from .histogram import N_BUCKETS
from .ids import WorkerId


# -- controller -> worker ----------------------------------------------------------------------
@dataclass(frozen=True)
class Connect:
    endpoints: list[str]  # the binders' endpoints to connect to


@dataclass(frozen=True)
class Warmup:
    """Producers: send warm-up messages until Start."""


@dataclass(frozen=True)
class Start:
    t0_ns: int  # the open-loop schedule's origin (CLOCK_MONOTONIC)


@dataclass(frozen=True)
class ProducersDone:
    """Consumers: every producer has finished sending; drain as `drain` says."""

    drain: str  # "fast", "slow" or "none" (Workload.drain)


@dataclass(frozen=True)
class Close:
    """Producers (close-order consumer-first): the consumers have closed; close now."""


@dataclass(frozen=True)
class Stop:
    interrupted: bool = False


@dataclass(frozen=True)
class Hold:
    """A worker about to be restarted (--restart): stop sending or receiving, put every row on disk,
    answer Held and wait for the end of the process (what libzmq still queues dies with it)."""


# -- worker -> controller ----------------------------------------------------------------------
@dataclass(frozen=True)
class Ready:
    endpoints: list[str] = field(
        default_factory=list
    )  # binders: what they bound (proxy: front, back)
    t_ns: int = 0  # a binder's: when it had bound (CLOCK_MONOTONIC), a restart's new process's up


@dataclass(frozen=True)
class Connected:
    t_ns: int = 0  # when it had connected (CLOCK_MONOTONIC), a restart's new process's up


@dataclass(frozen=True)
class Warm:
    """A consumer heard a warm-up message from every producer."""


@dataclass(frozen=True)
class Draining:
    """A consumer got ProducersDone: from now on it drains (the idle clock may start)."""


@dataclass(frozen=True)
class Held:
    """A worker holds (Hold): everything it sent or received is recorded; its process may end."""

    next_seq: int = 0  # a producer's: the first seq it did not try, where its new process goes on
    sent: int = 0  # a producer's: the messages its socket accepted (the drain's count goes on)


@dataclass(frozen=True)
class Progress:
    messages: int  # sent (producer) or received (consumer) so far
    dropped: int = 0  # producer: EAGAIN + SNDTIMEO so far
    t_last_recv_ns: int = 0
    gaps: int = 0  # consumer: seqs skipped so far (newest seq seen vs received)
    rss_kb: int = -1  # the worker process's resident memory now (VmRSS), -1 unknown
    # for --metrics (runner/metrics_export.py): the producer's counters so far, the kernel's tcp
    # queues of the worker's connections (bytes, -1 unknown), and with --metrics a consumer's
    # latency histograms so far (payloads, at most once a second: a few kB each)
    attempted: int = 0
    eagain: int = 0
    timeouts: int = 0
    blocked_sends: int = 0
    tcp_sendq_bytes: int = -1
    tcp_recvq_bytes: int = -1
    latency_intended: Optional[dict[str, Any]] = None
    latency_sent: Optional[dict[str, Any]] = None


@dataclass(frozen=True)
class SendCounters:
    attempted: int = 0
    sent: int = 0
    eagain: int = 0
    timeout: int = 0
    errors: int = 0
    last_errno: int = 0
    t_first_send_ns: int = 0
    t_last_send_ns: int = 0
    interrupted: bool = False
    blocked_sends: int = 0  # sends that found the socket full (pushback)
    blocked_ns: int = 0  # time those sends waited for room
    unanswered: int = 0  # req-rep: requests with no reply within --reply-timeout-ms


@dataclass(frozen=True)
class ProducerDone:
    counters: SendCounters


@dataclass(frozen=True)
class ProducerFinal:
    counters: SendCounters
    sent_ok_map: Bits  # packed bits (or their file): seq k was accepted by the socket
    close_ns: int = 0  # how long zmq_close blocked
    term_ns: int = 0  # how long zmq_ctx_term blocked
    parts: int = 0
    max_rss_kb: int = 0
    unconverted_rows: int = 0
    writer_cpu_s: float = 0.0
    rtt: Optional[dict[str, Any]] = None  # req-rep: round-trip histogram payload
    lateness: Optional[dict[str, Any]] = (
        None  # histogram payload: t_sent - t_intended of every attempt
    )
    bytes_sent: int = 0  # of the messages the socket accepted, every frame (contract/sizes.py)


@dataclass(frozen=True)
class StreamSeen:
    """What one consumer received of one stream."""

    stream: int
    unique: int
    duplicates: int
    reordered: int
    seen_map: Bits  # packed bits (or their file): seq k arrived (at least once)
    drained_map: Bits  # packed bits (or their file): seq k first arrived in the drain
    beyond: int = 0  # --role consumer: arrivals past the span a map may take (not in it)


@dataclass(frozen=True)
class ForeignSeen:
    """What one consumer recorded of the foreign messages (--role consumer; contract/wire.py
    FOREIGN_STREAM): their bytes, first and last arrival, and the gaps between arrivals."""

    bytes: int
    t_first_ns: int
    t_last_ns: int
    gaps: dict[str, Any]  # a Histogram payload of the ns between arrivals


@dataclass(frozen=True)
class ConsumerFinal:
    received: int
    warmups: int
    foreign: int
    errors: int
    t_first_recv_ns: int
    t_last_recv_ns: int
    t_drain_ns: int  # when this consumer began draining (0: never)
    latency_intended: dict[str, Any]  # Histogram payloads
    latency_sent: dict[str, Any]
    streams: list[StreamSeen]
    parts: int = 0
    interrupted: bool = False
    max_rss_kb: int = 0
    unconverted_rows: int = 0
    writer_cpu_s: float = 0.0
    foreign_seen: Optional[ForeignSeen] = None  # --role consumer: the foreign among `foreign`
    frame_mismatches: int = 0  # --parts (and --role consumer): messages of another frame count
    bytes_received: int = 0  # of zmqload's messages received, every frame (contract/sizes.py)
    size_mismatches: int = 0  # received at another first-frame size than the rule's for the seq
    implausible: int = 0  # of `foreign`: headers this run cannot have sent (csrc/zl_wire.h)


@dataclass(frozen=True)
class ProxyFinal:
    max_rss_kb: int = 0


@dataclass(frozen=True)
class Failed:
    message: str
    errno: Optional[int] = None
    traceback: str = ""


Message = Union[
    Connect,
    Warmup,
    Start,
    ProducersDone,
    Close,
    Stop,
    Hold,
    Ready,
    Connected,
    Warm,
    Draining,
    Held,
    Progress,
    ProducerDone,
    ProducerFinal,
    ConsumerFinal,
    ProxyFinal,
    Failed,
]


# -- encoding ----------------------------------------------------------------------------------
def encode(message: Message) -> list[bytes | memoryview]:
    """A message as frames: JSON, then one frame per numpy array."""
    blobs: list[np.ndarray] = []

    def data(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: data(getattr(value, f.name)) for f in dataclasses.fields(value)}
            return {"$type": type(value).__name__, **fields}
        if isinstance(value, np.ndarray):
            blobs.append(np.ascontiguousarray(value))
            return {"$blob": len(blobs) - 1, "dtype": value.dtype.str}
        if isinstance(value, dict):
            if any(not isinstance(k, str) for k in value):
                return {"$items": [[data(k), data(v)] for k, v in value.items()]}
            return {k: data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [data(v) for v in value]
        if isinstance(value, np.generic):
            return value.item()
        return value

    head = json.dumps(data(message), separators=(",", ":")).encode()
    return [head, *(b.data.cast("B") for b in blobs)]  # ndarray.data: its memoryview


def decode(frames: Sequence[bytes | memoryview]) -> Message:
    """Inverse of encode(), checked: every field of the type its message declares (ints within int64,
    floats finite, histogram payloads of contract/histogram.py's layout, each array a frame of packed
    bits referenced once). Anything else, whatever its bytes, is RunError: one line naming the field
    (a worker that hands the controller such a message fails the run; so does a controller's, the worker)."""
    if not frames:
        raise _refuse("no frames")
    try:
        head = json.loads(bytes(frames[0]).decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # JSONDecodeError: a ValueError
        raise _refuse(f"not JSON ({_first_line(exc)})") from None
    blobs = _Blobs(frames[1:])
    if (
        not isinstance(head, dict)
        or not isinstance(head.get("$type"), str)
        or head["$type"] not in _MESSAGES
    ):
        raise _refuse(f"not one of {', '.join(_MESSAGES)}")
    try:
        message = _typed(head, _MESSAGES[head["$type"]], head["$type"], blobs)
    except RecursionError:
        raise _refuse("nested too deeply") from None
    if blobs.unused:
        raise _refuse(f"{len(blobs.unused)} array frame(s) not referenced")
    return typing.cast(Message, message)


def sender(routing_id: bytes) -> WorkerId:
    """The worker a message came from, by its routing id ("p0", "c1", "x0"); RunError otherwise."""
    try:
        return WorkerId.parse(routing_id.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise _refuse(
            f"from a peer that is not a worker (routing id {routing_id[:40]!r})"
        ) from None


# -- the checks of decode ------------------------------------------------------------------------
_MESSAGES = {cls.__name__: cls for cls in typing.get_args(Message)}
INT64 = (-(2**63), 2**63)
PACKED_DTYPE = "|u1"
"""The dtype of every array a message carries (packed bit maps: np.packbits, uint8)."""
_HISTOGRAM_KEYS = ("index", "count", "min", "max", "total")


def _refuse(why: str) -> RunError:
    return RunError(f"control message: {why}")


def _no_constant(word: str) -> Any:
    raise ValueError(f"{word} is not a number a message holds")


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


class _Blobs:
    """The frames after the head; each may be referenced once (a reference repeated would make
    many arrays of one frame's bytes: memory beyond the message's size)."""

    def __init__(self, frames: Sequence[bytes | memoryview]):
        self.frames = frames
        self.unused = set(range(len(frames)))

    def take(self, ref: Any, where: str) -> np.ndarray:
        if (
            set(ref) != {"$blob", "dtype"}
            or type(ref["$blob"]) is not int
            or ref["dtype"] != PACKED_DTYPE
        ):
            raise _refuse(
                f'{where}: not an array reference {{"$blob": frame, "dtype": "{PACKED_DTYPE}"}}'
            )
        index = ref["$blob"]
        if index not in self.unused:
            raise _refuse(f"{where}: array frame {index} is missing or referenced twice")
        self.unused.discard(index)
        return np.frombuffer(self.frames[index], dtype=np.uint8).copy()


def _typed(value: Any, kind: Any, where: str, blobs: _Blobs) -> Any:
    """`value` (decoded JSON) as `kind`, a message's field type; RunError naming `where` otherwise."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Union:
        if value is None and type(None) in args:
            return None
        if isinstance(value, str) and str in args:  # Bits: the path of a map's file
            return value
        inner = [a for a in args if a is not type(None) and a is not str]
        if len(inner) == 1:
            return _typed(value, inner[0], where, blobs)
        raise _refuse(f"{where}: got {_shown(value)}")
    if kind is np.ndarray:
        if not isinstance(value, dict):
            raise _refuse(
                f"{where}: got {_shown(value)}; accepted: packed bits (an array frame or a path)"
            )
        return blobs.take(value, where)
    if origin is list:
        if not isinstance(value, list):
            raise _refuse(f"{where}: got {_shown(value)}; accepted: a list")
        return [_typed(v, args[0], f"{where}[{i}]", blobs) for i, v in enumerate(value)]
    if origin is dict:  # every dict a message holds is a histogram payload
        return _histogram(value, where)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _instance(value, kind, where, blobs)
    if kind is bool:
        if type(value) is not bool:
            raise _refuse(f"{where}: got {_shown(value)}; accepted: true or false")
        return value
    if kind is int:
        return _int(value, where)
    if kind is float:
        if (
            type(value) not in (int, float)
            or not math.isfinite(value)
            or not INT64[0] <= value < INT64[1]
        ):
            raise _refuse(f"{where}: got {_shown(value)}; accepted: a finite number")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise _refuse(f"{where}: got {_shown(value)}; accepted: a string")
        return value
    raise _refuse(
        f"{where}: of a type messages do not hold ({kind})"
    )  # pragma: no cover: the types above


def _int(value: Any, where: str) -> int:
    if type(value) is not int or not INT64[0] <= value < INT64[1]:
        raise _refuse(f"{where}: got {_shown(value)}; accepted: an integer within int64")
    return value


def _instance(value: Any, cls: type, where: str, blobs: _Blobs) -> Any:
    if not isinstance(value, dict) or value.get("$type") != cls.__name__:
        raise _refuse(f"{where}: got {_shown(value)}; accepted: a {cls.__name__}")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in value if k != "$type" and k not in fields]
    if unknown:
        raise _refuse(f"{where}: unknown field {_shown(unknown[0])}")
    missing = [
        name
        for name, f in fields.items()
        if name not in value
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise _refuse(f"{where}: missing field {missing[0]!r}")
    return cls(
        **{
            name: _typed(v, hints[name], f"{where}.{name}", blobs)
            for name, v in value.items()
            if name != "$type"
        }
    )


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _histogram(value: Any, where: str) -> dict[str, Any]:
    """A histogram payload (measure/histogram.py to_payload): index and count of its non-empty buckets,
    min, max (null when empty) and total."""
    if not isinstance(value, dict) or sorted(value) != sorted(_HISTOGRAM_KEYS):
        raise _refuse(
            f"{where}: got {_shown(value)}; accepted: a histogram payload "
            f"({', '.join(_HISTOGRAM_KEYS)})"
        )
    index, count = value["index"], value["count"]
    if (
        not isinstance(index, list)
        or not isinstance(count, list)
        or len(index) != len(count)
        or len(index) > N_BUCKETS
    ):
        raise _refuse(f"{where}: index and count must be lists of one length, at most {N_BUCKETS}")
    for i, (bucket, n) in enumerate(zip(index, count)):
        if type(bucket) is not int or not 0 <= bucket < N_BUCKETS:
            raise _refuse(
                f"{where}.index[{i}]: got {_shown(bucket)}; accepted: a bucket from 0 to {N_BUCKETS - 1}"
            )
        if type(n) is not int or not 0 <= n < INT64[1]:
            raise _refuse(f"{where}.count[{i}]: got {_shown(n)}; accepted: a count within int64")
    for name in ("min", "max"):
        if value[name] is not None:
            _int(value[name], f"{where}.{name}")
    _int(value["total"], f"{where}.total")
    return dict(value)


def _shown(value: Any) -> str:
    """A value in an error's line: its JSON, cut short."""
    try:
        text = json.dumps(value)
    except (ValueError, TypeError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."
