"""Fuzz targets: one per place that parses bytes from outside (libzmq runs its decoders under
OSS-Fuzz; these are zmqload's). Each target holds its parser to one rule, whatever the bytes:

- it returns a valid value (checked by an oracle of the target's own: a round trip, a reference
  parser, pyzmq's Z85 decoder) or raises the project's error for that input, a `ZmqloadError`
  (errors.py: `ConfigError` for what an option names, `RecordError` for a record or a worker's spec,
  `RunError` for a control message), whose message is one line; never another exception;
- it ends: every example is timed (EXAMPLE_SECONDS), pytest-timeout bounds the whole test;
- its memory stays within a constant factor of the input (tracemalloc's peak against the input's
  size: MEMORY_FACTOR x bytes + MEMORY_SLACK), so a file that *claims* 10^12 entries, or a message
  that references one frame a million times, cannot make it allocate more;
- for the command-line ones, the CLI turns the error into one line on stderr and exit status 2,
  no traceback (test_cli_*).

Not here: the engine's receive path (csrc/zl_wire.h, _engine.pyx), owned and fuzzed with its code.

Tool: hypothesis (not atheris: docs/FUZZING.md says why). The suite runs each target a fixed number
of examples, derandomized (the same examples every run) after its explicit seed examples
(`@example`: truncated JSON, huge numbers, NaN/Infinity, deep nesting, wrong types, non-UTF-8, NUL
bytes, wrong key lengths and characters, unknown TOML keys, and every finding of a long run).
`make fuzz` runs the same targets for a time budget each, randomized (ZMQLOAD_FUZZ_SECONDS), and
writes what each ran to ZMQLOAD_FUZZ_LOG; a finding fails the test with the shrunk input, which
becomes an `@example` here once the parser is fixed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
import typing

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from zmq.utils import z85

from zmqload import cli
from zmqload.contract import codec, control, curve, sizes
from zmqload.store.size_files import sizes_of as read_sizes
from zmqload.contract.records import SCHEMA_VERSION
from zmqload.contract.run_record import RunRecord
from zmqload.contract.search_record import SearchRecord
from zmqload.contract.sweep_record import SweepRecord
from zmqload.contract.workload import OPTIONS, Workload
from zmqload.errors import ConfigError, RecordError, RunError, ZmqloadError
from zmqload.plan import sweep as sweeps
from zmqload.runner import preflight
from zmqload.runner.spec import WorkerSpec

FUZZ_SECONDS = float(os.environ.get("ZMQLOAD_FUZZ_SECONDS", "0"))
"""> 0 (make fuzz): each target runs randomized batches for this many seconds; 0: the suite's short run."""
FUZZ_LOG = os.environ.get("ZMQLOAD_FUZZ_LOG")
BATCH = 200
EXAMPLE_SECONDS = 10.0
MEMORY_FACTOR = (
    64  # Python objects of decoded JSON: ~20x its bytes at most ({} is 64 bytes of 2 characters)
)
MEMORY_SLACK = 4 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.timeout(max(300, 4 * FUZZ_SECONDS))
EXECUTED: dict[str, int] = {}


def fuzz(short: int):
    """The suite: `short` examples, the same every run. make fuzz: randomized batches for FUZZ_SECONDS."""

    def decorate(test):
        name = test.__name__
        if not FUZZ_SECONDS:
            return settings(
                max_examples=short,
                derandomize=True,
                database=None,
                deadline=None,
                suppress_health_check=list(HealthCheck),
            )(test)
        batch = settings(
            max_examples=BATCH,
            derandomize=False,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            print_blob=True,
        )(test)

        def long_run(**fixtures: typing.Any) -> None:
            start, before = time.monotonic(), sum(EXECUTED.values())
            try:
                while time.monotonic() - start < FUZZ_SECONDS:
                    batch(**fixtures)
            finally:
                if FUZZ_LOG:
                    with open(FUZZ_LOG, "a") as f:
                        f.write(
                            f"{name}\t{sum(EXECUTED.values()) - before}\t{time.monotonic() - start:.1f}\n"
                        )

        long_run.__name__ = name
        long_run.__doc__ = test.__doc__
        long_run.__signature__ = inspect.signature(batch)  # the fixtures the test takes
        return long_run

    return decorate


@contextlib.contextmanager
def bounded(target: str, size: int, limit: int | None = None, trace: bool = True):
    """One example: counted, timed, its memory peak held to the input's size (`limit`: another bound;
    not `trace`: timed only, at full speed)."""
    EXECUTED[target] = EXECUTED.get(target, 0) + 1
    if not trace:
        t0 = time.monotonic()
        yield
        assert time.monotonic() - t0 < EXAMPLE_SECONDS, f"{target}: {time.monotonic() - t0:.1f} s"
        return
    started = tracemalloc.is_tracing()
    if not started:
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    t0 = time.monotonic()
    try:
        yield
    finally:
        took = time.monotonic() - t0
        peak = tracemalloc.get_traced_memory()[1] - before
        if not started:
            tracemalloc.stop()
    assert took < EXAMPLE_SECONDS, f"{target}: {took:.1f} s for {size:,} bytes of input"
    limit = MEMORY_FACTOR * size + MEMORY_SLACK if limit is None else limit
    assert peak <= limit, (
        f"{target}: {peak:,} bytes allocated for {size:,} bytes of input (at most {limit:,})"
    )


def refused(exc: BaseException, kind: type[ZmqloadError], prefix: str = "") -> None:
    """The rule for a refusal: the documented class, one line (and what it starts with)."""
    assert isinstance(exc, kind), f"{type(exc).__name__}: {exc}"
    text = str(exc)
    assert text and "\n" not in text and "\r" not in text, repr(text)
    assert len(text) < 2000, f"a line of {len(text):,} characters"
    assert text.startswith(prefix), text


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory(prefix="zmqload-fuzz-") as directory:
        yield directory


