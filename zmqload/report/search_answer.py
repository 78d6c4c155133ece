"""The capacity search's answer, as the report opens with it: one sentence per searched setting from
capacity-search.json (the rate, its bracket, what broke above it and why). It restates the search's
own figures and computes nothing new (docs/CAPACITY.md)."""

from __future__ import annotations

import glob
import os
from typing import TYPE_CHECKING, Any, Optional, Sequence

from ..analysis.verdicts import KEEPS_UP, NAMES, breach_names, fmt_rate, fmt_us, key_text
from ..contract.derived import work_ceiling
from ..contract.sizes import spec_of
from ..contract.search_record import RESULT_FILE, Figures, ProbeEntry, SearchEntry, SearchRecord
from ..contract.states import Slo
from ..contract.sweep_record import OptionValue
from ..errors import RecordError
from ..store.record_files import read_search
from ..contract.patterns import PATTERNS
from ..contract.run_record import half_of
from ..contract.words import REQUESTS, words_for

if TYPE_CHECKING:
    from ..analysis.runs import RunInfo
    from ..analysis.summary_row import SummaryRow
    from ..analysis.verdict_group import VerdictGroup

FILE = RESULT_FILE


def load(paths: list[str]) -> tuple[list[SearchRecord], list[str]]:
    """The searches under the report's input paths (the path itself or one level below), read
    through their type (contract/search_record.py), and a warning for each file that cannot be
    read (one line naming it)."""
    docs, warnings = [], []
    seen = set()
    for path in paths:
        for f in sorted({os.path.join(path, FILE), *glob.glob(os.path.join(path, "*", FILE))}):
            real = os.path.realpath(f)
            if real in seen or not os.path.isfile(f):
                continue
            seen.add(real)
            try:
                docs.append(read_search(f))
            except RecordError as e:
                warnings.append(f"capacity search skipped: {e}")
    return docs, warnings


def slo_p99_us(docs: Sequence[SearchRecord]) -> float | None:
    """The p99 SLO the searches used (the strictest, if they differ), or None."""
    given = [d.slos.slo_p99_us for d in docs if d.slos.slo_p99_us]
    return min(given) if given else None


# Named by the setting's head ('pub-sub tcp 256 B'), never as grouping keys of their own.
HEAD = ("pattern", "transport", "size")


def head(search: SearchEntry) -> str:
    """'pub-sub tcp 256 B': the pattern, transport and size of the searched setting."""
    w = search.workload
    return f"{w.pattern} {w.transport} {spec_of(w.size, w.payload)} B"


def keys(search: SearchEntry) -> dict[str, OptionValue]:
    """What this combination's search varied, beyond the head: {'rcvhwm': 100}."""
    return {k: v for k, v in search.values.items() if k not in HEAD}


def setting(search: SearchEntry) -> str:
    """'pub-sub tcp 256 B, rcvhwm=100': the pattern, transport, size, what the search varied and
    the HWMs it set (they decide whether bursts drop)."""
    w = search.workload
    values = keys(search)
    varied = ", ".join(key_text(k, v) for k, v in values.items())
    hwms = ", ".join(
        f"{k.upper()} {hwm:,}"
        for k, hwm in (("sndhwm", w.sndhwm), ("rcvhwm", w.rcvhwm))
        if hwm is not None and k not in values
    )
    return head(search) + "".join(f", {part}" for part in (varied, hwms) if part)


def _probe_at(search: SearchEntry, rate: float | None, passed: bool) -> ProbeEntry | None:
    """The last probe at `rate` with that outcome (a re-run counts over the first one)."""
    if rate is None:
        return None
    found = None
    for p in search.probes:
        if p.rate == rate and p.passed == passed:
            found = p
    return found


def _mib(kb: float | None, decimals: int = 0) -> str:
    return "-" if kb is None else f"{kb / 1024:,.{decimals}f} MiB"


def _consumer_load(search: SearchEntry, rate: float) -> float:
    """Messages per second each consumer must take at `rate` per producer."""
    w = search.workload
    pattern = PATTERNS.get(w.pattern)  # unknown in a foreign file: the load is shared
    return (
        rate * (search.producers or 1) / (1 if pattern and pattern.fanout else (w.consumers or 1))
    )


