"""Figures as base64 PNG (matplotlib, Agg backend) from the collected aggregates."""

from __future__ import annotations

import base64
import io
import math
from collections import defaultdict
from typing import Any, Optional, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import Formatter, FuncFormatter, MaxNLocator  # noqa: E402

import numpy as np  # noqa: E402

from ..analysis.verdicts import fmt_rate, fmt_us, key_text, offered  # noqa: E402
from ..analysis.summary_row import ALL, SummaryRow  # noqa: E402
from ..analysis.verdict_group import VerdictGroup  # noqa: E402
from ..contract.fates import TAIL_AMBIGUOUS, TAIL_MID_RUN  # noqa: E402
from ..contract.histogram import bucket_value  # noqa: E402
from ..contract.run_record import RunRecord  # noqa: E402
from ..contract.search_record import ProbeEntry, SearchEntry  # noqa: E402
from ..contract.states import DrainEnd  # noqa: E402
from ..contract.words import words_for  # noqa: E402

COLORS = {
    "offered": "#9e9e9e",
    "sent": "#1f77b4",
    "received": "#2ca02c",
    "latency_intended": "#d62728",
    "latency_sent": "#1f77b4",
    "stall": "#ff7f0e",
    "latency_delivered": "#2ca02c",
    "latency_drained": "#8c564b",
}
LABELS = {
    "latency_intended": "latency from intended send (no coordinated omission)",
    "latency_sent": "latency from actual send",
    "stall": "sender stall (actual - intended)",
    "latency_delivered": "  of it, delivered while the consumers worked",
    "latency_drained": "  of it, drained (how long the backlog waited)",
}


DPI = 90


def _png(fig: Figure) -> str:
    """The figure cropped to what it draws, as savefig's bbox_inches="tight" crops it, with
    the crop measured once: "tight" draws the whole figure once more just to measure it."""
    buf = io.BytesIO()
    fig.set_dpi(DPI)
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]  # Agg's (use("Agg") above)
    crop = fig.get_tightbbox(renderer)
    pad = matplotlib.rcParams["savefig.pad_inches"]
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches=crop.padded(pad))
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _si(x: float, _: object = None) -> str:
    """1.5k, 3.36M: three significant digits at most (an axis tick or a legend's rate)."""
    for f, s in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= f:
            return f"{x / f:.3g}{s}"
    return f"{x:.3g}"


LATENCY_UNITS = ((1e6, "s"), (1e3, "ms"), (1.0, "µs"))


class LatencyTicks(Formatter):
    """A latency axis's ticks (values in µs) in one unit for the whole axis, the one of the
    middle of its view (log scale: the geometric middle): '2 ms, 5 ms, 10 ms, 100 ms', never
    '5,000 µs' beside '10 ms'."""

    def unit(self) -> tuple[float, str]:
        lo, hi = sorted(self.axis.get_view_interval()) if self.axis is not None else (1.0, 1.0)
        middle = math.sqrt(max(lo, 1e-3) * max(hi, 1e-3))
        return next(((f, u) for f, u in LATENCY_UNITS if middle >= f), LATENCY_UNITS[-1])

    def __call__(self, us: float, pos: object = None) -> str:
        f, unit = self.unit()
        return f"{us / f:,.4g} {unit}"


MOST_STEPS = 200  # windows drawn per run at most: longer runs are drawn in merged windows
# Which times each throughput series counts by, and the span of those times in the run row.
SERIES = {
    "offered": ("offered (by intended time)", "t_first_intended_ns", "t_last_intended_ns"),
    "sent": ("achieved send", "t_first_send_ns", "t_last_send_ns"),
    "received": ("received", "t_first_recv_ns", "t_last_recv_ns"),
}


