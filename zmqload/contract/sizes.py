"""Each message's size and body, a pure function of (stream, seq): entry `seq mod len(table)` of the
table of --size N, A:B, @FILE or --payload FILE (docs/RECORDS.md). So sends record no size and a
received size can be checked."""

from __future__ import annotations

import array
import os
import re
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .wire import HEADER_SIZE

MAX_SIZE = 256 * 1024 * 1024
"""The largest message (first frame) zmqload sends, in bytes."""
SEED = 27
"""The uniform table's generator seed (run.json summary.sizes.seed)."""
TABLE_ENTRIES = 65536
"""Draws of a uniform table: seq mod 65536 picks one."""
MAX_ENTRIES = 1_000_000
"""Lines of a file of sizes, records of a payload file."""
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024
"""A payload file's bytes: the producers hold every record (and its header room) in memory."""
SIZE_FORM = re.compile(r"\d+:\d+|@.+")
"""--size text that is not a number: a uniform range or a file of sizes."""
SIZE_ACCEPTED = (
    f"bytes from {HEADER_SIZE} (the wire header) to {MAX_SIZE}; A:B uniform over A..B inclusive "
    f"(e.g. 64:1024); or @FILE, one size per line (at most {MAX_ENTRIES:,})"
)
PAYLOAD_ACCEPTED = (
    f"a readable file of records, one per line (each sent behind the {HEADER_SIZE}-byte header), "
    f"at most {MAX_ENTRIES:,} records and {MAX_PAYLOAD_BYTES // 2**20} MiB; with --size at its "
    "default"
)


@dataclass(frozen=True)
class Sizes:
    """The run's table: `sizes[k]` bytes (first frame, header included) for seq = k mod len."""

    spec: str  # as the run was given it: "64", "64:1024", "@FILE", "payload FILE"
    sizes: np.ndarray  # int32, one entry per table row
    body: bytes | None = None  # --payload: each entry's header room and record, back to back

    @property
    def fixed(self) -> bool:
        return len(self.sizes) == 1 and self.body is None

    def of(self, seq: np.ndarray) -> np.ndarray:
        """The size (int32) of each seq's message: the rule."""
        if len(self.sizes) == 1:
            return np.full(len(seq), self.sizes[0], np.int32)
        return self.sizes[np.asarray(seq, np.int64) % len(self.sizes)]

    @property
    def mean(self) -> float:
        """Over the table's entries: a message's mean first-frame bytes over a whole number of tables."""
        return float(self.sizes.mean())

    def facts(self) -> dict[str, object]:
        """What run.json keeps of the table (Summary.sizes)."""
        kind = (
            "payload"
            if self.body is not None
            else ("fixed" if self.fixed else "uniform" if ":" in self.spec else "file")
        )
        return {
            "spec": self.spec,
            "kind": kind,
            "entries": len(self.sizes),
            "min": int(self.sizes.min()),
            "max": int(self.sizes.max()),
            "mean": self.mean,
            "seed": SEED if kind == "uniform" else None,
        }


def message_bytes(first_frames: int, parts: int) -> int:
    """Bytes of messages whose first frames hold `first_frames` bytes: every frame has the first's size."""
    return first_frames * parts


def spec_of(size: int | str, payload: str | None) -> str:
    """How a run's sizes are named (the report's grouping key, run.json summary.sizes.spec):
    "64", "64:1024", "@sizes.txt" or "payload records.txt"."""
    return f"payload {os.path.basename(payload)}" if payload is not None else str(size)


def table_of(size: int | str) -> Sizes:
    """The table of --size N or A:B (checked: ConfigError naming the option otherwise); the tables
    read from files (@FILE, --payload) are store/size_files.py's."""
    if isinstance(size, int):
        return Sizes(str(size), np.array([size], np.int32))
    low, high = (int(v) for v in size.split(":"))
    for value in (low, high):
        _check_size(size, value, "")
    if low > high:
        raise refuse("--size", size, ": the minimum is above the maximum", SIZE_ACCEPTED)
    draws = np.random.Generator(np.random.PCG64(SEED)).integers(low, high + 1, TABLE_ENTRIES)
    return Sizes(size, draws.astype(np.int32))


def reads_file(size: int | str, payload: str | None) -> bool:
    """Whether the run's table comes from a file (--size @FILE, --payload FILE)."""
    return payload is not None or (isinstance(size, str) and size.startswith("@"))


def refuse(flag: str, value: object, why: str, accepted: str) -> ConfigError:
    return ConfigError(flag, f"got {value!r}{why}; accepted: {accepted}")


def _check_size(spec: str, value: int, where: str) -> None:
    if not HEADER_SIZE <= value <= MAX_SIZE:
        raise refuse(
            "--size",
            spec,
            f": {value}{where} is not from {HEADER_SIZE} to {MAX_SIZE}",
            SIZE_ACCEPTED,
        )


_SIZE_LINE = re.compile(
    rb"^[ \t\r\x0b\x0c]*(?:([0-9]{1,10})[ \t\r\x0b\x0c]*(?:#[^\n]*)?$|([^#\s][^\n]*))", re.MULTILINE
)
"""A line that holds something: group 1 its size (ASCII digits, few enough for any size, then blanks or a
comment), else group 2 its text. Blank and comment lines do not match: the regex engine skips them
itself, so a file of millions of them costs no Python loop."""


SIZE_FILE_MAX_BYTES = MAX_ENTRIES * 12
"""The most bytes a file of sizes is read for (a size and its line's blanks)."""


def size_file_table(spec: str, path: str, data: bytes) -> Sizes:
    """The table of --size @FILE from the file's bytes (read by store/size_files.py)."""
    sizes = array.array("i")  # 4 bytes a size: no Python int per line
    for match in _SIZE_LINE.finditer(data):
        digits = match[1]
        if digits is None:
            text = match[2].split(b"#", 1)[0].rstrip()
            shown = text[:40].decode(errors="replace") + ("..." if len(text) > 40 else "")
            raise refuse(
                "--size",
                spec,
                f": line {_line(data, match)} of {path} is {shown!r}, not a whole number of bytes",
                SIZE_ACCEPTED,
            )
        value = int(digits)
        if not HEADER_SIZE <= value <= MAX_SIZE:
            _check_size(spec, value, f" (line {_line(data, match)} of {path})")
        if len(sizes) == MAX_ENTRIES:
            raise refuse(
                "--size", spec, f": {path} holds more than {MAX_ENTRIES:,} sizes", SIZE_ACCEPTED
            )
        sizes.append(value)
    if not sizes:
        raise refuse("--size", spec, f": {path} holds no size", SIZE_ACCEPTED)
    return Sizes(spec, np.frombuffer(sizes, np.int32).copy())


def _line(data: bytes, match: re.Match[bytes]) -> int:
    return data.count(b"\n", 0, match.start()) + 1


def payload_table(path: str, data: bytes) -> Sizes:
    """The table of --payload FILE from the file's bytes (read by store/size_files.py)."""
    records = data.count(b"\n") + (
        not data.endswith(b"\n")
    )  # the file's last newline ends its last record
    if records > MAX_ENTRIES:  # counted before the split: no list of millions of records first
        raise refuse("--payload", path, f": {records:,} records", PAYLOAD_ACCEPTED)
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    room = bytes(HEADER_SIZE)
    return Sizes(
        spec_of(0, path),
        np.array([HEADER_SIZE + len(r) for r in lines], np.int32),
        b"".join(room + r for r in lines),
    )