def cause(search: SearchEntry, failing: ProbeEntry | None) -> str | None:
    """What limited the answer, from the lowest failing probe. The consumers fell behind when they
    received less than KEEPS_UP of the offered rate until the drain, or the search's own
    --min-achieved or backlog check broke: they are the limit, said with what their simulated
    work allows. Drops while they kept up are bursts overflowing the HWM; a p99 breach while
    they kept up is queueing. None when nothing says."""
    if not failing:
        return None
    slos = [b.slo for b in failing.breaches]
    f = failing.figures or Figures()
    achieved, hi = f.achieved, failing.rate
    w = search.workload
    hwm = f"SNDHWM {_hwm(w.sndhwm)}, RCVHWM {_hwm(w.rcvhwm)}"
    # The receive rate until the drain (throughput_msgs) decides: achieved counts what the fast
    # drain read, and a queue that filled in the first half and then dropped (or only grew into
    # latency) need not break the backlog check.
    offered_rate = f.offered_rate
    received_rate = f.throughput_msgs if failing.figures is not None else None
    slow = bool(
        offered_rate and received_rate is not None and received_rate < KEEPS_UP * offered_rate
    )
    fell_behind = slow or Slo.MIN_ACHIEVED in slos or Slo.BACKLOG in slos
    if slos and slos[0] == Slo.MAX_LOSS and not fell_behind and achieved is not None:
        rate = f"{fmt_rate(received_rate)}, " if received_rate is not None else ""
        return (
            f"limited by drops at the HWM while the consumer kept up on average (at {fmt_rate(hi)} it "
            f"received {rate}{achieved:.2%} of the offered load, no growing backlog; {hwm}): bursts "
            f"overflow the pipes, a larger HWM absorbs them"
        )
    delay = w.consumer_delay_us
    if words_for(w.pattern, w.role) is REQUESTS:  # a service of the user's: no consumer of ours
        if fell_behind:
            answered = (
                f": it answered {fmt_rate(received_rate)} of the {fmt_rate(offered_rate)} requested"
                if slow
                else ""
            )
            return f"limited by your service (it fell behind{answered})"
        if Slo.MAX_LOSS in slos:
            return "limited by your service: requests went unanswered within --reply-timeout-ms"
        if slos == [Slo.SLO_P99_US]:
            return "limited by your service's round trip: p99 over the SLO while every request was answered"
        return None
    if fell_behind:
        took = (
            f"took {fmt_rate(received_rate)} of the {fmt_rate(offered_rate)} offered"
            if slow
            else ""
        )
        if not delay:
            return "limited by the consumer (it fell behind" + (f": {took})" if took else ")")
        ceiling, consumers = work_ceiling(delay), w.consumers or 1
        text = (
            f"limited by the consumer, doing {delay:g} µs of work per message (at most {fmt_rate(ceiling)} "
            f"each, {consumers} consumer{'s' * (consumers > 1)})"
        )
        if hi and _consumer_load(search, hi) < 0.8 * ceiling:
            # the work alone would carry this load: the consumer's share of the CPU did not
            text += (
                f", and it fell behind at {fmt_rate(_consumer_load(search, hi))} per consumer"
                + (f" ({took})" if took else "")
                + ", below what its work alone allows (it shares the CPU "
                "with the producers and libzmq's I/O threads)"
            )
        return text
    if slos == [Slo.SLO_P99_US]:
        return "limited by latency: p99 over the SLO while nothing was lost and no backlog grew (queueing)"
    return None


def _hwm(value: Optional[int]) -> str:
    return "default" if value is None else f"{value:,}"


def is_cut_short(search: SearchEntry, record: SearchRecord | None) -> bool:
    """The search `record` was in when it stopped short (contract/search_record.SearchRecord.cut_short)."""
    return record is not None and record.cut_short is search


_STOPPED = {"running": "still running, or killed", "interrupted": "interrupted", "failed": "failed"}


def _cut_short_text(search: SearchEntry, record: SearchRecord) -> str:
    """'the search was cut short (interrupted) after 2 probes': why and how far."""
    n = len(search.probes)
    return (
        f"the search was cut short ({_STOPPED.get(str(record.status), str(record.status))}) after {n} "
        f"probe{'s' * (n != 1)}"
    )


