"""Log-linear latency histogram, filled with numpy off the hot path, on contract/histogram.py's
layout and rule (within 0.8 % of the true value). Counts are int64 arrays: they ship to the
controller and merge by addition."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import numpy.typing as npt

from ..contract import histogram as rule
from ..contract.histogram import MAX_SHIFT, N_BUCKETS, SIGNIFICANT_BITS, SUB_BUCKETS

_Add = Callable[
    [npt.NDArray[np.int64], npt.NDArray[np.int64]], "tuple[int, int, int] | tuple[None, None, int]"
]


def _compiled_add() -> _Add | None:
    """The compiled one-pass version; the numpy one serves where the engine is absent."""
    try:
        from .._engine import histogram_add
    except ImportError:  # pragma: no cover
        return None
    return histogram_add


_histogram_add = _compiled_add()


def bucket_index(values: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Bucket of each non-negative int64 value (negative values count as 0)."""
    v = np.maximum(np.asarray(values, dtype=np.int64), 0)
    # bit_length(v) via frexp is exact for v < 2**53
    _, bit_length = np.frexp(v.astype(np.float64))
    shift = np.maximum(bit_length.astype(np.int64) - SIGNIFICANT_BITS, 0)
    shift = np.minimum(shift, MAX_SHIFT)
    top = v >> shift  # in [128, 256) when shift > 0
    index: npt.NDArray[np.int64] = np.where(
        shift == 0, v, (shift + 1) * SUB_BUCKETS + (top - SUB_BUCKETS)
    ).clip(0, N_BUCKETS - 1)
    return index


_VALUES = np.array([rule.bucket_value(i) for i in range(N_BUCKETS)], dtype=np.int64)


def bucket_value(index: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Midpoint of each bucket: the value reported for it (contract/histogram.py)."""
    value: npt.NDArray[np.int64] = _VALUES[np.asarray(index, dtype=np.int64)]
    return value


class Histogram:
    """Counts of values in log-linear buckets, with the exact min, max and sum."""

    def __init__(
        self,
        counts: np.ndarray | None = None,
        minimum: int | None = None,
        maximum: int | None = None,
        total: int = 0,
    ) -> None:
        self.counts = (
            np.zeros(N_BUCKETS, dtype=np.int64)
            if counts is None
            else np.asarray(counts, dtype=np.int64)
        )
        self.minimum = minimum
        self.maximum = maximum
        self.total = total

    def record(self, values: np.ndarray) -> None:
        if len(values) == 0:
            return
        if _histogram_add is not None:
            lo, hi, total = _histogram_add(
                np.ascontiguousarray(values, dtype=np.int64), self.counts
            )
            assert lo is not None and hi is not None  # None only for no values
            self._extend(lo, hi, total)
            return
        self.counts += np.bincount(bucket_index(values), minlength=N_BUCKETS)
        self._extend(int(values.min()), int(values.max()), int(values.sum(dtype=np.int64)))

    def _extend(self, lo: int, hi: int, total: int) -> None:
        self.minimum = lo if self.minimum is None else min(self.minimum, lo)
        self.maximum = hi if self.maximum is None else max(self.maximum, hi)
        self.total += total

    def merge(self, other: "Histogram") -> None:
        self.counts += other.counts
        for name, pick in (("minimum", min), ("maximum", max)):
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(
                self,
                name,
                theirs if mine is None else mine if theirs is None else pick(mine, theirs),
            )
        self.total += other.total

    @property
    def count(self) -> int:
        return int(self.counts.sum())

    def percentile(self, q: float) -> int | None:
        """Value at percentile q (0-100) by contract/histogram.py's rule (the report's);
        the exact max for q=100; None if empty."""
        n = self.count
        if n == 0:
            return None
        if q >= 100:
            return self.maximum
        index = int(np.searchsorted(np.cumsum(self.counts), rule.rank(rule.ppm(q), n)))
        assert self.maximum is not None  # set with the counts
        return min(int(_VALUES[index]), self.maximum)

    def mean(self) -> float | None:
        n = self.count
        return self.total / n if n else None

    def to_payload(self) -> dict[str, Any]:
        nonzero = np.flatnonzero(self.counts)
        return {
            "index": nonzero.tolist(),
            "count": self.counts[nonzero].tolist(),
            "min": self.minimum,
            "max": self.maximum,
            "total": self.total,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> "Histogram":
        counts = np.zeros(N_BUCKETS, dtype=np.int64)
        counts[np.asarray(payload["index"], dtype=np.int64)] = payload["count"]
        return cls(counts, payload["min"], payload["max"], payload["total"])
