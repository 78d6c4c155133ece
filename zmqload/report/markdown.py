"""The short Markdown summary printed on stdout."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

from ..analysis.verdicts import fmt_bytes, fmt_rate
from . import search_answer
from .html import ROUND_TRIP_COLUMNS, offered_cell, round_trip_runs

if TYPE_CHECKING:
    from ..analysis.pipeline import Analysis
    from ..contract.search_record import SearchRecord


def _f(x: Optional[float], fmt: str = "{:.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def summary(analysis: Analysis, capacity: list[dict[str, Any]], recommendations: list[str], out_dir: str,
            searches: Sequence[SearchRecord] = ()) -> str:
    group_of = {rid: g["group"] for g in capacity for rid in g["run_ids"]}
    lines = ["# zmqload report", ""]
    answers = [search_answer.sentence(s, doc) for doc in searches for s in doc.searches]
    if answers:         # the capacity search's answer comes first
        lines += ["## Capacity search", "", *(f"- {a}" for a in answers), "",
                  *search_table(search_answer.table(list(searches))), ""]
    lines += [
             "| run | status | group | pattern/transport | size | offered | throughput | loss % | drained | dropped | stranded | sender drops | p99 us | p99.9 us | peak queued |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in analysis.run_rows():
        loss = r.get("loss_ratio")
        lines.append(f"| {r['run']} | {r.get('status')}{' (interrupted)' if r.get('interrupted') else ''} | "
                     f"{group_of.get(r['run'], '-')} | "
                     f"{r.get('pattern')}/{r.get('transport')} | {r.get('size')} | {offered_cell(r)} | "
                     f"{fmt_rate(r.get('recv_rate'))} | {_f(None if loss is None else 100 * loss, '{:.3g}')} | "
                     f"{_f(r.get('drained'), '{}')} | {_f(r.get('dropped'), '{}')} | {_f(r.get('stranded'), '{}')} | "
                     f"{_f(r.get('dropped_sender'), '{}')} | {_f(r.get('latency_intended_p99_us'))} | "
                     f"{_f(r.get('latency_intended_p99_9_us'))} | {fmt_bytes(r.get('queued_bytes_max'))} |")
    rtt_rows = round_trip_runs(analysis)
    if rtt_rows:
        lines += ["", "## Round trips (req-rep, from the intended send time, us)", "",
                  "| run | " + " | ".join(h for _, h in ROUND_TRIP_COLUMNS) + " |",
                  "|---|" + "---|" * len(ROUND_TRIP_COLUMNS)]
        lines += [f"| {r['run']} | " + " | ".join(_f(r.get(k)) for k, _ in ROUND_TRIP_COLUMNS) + " |"
                  for r in rtt_rows]
    if capacity:
        keys = ", ".join(capacity[0]["key_names"]) or "nothing (one setting)"
        lines += ["", "## Capacity verdicts", "", f"Grouped by: {keys}", ""]
        lines += [f"- {rec}" for rec in recommendations]
    lines += ["", f"Report: {out_dir}/index.html (also summary.parquet, summary.csv, capacity.json)"]
    return "\n".join(lines)


def search_table(rows: list[dict[str, Any]]) -> list[str]:
    """The capacity search's table, the cells of the HTML report's (search_answer.cells)."""
    keys = search_answer.key_names(rows)
    (setting, setting_head), *figures = search_answer.TABLE_COLUMNS
    out = [f"### {search_answer.TABLE_TITLE}", "",
           "| " + " | ".join([setting_head, *keys, *(h for _, h in figures)]) + " |",
           "|" + "---|" * (1 + len(keys) + len(figures))]
    for r in rows:
        c = search_answer.cells(r)
        values = [c[setting], *(search_answer.key_cell(r, k) for k in keys), *(c[k] for k, _ in figures)]
        out.append("| " + " | ".join(v.replace("|", "\\|") for v in values) + " |")
    return out

