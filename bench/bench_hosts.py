"""Beyond one machine (issue 28): the aggregate msg/s of one run placed on two hosts against the
sum of two single-host runs (the scaling efficiency).

The hosts are network namespaces of this machine joined by a bridge (tests/netns_rig.py), each
pinned to a CPU of its own: h1 to the first CPU this process may use, h2 to the second; h0 holds
the Spark master and the driver (unpinned: it pumps progress and does no per-message work).
PUSH -> PULL, unpaced, 64 B, over tcp between the namespaces' addresses, in the clear
(`--insecure`; CURVE's cost is docs/BENCHMARKS.md, "CURVE"). Each round, the order rotating:

- `h1`, `h2`: a single-host run, `zmqload run` 1 producer x 1 consumer inside that host under
  its CPU (no Spark: what a user runs on one host); `single` is their sum;
- `spread`: one run, `--master spark://h0 --placement spread --producers 2 --consumers 2`: both
  producers on h1, both consumers on h2, every message crosses the bridge;
- `pack`: the same with `--placement pack`: each host a producer and a consumer (a PUSH deals
  round-robin to both consumers, so half the messages still cross).

msg/s = messages received / (latest receive - earliest send), from the run's Parquet (one kernel
clock under every namespace); checked against run.json's throughput. The placed runs' Spark start
(session, executors, the barrier stage) is outside that span: it is printed beside it.

    ZMQLOAD_BENCH_ROUNDS=3 .venv/bin/python -m pytest bench/bench_hosts.py -o python_files="bench_*.py" \\
        -s --benchmark-only --benchmark-columns=median,min,max,rounds

Root only (namespaces, taskset); skipped with the reason otherwise.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from conftest import SMOKE
from paired import compare, rotating_rounds, span_from_records

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
)
import netns_rig  # noqa: E402

SIZE = 64
PER_PRODUCER = 20_000 if SMOKE else 4_000_000
ROUNDS = 1 if SMOKE else int(os.environ.get("ZMQLOAD_BENCH_ROUNDS", "3"))
WORKTREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(
    bool(netns_rig.why_not()) or len(os.sched_getaffinity(0)) < 2,
    reason=netns_rig.why_not() or "needs two CPUs",
)


def _measured(out: str, expected: int) -> dict:
    """msg/s from the Parquet (every message once), beside what run.json says."""
    run_dir = glob.glob(os.path.join(out, "run=*"))[0]
    first, last = span_from_records(run_dir, expected)
    rate = expected / ((last - first) / 1e9)
    with open(os.path.join(run_dir, "run.json")) as f:
        record = json.load(f)
    hosts = sorted({w["host"] for w in (record.get("placement") or {}).get("workers", [])})
    return {
        "rate": rate,
        "reported_ratio": record["summary"]["throughput_msgs"] / rate,
        "hosts": hosts,
    }


def _zmqload(host: str, args: list[str], env: dict, expected: int) -> dict:
    out = tempfile.mkdtemp(prefix="zmqload-hosts-")
    try:
        began = time.monotonic()
        done = subprocess.run(
            netns_rig.in_host(host, *args, "--out", out),
            capture_output=True,
            text=True,
            timeout=900,
            env=dict(os.environ, PYTHONPATH=WORKTREE, **env),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return {**_measured(out, expected), "wall_s": time.monotonic() - began}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_two_hosts_against_two_single_hosts(benchmark, tmp_path):
    cpus = sorted(os.sched_getaffinity(0))[:2]
    pinned = {"h1": cpus[0], "h2": cpus[1]}
    common = [
        "run",
        "--pattern",
        "push-pull",
        "--transport",
        "tcp",
        "--size",
        str(SIZE),
        "--rate",
        "0",
        "--count",
        str(PER_PRODUCER),
        "--quiet",
    ]

    def single(host: str):
        # the host's own address, as its users would bind on it; loopback would say nothing of the link
        args = [
            "taskset",
            "-c",
            str(pinned[host]),
            sys.executable,
            "-m",
            "zmqload",
            *common,
            "--consumers-bind",
            f"tcp://{netns_rig.address(host)}:*",
            "--insecure",
        ]
        return lambda: _zmqload(host, args, {}, PER_PRODUCER)

    def placed(placement: str, cluster: dict):
        args = [
            sys.executable,
            "-m",
            "zmqload",
            *common,
            "--master",
            cluster["master"],
            "--placement",
            placement,
            "--producers",
            "2",
            "--consumers",
            "2",
            "--insecure",
        ]
        env = {"SPARK_LOCAL_IP": netns_rig.address("h0"), "SPARK_CONF_DIR": cluster["conf"]}
        return lambda: _zmqload("h0", args, env, 2 * PER_PRODUCER)

    # two task slots per worker: pack puts a producer and a consumer on each host
    with netns_rig.spark_cluster(str(tmp_path), worker_cores=2, cpus=pinned) as cluster:
        figures = rotating_rounds(
            benchmark,
            {
                "h1": single("h1"),
                "h2": single("h2"),
                "spread": placed("spread", cluster),
                "pack": placed("pack", cluster),
            },
            ROUNDS,
        )
    figures["single"] = [
        {"rate": a["rate"] + b["rate"]} for a, b in zip(figures["h1"], figures["h2"])
    ]
    rates = {name: [f["rate"] for f in figs] for name, figs in figures.items()}
    summary = {
        placement: compare({placement: rates[placement], "single": rates["single"]}, placement)
        for placement in ("spread", "pack")
    }
    print(
        f"\ntwo hosts (namespaces, a CPU each) against two single hosts: {ROUNDS} rounds, "
        f"{PER_PRODUCER:,} msgs per producer, msg/s (latest receive - earliest send)"
    )
    for name in ("h1", "h2", "single", "spread", "pack"):
        figs = figures[name]
        print(
            f"  {name:7s} median {np.median(rates[name]):>12,.0f}  best {max(rates[name]):>12,.0f}   rounds: "
            + " ".join(f"{r / 1e6:.2f}M" for r in rates[name])
            + (
                ""
                if "wall_s" not in figs[0]
                else "   wall s: " + " ".join(f"{f['wall_s']:.0f}" for f in figs)
            )
        )
    for placement in ("spread", "pack"):
        r = summary[placement][f"{placement}/single"]
        print(
            f"  efficiency {placement} / (h1 + h2): median of per-round ratios {r['median_of_ratios']:.2f}, "
            f"best vs best {r['best_vs_best']:.2f}   rounds: {' '.join(f'{x:.2f}' for x in r['per_round'])}"
        )
    benchmark.extra_info.update(
        {
            "per_producer": PER_PRODUCER,
            "rounds": ROUNDS,
            "cpus": pinned,
            "rates": rates,
            **{f"{p}/single": summary[p][f"{p}/single"] for p in summary},
        }
    )
    for name in ("spread", "pack"):
        assert all(f["hosts"] == [netns_rig.ns("h1"), netns_rig.ns("h2")] for f in figures[name]), (
            figures[name]
        )
    for name in ("h1", "h2", "spread", "pack"):
        assert all(abs(f["reported_ratio"] - 1) < 0.01 for f in figures[name]), (
            name,
            figures[name],
        )
