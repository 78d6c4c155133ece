"""--size @FILE and --payload FILE read from disk, bounded, into the run's size table (the table
and its rule: contract/sizes.py). Read where a run starts (runner/preflight.py) and in each worker."""

from __future__ import annotations

import os
import stat
import typing

from ..contract.sizes import (
    MAX_PAYLOAD_BYTES,
    PAYLOAD_ACCEPTED,
    SIZE_ACCEPTED,
    SIZE_FILE_MAX_BYTES,
    Sizes,
    payload_table,
    refuse,
    size_file_table,
    table_of,
)


def sizes_of(size: int | str, payload: str | None) -> Sizes:
    """The table of --size and --payload, files read (ConfigError naming the option otherwise)."""
    if payload is not None:
        return payload_table(
            payload, _read("--payload", payload, payload, MAX_PAYLOAD_BYTES, PAYLOAD_ACCEPTED)
        )
    if isinstance(size, str) and size.startswith("@"):
        path = size[1:]
        return size_file_table(
            size, path, _read("--size", size, path, SIZE_FILE_MAX_BYTES, SIZE_ACCEPTED)
        )
    return table_of(size)


def _read(flag: str, spec: str, path: str, limit: int, accepted: str) -> bytes:
    """A file's bytes, refused in one line when missing, unreadable, empty or above `limit`."""
    try:
        f = open(path, "rb")
    except (OSError, ValueError) as e:  # ValueError: a path with a NUL character
        raise refuse(
            flag, spec, f": cannot read {path!r} ({getattr(e, 'strerror', None) or e})", accepted
        ) from None
    with f:
        held = os.fstat(f.fileno())
        if stat.S_ISREG(held.st_mode) and held.st_size > limit:  # refused unread
            raise refuse(flag, spec, f": {path} is above {limit:,} bytes", accepted)
        try:
            data = read_bounded(f, limit + 1)
        except OSError as e:  # a directory, a device that refuses to be read
            raise refuse(
                flag, spec, f": cannot read {path!r} ({e.strerror or e})", accepted
            ) from None
    if data.count(b"\n") == len(data):  # (no copy, as data.strip would make)
        raise refuse(flag, spec, f": {path} is empty", accepted)
    if len(data) > limit:
        raise refuse(flag, spec, f": {path} is above {limit:,} bytes", accepted)
    return data


def read_bounded(f: typing.BinaryIO, most: int, chunk: int = 1 << 20) -> bytes:
    """At most `most` bytes of `f`, in memory no larger than what it holds (`f.read(most)` allocates
    `most` bytes first, whatever the file's size): a regular file in one read of its size, anything
    else (a pipe, a device) a chunk at a time."""
    held = os.fstat(f.fileno())
    if stat.S_ISREG(held.st_mode):
        return f.read(min(most, held.st_size + 1))
    chunks, got = [], 0
    while got < most:
        block = f.read(min(chunk, most - got))
        if not block:
            break
        chunks.append(block)
        got += len(block)
    return b"".join(chunks)
