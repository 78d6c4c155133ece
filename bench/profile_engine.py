"""Instructions per message, thread by thread: zmqload's workers and the bare C pair, each
run under valgrind (callgrind, one output file per thread), at two message counts; the
difference between the two runs divided by the difference in messages is the marginal
cost of one message in each thread (start-up, imports and Parquet set-up cancel out).

Wall-clock time on a shared 2-core machine is noise; instruction counts are not.

    python bench/profile_engine.py --size 64 --counts 50000 150000      # ~5 min
    python bench/profile_engine.py --which c --size 64

Only the workers run under valgrind (the controller's start-up deadlines are raised for
this harness only): a thread's name is its role, found from the functions it spent its
instructions in (the engine's Sender / Receiver loop, libzmq's I/O thread, the converter).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

VALGRIND = ["valgrind", "--tool=callgrind", "--separate-threads=yes", "--trace-children=yes"]


def _thread_costs(out_dir: str) -> dict[tuple[str, str], int]:
    """(process, thread role) -> instructions, summed over callgrind's per-thread files."""
    threads: dict[str, dict[int, tuple[int, str]]] = {}
    for path in glob.glob(os.path.join(out_dir, "cg.*.out-*")):
        pid, thread = re.search(r"cg\.(\d+)\.out-(\d+)$", path).groups()
        text = open(path, errors="replace").read()
        total = int(re.search(r"^(?:summary|totals): (\d+)", text, re.M).group(1))
        threads.setdefault(pid, {})[int(thread)] = (total, text)
    costs: dict[tuple[str, str], int] = {}
    for per_thread in threads.values():
        main_text = per_thread[1][1]
        if re.search(r"Sender_\d*run_slice", main_text) or (
            "zmq_send" in main_text and "zmq_recv" not in main_text
        ):
            process = "producer"
        elif re.search(r"Receiver_\d*run_slice", main_text) or "zmq_recv" in main_text:
            process = "consumer"
        else:
            process = "other"
        for thread, (total, text) in per_thread.items():
            key = (process, "main (loop)" if thread == 1 else _role(text))
            costs[key] = costs.get(key, 0) + total
    return costs


def _role(text: str) -> str:
    """What a thread other than the main one did, from the functions it ran."""
    if "parquet" in text.lower():
        return "converter"
    if "epoll_wait" in text:  # libzmq's internal symbols are hidden; its threads poll with epoll
        return "libzmq threads"
    return "other thread"


def profile_zmqload(size: int, count: int, out_dir: str) -> dict:
    """One zmqload run, its worker processes under callgrind."""
    import zmqload
    from zmqload.runner.launch import TOOL_ENV

    tool = (
        " ".join(VALGRIND)
        + f" --callgrind-out-file={out_dir}/cg.%p.out --log-file={out_dir}/valgrind.%p.log"
    )
    saved = os.environ.get(TOOL_ENV)
    os.environ[TOOL_ENV] = (
        tool  # the workers run under callgrind, the controller's deadlines raised for it
    )
    try:
        result = zmqload.run(
            pattern="push-pull",
            transport="tcp",
            size=size,
            count=count,
            out=os.path.join(out_dir, "runs"),
            drain_timeout_ms=20000,
        )
        assert result.lost == 0 and result.unique_received == count, result
    finally:
        if saved is None:
            del os.environ[TOOL_ENV]
        else:
            os.environ[TOOL_ENV] = saved
    return _thread_costs(out_dir)


def profile_c(size: int, count: int, out_dir: str) -> dict:
    from paired import build_c_baseline, free_port

    binary = build_c_baseline()
    subprocess.run(
        [
            *VALGRIND,
            f"--callgrind-out-file={out_dir}/cg.%p.out",
            binary,
            f"tcp://127.0.0.1:{free_port()}",
            str(count),
            str(size),
        ],
        check=True,
        capture_output=True,
        timeout=1800,
    )
    return _thread_costs(out_dir)


def marginal(
    run, size: int, counts: tuple[int, int], keep: str | None = None
) -> list[tuple[str, str, float]]:
    """Instructions per message per (process, thread role): the run at counts[1] minus the
    run at counts[0], over the difference in messages. `keep`: a directory to keep the
    larger run's callgrind files in (callgrind_annotate them for the functions)."""
    totals = []
    for count in counts:
        out_dir = tempfile.mkdtemp(prefix="zmqload-profile-")
        try:
            totals.append(run(size, count, out_dir))
            if keep and count == counts[1]:
                os.makedirs(keep, exist_ok=True)
                for path in glob.glob(os.path.join(out_dir, "cg.*")):
                    shutil.copy(path, keep)
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
    delta = counts[1] - counts[0]
    return [
        (p, r, (totals[1].get((p, r), 0) - totals[0].get((p, r), 0)) / delta)
        for p, r in sorted(set(totals[0]) | set(totals[1]))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--which", choices=["zmqload", "c", "both"], default="both")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--counts", type=int, nargs=2, default=[50_000, 150_000])
    parser.add_argument(
        "--keep", help="keep the larger run's callgrind files here (one subdirectory per side)"
    )
    args = parser.parse_args()
    runs = {"zmqload": profile_zmqload, "c": profile_c}
    for name in ["zmqload", "c"] if args.which == "both" else [args.which]:
        rows = marginal(
            runs[name], args.size, tuple(args.counts), args.keep and os.path.join(args.keep, name)
        )
        print(
            f"\n{name}, {args.size} B, instructions per message (marginal, {args.counts[0]:,} -> {args.counts[1]:,})"
        )
        for process, role, per_msg in rows:
            print(f"  {process:18s} {role:22s} {per_msg:10.0f}")
        print(f"  {'total':41s} {sum(r[2] for r in rows):10.0f}")


if __name__ == "__main__":
    main()