def sentence(search: SearchEntry, record: SearchRecord | None = None) -> str:
    """One sentence: the answer and why it is there; for the combination a search cut short was
    in (`record`, the search it belongs to), how far it got."""
    name = setting(search)
    lo, hi = search.bracket
    producers = search.producers or 1
    if record is not None and is_cut_short(search, record):
        if lo is None and hi is None:
            reached = "no probe had finished" if not search.probes else "it had no bracket yet"
        elif hi is None:
            reached = f"it had reached {fmt_rate(lo)}, every probe passing (no failing rate yet)"
        elif lo is None:
            reached = f"every probe had failed, down to {fmt_rate(hi)} (no passing rate yet)"
        else:
            reached = f"it had reached the bracket {fmt_rate(lo)} - {fmt_rate(hi)} (highest passing - lowest failing)"
        return (
            f"{name}: no answer: {_cut_short_text(search, record)}, before it found one; {reached}."
        )
    if search.generator_limited:
        probe = next((p for p in search.probes if p.generator_limited), None)
        reached_rate = (
            probe.figures.reached_rate if probe is not None and probe.figures is not None else None
        )
        return (
            f"{name}: no capacity measured: the load generator could not keep its schedule at "
            f"{fmt_rate(probe.rate if probe is not None else None)} (it reached {fmt_rate(reached_rate)}, without "
            f"pushback from the sockets); add --producers to offer more load."
        )
    if not search.converged:
        return f"{name}: no answer: {search.reason or 'the search did not converge'}."
    rate = search.max_sustainable_rate
    total = (
        f" per producer ({fmt_rate(rate * producers)} in total)" if producers > 1 and rate else ""
    )
    failing = _probe_at(search, hi, passed=False)
    why = cause(search, failing)
    restart = search.workload.restart
    parts = [
        f"{name}: {fmt_rate(rate)} sustainable{total}"
        + (f" with the restarts {restart}" if restart else "")
        + f" (bracket {fmt_rate(lo)} - {fmt_rate(hi)})"
        + (f", {why}" if why else "")
    ]
    breaches = failing.breaches if failing is not None else []
    if breaches:
        parts.append(f"above it at {fmt_rate(hi)}: {breaches[0].text or breaches[0].slo}")
    w = search.workload
    delay = w.consumer_delay_us
    if delay and not (why or "").startswith("limited by the consumer"):
        consumers = w.consumers or 1
        parts.append(
            f"each consumer does {delay:g} µs of work per message "
            f"(at most {fmt_rate(work_ceiling(delay))} each, {consumers} consumer{'s' * (consumers > 1)})"
        )
    answer = _probe_at(search, rate, passed=True)
    at = answer.figures if answer is not None else None
    if at is not None:
        peak = at.queue_peak
        parts.append(
            f"at that rate p99 {fmt_us(at.p99_us or 0)}"
            + (
                f", queue peak {peak.messages or 0:,} messages ({peak.kernel_messages or 0:,} in kernel "
                f"buffers, {peak.libzmq_messages or 0:,} in libzmq)"
                if peak is not None
                else ""
            )
            + (
                f", consumer RSS {_mib(at.consumer_max_rss_kb)}"
                if at.consumer_max_rss_kb is not None
                else ""
            )
        )
    return "; ".join(parts) + "."


def probe_rows(search: SearchEntry) -> list[dict[str, Any]]:
    """The probes in the order run, for the report's table."""
    rows = []
    for p in search.probes:
        f = p.figures
        rows.append(
            {
                "rate": p.rate,
                "passed": p.passed,
                "confirm": p.confirm,
                "achieved": f.achieved if f is not None else None,
                "loss_ratio": f.loss_ratio if f is not None else None,
                "p99_us": f.p99_us if f is not None else None,
                "failed_slo": None if p.failed_slo is None else str(p.failed_slo),
                "run_dir": p.run_dir,
            }
        )
    return rows


# What a search ended with, as the table says it: only a converged search has a capacity.
CONVERGED, GENERATOR_LIMITED, NO_ANSWER, CUT_SHORT = (
    "converged",
    "generator limited",
    "no answer",
    "cut short",
)


def status(search: SearchEntry, record: SearchRecord | None = None) -> str:
    """How the search of this combination ended (`record`: the search it belongs to, which says
    whether it was cut short in this combination)."""
    if is_cut_short(search, record):
        return CUT_SHORT
    if search.generator_limited:
        return GENERATOR_LIMITED
    return CONVERGED if search.converged else NO_ANSWER


