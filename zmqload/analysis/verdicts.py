"""The report's verdicts: per setting, which offered rates were carried, where it broke, which SLO
and what to change, from the summary rows and each run.json. Every run is judged by
contract/judge.py against the SLOs it was made under; --slo-p99-us is a what-if (docs/REPORT.md).
Plain Python."""

from __future__ import annotations

import math

import dataclasses
import os
import re
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Iterable, Optional, Sequence, Union

from ..contract import judge as rules
from ..contract.fates import DROPPED, FATES
from ..contract.derived import work_ceiling
from ..contract.run_record import QueuePeak, RunRecord
from ..contract.search_record import SearchEntry, SearchRecord
from ..contract.states import Slo
from ..contract.workload import Slos
from .summary_row import SummaryRow
from .verdict_group import Flood, SearchRef, VerdictGroup

if TYPE_CHECKING:
    from .runs import RunInfo

# Workload fields that do not change what is measured, so never split a group; `rate` is the
# axis the verdict is about; `label` holds a sweep point's axis values, fields themselves;
# `count` and `duration` set how long a run lasts, not what the system under test is (a
# capacity search's 1 s probes and a 2M-message max-throughput run are not two settings).
NOT_SETTINGS = frozenset(
    {
        "rate",
        "out",
        "run_name",
        "compression",
        "chunk_rows",
        "slice_ms",
        "port",
        "label",
        "count",
        "duration",
    }
)
# When the run.json is not at hand, the workload fields the summary rows carry.
ROW_SETTINGS = (
    "pattern",
    "transport",
    "size",
    "sndhwm",
    "rcvhwm",
    "proxy_sndhwm",
    "proxy_rcvhwm",
    "linger_ms",
    "send_mode",
    "producers",
    "consumers",
)
# The SLO names a verdict reports (failed_slo): the judge's (contract/judge.py) by short names, and
# what stops a run from being judged at all (the generator's own limit, a run cut short).
LOSS, ACHIEVED, BACKLOG, P99, RESTART_LOST, RECOVERY, GENERATOR, INCOMPLETE = (
    "loss",
    "achieved",
    "backlog",
    "p99",
    "restart loss",
    "recovery",
    "generator",
    "incomplete run",
)
NAMES = {
    Slo.MAX_LOSS.value: LOSS,
    Slo.MIN_ACHIEVED.value: ACHIEVED,
    Slo.BACKLOG.value: BACKLOG,
    Slo.SLO_P99_US.value: P99,
    Slo.SLO_RESTART_LOST.value: RESTART_LOST,
    Slo.SLO_RECOVERY_MS.value: RECOVERY,
    Slo.GENERATOR.value: GENERATOR,
}


def breach_names(breaches: Sequence[Any]) -> str:
    """What broke, as every table of the report says it: 'backlog+p99' (NAMES, in the judge's
    order), for a run's judgement and a search's failing probe alike."""
    return "+".join(NAMES.get(str(b.slo), str(b.slo)) for b in breaches)


