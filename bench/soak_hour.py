"""An hour-long paced soak run (issue 30), as a user runs it: `zmqload run` on a terminal (a
pseudo-terminal from script(1), so the live display draws), stopped with a real Ctrl-C (the
terminal's ^C) at a chosen second. Afterwards, from what the run left and from the kernel:

- memory over time: every worker's VmRSS from its samples/ (one row per 20 ms slice), per
  minute, and the controller's VmRSS read from /proc by this script every 10 s;
- the live display: its lines in the typescript, the last one of each minute (script's timing file);
- the stop: seconds from ^C to the exit, the exit status, run.json's status;
- the counters against pyarrow over the Parquet files, a file at a time (bench_soak.py's check).

    .venv/bin/python bench/soak_hour.py --rate 100k --duration 4000 --interrupt-at 3600 --out /tmp/soak

Writes OUT/soak-hour.json with the figures; the run directory is kept (a few GB) for the report.
Memory figures are valid on a shared machine; the paced run needs about one core of its own.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_soak import counters_from_records  # noqa: E402

NAME = "soak-hour"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _children(pid: int) -> list[int]:
    found = []
    for task in glob.glob(f"/proc/{pid}/task/*/children"):
        with open(task) as f:
            found += [int(p) for p in f.read().split()]
    return found


def _status_kb(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))
    except (OSError, StopIteration):
        return -1


def _controller(script_pid: int, deadline: float) -> int:
    """The `zmqload run` process under script(1) (script -> shell exec -> python)."""
    while time.monotonic() < deadline:
        for pid in _children(script_pid):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"zmqload" in f.read():
                    return pid
        time.sleep(0.1)
    raise SystemExit("the run never started under script(1)")


def worker_rss_by_minute(run_dir: str, t0_ns: int) -> dict[str, list[int]]:
    """role+worker -> the largest VmRSS (kB) of each minute since t0, from samples/ a part at a time."""
    out: dict[str, dict[int, int]] = {}
    for path in sorted(glob.glob(os.path.join(run_dir, "samples", "*.parquet"))):
        t = pq.read_table(path, columns=["t_ns", "role", "worker", "rss_kb"])
        minute = (t.column("t_ns").to_numpy() - t0_ns) // 60_000_000_000
        rss = t.column("rss_kb").to_numpy()
        names = [
            f"{r}{w}" for r, w in zip(t.column("role").to_pylist(), t.column("worker").to_pylist())
        ]
        for name in set(names):
            mine = np.array([n == name for n in names])
            for m in np.unique(minute[mine & (minute >= 0)]):
                top = int(rss[mine & (minute == m)].max())
                slot = out.setdefault(name, {})
                slot[int(m)] = max(slot.get(int(m), -1), top)
    return {
        name: [by_minute.get(m, -1) for m in range(max(by_minute) + 1)]
        for name, by_minute in out.items()
    }


def display_by_minute(typescript: str, timing: str) -> list[str]:
    """The live display's last two lines (counts; memory and disk) in each minute of the session
    (script's timing file says how many bytes of the typescript came after how many seconds)."""
    with open(typescript, "rb") as f:
        data = f.read()
    lines_by_minute: dict[int, str] = {}
    counts = ""
    at, offset = 0.0, 0
    with open(timing) as f:
        for row in f:
            delay, count = row.split()[:2]
            at += float(delay)
            chunk = data[offset : offset + int(count)].decode("utf-8", "replace")
            offset += int(count)
            for line in ANSI.sub("", chunk).splitlines():
                if "received " in line:
                    counts = " ".join(line.split())
                if "memory " in line:
                    lines_by_minute[int(at // 60)] = f"{counts} | {' '.join(line.split())}"
    return [lines_by_minute.get(m, "") for m in range(max(lines_by_minute, default=-1) + 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", default="100k")
    ap.add_argument("--duration", type=float, default=4000)
    ap.add_argument("--interrupt-at", type=float, default=3600, help="seconds after the start: ^C")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    typescript, timing = os.path.join(args.out, "typescript"), os.path.join(args.out, "timing")
    command = (
        f"exec {sys.executable} -m zmqload run --pattern push-pull --transport tcp --rate {args.rate} "
        f"--pacing sleep --duration {args.duration:g} --out {args.out} --run-name {NAME}"
    )
    # The run must hear ^C as a terminal's foreground job does. Started from a shell's `&` (or
    # nohup) this script inherits SIGINT ignored, script(1) passes that on and Python keeps an
    # ignored SIGINT ignored: the ^C at 3,600 s of stop 27 was echoed and did nothing. A handler
    # here becomes SIG_DFL across exec, so the run installs its own again.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.monotonic()
    proc = subprocess.Popen(
        ["script", "-qfe", f"--timing={timing}", "-c", command, typescript],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=dict(os.environ, COLUMNS="200"),
    )
    assert proc.stdin is not None
    controller = _controller(proc.pid, started + 60)
    controller_rss: list[tuple[float, int]] = []
    while time.monotonic() - started < args.interrupt_at and proc.poll() is None:
        controller_rss.append(
            (round(time.monotonic() - started, 1), _status_kb(controller, "VmRSS"))
        )
        time.sleep(min(10.0, max(0.0, args.interrupt_at - (time.monotonic() - started))))
    interrupted_at = time.monotonic()
    controller_hwm = _status_kb(controller, "VmHWM")
    proc.stdin.write(b"\x03")  # the terminal's ^C: SIGINT to the run's process group
    proc.stdin.flush()
    while _status_kb(controller, "VmHWM") >= 0:  # the run's own exit, not script's
        controller_hwm = max(controller_hwm, _status_kb(controller, "VmHWM"))
        time.sleep(0.02)
    stopped_in = time.monotonic() - interrupted_at
    proc.stdin.close()
    script_status = proc.wait(timeout=120)
    run_dir = os.path.join(args.out, f"run={NAME}")
    with open(os.path.join(run_dir, "run.json")) as f:
        record = json.load(f)
    t0_ns = record["schedule"]["t0_ns"]
    truth = counters_from_records(run_dir)
    figures = {
        "command": command.replace(sys.executable, "python"),
        "interrupt_after_s": args.interrupt_at,
        "exit_status": script_status,
        "stopped_in_s": round(stopped_in, 2),
        "status": record["status"],
        "counters": {k: record["counters"][k] for k in ("sent", "received", "lost")},
        "from_parquet": truth,
        "parquet_bytes": sum(
            os.path.getsize(p) for p in glob.glob(os.path.join(run_dir, "*", "*.parquet"))
        ),
        "worker_rss_kb_by_minute": worker_rss_by_minute(run_dir, t0_ns),
        "controller_rss_kb_every_10s": controller_rss,
        "controller_peak_kb": controller_hwm,
        "workers_peak_kb": {
            w["id"] if "id" in w else f"{role}{i}": w.get("max_rss_kb")
            for role in ("producers", "consumers")
            for i, w in enumerate(record.get(role) or [])
        },
        "display_by_minute": display_by_minute(typescript, timing),
    }
    with open(os.path.join(args.out, f"{NAME}.json"), "w") as f:
        json.dump(figures, f, indent=1)
    print(
        json.dumps(
            {k: v for k, v in figures.items() if "by_minute" not in k and "every" not in k},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