def throughput_series(
    rates: list[dict[str, Any]],
    run: str,
    window_ns: int,
    row: SummaryRow | None = None,
    t0_ns: int | None = None,
) -> dict[str, Any]:
    """The throughput plot's data: per series (offered, sent, received), the window edges in
    seconds since t0 (default: the first intended send) and the rate in each window.

    A window only partly inside the series' span (its first / last time in `row`, widened by
    half the mean interval between its messages) is divided by the time it covers, not by its
    length, so the first and last windows are not
    drawn as dips; one covering less than half a window is merged into its neighbour, so a
    sliver of a few messages is not drawn as a spike either. Windows inside the span
    without a message are 0. Long runs are drawn in MOST_STEPS windows at most, each a
    whole number of the analysis windows. {"window_ns": drawn window, "series": {name:
    (edges, rates)}}."""
    rows = [r for r in rates if r["run"] == run]
    if not rows:
        return {"window_ns": window_ns, "series": {}}
    row = row or SummaryRow(run=run)
    counts: dict[str, defaultdict[int, int]] = {k: defaultdict(int) for k in SERIES}
    for r in rows:
        for k in SERIES:
            counts[k][r["window"]] += r[k] or 0
    first_w = min(r["window"] for r in rows)
    last_w = max(r["window"] for r in rows)
    factor = max(1, math.ceil((last_w - first_w + 1) / MOST_STEPS))
    width = window_ns * factor
    origin = first_w * window_ns
    t0 = t0_ns if t0_ns is not None else row.t_first_intended_ns or origin
    series = {}
    for k, (_, first_key, last_key) in SERIES.items():
        per = counts[k]
        windows = [w for w, n in per.items() if n]
        if not windows:
            continue
        first, last = row.column(first_key), row.column(last_key)
        start: int = first if first is not None else min(windows) * window_ns
        end: int = last + 1 if last is not None else (max(windows) + 1) * window_ns
        total = sum(per.values())
        if first is not None and last is not None and total > 1 and last > first:
            # each message stands for the mean interval around it, so an edge window's rate is
            # off by half a message at most (from its first message to the boundary: by one)
            half = (last - first) // (2 * (total - 1))
            start, end = first - half, last + half + 1
        start = min(
            start, (min(windows) + 1) * window_ns - 1
        )  # the span holds every counted window
        end = max(end, max(windows) * window_ns + 1)
        n_per_bin: defaultdict[int, int] = defaultdict(int)
        for w, n in per.items():
            n_per_bin[(w * window_ns - origin) // width] += n
        bins = range((start - origin) // width, (end - 1 - origin) // width + 1)
        # [from, to) of each bin inside the span, and its count
        cells = [
            [
                max(origin + b * width, start),
                min(origin + (b + 1) * width, end),
                n_per_bin.get(b, 0),
            ]
            for b in bins
        ]
        if len(cells) > 1 and cells[0][1] - cells[0][0] < width / 2:
            cells[1] = [cells[0][0], cells[1][1], cells[0][2] + cells[1][2]]
            cells.pop(0)
        if len(cells) > 1 and cells[-1][1] - cells[-1][0] < width / 2:
            cells[-2] = [cells[-2][0], cells[-1][1], cells[-2][2] + cells[-1][2]]
            cells.pop()
        if len(cells) == 1 and cells[0][1] - cells[0][0] < width:
            cells[0][1] = cells[0][0] + width  # a span shorter than a window: its count per window
        edges = [(c[0] - t0) / 1e9 for c in cells] + [(cells[-1][1] - t0) / 1e9]
        series[k] = (edges, [c[2] * 1e9 / (c[1] - c[0]) for c in cells])
    return {"window_ns": width, "series": series}


def throughput(
    rates: list[dict[str, Any]],
    run: str,
    window_ns: int,
    row: SummaryRow | None = None,
    t0_ns: int | None = None,
    paced: bool = True,
) -> Optional[str]:
    """The throughput plot; an unpaced run (`paced` False) offers no rate: no offered line."""
    data = throughput_series(rates, run, window_ns, row, t0_ns)
    if not paced:
        data["series"].pop("offered", None)
    return _png(throughput_figure(data)) if data["series"] else None


def throughput_figure(data: dict[str, Any]) -> Figure:
    fig, ax = plt.subplots(figsize=(10, 3.4))
    # offered last and on top, dashed and dark: it is the reference the others are read against
    style: dict[str, dict[str, Any]] = {
        "sent": dict(color=COLORS["sent"], lw=2.6, alpha=0.75),
        "received": dict(color=COLORS["received"], lw=1.6),
        "offered": dict(color="#222", lw=1.4, ls=(0, (4, 3)), zorder=5),
    }
    for k in ("sent", "received", "offered"):
        if k in data["series"]:
            edges, values = data["series"][k]
            ax.stairs(values, edges, baseline=None, label=SERIES[k][0], **style[k])
    top, peak = y_top(data)
    if peak:  # e.g. a fast drain's few ms at 30x the run's rate: named, so the run stays readable
        ax.text(
            0.99,
            0.97,
            f"{peak[0]} peaks above the scale: {_si(peak[1])}/s at {peak[2]:.3g} s",
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=8,
            color="#555",
        )
    ax.set_xlabel("seconds since the first scheduled send")
    ax.set_ylabel("messages / s")
    ax.set_ylim(0, top)
    ax.yaxis.set_major_formatter(FuncFormatter(_si))
    ax.set_title(
        f"Throughput over time ({duration_text(data['window_ns'])} windows; first and last by the time they "
        "cover)"
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3, frameon=False)
    return fig


PEAK_SCALE = (
    3.0  # a window above 3x the 95th percentile of all windows is not allowed to set the scale
)


def y_top(data: dict[str, Any]) -> tuple[float, tuple[str, float, float] | None]:
    """The throughput plot's y limit, and the highest peak left above it (series, rate, s) if any."""
    values = [
        (v, name, (e[i] + e[i + 1]) / 2)
        for name, (e, vs) in data["series"].items()
        for i, v in enumerate(vs)
    ]
    if not values:
        return 1.0, None
    highest = max(values)
    typical = float(np.percentile([v for v, _, _ in values], 95))
    if typical > 0 and highest[0] > PEAK_SCALE * typical:
        return PEAK_SCALE * typical * 1.05, (SERIES[highest[1]][0], highest[0], highest[2])
    return (highest[0] * 1.12) or 1.0, None


def duration_text(ns: float) -> str:
    return (
        f"{ns / 1e9:g} s" if ns >= 1e9 else f"{ns / 1e6:g} ms" if ns >= 1e6 else f"{ns / 1e3:g} µs"
    )


FLOOR_US = 0.1  # values below (0 ns stalls: a send on time) are drawn here on the log axis
# Line styles so coinciding curves stay visible (unpaced runs: intended == actual send).
STYLES: dict[str, dict[str, Any]] = {
    "latency_intended": dict(lw=3.2, alpha=0.55),
    "latency_sent": dict(lw=1.4, ls="--"),
    "stall": dict(lw=1.4),
}


def latency_curve(hist: list[dict[str, Any]], run: str) -> Optional[str]:
    """Value by percentile on log-log axes, up to the last percentile the count resolves
    (1 - 1/count); a metric that is zero throughout (no sender stall) is named, not drawn."""
    rows = [h for h in hist if h["run"] == run and h["stream"] == ALL]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(10, 3.6))
    x_max, y_min, notes = 10.0, None, []
    for metric in ("latency_intended", "latency_sent", "stall"):
        hs = sorted((h for h in rows if h["metric"] == metric), key=lambda h: h["bucket"])
        total = sum(h["count"] for h in hs)
        if not total:
            continue
        if max(max(h["max"] or 0, 0) for h in hs) <= 0:
            notes.append(f"{LABELS[metric]}: 0 throughout")
            continue
        xs, ys, cum = [], [], 0
        for h in hs:
            cum += h["count"]
            xs.append(total / max(total - cum, 1))  # 1 / (1 - q), the last one capped at count
            v = min(bucket_value(h["bucket"]), max(h["max"], 0))
            ys.append(max(v / 1e3, FLOOR_US))
        xs, ys = [1.0] + xs, [ys[0]] + ys
        x_max = max(x_max, xs[-1])
        y_min = min(ys) if y_min is None else min(y_min, min(ys))
        ax.step(xs, ys, where="pre", label=LABELS[metric], color=COLORS[metric], **STYLES[metric])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = [t for t in (2, 10, 100, 1000, 10000, 100000, 1000000, 10000000) if t <= x_max * 1.01]
    names = ["50%", "90%", "99%", "99.9%", "99.99%", "99.999%", "99.9999%", "99.99999%"]
    ax.set_xticks(ticks)
    ax.set_xticklabels(names[: len(ticks)])
    ax.set_xlim(1, x_max * 1.2)
    if y_min is not None:
        ax.set_ylim(bottom=y_min / 1.5)
        if y_min <= FLOOR_US:
            notes.append(f"values under {FLOOR_US:g} µs drawn at {FLOOR_US:g} µs")
    ax.set_xlabel("percentile")
    ax.set_ylabel("latency")
    ax.yaxis.set_major_formatter(LatencyTicks())
    ax.set_title("Latency by percentile (HdrHistogram style)")
    ax.grid(alpha=0.3, which="both")
    if notes:
        ax.text(
            0.99,
            0.03,
            "; ".join(notes),
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize=8,
            color="#555",
        )
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    return _png(fig)


BYTE_UNITS = ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1, "bytes"))


