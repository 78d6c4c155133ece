"""Faults injected into real runs as an operator would, each checked against the records
with numpy and pyarrow alone (no zmqload code reads them here), and the fault table
`make faults` prints (docs/RELIABILITY.md).

    python tests/fault_table.py [--markdown] [--no-report]

Each fault: a `zmqload run` process on loopback; a SIGKILL by process id of the consumer,
the producer (ids from run.json's `worker_pids`, checked against the controller's children
in /proc) or the controller itself; a disk that fills (a 5 MiB tmpfs, root only); a rate
no producer can reach; the run's tcp connections aborted by the kernel (--reset-at, root); a worker restarted
(--restart, each mode); a truncated Parquet part under `zmqload report` (Spark; --no-report
skips it).
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow.parquet as pq

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:  # run as a script (make faults): this checkout's fate names
    sys.path.insert(0, REPO)
from zmqload.contract.fates import FATES, LOST  # noqa: E402  (names only: nothing here reads records with zmqload)

PACED = ["--pattern", "push-pull", "--transport", "tcp", "--rate", "50k", "--duration", "4"]
PACED_PROXY = ["--pattern", "proxy", "--transport", "tcp", "--rate", "50k", "--duration", "4"]
KILL_AFTER_S = 1.5


def environment() -> dict:
    """This checkout's zmqload, wherever the caller runs from."""
    return dict(
        os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)
    )


def start_run(out: str, name: str, args: list[str], own_group: bool = False) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "zmqload", "run", *args, "--out", out, "--run-name", name, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
        start_new_session=own_group,
    )


def read_meta(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "run.json")) as f:
        return json.load(f)