# A consumer keeps up when it received this share of what was offered to it.
KEEPS_UP = 0.95
# The machine-readable verdict of a group (summary.parquet/csv, capacity.json), after its keys.
VERDICT_COLUMNS = ("group", "highest_clean_rate", "lowest_failing_rate", "failed_slo", "monotone")

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1e3,
    "kb": 1e3,
    "m": 1e6,
    "mb": 1e6,
    "g": 1e9,
    "gb": 1e9,
    "t": 1e12,
    "tb": 1e12,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def parse_bytes(text: object) -> int:
    """'64MiB' -> 67108864, '1GiB', '500MB', '1e6', '4096' -> bytes. ValueError otherwise."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (use e.g. 64MiB, 1GiB, 500MB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def fmt_bytes(n: Optional[float]) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit, f in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= f:
            return f"{n / f:.1f} {unit}"
    return f"{n:.0f} B"


def fmt_us(us: Optional[float]) -> str:
    """A latency as a person reads it: '812 µs' below 10,000 µs, '50.1 ms' above, '1.23 s' from a second."""
    if us is None or (isinstance(us, float) and math.isnan(us)):
        return "-"
    if us >= 1e6:
        return f"{us / 1e6:,.3g} s" if us < 1e9 else f"{us / 1e6:,.0f} s"
    if us >= 1e4:
        return f"{us / 1e3:.3g} ms"
    return f"{us:,.0f} µs" if us >= 10 else f"{us:.3g} µs"


def fmt_clocks(row: SummaryRow) -> str:
    """What a one-way latency of a placed run is good to through its hosts' clocks, to print
    beside it: ' ± 75 µs', or '' on one host."""
    uncertainty = row.clock_uncertainty_us
    return "" if uncertainty is None else f" ± {fmt_us(uncertainty)}"


def fmt_rate(r: Optional[float]) -> str:
    if r is None:
        return "-"
    if r >= 1e6:
        return f"{r / 1e6:.2f}M/s"
    if r >= 1e3:
        return f"{r / 1e3:.1f}k/s"
    return f"{r:.0f}/s"


def plain(value: object) -> object:
    """A value as a user types it: a whole float as an integer (20.0 -> 20)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def key_text(name: str, value: object) -> str:
    """One grouping key as a user would type it: 'rcvhwm=10', 'consumer_delay_us=40'."""
    return f"{name}={'default' if value is None else plain(value)}"


def offered(
    row: SummaryRow,
) -> Any:  # float | None: Any, as callers sort by it once Nones are left out
    """The offered rate of a paced run (the schedule's rate x producers); None when unpaced:
    a max-throughput test offers whatever the producers manage, which is no offered rate."""
    per = row.rate_per_producer
    if not per:
        return None
    return per * (row.producers or 1)


def judged_slos(made_with: Optional[Slos], what_if_p99_us: Optional[float]) -> Slos:
    """The SLOs a run is judged by here: those it was made under (none: loss only), the p99 one
    replaced by the report's what-if when given."""
    base = made_with if made_with is not None and made_with.given else rules.LOSS_ONLY
    if what_if_p99_us is None:
        return base
    return dataclasses.replace(base, slo_p99_us=what_if_p99_us)


def judged_by_text(made_with: Optional[Slos], probe: bool, what_if_p99_us: Optional[float]) -> str:
    """How a run is judged, in words: 'capacity probes, by their search's SLOs: --max-loss 0, ..., no
    growing backlog'."""
    if made_with is not None and made_with.given:
        whose = (
            "capacity probes, by their search's SLOs" if probe else "runs made with SLOs, by those"
        )
        own = f"{whose}: {rules.describe(made_with, backlog=probe)}"
        if what_if_p99_us is not None:
            own += f" (the p99 SLO replaced by the what-if --slo-p99-us {what_if_p99_us:g})"
        return own
    text = "runs made without SLOs: loss only (--max-loss 0)"
    return text + (
        f" and the what-if --slo-p99-us {what_if_p99_us:g}"
        if what_if_p99_us is not None
        else ", no latency SLO set"
    )


