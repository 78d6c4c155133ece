"""Figures derived from a workload's settings, each rule stated once for every stage that
states it (the report's verdicts in zmqload.analysis, the capacity search's answer in
zmqload.report). Pure Python: imports nothing of zmqload.

The runner's own unit conversion of a setting lives on the Workload (contract.workload.Workload:
`consumer_delay_ns`), which the engine reads.
"""
from __future__ import annotations


def work_ceiling(consumer_delay_us: float) -> float:
    """Messages per second one consumer's simulated work allows: --consumer-delay-us is CPU
    time spent on every message, so a consumer doing nothing else handles at most
    1e6 / delay of them (its share of the CPU may allow fewer). ValueError without work."""
    if not consumer_delay_us > 0:
        raise ValueError(f"a work ceiling needs a consumer delay > 0 us, got {consumer_delay_us!r}")
    return 1e6 / consumer_delay_us