def answer_probe(search: SearchEntry, record: SearchRecord | None = None) -> ProbeEntry | None:
    """The probe the answer stands on: the last pass at the max sustainable rate (its re-run)."""
    if status(search, record) != CONVERGED:
        return None
    return _probe_at(search, search.max_sustainable_rate, passed=True)


def run_id(run_dir: str | None) -> str | None:
    """The run id of a probe's run directory (runs/run=<id>), as the report names its runs."""
    if not run_dir:
        return None
    base = os.path.basename(os.path.normpath(run_dir))
    half = half_of(base)  # a service's probe is a producer half: run=<id>.producer-half
    if half is not None:
        return half[0]
    return base[len("run=") :] if base.startswith("run=") else base


def _failed_slos(search: SearchEntry) -> str | None:
    """Every SLO the lowest failing probe broke, as the runs table says them ('backlog+p99')."""
    hi = search.bracket[1]
    failing = next((p for p in reversed(search.probes) if not p.passed and p.rate == hi), None)
    if failing is not None and failing.breaches:
        return breach_names(failing.breaches)
    return None if search.failed_slo is None else NAMES.get(str(search.failed_slo))


def table_row(
    search: SearchEntry, search_id: str | None = None, record: SearchRecord | None = None
) -> dict[str, Any]:
    """One row of "max sustainable rate by HWM, with its memory and latency cost": the grouping
    keys, the answer and its bracket, the SLO that broke above it, and at the answer probe its
    p99 / p99.9, queue peak by place and the consumer's peak RSS. Figures as the search wrote
    them (capacity-search.json), unrounded; None where there is no answer. `record`: the search
    it belongs to (whether it was cut short in this combination)."""
    lo, hi = search.bracket
    probe = answer_probe(search, record)
    at = probe.figures if probe is not None else None
    peak = at.queue_peak if at is not None else None
    state = status(search, record)
    if state == CUT_SHORT and record is not None:
        reason: Optional[str] = _cut_short_text(search, record)
    else:
        reason = None if state == CONVERGED else (search.reason or state)
    return {
        "search_id": search_id,
        "setting": head(search),
        "keys": keys(search),
        "producers": search.producers or 1,
        "status": state,
        "reason": reason,
        "max_sustainable_rate": search.max_sustainable_rate if state == CONVERGED else None,
        "bracket": [lo, hi],
        "failed_slo": None if search.failed_slo is None else str(search.failed_slo),
        "failed_slos": _failed_slos(search),
        "answer_run": run_id(probe.run_dir) if probe else None,
        "p99_us": at.p99_us if at is not None else None,
        "p99_9_us": at.p99_9_us if at is not None else None,
        "queue_peak_messages": peak.messages if peak is not None else None,
        "queue_peak_kernel_messages": peak.kernel_messages if peak is not None else None,
        "queue_peak_libzmq_messages": peak.libzmq_messages if peak is not None else None,
        "consumer_max_rss_kb": at.consumer_max_rss_kb if at is not None else None,
    }


def table(docs: Sequence[SearchRecord]) -> list[dict[str, Any]]:
    """The table's rows, one per searched combination of every search among the inputs."""
    return [table_row(s, doc.search_id, doc) for doc in docs for s in doc.searches]


def key_names(rows: list[dict[str, Any]]) -> list[str]:
    """The grouping keys of the table's rows, in the order the searches name them."""
    return list(dict.fromkeys(k for r in rows for k in r["keys"]))


def key_cell(row: dict[str, Any], name: str) -> str:
    """A grouping key's value in the table: 'default' when unset, '-' when not varied there."""
    if name not in row["keys"]:
        return "-"
    value = row["keys"][name]
    return "default" if value is None else str(value)


def _count(n: Any) -> str:
    return "-" if n is None else f"{n:,.0f}"


