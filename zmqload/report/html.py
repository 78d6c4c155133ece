"""index.html: one self-contained page (CSS inline, plots as base64 PNG)."""
from __future__ import annotations

import datetime
import html

from ..analysis.capacity import fmt_bytes, fmt_rate
from ..analysis.metrics import ALL
from . import plots

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1150px;color:#222;line-height:1.45}
h1{font-size:26px;margin-bottom:4px} h2{font-size:20px;border-bottom:2px solid #eee;padding-bottom:4px;margin-top:36px}
h3{font-size:16px;margin:22px 0 6px} .sub{color:#666;margin-top:0}
table{border-collapse:collapse;font-size:13px;margin:8px 0 14px} th,td{border:1px solid #ddd;padding:4px 8px;text-align:right}
th{background:#f4f6f8;text-align:center} td.l,th.l{text-align:left}
.warn{background:#fff4e5;border-left:4px solid #f0a020;padding:8px 12px;margin:6px 0}
.bad{color:#b00020;font-weight:600} .ok{color:#1b7d2b;font-weight:600}
.rec{background:#eef6ee;border-left:4px solid #2ca02c;padding:8px 12px;margin:6px 0}
img{max-width:100%;display:block;margin:6px 0 12px} .note{color:#555;font-size:13px}
.tag{display:inline-block;background:#f0a020;color:#fff;border-radius:3px;padding:0 6px;font-size:12px;margin-left:6px}
"""

ROW_COLUMNS = [
    ("consumer", "consumer"), ("stream", "stream"), ("offered_rate", "offered/s"), ("send_rate", "sent/s"),
    ("recv_rate", "throughput/s"), ("sent", "sent ok"), ("dropped_sender", "EAGAIN+timeout"),
    ("received", "received"), ("delivered", "delivered"), ("drained", "drained"), ("dropped_start", "dropped start"),
    ("dropped_mid", "dropped mid"), ("dropped_tail", "dropped tail"), ("stranded", "stranded"), ("lost", "lost"),
    ("loss_ratio", "loss %"), ("duplicates", "dup"), ("reordered", "reord"),
    ("latency_intended_p50_us", "p50 &micro;s"), ("latency_intended_p99_us", "p99 &micro;s"),
    ("depth_max", "queue max"),
]
LAT_METRICS = ("latency_intended", "latency_delivered", "latency_drained", "latency_sent", "stall")
LAT_COLUMNS = [("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p99_9", "p99.9"), ("p99_99", "p99.99"), ("max", "max")]


def _e(x) -> str:
    return html.escape(str(x))


def _cell(key, v) -> str:
    if key in ("consumer", "stream"):
        return "all" if v == ALL else _e(v)
    if key == "loss_ratio":
        return "-" if v is None else f"{100 * v:.3g}"
    if key.endswith("_rate"):
        return fmt_rate(v)
    return _e(plots.nice_number(v))


def _hwm(v):
    return "default" if v is None else _e(v)


def _img(b64, alt):
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{b64}">' if b64 else ""


def render(analysis, capacity: list[dict], recommendations: list[str], warnings: list[str], *, slo_p99_us: float,
           memory_budget: int | None, max_runs_plotted: int = 24) -> str:
    runs = analysis.runs
    run_rows = {r["run"]: r for r in analysis.run_rows()}
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>zmqload report</title><style>{CSS}</style></head><body>",
           "<h1>zmqload capacity report</h1>",
           f"<p class='sub'>{len(runs)} run(s), generated {now}. Latency SLO: p99 &le; {slo_p99_us:g} &micro;s"
           f"{'; memory budget ' + fmt_bytes(memory_budget) if memory_budget else ''}. "
           f"Time windows: {analysis.window_ns / 1e6:g} ms.</p>"]
    for w in warnings:
        out.append(f"<div class='warn'>{_e(w)}</div>")
    if not getattr(analysis, "reorder_measured", True):
        out.append("<p class='note'>Reordering was not measured (it sorts every record; use --reorder on).</p>")

    out.append("<h2>Runs</h2><table><tr><th class='l'>run</th><th>status</th><th class='l'>pattern / transport</th>"
               "<th>size</th><th>HWM snd/rcv</th><th>offered/s</th><th>throughput/s</th><th>loss %</th>"
               "<th>drained</th><th>dropped</th><th>stranded</th><th>EAGAIN+timeout</th><th>p99 (&micro;s)</th><th>p99.9 (&micro;s)</th><th>peak queued</th></tr>")
    for info in runs:
        r = run_rows.get(info.run_id, {})
        status = info.status + ("<span class='tag'>interrupted</span>" if info.interrupted else "")
        loss = r.get("loss_ratio")
        loss_cls = "ok" if loss == 0 else "bad" if loss else ""
        out.append(
            f"<tr><td class='l'><a href='#{_e(info.run_id)}'>{_e(info.run_id)}</a></td><td>{status}</td>"
            f"<td class='l'>{_e(r.get('pattern'))} / {_e(r.get('transport'))}</td><td>{_e(r.get('size'))}</td>"
            f"<td>{_hwm(r.get('sndhwm'))}/{_hwm(r.get('rcvhwm'))}</td><td>{fmt_rate(offered_to_consumers(r))}</td>"
            f"<td>{fmt_rate(r.get('recv_rate'))}</td><td class='{loss_cls}'>{_cell('loss_ratio', loss)}</td>"
            f"<td>{_cell('x', r.get('drained'))}</td><td>{_cell('x', r.get('dropped'))}</td>"
            f"<td>{_cell('x', r.get('stranded'))}</td>"
            f"<td>{_cell('x', r.get('dropped_sender'))}</td><td>{_cell('x', r.get('latency_intended_p99_us'))}</td>"
            f"<td>{_cell('x', r.get('latency_intended_p99_9_us'))}</td><td>{fmt_bytes(r.get('queued_bytes_max'))}</td></tr>")
    out.append("</table>")

    out.append("<h2>Capacity planning</h2>")
    for rec in recommendations:
        cls = "rec" if " carries " in rec and "no tested" not in rec else "warn"
        out.append(f"<div class='{cls}'>{_e(rec)}</div>")
    out.append("<table><tr><th class='l'>pattern / transport</th><th>size</th><th class='l'>HWM</th><th>runs</th>"
               "<th>highest clean rate</th><th>p99 there (&micro;s)</th><th>peak queued there</th>"
               "<th>knee</th><th class='l'>what turns at the knee</th></tr>")
    for g in capacity:
        out.append(f"<tr><td class='l'>{_e(g['pattern'])} / {_e(g['transport'])}</td><td>{_e(g['size'])}</td>"
                   f"<td class='l'>{_e(g['hwm'])}</td><td>{g['runs']}</td><td>{fmt_rate(g['max_clean_rate'])}</td>"
                   f"<td>{_cell('x', g['p99_at_max_us'])}</td><td>{fmt_bytes(g['peak_queued_bytes_at_max'])}</td>"
                   f"<td>{fmt_rate(g['knee_rate'])}</td><td class='l'>{_e(g['knee_reason'] or 'none seen')}</td></tr>")
    out.append("</table><p class='note'>A clean rate has zero loss, no sender drops and p99 latency (from the "
               "intended send time) within the SLO. The knee is the lowest tested rate where loss appears, p99 "
               "leaves the SLO or rises 4x over the lowest rate's, or received falls below 95% of offered.</p>")
    all_rows = list(run_rows.values())
    cap_png = plots.capacity_curves(all_rows, slo_p99_us)
    out.append(_img(cap_png, "capacity curves") or "<p class='note'>Capacity curves need two or more rates of one setting.</p>")
    loss_png = plots.loss_vs_hwm(all_rows)
    if loss_png:
        out.append("<h3>Loss vs high-water mark</h3>" + _img(loss_png, "loss vs HWM"))

    out.append("<h2>Per run</h2>")
    for i, info in enumerate(runs):
        r = run_rows.get(info.run_id, {})
        out.append(f"<h3 id='{_e(info.run_id)}'>{_e(info.run_id)}"
                   f"{'<span class=tag>interrupted</span>' if info.interrupted else ''}</h3>")
        w = info.workload
        out.append(f"<p class='note'>{_e(w.get('pattern'))} over {_e(w.get('transport'))}, {_e(w.get('size'))} B, "
                   f"{_e(w.get('producers'))} producer(s) &rarr; {_e(info.consumers)} consumer(s), rate "
                   f"{_e(w.get('rate') or 'unpaced')} per producer, send mode {_e(w.get('send_mode'))}, "
                   f"SNDHWM {_hwm(w.get('sndhwm'))}, RCVHWM {_hwm(w.get('rcvhwm'))}, linger "
                   f"{'default' if w.get('linger_ms') is None else _e(w.get('linger_ms')) + ' ms'}; "
                   f"libzmq {_e((info.meta.get('versions') or {}).get('libzmq'))}.</p>")
        rows = [s for s in analysis.summary if s["run"] == info.run_id]
        if not r.get("received") and not r.get("attempted"):
            out.append("<p class='bad'>No records in this run.</p>")
            continue
        out.append("<table><tr>" + "".join(f"<th>{h}</th>" for _, h in ROW_COLUMNS) + "</tr>")
        for s in rows:
            out.append("<tr>" + "".join(f"<td>{_cell(k, s.get(k))}</td>" for k, _ in ROW_COLUMNS) + "</tr>")
        out.append("</table>")
        out.append("<table><tr><th class='l'>&micro;s</th>" + "".join(f"<th>{h}</th>" for _, h in LAT_COLUMNS)
                   + "<th>queue depth max / mean / p99</th><th>queued memory max</th></tr>")
        for m in LAT_METRICS:
            out.append(f"<tr><td class='l'>{_e(plots.LABELS[m])}</td>" +
                       "".join(f"<td>{_cell('x', r.get(f'{m}_{k}_us'))}</td>" for k, _ in LAT_COLUMNS) +
                       (f"<td rowspan={len(LAT_METRICS)}>{_cell('x', r.get('depth_max'))} / "
                        f"{_cell('x', r.get('depth_mean'))} / {_cell('x', r.get('depth_p99'))}</td>"
                        f"<td rowspan={len(LAT_METRICS)}>{fmt_bytes(r.get('queued_bytes_max'))}</td>"
                        if m == "latency_intended" else "") + "</tr>")
        out.append("</table>")
        if i >= max_runs_plotted:
            if i == max_runs_plotted:
                out.append(f"<p class='note'>Plots shown for the first {max_runs_plotted} runs only.</p>")
            continue
        out.append(_img(plots.throughput(analysis.rates, info.run_id, analysis.window_ns), "throughput"))
        out.append(_img(plots.latency_curve(analysis.hist, info.run_id), "latency percentiles"))
        out.append(_img(plots.queue_depth(analysis.depth, info.run_id, analysis.window_ns), "queue depth"))

    out.append("<h2>Reading this report</h2><ul class='note'>"
               "<li><b>Latency from intended send</b> measures from the time the message was scheduled, so a "
               "sender held up by backpressure still counts the wait (no coordinated omission); <b>from actual "
               "send</b> measures from the send call; <b>stall</b> is the difference.</li>"
               "<li><b>The fate of every sent message</b> (as the run reconciles it, docs/RECORDS.md): "
               "<b>delivered</b> while the consumers worked; <b>drained</b>: still queued when the producers "
               "finished, received in the drain (its latency shows how long the backlog waited); "
               "<b>dropped</b> (only when the drain completed, or below a later arrival of the same stream): "
               "<b>start</b> before the consumer's first arrival (slow joiner), <b>mid</b> between arrivals (a full "
               "pipe), <b>tail</b> after its last one (close, linger, term); <b>stranded</b>: not received because "
               "the drain was cut short, queued or dropped, unknown. lost = dropped + stranded. "
               "<b>EAGAIN+timeout</b>: dropped by the sender, never on the wire.</li>"
               "<li><b>Throughput</b> is `run`'s own: distinct messages received per second from the first send "
               "to the last receive (with a simulated consumer delay and the fast drain, what was delivered "
               "before the drain, up to its start). A fan-out run offers every message to each consumer.</li>"
               "<li><b>Queue depth</b> counts messages sent but not yet received (of those that arrived), at "
               "the end of each window, per consumer in fan-out runs; memory is depth &times; mean message size (payload only, not libzmq's "
               "per-message overhead).</li>"
               "<li>Latency across hosts is only meaningful with synchronised clocks.</li></ul>")
    out.append("</body></html>")
    return "\n".join(out)


def offered_to_consumers(r):
    """The offered rate of a run as its consumers see it: a fan-out run offers every message
    to each consumer, so received/s and offered/s compare."""
    from ..analysis.capacity import offered
    if not r or offered(r) is None:
        return None
    return offered(r) * ((r.get("consumers") or 1) if r.get("fanout") else 1)