def _file(directory: str, name: str, data: bytes) -> str:
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


# -- strategies --------------------------------------------------------------------------------
INT_EDGES = [
    0,
    -1,
    1,
    2**31 - 1,
    2**31,
    2**32,
    2**53 + 1,
    2**63 - 1,
    2**63,
    -(2**63),
    -(2**63) - 1,
    2**64,
    10**30,
    -(10**30),
    10**4000,
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(INT_EDGES),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        [
            "",
            "\x00",
            "\udfff"[:0] + "\ufffd",
            "p0",
            "c1",
            "x0",
            "|u1",
            "$blob",
            "$type",
            "fast",
            "push-pull",
            "pub-sub",
            "tcp",
            "10k",
            "1e999999",
            "@x",
            "nan",
        ]
    ),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(doc: typing.Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON document: dict keys and list indices from its root."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, prefix + (i,))
    return out


def _set(doc: typing.Any, path: tuple, value: typing.Any, delete: bool = False) -> typing.Any:
    if not path:
        return value
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    elif not delete:
        parent[path[-1]] = value
    return doc


@st.composite
def mutated(draw, docs) -> typing.Any:
    """A valid document with 1-3 places replaced by any JSON value, deleted, or given an unknown key."""
    doc = json.loads(json.dumps(draw(docs)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        how = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if how == "replace":
            doc = _set(doc, path, draw(json_values))
        elif how == "delete" and path:
            doc = _set(doc, path, None, delete=True)
        else:
            target = doc
            for step in path:
                target = target[step]
            if isinstance(target, dict):
                target[draw(st.text(max_size=8))] = draw(json_values)
    return doc


def _dumps(doc: typing.Any) -> bytes:
    try:
        return json.dumps(doc, allow_nan=True).encode()
    except ValueError:  # an int beyond the str conversion limit
        return b"{" + b"9" * 5000 + b"}"


@st.composite
def cut(draw, data: bytes) -> bytes:
    """Bytes truncated, or with a few bytes flipped (the syntax's own errors)."""
    data = bytearray(data)
    if data and draw(st.booleans()):
        del data[draw(st.integers(0, len(data) - 1)) :]
    for _ in range(draw(st.integers(0, 3))):
        if data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


def bytes_like(docs) -> st.SearchStrategy[bytes]:
    """Raw bytes, mutated valid documents, and valid documents cut or flipped."""
    return st.one_of(
        st.binary(max_size=200),
        mutated(docs).map(_dumps),
        docs.map(_dumps).flatmap(cut),
        docs.map(_dumps),
    )


DEEP = [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000]
"""Nesting beyond any recursion limit."""


# -- control messages ---------------------------------------------------------------------------
def _histogram_payload(draw_ints) -> dict:
    index = sorted(set(draw_ints))
    return {
        "index": index,
        "count": [1] * len(index),
        "min": min(index, default=None),
        "max": max(index, default=None),
        "total": sum(index),
    }


@st.composite
def control_messages(draw) -> control.Message:
    bits = st.one_of(
        st.binary(max_size=16).map(lambda b: np.frombuffer(b, np.uint8).copy()), st.just("/tmp/map")
    )
    i64 = st.integers(-(2**63), 2**63 - 1)
    hist = st.lists(st.integers(0, 6271), max_size=5).map(_histogram_payload)
    counters = st.builds(control.SendCounters, i64, i64)
    seen = st.builds(control.StreamSeen, i64, i64, i64, i64, bits, bits)
    kind = draw(st.sampled_from(typing.get_args(control.Message)))
    return draw(
        {
            control.Connect: st.builds(control.Connect, st.lists(st.text(max_size=10), max_size=3)),
            control.Start: st.builds(control.Start, i64),
            control.ProducersDone: st.builds(
                control.ProducersDone, st.sampled_from(["fast", "slow", "none"])
            ),
            control.Stop: st.builds(control.Stop, st.booleans()),
            control.Ready: st.builds(control.Ready, st.lists(st.text(max_size=10), max_size=3)),
            control.Progress: st.builds(control.Progress, i64, i64),
            control.ProducerDone: st.builds(control.ProducerDone, counters),
            control.ProducerFinal: st.builds(
                control.ProducerFinal,
                counters,
                bits,
                rtt=st.none() | hist,
                writer_cpu_s=st.floats(0, 100),
            ),
            control.ConsumerFinal: st.builds(
                control.ConsumerFinal,
                i64,
                i64,
                i64,
                i64,
                i64,
                i64,
                i64,
                hist,
                hist,
                st.lists(seen, max_size=2),
                foreign_seen=st.none() | st.builds(control.ForeignSeen, i64, i64, i64, hist),
            ),
            control.ProxyFinal: st.builds(control.ProxyFinal, i64),
            control.Failed: st.builds(
                control.Failed, st.text(max_size=20), st.none() | i64, st.text(max_size=20)
            ),
        }.get(kind, st.builds(kind))
    )


@st.composite
def control_frames(draw) -> list[bytes]:
    message = draw(control_messages())
    frames = [bytes(f) for f in control.encode(message)]
    how = draw(st.sampled_from(["as is", "mutated", "cut", "frames", "raw"]))
    if how == "mutated":
        frames[0] = _dumps(draw(mutated(st.just(json.loads(frames[0])))))
    elif how == "cut":
        frames[0] = draw(cut(frames[0]))
    elif how == "frames":  # frames dropped, added, repeated
        frames = draw(
            st.lists(st.sampled_from(frames + [b"", b"\x00" * 7]), min_size=0, max_size=4)
        )
    elif how == "raw":
        frames = draw(st.lists(st.binary(max_size=64), min_size=0, max_size=3))
    return frames


def _valid_message(message: object) -> None:
    """An independent check of a decoded message: every field of its declared type."""
    assert type(message) in typing.get_args(control.Message)

    def check(value: typing.Any, kind: typing.Any) -> None:
        origin, args = typing.get_origin(kind), typing.get_args(kind)
        if origin is typing.Union:
            assert any(_fits(value, a) for a in args), (value, kind)
            for a in args:
                if _fits(value, a) and a is not type(None):
                    check(value, a)
                    break
        elif origin is list:
            assert isinstance(value, list)
            for v in value:
                check(v, args[0])
        elif dataclasses.is_dataclass(kind):
            assert type(value) is kind
            for name, hint in typing.get_type_hints(kind).items():
                check(getattr(value, name), hint)
        else:
            assert _fits(value, kind), (value, kind)

    check(message, type(message))


def _fits(value: typing.Any, kind: typing.Any) -> bool:
    if kind is type(None):
        return value is None
    if kind is int:
        return type(value) is int and -(2**63) <= value < 2**63
    if kind is float:
        return type(value) is float and math.isfinite(value)
    if kind is bool or kind is str:
        return type(value) is kind
    if kind is np.ndarray:
        return isinstance(value, np.ndarray) and value.dtype == np.uint8
    origin = typing.get_origin(kind)
    if origin is dict:
        return isinstance(value, dict) and sorted(value) == [
            "count",
            "index",
            "max",
            "min",
            "total",
        ]
    return (
        origin is list
        and isinstance(value, list)
        or dataclasses.is_dataclass(kind)
        and type(value) is kind
    )


def check_control(frames: list[bytes]) -> None:
    with bounded("control", sum(len(f) for f in frames)):
        try:
            message = control.decode(frames)
        except ZmqloadError as exc:
            refused(exc, RunError, "control message: ")
            return
    _valid_message(message)
    again = control.decode([bytes(f) for f in control.encode(message)])
    assert control.encode(again)[0] == control.encode(message)[0]


BLOB = {"$blob": 0, "dtype": "|u1"}


@fuzz(short=400)
@given(frames=control_frames())
@example(frames=[])
@example(frames=[b""])
@example(frames=[b"\xff\xfe"])
@example(frames=[b"\x00"])
@example(frames=[b'{"$type":"Start"'])  # truncated
@example(frames=[b'{"$type":"Start","t0_ns":NaN}'])
@example(frames=[b'{"$type":"Start","t0_ns":Infinity}'])
@example(frames=[b'{"$type":"Start","t0_ns":1e999}'])
@example(frames=[b'{"$type":"Start","t0_ns":' + b"9" * 5000 + b"}"])  # beyond int() of str's limit
@example(frames=[b'{"$type":"Start","t0_ns":' + b"9" * 40 + b"}"])  # beyond int64
@example(frames=[b'{"$type":"Start","t0_ns":"1"}'])  # wrong types
@example(frames=[b'{"$type":"Stop","interrupted":1}'])
@example(frames=[b'{"$type":"Progress","messages":true}'])
@example(frames=[b'{"$type":["Start"]}'])  # unhashable type name
@example(frames=[b'{"$type":"SendCounters"}'])  # a part, not a message
@example(frames=[b'{"$type":"Start","t0_ns":1,"extra":2}'])
@example(frames=[b'{"$type":"X"}'])
@example(frames=[DEEP[0]])
@example(frames=[DEEP[1]])
@example(
    frames=[
        b'{"$type":"ProducerFinal","counters":{"$type":"SendCounters"},"sent_ok_map":'
        b'{"$blob":1,"dtype":"|u1"}}',
        b"\xff",
    ]
)  # a frame that is not there
@example(
    frames=[
        b'{"$type":"ProducerFinal","counters":{"$type":"SendCounters"},"sent_ok_map":'
        b'{"$blob":0,"dtype":"O"}}',
        b"\xff" * 8,
    ]
)  # an object dtype
@example(
    frames=[
        b'{"$type":"ProducerFinal","counters":{"$type":"SendCounters"},"sent_ok_map":'
        b'{"$blob":0,"dtype":"(100000,100000)u1"}}',
        b"\xff",
    ]
)
@example(
    frames=[
        b'{"$type":"ProducerFinal","counters":{"$type":"SendCounters"},"sent_ok_map":'
        b'{"$blob":0,"dtype":"<i8"}}',
        b"\xff" * 3,
    ]
)  # not a whole item
@example(
    frames=[
        b'{"$type":"ConsumerFinal","received":0,"warmups":0,"foreign":0,"errors":0,"t_first_recv_ns":0,'
        b'"t_last_recv_ns":0,"t_drain_ns":0,"latency_intended":{"$items":[[[1],2]]},"latency_sent":{},'
        b'"streams":[]}'
    ]
)
@example(
    frames=[
        json.dumps(
            {
                "$type": "ConsumerFinal",
                "received": 0,
                "warmups": 0,
                "foreign": 0,
                "errors": 0,
                "t_first_recv_ns": 0,
                "t_last_recv_ns": 0,
                "t_drain_ns": 0,
                "latency_intended": {"index": [0], "count": [1], "min": 0, "max": 0, "total": 0},
                "latency_sent": {"index": [0], "count": [1], "min": 0, "max": 0, "total": 0},
                "streams": [
                    {
                        "$type": "StreamSeen",
                        "stream": 0,
                        "unique": 0,
                        "duplicates": 0,
                        "reordered": 0,
                        "seen_map": BLOB,
                        "drained_map": BLOB,
                    }
                ]
                * 3000,
            }
        ).encode(),
        b"\xff" * (1 << 20),
    ]
)  # one 1 MiB frame referenced 6000 times: 6 GiB of arrays before the fix
def test_control_messages(frames):
    """control.decode: whatever the frames, a message of the declared types or RunError in one line."""
    check_control(frames)


@fuzz(short=100)
@given(
    routing_id=st.one_of(
        st.binary(max_size=12),
        st.sampled_from([b"p0", b"c12", b"x0", b"p", b"q1"]),
        st.text(alphabet="pcx0123456789\u0663\u00b2", max_size=6).map(str.encode),
    )
)
@example(routing_id=b"\x00k\x8bEg")  # libzmq's own routing id of a peer that set none
@example(routing_id="p\u00b2".encode())  # a superscript two: str.isdigit() but not int()
@example(routing_id="p\u0663".encode())  # an Arabic-Indic three: int() reads it, but it is not "p3"
@example(routing_id=b"p" + b"9" * 5000)
@example(routing_id=b"c00")  # found: parsed as c0 before the fix (two ids, one worker)
def test_control_sender(routing_id):
    """The routing id a message came with: a worker's name ("p0") or RunError in one line."""
    with bounded("sender", len(routing_id)):
        try:
            worker = control.sender(routing_id)
        except ZmqloadError as exc:
            refused(exc, RunError, "control message: ")
            return
    assert str(worker).encode() == routing_id


# -- the worker spec -------------------------------------------------------------------------
def _keys_dict() -> dict:
    import zmq

    (sp, ss), (cp, cs) = zmq.curve_keypair(), zmq.curve_keypair()
    return {
        "server_public": sp.decode(),
        "server_secret": ss.decode(),
        "client_public": cp.decode(),
        "client_secret": cs.decode(),
    }


SPEC = json.loads(
    WorkerSpec(
        control.WorkerId.parse("c1"),
        Workload(pattern="pub-sub", rate=1000, count=10, topics=2),
        "ipc:///tmp/x/control",
        "/tmp/run",
        ["tcp://127.0.0.1:5555"],
        1234,
    ).to_json()
)
SPEC_CURVE = {
    **SPEC,
    "curve": _keys_dict(),
    "control_curve": {**_keys_dict(), "server_secret": None},
}


def check_spec(data: bytes) -> None:
    with bounded("spec", len(data)):
        try:
            spec = WorkerSpec.from_json(data)
        except ZmqloadError as exc:
            refused(exc, RecordError, "worker spec: ")
            return
    assert WorkerSpec.from_json(spec.to_json()) == spec
    Workload(**{k: v for k, v in spec.workload.to_dict().items()})  # a workload as checked as any
    for keys in (spec.curve, spec.control_curve):
        if keys is not None:
            for key in (
                keys.server_public,
                keys.server_secret,
                keys.client_public,
                keys.client_secret,
            ):
                assert key is None or len(z85.decode(key)) == 32


@fuzz(short=300)
@given(data=bytes_like(st.sampled_from([SPEC, SPEC_CURVE])))
@example(data=b"")
@example(data=b"\xff")
@example(data=b"[]")
@example(data=b"{}")
@example(
    data=json.dumps({**SPEC, "workload": {"rate": "1e999999"}}).encode()
)  # 25 s of int() before the fix
@example(
    data=json.dumps({**SPEC, "workload": {"rate": "1e1000000"}}).encode()
)  # decimal.Overflow before the fix
@example(data=json.dumps({**SPEC, "workload": {"label": [1]}}).encode())
@example(data=json.dumps({**SPEC, "workload": {"1": 1}}).encode())
@example(data=json.dumps({**SPEC, "worker": "p\u00b2"}).encode())
@example(data=json.dumps({**SPEC, "bind": "tcp://x:1"}).encode())
@example(data=json.dumps({**SPEC, "controller_pid": "12"}).encode())
@example(
    data=json.dumps({**SPEC, "curve": {**_keys_dict(), "client_secret": "#" * 40}}).encode()
)  # not Z85 that decodes
@example(data=json.dumps({**SPEC, "curve": {**_keys_dict(), "client_secret": 7}}).encode())
@example(data=DEEP[0])
@example(
    data=json.dumps({**SPEC, "workload": {"\r": None}}).encode()
)  # found: the unknown option's name,
def test_worker_spec(data):  # unquoted, broke the line
    """WorkerSpec.from_json (a worker's standard input): a spec or RecordError in one line."""
    check_spec(data)


def test_cli_worker_spec_is_one_line_and_exit_2():
    """`python -m zmqload.runner.entry` with a spec it cannot read: one line on stderr, exit 2."""
    for data in (b"\xff{", json.dumps({**SPEC, "workload": {"rate": "fast"}}).encode()):
        done = subprocess.run(
            [sys.executable, "-m", "zmqload.runner.entry"],
            input=data,
            capture_output=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": ROOT},
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.decode().count("\n") == 1 and b"Traceback" not in done.stderr, (
            done.stderr
        )
        assert done.stderr.startswith(b"zmqload worker: error: worker spec: ")


# -- records: run.json, capacity-search.json, sweep-<id>.json ------------------------------------------
def _record_doc(kind: type) -> dict:
    """A record with its nested parts filled in, as plain JSON (checked by decoding it at import)."""
    plain = msgspec.to_builtins(kind())
    if kind is RunRecord:
        plain.update(
            streams=[
                {
                    "stream": 0,
                    "missing_ranges": {"all": [[1, 2]]},
                    "fates_by_consumer": {"0": {"delivered": 1}},
                }
            ],
            counters={"sent": 5, "bytes_sent": 320},
            summary={"elapsed_s": 1.5, "sizes": {"spec": "64"}},
            drain={"mode": "fast", "ended": "idle"},
            producers=[{"worker": 0, "sent": 5}],
            placement={"master": "local[2]", "workers": [{"worker": "p0", "clock_offset_ns": -5}]},
        )
    if kind is SearchRecord:
        plain["searches"] = [
            {
                "values": {"rate": 5},
                "bracket": [1, None],
                "probes": [
                    {
                        "rate": 10,
                        "passed": False,
                        "failed_slo": "max-loss",
                        "breaches": [{"slo": "max-loss", "measured": 0.5}],
                    }
                ],
            }
        ]
    if kind is SweepRecord:
        plain["points"] = [
            {
                "index": 0,
                "values": {"rate": 10},
                "status": "complete",
                "summary": {"sent": 1, "latency_intended_p99_us": 1.5},
            }
        ]
        plain["axes"] = {"rate": [10, "10k", None, True, 1.5]}
    codec.decode(json.dumps(plain).encode(), kind, "seed")
    return plain


RECORDS = {kind: _record_doc(kind) for kind in (RunRecord, SearchRecord, SweepRecord)}


def check_record(data: bytes, kind: type) -> None:
    with bounded(kind.__name__, len(data)):
        try:
            record = codec.decode(data, kind, "x.json")
        except ZmqloadError as exc:
            refused(exc, RecordError, "x.json: ")
            return
    assert type(record) is kind
    assert codec.decode(codec.encode(record), kind, "again") == record


RECORD_SEEDS = [
    b"",
    b"\x00",
    b"\xff",
    b"[]",
    b"null",
    b'{"schema_version":',
    b'{"schema_version":NaN}',
    b'{"schema_version":1' + b"0" * 5000 + b"}",
    b'{"schema_version":1e999}',
    b'{"schema_version":1.0}',
    b'{"schema_version":true}',
    b'{"schema_version":1,"schema_version":2}',
    b'{"schema_version":1,"run_id":"\xff"}',
    b'{"schema_version":1,"out":"\xed\xa0\x80"}',
    b'{"schema_version":1,"a":' + DEEP[0] + b"}",
    b'{"schema_version":' + DEEP[1] + b"}",
]


def _workload_seeds(where: typing.Callable[[dict], dict]) -> list[bytes]:
    return [
        _dumps(where(w))
        for w in (
            {"rate": "1e999999"},
            {"rate": "1e1000000"},
            {"size": "@/dev/zero"},
            {"label": [1]},
            {"pattern": "pub-sub", "topics": 3, "subscribe": "t9"},
            {"duration": 1e308 * 10},
        )
    ]


def _record_target(kind: type, short: int, name: str, seeds: list[bytes]):
    def target(data):
        check_record(data, kind)

    target.__name__ = name
    target.__doc__ = (
        f"{kind.__name__}'s file: the record, or RecordError in one line naming the file."
    )
    target = given(
        data=bytes_like(
            st.just(RECORDS[kind]).map(lambda d: {**d, "schema_version": SCHEMA_VERSION})
        )
    )(target)
    for seed in reversed(RECORD_SEEDS + seeds):
        target = example(data=seed)(target)
    return fuzz(short)(target)


test_run_record = _record_target(
    RunRecord,
    250,
    "test_run_record",
    _workload_seeds(lambda w: {"schema_version": SCHEMA_VERSION, "workload": w}),
)
test_search_record = _record_target(
    SearchRecord,
    250,
    "test_search_record",
    _workload_seeds(lambda w: {"schema_version": SCHEMA_VERSION, "searches": [{"workload": w}]}),
)
test_sweep_record = _record_target(SweepRecord, 200, "test_sweep_record", [])


def test_cli_run_record_is_one_line_and_exit_2(tmp_path):
    """`zmqload repair RUN_DIR` reading a run.json that is not one: one line, exit 2."""
    for data in (
        b"\xff",
        b'{"schema_version":1,"run_id":"\xff"}',
        b'{"schema_version":1,"a":' + DEEP[0] + b"}",
    ):
        (tmp_path / "run.json").write_bytes(data)
        status, err = _cli("repair", str(tmp_path))
        assert status == 2 and err.startswith("zmqload repair: error: "), err


# -- --size @FILE and --payload FILE ---------------------------------------------------------------
def _reference_sizes(data: bytes) -> list[int] | None:
    """What a file of sizes holds, by the documented rule (one size per line, blank lines and # comments
    skipped), or None when it is not such a file."""
    out = []
    for line in data.split(b"\n"):
        text = line.split(b"#", 1)[0].strip()
        if not text:
            continue
        if not re.fullmatch(rb"[0-9]{1,20}", text) or not 16 <= int(text) <= sizes.MAX_SIZE:
            return None
        out.append(int(text))
    return (
        out if 0 < len(out) <= sizes.MAX_ENTRIES and len(data) <= sizes.MAX_ENTRIES * 12 else None
    )


size_lines = st.one_of(
    st.integers(0, 2**40).map(str),
    st.sampled_from(
        [
            "16",
            "64",
            "268435456",
            "268435457",
            "15",
            "-16",
            "+16",
            " 64 ",
            "64 # a comment",
            "# only",
            "",
            "\r",
            "1_000",
            "1e3",
            "0x10",
            "\u00b2",
            "\u0663\u0663",
            "9" * 5000,
            "\x00",
            "64\x00",
            "\x0b64",
            "64\x0c",
        ]
    ),
    st.text(max_size=8),
)
size_files = st.one_of(
    st.lists(size_lines, max_size=20).map(lambda lines: "\n".join(lines).encode()),
    st.binary(max_size=100),
)


def check_size_file(directory: str, data: bytes) -> None:
    path = _file(directory, "sizes.txt", data)
    with bounded("size_file", len(data)):
        try:
            table = read_sizes("@" + path, None)
        except ZmqloadError as exc:
            refused(exc, ConfigError, "--size: ")
            assert _reference_sizes(data) is None, data[:100]
            return
    assert table.sizes.dtype == np.int32 and table.sizes.tolist() == _reference_sizes(data)


@fuzz(short=300)
@given(data=size_files)
@example(data=b"\xb2\n")  # a superscript two, not UTF-8 alone
@example(data="\u00b2".encode())  # str.isdigit(), but int() refuses it
@example(data="\u0663".encode())  # Arabic-Indic three: int() reads it, the documented rule does not
@example(data=b"9" * 5000)  # beyond int()'s digits
@example(data=b"\x00")
@example(data=b"64\r\n128\r\n")
@example(data=b"64\x0b128")  # a vertical tab: a line break for str.splitlines, not for the rule
@example(data=b"")
@example(data=b"\n\n\n")
def test_size_file(scratch, data):
    """`--size @FILE`: the table the documented rule reads from FILE, or ConfigError (--size) in one line."""
    check_size_file(scratch, data)


def _big_file(path: str, lines: int, line: bytes, seconds: float = 5.0) -> int:
    """A file of `lines` copies of `line`, written a block at a time (stops after `seconds`)."""
    block = line * 100_000
    start, written = time.monotonic(), 0
    with open(path, "wb") as f:
        while written < lines and time.monotonic() - start < seconds:
            f.write(block)
            written += 100_000
    return os.path.getsize(path)


@pytest.mark.parametrize("line", [b"64\n", b"\n", b"#\n"])
def test_size_file_of_ten_million_lines(scratch, line):
    """10^7 lines (sizes, blanks or comments): refused, within seconds and twice the file's bytes
    (above 12 MB: refused by its size, unread)."""
    path = os.path.join(scratch, "ten-million.txt")
    size = _big_file(path, 10**7, line)
    with bounded("size_file", 0, limit=2 * min(size, sizes.MAX_ENTRIES * 12) + MEMORY_SLACK):
        with pytest.raises(ConfigError) as exc:
            read_sizes("@" + path, None)
    refused(exc.value, ConfigError, "--size: ")


def test_size_file_at_its_limits(scratch):
    """Just within the byte limit: 12 MB of comment lines (skipped by the regex engine: before the fix,
    a Python loop of 6M lines and a str and a list of every line, ~120 MB), and a million and one sizes
    (refused as soon as counted; before the fix every size a Python int in a list first)."""
    blank = _file(scratch, "blank.txt", b"#\n" * (sizes.MAX_ENTRIES * 6))
    with bounded(
        "size_file",
        sizes.MAX_ENTRIES * 12,
        limit=sizes.MAX_ENTRIES * 12 + 4 * sizes.MAX_ENTRIES + MEMORY_SLACK,
    ):
        with pytest.raises(ConfigError, match="holds no size"):
            read_sizes("@" + blank, None)
    many = _file(scratch, "many.txt", b"16\n" * (sizes.MAX_ENTRIES + 1))
    with bounded("size_file", 0, trace=False):  # a million sizes read: 0.6 s, 6 s under tracemalloc
        with pytest.raises(ConfigError, match="more than 1,000,000 sizes"):
            read_sizes("@" + many, None)


def check_payload(directory: str, data: bytes) -> None:
    path = _file(directory, "payload.txt", data)
    with bounded(
        "payload", len(data) * 2
    ):  # by design: each record gets its 16 bytes of header room
        try:
            table = read_sizes(64, path)
        except ZmqloadError as exc:
            refused(exc, ConfigError, "--payload: ")
            return
    records = data.split(b"\n")
    if records[-1] == b"":
        records.pop()
    assert table.sizes.tolist() == [16 + len(r) for r in records]
    assert table.body == b"".join(bytes(16) + r for r in records)


@fuzz(short=200)
@given(
    data=st.one_of(
        st.binary(max_size=200), st.lists(st.binary(max_size=10), max_size=10).map(b"\n".join)
    )
)
@example(data=b"")
@example(data=b"\n")
@example(data=b"\n\n")
@example(data=b"\xff\x00\r\n")
def test_payload_file(scratch, data):
    """`--payload FILE`: one record a line behind the header, or ConfigError (--payload) in one line."""
    check_payload(scratch, data)


def test_payload_file_of_64_mib_of_records(scratch):
    """Records counted before the split: 64 MiB of one-byte records made a list of 32M records (256 MB of
    pointers) before it was refused; now the file's bytes and no more."""
    path = _file(scratch, "records.txt", b"x\n" * (sizes.MAX_PAYLOAD_BYTES // 2))
    with bounded("payload", 0, limit=2 * sizes.MAX_PAYLOAD_BYTES + MEMORY_SLACK):
        with pytest.raises(ConfigError, match="33,554,432 records"):
            read_sizes(64, path)


def test_cli_size_and_payload_files_are_one_line_and_exit_2(scratch):
    for args in (
        ["--size", "@" + _file(scratch, "s.txt", "\u00b2\n".encode())],
        ["--size", "@" + _file(scratch, "s.txt", b"9" * 5000)],
        ["--payload", _file(scratch, "p.txt", b"\n" * (sizes.MAX_ENTRIES + 1))],
    ):
        status, err = _cli("sweep", "--dry-run", "--out", scratch, *args)
        assert status == 2 and err.startswith("zmqload sweep: error: --"), err
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "zmqload",
            "run",
            "--size",
            "@" + _file(scratch, "s.txt", b"9" * 5000),
            "--out",
            scratch,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert (
        done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    ), done.stderr


# -- CURVE key files --------------------------------------------------------------------------
z85_text = st.text(alphabet=curve.Z85_CHARS, min_size=38, max_size=42)
key_lines = st.one_of(
    z85_text,
    z85_text.map(lambda k: f'    public-key = "{k}"'),
    z85_text.map(lambda k: f'    secret-key = "{k}"'),
    st.sampled_from(
        [
            "#   ZeroMQ CURVE Public Certificate",
            "metadata",
            "curve",
            "",
            "#" * 40,
            "public-key = ''",
            'public-key = "',
            "\x00",
            "\t",
        ]
    ),
    st.text(max_size=45),
)
key_files = st.one_of(
    st.lists(key_lines, max_size=6).map(lambda lines: "\n".join(lines).encode("utf-8", "replace")),
    st.binary(max_size=100),
)


def check_key_file(directory: str, data: bytes, secret: bool) -> None:
    path = _file(directory, "server.key", data)
    with bounded("key_file", len(data)):
        try:
            keys = (
                preflight.read_server_pair(path, "--curve-server-cert")
                if secret
                else [preflight.read_public_key(path, "--curve-server-key")]
            )
        except ZmqloadError as exc:
            refused(exc, ConfigError, "--curve-server-")
            return
    for key in keys:
        assert len(key) == 40 and len(z85.decode(key)) == 32  # what libzmq will take


@fuzz(short=300)
@given(data=key_files, secret=st.booleans())
@example(data=b"#" * 40, secret=False)  # a bare key of Z85 characters
@example(data=b"%" * 40, secret=False)  # Z85 characters whose value passes 2**32
@example(data=b'public-key = "' + b"#" * 40 + b'"\nsecret-key = "' + b"0" * 40 + b'"', secret=True)
@example(data=b"0" * 39, secret=False)
@example(data=b"0" * 41, secret=False)
@example(data=b"0" * 40 + b"\xff", secret=False)
@example(
    data=b"0" * 40 + b"\n" + b" " * (64 * 1024), secret=False
)  # a key, then the file goes on past 64 KiB
@example(data=b"\x00" * 40, secret=False)
def test_key_file(scratch, data, secret):
    """--curve-server-key / --curve-server-cert: keys libzmq decodes to 32 bytes, or ConfigError in one line."""
    check_key_file(scratch, data, secret)


def test_key_file_of_gigabytes(scratch):
    """A sparse file of 4 GiB: refused after reading 64 KiB at most."""
    path = os.path.join(scratch, "huge.key")
    with open(path, "wb") as f:
        f.write(b"0" * 40 + b"\n")
        f.truncate(4 << 30)
    with bounded("key_file", curve.MAX_KEY_FILE):
        with pytest.raises(ConfigError) as exc:
            preflight.read_public_key(path, "--curve-server-key")
    refused(exc.value, ConfigError, "--curve-server-key: ")


def test_cli_key_file_is_one_line_and_exit_2(scratch):
    path = _file(scratch, "bad.key", b"%" * 40)
    status, err = _cli(
        "sweep",
        "--dry-run",
        "--out",
        scratch,
        "--role",
        "producer",
        "--producers-connect",
        "tcp://127.0.0.1:5555",
        "--curve",
        "on",
        "--curve-server-key",
        path,
    )
    assert status == 2 and err.startswith("zmqload sweep: error: --curve-server-key: "), err


# -- sweep files (TOML) and the option values in them -----------------------------------------------
SWEEP_KEYS = sorted(set(OPTIONS) - set(sweeps.RESERVED)) + [
    "out",
    "name",
    "report",
    "send-mode",
    "unknown_key",
    "",
]
toml_scalars = st.one_of(
    st.integers(-(2**64), 2**64).map(str),
    st.sampled_from(
        [
            "nan",
            "inf",
            "-inf",
            "1e999",
            "0x10",
            "1_000",
            "true",
            "1979-05-27T07:32:00Z",
            "07:32:00",
            "[]",
            "{}",
            "[[1]]",
            "{a = 1}",
            '"10k"',
            '"max"',
            '"1e999999"',
            '"\\u0000"',
            '"@\\u0000"',
            '"pub-sub"',
            '"tcp"',
            '"@/dev/null"',
            "9" * 5000,
            '"9' + "9" * 80 + '"',
        ]
    ),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(max_size=10).map(json.dumps),
)
toml_values = st.one_of(
    toml_scalars, st.lists(toml_scalars, max_size=4).map(lambda v: "[" + ", ".join(v) + "]")
)
toml_keys = st.one_of(
    st.sampled_from(SWEEP_KEYS), st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-", max_size=12)
)


@st.composite
def toml_files(draw) -> bytes:
    lines = []
    for table in draw(
        st.lists(
            st.sampled_from(["[sweep]", "[axes]", "[[points]]", "[other]", "", "[sweep.x]"]),
            max_size=4,
        )
    ):
        lines.append(table)
        for _ in range(draw(st.integers(0, 4))):
            key = draw(toml_keys)
            lines.append(
                f"{json.dumps(key) if not re.fullmatch(r'[A-Za-z0-9_-]+', key) else key} = "
                f"{draw(toml_values)}"
            )
    text = "\n".join(lines).encode()
    return draw(st.one_of(st.just(text), cut(text)))


def check_toml(directory: str, data: bytes) -> None:
    path = _file(directory, "sweep.toml", data)
    with bounded("toml", len(data)):
        try:
            spec = sweeps.load_toml(path)
            spec.out = os.path.join(
                directory, "out"
            )  # not the file's: nothing is written here, but keep it ours
            planned = sweeps.plan(spec)
        except ZmqloadError as exc:
            refused(exc, ConfigError, "--")
            return
    assert 0 < len(planned.points) <= sweeps.MAX_POINTS
    for point in planned.points:
        assert isinstance(point.workload, Workload)


@fuzz(short=300)
@given(data=st.one_of(toml_files(), st.binary(max_size=100)))
@example(data=b"[sweep]\nrate = 10k")  # not TOML
@example(data=b"\xff = 1")  # not UTF-8
@example(data=b"[sweep]\nrate = " + b"9" * 5000)  # an int tomllib's int() refuses (ValueError)
@example(
    data=b"[sweep]\nrate = " + b"[" * 10_000 + b"]" * 10_000
)  # nesting beyond tomllib's recursion
@example(data=b'[sweep]\nrate = "1e999999"')  # 25 s of int() before the fix
@example(data=b'[sweep]\nrate = "1e1000000"')  # decimal.Overflow before the fix
@example(data=b"[sweep]\nrate = nan\n")
@example(data=b"[sweep]\nduration = inf\n")
@example(data=b"[sweep]\nunknown = 1\n")
@example(data=b"[nope]\n")
@example(data=b"[sweep]\nreport = 1\n")
@example(data=b'[sweep]\nsize = "@\\u0000"\n')  # a path with NUL: open() raises ValueError
@example(data=b'[sweep]\npayload = "\\u0000"\n')
@example(
    data=b'[sweep]\ncurve = "on"\ncurve_server_key = "\\u0000"\nrole = "producer"\n'
    b'producers_connect = "tcp://127.0.0.1:1"\n'
)
@example(data=b'[sweep]\nendpoint = "ipc:///tmp/\\u0000"\n')
@example(data=b'[sweep]\nout = "\\u0000"\n')
@example(
    data=b"[axes]\nrate = [" + b", ".join(str(i).encode() + b"k" for i in range(1, 200)) + b"]\n"
    b"size = [" + b", ".join(str(16 + i).encode() for i in range(200)) + b"]\n"
    b"sndhwm = [" + b", ".join(str(i).encode() for i in range(200)) + b"]\n"
)  # 8M points from 3 KB
@example(data=b"[[points]]\n" * 20_000)
@example(data=b"[sweep]\nrate = " + b"1" * 4000)  # an int whose repr is 4000 digits
def test_sweep_file(scratch, data, monkeypatch_module):
    """`sweep --config FILE`: every point a checked Workload, or ConfigError in one line."""
    check_toml(scratch, data)


@pytest.fixture(scope="module")
def monkeypatch_module():
    """--reset-at proves its privilege with `ss -K` on a loopback pair: not a parser's part."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweeps, "check_can_reset", lambda w: None)
        yield patch


text_values = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "1e999999",
            "1e1000000",
            "1E+999999999999",
            "1e-999999999",
            "0e999999999",
            "-0",
            "nan",
            "inf",
            "1_0",
            "10k",
            "1.5M",
            "max",
            "\u0663",
            "\u00b2",
            "9" * 5000,
            "1" * 70,
            " 10 ",
            "tcp://*:1",
            "ipc://\x00",
            "@x",
            "64:1024",
            "1:0",
            "t0,t1;t2",
            "1,2.5",
        ]
    ),
)


@fuzz(short=400)
@given(name=st.sampled_from(sorted(OPTIONS)), value=st.one_of(text_values, json_values))
@example(name="rate", value="1e999999")
@example(name="size", value="1e1000000")
@example(
    name="size", value=10**5000
)  # the error's repr of the value raised ValueError before the fix
@example(name="count", value="1e-999999999")  # rounded to 0 by the context before the fix
def test_option_values(name, value):
    """Every option's parser (the command line's, a sweep file's, the Python API's): a value of its
    kind within its range, or ConfigError naming its flag in one line."""
    option = OPTIONS[name]
    with bounded("option", len(str(value)) if not isinstance(value, int) else 64):
        try:
            got = option.convert(value)
        except ZmqloadError as exc:
            refused(exc, ConfigError, option.flag + ": ")
            return
    kinds = (int, float) if option.kind is float else (option.kind,)
    assert (
        got is None
        and option.nullable
        or isinstance(got, kinds)
        or option.text_form
        and isinstance(got, str)
    )


def test_cli_sweep_file_is_one_line_and_exit_2(scratch):
    for data in (
        b"\xff = 1",
        b"[sweep]\nrate = " + b"[" * 10_000,
        b'[sweep]\nrate = "1e999999"',
        b"[axes]\nrate = [1,2,3,4,5,6,7,8,9,10]\nsize = ["
        + b",".join(b"%d" % (16 + i) for i in range(2000))
        + b"]",
    ):
        status, err = _cli(
            "sweep", "--dry-run", "--config", _file(scratch, "s.toml", data), "--out", scratch
        )
        assert status == 2 and err.startswith("zmqload sweep: error: --"), err


def _cli(*args: str) -> tuple[int, str]:
    """`zmqload ARGS` in this process: its exit status and stderr, which must be one line, no traceback."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            status = cli.main(list(args))
        except SystemExit as exc:  # argparse's own refusals
            status = exc.code
    text = err.getvalue()
    assert text.count("\n") == 1 and "Traceback" not in text, text
    return int(status), text