def wait_started(run_dir: str, timeout_s: float = 30.0) -> dict:
    """run.json once the schedule started (it then names the worker processes)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            meta = read_meta(run_dir)
            if meta.get("worker_pids"):
                return meta
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{run_dir} did not start within {timeout_s} s")


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def children_of(pid: int) -> set[int]:
    kids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if parent_of(int(entry)) == pid:
                    kids.add(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return kids


def running(pid: int) -> bool:
    """A live process (a zombie is dead: it only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def wait_marked(run_dir: str, timeout_s: float = 15.0) -> float:
    """Seconds until run.json left `running` (a dead controller's workers mark it)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            if read_meta(run_dir)["status"] != "running":
                return time.monotonic() - start
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{run_dir} still running {timeout_s} s after its controller died")


def _parts(run_dir: str, kind: str):
    files = sorted(glob.glob(os.path.join(run_dir, kind, "part-*.parquet")))
    return pq.ParquetDataset(files).read() if files else None


def figures_from_records(run_dir: str) -> dict:
    """The run's counters from its Parquet records with numpy alone. A message counts as
    sent if its send record says ok or a consumer received it (a killed producer's last
    send records die with it; what arrived was evidently sent)."""
    sends, recvs = _parts(run_dir, "sends"), _parts(run_dir, "recvs")
    s_stream = sends.column("stream").to_numpy() if sends else np.zeros(0, np.int32)
    s_seq = sends.column("seq").to_numpy() if sends else np.zeros(0, np.int64)
    s_ok = sends.column("status").to_numpy() == 0 if sends else np.zeros(0, bool)
    r_stream = recvs.column("stream").to_numpy() if recvs else np.zeros(0, np.int32)
    r_seq = recvs.column("seq").to_numpy() if recvs else np.zeros(0, np.int64)
    attempted = sent = unique = 0
    for stream in np.union1d(np.unique(s_stream), np.unique(r_stream)):
        mine_s, mine_r = s_stream == stream, r_stream == stream
        got = np.unique(r_seq[mine_r])
        ok = np.union1d(s_seq[mine_s & s_ok], got)
        attempted += max(int(mine_s.sum()), int(got.max()) + 1 if len(got) else 0)
        sent += len(ok)
        unique += len(np.intersect1d(ok, got))
    return {"attempted": attempted, "sent": sent, "received": len(r_seq), "unique_received": unique}


def identity_holds(counters: dict) -> bool:
    return (
        counters["expected"] == sum(counters[f] for f in FATES)
        and counters["lost"] == counters["expected"] - counters["unique_received"]
        and counters["lost"] == sum(counters[f] for f in LOST)
    )


def leftovers(run_dir: str, meta: dict) -> list[str]:
    """Whatever a run left behind: processes, private control files, raw chunks, temp files."""
    left = [
        f"process {name} (pid {pid})"
        for name, pid in meta.get("worker_pids", {}).items()
        if running(pid)
    ]
    if meta.get("control_dir") and os.path.exists(meta["control_dir"]):
        left.append(f"control directory {meta['control_dir']}")
    if os.path.exists(os.path.join(run_dir, "_spill")):
        left.append("_spill/")
    left += [
        os.path.relpath(p, run_dir)
        for p in glob.glob(os.path.join(run_dir, "**", ".*"), recursive=True)
    ]
    return left


@dataclass
class Outcome:
    fault: str
    exit: int | None
    seconds_to_end: float
    meta: dict
    stderr: str
    records: dict
    left: list[str] = field(default_factory=list)
    stdout: str = ""  # the run's --json summary, if it printed one

    @property
    def ok(self) -> bool:
        return self.consistent and not self.left

    @property
    def consistent(self) -> bool:
        c = self.meta.get("counters") or {}
        return bool(c) and identity_holds(c) and all(c[k] == v for k, v in self.records.items())

    def row(self) -> list[str]:
        c = self.meta.get("counters") or {}
        return [
            self.fault,
            str(self.exit),
            f"{self.seconds_to_end:.1f} s",
            self.meta.get("status", "?"),
            f"sent {c.get('sent', 0):,} received {c.get('received', 0):,} unknown {c.get('unknown', 0):,} "
            f"stranded {c.get('stranded', 0):,}: "
            + ("consistent" if self.consistent else "INCONSISTENT"),
            ", ".join(self.left) or "none",
        ]


def _kill(out: str, run_name: str, args: list[str], name: str, fault: str, before_kill) -> Outcome:
    """A run whose worker `name` is SIGKILLed once `before_kill(run_dir, pid)` returned: its outcome,
    timed from the kill to the controller's end."""
    run_dir = os.path.join(out, f"run={run_name}")
    proc = start_run(out, run_name, args)
    try:
        pid = wait_started(run_dir)["worker_pids"][name]
        assert pid in children_of(proc.pid), (
            f"{name} (pid {pid}) is not a child of the controller {proc.pid}"
        )
        before_kill(run_dir, pid)
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        stdout, err = proc.communicate(timeout=60)
        ended = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
    meta = read_meta(run_dir)
    return Outcome(
        fault,
        proc.returncode,
        ended,
        meta,
        err,
        figures_from_records(run_dir),
        leftovers(run_dir, meta),
        stdout,
    )


def kill_worker(out: str, name: str, args: list[str] = PACED) -> Outcome:
    """SIGKILL one worker process KILL_AFTER_S into a paced run."""
    return _kill(
        out,
        f"kill-{name}",
        args,
        name,
        f"{name} killed (SIGKILL)",
        lambda run_dir, pid: time.sleep(KILL_AFTER_S),
    )


def kill_in_drain(out: str) -> Outcome:
    """SIGKILL the consumer in the drain, before it heard of it: stopped (SIGSTOP) mid-run, killed
    once the producer's loop is over (its first Parquet part is written then)."""

    def stopped_until_the_drain(run_dir: str, pid: int) -> None:
        time.sleep(0.5)
        os.kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + 30
        while (
            not glob.glob(os.path.join(run_dir, "sends", "part-p0-*.parquet"))
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        time.sleep(0.3)  # the controller hears the producer is done and begins the drain

    return _kill(
        out,
        "kill-in-drain",
        ["--pattern", "push-pull", "--rate", "1k", "--duration", "1.5"],
        "c0",
        "c0 stopped, then killed in the drain",
        stopped_until_the_drain,
    )


def kill_controller(out: str) -> Outcome:
    run_dir = os.path.join(out, "run=kill-controller")
    proc = start_run(out, "kill-controller", PACED)
    try:
        wait_started(run_dir)
        time.sleep(KILL_AFTER_S)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        marked = wait_marked(run_dir)
    finally:
        if proc.poll() is None:
            proc.kill()
    meta = read_meta(run_dir)
    deadline = time.monotonic() + 5  # the last worker removes the control files after marking
    while leftovers(run_dir, meta) and time.monotonic() < deadline:
        time.sleep(0.05)
    return Outcome(
        "controller killed (SIGKILL)",
        proc.returncode,
        marked,
        meta,
        proc.stderr.read(),
        figures_from_records(run_dir),
        leftovers(run_dir, meta),
    )


def kill_everything(out: str) -> tuple[str, dict]:
    """SIGKILL the controller and its workers at once (their process group): nobody is left
    to finish the run, which stays `running` until `zmqload repair`."""
    run_dir = os.path.join(out, "run=kill-all")
    proc = start_run(out, "kill-all", PACED, own_group=True)
    try:
        meta = wait_started(run_dir)
        time.sleep(KILL_AFTER_S)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 5
    while any(running(pid) for pid in meta["worker_pids"].values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return run_dir, meta


def repair(run_dir: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "zmqload", "repair", run_dir, "--json"],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=60,
    )


def can_mount() -> str | None:
    """Why a tmpfs cannot be mounted here, or None."""
    if os.geteuid() != 0:
        return "mounting a small tmpfs needs root"
    return None


class SmallDisk:
    """A tmpfs of `size` mounted on a fresh directory, unmounted at exit."""

    def __init__(self, size: str = "5m"):
        self.size = size

    def __enter__(self) -> str:
        self.path = tempfile.mkdtemp(prefix="zmqload-smalldisk-")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", self.path],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            os.rmdir(self.path)
            raise PermissionError(f"cannot mount a tmpfs: {done.stderr.strip()}")
        return self.path

    def __exit__(self, *exc) -> None:
        subprocess.run(["umount", self.path], check=False)
        os.rmdir(self.path)


def disk_full(
    disk: str, name: str = "disk-full", length: tuple[str, str] = ("--duration", "3")
) -> Outcome:
    """An unpaced run onto a 5 MiB disk: 3 s long (what it writes is a guess, so it starts and the
    disk fills mid-run), or `--count 2M` (expected to write more than is free: refused)."""
    out = os.path.join(disk, "runs")
    run_dir = os.path.join(out, f"run={name}")
    proc = start_run(out, name, ["--pattern", "push-pull", "--transport", "tcp", *length])
    start = time.monotonic()
    stdout, err = proc.communicate(timeout=120)
    ended = time.monotonic() - start
    meta = read_meta(run_dir) if os.path.exists(os.path.join(run_dir, "run.json")) else {}
    return Outcome(
        f"output disk full (5 MiB tmpfs, unpaced {' '.join(length)})",
        proc.returncode,
        ended,
        meta,
        err,
        figures_from_records(run_dir),
        leftovers(run_dir, meta),
        stdout,
    )


def run_to_end(out: str, name: str, args: list[str]) -> Outcome:
    """A run with its fault in its options, left to end on its own: its outcome, timed from its
    start (the caller names the fault)."""
    run_dir = os.path.join(out, f"run={name}")
    proc = start_run(out, name, args)
    start = time.monotonic()
    stdout, err = proc.communicate(timeout=120)
    meta = read_meta(run_dir)
    return Outcome(
        "",
        proc.returncode,
        time.monotonic() - start,
        meta,
        err,
        figures_from_records(run_dir),
        leftovers(run_dir, meta),
        stdout,
    )


def connection_reset(out: str) -> Outcome:
    """The run's tcp connections aborted by the kernel (--reset-at, ss -K) KILL_AFTER_S into a paced
    run with a slow consumer (a backlog in flight): the run goes on and completes; what the reset
    cost is `dropped_reset`, and sent minus received from the records is what it lost."""
    outcome = run_to_end(
        out,
        "connection-reset",
        [*PACED, "--consumer-delay-us", "25", "--reset-at", str(KILL_AFTER_S)],
    )
    c, resets = outcome.meta.get("counters") or {}, outcome.meta.get("resets") or []
    outcome.fault = (
        f"tcp connections reset (--reset-at {KILL_AFTER_S}, ss -K: "
        f"{sum(r['connections'] for r in resets)} aborted), slow consumer: dropped_reset "
        f"{c.get('dropped_reset', 0):,} = sent - received from the records"
    )
    lost = outcome.records["sent"] - outcome.records["unique_received"]
    if len(resets) != 1 or c.get("dropped_reset") != lost:
        outcome.left.append("the reset's loss not placed as dropped_reset")
    return outcome


def restart(out: str, worker: str, mode: str) -> Outcome:
    """`worker` restarted KILL_AFTER_S into a paced run (--restart, --restart-mode `mode`): the run
    goes on and completes; what the restart cost is `dropped_restart`, and sent minus received from
    the records is what it lost (push-pull: no other loss at this rate)."""
    given = ["--restart", f"{worker}@{KILL_AFTER_S}", "--restart-mode", mode]
    given += ["--restart-gap-ms", "500"] if mode == "freeze" else []
    outcome = run_to_end(out, f"restart-{worker}-{mode}", [*PACED, *given])
    c, restarts = outcome.meta.get("counters") or {}, outcome.meta.get("restarts") or [{}]
    r = restarts[0]
    outcome.fault = (
        f"{worker} restarted ({' '.join(given)}): down {r.get('down_ns', 0) / 1e6:,.0f} ms, "
        f"dropped_restart {c.get('dropped_restart', 0):,} = sent - received from the records, "
        f"the flow back {r.get('first_recv_after_up_ns', 0) / 1e6:,.0f} ms after it was up"
    )
    lost = outcome.records["sent"] - outcome.records["unique_received"]
    if len(restarts) != 1 or c.get("dropped_restart") != lost or r.get("lost") != lost:
        outcome.left.append("the restart's loss not placed as dropped_restart")
    return outcome


def unreachable_schedule(out: str) -> Outcome:
    """A rate one producer cannot reach: the run says so (generator_limited, the rate reached)."""
    outcome = run_to_end(
        out,
        "unreachable-rate",
        ["--pattern", "push-pull", "--transport", "tcp", "--rate", "100000000", "--duration", "1"],
    )
    summary = outcome.meta.get("summary") or {}
    generator = summary.get("generator") or {}
    said = bool(summary.get("generator_limited")) and "generator" in outcome.stdout + outcome.stderr
    reached = format(round(generator.get("reached_rate") or 0), ",")
    outcome.fault = "--rate 100000000 (unreachable): generator_limited " + (
        f"said, reached {reached} msg/s" if said else "NOT SAID"
    )
    if not said:
        outcome.left.append("no generator-limit verdict")
    return outcome


@dataclass
class ReportOutcome:
    """`zmqload report` over a good run and one with a truncated receive part."""

    fault: str
    exit: int | None
    seconds_to_end: float
    good_matches: bool
    warned: bool
    left: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exit == 0 and self.good_matches and self.warned and not self.left

    def row(self) -> list[str]:
        return [
            self.fault,
            str(self.exit),
            f"{self.seconds_to_end:.1f} s",
            "report written" if self.exit == 0 else "?",
            ("good run == numpy over Parquet" if self.good_matches else "good run WRONG")
            + ("; one warning names the file and the run" if self.warned else "; NO WARNING"),
            ", ".join(self.left) or "none",
        ]


def truncated_part(out: str) -> ReportOutcome:
    """Two runs; one receive part of the second cut in half; the report on both."""
    for name in ("good", "cut-part"):
        proc = start_run(
            out,
            name,
            ["--pattern", "push-pull", "--transport", "tcp", "--rate", "20k", "--duration", "1"],
        )
        proc.communicate(timeout=120)
    part = sorted(glob.glob(os.path.join(out, "run=cut-part", "recvs", "part-*.parquet")))[0]
    with open(part, "r+b") as f:
        f.truncate(os.path.getsize(part) // 2)
    report_dir = os.path.join(out, "report")
    start = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "zmqload",
            "report",
            os.path.join(out, "run=good"),
            os.path.join(out, "run=cut-part"),
            "--out",
            report_dir,
            "--no-server",
        ],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=600,
    )
    seconds = time.monotonic() - start
    good_matches = False
    if done.returncode == 0:
        rows = pq.read_table(os.path.join(report_dir, "summary.parquet")).to_pylist()
        total = [
            r for r in rows if r["run"] == "good" and r["stream"] == -1 and r["consumer"] == -1
        ]
        truth = figures_from_records(os.path.join(out, "run=good"))
        good_matches = (
            bool(total)
            and total[0]["received"] == truth["received"]
            and total[0]["unique"] == truth["unique_received"]
        )
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    warned = (
        len(warnings) == 1 and "cut-part" in warnings[0] and os.path.basename(part) in warnings[0]
    )
    return ReportOutcome(
        "one receive Parquet part truncated, then `zmqload report`",
        done.returncode,
        seconds,
        good_matches,
        warned,
    )


def main() -> None:
    markdown = "--markdown" in sys.argv
    rows = []
    with tempfile.TemporaryDirectory(prefix="zmqload-faults-") as out:
        rows.append(kill_worker(out, "c0"))
        rows.append(kill_worker(out, "p0"))
        rows.append(kill_in_drain(out))
        rows.append(kill_worker(out, "x0", PACED_PROXY))
        rows[-1].fault = "proxy x0 killed (SIGKILL), pattern proxy"
        rows.append(kill_controller(out))
        run_dir, _ = kill_everything(out)
        start = time.monotonic()
        done = repair(run_dir)
        meta = read_meta(run_dir)
        rows.append(
            Outcome(
                "controller and workers killed, then `zmqload repair`",
                done.returncode,
                time.monotonic() - start,
                meta,
                done.stderr,
                figures_from_records(run_dir),
                leftovers(run_dir, meta),
            )
        )
        rows.append(unreachable_schedule(out))
        rows.append(connection_reset(out))
        for worker, mode in (("c0", "kill"), ("c0", "close"), ("c0", "freeze"), ("p0", "close")):
            rows.append(restart(out, worker, mode))
        if "--no-report" not in sys.argv:
            with tempfile.TemporaryDirectory(prefix="zmqload-faults-report-") as report_out:
                rows.append(truncated_part(report_out))
    reason = can_mount()
    if reason is None:
        with SmallDisk() as disk:
            rows.append(disk_full(disk))
            rows.append(disk_full(disk, "disk-full-again"))
            rows[-1].fault = "the next run on that full disk"
    head = [
        "fault",
        "exit",
        "time to end",
        "status",
        "figures (run.json == numpy over Parquet, identity)",
        "left behind",
    ]
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r.row()) + " |")
    else:
        for r in rows:
            print("\n".join(f"{h:>12}: {v}" for h, v in zip(head, r.row())))
            if isinstance(r, Outcome):
                print(f"{'error':>12}: {r.meta.get('error')}")
            print()
    if reason is not None:
        print(f"disk full: not run ({reason})")
    sys.exit(0 if all(r.ok for r in rows) else 1)


if __name__ == "__main__":
    main()