class RunView:
    """One run as the verdicts see it: its summary row, its workload and run.json figures.
    `probe`: the run is a capacity search's probe (judged with the backlog rule, as the search did)."""

    def __init__(self, row: SummaryRow, record: RunRecord | None, probe: bool = False):
        self.row, self.record, self.probe = row, record, probe
        # the settings the runs are grouped by: the record's workload, else the row's columns
        self.workload = (
            dataclasses.asdict(record.workload)
            if record is not None
            else {k: row.column(k) for k in ROW_SETTINGS}
        )
        self.workload["libzmq"] = record.versions.libzmq if record is not None else None
        self.id = row.run
        self.offered = offered(row)
        # the fates as the report computed them from the records (the same rules as the run's)
        self.fates = {k: row.column(k) or 0 for k in FATES}
        self.dropped = sum(self.fates[k] for k in DROPPED)
        self.sender_drops = (row.eagain or 0) + (row.timeout or 0)
        summary = record.summary if record is not None else None
        self.generator_limited = summary is not None and summary.generator_limited
        self.reached_rate = (
            summary.generator.reached_rate if summary is not None else None
        ) or row.send_rate
        self.queue_peak = summary.queue_peak if summary is not None else QueuePeak()
        self.serves = bool(row.serves)
        self.p99 = row.judged_p99_us
        self.slos = record.slos if record is not None else None

    @property
    def copies(self) -> int:
        return (self.row.consumers or 1) if self.row.fanout else 1

    def keeps_up(self) -> bool:
        """The consumers took what was offered as it came: received at >= 95% of the offered
        rate (x copies for fan-out), with no more than 1% of it left for the drain."""
        o, r = self.offered, self.row.recv_rate
        expected = self.row.expected or 0
        return bool(
            o
            and r
            and r >= KEEPS_UP * o * self.copies
            and self.fates["drained"] <= 0.01 * max(expected, 1)
        )

    def figures(self) -> rules.Figures:
        """What the judge reads (contract/judge.py), from the report's row (Spark over the records)
        and run.json (the workload, the schedule the generator kept)."""
        row = self.row
        summary = self.record.summary if self.record is not None else None
        expected, sent = row.expected or 0, row.sent or 0
        made = self.record.workload if self.record is not None else None
        # without run.json, the row's rate: the judge asks only whether the run was paced
        paced = made.rate if made is not None else math.ceil(row.rate_per_producer or 0)
        offered_n = rules.offered_messages(
            rate=paced,
            consumers=(made.consumers if made is not None else None) or row.consumers or 1,
            expected=expected,
            sent=sent,
            attempted=row.attempted or 0,
            scheduled=summary.generator.scheduled_messages if summary is not None else None,
        )
        went_in, came_out = row.backlog_went_in, row.backlog_came_out
        grew = (
            rules.Backlog(went_in, came_out, rules.backlog_tolerance(offered_n))
            if went_in is not None and came_out is not None
            else None
        )
        return rules.Figures(
            expected=expected,
            lost=row.lost or 0,
            dropped=self.dropped,
            stranded=self.fates["stranded"],
            unknown=self.fates["unknown"],
            unique_received=row.unique or 0,
            offered=offered_n,
            p99_us=self.p99,
            backlog=grew,
            unanswered=row.unanswered if self.serves else None,
            restarts=tuple(self.record.restarts) if self.record is not None else (),
            dropped_restart=self.fates["dropped_restart"],
        )

    def breaches(self, what_if_p99_us: Optional[float] = None) -> list[rules.Breach]:
        """The judge's verdict on this run (contract/judge.py): the SLOs it was made under (loss
        only without any), the what-if p99 in place of its own; the backlog rule for a probe."""
        return rules.judge(
            self.figures(), judged_slos(self.slos, what_if_p99_us), backlog=self.probe
        )

    def failures(self, what_if_p99_us: Optional[float] = None) -> list[tuple[str, str]]:
        """(SLO, what was measured) for every SLO this run broke, and what kept it from being
        judged (cut short, nothing sent, the generator's own limit); empty when clean."""
        out = []
        if self.row.interrupted or self.row.status not in (None, "complete"):
            out.append((INCOMPLETE, f"status {self.row.status}"))
        if not self.row.received and not self.row.expected:
            out.append((LOSS, "nothing received"))
        for b in self.breaches(what_if_p99_us):
            name = NAMES[b.slo]
            if name == LOSS:
                parts = [
                    f"{n:,} {what}"
                    for n, what in (
                        (self.fates["dropped_start"], "dropped at start"),
                        (self.fates["dropped_mid"], "dropped mid-run"),
                        (self.fates["dropped_tail"], "dropped at tail"),
                        (self.fates["dropped_reset"], "dropped at a connection reset"),
                        (self.fates["stranded"], "stranded"),
                        (self.fates["unknown"], "unknown (a worker died)"),
                        (self.row.unanswered or 0, "unanswered by your service"),
                    )
                    if n
                ]
                apart = self.fates["dropped_restart"]  # judged per restart, not by --max-loss
                out.append(
                    (
                        LOSS,
                        f"lost {b.measured:.4%} > --max-loss {b.limit:g}: "
                        + ", ".join(parts)
                        + (f" (apart from {apart:,} at restarts)" if apart else ""),
                    )
                )
            elif name == P99:
                what_if = " (what-if)" if what_if_p99_us is not None else ""
                out.append(
                    (
                        P99,
                        "no latency measured"
                        if self.p99 is None
                        else f"p99 {fmt_us(self.p99)} > SLO {fmt_us(b.limit)}{what_if}",
                    )
                )
            else:
                out.append((name, b.text))
        if self.generator_limited:
            out.append(
                (
                    GENERATOR,
                    f"the producers reached {fmt_rate(self.reached_rate)} "
                    f"of the {fmt_rate(self.offered)} scheduled",
                )
            )
        return out

    def judged_by(self, what_if_p99_us: Optional[float] = None) -> str:
        return judged_by_text(self.slos, self.probe, what_if_p99_us)

    def peak(self) -> tuple[Optional[int], Optional[int], Optional[int]]:
        """The queue's peak (measure/queue_replay.py), messages (kernel, libzmq): the report's own from the
        records, split as run.json split the same peak (None when run.json has another figure)."""
        messages = self.row.depth_max
        if messages is None:
            messages = self.queue_peak.messages
        if messages is not None and self.queue_peak.messages == messages:
            return messages, self.queue_peak.kernel_messages, self.queue_peak.libzmq_messages
        return messages, None, None


