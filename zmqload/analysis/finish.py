"""The report's last steps, on the driver: figures derived from the aggregates already collected
(histogram cells, window counts), with no more Spark jobs: a job costs about a second, the work here
milliseconds (docs/REPORT.md). Each function states its rule; tests/analysis/test_metrics.py holds
them against numpy over the records."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

Row = dict[str, Any]  # one collected aggregate row
Key = tuple[Any, ...]

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..contract import histogram as rule
from ..measure import queue_replay as queue_rule
from ..contract.fates import AMBIGUOUS_TAIL, FATES, TAIL_AMBIGUOUS, TAIL_MID_RUN
from .metrics import ALL, PERCENTILES
from .view_counts import ViewCounts

_HIST_KEYS = ("run", "consumer", "stream", "metric", "bucket")


def _max(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def latency_histograms(pairs: Iterable[Row], others: Iterable[Row] = ()) -> list[Row]:
    """Log-bucket histograms per (run, consumer, stream, metric, bucket): count, exact max and
    sum in it, for RECV_METRICS from `metrics.latency_pairs` rows, plus histograms already in
    that shape (`others`: the stall and round-trip histograms)."""
    out: dict[Key, list[Any]] = {}

    def add(key: Key, n: int, mx: Any, sm: Any) -> None:
        h = out.setdefault(key, [0, None, None])
        h[0] += n
        h[1] = _max(h[1], mx)
        h[2] = sm if h[2] is None else h[2] + (sm or 0)

    for p in pairs:
        view = (p["run"], p["consumer"], p["stream"])
        add((*view, "latency_intended", p["bi"]), p["n"], p["mi"], p["si"])
        add((*view, "latency_sent", p["bs"]), p["n"], p["ms"], p["ss"])
        add(
            (*view, "latency_drained" if p["drain"] else "latency_delivered", p["bi"]),
            p["n"],
            p["mi"],
            p["si"],
        )
    for h in others:
        add(tuple(h[k] for k in _HIST_KEYS), h["count"], h["max"], h["sum"])
    return [dict(zip(_HIST_KEYS, key), count=v[0], max=v[1], sum=v[2]) for key, v in out.items()]


def percentiles(
    hist: Iterable[Row], keys: tuple[str, ...] = ("run", "consumer", "stream", "metric")
) -> list[Row]:
    """Per key: count, mean, max and every PERCENTILES value of histogram rows (count, max,
    sum per bucket). `run`'s rule (contract/histogram.py): the percentile q of n values is the
    value of rank max(1, ceil(q * n)), reported as its bucket's midpoint, capped by the exact
    maximum; so the report's percentiles of a run equal run.json's to the nanosecond."""
    groups: defaultdict[Key, dict[int, list[Any]]] = defaultdict(dict)
    for h in hist:
        cell = groups[tuple(h[k] for k in keys)].setdefault(h["bucket"], [0, None, None])
        cell[0] += h["count"]
        cell[1] = _max(cell[1], h["max"])
        cell[2] = h["sum"] if cell[2] is None else cell[2] + (h["sum"] or 0)
    out = []
    for key, buckets in groups.items():
        order = sorted(buckets)
        counts = np.array([buckets[b][0] for b in order], dtype=np.int64)
        cum = np.cumsum(counts)
        total = int(cum[-1])
        top = None
        for b in order:
            top = _max(top, buckets[b][1])
        sums = [buckets[b][2] for b in order if buckets[b][2] is not None]
        row: dict[str, Any] = dict(zip(keys, key))
        row.update(
            count=total,
            mean=sum(sums) / total if sums and total else None,
            max=None if top is None else float(top),
        )
        for name, q in PERCENTILES:
            i = int(np.searchsorted(cum, rule.rank(rule.ppm(q * 100), total)))
            value = rule.bucket_value(order[i])
            row[name] = float(value if top is None else min(value, top))
        out.append(row)
    return out


def rates_over_time(send_w: Iterable[Row], recv_w: Iterable[Row]) -> list[Row]:
    """Counts per (run, stream, window) (window = t_ns div window_ns, absolute) from
    `metrics.send_windows` and `metrics.recv_windows` rows: offered (send attempts by
    intended time), sent (ok sends by actual send time), received (deliveries to every
    consumer, by receive time) and delivered_sent (the same deliveries by their send time:
    what never arrived, placed by send time, is sent x copies minus delivered_sent; the
    report's fates-over-time plot)."""
    cols = ("offered", "sent", "received", "delivered_sent", "received_bytes")
    out: dict[Key, dict[str, int]] = {}

    def add(run: int, stream: int, window: int, col: str, n: int) -> None:
        row = out.setdefault((run, stream, window), dict.fromkeys(cols, 0))
        row[col] += n

    for s in send_w:
        add(s["run"], s["stream"], s["wi"], "offered", s["n"])
        if s["ok"]:
            add(s["run"], s["stream"], s["ws"], "sent", s["n"])
    for r in recv_w:
        add(r["run"], r["stream"], r["wr"], "received", r["n"])
        add(r["run"], r["stream"], r["wr"], "received_bytes", r["bytes"] or 0)
        add(r["run"], r["stream"], r["ws"], "delivered_sent", r["n"])
    return [{"run": k[0], "stream": k[1], "window": k[2], **v} for k, v in out.items()]


def queue_depth(recv_w: Iterable[Row]) -> list[Row]:
    """Messages in flight at the end of each window, per (run, consumer key, stream) (each
    fan-out consumer has its own queue) and for the whole run (consumer and stream ALL):
    sent by t minus received by t, over messages that eventually arrived (lost ones are
    counted as loss, not as a queue that never drains), from `metrics.recv_windows` rows.
    A view has a row for every window in which one of its messages was sent or received.
    depth_bytes is the depth at the view's mean received size."""
    events: defaultdict[Key, defaultdict[int, list[int]]] = defaultdict(
        lambda: defaultdict(lambda: [0, 0, 0])
    )
    for r in recv_w:
        for view in ((r["run"], r["consumer"], r["stream"]), (r["run"], ALL, ALL)):
            e = events[view]
            e[r["ws"]][0] += r["n"]
            e[r["wr"]][1] += r["n"]
            e[r["wr"]][2] += r["bytes"] or 0
    out: list[Row] = []
    for (run, consumer, stream), by_window in events.items():
        windows = sorted(by_window)
        sent, received, nbytes = (
            np.array([by_window[w][i] for w in windows], dtype=np.int64) for i in range(3)
        )
        depth = np.cumsum(sent) - np.cumsum(received)
        mean_size = int(nbytes.sum()) / max(int(received.sum()), 1)
        out.extend(
            {
                "run": run,
                "consumer": consumer,
                "stream": stream,
                "window": w,
                "depth": int(d),
                "depth_bytes": int(d) * mean_size,
                "mean_size": mean_size,
            }
            for w, d in zip(windows, depth.tolist())
        )
    return out


def queue_depth_stats(depth: Iterable[Row]) -> list[Row]:
    """max / mean / p99 (linear between ranks) of the in-flight depth over a view's windows,
    and the memory that represents, per (run, consumer, stream)."""
    views: defaultdict[Key, list[Row]] = defaultdict(list)
    for d in depth:
        views[(d["run"], d["consumer"], d["stream"])].append(d)
    out = []
    for (run, consumer, stream), rows in views.items():
        values = np.array([d["depth"] for d in rows], dtype=np.int64)
        in_bytes = np.array([d["depth_bytes"] for d in rows], dtype=np.float64)
        out.append(
            {
                "run": run,
                "consumer": consumer,
                "stream": stream,
                "depth_max": int(values.max()),
                "depth_mean": float(values.mean()),
                "depth_p99": float(np.percentile(values, 99)),
                "queued_bytes_max": float(in_bytes.max()),
                "queued_bytes_mean": float(in_bytes.mean()),
                "mean_size": rows[0]["mean_size"],
            }
        )
    return out


def rebin(recv_w: Iterable[Row], factor: int) -> list[Row]:
    """`metrics.recv_windows` rows of one window made into rows of windows `factor` times as long
    (the same as scanning with the longer window: integer division composes)."""
    out: dict[Key, list[int]] = {}
    for r in recv_w:
        cell = out.setdefault(
            (r["run"], r["consumer"], r["stream"], r["ws"] // factor, r["wr"] // factor), [0, 0]
        )
        cell[0] += r["n"]
        cell[1] += r["bytes"] or 0
    return [
        {
            "run": k[0],
            "consumer": k[1],
            "stream": k[2],
            "ws": k[3],
            "wr": k[4],
            "n": v[0],
            "bytes": v[1],
        }
        for k, v in out.items()
    ]


# -- the queue (measure/queue_replay.py) -------------------------------------------------------------------
def _views(run: int, consumer: int, stream: int) -> tuple[Key, ...]:
    """The queues an event counts in: its view's and the run's (all of them together)."""
    own = (run, consumer, stream)
    return (own,) if own == (run, ALL, ALL) else (own, (run, ALL, ALL))


def queue_thresholds(
    loss: Iterable[ViewCounts], recv_sum: Iterable[Row], closed: dict[tuple[int, int], int]
) -> tuple[dict[Key, int], dict[Key, int]]:
    """Which never-arrived messages queued, per view (`fates`' counts): ({view: first seq}, {view:
    when they left, ns}). Tail drops are the ok sends after the view's last arrival (seq > seq_max;
    the drain completed) and leave when their producer closed (`closed`: {(run, stream): ns});
    stranded and unknown ones are the unreceived sends at or above the certain line (`limit`; 0
    when the view received nothing) and never leave (nor do tail drops whose producer's close the
    record does not know). Start and mid-run drops leave at their send
    time: they never queued."""
    rs = {(r["run"], r["consumer"], r["stream"]): r for r in recv_sum}
    firsts: dict[Key, int] = {}
    leaves: dict[Key, int] = {}
    for row in loss:
        key = (row.run, row.consumer, row.stream)
        got = rs.get(key)
        if row.dropped_tail and got is not None:
            firsts[key] = got["seq_max"] + 1
            if closed.get(
                (row.run, row.stream)
            ):  # else no close is known: they stay, as `run` keeps them
                leaves[key] = closed[(row.run, row.stream)]
        elif row.stranded + row.unknown:
            firsts[key] = (got.get("limit") or 0) if got is not None else 0
    return firsts, leaves


def time_bins(rows: pa.Table, column: str = "t_sent_ns") -> list[Row]:
    """`metrics.time_bins` of rows already on the driver."""
    if not len(rows):
        return []
    binned = rows.append_column("bin", pc.divide(rows.column(column), queue_rule.BIN_NS))
    counted = binned.group_by(["run", "consumer", "stream", "bin"]).aggregate([("bin", "count")])
    return [{**r, "n": r.pop("bin_count")} for r in counted.to_pylist()]


def queue_bins(
    recv_w: Iterable[Row], unreceived: Iterable[Row], leaves: dict[Key, int]
) -> tuple[dict[Key, queue_rule.Bins], dict[Key, float], dict[Key, int]]:
    """Per view (run, consumer key, stream) and per run (ALL, ALL): the messages that entered and
    left its queue per millisecond (measure/queue_replay.py), from `metrics.recv_windows` rows made with
    the queue's bin (the arrived: in at their send time, out at their receive time) and
    `metrics.time_bins` rows of `metrics.unreceived_sends` (in at their send time; the tail drops
    out at their producer's close, `leaves`). Also each view's mean received size and how many
    never-arrived messages left at a close (per view, to replay them)."""
    entered: defaultdict[Key, defaultdict[int, int]] = defaultdict(lambda: defaultdict(int))
    left: defaultdict[Key, defaultdict[int, int]] = defaultdict(lambda: defaultdict(int))
    size: defaultdict[Key, list[int]] = defaultdict(lambda: [0, 0])
    for r in recv_w:
        for view in _views(r["run"], r["consumer"], r["stream"]):
            entered[view][r["ws"]] += r["n"]
            left[view][r["wr"]] += r["n"]
            size[view][0] += r["bytes"] or 0
            size[view][1] += r["n"]
    closing: defaultdict[Key, int] = defaultdict(int)
    for u in unreceived:
        own = (u["run"], u["consumer"], u["stream"])
        for view in _views(*own):
            entered[view][u["bin"]] += u["n"]
        if own in leaves:
            closing[own] += u["n"]
    for own, n in closing.items():
        for view in _views(*own):
            left[view][int(leaves[own] // queue_rule.BIN_NS)] += n
    bins = {}
    for view in set(entered) | set(left):
        b = queue_rule.Bins.of(entered.get(view, {}), left.get(view, {}))
        if b is not None:
            bins[view] = b
    mean_size = {view: nbytes / max(n, 1) for view, (nbytes, n) in size.items()}
    return bins, mean_size, dict(closing)


REPLAY_EVENTS = 4_000_000
"""The most events one piece of the exact peak's replay brings to the driver (about 100 MB):
the report's memory does not grow with the run (fewer, larger pieces than the run's own
measure/queue_replay.REPLAY_EVENTS: each piece is a Spark scan)."""


def replay_pieces(
    bins: dict[Key, queue_rule.Bins], budget: int | None = None
) -> list[dict[int, list[int]]]:
    """The bins any queue must replay event by event for its exact peak, in pieces of at most
    `budget` events each (REPLAY_EVENTS unless given; measure/queue_replay.py's `pieces`), in time order:
    [{run: [bin]}]. A run's events in a bin are counted from its all-queues bins."""
    wanted: defaultdict[int, set[int]] = defaultdict(set)
    for (run, _, _), b in bins.items():
        wanted[run].update(queue_rule.candidate_bins(b).tolist())
    cost = []
    for run, picked in wanted.items():
        whole = bins.get((run, ALL, ALL))
        for k in picked:
            n = (
                0
                if whole is None or not 0 <= k - whole.first < len(whole.entered)
                else int(whole.entered[k - whole.first] + whole.left[k - whole.first])
            )
            cost.append((k, run, n))
    return queue_rule.pieces(cost, REPLAY_EVENTS if budget is None else budget)


class PeakReplay:
    """Every queue's exact peak (measure/queue_replay.py), replayed a piece of candidate bins at a time
    (`replay_pieces`): `add` each piece's events, then `peaks`."""

    def __init__(
        self,
        bins: dict[Key, queue_rule.Bins],
        unreceived: pa.Table | None,
        leaves: dict[Key, int],
        closing: dict[Key, int],
    ) -> None:
        self.bins = bins
        self.depth = {view: b.depth() for view, b in bins.items()}
        self.replayed: defaultdict[Key, list[queue_rule.Replayed]] = defaultdict(list)
        self.unreceived = unreceived  # (run, consumer, stream, t_sent_ns) in the candidate bins
        self.closing = [(own, leaves[own], n) for own, n in closing.items()]

    def add(self, piece: dict[int, list[int]], events: pa.Table) -> None:
        """`events`: `metrics.recv_events_in_bins` over `piece`, as a table."""
        ev = _by_run(events, ("consumer", "stream", "t_sent_ns", "t_recv_ns"))
        un = _by_run(self.unreceived, ("consumer", "stream", "t_sent_ns"))
        by_run: defaultdict[int, list[Key]] = defaultdict(list)
        for view in self.bins:
            if view[0] in piece:
                by_run[view[0]].append(view)
        for run, views in by_run.items():
            e, u = ev(run), un(run)
            only = np.asarray(piece[run], np.int64)
            for view in views:
                if view == (run, ALL, ALL):
                    mine, u_mine = (
                        np.ones(len(e["stream"][0]), bool),
                        np.ones(len(u["stream"][0]), bool),
                    )
                else:
                    mine = (e["consumer"][0] == view[1]) & (e["stream"][0] == view[2])
                    u_mine = (u["consumer"][0] == view[1]) & (u["stream"][0] == view[2])
                sent, has_sent = e["t_sent_ns"]
                recv, has_recv = e["t_recv_ns"]
                entered = np.concatenate([sent[mine & has_sent], u["t_sent_ns"][0][u_mine]])
                left = [recv[mine & has_recv]]
                left += [
                    np.full(n, at, np.int64) for own, at, n in self.closing if view in _views(*own)
                ]
                b = self.bins[view]
                self.replayed[view].append(
                    queue_rule.replay(b, self.depth[view], entered, np.concatenate(left), only)
                )

    def peaks(self) -> dict[Key, queue_rule.Peak]:
        return {
            view: queue_rule.peak_of(b, self.depth[view], self.replayed.get(view, []))
            for view, b in self.bins.items()
        }


Columns = dict[str, tuple[np.ndarray, np.ndarray]]  # name -> (int64 values, nulls as 0; valid)


def _by_run(table: pa.Table | None, names: tuple[str, ...]) -> Any:
    """A function: run -> that run's rows as Columns."""
    if table is None or not len(table):
        none = (np.zeros(0, np.int64), np.zeros(0, bool))
        return lambda run: {name: none for name in names}
    runs = table.column("run").to_numpy().astype(np.int64)
    order = (
        np.argsort(runs, kind="stable")
        if runs[0] != runs[-1] or np.any(runs != runs[0])
        else slice(None)
    )
    runs = runs[order]
    cols = {
        name: (
            pc.fill_null(table.column(name), 0).to_numpy().astype(np.int64)[order],
            pc.is_valid(table.column(name)).to_numpy(zero_copy_only=False)[order],
        )
        for name in names
    }

    def rows(run: int) -> Columns:
        lo, hi = int(np.searchsorted(runs, run, "left")), int(np.searchsorted(runs, run, "right"))
        return {name: (v[lo:hi], ok[lo:hi]) for name, (v, ok) in cols.items()}

    return rows


def queue_stats(
    bins: dict[Key, queue_rule.Bins],
    peaks: dict[Key, queue_rule.Peak],
    mean_size: dict[Key, float],
    t0_ns: dict[int, int] | None = None,
) -> list[Row]:
    """Per queue: its peak (depth_max, the most messages in flight at any instant, and when,
    depth_peak_at_s, seconds since the run's t0), the mean and p99 (linear between ranks) of the
    depth at the end of each millisecond from its first event to its last, and the memory those
    represent at the view's mean received size (payload only)."""
    out = []
    for (run, consumer, stream), b in bins.items():
        depth = b.depth()
        peak = peaks[(run, consumer, stream)]
        size = mean_size.get((run, consumer, stream), 0.0)
        base = (t0_ns or {}).get(run) or b.first * queue_rule.BIN_NS
        out.append(
            {
                "run": run,
                "consumer": consumer,
                "stream": stream,
                "depth_max": peak.messages,
                "depth_peak_at_s": None if peak.t_ns is None else (peak.t_ns - base) / 1e9,
                "depth_mean": float(depth.mean()),
                "depth_p99": float(np.percentile(depth, 99)),
                "queued_bytes_max": peak.messages * size,
                "queued_bytes_mean": float(depth.mean()) * size,
                "mean_size": size,
            }
        )
    return out


def queue_windows(
    bins: dict[Key, queue_rule.Bins], window_ns: int, mean_size: dict[Key, float]
) -> list[Row]:
    """The depth per report window, for the plots: per queue and window, the deepest of the
    millisecond ends in it (`depth`; the exact peak is `queue_stats`'), with its bytes at the
    queue's mean received size. Windows shorter than a millisecond get the millisecond's."""
    out: list[Row] = []
    for (run, consumer, stream), b in bins.items():
        depth = b.depth()
        ends = (b.first + np.arange(len(depth), dtype=np.int64) + 1) * queue_rule.BIN_NS - 1
        windows = ends // window_ns
        starts = np.flatnonzero(np.concatenate(([True], windows[1:] != windows[:-1])))
        deepest = np.maximum.reduceat(depth, starts)
        size = mean_size.get((run, consumer, stream), 0.0)
        out.extend(
            {
                "run": run,
                "consumer": consumer,
                "stream": stream,
                "window": int(w),
                "depth": int(d),
                "depth_bytes": int(d) * size,
                "mean_size": size,
            }
            for w, d in zip(windows[starts].tolist(), deepest.tolist())
        )
    return out


# The send outcome columns of `metrics.send_counts`, the same for every consumer of a stream.
_SEND_COLUMNS = (
    "attempted",
    "sent",
    "sent_bytes",
    "eagain",
    "timeout",
    "errors",
    "t_first_intended_ns",
    "t_last_intended_ns",
    "t_first_send_ns",
    "t_last_send_ns",
)
_ZERO_IF_ABSENT = (
    "received",
    "unique",
    "duplicates",
    "drained",
    "sent_before_first",
    "sent_after_last",
    "sent_below_limit",
    "got_below_limit",
)


def fates(
    counts: Iterable[Row],
    recv_sum: Iterable[Row],
    views: Iterable[tuple[int, int, bool, str, bool]],
    dead_streams: dict[int, list[int]] | None = None,
    at_reset: dict[Key, tuple[int, int]] | None = None,
    at_restart: dict[Key, tuple[int, int]] | None = None,
) -> list[ViewCounts]:
    """Per (run, consumer, stream): what was sent, what arrived, and the fate of every sent
    message, by the rules of zmqload/measure/reconcile.py (restated here on counts, not imported:
    analysis/ reads records only). The identity sent = the sum of
    zmqload.contract.fates.FATES holds per row.

    `counts` are `metrics.send_counts` rows, `recv_sum` `metrics.recv_summary` rows with the
    view's certain line (`limit`: unreceived seqs below it cannot still be queued; None when
    the drain completed, so every missing message is a drop) and `got_below_limit` (distinct
    received below it). `views` are (run, consumer, completed, tail_placement, died): ALL for
    non-fan-out runs, every consumer index for fan-out runs (so a consumer that got nothing
    still shows); completed = the drain completed, tail_placement = where drops after the
    last arrival happened as the run decided it (zmqload.contract.fates: mid-run folds them
    into dropped_mid; ambiguous keeps them in dropped_tail and counts them again in
    dropped_tail_ambiguous), died = a worker on the view's path died (its consumer, any
    consumer for round robin, a proxy). `dead_streams`: {run number: streams whose producer died}.

    A message counts as sent when its send call succeeded (status 0); EAGAIN / timeout drops
    are the sender's, counted apart. Missing messages (sent - unique) are placed by seq:
    start = before the first arrival, tail = after the last, mid = in between; with a drain
    cut short only those below the certain line are drops, the rest is stranded. Nothing
    received: all dropped at the start, or all stranded. What is not a drop is `unknown`
    instead of stranded when a worker on its path died (run.json's salvaged.died).
    `at_reset`: {(run, stream, consumer): (start, mid)}, the drops of each kind that lie in the
    view's connection-reset regions (contract/fates.py reset_region): `dropped_reset` instead.
    `at_restart`: the same of the view's restart regions (contract/fates.py restart_region, disjoint
    from the reset regions): `dropped_restart` instead.
    """
    counts = list(counts)
    per_stream: dict[Key, Row] = {}
    for c in counts:
        s = per_stream.setdefault((c["run"], c["stream"]), dict.fromkeys(_SEND_COLUMNS))
        for col in _SEND_COLUMNS:
            if s[col] is None:
                s[col] = c[col]
    got = {(c["run"], c["stream"], c["consumer"]): c for c in counts if c["consumer"] is not None}
    rs = {(r["run"], r["stream"], r["consumer"]): r for r in recv_sum}
    dead = {(run, s) for run, streams in (dead_streams or {}).items() for s in streams}
    out: list[ViewCounts] = []
    for run, consumer, completed, placement, died in views:
        for (srun, stream), sends in per_stream.items():
            if srun != run:
                continue
            key = (run, stream, consumer)
            r: Row = rs.get(key, {})
            mine: Row = got.get(key, {})
            n = {col: r.get(col) or mine.get(col) or 0 for col in _ZERO_IF_ABSENT}
            limit, seq_min = r.get("limit"), r.get("seq_min")
            # the sends in the view: with topics, those of the consumer's topics (metrics.subscribed)
            expected = mine["expected"] if "expected" in mine else sends["sent"]
            lost = max(expected - n["unique"], 0)
            before, after = n["sent_before_first"], n["sent_after_last"]
            below, got_below = n["sent_below_limit"], n["got_below_limit"]
            # the certain line at or below the first arrival: every send below it is a start drop
            line_first = None if limit is None or seq_min is None else limit <= seq_min
            if n["unique"] == 0:
                start, mid, tail = (lost if completed else 0), 0, 0
            elif completed:
                start, mid, tail = before, lost - before - after, after
            else:  # drain cut short: the certain line L; start below min(first, L), mid in [first, L)
                start = below if line_first else before
                mid = below - before - got_below if line_first is False else 0
                tail = 0
            if placement == TAIL_MID_RUN:
                mid, tail = mid + tail, 0
            reset_start, reset_mid = (at_reset or {}).get(key, (0, 0))
            away_start, away_mid = (at_restart or {}).get(key, (0, 0))
            start, mid = start - reset_start - away_start, mid - reset_mid - away_mid
            died = bool(died) or (run, stream) in dead
            dropped = start + mid + tail + reset_start + reset_mid + away_start + away_mid
            out.append(
                ViewCounts(
                    run=run,
                    stream=stream,
                    consumer=consumer,
                    **sends,
                    received=n["received"],
                    unique=n["unique"],
                    duplicates=n["duplicates"],
                    drained=n["drained"],
                    expected=expected,
                    lost=lost,
                    delivered=n["unique"] - n["drained"],
                    dropped_start=start,
                    dropped_mid=mid,
                    dropped_tail=tail,
                    dropped_reset=reset_start + reset_mid,
                    dropped_restart=away_start + away_mid,
                    dropped=dropped,
                    dropped_tail_ambiguous=tail if placement == TAIL_AMBIGUOUS else 0,
                    stranded=0 if died else lost - dropped,
                    unknown=lost - dropped if died else 0,
                    loss_ratio=lost / expected if expected else 0.0,
                    dropped_sender=(sends["eagain"] or 0) + (sends["timeout"] or 0),
                )
            )
    return out


SERVICE_COLUMNS = ("unanswered", "echoed", "by_order")
"""A service's figures beside the send counts (req-rep with --role producer)."""


def answered(rows: list[ViewCounts], answers: dict[tuple[int, int], Row]) -> None:
    """A service's rows (in place): its answers (`metrics.answers`, by (run, stream)) stand for the
    receipts, as the judge reads them (contract/judge.py): received = unique = answered, lost =
    unanswered = sent - answered; no message has a fate (the service is the user's: nothing
    reaches a consumer of zmqload's), as in run.json."""
    for row in rows:
        a = answers.get((row.run, row.stream), {})
        got, echoed = a.get("answered") or 0, a.get("echoed") or 0
        sent = row.sent or 0
        for fate in (*FATES, "dropped", AMBIGUOUS_TAIL):
            setattr(row, fate, 0)
        row.received = row.unique = got
        row.duplicates = row.reordered = 0
        row.lost = row.unanswered = max(sent - got, 0)
        row.echoed, row.by_order = echoed, got - echoed
        row.loss_ratio = row.lost / sent if sent else 0.0
        row.t_first_recv_ns, row.t_last_recv_ns = (
            a.get("t_first_reply_ns"),
            a.get("t_last_reply_ns"),
        )
        row.bytes = None
