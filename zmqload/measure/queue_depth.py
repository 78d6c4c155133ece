"""Queue depth over time from a run's records and samples, with numpy: the series, the exact peak
(measure/queue_replay.py's definition), a window of WINDOW_BINS at a time, and the split between the
kernel's buffers and libzmq's pipes (docs/ARCHITECTURE.md, "Queue depth")."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..store import bitmaps
from . import queue_replay as queue_rule
from ..store.parquet_parts import part_files, read_parts
from ..contract.records import SAMPLES

MAX_POINTS = 2000
MIN_STEP_NS = 50_000_000


def frame_bytes(size: int) -> int:
    """Bytes of one single-frame message on a ZMTP 3 stream: a flags byte, then a 1-byte
    length up to 255 or an 8-byte one beyond."""
    return size + (2 if size <= 255 else 9)


def read_samples(run_dir: str) -> dict[str, np.ndarray]:
    table = read_parts(run_dir, "samples")
    if table is None:
        return {}
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}


def _series(
    samples: dict[str, np.ndarray], role: str, worker: int, column: str
) -> tuple[np.ndarray, np.ndarray]:
    mask = (samples["role"] == role) & (samples["worker"] == worker)
    order = np.argsort(samples["t_ns"][mask], kind="stable")
    return samples["t_ns"][mask][order], samples[column][mask][order]


def _at(t_grid: np.ndarray, t: np.ndarray, values: np.ndarray, before: float = 0) -> np.ndarray:
    """Step function of samples (the last value at or before each grid time)."""
    if len(t) == 0:
        return np.full(len(t_grid), before, dtype=np.float64)
    index = np.searchsorted(t, t_grid, side="right") - 1
    return np.where(index >= 0, values[np.maximum(index, 0)], before).astype(np.float64)


def depth_over_time(
    samples: dict[str, np.ndarray],
    *,
    producers: int,
    consumers: int,
    copies: int,
    size: int,
    drop_times_ns: np.ndarray,
    t0_ns: int,
) -> dict[str, np.ndarray]:
    """The depth and its kernel / libzmq split on a regular grid (numpy arrays)."""
    if not samples or not len(samples.get("t_ns", ())):
        return {}
    t_end = int(samples["t_ns"].max())
    step = max(MIN_STEP_NS, (t_end - t0_ns) // MAX_POINTS + 1)
    grid = np.arange(t0_ns, t_end + step, step, dtype=np.int64)
    sent = sum(_at(grid, *_series(samples, "producer", p, "messages")) for p in range(producers))
    received = sum(
        _at(grid, *_series(samples, "consumer", c, "messages")) for c in range(consumers)
    )
    dropped = np.searchsorted(np.sort(drop_times_ns), grid, side="right")
    total = np.maximum(sent * copies - received - dropped, 0)
    kernel_bytes = kernel_bytes_at(samples, grid)
    frame = frame_bytes(size)
    kernel_bytes = np.minimum(kernel_bytes, total * frame)
    kernel = np.minimum(np.floor(kernel_bytes / frame), total)
    return {
        "t_s": (grid - t0_ns) / 1e9,
        "depth": total,
        "kernel": kernel,
        "libzmq": total - kernel,
        "kernel_bytes": kernel_bytes,
        "sent": sent * copies,
        "received": received,
        "dropped": dropped,
        **{f"rss_kb_{role}": rss for role, rss in _rss_by_role(samples, grid).items()},
    }


Worker = tuple[str, int]
"""A sampled worker: (role, index)."""


def _workers(samples: dict[str, np.ndarray]) -> list[Worker]:
    return sorted(set(zip(samples["role"].tolist(), samples["worker"].tolist()))) if samples else []


def _rss_by_role(
    samples: dict[str, np.ndarray], grid: np.ndarray, workers: list[Worker] | None = None
) -> dict[str, np.ndarray]:
    """The largest resident memory among each role's workers at each grid time (kB); `workers`: all
    the run's, when `samples` holds only some of its rows."""
    if "rss_kb" not in samples:
        return {}
    workers = _workers(samples) if workers is None else workers
    out = {}
    for role in sorted({r for r, _ in workers}):
        series = [
            _at(grid, *_series(samples, role, w, "rss_kb"), before=-1)
            for r, w in workers
            if r == role
        ]
        out[role] = np.max(series, axis=0)
    return out


