"""Figures as base64 PNG (matplotlib, Agg backend) from the collected aggregates."""
from __future__ import annotations

import base64
import io
import math
from collections import defaultdict
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from ..analysis.capacity import GROUP_KEYS, hwm_label, offered  # noqa: E402
from ..analysis.metrics import ALL, HIST_GROWTH  # noqa: E402

COLORS = {"offered": "#9e9e9e", "sent": "#1f77b4", "received": "#2ca02c",
          "latency_intended": "#d62728", "latency_sent": "#1f77b4", "stall": "#ff7f0e",
          "latency_delivered": "#2ca02c", "latency_drained": "#8c564b"}
LABELS = {"latency_intended": "latency from intended send (no coordinated omission)",
          "latency_sent": "latency from actual send", "stall": "sender stall (actual - intended)",
          "latency_delivered": "  of it, delivered while the consumers worked",
          "latency_drained": "  of it, drained (how long the backlog waited)"}


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _si(x, _=None):
    for f, s in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= f:
            return f"{x / f:g}{s}"
    return f"{x:g}"


def throughput(rates: list[dict], run: str, window_ns: int):
    rows = [r for r in rates if r["run"] == run]
    if not rows:
        return None
    w0 = min(r["window"] for r in rows)
    per: defaultdict[str, defaultdict[int, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        for k in ("offered", "sent", "received"):
            per[k][r["window"]] += r[k]
    fig, ax = plt.subplots(figsize=(10, 3.2))
    scale = 1e9 / window_ns
    for k in ("offered", "sent", "received"):
        ws = sorted(per[k])
        ax.step([(w - w0) * window_ns / 1e9 for w in ws], [per[k][w] * scale for w in ws], where="post",
                label={"offered": "offered (by intended time)", "sent": "achieved send", "received": "received"}[k],
                color=COLORS[k], lw=2 if k == "received" else 1.3, ls="--" if k == "offered" else "-")
    ax.set_xlabel("seconds since first scheduled send")
    ax.set_ylabel("messages / s")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(FuncFormatter(_si))
    ax.set_title(f"Throughput over time ({window_ns / 1e6:g} ms windows)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower center", fontsize=8, ncol=3)
    return _png(fig)


FLOOR_US = 0.1     # values below (0 ns stalls: a send on time) are drawn here on the log axis
# Line styles so coinciding curves stay visible (unpaced runs: intended == actual send).
STYLES: dict[str, dict[str, Any]] = {
    "latency_intended": dict(lw=3.2, alpha=0.55), "latency_sent": dict(lw=1.4, ls="--"), "stall": dict(lw=1.4)}


def latency_curve(hist: list[dict], run: str):
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
            xs.append(total / max(total - cum, 1))      # 1 / (1 - q), the last one capped at count
            v = 0 if h["bucket"] < 0 else min(HIST_GROWTH ** h["bucket"], max(h["max"], 0))
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
    ax.set_xticklabels(names[:len(ticks)])
    ax.set_xlim(1, x_max * 1.2)
    if y_min is not None:
        ax.set_ylim(bottom=y_min / 1.5)
        if y_min <= FLOOR_US:
            notes.append(f"values under {FLOOR_US:g} us drawn at {FLOOR_US:g}")
    ax.set_xlabel("percentile")
    ax.set_ylabel("microseconds")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.0f}" if y >= 1 else f"{y:g}"))
    ax.set_title("Latency by percentile (HdrHistogram style)")
    ax.grid(alpha=0.3, which="both")
    if notes:
        ax.text(0.99, 0.03, "; ".join(notes), transform=ax.transAxes, ha="right", va="bottom", fontsize=8,
                color="#555")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
    return _png(fig)


def queue_depth(depth: list[dict], run: str, window_ns: int):
    rows = [d for d in depth if d["run"] == run and d["stream"] == ALL]
    if not rows:
        return None
    w0 = min(d["window"] for d in rows)
    t = [(d["window"] - w0 + 1) * window_ns / 1e9 for d in rows]
    fig, ax = plt.subplots(figsize=(10, 3.0))
    ax.fill_between(t, [d["depth"] for d in rows], step="post", alpha=0.35, color="#9467bd")
    ax.step(t, [d["depth"] for d in rows], where="post", color="#9467bd")
    ax.set_xlabel("seconds since first scheduled send")
    ax.set_ylabel("messages in flight")
    ax.yaxis.set_major_formatter(FuncFormatter(_si))
    mean_size = rows[0].get("mean_size") or 0
    if mean_size:
        def to_mib(d: Any) -> Any:       # messages -> MiB, for numbers and numpy arrays alike
            return d * mean_size / 2**20

        def to_messages(b: Any) -> Any:
            return b * 2**20 / mean_size

        sec = ax.secondary_yaxis("right", functions=(to_mib, to_messages))
        sec.set_ylabel("MiB queued")
    ax.set_title("Queue depth over time: sent by t - received by t (messages that arrived)")
    ax.grid(alpha=0.3)
    return _png(fig)


def loss_vs_hwm(run_rows: list[dict]):
    rows = [r for r in run_rows if r.get("expected")]
    labels = sorted({hwm_label(r) for r in rows})
    if len(labels) < 2:
        return None
    fig, ax = plt.subplots(figsize=(10, 3.4))
    series = defaultdict(list)
    for r in rows:
        series[(r.get("pattern"), r.get("transport"), r.get("size"), offered(r))].append(r)
    for (pattern, transport, size, rate), rs in sorted(series.items(), key=lambda kv: tuple(map(str, kv[0]))):
        pts = sorted(((labels.index(hwm_label(r)), 100 * ((r["lost"] or 0) + (r["dropped_sender"] or 0))
                       / max(r["expected"] + (r["dropped_sender"] or 0), 1)) for r in rs))
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                label=f"{pattern}/{transport} {size} B @ {_si(rate or 0)}/s")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=15, fontsize=8)
    ax.set_ylabel("lost + dropped, % of attempted")
    ax.set_title("Loss vs high-water mark")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _png(fig)


