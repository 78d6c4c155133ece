"""The one codec of zmqload's records (run.json, capacity-search.json, a sweep's file): typed
with msgspec Structs, read strictly (a wrong type or an unknown field is an error naming the
file and the field's path), versioned, written atomically, and listed field by field for the
docs.

Why msgspec: its Structs are declared like dataclasses, it decodes JSON straight into the
types with a strict check (`$.counters.sent`: Expected `int`, got `str`), encodes str enums by
their word, and is several times faster than a dataclass round trip through `json` (a sweep's
report reads hundreds of records). Dataclasses of the option table (Workload, Slos, SearchPlan)
are fields as they are: msgspec decodes them through their own checks (`__post_init__`).
"""
from __future__ import annotations

import dataclasses
import enum
import inspect
import os
import re
import typing
from typing import Any, TypeVar

import msgspec

from ..errors import RecordError
from .records import SCHEMA_VERSION


class Record(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A part of a record: strict (no unknown fields), keyword-only."""


R = TypeVar("R", bound=msgspec.Struct)

_ENCODER = msgspec.json.Encoder()


def encode(record: msgspec.Struct) -> bytes:
    """A record as indented JSON (people read run.json)."""
    return msgspec.json.format(_ENCODER.encode(record), indent=2) + b"\n"


def write_atomic(path: str, record: msgspec.Struct) -> None:
    """Write a record through a temporary file renamed over `path`: a reader (or a run killed
    mid-write) sees the old record or the new one, never half of one."""
    data = encode(record)
    tmp = os.path.join(os.path.dirname(path) or ".", "." + os.path.basename(path) + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


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
        raise RecordError(f"{where}: unknown record schema version {shown} "
                          f"(this zmqload reads version {SCHEMA_VERSION})")
    try:
        return msgspec.json.decode(data, type=kind)
    except _UNREADABLE as exc:
        raise RecordError(f"{where}: not a valid {kind.__name__} ({_first_line(exc)})") from None


_UNREADABLE = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)
"""What decoding bytes that are not a record raises: malformed or mistyped JSON (msgspec), a string
that is not UTF-8, JSON nested deeper than msgspec recurses."""


def read(path: str, kind: type[R], unversioned: str = "") -> R:
    """A record file; RecordError (one line naming the file) when missing or not a record."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise RecordError(f"{path}: no such file") from None
    except OSError as exc:
        raise RecordError(f"{path}: unreadable ({exc.strerror or exc})") from None
    return decode(data, kind, path, unversioned)


def unversioned_message(what: str, again: str) -> str:
    """The error message for a `what` without schema_version (written before the typed records)."""
    return (f"a {what} of an older zmqload (no schema_version); accepted: one written by this zmqload "
            f"(record schema version {SCHEMA_VERSION}): {again}")


def convert(value: Any, kind: Any) -> Any:
    """A record part (or a list of them) from plain data (a RunResult's dicts, whose keys may
    be ints and numbers numpy's): checked as a decoded file is."""
    try:
        plain = msgspec.to_builtins(value, str_keys=True, enc_hook=_plain_number)
        return msgspec.convert(plain, kind, str_keys=True)
    except (msgspec.ValidationError, TypeError) as exc:
        raise RecordError(f"not a valid {getattr(kind, '__name__', kind)}: {_first_line(exc)}") from None


def _plain_number(value: Any) -> Any:
    if hasattr(value, "item"):      # a numpy scalar
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


# -- a record's fields, as the docs list them ------------------------------------------------
def field_table(kind: type[msgspec.Struct]) -> list[tuple[str, str, str]]:
    """(path, type, meaning) of every field of a record, nested parts flattened ("drain.mode",
    "producers[].worker", "streams[].fates_by_consumer{}.delivered"), the meaning being the
    docstring written under the field: the tables the docs show (a test holds each to its type)."""
    rows: list[tuple[str, str, str]] = []
    _walk(kind, "", rows, {})
    return rows


def markdown_table(kind: type[msgspec.Struct]) -> str:
    lines = ["| field | type | meaning |", "|---|---|---|"]
    lines += [f"| `{path}` | {kind_} | {meaning} |" for path, kind_, meaning in field_table(kind)]
    return "\n".join(lines) + "\n"


def _field_docs(kind: type, cache: dict[str, dict[tuple[str, str], str]]) -> dict[tuple[str, str], str]:
    """(class, field) -> the docstring written under the field, in the module that declares `kind`."""
    import ast
    path = inspect.getsourcefile(kind) or ""
    if path not in cache:
        with open(path) as f:
            tree = ast.parse(f.read())
        docs: dict[tuple[str, str], str] = {}
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for field, doc in zip(cls.body, cls.body[1:]):
                if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
                        and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
                        and isinstance(doc.value.value, str)):
                    docs[(cls.name, field.target.id)] = " ".join(doc.value.value.split())
        cache[path] = docs
    return cache[path]


