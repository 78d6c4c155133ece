"""The report in Markdown: every table in `summary.md` under --out, and a short summary for the
terminal (the answers, a narrow runs table, the verdicts, where the page is), no line wider than
WIDTH."""

from __future__ import annotations

import os
import textwrap
from typing import TYPE_CHECKING, Any, Optional, Sequence

from ..analysis.summary_row import SummaryRow
from ..analysis import one_side
from ..analysis.verdicts import fmt_bytes, fmt_clocks, fmt_rate, fmt_us
from . import restart_table, search_answer
from .html import ROUND_TRIP_COLUMNS, offered_cell, round_trip_runs

if TYPE_CHECKING:
    from ..analysis.one_side import ConsumerSide, ProducerSide
    from ..analysis.pipeline import Analysis
    from ..analysis.verdict_group import VerdictGroup
    from ..contract.search_record import SearchRecord

SUMMARY_FILE = "summary.md"
WIDTH = 120  # the terminal summary's widest line
RUNS_SHOWN = 20  # runs in the terminal's table; the rest are in summary.md
ELLIPSIS = "..."


def _f(x: Optional[float], fmt: str = "{:.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def _status(r: SummaryRow) -> str:
    return f"{r.status}{' (interrupted)' if r.interrupted else ''}"


def _loss(r: SummaryRow) -> str:
    loss = r.loss_ratio
    return _f(None if loss is None else 100 * loss, "{:.3g}")


def summary(
    analysis: Analysis,
    capacity: list[VerdictGroup],
    recommendations: list[str],
    out_dir: str,
    searches: Sequence[SearchRecord] = (),
    consumer_sides: Sequence[ConsumerSide] = (),
    producer_sides: Sequence[ProducerSide] = (),
) -> str:
    """Writes every table to `out_dir`/summary.md; returns the short summary the report prints."""
    sides = (consumer_sides, producer_sides)
    write(out_dir, full(analysis, capacity, recommendations, out_dir, searches, *sides))
    return terminal(analysis, capacity, recommendations, out_dir, searches, *sides)


def write(out_dir: str, text: str) -> str:
    """summary.md under out_dir (written whole, then renamed into place); its path."""
    path = os.path.join(out_dir, SUMMARY_FILE)
    tmp = os.path.join(out_dir, f".{SUMMARY_FILE}.tmp")
    with open(tmp, "w") as f:
        f.write(text + "\n")
    os.replace(tmp, path)
    return path


def _answers(searches: Sequence[SearchRecord]) -> list[str]:
    return [search_answer.sentence(s, doc) for doc in searches for s in doc.searches]


def full(
    analysis: Analysis,
    capacity: list[VerdictGroup],
    recommendations: list[str],
    out_dir: str,
    searches: Sequence[SearchRecord] = (),
    consumer_sides: Sequence[ConsumerSide] = (),
    producer_sides: Sequence[ProducerSide] = (),
) -> str:
    """The whole report in Markdown: summary.md."""
    group_of = {rid: g.group for g in capacity for rid in g.run_ids}
    lines = ["# zmqload report", ""]
    answers = _answers(searches)
    if answers:  # the capacity search's answer comes first
        lines += [
            "## Capacity search",
            "",
            *(f"- {a}" for a in answers),
            "",
            *search_table(search_answer.table(list(searches))),
            "",
        ]
    lines += side_lines(consumer_sides) + producer_lines(producer_sides)
    lines += [
        "| run | status | group | pattern/transport | size | offered | throughput | loss % | drained | dropped | stranded | sender drops | p99 µs | p99.9 µs | peak queued |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in analysis.run_rows():
        lines.append(
            f"| {r.run} | {_status(r)} | "
            f"{group_of.get(r.run, '-')} | "
            f"{r.pattern}/{r.transport} | {r.size} | {offered_cell(r)} | "
            f"{fmt_rate(r.recv_rate)} | {_loss(r)} | "
            f"{_f(r.drained, '{}')} | {_f(r.dropped, '{}')} | {_f(r.stranded, '{}')} | "
            f"{_f(r.dropped_sender, '{}')} | {_f(r.latency_intended.p99)}{fmt_clocks(r)} | "
            f"{_f(r.latency_intended.p99_9)}{fmt_clocks(r)} | {fmt_bytes(r.queued_bytes_max)} |"
        )
    rtt_rows = round_trip_runs(analysis)
    if rtt_rows:
        lines += [
            "",
            "## Round trips and answers (req-rep; round trips from the intended send time, us)",
            "",
            "| run | " + " | ".join(h for _, h in ROUND_TRIP_COLUMNS) + " |",
            "|---|" + "---|" * len(ROUND_TRIP_COLUMNS),
        ]
        lines += [
            f"| {r.run} | " + " | ".join(_f(r.column(k)) for k, _ in ROUND_TRIP_COLUMNS) + " |"
            for r in rtt_rows
        ]
    lines += restart_lines(analysis)
    if capacity:
        keys = ", ".join(capacity[0].key_names) or "nothing (one setting)"
        lines += ["", "## Capacity verdicts", "", f"Grouped by: {keys}", ""]
        lines += [f"- {rec}" for rec in recommendations]
    lines += [
        "",
        f"Report: {out_dir}/index.html (also summary.parquet, summary.csv, capacity.json)",
    ]
    return "\n".join(lines)


def restart_lines(analysis: Analysis) -> list[str]:
    """Every restart of every run (--restart): the page's table (report/restart_table.py)."""
    rows = [(info.run_id, r) for info in analysis.runs for r in info.record.restarts]
    if not rows:
        return []
    return [
        "",
        "## Restarts",
        "",
        "| run | " + " | ".join(restart_table.COLUMNS) + " |",
        "|---|" + "---|" * len(restart_table.COLUMNS),
        *(f"| {rid} | " + " | ".join(restart_table.cells(r)) + " |" for rid, r in rows),
        "",
        restart_table.NOTE,
    ]


def terminal(
    analysis: Analysis,
    capacity: list[VerdictGroup],
    recommendations: list[str],
    out_dir: str,
    searches: Sequence[SearchRecord] = (),
    consumer_sides: Sequence[ConsumerSide] = (),
    producer_sides: Sequence[ProducerSide] = (),
) -> str:
    """The short summary: the answers, a narrow runs table, the verdicts, where the rest is."""
    lines = ["# zmqload report", ""]
    answers = _answers(searches)
    if answers:
        lines += ["## Capacity search", "", *(wrap(f"- {a}") for a in answers), ""]
    lines += [wrap(line) for line in side_lines(consumer_sides) + producer_lines(producer_sides)]
    rows = analysis.run_rows()
    if rows or not (consumer_sides or producer_sides):
        lines += [f"## Runs ({len(rows)})", "", *runs_table(rows[:RUNS_SHOWN])]
    if len(rows) > RUNS_SHOWN:
        lines.append(f"(and {len(rows) - RUNS_SHOWN} more: {SUMMARY_FILE})")
    if capacity:
        keys = ", ".join(capacity[0].key_names) or "nothing (one setting)"
        lines += ["", "## Capacity verdicts", "", wrap(f"Grouped by: {keys}"), ""]
        lines += [wrap(f"- {rec}") for rec in recommendations]
    tables = "every table: fates, latency, round trips" + (
        ", the search's table" if answers else ""
    )
    lines += [
        "",
        f"Report: {os.path.join(out_dir, 'index.html')}",
        wrap(
            f"Tables: {os.path.join(out_dir, SUMMARY_FILE)} ({tables}); summary.parquet, summary.csv and "
            "capacity.json beside it"
        ),
    ]
    return "\n".join(lines)


def side_lines(sides: Sequence[ConsumerSide]) -> list[str]:
    """Consumer-only runs in a line each: what arrived of each kind, the header-writer's holes
    and duplicates, the foreign rate and gaps (the page draws them over time)."""
    if not sides:
        return []
    lines = ["## Your producer, as zmqload's consumers saw it", ""]
    for side in sides:
        parts = []
        streams = one_side.stream_lines(side.info)
        if streams:
            holes = sum(s["holes"] or 0 for s in streams)
            dups = sum(s["duplicates"] for s in streams)
            got = sum(s["received"] for s in streams)
            parts.append(
                f"{got:,} with zmqload's header from {len(streams)} stream(s), {holes:,} holes, "
                f"{dups:,} duplicates"
            )
        summary = side.info.record.summary
        foreign = summary.foreign if summary else None
        if foreign and foreign.messages:
            gaps = foreign.gap_ns
            parts.append(
                f"{foreign.messages:,} foreign at {fmt_rate(foreign.rate_msgs)} (gaps p50 "
                f"{_gap(gaps.get('p50'))}, p99 {_gap(gaps.get('p99'))}, max {_gap(gaps.get('max'))})"
            )
        lines.append(f"- {side.run_id}: " + ("; ".join(parts) or "nothing arrived"))
    return [*lines, ""]


def producer_lines(sides: Sequence[ProducerSide]) -> list[str]:
    """Producer-only runs in a line each: sent, refused by the socket, and how long a sent message
    waited past its intended time (the page draws them over time)."""
    if not sides:
        return []
    lines = ["## Your consumer, as zmqload's producers saw it", ""]
    for side in sides:
        st, wait = side.statuses, side.wait_us
        refused = sum(n for k, n in st.items() if k != "ok")
        waited = (
            f"; waited past the intended send time p50 {fmt_us(wait['p50'])}, p99 "
            f"{fmt_us(wait['p99'])}, max {fmt_us(wait['max'])}"
            if wait
            else ""
        )
        lines.append(
            f"- {side.run_id}: {st.get('ok', 0):,} of {sum(st.values()):,} sent, {refused:,} "
            f"refused ({', '.join(f'{k} {n:,}' for k, n in st.items() if k != 'ok') or 'none'})"
            + waited
        )
    return [*lines, ""]


def _gap(ns: int | None) -> str:
    return "-" if ns is None else fmt_us(ns / 1e3)


def wrap(text: str) -> str:
    """A line of prose folded to WIDTH columns, the continuation lines indented (a word longer
    than that, a path, is left whole)."""
    return "\n".join(
        textwrap.wrap(
            text, WIDTH, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
        )
    )


RUN_COLUMNS = ("run", "status", "offered", "throughput", "loss %", "p99 µs")


def runs_table(rows: Sequence[SummaryRow]) -> list[str]:
    """The terminal's runs table: a few columns, run ids cut at the front (keeping their
    distinctive end) where a row would be wider than WIDTH."""
    cells = [
        [
            str(r.run),
            _status(r),
            offered_cell(r),
            fmt_rate(r.recv_rate),
            _loss(r),
            _f(r.judged_p99_us) + fmt_clocks(r),
        ]
        for r in rows
    ]
    others = max((sum(len(c) for c in row[1:]) for row in cells), default=0)
    room = max(12, WIDTH - others - 3 * len(RUN_COLUMNS) - 1)  # "| " + " | " between + " |"
    for row in cells:
        if len(row[0]) > room:
            row[0] = ELLIPSIS + row[0][len(row[0]) - room + len(ELLIPSIS) :]
    return [
        "| " + " | ".join(RUN_COLUMNS) + " |",
        "|" + "---|" * len(RUN_COLUMNS),
        *("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells),
    ]


def search_table(rows: list[dict[str, Any]]) -> list[str]:
    """The capacity search's table, the cells of the HTML report's (search_answer.cells)."""
    keys = search_answer.key_names(rows)
    (setting, setting_head), *figures = search_answer.TABLE_COLUMNS
    out = [
        f"### {search_answer.table_title(rows)}",
        "",
        "| " + " | ".join([setting_head, *keys, *(h for _, h in figures)]) + " |",
        "|" + "---|" * (1 + len(keys) + len(figures)),
    ]
    for r in rows:
        c = search_answer.cells(r)
        values = [
            c[setting],
            *(search_answer.key_cell(r, k) for k in keys),
            *(c[k] for k, _ in figures),
        ]
        out.append("| " + " | ".join(v.replace("|", "\\|") for v in values) + " |")
    return out