def capacity_curves(run_rows: list[dict], slo_p99_us: float):
    groups = defaultdict(list)
    for r in run_rows:
        if offered(r) and r.get("recv_rate"):
            groups[tuple(r.get(k) for k in GROUP_KEYS)].append(r)
    if not groups or max(len(g) for g in groups.values()) < 2:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    top = 0
    for key, rs in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        rs.sort(key=offered)
        label = f"{key[0]}/{key[1]} {key[2]} B {hwm_label(dict(zip(GROUP_KEYS, key)))}"
        x = [offered(r) for r in rs]
        top = max(top, max(x))
        a1.plot(x, [r["recv_rate"] for r in rs], marker="o", label=label)
        a2.plot(x, [max(r.get("latency_intended_p99_us") or 0, 0.1) for r in rs], marker="o", label=label)
    a1.plot([0, top], [0, top], color="#999", ls=":", label="achieved = offered")
    a1.set_xlabel("offered msgs/s")
    a1.set_ylabel("received msgs/s")
    a1.set_title("Achieved vs offered")
    a2.axhline(slo_p99_us, color="#d62728", ls="--", lw=1, label=f"SLO {slo_p99_us:g} us")
    a2.set_yscale("log")
    a2.set_xlabel("offered msgs/s")
    a2.set_ylabel("p99 latency from intended (us)")
    a2.set_title("p99 vs offered")
    for a in (a1, a2):
        a.xaxis.set_major_formatter(FuncFormatter(_si))
        a.grid(alpha=0.3)
    a1.yaxis.set_major_formatter(FuncFormatter(_si))
    a1.legend(fontsize=7)
    a2.legend(fontsize=7)
    fig.tight_layout()
    return _png(fig)


def nice_number(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        if abs(x) >= 100:
            return f"{x:,.0f}"
        return f"{x:.3g}"
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:,}"
    return str(x)
