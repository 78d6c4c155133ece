"""Synthetic runs with known truth (the Spark session is tests/conftest.py's `spark`)."""

from __future__ import annotations

import pytest

from .synth import make_run


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory):
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="session")
def lossy_run(runs_root):
    """Two streams, one consumer (push-pull): every kind of loss, duplicates, reordering, EAGAIN."""
    return make_run(
        str(runs_root),
        "lossy",
        streams=2,
        count=6000,
        consumers=2,
        fanout=False,
        lost_start=37,
        lost_tail=23,
        lost_middle=41,
        eagain=17,
        timeouts=5,
        duplicates=11,
        reorder_swaps=7,
        stall_every=500,
        seed=1,
    )


@pytest.fixture(scope="session")
def fanout_run(runs_root):
    """pub-sub with 2 consumers: loss is per consumer."""
    return make_run(
        str(runs_root),
        "fanout",
        pattern="pub-sub",
        streams=1,
        count=4000,
        consumers=2,
        fanout=True,
        lost_start=100,
        lost_tail=3,
        lost_middle=9,
        duplicates=2,
        seed=2,
    )


@pytest.fixture
def make_synth_run():
    return make_run