def grouping_keys(views: list[RunView]) -> list[str]:
    """The workload fields (and libzmq) whose value differs between the runs, in workload order."""
    names: list[str] = []
    for v in views:
        names += [k for k in v.workload if k not in names and k not in NOT_SETTINGS]
    return [k for k in names if len({repr(v.workload.get(k)) for v in views}) > 1]


def probe_runs(searches: Iterable[SearchRecord]) -> dict[str, tuple[SearchRecord, int]]:
    """run id -> (the search, the index of its combination) of every probe with a run directory."""
    out = {}
    for doc in searches:
        for i, entry in enumerate(doc.searches):
            for p in entry.probes:
                run_id = _run_id(p.run_dir)
                if run_id:
                    out[run_id] = (doc, i)
    return out


def capacity_table(
    run_rows: list[SummaryRow],
    slo_p99_us: Optional[float] = None,
    runs: Optional[Iterable[RunInfo]] = None,
    searches: Iterable[SearchRecord] = (),
) -> list[VerdictGroup]:
    """One verdict per group. `runs`: the RunInfo list (run.json of each run); without it the
    groups come from the summary rows' workload columns and loss from their seq counts.
    `slo_p99_us`: the report's what-if p99 SLO (None: the runs' own SLOs only). `searches`: the
    capacity searches among the inputs, whose probes' groups take the search's answer."""
    records: dict[str, RunRecord] = {r.run_id: r.record for r in runs or ()}
    probes = probe_runs(searches)
    views = [
        RunView(r, records.get(r.run), probe=r.run in probes)
        for r in run_rows
        if r.received is not None or r.attempted is not None
    ]
    keys = grouping_keys(views)
    groups: dict[tuple[str, ...], list[RunView]] = defaultdict(list)
    for v in views:
        groups[tuple(repr(v.workload.get(k)) for k in keys)].append(v)
    table = [group_verdict(members, keys, slo_p99_us, probes) for members in groups.values()]
    table.sort(key=lambda g: tuple(_sort_key(g.keys[k]) for k in keys))
    return table


