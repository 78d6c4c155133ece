"""The capacity search: probes and wall time to an answer within 5%.

A push-pull consumer with 50 us of work per message (a ceiling near 20k msg/s, lower on a
busy machine) searched from 5k msg/s with 1 s probes; the smoke pass (CI) uses 0.3 s probes
and 25% precision. Target: at most ~12 probes (docs/CAPACITY.md).
"""

from __future__ import annotations

import shutil
import tempfile
import time

from conftest import SMOKE

PRECISION = 0.25 if SMOKE else 0.05
PROBE_S = 0.3 if SMOKE else 1.0
MAX_PROBES = 12


def test_search_to_precision(benchmark):
    import zmqload
    from zmqload.contract.workload import SearchPlan, Slos
    from zmqload.plan.capacity_search import find_max_rate, probe_once

    out = tempfile.mkdtemp(prefix="zmqload-bench-capacity-")
    template = zmqload.Workload(pattern="push-pull", consumer_delay_us=50, out=out)
    slos = Slos().with_search_defaults()
    plan = SearchPlan(
        start_rate=5_000, precision=PRECISION, probe_duration=PROBE_S, max_probes=MAX_PROBES + 8
    )
    outcomes, walls = [], []

    def one_search():
        count = iter(range(1000))
        started = time.monotonic()
        outcomes.append(
            find_max_rate(
                lambda rate: probe_once(
                    template, slos, rate, PROBE_S, f"bench-{len(outcomes)}-{next(count)}"
                ),
                plan,
            )
        )
        walls.append(time.monotonic() - started)

    try:
        benchmark.pedantic(one_search, rounds=1, iterations=1)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    outcome = outcomes[-1]
    assert outcome.converged, outcome.reason
    benchmark.extra_info.update(
        {
            "precision": PRECISION,
            "probe_s": PROBE_S,
            "probes": len(outcome.probes),
            "wall_s": round(walls[-1], 1),
            "max_sustainable_rate": outcome.max_sustainable_rate,
            "bracket": outcome.bracket,
            "rates": [p.rate for p in outcome.probes],
        }
    )
    print(f"\n{benchmark.extra_info}")
    assert len(outcome.probes) <= MAX_PROBES, outcome.to_dict()
