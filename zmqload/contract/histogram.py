"""The latency histogram's layout (log-linear: a bucket per value below 256 ns, each power of two
above split into SUB_BUCKETS) and percentile rule, shared by `run` and the report so both give the
same percentile of the same records, to the nanosecond (docs/REPORT.md)."""

from __future__ import annotations

SUB_BUCKETS = 128
SIGNIFICANT_BITS = 8  # bits kept of a value: 2 * SUB_BUCKETS exact values below
MAX_EXPONENT = 48  # values up to 2**55 ns (over a year)
MAX_SHIFT = MAX_EXPONENT - 1
N_BUCKETS = SUB_BUCKETS * (MAX_EXPONENT + 1)

PPM = 1_000_000  # percentiles are held as integer parts per million, so the rank is exact


def ppm(q_percent: float) -> int:
    """A percent (99.9) as integer parts per million (999000): 99.9 / 100 is not 0.999 in
    binary floating point, and a rank computed either way could differ by one."""
    return int(round(q_percent * 10_000))


def rank(q_ppm: int, n: int) -> int:
    """1-based rank of the percentile q (parts per million) among n values: ceil(q * n), at least 1."""
    return max(1, -(-q_ppm * n // PPM))


def bucket_value(index: int) -> int:
    """The value a bucket reports: its midpoint (exact below 256)."""
    shift = max(index // SUB_BUCKETS - 1, 0)
    if index < SUB_BUCKETS:
        return index
    low = (SUB_BUCKETS + index % SUB_BUCKETS) << shift
    return low + ((1 << shift) - 1) // 2
