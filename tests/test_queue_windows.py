"""The run's queue figures measured a window of bins at a time (zmqload/measure/queue_depth.py, issue 30:
memory that does not grow with the run's duration) equal the whole run's at once: the peak, its instant,
the kept series points, the kernel / libzmq split and the RSS at the peak. The whole run's figures are
computed here with numpy straight over the Parquet files (every event at once, the samples' step
functions by searchsorted), the peak also by one sorted sweep over every event and by measure/queue_replay.py's
`exact_peak`. Windows are made small (the `window` parameter), so that a few seconds of records cross
dozens of them: events straddle window edges, a window in the middle is empty, a peak falls on an edge."""

from __future__ import annotations

import glob
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import read_meta

from zmqload.measure import queue_replay as q
from zmqload.contract.part_files import part_name
from zmqload.contract.records import RECVS, SAMPLES, SENDS
from zmqload.measure import queue_depth
from zmqload.measure.queue_depth import Unreceived

MS = q.BIN_NS
T0 = 10**12 + 123_456  # not on a bin edge
SIZE = 64


def _write(
    run_dir: str, kind: str, worker: str, columns: dict, schema: pa.Schema, parts: int
) -> None:
    """Rows in time order split into `parts` Parquet parts (so parts straddle windows)."""
    os.makedirs(os.path.join(run_dir, kind), exist_ok=True)
    n = len(next(iter(columns.values())))
    for i, (lo, hi) in enumerate(
        zip(np.linspace(0, n, parts + 1).astype(int), np.linspace(0, n, parts + 1).astype(int)[1:])
    ):
        table = pa.table({k: v[lo:hi] for k, v in columns.items()}, schema=schema)
        pq.write_table(
            table,
            os.path.join(run_dir, kind, part_name(worker, i)),
            row_group_size=max(1, (hi - lo) // 3),
        )


def fake_run(
    run_dir: str,
    seed: int,
    *,
    producers: int,
    consumers: int,
    fanout: bool,
    lost: float,
    gap_ms: tuple[int, int] | None = None,
    edge_ms: int | None = None,
) -> list[Unreceived]:
    """Records of a run over ~3 s: bursts of sends, latencies from microseconds to ~0.5 s (events
    straddle every window edge), `lost` of the messages never arriving (half tail drops that leave at
    their producer's close, half stranded), no event in `gap_ms` [lo, hi) (after T0), and a burst of
    2,000 entries at the last nanosecond of millisecond `edge_ms - 1` that leave in the next one (the
    run's peak, at a window's end when a window's length divides edge_ms). Samples every 20 ms per
    worker. Returns the never-arrived messages that queued, as zmqload.measure.reconcile gives them."""
    rng = np.random.default_rng(seed)
    views = list(range(consumers)) if fanout else [0]
    unreceived = []
    recv_rows: dict[int, list[dict]] = {c: [] for c in range(consumers)}
    for s in range(producers):
        n = int(rng.integers(3000, 6000))
        t_sent = np.sort(T0 + (rng.beta(0.6, 0.6, n) * 3000 * MS).astype(np.int64))
        t_sent[0] = T0  # the run's first bin is T0's: windows start there
        if gap_ms is not None:
            t_sent = t_sent[
                (t_sent < T0 + gap_ms[0] * MS - 600 * MS) | (t_sent >= T0 + gap_ms[1] * MS)
            ]
        if edge_ms is not None and s == 0:
            t_sent = np.sort(np.concatenate([t_sent, np.full(2000, edge_ms * MS - 1, np.int64)]))
        n = len(t_sent)
        seq = np.arange(n, dtype=np.int64)
        _write(
            run_dir,
            "sends",
            f"p{s}",
            {
                "stream": np.full(n, s, np.int32),
                "seq": seq,
                "t_intended_ns": t_sent,
                "t_sent_ns": t_sent,
                "status": np.zeros(n, np.int8),
                "size": np.full(n, SIZE, np.int32),
            },
            SENDS.arrow,
            parts=3,
        )
        closed = int(t_sent.max()) + 40 * MS + s
        for v in views:
            never = rng.random(n) < lost
            if edge_ms is not None:
                never &= t_sent != edge_ms * MS - 1
            tail = never & (rng.random(n) < 0.5)
            unreceived += [
                Unreceived(s, np.packbits(tail), closed),
                Unreceived(s, np.packbits(never & ~tail), None),
            ]
            got = np.flatnonzero(~never)
            latency = np.where(
                rng.random(len(got)) < 0.9,
                rng.integers(1_000, 400_000, len(got)),
                rng.integers(1, 500, len(got)) * MS,
            )
            t_recv = t_sent[got] + latency
            if edge_ms is not None:
                t_recv[t_sent[got] == edge_ms * MS - 1] = edge_ms * MS + 1000
            if gap_ms is not None:  # nothing arrives inside the gap: later, after it
                inside = (t_recv >= T0 + gap_ms[0] * MS) & (t_recv < T0 + gap_ms[1] * MS)
                t_recv[inside] += (gap_ms[1] - gap_ms[0]) * MS
            who = np.full(len(got), v) if fanout else rng.integers(0, consumers, len(got))
            for c in range(consumers):
                mine = who == c
                recv_rows[c].append(
                    {
                        "consumer": np.full(int(mine.sum()), c, np.int32),
                        "stream": np.full(int(mine.sum()), s, np.int32),
                        "seq": seq[got][mine],
                        "t_intended_ns": t_sent[got][mine],
                        "t_sent_ns": t_sent[got][mine],
                        "t_recv_ns": t_recv[mine],
                        "size": np.full(int(mine.sum()), SIZE, np.int32),
                    }
                )
    for c, rows in recv_rows.items():
        columns = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
        order = np.argsort(columns["t_recv_ns"], kind="stable")
        _write(
            run_dir,
            "recvs",
            f"c{c}",
            {k: v[order] for k, v in columns.items()},
            RECVS.arrow,
            parts=4,
        )
    workers = [("producer", p) for p in range(producers)] + [
        ("consumer", c) for c in range(consumers)
    ]
    for role, w in workers:
        t = T0 - 5 * MS + np.arange(0, 3700 * MS, 20 * MS) + rng.integers(0, MS, 185)
        n = len(t)
        _write(
            run_dir,
            "samples",
            f"{role[0]}{w}",
            {
                "t_ns": t,
                "role": np.array([role] * n),
                "worker": np.full(n, w, np.int32),
                "messages": np.arange(n, dtype=np.int64),
                "dropped": np.zeros(n, np.int64),
                "tcp_sendq_bytes": rng.integers(-1, 20_000, n)
                if role == "producer"
                else np.full(n, -1),
                "tcp_recvq_bytes": rng.integers(-1, 20_000, n)
                if role == "consumer"
                else np.full(n, -1),
                "rss_kb": rng.integers(10_000, 90_000, n),
            },
            SAMPLES.arrow,
            parts=2,
        )
    return unreceived


def _all(run_dir: str, kind: str, columns: list[str]) -> dict[str, np.ndarray]:
    table = pa.concat_tables(
        pq.read_table(p, columns=columns)
        for p in sorted(glob.glob(os.path.join(run_dir, kind, "*.parquet")))
    )
    return {c: table.column(c).to_numpy(zero_copy_only=False) for c in columns}


def _step(t: np.ndarray, values: np.ndarray, at: np.ndarray, before: float) -> np.ndarray:
    """The last sample at or before each instant (ties: the last written)."""
    order = np.argsort(t, kind="stable")
    i = np.searchsorted(t[order], at, side="right") - 1
    return np.where(i >= 0, values[order][np.maximum(i, 0)], before).astype(np.float64)


def whole_run(run_dir: str, unreceived: list[Unreceived], t0_ns: int) -> dict:
    """The queue figures over every event and every sample at once (the whole run's definition)."""
    recvs = _all(run_dir, "recvs", ["t_sent_ns", "t_recv_ns"])
    sends = _all(run_dir, "sends", ["stream", "seq", "t_sent_ns"])
    entered, left = [recvs["t_sent_ns"]], [recvs["t_recv_ns"]]
    for u in unreceived:
        bits = np.unpackbits(u.seqs)
        mine = (sends["stream"] == u.stream) & (sends["seq"] < len(bits))
        times = sends["t_sent_ns"][mine][bits[sends["seq"][mine]] == 1]
        entered.append(times)
        if u.closed_ns is not None:
            left.append(np.full(len(times), u.closed_ns, np.int64))
    e, x = np.concatenate(entered), np.concatenate(left)
    # the peak: one sorted sweep (departures first at an instant), the depth after an instant's last event
    key = np.sort(np.concatenate([e * 2 + 1, x * 2]))
    running, times = np.cumsum((key & 1) * 2 - 1), key >> 1
    last_of_instant = np.append(times[1:] != times[:-1], True)
    values = np.where(last_of_instant, running, np.iinfo(np.int64).min)
    peak, at = int(values.max()), int(times[int(np.argmax(values))])
    bins = q.Bins.from_times(e, x)
    assert q.exact_peak(bins, e, x) == q.Peak(peak, at)
    first, last = int(min(e.min(), x.min()) // MS), int(max(e.max(), x.max()) // MS)
    n = last - first + 1
    depth = np.cumsum(
        np.bincount(e // MS - first, minlength=n) - np.bincount(x // MS - first, minlength=n)
    )
    step = max(1, -(-n // queue_depth.SERIES_POINTS))
    keep = np.arange(step - 1, n, step)
    ends = (first + keep + 1) * MS
    samples = _all(run_dir, "samples", list(SAMPLES.names))
    workers = sorted(set(zip(samples["role"].tolist(), samples["worker"].tolist())))

    def of(role: str, w: int, column: str, at: np.ndarray, before: float) -> np.ndarray:
        mine = (samples["role"] == role) & (samples["worker"] == w)
        return _step(samples["t_ns"][mine], samples[column][mine], at, before)

    def kernel(at: np.ndarray) -> np.ndarray:
        return sum(
            (
                np.maximum(of(r, w, c, at, 0), 0)
                for r, w in workers
                for c in (["tcp_sendq_bytes"] if r == "producer" else ["tcp_recvq_bytes"])
            ),
            np.zeros(len(at)),
        )

    def rss(at: np.ndarray) -> dict[str, np.ndarray]:
        return {
            r: np.max([of(r, w, "rss_kb", at, -1) for rr, w in workers if rr == r], axis=0)
            for r in sorted({r for r, _ in workers})
        }

    frame = SIZE + 2
    every = np.minimum(kernel((first + np.arange(n) + 1) * MS - 1), np.maximum(depth, 0) * frame)
    kept_bytes = every[keep]
    k = np.minimum(np.floor(kept_bytes / frame), np.maximum(depth[keep], 0))
    peak_kb = float(min(kernel(np.array([at]))[0], peak * frame))
    return {
        "peak": {
            "messages": peak,
            "at_s": round((at - t0_ns) / 1e9, 3),
            "kernel_messages": int(min(peak_kb // frame, peak)),
            "libzmq_messages": peak - int(min(peak_kb // frame, peak)),
            "kernel_bytes": int(peak_kb),
            "kernel_peak_bytes": int(every.max(initial=0)),
            **{f"rss_kb_at_peak_{r}": int(v[0]) for r, v in rss(np.array([at])).items()},
        },
        "series": {
            "t_s": (ends - t0_ns) / 1e9,
            "depth": depth[keep],
            "kernel": k,
            "libzmq": depth[keep] - k,
            "kernel_bytes": kept_bytes,
            **{f"rss_kb_{r}": v for r, v in rss(ends - 1).items()},
        },
        "at_ns": at,
    }


def _same(got: dict, want: dict) -> None:
    assert got["peak"] == want["peak"]
    assert sorted(got["series"]) == sorted(want["series"])
    for name, values in want["series"].items():
        assert got["series"][name].dtype == values.dtype, name
        assert np.array_equal(got["series"][name], values), name


@pytest.fixture
def counted(monkeypatch):
    """Small replay pieces (so a window's candidates take several), windows counted as they are read."""
    monkeypatch.setattr(q, "REPLAY_EVENTS", 40)
    seen = {"windows": 0, "empty": 0}
    windows = queue_depth._windows

    def counting(*args):
        for bins, depth in windows(*args):
            seen["windows"] += 1
            seen["empty"] += not (bins.entered.any() or bins.left.any())
            yield bins, depth

    monkeypatch.setattr(queue_depth, "_windows", counting)
    return seen


CASES = {
    "round robin, stranded and tail drops": {
        "producers": 2,
        "consumers": 2,
        "fanout": False,
        "lost": 0.05,
    },
    "fan-out, three consumers": {"producers": 1, "consumers": 3, "fanout": True, "lost": 0.1},
    "no loss, one pair": {"producers": 1, "consumers": 1, "fanout": False, "lost": 0.0},
    "a gap of 700 ms": {
        "producers": 2,
        "consumers": 1,
        "fanout": False,
        "lost": 0.02,
        "gap_ms": (1200, 1900),
    },
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("window, points", [(64, 20_000), (16, 97), (1 << 20, 333)])
def test_windows_equal_the_whole_run(tmp_path, monkeypatch, counted, case, window, points):
    monkeypatch.setattr(queue_depth, "SERIES_POINTS", points)
    unreceived = fake_run(str(tmp_path), sorted(CASES).index(case), **CASES[case])
    want = whole_run(str(tmp_path), unreceived, T0)
    got = queue_depth.queue_figures(
        str(tmp_path), t0_ns=T0, size=SIZE, unreceived=unreceived, window=window
    )
    _same(got, want)
    assert counted["windows"] >= (1 if window > 3000 else 3000 // window), counted
    if "gap_ms" in CASES[case] and window < 700:
        assert counted["empty"] >= 1, counted


def test_a_peak_at_a_window_edge(tmp_path, counted):
    """2,000 entries at the last nanosecond of a window's last millisecond: the peak is there."""
    edge = (T0 // MS + 1500) // 64 * 64  # a multiple of the window: a window ends there
    unreceived = fake_run(
        str(tmp_path), 5, producers=1, consumers=1, fanout=False, lost=0.01, edge_ms=edge
    )
    want = whole_run(str(tmp_path), unreceived, T0)
    assert want["at_ns"] == edge * MS - 1 and want["peak"]["messages"] >= 2000
    got = queue_depth.queue_figures(
        str(tmp_path), t0_ns=T0, size=SIZE, unreceived=unreceived, window=64
    )
    _same(got, want)
    assert counted["windows"] > 40


def test_a_real_run_in_small_windows(run_workload, counted):
    """A real tcp run with a backlog (a slow consumer): the figures the run recorded (its default
    window) equal those in windows of 16 ms and the whole run's from its Parquet files."""
    result = run_workload(
        pattern="push-pull",
        transport="tcp",
        size=SIZE,
        rate=3000,
        duration=0.6,
        rcvhwm=100_000,
        sndhwm=100_000,
        consumer_delay_us=700,
    )
    assert result.lost == 0 and result.stranded == 0 and result.queue["peak"]["messages"] > 100
    t0 = int(read_meta(result.run_dir)["schedule"]["t0_ns"])
    want = whole_run(result.run_dir, [], t0)
    _same({"peak": result.queue["peak"], "series": result.queue["series"]}, want)
    got = queue_depth.queue_figures(result.run_dir, t0_ns=t0, size=SIZE, window=16)
    _same(got, want)
    assert counted["windows"] > 30