def byte_unit(most_bytes: float) -> tuple[int, str]:
    """The unit an axis reaching `most_bytes` reads best in: 2 KiB, not 0.0020 MiB."""
    return next(((f, name) for f, name in BYTE_UNITS if most_bytes >= f), BYTE_UNITS[-1])


def messages_axis(ax: Axes, top: float, mean_size: float | None = None) -> None:
    """A y axis of message counts: whole-number ticks only (half a message is not a
    depth), from 0 to at least 1; with the queued bytes on the right in a unit fitting them."""
    ax.set_ylim(0, max(top * 1.1, 1))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=2))
    ax.yaxis.set_major_formatter(FuncFormatter(_si))
    ax.set_ylabel("messages in flight")
    if mean_size:
        size = mean_size
        factor, unit = byte_unit(max(top, 1) * size)

        def to_bytes(depth: Any) -> Any:
            return depth * size / factor

        def to_depth(queued: Any) -> Any:
            return queued * factor / size

        sec = ax.secondary_yaxis("right", functions=(to_bytes, to_depth))
        sec.set_ylabel(f"{unit} queued (x mean size {mean_size:,.0f} B)")
        sec.yaxis.set_major_formatter(FuncFormatter(_si))


def queue_depth(
    depth: list[dict[str, Any]],
    run: str,
    window_ns: int,
    t0_ns: int | None = None,
    peak: tuple[Optional[int], Optional[float]] = (None, None),
) -> Optional[str]:
    """The run's queue (measure/queue_replay.py) per window: the deepest of the millisecond ends in it;
    `peak` (messages, seconds since t0): the exact peak, marked."""
    rows = [d for d in depth if d["run"] == run and d["stream"] == ALL]
    if not rows:
        return None
    t0 = t0_ns if t0_ns is not None else min(d["window"] for d in rows) * window_ns
    t = [(d["window"] * window_ns - t0) / 1e9 for d in rows]  # the start of each window
    fig, ax = plt.subplots(figsize=(10, 3.0))
    values = [max(d["depth"], 0) for d in rows]
    ax.fill_between(t, values, step="post", alpha=0.35, color="#9467bd")
    ax.step(t, values, where="post", color="#9467bd")
    messages, at_s = peak
    if messages is not None and at_s is not None:
        ax.plot(
            [at_s],
            [messages],
            marker="v",
            color="#d62728",
            ls="none",
            label=f"peak {messages:,} at {at_s:.3f} s",
        )
        ax.legend(fontsize=8, loc="upper left")
    ax.set_xlabel("seconds since the first scheduled send")
    messages_axis(ax, max(values + [messages or 0]), rows[0].get("mean_size"))
    ax.set_title(
        f"Queue depth over time: sent - received - dropped (deepest millisecond in each "
        f"{duration_text(window_ns)} window)"
    )
    ax.grid(alpha=0.3)
    return _png(fig)


def _group_of(capacity: list[VerdictGroup]) -> dict[str, VerdictGroup]:
    """run id -> its group (capacity.capacity_table)."""
    return {rid: g for g in capacity for rid in g.run_ids}


