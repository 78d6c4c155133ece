"""index.html: one self-contained page (CSS inline, plots as base64 PNG)."""

from __future__ import annotations

import datetime
import html
import os
import pathlib
from typing import TYPE_CHECKING, Any, Optional, Sequence

from ..analysis.verdicts import fmt_bytes, fmt_clocks, fmt_rate, fmt_us, offered
from ..analysis.summary_row import ALL, SummaryRow
from ..analysis import one_side
from . import figures, plots, restart_table, search_answer

if TYPE_CHECKING:
    from ..analysis.one_side import ConsumerSide, ProducerSide
    from ..analysis.pipeline import Analysis
    from ..analysis.runs import RunInfo
    from ..analysis.verdict_group import VerdictGroup
    from ..contract.search_record import SearchRecord
    from ..measure.compare import Comparison

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:16px auto;max-width:1150px;padding:0 16px;color:#222;line-height:1.45}
h1{font-size:24px;margin:0 0 2px} h2{font-size:19px;border-bottom:2px solid #eee;padding-bottom:3px;margin:22px 0 8px}
h3{font-size:16px;margin:14px 0 6px} .sub{color:#666;margin:0 0 4px;font-size:14px}
.scroll{overflow-x:auto;max-width:100%;margin:6px 0 12px}
table{border-collapse:collapse;font-size:13px;margin:0} th,td{border:1px solid #ddd;padding:3px 5px;text-align:right}
th{background:#f4f6f8;text-align:center;font-weight:600}
td.l,th.l{text-align:left} td.l{overflow-wrap:break-word;min-width:4em}
.warn{background:#fff4e5;border-left:4px solid #f0a020;padding:6px 12px;margin:6px 0}
.bad{color:#b00020;font-weight:600} .ok{color:#1b7d2b;font-weight:600}
.rec{background:#eef6ee;border-left:4px solid #2ca02c;padding:6px 12px;margin:6px 0}
.answer .rec,.answer .warn{font-size:14px;line-height:1.4;padding:4px 10px;margin:4px 0}
img{max-width:100%;height:auto;display:block;margin:6px 0 12px} .note{color:#555;font-size:13px}
.tag{display:inline-block;background:#f0a020;color:#fff;border-radius:3px;padding:0 6px;font-size:12px;margin-left:6px}
details{border:1px solid #e4e4e4;border-radius:4px;margin:6px 0;padding:0 10px}
details[open]{padding-bottom:8px} summary{cursor:pointer;padding:6px 0}
summary h3,summary h4{display:inline;margin:0 8px 0 0;font-size:15px} summary .digest{color:#444;font-size:13px}
"""

# The fates table of a run: these columns always; the fate breakdown (FATE_COLUMNS) only where a
# row of the run has one, so the table fits a narrow window (every column is in summary.md).
ROW_COLUMNS = [
    ("consumer", "consumer"),
    ("stream", "stream"),
    ("offered_rate", "offered/s"),
    ("recv_rate", "throughput/s"),
    ("sent", "sent ok"),
    ("received", "received"),
]
FATE_COLUMNS = [
    ("dropped_sender", "EAGAIN+ timeout"),
    ("drained", "drained"),
    ("dropped_start", "dropped start"),
    ("dropped_mid", "dropped mid"),
    ("dropped_tail", "dropped tail"),
    ("dropped_reset", "dropped at reset"),
    ("dropped_restart", "dropped at restart"),
    ("stranded", "stranded"),
    ("unknown", "unknown"),
    ("duplicates", "dup"),
    ("reordered", "reord"),
]
TAIL_COLUMNS = [
    ("lost", "lost"),
    ("loss_ratio", "loss %"),
    ("latency_intended_p99_us", "p99"),
    ("depth_max", "queue peak"),
]
LAT_METRICS = ("latency_intended", "latency_delivered", "latency_drained", "latency_sent", "stall")
LAT_COLUMNS = [
    ("p50", "p50"),
    ("p90", "p90"),
    ("p99", "p99"),
    ("p99_9", "p99.9"),
    ("p99_99", "p99.99"),
    ("max", "max"),
]
# req-rep round trips, in the runs section of the page and of the Markdown summary
ROUND_TRIP_COLUMNS = [
    ("sent", "requests"),
    ("round_trips", "answered"),
    ("echoed", "echoed"),
    ("by_order", "by order"),
    ("unanswered", "unanswered"),
    ("recv_rate", "answers/s"),
    ("round_trip_p50_us", "p50"),
    ("round_trip_p99_us", "p99"),
    ("round_trip_p99_9_us", "p99.9"),
    ("round_trip_max_us", "max"),
]
ROUND_TRIP_NOTE = (
    "Round trip: reply time minus intended send time (req-rep, one request in flight per producer), "
    "as run.json measures it; &micro;s. A service of yours (--role producer): answered = echoed (the "
    "reply began with the request's header) + by order (matched to the request just sent); "
    "unanswered: no reply within --reply-timeout-ms; answers/s from the first request to the last "
    "answer (run.json summary.service)."
)


def round_trip_runs(analysis: Analysis) -> list[SummaryRow]:
    """The run-total rows of the runs that recorded round trips (req-rep)."""
    return [r for r in analysis.run_rows() if r.round_trips]


def _e(x: object) -> str:
    return html.escape(str(x))


def _cell(key: str, v: Any) -> str:
    if key in ("consumer", "stream"):
        return "all" if v == ALL else _e(v)
    if key == "loss_ratio":
        return "-" if v is None else f"{100 * v:.3g}"
    if key.endswith("_rate"):
        return fmt_rate(v)
    if key.endswith("_us"):
        return _e(fmt_us(v)).replace(" ", "&nbsp;")  # '812 µs' never split over two lines
    return _e(plots.nice_number(v))


def _one_way(r: SummaryRow, key: str) -> str:
    """A one-way latency's cell, with what the hosts' clocks leave uncertain in a placed run."""
    return _cell(key, r.column(key)) + _e(fmt_clocks(r)).replace(" ", "&nbsp;")


def _hwm(v: Optional[int]) -> str:
    return "default" if v is None else _e(v)


def render(*args: Any, **kw: Any) -> str:
    """The page (`page`'s arguments), its figures drawn on every core (figures.py)."""
    with figures.collecting() as calls:
        written = page(*args, **kw)
    return figures.draw(written, calls)


def page(
    analysis: Analysis,
    capacity: list[VerdictGroup],
    recommendations: list[str],
    warnings: list[str],
    *,
    slo_p99_us: Optional[float],
    memory_budget: int | None,
    max_runs_plotted: int = 24,
    searches: Sequence[SearchRecord] = (),
    comparison: Optional[Comparison] = None,
    consumer_sides: Sequence[ConsumerSide] = (),
    producer_sides: Sequence[ProducerSide] = (),
) -> str:
    """The page, in the order a person reads it: the answer and its evidence (the capacity
    search's sentences, table and probe plots; else the verdicts and their curves) in the first
    screen, then the runs in one table, then each run's detail folded (<details>: a click opens
    it, no script), then how to read it, folded too."""
    runs = analysis.runs
    run_rows = {r.run: r for r in analysis.run_rows()}
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        f"<!doctype html><html><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>zmqload report</title><style>{CSS}</style></head><body>",
        "<h1>zmqload capacity report</h1>",
        f"<p class='sub'>{len(runs) + len(consumer_sides) + len(producer_sides)} run(s), "
        f"generated {now}"
        f"{'; memory budget ' + fmt_bytes(memory_budget) if memory_budget else ''}. "
        f"Time windows: {_e(plots.duration_text(analysis.window_ns))} (a plot of a long run merges them: its "
        "title says the window it draws).</p>",
        *slo_lines(capacity, slo_p99_us)[1:],
    ]
    for warning in warnings:
        out.append(f"<div class='warn'>{_e(warning)}</div>")
    searched = search_section(searches)
    out += searched
    if runs:  # consumer-only runs alone have no rate to judge
        out += capacity_section(
            analysis,
            capacity,
            recommendations,
            slo_p99_us,
            answer=not searched,
            judged_by=slo_lines(capacity, slo_p99_us)[0],
        )
    out += consumer_side_section(consumer_sides)
    out += producer_side_section(producer_sides)
    if runs:
        out += runs_table(analysis, capacity)
    out += comparison_section(comparison)
    if not getattr(analysis, "reorder_measured", True):
        out.append(
            "<p class='note'>Reordering was not measured (it sorts every record; use --reorder on).</p>"
        )
    if runs:
        out.append(
            "<h2>Per run</h2><p class='note'>Each run's fates, latency and plots: click a run to "
            "open it.</p>"
        )
    for i, info in enumerate(runs):
        out += run_detail(
            analysis, info, run_rows.get(info.run_id), capacity, plotted=i < max_runs_plotted
        )
    if len(runs) > max_runs_plotted:
        out.append(f"<p class='note'>Plots shown for the first {max_runs_plotted} runs only.</p>")
    out.append(READING)
    out.append("</body></html>")
    return "\n".join(out)


def consumer_side_section(sides: Sequence[ConsumerSide]) -> list[str]:
    """Consumer-only runs (--role consumer): what the user's producer sent, as zmqload's
    consumers saw it: arrivals over time and sizes by kind, the gaps between foreign arrivals, and
    a header-writing producer's holes and duplicates by stream (nothing is reconciled: its sends
    are not seen)."""
    if not sides:
        return []
    out = [
        "<h2>Your producer, as zmqload's consumers saw it</h2><p class='sub'>Consumer-only runs "
        "(<code>--role consumer</code>): what your producer sent is not seen, so there is no loss "
        "to account; holes are seqs never seen below the highest, a lower bound of it.</p>"
    ]
    for side in sides:
        info, foreign = (
            side.info,
            side.info.record.summary.foreign if side.info.record.summary else None,
        )
        w = info.workload
        out.append(
            f"<h3 id='{_e(info.run_id)}'>{_e(info.run_id)}</h3><p class='note'>{_e(w.pattern)} "
            f"{_e(w.transport)}, {w.consumers} consumer{'s' * (w.consumers > 1)}, "
            f"{_e(info.status.value)}</p>"
        )
        rows = []
        for name, size in side.sizes.items():
            rows.append(
                f"<tr><td class='l'>{_e(name)}</td><td>{size.messages:,}</td>"
                f"<td>{size.min:,} / {size.p50:,.0f} / {size.max:,}&nbsp;B</td>"
                f"<td>{size.mean:,.1f}&nbsp;B</td></tr>"
            )
        if rows:
            out.append(
                _scroll(
                    "<table><tr><th class='l'>messages</th><th>arrived</th>"
                    "<th>size min / p50 / max</th><th>mean size</th></tr>"
                    + "".join(rows)
                    + "</table>"
                )
            )
        if foreign and foreign.messages:
            gaps = foreign.gap_ns
            out.append(
                f"<p>Foreign messages: {foreign.messages:,} ({fmt_bytes(foreign.bytes)}), "
                f"{fmt_rate(foreign.rate_msgs)} over {foreign.span_s:.3g} s; gaps between "
                "arrivals "
                + ", ".join(
                    f"{k} {'-' if v is None else fmt_us(v / 1e3)}"
                    for k, v in ((k, gaps.get(k)) for k in ("p50", "p99", "max"))
                )
                + ".</p>"
            )
        lines = one_side.stream_lines(info)
        if lines:
            out.append(
                _scroll(
                    "<table><tr><th class='l'>header-writing producer's stream</th><th>received</th>"
                    "<th>duplicates</th><th>reordered</th><th>holes</th><th class='l'>missing seqs"
                    "</th></tr>"
                    + "".join(
                        f"<tr><td class='l'>{s['stream']}</td><td>{s['received']:,}</td>"
                        f"<td>{s['duplicates']:,}</td><td>{s['reordered']:,}</td>"
                        f"<td>{'-' if s['holes'] is None else format(s['holes'], ',')}</td>"
                        f"<td class='l'>{_e(_ranges(s['missing']))}</td></tr>"
                        for s in lines
                    )
                    + "</table>"
                )
            )
        out.append(
            figures.later(f"arrivals of {info.run_id}", plots.arrivals, side.rates, side.window_ns)
        )
    return out


def producer_side_section(sides: Sequence[ProducerSide]) -> list[str]:
    """Producer-only runs (--role producer): what zmqload's producers offered, sent and had
    refused, over time, and how long a sent message waited past its intended time: the pushback
    of the user's consumer (what it received is not seen: nothing is reconciled)."""
    if not sides:
        return []
    out = [
        "<h2>Your consumer, as zmqload's producers saw it</h2><p class='sub'>Producer-only runs "
        "(<code>--role producer</code>): what your consumer received is not seen, so there is no "
        "loss to account. Refused: sends the socket would not take (at its HWM with "
        "<code>--send-mode dontwait</code> or <code>timeout</code>); waited: how long a sent "
        "message left after its intended time, the pushback of your consumer's pace.</p>"
    ]
    for side in sides:
        info, st, wait = side.info, side.statuses, side.wait_us
        w = info.workload
        out.append(
            f"<h3 id='{_e(info.run_id)}'>{_e(info.run_id)}</h3><p class='note'>{_e(w.pattern)} "
            f"{_e(w.transport)}, {w.producers} producer{'s' * (w.producers > 1)}, "
            f"{_e(offered_text(info))}, {_e(info.status.value)}</p>"
        )
        out.append(
            _scroll(
                "<table><tr><th>attempted</th><th>sent</th><th>refused at HWM</th>"
                "<th>timed out</th><th>errors</th><th>waited p50 / p99 / max</th></tr>"
                f"<tr><td>{sum(st.values()):,}</td><td>{st.get('ok', 0):,}</td>"
                f"<td>{st.get('eagain', 0):,}</td><td>{st.get('timeout', 0):,}</td>"
                f"<td>{st.get('error', 0):,}</td><td>"
                + (" / ".join(fmt_us(wait[k]) for k in ("p50", "p99", "max")) if wait else "-")
                + "</td></tr></table>"
            )
        )
        out.append(
            figures.later(
                f"sends of {info.run_id}",
                plots.arrivals,
                side.rates,
                side.window_ns,
                "Sends over time",
                "the first intended send",
            )
        )
    return out


def offered_text(info: RunInfo) -> str:
    rate = info.workload.rate
    return f"offered {fmt_rate(rate)} per producer" if rate else "unpaced"


def _ranges(ranges: list[tuple[int, ...]], most: int = 8) -> str:
    """Missing seq ranges as '100-149, 700', the first `most` of them and how many more."""
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:most])
    more = len(ranges) - most
    return (text or "none") + (f" and {more:,} more" if more > 0 else "")


def _scroll(table: str) -> str:
    """A table in a box of its own that scrolls sideways, so a wide one never widens the page."""
    return f"<div class='scroll'>{table}</div>"


def runs_table(analysis: Analysis, capacity: list[VerdictGroup]) -> list[str]:
    """One row per run: what it was, what it carried, its verdict (last: tests read it there).
    The fate breakdown and p99.9 are in each run's detail and in summary.md; few columns, so it
    fits a 900 px window."""
    run_rows = {r.run: r for r in analysis.run_rows()}
    group_of = {rid: g.group for g in capacity for rid in g.run_ids}
    keys = ", ".join(capacity[0].key_names) if capacity else ""
    out = [
        "<h2>Runs</h2>",
        "<div class='scroll'><table><tr><th class='l'>run</th><th>status</th>"
        f"<th class='l'>group ({_e(keys or 'one setting')})</th><th class='l'>setting</th><th>offered/s</th>"
        "<th>throughput/s</th><th>loss %</th>"
        "<th>p99</th><th>queue peak, msgs (memory)</th><th>verdict</th></tr>",
    ]
    for info in analysis.runs:
        found = run_rows.get(info.run_id)
        r = found or SummaryRow(
            run=info.run_id
        )  # no row: blank cells, as for a run without records
        status = info.status.value + (
            "<span class='tag'>interrupted</span>" if info.interrupted else ""
        )
        loss = r.loss_ratio
        loss_cls = "ok" if loss == 0 else "bad" if loss else ""
        out.append(
            f"<tr><td class='l'><a href='#{_e(info.run_id)}'>{_e(info.run_id)}</a></td><td>{status}</td>"
            f"<td class='l'>{_e(group_of.get(info.run_id, '-'))}</td>"
            f"<td class='l'>{_e(r.pattern)} {_e(r.transport)} {_e(r.size)}&nbsp;B, HWM "
            f"{_hwm(r.sndhwm)}/{_hwm(r.rcvhwm)}</td><td>{offered_cell(found)}</td>"
            f"<td>{fmt_rate(r.recv_rate)}</td><td class='{loss_cls}'>{_cell('loss_ratio', loss)}</td>"
            f"<td>{_one_way(r, r.judged_p99_column)}</td><td>{queue_cell(r)}</td>"
            f"<td>{verdict_cell(capacity, info.run_id)}</td></tr>"
        )
    out.append("</table></div>")
    rtt_rows = round_trip_runs(analysis)
    if rtt_rows:
        out.append(
            "<h3>Round trips and answers</h3><div class='scroll'><table><tr><th class='l'>run</th>"
            + "".join(f"<th>{h}</th>" for _, h in ROUND_TRIP_COLUMNS)
            + "</tr>"
        )
        for r in rtt_rows:
            out.append(
                f"<tr><td class='l'>{_e(r.run)}</td>"
                + "".join(f"<td>{_cell(k, r.column(k))}</td>" for k, _ in ROUND_TRIP_COLUMNS)
                + "</tr>"
            )
        out.append(f"</table></div><p class='note'>{ROUND_TRIP_NOTE}</p>")
    return out + restarts_table(analysis)


def restarts_table(analysis: Analysis) -> list[str]:
    """Every restart of every run (--restart, run.json restarts): one row each, the same cells as
    summary.md and `run`'s summary (report/restart_table.py)."""
    rows = [(info.run_id, r) for info in analysis.runs for r in info.record.restarts]
    if not rows:
        return []
    out = [
        "<h3>Restarts</h3><div class='scroll'><table><tr><th class='l'>run</th>"
        + "".join(f"<th>{_e(h)}</th>" for h in restart_table.COLUMNS)
        + "</tr>"
    ]
    for run_id, r in rows:
        out.append(
            f"<tr><td class='l'><a href='#{_e(run_id)}'>{_e(run_id)}</a></td>"
            + "".join(f"<td>{_e(c)}</td>" for c in restart_table.cells(r))
            + "</tr>"
        )
    out.append(f"</table></div><p class='note'>{_e(restart_table.NOTE)}</p>")
    return out


def _digest(info: RunInfo, r: Optional[SummaryRow], capacity: list[VerdictGroup]) -> str:
    """A run's line while folded: what it offered and carried, its loss, p99 and verdict."""
    if r is None or (not r.received and not r.attempted):
        return "no records"
    loss = r.loss_ratio
    return (
        f"{_e(info.status.value)} &middot; {_e(info.record.workload.pattern)} &middot; offered "
        f"{offered_cell(r)} &middot; throughput {fmt_rate(r.recv_rate)} &middot; loss "
        f"{_cell('loss_ratio', loss)}% &middot; p99 "
        f"{_one_way(r, r.judged_p99_column)}"
        f" &middot; {verdict_cell(capacity, info.run_id)}"
    )


def comparison_section(result: Optional[Comparison]) -> list[str]:
    """Given two paths, the second's runs against the first's (measure/compare.py: `zmqload
    compare`'s table and verdicts)."""
    if result is None:
        return []
    from ..measure.compare import COLUMNS

    out = [
        "<h2>Comparison</h2>",
        f"<p class='note'>Candidate {_e(result.candidate)} ({len(result.candidate_runs)} run(s)) "
        f"against base {_e(result.base)} ({len(result.base_runs)} run(s)): a change only where "
        "the runs' own spread (a bootstrap over the runs and their windows; a permutation test "
        "over the runs for the figures a run has once) cannot explain it.</p>",
        "<div class='scroll'><table><tr>"
        + "".join(f"<th{' class=l' if c == 'figure' else ''}>{_e(c)}</th>" for c in COLUMNS)
        + "</tr>",
    ]
    for row in result.rows:
        cells = row.cells()
        verdict = (
            _e(cells[5]) if row.verdict not in ("higher", "lower") else f"<b>{_e(cells[5])}</b>"
        )
        out.append(
            f"<tr><td class='l'>{_e(cells[0])}</td>"
            + "".join(f"<td>{_e(c)}</td>" for c in cells[1:5])
            + f"<td class='l'>{verdict}</td></tr>"
        )
    out += ["</table></div>", f"<p>{_e(result.said())}</p>"]
    return out


def hdr_links(run_dir: str) -> list[str]:
    """A line linking the run's HdrHistogram files (measure/hdr_export.py), where it has them."""
    from ..measure.hdr_export import exports_of

    names = exports_of(run_dir)
    if not names:
        return []
    links = ", ".join(
        f"<a href='{_e(pathlib.Path(run_dir, n).resolve().as_uri())}'>{_e(os.path.basename(n))}</a>"
        for n in names
    )
    return [
        "<p class='note'>Latency as HdrHistogram files (from the intended send time; .hgrm in "
        f"microseconds, for HdrHistogram's plotter): {links}.</p>"
    ]


def run_detail(
    analysis: Analysis,
    info: RunInfo,
    r: Optional[SummaryRow],
    capacity: list[VerdictGroup],
    *,
    plotted: bool,
) -> list[str]:
    """One run, folded: its settings, fates table, latency table and plots inside <details>."""
    out = [
        f"<details><summary><h3 id='{_e(info.run_id)}'>{_e(info.run_id)}"
        f"{'<span class=tag>interrupted</span>' if info.interrupted else ''}</h3>"
        f"<span class='digest'>{_digest(info, r, capacity)}</span></summary>"
    ]
    w = info.workload
    out.append(
        f"<p class='note'>{_e(w.pattern)} over {_e(w.transport)}, {_e(w.size_spec)} B, "
        f"{_e(w.producers)} producer(s) &rarr; {_e(info.consumers)} consumer(s), rate "
        f"{_e(w.rate or 'unpaced')} per producer, send mode {_e(w.send_mode)}, "
        f"SNDHWM {_hwm(w.sndhwm)}, RCVHWM {_hwm(w.rcvhwm)}, linger "
        f"{'default' if w.linger_ms is None else _e(w.linger_ms) + ' ms'}; "
        f"libzmq {_e(info.record.versions.libzmq)}.</p>"
    )
    if r is None or (not r.received and not r.attempted):
        out.append("<p class='bad'>No records in this run.</p></details>")
        return out
    out += hdr_links(info.path)
    rows = [s for s in analysis.summary if s.run == info.run_id]
    unpaced = not r.rate_per_producer
    fates = [(k, h) for k, h in FATE_COLUMNS if any(s.column(k) for s in rows)]
    columns = ROW_COLUMNS + fates + TAIL_COLUMNS
    out.append(
        "<div class='scroll'><table><tr>" + "".join(f"<th>{h}</th>" for _, h in columns) + "</tr>"
    )
    for s in rows:
        out.append(
            "<tr>"
            + "".join(
                f"<td>{'unpaced' if k == 'offered_rate' and unpaced else _cell(k, s.column(k))}</td>"
                for k, _ in columns
            )
            + "</tr>"
        )
    shown = ", ".join(h for _, h in fates)
    out.append(
        "</table></div><p class='note'>Messages; rates per second"
        + (f"; fates: {_e(shown)}" if fates else "")
        + ". Fates that are 0 in every row are not shown (every column: summary.md, summary.csv).</p>"
    )
    out.append(
        "<div class='scroll'><table><tr><th class='l'>latency</th>"
        + "".join(f"<th>{h}</th>" for _, h in LAT_COLUMNS)
        + "<th>queue peak / mean / p99 (msgs)</th><th>queued memory at the peak</th></tr>"
    )
    for m in LAT_METRICS:
        out.append(
            f"<tr><td class='l'>{_e(plots.LABELS[m])}</td>"
            + "".join(f"<td>{_one_way(r, f'{m}_{k}_us')}</td>" for k, _ in LAT_COLUMNS)
            + (
                f"<td rowspan={len(LAT_METRICS)}>{_cell('x', r.depth_max)} / "
                f"{_cell('x', r.depth_mean)} / {_cell('x', r.depth_p99)}</td>"
                f"<td rowspan={len(LAT_METRICS)}>{fmt_bytes(r.queued_bytes_max)}</td>"
                if m == "latency_intended"
                else ""
            )
            + "</tr>"
        )
    if r.round_trips:
        out.append(
            f"<tr><td class='l'>round trip (req-rep, {_cell('x', r.round_trips)} replies)</td>"
            + "".join(
                f"<td>{_cell(f'round_trip_{k}_us', r.column(f'round_trip_{k}_us'))}</td>"
                for k, _ in LAT_COLUMNS
            )
            + "</tr>"
        )
    out.append("</table></div>")
    if plotted:
        t0 = info.record.schedule.t0_ns if info.record.schedule is not None else None
        out.append(
            figures.later(
                "throughput",
                plots.throughput,
                analysis.rates,
                info.run_id,
                analysis.window_ns,
                r,
                t0,
                not unpaced,
            )
        )
        out.append(
            figures.later("latency percentiles", plots.latency_curve, analysis.hist, info.run_id)
        )
        out.append(
            figures.later(
                "queue depth",
                plots.queue_depth,
                analysis.depth,
                info.run_id,
                analysis.window_ns,
                t0,
                (r.depth_max, r.depth_peak_at_s),
            )
        )
        out += where_and_when(analysis, info)
    out.append("</details>")
    return out


READING = (
    "<details><summary><h3>Reading this report</h3></summary><ul class='note'>"
    "<li><b>Latency from intended send</b> measures from the time the message was scheduled, so a "
    "sender held up by backpressure still counts the wait (no coordinated omission); <b>from actual "
    "send</b> measures from the send call; <b>stall</b> is the difference. Latency is in &micro;s below "
    "10,000 &micro;s, in ms (and s) above.</li>"
    "<li><b>The fate of every sent message</b> (as the run reconciles it, docs/RECORDS.md): "
    "<b>delivered</b> while the consumers worked; <b>drained</b>: still queued when the producers "
    "finished, received in the drain (its latency shows how long the backlog waited); "
    "<b>dropped</b> (only when the drain completed, or below a later arrival of the same stream): "
    "<b>start</b> before the consumer's first arrival (slow joiner), <b>mid</b> between arrivals (a full "
    "pipe), <b>tail</b> after its last one (close, linger, term); <b>stranded</b>: not received because "
    "the drain was cut short, queued or dropped, unknown; <b>unknown</b>: not received while a process on its "
    "path died (its producer, consumer or the proxy). lost = dropped + stranded + unknown. "
    "<b>EAGAIN+timeout</b>: dropped by the sender, never on the wire.</li>"
    "<li><b>Throughput</b> is <code>run</code>'s own: distinct messages received per second from the first send "
    "to the last receive (with a simulated consumer delay and the fast drain, what was delivered "
    "before the drain, up to its start). A fan-out run offers every message to each consumer. An unpaced "
    "run (--rate max) offers no rate: it is a max-throughput test.</li>"
    "<li><b>Queue depth</b> (one definition, the same in <code>run</code>'s summary, <code>--json</code>, "
    "the capacity search and every table here; zmqload/measure/queue_replay.py): messages sent minus received "
    "minus dropped, where a drop at the start or mid-run leaves at its send time, a tail drop when its "
    "producer closed, and a stranded message never; per consumer in fan-out runs, all consumers together "
    "for the run. <b>Queue peak</b>: the most messages in flight at any instant, counted exactly from the "
    "records; mean and p99 are over the depth at the end of each millisecond; the plots show the deepest "
    "millisecond end of each window. Memory is depth &times; mean message size (payload only, not "
    "libzmq's per-message overhead).</li>"
    "<li>Latency across hosts is only meaningful with synchronised clocks.</li></ul></details>"
)


def slo_lines(capacity: list[VerdictGroup], slo_p99_us: Optional[float]) -> list[str]:
    """What the runs were judged by (the SLOs each was made under: analysis/verdicts.py; the
    verdicts open with it), and the what-if, labelled as one, when --slo-p99-us was given (the
    page opens with it)."""
    judged = sorted({text for g in capacity for text in g.judged_by})
    out = [
        "<p class='sub'>Runs judged by the SLOs they were made under (the rules of <code>run</code> and "
        "<code>capacity</code>): " + ("; ".join(_e(t) for t in judged) or "-") + ".</p>"
    ]
    if slo_p99_us is not None:
        out.append(
            f"<p class='warn'>What-if: p99 &le; {slo_p99_us:g} &micro;s (<code>--slo-p99-us</code>), applied "
            "by this report in place of the runs' own p99 SLO. It is not an SLO the runs were made under; a "
            "capacity search's answer stays the search's.</p>"
        )
    return out


def verdict_cell(capacity: list[VerdictGroup], run_id: str) -> str:
    """The run's judgement (the one judge, analysis/verdicts.py): pass, or what broke."""
    for g in capacity:
        if run_id in g.judged:
            broke = g.judged[run_id]
            return (
                "<span class='ok'>pass</span>"
                if not broke
                else f"<span class='bad'>{_e('+'.join(broke))}</span>"
            )
    return "-"


def queue_cell(r: SummaryRow) -> str:
    """The queue's peak in messages (measure/queue_replay.py) and the memory it held."""
    peak = r.depth_max
    return (
        "-"
        if peak is None
        else f"{peak:,} ({fmt_bytes(r.queued_bytes_max).replace(' ', '&nbsp;')})"
    )


def search_section(searches: Sequence[SearchRecord]) -> list[str]:
    """The capacity search (report/search_answer.py), the page's answer: its sentence per setting
    (and for a search cut short, how far it got), the table of max sustainable rate with its
    memory and latency cost, then per combination its probes on the achieved / p99 vs offered
    plots (bracket shaded, SLO line), each probe table folded under its plot."""
    found = [(doc, s) for doc in searches for s in doc.searches]
    if not found:
        return []
    out = ["<h2>Capacity search</h2><div class='answer'>"]
    for doc, s in found:
        answered = search_answer.status(s, doc) == search_answer.CONVERGED
        out.append(
            f"<div class='{'rec' if answered else 'warn'}'>{_e(search_answer.sentence(s, doc))}</div>"
        )
    out.append("</div>")
    out += search_table(search_answer.table(searches))
    for doc, s in found:
        state = search_answer.status(s, doc)
        title = search_answer.setting(s) + (
            "" if state == search_answer.CONVERGED else f": {state}, no capacity"
        )
        out.append(
            figures.later(
                f"probes of {search_answer.setting(s)}",
                plots.search_probes,
                s,
                doc.slos.slo_p99_us,
                title,
            )
        )
        out.append(
            f"<details><summary><h4>{_e(search_answer.setting(s))}"
            f"{'' if state == search_answer.CONVERGED else ': ' + _e(state)}</h4>"
            f"<span class='digest'>its {len(s.probes)} probe(s), one row each</span></summary>"
        )
        out.append(
            "<div class='scroll'><table><tr><th>probe</th><th>rate (per producer)</th><th>outcome</th>"
            "<th>achieved</th><th>loss %</th><th>p99</th><th class='l'>failed SLO</th><th class='l'>run</th>"
            "</tr>"
        )
        for i, p in enumerate(search_answer.probe_rows(s), 1):
            outcome = ("pass" if p["passed"] else "FAIL") + (" (re-run)" if p["confirm"] else "")
            out.append(
                f"<tr><td>{i}</td><td>{fmt_rate(p['rate'])}</td><td class='{'ok' if p['passed'] else 'bad'}'>"
                f"{outcome}</td><td>{_cell('x', None if p['achieved'] is None else round(p['achieved'], 4))}</td>"
                f"<td>{_cell('loss_ratio', p['loss_ratio'])}</td><td>{_cell('p99_us', p['p99_us'])}</td>"
                f"<td class='l'>{_e(p['failed_slo'] or '-')}</td>"
                f"<td class='l'>{_e(os.path.basename(p['run_dir'] or '-'))}</td></tr>"
            )
        out.append("</table></div></details>")
    out.append(
        f"<p class='note'>{TABLE_NOTE} Each probe is a real open-loop run at one rate (docs/CAPACITY.md): "
        "it passes when every SLO holds and no backlog grows. The answer is the highest passing rate, "
        "confirmed by a re-run; the bracket is [highest passing, lowest failing]. The plots show every probe "
        "as the search measured it (received msg/s and p99 from the intended send time, all producers).</p>"
    )
    return out


def search_table(rows: list[dict[str, Any]]) -> list[str]:
    """'Max sustainable rate by HWM, with its memory and latency cost': one row per searched
    combination, its grouping keys after the setting (search_answer.cells, as in Markdown)."""
    keys = search_answer.key_names(rows)
    (setting, setting_head), *figures = search_answer.TABLE_COLUMNS
    title = search_answer.table_title(rows)
    out = [
        f"<h3>{_e(title)}</h3>",
        "<div class='scroll'><table><tr>"
        + "".join(f"<th class='l'>{_e(h)}</th>" for h in (setting_head, *keys))
        + "".join(f"<th>{_e(h)}</th>" for _, h in figures)
        + "</tr>",
    ]
    for r in rows:
        c = search_answer.cells(r)
        out.append(
            f"<tr><td class='l'>{_e(c[setting])}</td>"
            + "".join(f"<td class='l'>{_e(search_answer.key_cell(r, k))}</td>" for k in keys)
            + "".join(_search_cell(k, r, c) for k, _ in figures)
            + "</tr>"
        )
    out.append("</table></div>")
    return out


TABLE_NOTE = (
    "Rates per producer, as the search ran them; the figures at the answer are those of its confirming "
    "probe (capacity-search.json; capacity.json's <code>searches</code> has them unrounded). Queue peak "
    "in messages, split kernel socket buffers / libzmq pipes."
)


def _search_cell(key: str, row: dict[str, Any], cells: dict[str, str]) -> str:
    """One cell of the search table: the answer probe links to its run below; no capacity is bad."""
    if key == "answer_run" and row["answer_run"]:
        return f"<td class='l'><a href='#{_e(row['answer_run'])}'>{_e(cells[key])}</a></td>"
    if key == "max_sustainable_rate" and row["status"] != search_answer.CONVERGED:
        return f"<td class='bad'>{_e(cells[key])}</td>"
    return f"<td>{_e(cells[key])}</td>"


def offered_to_consumers(r: Optional[SummaryRow]) -> Optional[float]:
    """The offered rate of a run as its consumers see it: a fan-out run offers every message
    to each consumer, so received/s and offered/s compare."""
    if r is None:
        return None
    rate: Optional[float] = offered(r)
    return None if rate is None else rate * ((r.consumers or 1) if r.fanout else 1)


def offered_cell(r: Optional[SummaryRow]) -> str:
    """The offered rate of a paced run; an unpaced run offers none (a max-throughput test)."""
    if r is None:
        return "-"
    o = offered_to_consumers(r)
    return fmt_rate(o) if o else "max (unpaced)"


def capacity_section(
    analysis: Analysis,
    capacity: list[VerdictGroup],
    recommendations: list[str],
    slo_p99_us: Optional[float],
    answer: bool = True,
    judged_by: str = "",
) -> list[str]:
    """The verdict per group: what the runs were judged by, the sentences (the page's answer when
    no search gave one), the curves, then a table naming the grouping keys and how the runs were
    judged."""
    out = [
        "<h2>Capacity verdicts</h2>",
        judged_by,
        f"<div class='{'answer' if answer else 'verdicts'}'>",
    ]
    for rec in recommendations:
        clean = (
            "no failure up to" in rec
            or rec.startswith("To carry")
            or "the capacity search's answer: " in rec
        )
        out.append(f"<div class='{'rec' if clean else 'warn'}'>{_e(rec)}</div>")
    out.append("</div>")
    rows = analysis.run_rows()
    own = [
        r.record.slos.slo_p99_us
        for r in analysis.runs
        if r.record.slos is not None and r.record.slos.slo_p99_us is not None
    ]
    out.append(
        figures.tag(plots.capacity_curves(rows, slo_p99_us, capacity, own), "capacity curves")
        or "<p class='note'>Capacity curves need two or more paced rates of one setting (a capacity "
        "search's are its probe plots).</p>"
    )
    hwm_data = plots.loss_vs_hwm_series(rows, capacity)
    if hwm_data and not any(y for pts in hwm_data["series"].values() for _, y in pts):
        out.append(
            "<p class='note'>Loss vs high-water mark: no paced run lost or refused a message at any HWM "
            f"tested ({_e(', '.join(hwm_data['labels']))}).</p>"
        )  # a plot of zeros says no more
    elif hwm_data:
        out.append(
            "<h3>Loss vs high-water mark</h3>"
            + figures.later("loss vs HWM", plots.loss_vs_hwm, rows, capacity)
        )
    keys = capacity[0].key_names if capacity else []
    out.append(
        "<div class='scroll'><table><tr>"
        + "".join(f"<th class='l'>{_e(k)}</th>" for k in keys)
        + "<th>runs</th><th>rates tested</th><th>highest clean rate</th><th>lowest failing rate</th>"
        "<th class='l'>failed SLO</th><th>p99 at clean</th><th>peak queued at clean</th>"
        "<th class='l'>cause; advice</th><th class='l'>max throughput (unpaced)</th></tr>"
    )
    for g in capacity:
        flood = "; ".join(f"{fmt_rate(f.recv_rate)} received" for f in g.max_throughput) or "-"
        slo = _e(g.failed_slo or "-") + (
            "" if g.monotone else " <span class='tag'>not monotone</span>"
        )
        out.append(
            "<tr>"
            + "".join(f"<td class='l'>{_hwm(g.keys[k])}</td>" for k in keys)
            + f"<td>{g.runs}</td>"
            f"<td class='l'>{_e(', '.join(fmt_rate(r) for r in g.rates_tested) or '-')}</td>"
            f"<td>{fmt_rate(g.highest_clean_rate)}</td><td>{fmt_rate(g.lowest_failing_rate)}</td>"
            f"<td class='l'>{slo}</td><td>{_cell('p99_us', g.p99_at_clean_us)}</td>"
            f"<td>{fmt_bytes(g.queued_bytes_at_clean)}</td>"
            f"<td class='l'>{_e('; '.join(t for t in (g.cause, g.advice) if t) or '-')}</td>"
            f"<td class='l'>{_e(flood)}</td></tr>"
        )
    what_if = (
        f" The what-if p99 &le; {slo_p99_us:g} &micro;s (--slo-p99-us) stands in for the runs' own p99 SLO "
        "in the verdicts that say so."
        if slo_p99_us is not None
        else ""
    )
    out.append(
        "</table></div><p class='note'>Runs are grouped by "
        + (
            ", ".join(f"<b>{_e(k)}</b>" for k in keys)
            if keys
            else "nothing: every workload field is the same in all runs"
        )
        + " (every workload field and the libzmq version that differ between the runs; the offered rate "
        "is the axis). "
        f"Each run is judged by the SLOs it was made under, by the rules of "
        f"<code>run</code> and <code>capacity</code> (zmqload/contract/judge.py): loss (lost = dropped + "
        f"stranded + unknown, of the expected; drained messages arrived late and count as delivered, refused "
        f"ones were never accepted), the share of the offered load received, p99 from the intended send "
        f"time, and for a capacity search's probes no growing backlog. A run made without SLOs is judged by "
        f"loss only: no latency SLO is set.{what_if} A setting searched by <code>zmqload capacity</code> has "
        f"the search's answer as its verdict. Otherwise the limit lies between the highest clean rate and "
        f"the lowest failing rate above it; <i>failed SLO</i> is what broke there. Unpaced runs (--rate max) "
        f"are max-throughput tests: they offer no rate, so they get no knee.</p>"
    )
    return out


MISSING_SHOWN = 5  # missing seq ranges listed per stream and consumer


def where_and_when(analysis: Analysis, info: RunInfo) -> list[str]:
    """Where messages were lost, and when: fates over time, the first missing seq ranges per
    stream (run.json keeps the first 20), the queue split kernel / libzmq against the HWMs."""
    record = info.record
    copies = info.consumers if info.fanout else 1
    out = [
        figures.later(
            "fates over time",
            plots.fates_over_time,
            analysis.rates,
            info.run_id,
            record,
            copies,
            analysis.window_ns,
        )
    ]
    rows = []
    for s in record.streams:
        for who, ranges in s.missing_ranges.items():
            if ranges:
                shown = ", ".join(
                    f"{a:,}" if a == b else f"{a:,}-{b:,}" for a, b in ranges[:MISSING_SHOWN]
                )
                more = (
                    f" (+{len(ranges) - MISSING_SHOWN} more listed)"
                    if len(ranges) > MISSING_SHOWN
                    else ""
                )
                rows.append(
                    f"<tr><td>{_e(s.stream)}</td><td>{_e(who)}</td><td class='l'>{shown}{more}</td>"
                    f"<td>{_cell('x', s.dropped)}</td><td>{_cell('x', s.stranded)}</td></tr>"
                )
    if rows:
        out.append(
            "<div class='scroll'><table><tr><th>stream</th><th>consumer</th>"
            "<th class='l'>first missing seq ranges</th>"
            "<th>dropped</th><th>stranded</th></tr>" + "".join(rows) + "</table></div>"
        )
    out.append(
        figures.later(
            "queue depth kernel / libzmq",
            plots.queue_split,
            analysis.depth,
            info.run_id,
            info.path,
            record,
            analysis.window_ns,
        )
    )
    return out
