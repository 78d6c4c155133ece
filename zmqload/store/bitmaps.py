"""Packed seq maps (contract/bitmaps.py) in memory or in `<run>/_maps/` files, written in order and
read a piece of PIECE_BYTES at a time, so no process holds a whole map (docs/ARCHITECTURE.md,
"Memory")."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator

import numpy as np

from ..contract.bitmaps import MAPS_DIR, Bits

__all__ = [
    "Bits",
    "MAPS_DIR",
    "PIECE_BYTES",
    "BitsWriter",
    "load",
    "may_hold_bits",
    "nbytes",
    "piece",
    "pieces",
]

PIECE_BYTES = 1 << 21
"""The bytes of one map a reader holds at a time (16M seqs). A module constant so that a test can
lower it and make a small run take several pieces."""


def nbytes(bits: Bits) -> int:
    if isinstance(bits, str):
        try:
            return os.path.getsize(bits)
        except OSError:
            return 0
    return len(bits)


def piece(bits: Bits, lo: int, hi: int) -> np.ndarray:
    """Bytes [lo, hi) of a map, zero-padded past its end (a writable array of hi - lo bytes)."""
    out = np.zeros(max(hi - lo, 0), np.uint8)
    if isinstance(bits, str):
        if os.path.exists(bits) and hi > lo:
            with open(bits, "rb") as f:
                f.seek(lo)
                got = np.frombuffer(f.read(hi - lo), np.uint8)
            out[: len(got)] = got
    else:
        got = bits[lo:hi]
        out[: len(got)] = got
    return out


def may_hold_bits(bits: Bits, lo: int, hi: int) -> bool:
    """Whether bytes [lo, hi) of a map may hold a set bit: False only where a file has a hole there
    (a seen-map is written a page at a time, so a seq far past the rest leaves a hole between),
    so a reader can skip what was never written instead of reading zeros."""
    if not isinstance(bits, str) or hi <= lo:
        return hi > lo
    try:
        fd = os.open(bits, os.O_RDONLY)
    except OSError:
        return False
    try:
        return os.lseek(fd, lo, os.SEEK_DATA) < hi
    except OSError as exc:  # ENXIO: no data at or after lo; else no SEEK_DATA here: read it
        return exc.errno != errno.ENXIO
    finally:
        os.close(fd)


def pieces(total: int) -> Iterator[tuple[int, int]]:
    """[lo, hi) byte ranges covering `total` bytes, PIECE_BYTES at most each (read when called)."""
    step = max(PIECE_BYTES, 1)
    for lo in range(0, total, step):
        yield lo, min(lo + step, total)


def load(bits: Bits) -> np.ndarray:
    """A whole map in memory (for the fault path's rebuilds, not the run's own reconciliation)."""
    return piece(bits, 0, nbytes(bits))


class BitsWriter:
    """A map written a piece at a time, in order: into `path` when given (what it returns is the
    path), else in memory."""

    def __init__(self, path: str | None = None):
        self.path = path
        self.held: list[np.ndarray] = []
        self.written = 0
        self.any = False
        if path is not None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "wb").close()

    def append(self, packed: np.ndarray) -> None:
        self.any = self.any or bool(packed.any())
        self.written += len(packed)
        if self.path is None:
            self.held.append(packed)
            return
        with open(self.path, "ab") as f:
            np.ascontiguousarray(packed, np.uint8).tofile(f)

    def done(self, empty_when_clear: bool = False) -> Bits:
        """The map; with empty_when_clear, one without a set bit as an empty array (no file)."""
        if empty_when_clear and not self.any:
            if self.path is not None:
                os.remove(self.path)
            return np.zeros(0, np.uint8)
        if self.path is not None:
            return self.path
        return np.concatenate(self.held) if self.held else np.zeros(0, np.uint8)