def _walk(kind: type[msgspec.Struct], prefix: str, rows: list[tuple[str, str, str]],
          cache: dict[str, dict[tuple[str, str], str]]) -> None:
    for f in msgspec.structs.fields(kind):
        path = prefix + f.encode_name
        meaning = _field_docs(kind, cache).get((kind.__name__, f.name), "")
        if not meaning and f.type is not None:
            inner, _ = _part_of(f.type)
            meaning = " ".join((inner.__doc__ or "").split()) if inner is not None else ""
        rows.append((path, _type_name(f.type), meaning.replace("|", "\\|")))
        inner, suffix = _part_of(f.type)
        if inner is not None:
            _walk(inner, path + suffix + ".", rows, cache)


def _part_of(t: Any) -> tuple[Any, str]:
    """The record part a field holds (itself, in a list, in a dict or optional), if any."""
    args = [a for a in typing.get_args(t) if a is not type(None)]
    origin = typing.get_origin(t)
    if isinstance(t, type) and issubclass(t, msgspec.Struct):
        return t, ""
    if origin is list and args:
        inner, suffix = _part_of(args[0])
        return inner, "[]" + suffix
    if origin is dict and len(args) == 2:
        inner, suffix = _part_of(args[1])
        return inner, "{}" + suffix
    if origin is typing.Union and len(args) == 1:
        return _part_of(args[0])
    return None, ""


def _type_name(t: Any) -> str:
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Union:
        named = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"map of {_type_name(args[0])} to {_type_name(args[1])}"
    if isinstance(t, type) and issubclass(t, enum.Enum):
        return " \\| ".join(f"`{m.value}`" for m in t)
    if isinstance(t, type) and issubclass(t, msgspec.Struct):
        return "object"
    if isinstance(t, type) and dataclasses.is_dataclass(t):
        names = [f.name for f in dataclasses.fields(t)]
        return (f"object: `{'`, `'.join(names)}`" if len(names) <= 4
                else f"object: every field of `{t.__name__}`")
    return {"int": "integer", "float": "number", "bool": "boolean", "str": "string"}.get(
        getattr(t, "__name__", ""), str(t))


def doc_table_command(kind: type[msgspec.Struct], label: str, argv: list[str]) -> None:
    """`python -m zmqload.contract.<record>`: print `kind`'s field table, or with a path rewrite the
    table that file holds between `<!-- {label} fields: generated, do not edit -->` and
    `<!-- end of {label} fields -->`."""
    table = markdown_table(kind)
    if not argv:
        print(table, end="")
        return
    start, end = f"<!-- {label} fields: generated, do not edit -->\n", f"<!-- end of {label} fields -->"
    with open(argv[0]) as f:
        text = f.read()
    pattern = re.compile(re.escape(start) + "(.*?)" + re.escape(end), re.S)
    with open(argv[0], "w") as f:
        f.write(pattern.sub(lambda m: start + table + end, text))

