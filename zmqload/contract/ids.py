"""Who a worker is: its role and its index among the workers of that role."""

from __future__ import annotations

from dataclasses import dataclass

from .states import Word


class Role(Word):
    PRODUCER = "producer"
    CONSUMER = "consumer"
    PROXY = "proxy"

    @property
    def letter(self) -> str:
        """One letter in names: routing ids on the control channel, Parquet part names."""
        return {"producer": "p", "consumer": "c", "proxy": "x"}[self.value]


_BY_LETTER = {role.letter: role for role in Role}


@dataclass(frozen=True, order=True)
class WorkerId:
    role: Role
    index: int

    def __str__(self) -> str:
        return f"{self.role.letter}{self.index}"

    @classmethod
    def parse(cls, name: str) -> "WorkerId":
        """Inverse of str(): "p0" -> WorkerId(Role.PRODUCER, 0)."""
        digits = name[1:]
        if (
            not 2 <= len(name) <= 8
            or name[0] not in _BY_LETTER
            or not (digits.isascii() and digits.isdigit())
            or digits != str(int(digits))
        ):  # the one spelling: "c0", never "c00" nor "c\u0660"
            raise ValueError(f"not a worker name: {name!r}")
        return cls(_BY_LETTER[name[0]], int(name[1:]))


def producers(n: int) -> list[WorkerId]:
    return [WorkerId(Role.PRODUCER, i) for i in range(n)]


def consumers(n: int) -> list[WorkerId]:
    return [WorkerId(Role.CONSUMER, i) for i in range(n)]


def incarnation(worker: WorkerId, generation: int) -> str:
    """The name a worker's process records under: its own for the first ("c0"), the generation
    after a restart ("c0.g1": --restart), so each process's parts, samples and spill stay apart."""
    return str(worker) if generation == 0 else f"{worker}.g{generation}"
