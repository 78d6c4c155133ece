"""The control messages between the controller and its workers, and their encoding.

Every message is a frozen dataclass; a message travels as data, never as pickle: frame 0
is JSON (the message's type name and fields), the following frames are the raw bytes of
the numpy arrays it carries (seen-maps of small runs, histograms), referenced from the JSON by
index. A run's own workers name the files of their maps instead (contract/bitmaps.py).

    controller -> worker   Connect, Warmup, Start, ProducersDone, Close, Stop
    worker -> controller   Ready, Connected, Warm, Draining, Progress, ProducerDone,
                           ProducerFinal, ConsumerFinal, ProxyFinal, Failed

The order of a run (docs/ARCHITECTURE.md): every worker sends Ready (binders with their
endpoints); connecting workers get Connect and answer Connected; with warm-up, producers
get Warmup and consumers answer Warm once they heard every producer; everyone gets Start;
each producer sends ProducerDone after its last send; consumers then get ProducersDone,
answer Draining and drain; Stop ends the consumers (and Close lets producers close, with
close-order consumer-first or after-drain); each worker's last word is its Final (or Failed).
"""
from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

import numpy as np

from .bitmaps import Bits

# -- controller -> worker ----------------------------------------------------------------------
@dataclass(frozen=True)
class Connect:
    endpoints: list[str]                  # the binders' endpoints to connect to


@dataclass(frozen=True)
class Warmup:
    """Producers: send warm-up messages until Start."""


@dataclass(frozen=True)
class Start:
    t0_ns: int                            # the open-loop schedule's origin (CLOCK_MONOTONIC)


@dataclass(frozen=True)
class ProducersDone:
    """Consumers: every producer has finished sending; drain as `drain` says."""
    drain: str                            # "fast", "slow" or "none" (Workload.drain)


@dataclass(frozen=True)
class Close:
    """Producers (close-order consumer-first): the consumers have closed; close now."""


@dataclass(frozen=True)
class Stop:
    interrupted: bool = False


# -- worker -> controller ----------------------------------------------------------------------
@dataclass(frozen=True)
class Ready:
    endpoints: list[str] = field(default_factory=list)   # binders: what they bound (proxy: front, back)


@dataclass(frozen=True)
class Connected:
    pass


@dataclass(frozen=True)
class Warm:
    """A consumer heard a warm-up message from every producer."""


@dataclass(frozen=True)
class Draining:
    """A consumer got ProducersDone: from now on it drains (the idle clock may start)."""


@dataclass(frozen=True)
class Progress:
    messages: int                         # sent (producer) or received (consumer) so far
    dropped: int = 0                      # producer: EAGAIN + SNDTIMEO so far
    t_last_recv_ns: int = 0
    gaps: int = 0                         # consumer: seqs skipped so far (newest seq seen vs received)
    rss_kb: int = -1                      # the worker process's resident memory now (VmRSS), -1 unknown


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
    blocked_sends: int = 0                # sends that found the socket full (pushback)
    blocked_ns: int = 0                   # time those sends waited for room
    unanswered: int = 0                   # req-rep: requests with no reply within --reply-timeout-ms


@dataclass(frozen=True)
class ProducerDone:
    counters: SendCounters


@dataclass(frozen=True)
class ProducerFinal:
    counters: SendCounters
    sent_ok_map: Bits                     # packed bits (or their file): seq k was accepted by the socket
    close_ns: int = 0                     # how long zmq_close blocked
    term_ns: int = 0                      # how long zmq_ctx_term blocked
    parts: int = 0
    max_rss_kb: int = 0
    unconverted_rows: int = 0
    writer_cpu_s: float = 0.0
    rtt: Optional[dict[str, Any]] = None  # req-rep: round-trip histogram payload
    lateness: Optional[dict[str, Any]] = None  # histogram payload: t_sent - t_intended of every attempt
    bytes_sent: int = 0                   # of the messages the socket accepted, every frame (contract/sizes.py)


@dataclass(frozen=True)
class StreamSeen:
    """What one consumer received of one stream."""
    stream: int
    unique: int
    duplicates: int
    reordered: int
    seen_map: Bits                        # packed bits (or their file): seq k arrived (at least once)
    drained_map: Bits                     # packed bits (or their file): seq k first arrived in the drain
    beyond: int = 0                       # --role consumer: arrivals past the span a map may take (not in it)


@dataclass(frozen=True)
class ForeignSeen:
    """What one consumer recorded of the foreign messages (--role consumer; contract/wire.py
    FOREIGN_STREAM): their bytes, first and last arrival, and the gaps between arrivals."""
    bytes: int
    t_first_ns: int
    t_last_ns: int
    gaps: dict[str, Any]                  # a Histogram payload of the ns between arrivals


@dataclass(frozen=True)
class ConsumerFinal:
    received: int
    warmups: int
    foreign: int
    errors: int
    t_first_recv_ns: int
    t_last_recv_ns: int
    t_drain_ns: int                       # when this consumer began draining (0: never)
    latency_intended: dict[str, Any]      # Histogram payloads
    latency_sent: dict[str, Any]
    streams: list[StreamSeen]
    parts: int = 0
    interrupted: bool = False
    max_rss_kb: int = 0
    unconverted_rows: int = 0
    writer_cpu_s: float = 0.0
    foreign_seen: Optional[ForeignSeen] = None    # --role consumer: the foreign among `foreign`
    frame_mismatches: int = 0             # --parts (and --role consumer): messages of another frame count
    bytes_received: int = 0               # of zmqload's messages received, every frame (contract/sizes.py)
    size_mismatches: int = 0              # received at another first-frame size than the rule's for the seq
    implausible: int = 0                  # of `foreign`: headers this run cannot have sent (csrc/zl_wire.h)


@dataclass(frozen=True)
class ProxyFinal:
    max_rss_kb: int = 0


@dataclass(frozen=True)
class Failed:
    message: str
    errno: Optional[int] = None
    traceback: str = ""


Message = Union[Connect, Warmup, Start, ProducersDone, Close, Stop, Ready, Connected, Warm, Draining, Progress,
                ProducerDone, ProducerFinal, ConsumerFinal, ProxyFinal, Failed]
_TYPES = {cls.__name__: cls for cls in typing.get_args(Message) + (SendCounters, StreamSeen, ForeignSeen)}


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
    return [head, *(b.data.cast("B") for b in blobs)]       # ndarray.data: its memoryview


def decode(frames: Sequence[bytes | memoryview]) -> Message:
    """Inverse of encode()."""
    blobs = frames[1:]

    def value(obj: Any) -> Any:
        if isinstance(obj, dict):
            if "$blob" in obj:
                return np.frombuffer(bytes(blobs[obj["$blob"]]), dtype=np.dtype(obj["dtype"])).copy()
            if "$items" in obj:
                return {value(k): value(v) for k, v in obj["$items"]}
            if "$type" in obj:
                cls = _TYPES[obj["$type"]]
                return cls(**{k: value(v) for k, v in obj.items() if k != "$type"})
            return {k: value(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [value(v) for v in obj]
        return obj

    message = value(json.loads(bytes(frames[0])))
    if type(message).__name__ not in _TYPES:
        raise ValueError("not a control message")
    return typing.cast(Message, message)
