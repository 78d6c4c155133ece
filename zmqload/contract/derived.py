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


def throughput_span(
    consumer_delay_us: float,
    drain: str,
    first_send_ns: int,
    last_recv_ns: int,
    drain_began_ns: int,
    unique: int,
    delivered: int,
) -> tuple[int, float]:
    """(messages counted, seconds) of a run's or a stream's throughput: the distinct messages
    received from the first ok send to the last receive; with simulated work and the fast drain
    (which skips that work, so its speed says nothing of the consumers') only those delivered
    before the drain, until the drain began. Seconds 0.0: no span to divide by."""
    if (
        consumer_delay_us
        and drain == "fast"
        and drain_began_ns
        and first_send_ns
        and drain_began_ns > first_send_ns
    ):
        return delivered, (drain_began_ns - first_send_ns) / 1e9
    if not first_send_ns or not last_recv_ns or last_recv_ns <= first_send_ns:
        return unique, 0.0
    return unique, (last_recv_ns - first_send_ns) / 1e9
