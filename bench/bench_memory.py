"""Peak memory of a long run: recording must stay bounded however many messages.

ZMQLOAD_BENCH_MESSAGES=100000000 make bench   # the 100M-message figure (about 2 minutes)
"""

from __future__ import annotations

import os
import resource
import shutil
import tempfile

from conftest import SMOKE

MESSAGES = 50_000 if SMOKE else int(os.environ.get("ZMQLOAD_BENCH_MESSAGES", "10000000"))


def test_peak_rss_of_long_run(benchmark):
    import zmqload

    out = tempfile.mkdtemp(prefix="zmqload-bench-mem-")
    results = []

    def one_run():
        results.append(
            zmqload.run(pattern="push-pull", transport="tcp", size=64, count=MESSAGES, out=out)
        )

    try:
        benchmark.pedantic(one_run, rounds=1, iterations=1)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    result = results[-1]
    assert result.lost == 0 and result.unique_received == MESSAGES
    workers_kb = sum(w["max_rss_kb"] for w in result.producers + result.consumers)
    controller_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    total_mib = (workers_kb + controller_kb) / 1024
    benchmark.extra_info.update(
        {
            "messages": MESSAGES,
            "throughput_msgs": round(result.throughput_msgs),
            "producer_peak_rss_mib": round(result.producers[0]["max_rss_kb"] / 1024, 1),
            "consumer_peak_rss_mib": round(result.consumers[0]["max_rss_kb"] / 1024, 1),
            "controller_peak_rss_mib": round(controller_kb / 1024, 1),
            "total_peak_rss_mib": round(total_mib, 1),
        }
    )
    print(f"\n{benchmark.extra_info}")
