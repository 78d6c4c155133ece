"""Queue depth over time: every message sent and not yet received or dropped.

    depth(t) = sent(t) x copies - received(t) - dropped_by(t)

sent(t) and received(t) are the workers' counters, sampled between engine slices (every
~20 ms, or after each message of a slow consumer). A message dropped at the start or
mid-run leaves the queue at its send time (a PUB drops at send when its pipe is full),
found where the producer's sent counter reached its rank among the accepted messages; one
lost at shutdown (dropped_tail) waited until its producer closed and leaves the queue then.
Stranded messages stay in the depth: they were queued, or unknown.

The depth is split into what the kernel's tcp buffers held (send queues of the sending
side plus receive queues of the receiving side, in bytes from the samples, turned into
messages of the run's size plus the ZMTP frame header) and the rest, which libzmq's pipes
held. The workers sample their queues at different instants, so the same bytes can be
counted at both ends (in the sender's queue at one sample, the receiver's at the next); the
kernel part is therefore capped at what was in flight, the depth times the frame size. Memory follows it:
each role's resident size over time (VmRSS, sampled with the kernel queues) comes with the
samples, so the memory cost of a backlog is visible next to it.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ..contract.parts import read_parts

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


def drop_times(samples: dict[str, np.ndarray], stream: int, drop_ranks: np.ndarray) -> np.ndarray:
    """Send time of each dropped message, from its rank among the accepted ones."""
    if not samples or len(drop_ranks) == 0:
        return np.zeros(0, np.int64)
    t, sent = _series(samples, "producer", stream, "messages")
    if len(t) == 0 or len(drop_ranks) == 0:
        return np.zeros(0, np.int64)
    index = np.searchsorted(sent, drop_ranks + 1, side="left")      # first sample with the rank sent
    return t[np.minimum(index, len(t) - 1)]


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


def peak(depth: dict[str, np.ndarray]) -> dict[str, float]:
    if not depth:
        return {}
    i = int(np.argmax(depth["depth"]))
    return {"messages": int(depth["depth"][i]), "at_s": round(float(depth["t_s"][i]), 3),
            "kernel_messages": int(depth["kernel"][i]), "libzmq_messages": int(depth["libzmq"][i]),
            "kernel_bytes": int(depth["kernel_bytes"][i]),
            "kernel_peak_bytes": int(depth["kernel_bytes"].max()),
            **{key.replace("rss_kb_", "rss_kb_at_peak_"): int(depth[key][i]) for key in depth
               if key.startswith("rss_kb_")}}
