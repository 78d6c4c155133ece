"""pytest plugin: ZeroMQ capacity checks in users' test suites (registered via pytest11)."""
from __future__ import annotations

import shutil

import pytest


class ZmqloadFixture:
    """`zmqload.run(**options)` with records in a per-test directory."""

    def __init__(self, out_dir: str):
        self.out_dir = out_dir
        self.results = []

    def run(self, **options):
        import zmqload
        options.setdefault("out", self.out_dir)
        result = zmqload.run(**options)
        self.results.append(result)
        return result


def pytest_addoption(parser):
    group = parser.getgroup("zmqload")
    group.addoption("--zmqload-keep", action="store_true", default=False,
                    help="keep zmqload run directories after the tests")


@pytest.fixture
def zmqload(request, tmp_path_factory):
    out_dir = str(tmp_path_factory.mktemp("zmqload-runs"))
    fixture = ZmqloadFixture(out_dir)
    yield fixture
    if not request.config.getoption("--zmqload-keep"):
        shutil.rmtree(out_dir, ignore_errors=True)