def _kernel_series(workers: list[Worker]) -> Iterator[tuple[str, int, str]]:
    """(role, worker, column) of the kernel queues on the message path: what the senders
    have not had acknowledged, what the receivers have not read (the proxy is both)."""
    for role, worker in workers:
        if role in ("producer", "proxy"):
            yield role, worker, "tcp_sendq_bytes"
        if role in ("consumer", "proxy"):
            yield role, worker, "tcp_recvq_bytes"


def kernel_bytes_at(
    samples: dict[str, np.ndarray], t_ns: np.ndarray, workers: list[Worker] | None = None
) -> np.ndarray:
    """What the kernel's tcp queues on the message path held at each time (bytes, from the
    samples: the last one at or before it), uncapped."""
    total = np.zeros(len(t_ns))
    if not samples:
        return total
    for role, worker, column in _kernel_series(_workers(samples) if workers is None else workers):
        t, value = _series(samples, role, worker, column)
        total += np.maximum(_at(t_ns, t, value), 0)
    return total


class SampleWindows:
    """The run's samples read a span of time at a time, a part at a time, with each worker's last
    sample before the span carried in: every step function (`_at`: the last sample at or before an
    instant) is the same over a span's rows as over all of them, and memory holds one span's."""

    def __init__(self, run_dir: str):
        self.paths = part_files(run_dir, "samples")
        self.spans: dict[str, tuple[int, int]] = {}  # part -> its first and last sample time
        workers: set[Worker] = set()
        for path in self.paths:
            part = _columns(path, ["t_ns", "role", "worker"])
            if part is not None and len(part["t_ns"]):
                self.spans[path] = (int(part["t_ns"].min()), int(part["t_ns"].max()))
                workers.update(_workers(part))
        self.workers = sorted(workers)
        self.carried: dict[str, np.ndarray] = {}
        self.read_to = np.iinfo(np.int64).min

    def until(self, t_ns: int) -> dict[str, np.ndarray]:
        """The samples before t_ns not given yet, and the last of each worker's before them (spans
        in time order; {} for a run without samples)."""
        if not self.paths:
            return {}
        got = self.carried
        for path, (lo, hi) in self.spans.items():
            part = _columns(path, list(SAMPLES.names)) if hi >= self.read_to and lo < t_ns else None
            if part is not None:
                inside = (part["t_ns"] >= self.read_to) & (part["t_ns"] < t_ns)
                got = _joined(got, {k: v[inside] for k, v in part.items()})
        self.carried, self.read_to = _last_rows(got), t_ns
        return got

    def at(self, t_ns: int) -> dict[str, np.ndarray]:
        """Each worker's last sample at or before t_ns (reads every part again)."""
        self.carried, self.read_to = {}, np.iinfo(np.int64).min
        return self.until(t_ns + 1)


def _joined(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([a[k], b[k]]) for k in b} if a else b


def _last_rows(samples: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each worker's last sample (the last of its latest time, as `_series`' stable sort orders them)."""
    last = []
    for role, worker in _workers(samples):
        index = np.flatnonzero((samples["role"] == role) & (samples["worker"] == worker))
        last.append(index[np.argsort(samples["t_ns"][index], kind="stable")[-1]])
    keep = np.sort(np.array(last, np.int64))
    return {k: v[keep] for k, v in samples.items()}


# -- from the records (measure/queue_replay.py) ---------------------------------------------------------
SERIES_POINTS = 20_000
"""RunResult.queue["series"] keeps the depth at the end of every millisecond up to this many points,
of every k-th millisecond beyond (the peak is always exact)."""


@dataclass
class Unreceived:
    """Messages of one stream, as one consumer's queue saw them (or the union under round robin),
    that never arrived yet queued: tail drops until `closed_ns`, stranded and unknown ones for
    good (`closed_ns` None). `seqs`: a packed map (np.packbits order) of their seqs, or its file."""

    stream: int
    seqs: bitmaps.Bits
    closed_ns: int | None


def _bits_at(packed: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """Whether each seq's bit is set in a packed map."""
    out = np.zeros(len(seq), bool)
    index = seq >> 3
    inside = (seq >= 0) & (index < len(packed))
    out[inside] = ((packed[index[inside]].astype(np.int64) >> (7 - (seq[inside] & 7))) & 1) == 1
    return out


def _columns(path: str, columns: list[str]) -> dict[str, np.ndarray] | None:
    """One Parquet part's columns as numpy arrays; None when the part cannot be read."""
    try:
        table = pq.read_table(path, columns=columns)
    except (OSError, pa.ArrowException):
        return None
    return {c: table.column(c).to_numpy(zero_copy_only=False) for c in columns}


