"""Engine throughput as a user's CI measures it: the zmqload_benchmark fixture (docs/PYTEST.md).

pytest-benchmark's time column is the engine's time per delivered message, so OPS is msg/s
and `--benchmark-compare-fail=min:10%` guards throughput.
"""

from __future__ import annotations

import pytest

from conftest import SMOKE


@pytest.mark.parametrize("size", [64, 1024])
def test_fixture_push_pull_tcp(zmqload_benchmark, size):
    count = 20_000 if SMOKE else 1_000_000
    result = zmqload_benchmark(
        pattern="push-pull", size=size, count=count, rounds=1 if SMOKE else 3
    )
    assert result.lost == 0 and result.sent == count
