"""Check a capacity search's answer R by hand: `zmqload run` at 0.9 R and at 1.25 R, N tries each.

    python bench/check_answer.py runs/demo/capacity [--tries 3] [--duration 1]

Each try is a plain `zmqload run` (the CLI, as a user types it) with the search's workload and
SLOs (--max-loss, --min-achieved, --slo-p99-us); its exit status says pass (0) or SLO broken
(3). The figures printed beside it come from the run's Parquet alone, read with pyarrow/numpy:
messages accepted by the producer, unique messages received, the p99 latency from the intended
send time, and the share of the accepted messages that had arrived when sending ended (below
~0.95: the consumer did not keep up; the search's backlog check, which `run` does not have).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pyarrow.parquet as pq

# Workload fields passed as run options: the search's template (rate, duration, count are set here).
OPTIONS = (
    "pattern",
    "transport",
    "size",
    "producers",
    "consumers",
    "send_mode",
    "sndhwm",
    "rcvhwm",
    "consumer_delay_us",
    "linger_ms",
    "io_threads",
    "drain",
)


def table(run_dir: str, kind: str, columns: list[str]):
    files = sorted(glob.glob(os.path.join(run_dir, kind, "part-*.parquet")))
    return pq.ParquetDataset(files).read(columns=columns)


def from_records(run_dir: str) -> dict:
    sends = table(run_dir, "sends", ["status", "t_sent_ns"])
    recvs = table(run_dir, "recvs", ["seq", "t_recv_ns", "t_intended_ns"])
    ok = sends.column("status").to_numpy() == 0
    end = sends.column("t_sent_ns").to_numpy()[ok].max()
    t_recv = recvs.column("t_recv_ns").to_numpy()
    latency_us = (t_recv - recvs.column("t_intended_ns").to_numpy()) / 1e3
    return {
        "accepted": int(ok.sum()),
        "received": len(np.unique(recvs.column("seq").to_numpy())),
        "p99_us": float(np.percentile(latency_us, 99)),
        "in_time": float((t_recv <= end).sum()) / int(ok.sum()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("search_dir")
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds (default: the search's probe duration)",
    )
    args = ap.parse_args()
    with open(os.path.join(args.search_dir, "capacity-search.json")) as f:
        doc = json.load(f)
    duration = args.duration or doc["plan"]["probe_duration"]
    slos = doc["slos"]
    slo_args = ["--max-loss", str(slos["max_loss"]), "--min-achieved", str(slos["min_achieved"])]
    if slos.get("slo_p99_us"):
        slo_args += ["--slo-p99-us", str(slos["slo_p99_us"])]
    out = tempfile.mkdtemp(prefix="zmqload-check-answer-")
    for search in doc["searches"]:
        answer = search["max_sustainable_rate"]
        if not answer:
            print("no answer to check:", search.get("reason"))
            continue
        w = search["workload"]
        opts = [
            x
            for k in OPTIONS
            if w.get(k) is not None
            for x in (f"--{k.replace('_', '-')}", str(w[k]))
        ]
        opts = [o.replace("--linger-ms", "--linger") for o in opts]
        print(
            f"answer R = {answer:,} msg/s per producer, {duration:g} s runs, SLOs {' '.join(slo_args)}"
        )
        for factor in (0.9, 1.25):
            rate = int(factor * answer)
            for i in range(args.tries):
                name = f"check-{factor}-{i}"
                r = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "zmqload",
                        "run",
                        *opts,
                        *slo_args,
                        "--rate",
                        str(rate),
                        "--duration",
                        str(duration),
                        "--run-name",
                        name,
                        "--quiet",
                        "--out",
                        out,
                    ],
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                (run_dir,) = glob.glob(os.path.join(out, f"run={name}*"))
                f = from_records(run_dir)
                verdict = {0: "pass", 3: "SLO broken"}.get(r.returncode, f"exit {r.returncode}")
                print(
                    f"  {factor:4} R = {rate:7,} msg/s  {verdict:10}  accepted {f['accepted']:7,}  received "
                    f"{f['received']:7,}  p99 {f['p99_us']:10,.0f} us  arrived by the end of sending "
                    f"{f['in_time']:.3f}  {r.stderr.strip()[:160]}",
                    flush=True,
                )
    print("runs:", out)


if __name__ == "__main__":
    main()
