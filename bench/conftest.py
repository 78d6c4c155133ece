import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# ZMQLOAD_BENCH_SMOKE=1 (CI): every benchmark once, tiny sizes, so the code cannot rot.
SMOKE = os.environ.get("ZMQLOAD_BENCH_SMOKE") == "1"


@pytest.fixture(scope="session")
def c_baseline_binary():
    from paired import build_c_baseline

    return build_c_baseline()