def loss_vs_hwm_series(
    run_rows: list[SummaryRow], capacity: list[VerdictGroup]
) -> dict[str, Any] | None:
    """The loss-vs-HWM plot's data: the HWM settings tested (the x categories, in order) and
    one series per setup (every other grouping key and the offered rate), each a list of
    (category index, loss %) where loss = lost + refused by the sender, % of attempted.
    Points of one series only are ever joined. None without an HWM among the grouping keys, or
    with one HWM setting among the paced runs (nothing to compare)."""
    hwm_keys = [
        k
        for k in ("sndhwm", "rcvhwm", "proxy_sndhwm", "proxy_rcvhwm")
        if capacity and k in capacity[0].key_names
    ]
    if not hwm_keys:
        return None
    group = _group_of(capacity)
    rows = [r for r in run_rows if r.expected and offered(r) and r.run in group]

    def hwm_sort(
        keys: dict[str, Any],
    ) -> tuple[tuple[bool, Any], ...]:  # numeric order, libzmq's default last
        return tuple((keys[k] is None, keys[k] or 0) for k in hwm_keys)

    settings = sorted(
        {tuple((k, group[r.run].keys[k]) for k in hwm_keys) for r in rows},
        key=lambda t: hwm_sort(dict(t)),
    )
    if len(settings) < 2:  # one HWM among the paced runs: nothing to compare along the axis
        return None
    labels = [", ".join(key_text(k, v) for k, v in t) for t in settings]
    series: defaultdict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in rows:
        keys = group[r.run].keys
        rest = ", ".join(key_text(k, v) for k, v in keys.items() if k not in hwm_keys)
        name = f"{rest + ' ' if rest else ''}@ {fmt_rate(offered(r))}"
        refused = r.dropped_sender or 0
        loss = 100 * ((r.lost or 0) + refused) / max((r.expected or 0) + refused, 1)
        series[name].append((settings.index(tuple((k, keys[k]) for k in hwm_keys)), loss))
    return {
        "labels": labels,
        "series": {name: sorted(pts) for name, pts in sorted(series.items())},
        "keys": [k for k in capacity[0].key_names if k not in hwm_keys],
    }


MARKERS = "osD^vP*Xh<>"


def loss_vs_hwm(run_rows: list[SummaryRow], capacity: list[VerdictGroup]) -> Optional[str]:
    """Loss of paced runs against the HWM settings, one series per setup; series are
    shifted sideways a little and marked differently, so equal values stay visible."""
    data = loss_vs_hwm_series(run_rows, capacity)
    if not data or not data["series"]:
        return None
    names = list(data["series"])
    fig, ax = plt.subplots(figsize=(10, 3.6))
    spread = min(0.3, 0.06 * (len(names) - 1))
    for i, name in enumerate(names):
        shift = (i / max(len(names) - 1, 1) - 0.5) * spread * 2 if len(names) > 1 else 0.0
        pts = data["series"][name]
        ax.plot(
            [x + shift for x, _ in pts],
            [y for _, y in pts],
            marker=MARKERS[i % len(MARKERS)],
            ms=7,
            lw=1.2,
            ls="-" if len(pts) > 1 else "none",
            label=name,
            alpha=0.9,
        )
    ax.set_xticks(range(len(data["labels"])))
    ax.set_xticklabels(data["labels"], fontsize=8)
    ax.set_xlim(-0.5, len(data["labels"]) - 0.5)
    top = max(y for pts in data["series"].values() for _, y in pts)
    ax.set_ylim(-0.04 * (top or 1), (top or 1) * 1.12)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:.3g}"))
    ax.set_ylabel("lost + refused (%)")
    ax.set_xlabel("high-water mark")
    ax.set_title("Loss vs high-water mark (paced runs; one line per setup)")
    ax.grid(alpha=0.3)
    ax.legend(
        fontsize=8,
        title=", ".join(data["keys"]) or None,
        title_fontsize=8,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.2),
        ncol=2,
        frameon=False,
    )
    return _png(fig)