Events = tuple[np.ndarray, np.ndarray]
"""Times (ns) messages entered a queue and times messages left it."""

Select = Optional[tuple[int, int, Optional[np.ndarray]]]
"""Which events a read keeps: those in the bins [lo, hi) and, if given, in the bins `only`; None: all."""

Span = tuple[int, int]
"""The first and the last bin some events fall in."""


def _in(t: np.ndarray, select: Select) -> np.ndarray:
    if select is None:
        return t
    lo, hi, only = select
    if only is None and (
        not len(t)
        or (int(t.min()) >= lo * queue_rule.BIN_NS and int(t.max()) < hi * queue_rule.BIN_NS)
    ):
        return t  # all inside: no copy
    b = queue_rule.bin_of(t)
    b -= lo
    keep = (b >= 0) & (b < hi - lo)
    if only is not None:  # a lookup over the window's bins: no sort of the part's (np.isin)
        wanted = np.zeros(hi - lo, bool)
        wanted[only - lo] = True
        keep[keep] = wanted[b[keep]]
    return t[keep]


def _unreceived_events(path: str, by_stream: dict[int, list[Unreceived]], select: Select) -> Events:
    """The never-arrived messages of one send part that queued: their send times, and when the tail
    drops among them left (their producer's close); only the `select`ed ones. Each map is read
    only where the part's seqs are."""
    entered: list[np.ndarray] = []
    left: list[np.ndarray] = []
    part = _columns(path, ["stream", "seq", "t_sent_ns"])
    for stream, views in by_stream.items():
        mine = part["stream"] == stream if part is not None else np.zeros(0, bool)
        if not mine.any():
            continue
        seq, t_sent = part["seq"][mine], part["t_sent_ns"][mine]  # type: ignore[index]
        lo = int(seq.min()) // 8
        for u in views:
            times = t_sent[
                _bits_at(bitmaps.piece(u.seqs, lo, int(seq.max()) // 8 + 1), seq - lo * 8)
            ]
            entered.append(_in(times, select))
            if u.closed_ns is not None:
                left.append(_in(np.full(len(times), u.closed_ns, np.int64), select))
    return (
        np.concatenate(entered) if entered else np.zeros(0, np.int64),
        np.concatenate(left) if left else np.zeros(0, np.int64),
    )


def _recv_events(path: str, select: Select) -> Events | None:
    """The send and receive times of one receive part's messages (the `select`ed ones)."""
    part = _columns(path, ["t_sent_ns", "t_recv_ns"])
    return (
        None if part is None else (_in(part["t_sent_ns"], select), _in(part["t_recv_ns"], select))
    )


def _read_spans(events: Callable[[Select], Events | None]) -> list[Span]:
    """Where a part's events fall (what entered, what left), from one read of them."""
    found = events(None)
    return (
        []
        if found is None
        else [
            (int(queue_rule.bin_of(t.min())), int(queue_rule.bin_of(t.max())))
            for t in found
            if len(t)
        ]
    )


def _stat_spans(path: str, columns: list[str]) -> list[Span] | None:
    """Where the times in `columns` of a part fall, from its Parquet statistics (every row an event);
    None when a row group has none."""
    try:
        meta = pq.read_metadata(path)
    except (OSError, pa.ArrowException):
        return []
    names = meta.schema.to_arrow_schema().names
    groups = [meta.row_group(g) for g in range(meta.num_row_groups)]
    spans = []
    for column in columns:
        stats = [g.column(names.index(column)).statistics for g in groups if g.num_rows]
        if any(s is None or not s.has_min_max for s in stats):
            return None
        if stats:
            spans.append(
                (
                    min(s.min for s in stats) // queue_rule.BIN_NS,
                    max(s.max for s in stats) // queue_rule.BIN_NS,
                )
            )
    return spans


@dataclass
class _Part:
    """One part's queue events, read `select`ed, and the spans of bins they fall in."""

    events: Callable[[Select], Events | None]
    spans: list[Span]

    def meets(self, lo: int, hi: int) -> bool:
        """Whether any of its events may fall in the bins [lo, hi]."""
        return any(a <= hi and b >= lo for a, b in self.spans)


def _parts(run_dir: str, unreceived: Sequence[Unreceived]) -> list[_Part]:
    """The receive parts (their spans from their statistics) and, with never-arrived messages that
    queued, the send parts (their spans from one read: only the map's seqs are events)."""
    by_stream: dict[int, list[Unreceived]] = {}
    for u in unreceived:
        if bitmaps.nbytes(u.seqs):
            by_stream.setdefault(u.stream, []).append(u)
    parts = []
    for path in part_files(run_dir, "recvs"):
        received: Callable[[Select], Events | None] = partial(_recv_events, path)
        spans = _stat_spans(path, ["t_sent_ns", "t_recv_ns"])
        parts.append(_Part(received, _read_spans(received) if spans is None else spans))
    if by_stream:
        for path in part_files(run_dir, "sends"):
            queued: Callable[[Select], Events | None] = partial(_unreceived_events, path, by_stream)
            parts.append(_Part(queued, _read_spans(queued)))
    return [p for p in parts if p.spans]


def _gathered(parts: list[_Part], lo: int, hi: int, only: np.ndarray) -> Events:
    """The events of every part in the bins `only` (of the window [lo, hi))."""
    entered, left = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for part in parts:
        if part.meets(int(only.min()), int(only.max())):
            found = part.events((lo, hi, only))
            if found is not None:
                entered.append(found[0])
                left.append(found[1])
    return np.concatenate(entered), np.concatenate(left)


@dataclass
class _PeakSoFar:
    """measure/queue_replay.py's exact peak over the windows seen so far."""

    highest_end: int | None = None  # the highest bin end
    at_bin: int = 0  # the first bin that ended there
    entered: bool = False
    replayed: list[queue_rule.Replayed] = field(default_factory=list)

    def reached(self) -> int:
        """A depth the queue is known to have reached (0 before anything)."""
        return max([self.highest_end or 0] + [r[0] for r in self.replayed if r is not None])

    def peak(self) -> queue_rule.Peak:
        if self.highest_end is None or not self.entered:
            return queue_rule.Peak(0, None)
        return queue_rule.settle(self.highest_end, self.at_bin, self.replayed)


def _window_bins(parts: list[_Part], lo: int, hi: int, carried: int) -> queue_rule.Bins:
    """The bins [lo, hi) from the parts that meet them, a part at a time (what one part's read
    holds is let go on return)."""
    entered, left = np.zeros(hi - lo, np.int64), np.zeros(hi - lo, np.int64)
    for part in parts:
        if part.meets(lo, hi - 1):
            for times, into in zip(part.events((lo, hi, None)) or (), (entered, left)):
                at = queue_rule.bin_of(times)
                at -= lo
                into += np.bincount(at, minlength=hi - lo)
    return queue_rule.Bins(lo, entered, left, carried)


def _windows(
    parts: list[_Part], first: int, last: int, window: int, peak: _PeakSoFar
) -> Iterator[tuple[queue_rule.Bins, np.ndarray]]:
    """The bins [first, last] a window of at most `window` at a time (each with the depth carried
    in, and its depth at each bin's end), replaying each window's candidate bins into `peak`.

    Why this peak is the whole run's `exact_peak` (all bins at once): let P be the most in flight at
    any instant, t the first instant it was. If P >= 1, the depth rose to P at t, so something
    entered at t and in t's bin both bounds (measure/queue_replay.py `candidate_bins`) are >= P. The
    threshold a window's bins are held to is the highest of its bin ends, `peak.reached()` (bin
    ends and replays of earlier windows) and 1: each a depth reached at some instant, or 1, so at
    most P. So t's bin is replayed, it gives (P, t), and no replay gives more, or P earlier; the
    whole run's rule replays t's bin too (its threshold, the highest bin end or 1, is at most P)
    and `settle` gives (P, t) from both. If P < 1, every depth reached is below 1 and the threshold
    is 1 in each window as in the whole run's rule: the same bins are replayed, the same answer."""
    carried = 0
    for lo in range(first, last + 1, window):
        hi = min(lo + window, last + 1)
        bins = _window_bins(parts, lo, hi, carried)
        entered, left, depth = bins.entered, bins.left, bins.depth()
        i = int(np.argmax(depth))
        if peak.highest_end is None or depth[i] > peak.highest_end:
            peak.highest_end, peak.at_bin = int(depth[i]), lo + i
        peak.entered |= bool(entered.any())
        candidates = queue_rule.candidate_bins(bins, depth, peak.reached())
        events = entered[candidates - lo] + left[candidates - lo]
        starts = queue_rule.cuts(events) + [len(candidates)]
        for a, b in zip(starts, starts[1:]):  # a piece of at most REPLAY_EVENTS at a time
            only = candidates[a:b]
            peak.replayed.append(
                queue_rule.replay(bins, depth, *_gathered(parts, lo, hi, only), only)
            )
        yield bins, depth
        carried = int(depth[-1])


def _kernel_at_ends(
    samples: dict[str, np.ndarray],
    workers: list[Worker],
    bins: queue_rule.Bins,
    depth: np.ndarray,
    frame: int,
    i: np.ndarray,
) -> np.ndarray:
    """What the kernel held at the end of bins i (indexes into `bins`), capped at what was in flight."""
    held: np.ndarray = np.minimum(
        kernel_bytes_at(samples, np.asarray(bins.end_ns(i)) - 1, workers),
        np.maximum(depth[i], 0) * frame,
    )
    return held


def queue_figures(
    run_dir: str,
    *,
    t0_ns: int,
    size: int,
    unreceived: Sequence[Unreceived] = (),
    window: int | None = None,
) -> dict[str, Any]:
    """RunResult.queue: "peak" (the most messages in flight at any instant, when, split kernel /
    libzmq by the samples at that instant, and each role's RSS then) and "series" (the depth at
    the end of each millisecond, its kernel / libzmq split and RSS by role). {} parts without
    records. measure/queue_replay.py's depth of all consumers' queues together: the receive records' send
    and receive times, and `unreceived` (the never-arrived messages that queued, per view:
    zmqload.measure.reconcile's maps). A window of at most `window` bins at a time
    (measure/queue_replay.WINDOW_BINS unless given), a part at a time, the samples of that window only,
    so memory grows neither with the run's messages nor with its duration."""
    parts = _parts(run_dir, unreceived)
    if not parts:
        return {"peak": {}, "series": {}}
    first = min(a for p in parts for a, _ in p.spans)
    last = max(b for p in parts for _, b in p.spans)
    t0_ns = t0_ns or first * queue_rule.BIN_NS
    frame = frame_bytes(size)
    samples = SampleWindows(run_dir)
    step = max(1, -(-(last - first + 1) // SERIES_POINTS))
    peak = _PeakSoFar()
    kernel_peak = 0.0
    kept: dict[str, list[np.ndarray]] = defaultdict(list)
    for bins, depth in _windows(parts, first, last, window or queue_rule.WINDOW_BINS, peak):
        lo = bins.first
        held = samples.until((lo + len(depth)) * queue_rule.BIN_NS)
        kernel_bytes = partial(_kernel_at_ends, held, samples.workers, bins, depth, frame)
        kernel_peak = max(kernel_peak, float(kernel_bytes(np.arange(len(depth))).max(initial=0)))
        after = first + step - 1  # the kept bins: every step-th of the run's, from its first
        keep = (
            np.arange(after + max(0, -(-(lo - after) // step)) * step, lo + len(depth), step) - lo
        )
        kept_bytes, ends = kernel_bytes(keep), np.asarray(bins.end_ns(keep))
        kernel = np.minimum(np.floor(kept_bytes / frame), np.maximum(depth[keep], 0))
        for name, values in {
            "t_s": (ends - t0_ns) / 1e9,
            "depth": depth[keep],
            "kernel": kernel,
            "libzmq": depth[keep] - kernel,
            "kernel_bytes": kept_bytes,
            **(
                {
                    f"rss_kb_{role}": rss
                    for role, rss in _rss_by_role(held, ends - 1, samples.workers).items()
                }
                if held
                else {}
            ),
        }.items():
            kept[name].append(values)
    top = peak.peak()
    at = top.t_ns if top.t_ns is not None else (first + 1) * queue_rule.BIN_NS - 1
    then = samples.at(at)
    peak_kb = float(
        min(
            kernel_bytes_at(then, np.array([at], np.int64), samples.workers)[0],
            max(top.messages, 0) * frame,
        )
    )
    kernel_at_peak = int(min(peak_kb // frame, max(top.messages, 0)))
    return {
        "peak": {
            "messages": top.messages,
            "at_s": round((at - t0_ns) / 1e9, 3),
            "kernel_messages": kernel_at_peak,
            "libzmq_messages": top.messages - kernel_at_peak,
            "kernel_bytes": int(peak_kb),
            "kernel_peak_bytes": int(kernel_peak),
            **(
                {
                    f"rss_kb_at_peak_{role}": int(rss[0])
                    for role, rss in _rss_by_role(
                        then, np.array([at], np.int64), samples.workers
                    ).items()
                }
                if then
                else {}
            ),
        },
        "series": {name: np.concatenate(values) for name, values in kept.items()},
    }
