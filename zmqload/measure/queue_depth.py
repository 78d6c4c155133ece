"""Queue depth over time, from a run's records (contract/queue.py's definition), with numpy.

    depth(t) = sent(t) - received(t) - dropped(t)

for each consumer's queue, summed: a drop at the start or mid-run leaves at its send time, one at
the tail when its producer closed; stranded and unknown messages stay (contract/queue.py). Counted
from the records, exactly: of the messages that arrived, those sent and not yet received (the
receive records carry the send time), plus the never-arrived messages that queued (tail drops until
their producer closed, stranded ones for good: their send times from the send records). The series
is the depth at the end of each millisecond; the peak is the most messages in flight at any instant
(contract/queue.py's two passes: bins, then the candidate bins event by event). The report computes
the same from the same records with Spark (zmqload/analysis/finish.py): the same numbers.

The depth is split into what the kernel's tcp buffers held (send queues of the sending side plus
receive queues of the receiving side, in bytes from the workers' samples, taken between engine
slices, turned into messages of the run's size plus the ZMTP frame header) and the rest, which
libzmq's pipes held. The workers sample their queues at different instants, so the same bytes can be
counted at both ends (in the sender's queue at one sample, the receiver's at the next); the
kernel part is therefore capped at what was in flight, the depth times the frame size. Memory follows
it: each role's resident size over time (VmRSS, sampled with the kernel queues) comes with the
samples, so the memory cost of a backlog is visible next to it.

`depth_over_time` is the older estimate from the samples alone (sent and received counters sampled
between slices, which lag each other by up to a slice): only its kernel part is still used.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..contract import bitmaps
from ..contract import queue as queue_rule
from ..contract.parts import part_files, read_parts

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


def _series(samples: dict[str, np.ndarray], role: str, worker: int, column: str) -> tuple[np.ndarray, np.ndarray]:
    mask = (samples["role"] == role) & (samples["worker"] == worker)
    order = np.argsort(samples["t_ns"][mask], kind="stable")
    return samples["t_ns"][mask][order], samples[column][mask][order]


def _at(t_grid: np.ndarray, t: np.ndarray, values: np.ndarray, before: float = 0) -> np.ndarray:
    """Step function of samples (the last value at or before each grid time)."""
    if len(t) == 0:
        return np.full(len(t_grid), before, dtype=np.float64)
    index = np.searchsorted(t, t_grid, side="right") - 1
    return np.where(index >= 0, values[np.maximum(index, 0)], before).astype(np.float64)


def depth_over_time(samples: dict[str, np.ndarray], *, producers: int, consumers: int, copies: int, size: int,
                    drop_times_ns: np.ndarray, t0_ns: int) -> dict[str, np.ndarray]:
    """The depth and its kernel / libzmq split on a regular grid (numpy arrays)."""
    if not samples or not len(samples.get("t_ns", ())):
        return {}
    t_end = int(samples["t_ns"].max())
    step = max(MIN_STEP_NS, (t_end - t0_ns) // MAX_POINTS + 1)
    grid = np.arange(t0_ns, t_end + step, step, dtype=np.int64)
    sent = sum(_at(grid, *_series(samples, "producer", p, "messages")) for p in range(producers))
    received = sum(_at(grid, *_series(samples, "consumer", c, "messages")) for c in range(consumers))
    dropped = np.searchsorted(np.sort(drop_times_ns), grid, side="right")
    total = np.maximum(sent * copies - received - dropped, 0)
    kernel_bytes = np.zeros(len(grid))
    for role, worker, column in _kernel_series(samples):
        t, value = _series(samples, role, worker, column)
        kernel_bytes += np.maximum(_at(grid, t, value), 0)
    frame = frame_bytes(size)
    kernel_bytes = np.minimum(kernel_bytes, total * frame)
    kernel = np.minimum(np.floor(kernel_bytes / frame), total)
    return {"t_s": (grid - t0_ns) / 1e9, "depth": total, "kernel": kernel, "libzmq": total - kernel,
            "kernel_bytes": kernel_bytes, "sent": sent * copies, "received": received, "dropped": dropped,
            **{f"rss_kb_{role}": rss for role, rss in _rss_by_role(samples, grid).items()}}


def _rss_by_role(samples: dict[str, np.ndarray], grid: np.ndarray) -> dict[str, np.ndarray]:
    """The largest resident memory among each role's workers at each grid time (kB)."""
    if "rss_kb" not in samples:
        return {}
    out = {}
    for role in sorted(set(samples["role"].tolist())):
        workers = sorted(set(samples["worker"][samples["role"] == role].tolist()))
        series = [_at(grid, *_series(samples, role, w, "rss_kb"), before=-1) for w in workers]
        out[role] = np.max(series, axis=0)
    return out