def capacity_curves(
    run_rows: list[SummaryRow],
    slo_p99_us: Optional[float],
    capacity: list[VerdictGroup],
    own_p99_us: Sequence[float] = (),
) -> Optional[str]:
    """Achieved vs offered and p99 vs offered, one line per group (named by its keys), paced
    runs only; the bracket [highest clean, lowest failing] is marked on each line. The p99 SLOs
    the runs were made under (`own_p99_us`) and the report's what-if (`slo_p99_us`), each named.
    A capacity search's setting is left out: its probe plots show the same runs, by outcome."""
    group = {rid: g for rid, g in _group_of(capacity).items() if g.search is None}
    lines: defaultdict[str, list[SummaryRow]] = defaultdict(list)
    for r in run_rows:
        if offered(r) and r.recv_rate and r.run in group:
            lines[group[r.run].group].append(r)
    if not lines or max(len(rs) for rs in lines.values()) < 2:
        return None
    by_name = {g.group: g for g in capacity}
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    top = 0
    for i, (name, rs) in enumerate(sorted(lines.items())):
        rs.sort(key=offered)
        x = [offered(r) for r in rs]
        top = max(top, max(x))
        marker = MARKERS[
            i % len(MARKERS)
        ]  # its own marker, so equal points of two groups both show
        (line,) = a1.plot(x, [r.recv_rate for r in rs], marker=marker, ms=7, alpha=0.85, label=name)
        a2.plot(
            x,
            [max(r.latency_intended.p99 or 0, FLOOR_US) for r in rs],
            marker=marker,
            ms=7,
            alpha=0.85,
            color=line.get_color(),
        )
        g = by_name[name]
        for a in (a1, a2):
            if g.highest_clean_rate:
                a.axvline(g.highest_clean_rate, color=line.get_color(), ls=":", lw=1)
            if g.lowest_failing_rate:
                a.axvline(g.lowest_failing_rate, color=line.get_color(), ls="--", lw=1)
    a1.plot([0, top], [0, top], color="#999", ls=":", label="achieved = offered")
    a1.set_xlabel("offered msgs/s")
    a1.set_ylabel("received msgs/s (all consumers)")
    a1.set_title("Achieved vs offered (dotted: highest clean, dashed: lowest failing)", fontsize=9)
    for value in sorted(set(own_p99_us)):
        a2.axhline(
            value, color="#d62728", ls="--", lw=1, label=f"the runs' p99 SLO {fmt_us(value)}"
        )
    if slo_p99_us is not None:
        a2.axhline(
            slo_p99_us, color="#ff7f0e", ls="-.", lw=1, label=f"what-if p99 {fmt_us(slo_p99_us)}"
        )
    a2.set_yscale("log")
    a2.set_xlabel("offered msgs/s")
    a2.set_ylabel("p99 latency from intended send")
    a2.set_title("p99 vs offered")
    for a in (a1, a2):
        a.xaxis.set_major_formatter(FuncFormatter(_si))
        a.grid(alpha=0.3)
    a1.yaxis.set_major_formatter(FuncFormatter(_si))
    keys = ", ".join(capacity[0].key_names) or None
    a2.yaxis.set_major_formatter(LatencyTicks())
    fig.tight_layout()
    # one legend for both, under them: inside, it hid points
    handles = a1.get_legend_handles_labels()[0] + [
        h for h, lab in zip(*a2.get_legend_handles_labels()) if lab.startswith("SLO")
    ]
    fig.legend(
        handles=handles,
        fontsize=8,
        title=keys,
        title_fontsize=8,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=2,
        frameon=False,
    )
    return _png(fig)


AMBIGUOUS_LABEL = "dropped_tail (or mid-run: ambiguous)"
MID_OR_RESET_LABEL = "dropped_mid or dropped_reset"
"""Between arrivals in a run with connection resets: a send window cannot tell a full pipe's drop
from a reset's (the fates table, from the seqs, does)."""
MID_OR_RESTART_LABEL = "dropped_mid or dropped_restart"
"""The same with restarts (--restart), and with resets too the three of them."""
MID_RESET_OR_RESTART_LABEL = "dropped_mid, dropped_reset or dropped_restart"
RESET_STYLE = dict(color="#e377c2", ls="-.", lw=1.2)
RESTART_STYLE = dict(color="#17becf", ls=":", lw=1.4)
FATE_COLORS = {
    "dropped_start": "#8c564b",
    "dropped_mid": "#d62728",
    "dropped_tail": "#ff7f0e",
    AMBIGUOUS_LABEL: "#ffbb78",
    "stranded or dropped": "#7f7f7f",
    "drained": "#1f77b4",
    MID_OR_RESET_LABEL: "#e377c2",
    MID_OR_RESTART_LABEL: "#17becf",
    MID_RESET_OR_RESTART_LABEL: "#9467bd",
}


def mark_resets(ax: Any, record: RunRecord) -> None:
    """The run's connection resets (run.json resets, --reset-at) as vertical lines on a time axis
    in seconds since the first scheduled send."""
    for i, reset in enumerate(record.resets):
        ax.axvline(
            reset.at_s, label="connection reset" if i == 0 else None, zorder=5, **RESET_STYLE
        )


def mark_restarts(ax: Any, record: RunRecord) -> None:
    """The run's restarts (run.json restarts, --restart) as vertical lines on a time axis in seconds
    since the first scheduled send, where each worker's process ended."""
    for i, restart in enumerate(record.restarts):
        ax.axvline(restart.at_s, label="restart" if i == 0 else None, zorder=5, **RESTART_STYLE)


def lost_by_place(
    rows: list[dict[str, Any]], record: RunRecord, copies: int
) -> tuple[dict[str, dict[int, int]], list[int], dict[int, int]]:
    """({place: {send window: messages that never arrived}}, every window, {window: received}).
    Place as the fates: before the first window with an arrival, start; after the last, the
    run's tail placement rule (docs/RECORDS.md: mid-run, ambiguous or at close); else mid;
    'stranded or dropped' when the drain was cut short; with connection resets, mid-run losses are
    'dropped_mid or dropped_reset' (MID_OR_RESET_LABEL), with restarts the same
    (MID_OR_RESTART_LABEL, MID_RESET_OR_RESTART_LABEL)."""
    sent: defaultdict[int, int] = defaultdict(int)
    arrived: defaultdict[int, int] = defaultdict(int)
    received: defaultdict[int, int] = defaultdict(int)
    for r in rows:
        sent[r["window"]] += r["sent"]
        arrived[r["window"]] += r["delivered_sent"]
        received[r["window"]] += r["received"]
    windows = sorted(set(sent) | set(received))
    with_arrivals = [w for w in windows if arrived[w]]
    drain = record.drain
    cut_short = drain is not None and drain.ended is DrainEnd.LIMIT
    # after the last arrival: the run's tail placement rule (docs/RECORDS.md), as in its fates
    placement = drain.tail_placement if drain is not None else None
    mid = {
        (True, False): MID_OR_RESET_LABEL,
        (False, True): MID_OR_RESTART_LABEL,
        (True, True): MID_RESET_OR_RESTART_LABEL,
    }.get((bool(record.resets), bool(record.restarts)), "dropped_mid")
    tail = (
        {TAIL_MID_RUN: mid, TAIL_AMBIGUOUS: AMBIGUOUS_LABEL}.get(placement, "dropped_tail")
        if placement is not None
        else "dropped_tail"
    )
    lost: dict[str, dict[int, int]] = defaultdict(dict)
    for w in windows:
        n = max(sent[w] * copies - arrived[w], 0)
        if not n:
            continue
        place = (
            "stranded or dropped"
            if cut_short
            else "dropped_start"
            if not with_arrivals or w < with_arrivals[0]
            else tail
            if w > with_arrivals[-1]
            else mid
        )
        lost[place][w] = n
    return lost, windows, received


