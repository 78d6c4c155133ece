"""How long a consumer with `--consumer-delay-us D` really takes per message, and what it carries.

    python bench/consumer_work.py [--delays 20,50] [--rates 0,30k] [--repeat 2]
                                  [--engines after=.,before=../other-checkout]

For each pattern (push-pull, pub-sub over tcp, 256 B, SNDHWM = RCVHWM = 1000), delay and rate
(0 = unpaced, --count messages; else an open-loop schedule for --duration seconds), runs:

- zmqload, once per engine given (a checkout with its engine built, put first on PYTHONPATH),
  with `--drain slow` so that the consumer keeps its work to the end; read back from its recvs
  Parquet with pyarrow/numpy (no zmqload code in the reading);
- the C yardstick bench/baseline_busy_consumer.c (libzmq only) whose consumer busy-waits D per
  message ("C spin") or yields the CPU while it waits ("C yield", zmqload's old work wait).

Printed: messages received, the gaps between consecutive receives (p10 / median / p90, us),
the receive rate over the receiving span, and the latency from the intended send time (p50 /
p99, ms). With a message always waiting (unpaced), the median gap is the consumer's real time
per message. docs/CAPACITY.md quotes the figures.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_DIR = os.path.join(HERE, ".build")
HWM = 1000
SIZE = 256
sys.path.insert(0, HERE)
from paired import build_c, free_port  # noqa: E402


def build_yardstick() -> str:
    """Compile the yardstick against the libzmq the benchmarks run, as paired.py does."""
    return build_c("baseline_busy_consumer")


def parse_rate(text: str) -> int:
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:].lower(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def zmqload_run(
    engine: str, pattern: str, delay_us: float, rate: int, count: int, duration: float, out: str
) -> dict:
    """One run with the engine at `engine`; what its recvs Parquet says."""
    amount = ["--rate", str(rate), "--duration", str(duration)] if rate else ["--count", str(count)]
    env = dict(os.environ, PYTHONPATH=os.path.abspath(engine))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "zmqload",
            "run",
            "--pattern",
            pattern,
            "--size",
            str(SIZE),
            *amount,
            "--sndhwm",
            str(HWM),
            "--rcvhwm",
            str(HWM),
            "--consumer-delay-us",
            str(delay_us),
            "--drain",
            "slow",
            "--quiet",
            "--out",
            out,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=out,
    )
    if r.returncode not in (0, 3):
        raise RuntimeError(r.stderr)
    (run_dir,) = glob.glob(os.path.join(out, "run=*"))
    files = sorted(glob.glob(os.path.join(run_dir, "recvs", "part-*.parquet")))
    table = pq.ParquetDataset(files).read(columns=["t_recv_ns", "t_intended_ns"])
    t_recv = table.column("t_recv_ns").to_numpy()
    latency = t_recv - table.column("t_intended_ns").to_numpy()
    shutil.rmtree(run_dir)
    t = np.sort(t_recv)
    gaps = np.diff(t)
    return {
        "received": len(t),
        "gaps_us": [float(np.percentile(gaps, q)) / 1e3 for q in (10, 50, 90)],
        "rate": (len(t) - 1) / ((t[-1] - t[0]) / 1e9),
        "latency_ms": [float(np.percentile(latency, q)) / 1e6 for q in (50, 99)] if rate else None,
    }


def yardstick(
    binary: str, pattern: str, delay_us: float, rate: int, count: int, duration: float, wait: str
) -> dict:
    n = int(rate * duration) if rate else count
    out = subprocess.run(
        [
            binary,
            pattern,
            f"tcp://127.0.0.1:{free_port()}",
            str(n),
            str(SIZE),
            str(delay_us),
            wait,
            str(HWM),
            str(rate),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout.split()
    got, med, p10, p90, msgs, lat50, lat99 = (float(x) for x in out)
    return {
        "received": int(got),
        "gaps_us": [p10 / 1e3, med / 1e3, p90 / 1e3],
        "rate": msgs,
        "latency_ms": [lat50 / 1e6, lat99 / 1e6] if rate else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patterns", default="push-pull,pub-sub")
    ap.add_argument("--delays", default="20,50")
    ap.add_argument("--rates", default="0", help="msg/s, comma-separated; 0 = unpaced")
    ap.add_argument("--count", type=int, default=60_000, help="messages of an unpaced run")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds of a paced run")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument(
        "--engines",
        default="zmqload=" + os.path.dirname(HERE),
        help="label=checkout,... (each with its engine built in place)",
    )
    ap.add_argument(
        "--yield", dest="with_yield", action="store_true", help="also run the yielding C consumer"
    )
    args = ap.parse_args()
    binary = build_yardstick()
    engines = [e.split("=", 1) for e in args.engines.split(",")]
    out = tempfile.mkdtemp(prefix="zmqload-consumer-work-")
    print(
        f"{'pattern':9} {'delay':>5} {'rate':>6} {'who':10} {'received':>8} {'gap p10':>7} {'median':>7} "
        f"{'p90 us':>7} {'recv/s':>7} {'lat p50':>8} {'p99 ms':>7}"
    )
    try:
        for pattern in args.patterns.split(","):
            for delay in (float(d) for d in args.delays.split(",")):
                for rate in (parse_rate(r) for r in args.rates.split(",")):
                    for _ in range(args.repeat):
                        runs = [
                            (
                                label,
                                lambda e=path: zmqload_run(
                                    e, pattern, delay, rate, args.count, args.duration, out
                                ),
                            )
                            for label, path in engines
                        ]
                        runs.append(
                            (
                                "C spin",
                                lambda: yardstick(
                                    binary, pattern, delay, rate, args.count, args.duration, "spin"
                                ),
                            )
                        )
                        if args.with_yield:
                            runs.append(
                                (
                                    "C yield",
                                    lambda: yardstick(
                                        binary,
                                        pattern,
                                        delay,
                                        rate,
                                        args.count,
                                        args.duration,
                                        "yield",
                                    ),
                                )
                            )
                        for who, fn in runs:
                            r = fn()
                            lat = (
                                "{:8.1f} {:7.1f}".format(*r["latency_ms"])
                                if r["latency_ms"]
                                else f"{'-':>8} {'-':>7}"
                            )
                            print(
                                f"{pattern:9} {delay:5g} {rate or 'max':>6} {who:10} {r['received']:8,} "
                                "{:7.1f} {:7.1f} {:7.1f} ".format(*r["gaps_us"])
                                + f"{r['rate']:7,.0f} {lat}",
                                flush=True,
                            )
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
