"""The one codec of zmqload's records (run.json, capacity-search.json, a sweep's file): msgspec
Structs, decoded strictly (an error names the file and the field's path), versioned
(docs/ARCHITECTURE.md, "Records"). Files are store/record_files.py's; the docs' field tables
cli/records_doc.py's."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from ..errors import RecordError
from .records import SCHEMA_VERSION


class Record(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A part of a record: strict (no unknown fields), keyword-only."""


R = TypeVar("R", bound=msgspec.Struct)

_ENCODER = msgspec.json.Encoder()


def encode(record: msgspec.Struct) -> bytes:
    """A record as indented JSON (people read run.json). Its values pass through its type first:
    an int given to a float field (a backlog of 216 messages as a breach's measure) is written
    216.0, as it reads back, so a file re-encodes to the same bytes."""
    typed = msgspec.convert(msgspec.to_builtins(record), type(record))
    return msgspec.json.format(_ENCODER.encode(typed), indent=2) + b"\n"


def decode(data: bytes, kind: type[R], where: str, unversioned: str = "") -> R:
    """A record of `kind` from JSON bytes; RecordError naming `where` if the bytes are not one
    (not JSON, another schema version, a field of the wrong type or unknown). `unversioned`: what
    to say of a JSON object without schema_version (the file of an older zmqload, say)."""
    try:
        version = msgspec.json.decode(data, type=_Versioned).schema_version
    except _UNREADABLE as exc:
        raise RecordError(f"{where}: not a zmqload record ({_first_line(exc)})") from None
    if version is None:
        raise RecordError(f"{where}: {unversioned or 'not a zmqload record (no schema_version)'}")
    if version != SCHEMA_VERSION:
        shown = repr(version) if len(repr(version)) <= 40 else repr(version)[:37] + "..."
        raise RecordError(
            f"{where}: unknown record schema version {shown} "
            f"(this zmqload reads version {SCHEMA_VERSION})"
        )
    try:
        return msgspec.json.decode(data, type=kind)
    except _UNREADABLE as exc:
        raise RecordError(f"{where}: not a valid {kind.__name__} ({_first_line(exc)})") from None


_UNREADABLE = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)
"""What decoding bytes that are not a record raises: malformed or mistyped JSON (msgspec), a string
that is not UTF-8, JSON nested deeper than msgspec recurses."""


def unversioned_message(what: str, again: str) -> str:
    """The error message for a `what` without schema_version (written before the typed records)."""
    return (
        f"a {what} of an older zmqload (no schema_version); accepted: one written by this zmqload "
        f"(record schema version {SCHEMA_VERSION}): {again}"
    )


def convert(value: Any, kind: Any) -> Any:
    """A record part (or a list of them) from plain data (a RunResult's dicts, whose keys may
    be ints and numbers numpy's): checked as a decoded file is."""
    try:
        plain = msgspec.to_builtins(value, str_keys=True, enc_hook=_plain_number)
        return msgspec.convert(plain, kind, str_keys=True)
    except (msgspec.ValidationError, TypeError) as exc:
        raise RecordError(
            f"not a valid {getattr(kind, '__name__', kind)}: {_first_line(exc)}"
        ) from None


def _plain_number(value: Any) -> Any:
    if hasattr(value, "item"):  # a numpy scalar
        return value.item()
    raise TypeError(f"not record data: {type(value).__name__}")


def to_builtins(record: msgspec.Struct) -> Any:
    """A record as plain JSON-ready data (dicts, lists, words)."""
    return msgspec.to_builtins(record)


class _Versioned(msgspec.Struct):
    schema_version: Any = None


def _first_line(exc: BaseException) -> str:
    line = (str(exc).splitlines() or [exc.__class__.__name__])[0]
    return line if len(line) <= 300 else line[:297] + "..."