def fates_over_time(
    rates: list[dict[str, Any]], run: str, record: RunRecord, copies: int, window_ns: int
) -> Optional[str]:
    """Per send-time window, messages that never arrived, placed like their fate
    (`lost_by_place`); and per receive-time window, what arrived in the drain. None when
    nothing was lost or drained."""
    rows = [r for r in rates if r["run"] == run]
    if not rows:
        return None
    lost, windows, received = lost_by_place(rows, record, copies)
    w0 = windows[0]
    drain_ns = min((c.t_drain_ns for c in record.consumers if c.t_drain_ns), default=None)
    drained = {
        w: received[w]
        for w in windows
        if drain_ns is not None and w * window_ns >= drain_ns and received[w]
    }
    if not lost and not drained:
        return None
    fig, ax = plt.subplots(figsize=(10, 2.8))
    width = window_ns / 1e9
    t0 = record.schedule.t0_ns if record.schedule is not None else None

    def at(w: int) -> float:
        return (w * window_ns - t0) / 1e9 if t0 is not None else (w - w0) * width

    bottom: defaultdict[int, int] = defaultdict(int)
    for place, per in lost.items():
        xs = sorted(per)
        ax.bar(
            [at(w) for w in xs],
            [per[w] for w in xs],
            width=width,
            align="edge",
            bottom=[bottom[w] for w in xs],
            color=FATE_COLORS[place],
            label=f"{place} (by send time)",
        )
        for w in xs:
            bottom[w] += per[w]
    if drained:  # every window from the first to the last drained one, so a short drain has a width
        xs = list(range(min(drained), max(drained) + 1))
        ax.stairs(
            [drained.get(w, 0) for w in xs],
            [at(w) for w in xs] + [at(xs[-1] + 1)],
            baseline=0,
            color=FATE_COLORS["drained"],
            lw=1.8,
            label="drained (arrived in the drain, by receive time)",
        )
    mark_resets(ax, record)
    mark_restarts(ax, record)
    ax.set_xlabel("seconds since the first scheduled send")
    ax.set_ylabel(f"messages per {duration_text(window_ns)}")
    ax.set_xlim(min(0, at(w0)), at(windows[-1] + 1))  # the whole run, so "when" reads at a glance
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(FuncFormatter(_si))
    ax.set_title(
        f"Where messages went over time: lost by fate, drained ({duration_text(window_ns)} windows)"
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


HWM_SCALE = 4  # an HWM above 4x the peak depth is named, not drawn


def split_parts(transport: str | None) -> tuple[str, ...]:
    """The areas the queue plot splits the depth into: the kernel's part is sampled only for
    tcp connections (zmqload.runner.kernel_queues); over ipc the unix-socket buffers are not, and inproc
    has no kernel part, so those are drawn as one area named for what it holds."""
    if transport == "tcp":
        return ("kernel tcp buffers", "libzmq pipes")
    if transport == "inproc":
        return ("libzmq pipes (inproc: no kernel buffers)",)
    return ("libzmq pipes and unix-socket buffers (the kernel's part is sampled over tcp only)",)


def hwm_lines(
    sndhwm: Optional[int], rcvhwm: Optional[int]
) -> list[tuple[str, int, dict[str, Any]]]:
    """The queue plot's HWM reference lines: (name, value, line style). Equal HWMs are one line
    named for both (two would lie on top of each other, the one drawn last hiding the other);
    different ones differ in dash as well as colour."""
    if sndhwm is not None and sndhwm == rcvhwm:
        return [("SNDHWM = RCVHWM", sndhwm, dict(color="#8c2d04", ls="--"))]
    return [
        (name, hwm, style)
        for name, hwm, style in (
            ("SNDHWM", sndhwm, dict(color="#2ca02c", ls="--")),
            ("RCVHWM", rcvhwm, dict(color="#d62728", ls=(0, (1, 2)))),
        )
        if hwm is not None
    ]


def queue_split(
    depth: list[dict[str, Any]], run: str, run_path: str, record: RunRecord, window_ns: int
) -> Optional[str]:
    """Messages in flight (Spark's depth, of messages that arrived) split into the kernel's tcp
    buffers and libzmq's pipes by zmqload.measure.queue_depth' rule (kernel bytes from the samples / size,
    capped at the depth), with the HWMs as reference lines; one area where the kernel's part
    is not sampled (split_parts)."""
    from ..measure.queue_depth import frame_bytes, kernel_bytes_at, read_samples

    rows = sorted(
        (d for d in depth if d["run"] == run and d["stream"] == ALL), key=lambda d: d["window"]
    )
    if not rows:
        return None
    w = record.workload
    t0 = record.t0_ns or rows[0]["window"] * window_ns
    t = np.array([(d["window"] * window_ns - t0) / 1e9 for d in rows])
    total = np.array([max(d["depth"], 0) for d in rows], dtype=float)
    kernel = np.zeros(len(rows))
    samples = read_samples(run_path)
    if samples:  # the kernel's bytes at the end of each window, as messages, capped at the depth
        ends = np.array([(d["window"] + 1) * window_ns - 1 for d in rows], dtype=np.int64)
        frame = frame_bytes(round(record.mean_size))
        kernel = np.minimum(np.floor(kernel_bytes_at(samples, ends) / frame), total)
    parts = split_parts(w.transport)
    fig, ax = plt.subplots(figsize=(10, 3.0))
    if len(parts) == 2:
        ax.stackplot(
            t,
            kernel,
            total - kernel,
            labels=parts,
            colors=["#17becf", "#9467bd"],
            alpha=0.6,
            step="post",
        )
    else:
        ax.stackplot(t, total, labels=parts, colors=["#9467bd"], alpha=0.6, step="post")
    peak = max(float(total.max()), 1.0)
    shown = []
    for name, hwm, style in hwm_lines(w.sndhwm, w.rcvhwm):
        if hwm <= HWM_SCALE * peak:  # a reference line, not one that squashes the depth flat
            ax.axhline(hwm, lw=1.4, label=f"{name} {hwm:,}", zorder=4, **style)
            shown.append(hwm)
        else:
            ax.plot([], [], lw=1.4, label=f"{name} {hwm:,} (above the scale)", **style)
    mark_resets(ax, record)
    mark_restarts(ax, record)
    ax.set_xlabel("seconds since the first scheduled send")
    messages_axis(ax, max([peak, *shown]))
    ax.set_title(
        ("Queue depth over time, kernel / libzmq" if len(parts) == 2 else "Queue depth over time")
        + f" ({duration_text(window_ns)} windows; messages that arrived; HWMs for reference)"
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=4, frameon=False)
    return _png(fig)


def nice_number(x: object) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        if abs(x) >= 100:
            return f"{x:,.0f}"
        return f"{x:.3g}"
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:,}"
    return str(x)