def _kernel_series(samples: dict[str, np.ndarray]) -> Iterator[tuple[str, int, str]]:
    """(role, worker, column) of the kernel queues on the message path: what the senders
    have not had acknowledged, what the receivers have not read (the proxy is both)."""
    seen = set(zip(samples["role"].tolist(), samples["worker"].tolist()))
    for role, worker in sorted(seen):
        if role in ("producer", "proxy"):
            yield role, worker, "tcp_sendq_bytes"
        if role in ("consumer", "proxy"):
            yield role, worker, "tcp_recvq_bytes"


def kernel_bytes_at(samples: dict[str, np.ndarray], t_ns: np.ndarray) -> np.ndarray:
    """What the kernel's tcp queues on the message path held at each time (bytes, from the
    samples: the last one at or before it), uncapped."""
    total = np.zeros(len(t_ns))
    if not samples:
        return total
    for role, worker, column in _kernel_series(samples):
        t, value = _series(samples, role, worker, column)
        total += np.maximum(_at(t_ns, t, value), 0)
    return total


# -- from the records (contract/queue.py) ---------------------------------------------------------
SLICE_BINS = 1 << 16
"""Bins whose kernel part is computed at once for the highest (the rest is at the kept points)."""

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
    return {c: table.column(c).to_numpy() for c in columns}


Events = tuple[np.ndarray, np.ndarray]
"""Times (ns) messages entered a queue and times messages left it."""


def _in(t: np.ndarray, only: np.ndarray | None) -> np.ndarray:
    return t if only is None else t[np.isin(queue_rule.bin_of(t), only)]


