"""Records read by key as well as by attribute: RunResult's parts (its workers, streams, drain,
generator verdict, versions) were dicts, and users' tests index them (docs/PYTEST.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal


class Keyed:
    """A read-only mapping view of a msgspec Struct, keyed by its fields' names in the JSON."""

    __slots__ = ()

    def _names(self) -> dict[str, str]:
        """Each key (the field's name in the JSON) -> the attribute that holds it."""
        kind: Any = type(
            self
        )  # a msgspec Struct's class: its fields as named in Python and in JSON
        return dict(zip(kind.__struct_encode_fields__, kind.__struct_fields__))

    def __getitem__(self, key: str) -> Any:
        try:
            return getattr(self, self._names()[key])
        except KeyError:
            raise KeyError(key) from None

    def get(self, key: str, default: Any = None) -> Any:
        name = self._names().get(key)
        return default if name is None else getattr(self, name)

    def __contains__(self, key: object) -> bool:
        return key in self._names()

    def keys(self) -> list[str]:
        return list(self._names())

    def values(self) -> list[Any]:
        return [getattr(self, name) for name in self._names().values()]

    def items(self) -> list[tuple[str, Any]]:
        return [(key, getattr(self, name)) for key, name in self._names().items()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __bool__(self) -> Literal[True]:
        """A record is there whatever its fields hold (mypy: `record or {}` is the record)."""
        return True