def _sort_key(value: object) -> tuple[bool, bool, object]:
    """None last, numbers in order, then anything else by its text."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (value is None, not number, value if number else repr(value))


def group_verdict(
    views: list[RunView],
    keys: list[str],
    slo_p99_us: Optional[float] = None,
    probes: Optional[dict[str, tuple[SearchRecord, int]]] = None,
) -> VerdictGroup:
    """The bracket [highest clean rate, lowest failing rate above it], the SLO that broke
    there, whether the results are monotone in rate, the max-throughput tests and advice; for
    a group of a capacity search's probes, the search's answer (`search_verdict`)."""
    first = views[0].workload
    g = VerdictGroup(
        keys={k: first.get(k) for k in keys},
        key_names=list(keys),
        group=", ".join(key_text(k, first.get(k)) for k in keys) or "all runs",
        run_ids=[v.id for v in views],
        what_if_p99_us=slo_p99_us,
        judged_by=sorted({v.judged_by(slo_p99_us) for v in views}),
        judged={v.id: [name for name, _ in v.failures(slo_p99_us)] for v in views},
    )
    found = {probes[v.id][0].search_id: probes[v.id] for v in views if probes and v.id in probes}
    if len(found) == 1:
        ((doc, index),) = found.values()
        others = [
            v for v in views if not probes or v.id not in probes or probes[v.id] != (doc, index)
        ]
        return search_verdict(
            g, [v for v in views if v not in others], others, doc, index, slo_p99_us
        )
    return _judged_verdict(g, views, slo_p99_us)


def _judged_verdict(
    g: VerdictGroup, views: list[RunView], slo_p99_us: Optional[float]
) -> VerdictGroup:
    """The group's verdict from its runs' judgements."""
    paced = sorted((v for v in views if v.offered), key=lambda v: v.offered)
    floods = [v for v in views if not v.offered]
    by_rate: dict[float, list[RunView]] = defaultdict(list)
    for v in paced:
        by_rate[v.offered].append(v)
    failing = {
        rate: [(v, f) for v in vs for f in [v.failures(slo_p99_us)] if f]
        for rate, vs in by_rate.items()
    }
    clean = sorted(rate for rate in by_rate if not failing[rate])
    bad = sorted(rate for rate in by_rate if failing[rate])
    high = clean[-1] if clean else None
    above = [r for r in bad if high is None or r > high]
    low = above[0] if above else None
    below = [r for r in bad if high is not None and r < high]
    g.rates_tested, g.highest_clean_rate, g.lowest_failing_rate = sorted(by_rate), high, low
    g.monotone = not below
    g.runs_at_clean = [v.id for v in (by_rate[high] if high is not None else ())]
    g.max_throughput = [_flood(v) for v in floods]
    _at_clean(g, by_rate[high] if high is not None else [])
    if low is not None:
        view, fails = failing[low][0]
        g.failed_slo = "+".join(name for name, _ in fails)
        g.failure = "; ".join(text for _, text in fails)
        g.failing_run = view.id
        g.cause, g.advice = advice(view, fails, slo_p99_us)
    what_if = f" (with the what-if --slo-p99-us {slo_p99_us:g})" if slo_p99_us is not None else ""
    if not paced:
        g.verdict = "max throughput tests only (unpaced): no offered rate, no knee"
    elif low is None:
        g.verdict = f"no failure up to {fmt_rate(high)} (the highest rate tested){what_if}"
    elif high is None:
        g.verdict = f"fails at every tested rate, lowest {fmt_rate(low)}: {g.failed_slo} ({g.failure}){what_if}"
    else:
        g.verdict = (
            f"clean up to {fmt_rate(high)}, fails at {fmt_rate(low)}: {g.failed_slo} "
            f"({g.failure}); the limit lies in between{what_if}"
        )
    if below:
        worst = failing[below[0]][0][1]
        g.monotone_note = (
            f"not monotone in rate: {fmt_rate(below[0])} failed ({'+'.join(n for n, _ in worst)}) "
            f"below the clean {fmt_rate(high)}; repeat the runs before trusting the bracket"
        )
    return g


def _at_clean(g: VerdictGroup, at_high: list[RunView]) -> None:
    g.p99_at_clean_us = max((v.p99 for v in at_high if v.p99 is not None), default=None)
    g.queued_bytes_at_clean = max((v.row.queued_bytes_max or 0 for v in at_high), default=None)
    g.queue_peak_at_clean = max((v.peak()[0] or 0 for v in at_high), default=None)


def search_verdict(
    g: VerdictGroup,
    mine: list[RunView],
    others: list[RunView],
    doc: SearchRecord,
    index: int,
    slo_p99_us: Optional[float],
) -> VerdictGroup:
    """A group of a capacity search's probes: the search's answer is its verdict (rates per producer
    times the producers, as the report's offered rates; the report words it: zmqload.report.search_answer).
    With a what-if p99 SLO, what the probes as run would give under it, labelled; runs of the same
    setting outside the search, each with its own judgement."""
    entry: SearchEntry = doc.searches[index]
    n = entry.producers or 1
    lo, hi = entry.bracket
    converged = entry.converged and not entry.generator_limited
    by_id = {v.id: v for v in mine}
    answer = next(
        (p for p in reversed(entry.probes) if p.passed and p.rate == entry.max_sustainable_rate),
        None,
    )
    failing = next((p for p in reversed(entry.probes) if not p.passed and p.rate == hi), None)
    g.search = SearchRef(doc.search_id, index)
    g.rates_tested = sorted({p.rate * n for p in entry.probes})
    g.highest_clean_rate = (
        entry.max_sustainable_rate * n if converged and entry.max_sustainable_rate else None
    )
    g.lowest_failing_rate = hi * n if hi is not None else None
    g.failed_slo = (
        breach_names(failing.breaches)
        if failing is not None and failing.breaches
        else NAMES.get(str(entry.failed_slo))
        if entry.failed_slo is not None
        else None
    )
    g.failure = (
        (failing.breaches[0].text or None) if failing is not None and failing.breaches else None
    )
    g.max_throughput = [_flood(v) for v in mine if not v.offered]
    answer_id = _run_id(answer.run_dir) if answer is not None and converged else None
    at_clean = [by_id[answer_id]] if answer_id in by_id else []
    g.runs_at_clean = [v.id for v in at_clean]
    _at_clean(g, at_clean)
    if failing is not None and _run_id(failing.run_dir) in by_id:
        g.failing_run = _run_id(failing.run_dir)
    if converged:
        g.verdict = (
            f"the capacity search's answer: {fmt_rate(lo)} sustainable per producer (bracket "
            f"{fmt_rate(lo)} - {fmt_rate(hi)})" + (f"; above it: {g.failure}" if g.failure else "")
        )
    else:
        g.verdict = f"the capacity search found no answer: {entry.reason or 'it did not converge'}"
    if slo_p99_us is not None:
        judged = [(v.offered, not v.failures(slo_p99_us)) for v in mine if v.offered]
        passing = [r for r, ok in judged if ok]
        top = max(passing, default=None)
        failing_above = min(
            (r for r, ok in judged if not ok and (top is None or r > top)), default=None
        )
        g.what_if = (
            f"what-if --slo-p99-us {slo_p99_us:g} over the search's probes as run (not a search): "
            + (f"passing up to {fmt_rate(top)}" if top is not None else "none passes")
            + (f", failing from {fmt_rate(failing_above)}" if failing_above is not None else "")
            + " (rates of all producers)"
        )
    if others:
        g.others = "; ".join(
            f"{v.id} at {fmt_rate(v.offered) if v.offered else 'max (unpaced)'}, outside the search: "
            + (
                ("fails: " + "; ".join(t for _, t in f))
                if (f := v.failures(slo_p99_us))
                else "clean"
            )
            for v in others
        )
    return g


def _run_id(run_dir: Optional[str]) -> Optional[str]:
    """The run id of a probe's run directory (runs/run=<id>), as the report names its runs."""
    if not run_dir:
        return None
    base = os.path.basename(os.path.normpath(run_dir))
    return base[len("run=") :] if base.startswith("run=") else base


def _flood(v: RunView) -> Flood:
    return Flood(
        run=v.id,
        send_rate=v.row.send_rate,
        recv_rate=v.row.recv_rate,
        dropped=v.dropped,
        stranded=v.fates["stranded"],
        p99_us=v.p99,
    )


def advice(
    v: RunView, fails: list[tuple[str, str]], slo_p99_us: Optional[float] = None
) -> tuple[str, str]:
    """(the measured cause, what to change) at a failing run, each with its numbers."""
    names = {n for n, _ in fails}
    w, rate = v.workload, fmt_rate(v.offered)
    delay = w.get("consumer_delay_us") or 0
    per_consumer = (
        f"; {delay:g} µs of work per message caps a consumer near {fmt_rate(work_ceiling(delay))}"
        if delay
        else ""
    )
    messages, kernel, libzmq = v.peak()
    where = (
        f"queue peak {messages or 0:,} messages ({kernel:,} in kernel buffers, {libzmq:,} in libzmq)"
        if kernel is not None and libzmq is not None
        else f"queue peak {messages or 0:,} messages"
    )
    hwm = f"SNDHWM {_hwm(w.get('sndhwm'))}, RCVHWM {_hwm(w.get('rcvhwm'))}"
    if GENERATOR in names:
        producers = w.get("producers") or 1
        return (
            "the load generator could not keep its schedule: " + dict(fails)[GENERATOR],
            f"add producers (now {producers}) to offer {rate}; this is not the system's limit",
        )
    if INCOMPLETE in names:
        return ("the run did not complete", "rerun it")
    received = (
        f"received {fmt_rate(v.row.recv_rate)} of {fmt_rate((v.offered or 0) * v.copies)} offered"
    )
    if v.serves and names & {
        LOSS,
        ACHIEVED,
        P99,
    }:  # the user's service: its answers, not a pipe of zmqload's
        answered = (
            f"your service answered {v.row.unique or 0:,} of {v.row.sent or 0:,} requests "
            f"({fmt_rate(v.row.recv_rate)} until its last answer; {rate} requested), "
            f"round trip p99 {fmt_us(v.p99)}"
        )
        return (
            answered,
            f"a rate below {rate}, or a faster service (more workers behind a broker)",
        )
    if LOSS in names and v.dropped:
        if v.fates["dropped_reset"] == v.dropped:  # --reset-at: not the pipe, not the close
            return (
                f"{v.dropped:,} lost across connection resets ({where})",
                (
                    "ZMQ_IMMEDIATE, HWMs and linger do not keep what was in flight at a reset: acknowledge "
                    "end to end, or resend (claims U-6, U-8, docs/HWM-VERDICTS.md)"
                ),
            )
        if v.fates["dropped_tail"] and not (v.fates["dropped_start"] or v.fates["dropped_mid"]):
            if (
                v.row.dropped_tail_ambiguous
            ):  # a PUB closed at once: a full pipe or the close (docs/RECORDS.md)
                return (
                    f"{v.fates['dropped_tail']:,} lost after the last arrival, at a full pipe or at close ({where})",
                    "keep the producers open until the consumers drained (--close-order after-drain) to tell "
                    "which",
                )
            return (
                f"{v.fates['dropped_tail']:,} lost at close ({where})",
                "keep the producers open until the consumers drained (--close-order after-drain) or "
                "give the close a longer --linger",
            )
        if v.keeps_up() and not names & {ACHIEVED, BACKLOG}:
            return (
                f"drops while the consumer kept up ({received}; {where}, {hwm})",
                "bursts overflow the pipe: a larger HWM absorbs them",
            )
        return (
            f"drops because the consumer falls behind ({received}{per_consumer}; {where}, {hwm})",
            f"a larger HWM only delays the drops: faster or more consumers, or a rate below {rate}",
        )
    if LOSS in names and (v.fates["stranded"] or v.fates["unknown"]):
        return (
            f"{v.fates['stranded'] + v.fates['unknown']:,} stranded or unknown: the drain was cut short or a "
            "worker died",
            "raise --drain-limit-s to tell queued from dropped",
        )
    if names & {ACHIEVED, BACKLOG}:
        return (
            f"the consumers fell behind ({received}{per_consumer}; {where})",
            f"faster or more consumers, or a rate below {rate}",
        )
    if P99 in names:
        drained = (
            f"; {v.fates['drained']:,} drained after the producers finished"
            if v.fates["drained"]
            else ""
        )
        return (
            f"{fmt_us(v.row.latency_intended.p99 or 0)} p99 with nothing dropped: a backlog "
            f"({where}{drained}{per_consumer})",
            f"a rate below {rate}, a smaller HWM (now {hwm}; it bounds the wait but drops instead), "
            "or faster or more consumers",
        )
    return ("; ".join(t for _, t in fails), "see the run")


def _hwm(x: object) -> object:
    return "default" if x is None else x


def verdict_columns(table: list[VerdictGroup]) -> dict[str, dict[str, Any]]:
    """run id -> its group's keys and verdict (VERDICT_COLUMNS), for the summary files."""
    out = {}
    for g in table:
        cols = {
            **{f"group_{k}": _plain(v) for k, v in g.keys.items()},
            **{c: getattr(g, c) for c in VERDICT_COLUMNS},
        }
        for rid in g.run_ids:
            out[rid] = cols
    return out


def _plain(v: object) -> Union[int, float, str, bool, None]:
    return v if v is None or isinstance(v, (int, float, str, bool)) else str(v)


def recommend(
    table: list[VerdictGroup],
    memory_budget: int | None = None,
    target_rate: float | None = None,
    slo_p99_us: Optional[float] = None,
) -> list[str]:
    """Plain-words verdicts, one per group with its cause and advice, then the cheapest group
    that carries the target rate cleanly (within the memory budget) when there is a choice.
    `slo_p99_us`: the what-if p99 SLO the verdicts were made with, if any (said)."""
    out = []
    for g in table:
        line = f"{g.group}: {g.verdict}"
        if g.cause:
            line += f". Cause: {g.cause}" + (f". Advice: {g.advice}" if g.advice else "")
        if g.monotone_note:
            line += f". Note: {g.monotone_note}"
        if g.what_if:
            line += f". What-if: {g.what_if}"
        if g.others:
            line += f". Also: {g.others}"
        for f in g.max_throughput:
            line += (
                f". Max throughput test {f.run}: received {fmt_rate(f.recv_rate)} "
                f"(sent {fmt_rate(f.send_rate)}), {f.dropped:,} dropped"
            )
        out.append(line + ".")
    carried = [g for g in table if g.highest_clean_rate]
    if len(table) > 1 and carried:
        target = target_rate or max(g.highest_clean_rate or 0 for g in carried)
        budget = f" within {fmt_bytes(memory_budget)}" if memory_budget else ""
        fits = [
            g
            for g in carried
            if (g.highest_clean_rate or 0) >= target * 0.999
            and (memory_budget is None or (g.queued_bytes_at_clean or 0) <= memory_budget)
        ]
        if fits:
            pick = min(fits, key=lambda g: g.queued_bytes_at_clean or 0)
            p99 = pick.p99_at_clean_us
            what_if = (
                f" (with the what-if --slo-p99-us {slo_p99_us:g})"
                if slo_p99_us is not None and pick.search is None
                else ""
            )
            out.append(
                f"To carry {fmt_rate(target)}{budget}{what_if}: {pick.group} ("
                f"{'sustainable per its capacity search' if pick.search is not None else 'clean'} at "
                f"{fmt_rate(pick.highest_clean_rate)}, p99 {fmt_us(p99)}, "
                f"peak queued {fmt_bytes(pick.queued_bytes_at_clean)})."
            )
        else:
            out.append(f"No tested setting carries {fmt_rate(target)} cleanly{budget}.")
    return out