# -- a capacity search's probes (report/search_answer.py) -----------------------------------------
def si_short(x: Optional[float], _: object = None) -> str:
    """1234567 -> '1.23M', 7071 -> '7.07k', 2.5 -> '2.5': at most 3 significant digits."""
    if x is None or not math.isfinite(x):
        return "-"
    x = float(f"{x:.3g}")  # rounded first, so 999.6 is '1k', not '1000'
    for f, s in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= f:
            return f"{float(f'{x / f:.3g}'):g}{s}"
    return f"{x:g}"


PROBE_STYLES = {  # outcome -> marker style; colour tells pass from fail even without the shape
    "pass": dict(marker="o", color="#2ca02c", label="passed"),
    "fail": dict(marker="X", color="#d62728", label="failed an SLO"),
    "generator": dict(
        marker="^", color="#ff7f0e", label="generator limited (no verdict on the system)"
    ),
}


def _outcome(probe: ProbeEntry) -> str:
    return "generator" if probe.generator_limited else "pass" if probe.passed else "fail"


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Round tick values inside [lo, hi] on a log axis: powers of ten, else 1-2-5 per decade,
    else (a range narrower than a decade, e.g. one probe) denser round values, at most 7."""
    decades = range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
    for subs in ((1,), (1, 2, 5), (1, 1.5, 2, 3, 5, 7), (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8)):
        ticks = [
            float(f"{m * 10.0**d:.3g}") for d in decades for m in subs if lo <= m * 10.0**d <= hi
        ]
        if len(ticks) >= 3:
            return ticks[:: math.ceil(len(ticks) / 7)]
    return [float(f"{v:.2g}") for v in np.geomspace(lo, hi, 5)[1:-1]]


def _log_limits(values: list[float]) -> tuple[float, float]:
    """Log-axis limits around `values` with room on both sides, also for one value."""
    lo, hi = min(values), max(values)
    return lo / 1.6, hi * 1.6


SPREAD = 0.025  # probes at one rate are drawn 2.5% apart (log axis) so each stays visible


def spread_equal(xs: list[float]) -> list[float]:
    """Rates with the probes that share one (a re-run, a retry) moved apart by SPREAD each,
    centred on the rate, in the order run; on a log axis that is the same gap at any rate."""
    out = list(xs)
    for x in set(xs):
        at = [i for i, v in enumerate(xs) if v == x]
        for k, i in enumerate(at):
            out[i] = x * (1 + SPREAD) ** (k - (len(at) - 1) / 2)
    return out


def search_probes(search: SearchEntry, slo_p99_us: float | None, title: str) -> Optional[str]:
    """Achieved vs offered and p99 vs offered for one searched combination: every probe a
    marker by outcome (a re-run ringed), the bracket [highest passing, lowest failing] shaded,
    the p99 SLO as a line. Rates are the probes' figures (all producers); log axes, as the
    search ramps geometrically. None when no probe has figures."""
    from matplotlib.ticker import FixedLocator, NullLocator

    producers = search.producers or 1
    words = words_for(search.workload.pattern, search.workload.role)
    measured = [
        (p, p.figures) for p in search.probes if p.figures is not None and p.figures.offered_rate
    ]
    if not measured:
        return None
    probes = [p for p, _ in measured]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.0))
    xs = spread_equal([f.offered_rate for _, f in measured])
    ys_achieved = [f.throughput_msgs for _, f in measured]
    ys_p99 = [f.p99_us for _, f in measured]
    lo, hi = search.bracket
    for a in (a1, a2):
        if lo is not None and hi is not None and hi > lo:
            a.axvspan(
                lo * producers,
                hi * producers,
                color="#f0c040",
                alpha=0.35,
                lw=0,
                label=f"bracket {si_short(lo * producers)} - {si_short(hi * producers)} msg/s",
            )
        elif lo is not None and hi is not None:  # a bracket of width 0: one rate passed and failed
            a.axvline(
                lo * producers,
                color="#c09000",
                lw=2,
                label=f"bracket at {si_short(lo * producers)} msg/s (width 0)",
            )
        elif lo is not None or hi is not None:  # one end only: no bracket, the end is marked
            end = next(b for b in (lo, hi) if b is not None)
            a.axvline(
                end * producers,
                color="#c09000",
                lw=1.5,
                ls="--",
                label=f"{'highest pass' if lo is not None else 'lowest fail'} {si_short(end * producers)} "
                "(no bracket)",
            )
    for outcome, style in PROBE_STYLES.items():
        pts = [
            (x, ya, yp)
            for p, x, ya, yp in zip(probes, xs, ys_achieved, ys_p99)
            if _outcome(p) == outcome
        ]
        if not pts:
            continue
        a1.scatter(
            [x for x, ya, _ in pts if ya], [ya for _, ya, _ in pts if ya], s=42, zorder=3, **style
        )
        a2.scatter(
            [x for x, _, yp in pts if yp is not None],
            [max(yp, FLOOR_US) for _, _, yp in pts if yp is not None],
            s=42,
            zorder=3,
            **style,
        )
    reruns = [(x, ya, yp) for p, x, ya, yp in zip(probes, xs, ys_achieved, ys_p99) if p.confirm]
    if reruns:
        ring = dict(
            s=150, facecolors="none", edgecolors="#333", linewidths=1.2, zorder=4, label="re-run"
        )
        a1.scatter([x for x, ya, _ in reruns if ya], [ya for _, ya, _ in reruns if ya], **ring)
        a2.scatter(
            [x for x, _, yp in reruns if yp is not None],
            [max(yp, FLOOR_US) for _, _, yp in reruns if yp is not None],
            **ring,
        )
    seen = [v for v in xs + [y for y in ys_achieved if y]] + [b * producers for b in (lo, hi) if b]
    x0, x1 = _log_limits(seen)
    a1.plot([x0, x1], [x0, x1], color="#999", ls=":", lw=1, label="received = offered")
    a1.set_ylim(x0, x1)
    p99s = [max(y, FLOOR_US) for y in ys_p99 if y is not None]
    if slo_p99_us:
        a2.axhline(
            slo_p99_us, color="#d62728", ls="--", lw=1, label=f"SLO p99 {fmt_us(slo_p99_us)}"
        )
        p99s.append(slo_p99_us)
    if p99s:
        a2.set_ylim(*_log_limits(p99s))
    for a in (a1, a2):
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlim(x0, x1)
        for axis, limits in ((a.xaxis, a.get_xlim()), (a.yaxis, a.get_ylim())):
            axis.set_major_locator(FixedLocator(_log_ticks(*limits)))
            axis.set_major_formatter(
                LatencyTicks() if axis is a2.yaxis else FuncFormatter(si_short)
            )
            axis.set_minor_locator(NullLocator())
        a.set_xlabel(
            f"offered {words.rate()}{f' ({producers} producers)' if producers > 1 else ''}"
        )
        a.grid(alpha=0.3, which="both")
    a1.set_ylabel(f"{words.received} {words.rate()}")
    a1.set_title("Achieved vs offered", fontsize=10)
    a2.set_ylabel(f"p99 {words.latency}")
    a2.set_title("p99 vs offered", fontsize=10)
    fig.suptitle(title, fontsize=10)
    handles: dict[
        str, Any
    ] = {}  # one legend for both plots, below them: the markers never hide a probe
    for a in (a1, a2):
        for h, name in zip(*a.get_legend_handles_labels()):
            handles.setdefault(name, h)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="lower center",
        ncol=min(len(handles), 4),
        fontsize=8,
        frameon=False,
    )
    return _png(fig)


def arrivals(
    rates: dict[str, list[tuple[float, float]]],
    window_ns: int,
    title: str = "Arrivals over time",
    since: str = "the first arrival",
) -> Optional[str]:
    """A run of one side's messages per second over time, a line per series: a consumer-only
    run's arrivals by kind of message (zmqload's header, foreign), a producer-only run's sends
    (offered, sent, refused)."""
    if not rates:
        return None
    fig, ax = plt.subplots(figsize=(10, 3.2))
    step = window_ns / 1e9
    for (name, series), color in zip(sorted(rates.items()), ("#1f77b4", "#d62728", "#2ca02c")):
        starts = [t for t, _ in series]
        edges = np.array([*starts, starts[-1] + step])
        ax.stairs([v for _, v in series], edges, baseline=None, label=name, color=color, lw=1.6)
    ax.set_xlabel(f"seconds since {since}")
    ax.set_ylabel("messages / s")
    ax.set_ylim(0, None)
    ax.yaxis.set_major_formatter(FuncFormatter(_si))
    ax.set_title(f"{title} ({duration_text(window_ns)} windows)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
    return _png(fig)
