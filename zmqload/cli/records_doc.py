"""The docs' tables of the records' fields (docs/RECORDS.md, CAPACITY.md, SWEEPS.md), generated from
the record types and their field docstrings, between the `<!-- {label} fields: ... -->` markers.

    python -m zmqload.cli.records_doc run_record docs/RECORDS.md       # what `make docs` runs
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import re
import sys
import typing
from typing import Any, Optional, Sequence

import msgspec

from ..contract.run_record import RUN_FILE, RunRecord
from ..contract.search_record import RESULT_FILE, SearchRecord
from ..contract.sweep_record import SweepRecord

RECORDS: dict[str, tuple[type[msgspec.Struct], str]] = {
    "run_record": (RunRecord, RUN_FILE),
    "search_record": (SearchRecord, RESULT_FILE),
    "sweep_record": (SweepRecord, "sweep-<id>.json"),
}
"""The records with a table in the docs: the name of the module declaring each (the command's
argument) -> its type and the label of its table."""


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


def _field_docs(
    kind: type, cache: dict[str, dict[tuple[str, str], str]]
) -> dict[tuple[str, str], str]:
    """(class, field) -> the docstring written under the field, in the module that declares `kind`."""
    path = inspect.getsourcefile(kind) or ""
    if path not in cache:
        with open(path) as f:
            tree = ast.parse(f.read())
        docs: dict[tuple[str, str], str] = {}
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for field, doc in zip(cls.body, cls.body[1:]):
                if (
                    isinstance(field, ast.AnnAssign)
                    and isinstance(field.target, ast.Name)
                    and isinstance(doc, ast.Expr)
                    and isinstance(doc.value, ast.Constant)
                    and isinstance(doc.value.value, str)
                ):
                    docs[(cls.name, field.target.id)] = " ".join(doc.value.value.split())
        cache[path] = docs
    return cache[path]


def _walk(
    kind: type[msgspec.Struct],
    prefix: str,
    rows: list[tuple[str, str, str]],
    cache: dict[str, dict[tuple[str, str], str]],
) -> None:
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
        return (
            f"object: `{'`, `'.join(names)}`"
            if len(names) <= 4
            else f"object: every field of `{t.__name__}`"
        )
    return {"int": "integer", "float": "number", "bool": "boolean", "str": "string"}.get(
        getattr(t, "__name__", ""), str(t)
    )


def rewrite(text: str, kind: type[msgspec.Struct], label: str) -> str:
    """`text` (a page) with the table of `kind` between its `label` markers made anew."""
    start, end = (
        f"<!-- {label} fields: generated, do not edit -->\n",
        f"<!-- end of {label} fields -->",
    )
    pattern = re.compile(re.escape(start) + "(.*?)" + re.escape(end), re.S)
    table = markdown_table(kind)
    return pattern.sub(lambda m: start + table + end, text)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """RECORD: print its field table; RECORD PATH: rewrite the table that file holds."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (1, 2) or args[0] not in RECORDS:
        print(
            f"usage: python -m zmqload.cli.records_doc {{{','.join(RECORDS)}}} [PATH]   (prints the record's "
            "field table, or rewrites the one PATH holds)",
            file=sys.stderr,
        )
        return 2
    kind, label = RECORDS[args[0]]
    if len(args) == 1:
        print(markdown_table(kind), end="")
        return 0
    with open(args[1]) as f:
        text = f.read()
    with open(args[1], "w") as f:
        f.write(rewrite(text, kind, label))
    return 0


if __name__ == "__main__":
    sys.exit(main())