def _unreceived_events(path: str, by_stream: dict[int, list[Unreceived]], only: np.ndarray | None) -> Events:
    """The never-arrived messages of one send part that queued: their send times, and when the tail
    drops among them left (their producer's close); only those in the bins `only`, if given. Each map
    is read only where the part's seqs are."""
    entered: list[np.ndarray] = []
    left: list[np.ndarray] = []
    part = _columns(path, ["stream", "seq", "t_sent_ns"])
    for stream, views in by_stream.items():
        mine = part["stream"] == stream if part is not None else np.zeros(0, bool)
        if not mine.any():
            continue
        seq, t_sent = part["seq"][mine], part["t_sent_ns"][mine]     # type: ignore[index]
        lo = int(seq.min()) // 8
        for u in views:
            times = t_sent[_bits_at(bitmaps.piece(u.seqs, lo, int(seq.max()) // 8 + 1), seq - lo * 8)]
            entered.append(_in(times, only))
            if u.closed_ns is not None:
                left.append(_in(np.full(len(times), u.closed_ns, np.int64), only))
    return (np.concatenate(entered) if entered else np.zeros(0, np.int64),
            np.concatenate(left) if left else np.zeros(0, np.int64))


def _recv_events(path: str, only: np.ndarray | None) -> Events | None:
    """The send and receive times of one receive part's messages (in the bins `only`, if given)."""
    part = _columns(path, ["t_sent_ns", "t_recv_ns"])
    return None if part is None else (_in(part["t_sent_ns"], only), _in(part["t_recv_ns"], only))


@dataclass
class RecordDepth:
    """The run's queue from its records: per-millisecond bins and the exact peak (contract/queue.py)."""
    bins: queue_rule.Bins
    depth: np.ndarray         # at the end of each bin
    peak: queue_rule.Peak


def depth_from_records(run_dir: str, unreceived: Sequence[Unreceived] = ()) -> RecordDepth | None:
    """contract/queue.py's depth of the run in `run_dir` (all consumers' queues together): the
    receive records' send and receive times, and `unreceived` (the never-arrived messages that
    queued, per view: zmqload.measure.reconcile's maps). None without any record. A part at a time:
    first the bins, then the candidate bins' events a piece of at most REPLAY_EVENTS at a time
    (contract/queue.py's `pieces`), so memory does not grow with the run."""
    by_stream: dict[int, list[Unreceived]] = {}
    for u in unreceived:
        if bitmaps.nbytes(u.seqs):
            by_stream.setdefault(u.stream, []).append(u)
    sources: list[tuple[str, Callable[[np.ndarray | None], Events | None]]] = [
        (path, partial(_recv_events, path)) for path in part_files(run_dir, "recvs")]
    if by_stream:
        sources += [(path, partial(_unreceived_events, path, by_stream)) for path in part_files(run_dir, "sends")]
    bins: queue_rule.Bins | None = None
    spans: dict[str, tuple[int, int]] = {}      # part -> the bins its events fall in
    for path, events in sources:           # first pass: the bins
        found = events(None)
        got = queue_rule.Bins.from_times(*found) if found is not None else None
        if got is not None:
            bins = got if bins is None else bins + got
            spans[path] = (got.first, got.first + len(got.entered) - 1)
    if bins is None:
        return None
    depth = bins.depth()
    candidates = queue_rule.candidate_bins(bins, depth)
    events = bins.entered[candidates - bins.first] + bins.left[candidates - bins.first]
    starts = queue_rule.cuts(events) + [len(candidates)]
    replayed = []
    for lo_i, hi_i in zip(starts, starts[1:]):      # second pass: the candidate bins' events, a piece at a time
        only = candidates[lo_i:hi_i]
        entered, left = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        for path, events in sources:
            lo, hi = spans.get(path, (0, -1))
            if not np.any((only >= lo) & (only <= hi)):
                continue
            found = events(only)
            if found is not None:
                entered.append(found[0])
                left.append(found[1])
        replayed.append(queue_rule.replay(bins, depth, np.concatenate(entered), np.concatenate(left), only))
    return RecordDepth(bins, depth, queue_rule.peak_of(bins, depth, replayed))


def queue_figures(run_dir: str, *, t0_ns: int, size: int, unreceived: Sequence[Unreceived] = ()) -> dict[str, Any]:
    """RunResult.queue: "peak" (the most messages in flight at any instant, when, split kernel /
    libzmq by the samples at that instant, and each role's RSS then) and "series" (the depth at
    the end of each millisecond, its kernel / libzmq split and RSS by role). {} parts without records."""
    found = depth_from_records(run_dir, unreceived)
    if found is None:
        return {"peak": {}, "series": {}}
    samples = read_samples(run_dir)
    frame = frame_bytes(size)
    bins, depth, top = found.bins, found.depth, found.peak

    def kernel_bytes(i: np.ndarray) -> np.ndarray:
        """What the kernel held at the end of bins i, capped at what was in flight."""
        held: np.ndarray = np.minimum(kernel_bytes_at(samples, np.asarray(bins.end_ns(i)) - 1),
                                      np.maximum(depth[i], 0) * frame)
        return held

    # the kernel's highest a slice of bins at a time: its arrays are several per bin, a run's bins many
    kernel_peak = max((float(kernel_bytes(np.arange(lo, min(lo + SLICE_BINS, len(depth)))).max(initial=0))
                       for lo in range(0, len(depth), SLICE_BINS)), default=0.0)
    at = top.t_ns if top.t_ns is not None else int(bins.end_ns(0)) - 1
    t0_ns = t0_ns or bins.first * queue_rule.BIN_NS
    peak_kb = float(min(kernel_bytes_at(samples, np.array([at], np.int64))[0], max(top.messages, 0) * frame))
    kernel_at_peak = int(min(peak_kb // frame, max(top.messages, 0)))
    peak: dict[str, Any] = {
        "messages": top.messages, "at_s": round((at - t0_ns) / 1e9, 3),
        "kernel_messages": kernel_at_peak, "libzmq_messages": top.messages - kernel_at_peak,
        "kernel_bytes": int(peak_kb), "kernel_peak_bytes": int(kernel_peak),
        **({f"rss_kb_at_peak_{role}": int(rss[0]) for role, rss in
            _rss_by_role(samples, np.array([at], np.int64)).items()} if samples else {})}
    step = max(1, -(-len(depth) // SERIES_POINTS))
    keep = np.arange(step - 1, len(depth), step)
    kept_bytes, ends = kernel_bytes(keep), np.asarray(bins.end_ns(keep))
    kernel = np.minimum(np.floor(kept_bytes / frame), np.maximum(depth[keep], 0))
    series = {"t_s": (ends - t0_ns) / 1e9, "depth": depth[keep], "kernel": kernel,
              "libzmq": depth[keep] - kernel, "kernel_bytes": kept_bytes,
              **({f"rss_kb_{role}": rss for role, rss in _rss_by_role(samples, ends - 1).items()}
                 if samples else {})}
    return {"peak": peak, "series": series}
