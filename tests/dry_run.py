"""A dry run of a parallel session's order (pytest -p dry_run): each test sleeps its duration in a
`--durations=0` log (DRY_RUN_DURATIONS) divided by DRY_RUN_SCALE (20) and is skipped before its
fixtures, under the suite's own hooks (the `alone` lock), so xdist's real hand-out of files shows
in a minute, without the CPU. Used to order LONGEST_SYSTEM_FILES (tests/conftest.py)."""

from __future__ import annotations

import collections
import os
import re
import time

import pytest

_SCALE = float(os.environ.get("DRY_RUN_SCALE", "20"))
_LOG = os.environ.get("DRY_RUN_LOG")  # where each test's worker and end time are appended


def _durations(path: str) -> dict[str, float]:
    """Seconds per test id (setup, call and teardown summed) of a --durations=0 log."""
    seconds: dict[str, float] = collections.defaultdict(float)
    with open(path) as f:
        for line in f:
            found = re.match(r"\s*([\d.]+)s (setup|call|teardown)\s+(\S.*)$", line)
            if found:
                seconds[found.group(3).strip()] += float(found.group(1))
    return seconds


_SECONDS: dict[str, float] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if not _SECONDS:
        _SECONDS.update(_durations(os.environ["DRY_RUN_DURATIONS"]))
    time.sleep(_SECONDS.get(item.nodeid, 0.0) / _SCALE)
    if _LOG:
        with open(_LOG, "a") as f:
            worker = os.environ.get("PYTEST_XDIST_WORKER", "-")
            f.write(f"{worker} {time.time() * _SCALE:.1f} {item.nodeid}\n")
    pytest.skip("dry run")