def cells(row: dict[str, Any]) -> dict[str, str]:
    """A table row as text, the same in the HTML and the Markdown report: rates in msg/s per
    producer as the search ran them (exact), latency in whole us, RSS in MiB."""
    lo, hi = row["bracket"]
    rate = row["max_sustainable_rate"]
    if row["status"] == CONVERGED:
        answer = f"{_count(rate)}" + (
            f" ({_count(rate * row['producers'])} in total)" if row["producers"] > 1 else ""
        )
    elif row["status"] == GENERATOR_LIMITED:
        answer = "no capacity: the load generator was the limit (add --producers)"
    else:
        answer = f"no capacity: {row['reason']}"
    peak = row["queue_peak_messages"]
    return {
        "setting": row["setting"],
        "max_sustainable_rate": answer,
        "bracket": f"{_count(lo)} - {_count(hi)}",
        "failed_slo": row["failed_slos"] or "-",
        "p99_us": _count(row["p99_us"]),
        "p99_9_us": _count(row["p99_9_us"]),
        "queue_peak": "-"
        if peak is None
        else (
            f"{_count(peak)} ({_count(row['queue_peak_kernel_messages'])} / "
            f"{_count(row['queue_peak_libzmq_messages'])})"
        ),
        "consumer_rss": _mib(row["consumer_max_rss_kb"], 1),
        "answer_run": row["answer_run"] or "-",
    }


TABLE_TITLE = "Max sustainable rate by HWM, with its memory and latency cost"
# The title when no HWM varied: "by HWM" over one HWM would promise a comparison.
NO_HWM_TITLE = "Max sustainable rate, with its memory and latency cost"


def table_title(rows: list[dict[str, Any]]) -> str:
    """The search table's title, in the page and in summary.md: "by HWM" only where an HWM varied."""
    varied = [
        k for k in key_names(rows) if k.endswith("hwm") and len({key_cell(r, k) for r in rows}) > 1
    ]
    return TABLE_TITLE if varied else NO_HWM_TITLE


# (cells() key, column heading); the grouping keys go between the setting and the answer.
TABLE_COLUMNS = (
    ("setting", "setting"),
    ("max_sustainable_rate", "max sustainable rate (/s per producer)"),
    ("bracket", "bracket [highest pass - lowest fail]"),
    ("failed_slo", "failed SLO above it"),
    ("p99_us", "p99 at it (µs)"),
    ("p99_9_us", "p99.9 at it (µs)"),
    ("queue_peak", "queue peak, msgs (kernel / libzmq)"),
    ("consumer_rss", "consumer peak RSS"),
    ("answer_run", "answer probe"),
)


# -- the search's answer as the verdict of its setting (analysis/verdicts.py's groups) -------------------
def word_groups(capacity: list[VerdictGroup], docs: Sequence[SearchRecord]) -> None:
    """In place: each verdict group of a search's probes (analysis.verdicts.search_verdict) takes
    the cause this sentence gives (`cause`), so the page's verdict for the setting is the search's
    answer, in the search's words, and no second one."""
    by_id = {doc.search_id: doc for doc in docs}
    for g in capacity:
        found = g.search
        if found is None or found.search_id not in by_id:
            continue
        doc = by_id[found.search_id]
        entry = doc.searches[found.index]
        if status(entry, doc) != CONVERGED:
            g.verdict = f"the capacity search's outcome: {sentence(entry, doc).split(': ', 1)[-1].rstrip('.')}"
            continue
        why = cause(entry, _probe_at(entry, entry.bracket[1], passed=False))
        g.cause, g.advice = why, None


def disagreements(
    capacity: list[VerdictGroup],
    run_rows: list[SummaryRow],
    runs: Sequence[RunInfo],
    docs: Sequence[SearchRecord],
) -> list[str]:
    """Probes the report's judge (the one judge, over Spark's figures of the probe's records and the
    SLOs the probe recorded) passes where the search failed them, or the other way round: one
    warning each (none expected: the same rules over the same records)."""
    from ..analysis.verdicts import RunView

    records = {r.run_id: r.record for r in runs}
    rows = {r.run: r for r in run_rows}
    out = []
    for doc in docs:
        for entry in doc.searches:
            for p in entry.probes:
                rid = run_id(p.run_dir)
                row = rows.get(rid) if rid else None
                if row is None or p.error or p.generator_limited:
                    continue
                mine = [b.slo for b in RunView(row, records.get(rid or ""), probe=True).breaches()]
                theirs = [str(b.slo) for b in p.breaches]
                if mine != theirs:
                    out.append(
                        f"probe {rid} at {fmt_rate(p.rate)}: the search judged it "
                        f"{'passed' if p.passed else 'failed (' + ', '.join(theirs) + ')'}, the report's "
                        f"judge over its records {'passes' if not mine else 'fails (' + ', '.join(mine) + ')'} it"
                    )
    return out
