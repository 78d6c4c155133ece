"""Report speed: N receive records (plus their sends) to a full report, end to end.

    ZMQLOAD_BENCH_RECORDS=100000000 .venv/bin/python -m pytest bench/bench_report.py \
        -o python_files="bench_*.py" -s --benchmark-only --benchmark-columns=median,min,max,rounds

Each round is `python -m zmqload.report RUN --out DIR --timings` in a fresh process on
local[2] (so JVM start-up counts, as it does for a user). Data are generated once with
numpy + pyarrow and cached under /tmp/zmqload-bench-report/<records>/ (never committed).
Default size is small (1M) so `make bench` stays quick; ZMQLOAD_BENCH_SMOKE=1 uses 20k.

Side by side with another version: ZMQLOAD_BENCH_BASELINE=DIR, a checkout of it (e.g.
`git worktree add /tmp/zmqload-base REF`), runs that version's report (PYTHONPATH=DIR, same
venv) right before each timed round, and prints both medians and their ratio.
"""
from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time

import pytest

from report_data import generate

SMOKE = os.environ.get("ZMQLOAD_BENCH_SMOKE") == "1"
RECORDS = 20_000 if SMOKE else int(os.environ.get("ZMQLOAD_BENCH_RECORDS", "1000000"))
ROUNDS = int(os.environ.get("ZMQLOAD_BENCH_ROUNDS", "1" if SMOKE or RECORDS >= 50_000_000 else "3"))
MASTER = os.environ.get("ZMQLOAD_BENCH_MASTER", "local[2]")
BASELINE = os.environ.get("ZMQLOAD_BENCH_BASELINE")


@pytest.fixture(scope="module")
def bench_run():
    return generate(RECORDS)


def _report(path, out, timings, pythonpath=None):
    # Run from the baseline's directory: `python -m` puts the working directory first on
    # sys.path, which would otherwise import this checkout's zmqload.
    env = dict(os.environ, PYTHONPATH=pythonpath) if pythonpath else None
    p = subprocess.run([sys.executable, "-m", "zmqload.report", path, "--out", out, "--master", MASTER, "--timings"],
                       capture_output=True, text=True, env=env, cwd=pythonpath)
    assert p.returncode == 0, p.stderr[-2000:]
    for name, secs in re.findall(r"zmqload report: (.+?): ([0-9.]+) s$", p.stderr, re.M):
        timings.setdefault(name, []).append(float(secs))
    return p


def test_report_end_to_end(benchmark, bench_run, tmp_path):
    timings = {}
    out = str(tmp_path / "report")
    for kind in ("sends", "recvs"):      # both versions read from the page cache, not the first one from disk
        for f in os.listdir(os.path.join(bench_run, kind)):
            with open(os.path.join(bench_run, kind, f), "rb") as fh:
                while fh.read(1 << 24):
                    pass
    baseline_s = []

    def baseline():
        t = time.perf_counter()
        _report(bench_run, str(tmp_path / "baseline"), {}, pythonpath=os.path.abspath(BASELINE))
        baseline_s.append(time.perf_counter() - t)

    benchmark.pedantic(_report, args=(bench_run, out, timings), setup=baseline if BASELINE else None,
                       rounds=ROUNDS, iterations=1, warmup_rounds=0)
    assert os.path.getsize(os.path.join(out, "index.html")) > 10_000
    benchmark.extra_info["records"] = RECORDS
    benchmark.extra_info["master"] = MASTER
    benchmark.extra_info["step_median_s"] = {k: sorted(v)[len(v) // 2] for k, v in timings.items()}
    print(f"\nreport of {RECORDS:,} receive records, per step (median s):",
          ", ".join(f"{k} {sorted(v)[len(v) // 2]:.1f}" for k, v in timings.items()))
    if baseline_s:
        base, cur = statistics.median(baseline_s), benchmark.stats.stats.median
        benchmark.extra_info["baseline_rounds_s"] = baseline_s
        print(f"baseline {BASELINE}: median {base:.1f} s (rounds {', '.join(f'{b:.1f}' for b in baseline_s)}); "
              f"this version: median {cur:.1f} s; ratio {cur / base:.2f}")
