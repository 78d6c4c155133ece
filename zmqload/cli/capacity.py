"""`zmqload capacity`: the highest rate each combination of options sustains within the SLOs, one
search per combination (as in `zmqload sweep`).

    zmqload capacity --pattern pub-sub --size 256 --slo-p99-us 2000 --out runs/cap

docs/CAPACITY.md."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from typing import TYPE_CHECKING, Optional

from ..plan import sweep as sweeps
from ..contract.derived import work_ceiling
from ..contract.workload import (
    SEARCH_OPTIONS,
    SLO_OPTIONS,
    UNPACED_RATE_GUESS,
    SearchPlan,
    Slos,
    Workload,
    refuse_unjudged,
)
from ..contract.codec import to_builtins
from ..contract.search_record import (
    Figures,
    RESULT_FILE,
    SET_BY_SEARCH,
    SearchEntry,
    SearchRecord,
    SearchTemplate,
    search_path,
)
from ..contract.states import SearchStatus, Slo
from ..contract.words import MESSAGES, Words, words_for
from ..errors import ConfigError, ExitStatus, RecordError
from ..store.record_files import read_run, write_search
from .common import disk_warning, megabytes
from .options import add_workload_arguments
from .report_after import report_module, run_report

if TYPE_CHECKING:  # the search (numpy, the runner) is imported only when a search runs
    from ..plan.capacity_search import Outcome, Probe

NAME = "capacity"
HELP = "find the highest rate each combination of options sustains within the SLOs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Search the max sustainable rate (per producer) of each combination of options: "
        "open-loop probes ramp up from --start-rate to the first failing rate, then bisect "
        "to --precision; the final pass is run again. Any option of `run` but "
        f"{', '.join('--' + n for n in SET_BY_SEARCH)} takes a comma-separated list."
    )
    parser.epilog = (
        "Exit status: 0 every search converged, 1 one could not (or the load generator was the "
        f"limit), 2 bad input. Writes {RESULT_FILE} beside the probes' run directories."
    )
    add_workload_arguments(parser, table=SEARCH_OPTIONS)
    add_workload_arguments(parser, table=SLO_OPTIONS)
    out = parser.add_argument_group("output")
    out.add_argument(
        "--out",
        default="runs/capacity",
        help=f"directory of the probes' run directories and {RESULT_FILE} (default runs/capacity)",
    )
    out.add_argument("--name", default=None, help="search id, the prefix of every probe's run name")
    out.add_argument(
        "--json", action="store_true", help=f"print the result ({RESULT_FILE}) as JSON"
    )
    out.add_argument("--quiet", action="store_true", help="print nothing but errors")
    out.add_argument(
        "--report", action="store_true", help="afterwards, run the Spark report over --out"
    )
    out.add_argument(
        "--report-out", default=None, metavar="DIR", help="where the report goes (its --out)"
    )
    add_workload_arguments(parser, axes=True, skip=sweeps.RESERVED + SET_BY_SEARCH)


def plan_searches(args: argparse.Namespace, plan: SearchPlan) -> sweeps.Sweep:
    """One validated template Workload per combination (ConfigError before anything runs)."""
    spec = sweeps.SweepSpec(out=args.out, name=args.name)
    for name in args.given or []:
        spec.set_option(name, getattr(args, name))
    spec.fixed.update(rate=plan.start_rate, duration=plan.probe_duration)
    combos = sweeps.plan(spec)
    if os.path.exists(os.path.join(args.out, RESULT_FILE)):
        raise ConfigError(
            "--out", f"{args.out} already holds a {RESULT_FILE}; accepted: a directory without one"
        )
    return combos


def likely_capacity(w: Workload) -> tuple[int, str] | None:
    """A guess of where a search of `w` ends, msg/s per producer, and why: the consumers' work
    ceiling (contract/derived.py) when they do simulated work, else what one unpaced producer
    reaches (UNPACED_RATE_GUESS), whichever is lower. A service of the user's: None, its pace
    is learnt from its first probe (`service_pace`)."""
    if w.serves:
        return None
    if w.consumer_delay_us > 0:
        # A fan-out consumer receives every producer's messages; round robin shares them out.
        carried = work_ceiling(w.consumer_delay_us) * (1 if w.fanout else w.consumers) / w.producers
        if carried < UNPACED_RATE_GUESS:
            return max(1, int(carried)), "the consumers' work ceiling"
    return UNPACED_RATE_GUESS, "what one unpaced producer reaches"


def service_pace(probe: Probe, producers: int) -> tuple[int, str] | None:
    """A service's pace per producer from a probe of it: a REQ has one request in flight, so a
    producer sends at most one per round trip (the probe's p50, run.json), and no faster than
    the service answered. None when the probe has no round trip."""

    if probe.run_dir is None:
        return None
    try:
        summary = read_run(probe.run_dir).summary
    except RecordError:
        return None
    p50 = summary.round_trip_ns.p50 if summary and summary.round_trip_ns else None
    if not p50:
        return None
    answered = (probe.figures.throughput_msgs if probe.figures else 0) / producers
    pace = max(1e9 / p50, answered)
    return max(1, int(pace)), f"one request per round trip, p50 {p50 / 1e3:,.0f} µs"


def expected_probes(plan: SearchPlan, capacity: int) -> list[int]:
    """The rates a search would probe (plan/capacity_search.find_max_rate itself, with probes
    that pass up to `capacity` msg/s per producer and fail above it); at most --max-probes."""
    from ..plan.capacity_search import Probe, find_max_rate

    return [p.rate for p in find_max_rate(lambda rate: Probe(rate, rate <= capacity), plan).probes]


def search_write(w: Workload, plan: SearchPlan, capacity: int) -> tuple[int, int]:
    """(bytes one search keeps, its probes) if it ends near `capacity` per producer: each probe
    keeps what a --probe-duration run at its rate keeps (runner.run's kept_bytes), its sends no
    more than `capacity` allows (a REQ waits for each answer; one unpaced producer reaches at
    most UNPACED_RATE_GUESS)."""
    from ..runner.run import kept_bytes

    rates = expected_probes(plan, capacity)
    total = 0
    for rate in rates:
        probe = dataclasses.replace(w, rate=rate, duration=plan.probe_duration, count=None)
        sent = min(rate, capacity if w.serves else UNPACED_RATE_GUESS) * plan.probe_duration
        total += kept_bytes(probe, max(1, int(sent)))
    return total, len(rates)


def expected_write(combos: sweeps.Sweep, plan: SearchPlan) -> tuple[int, int, str]:
    """(bytes the searches are expected to keep, probes in all, what the guess rests on), of
    the searches whose end can be guessed before they start (not a service's: `service_line`)."""
    total, probes, because = 0, 0, set()
    for point in combos.points:
        likely = likely_capacity(point.workload)
        if likely is None:
            continue
        capacity, why = likely
        because.add(f"{capacity:,} msg/s per producer ({why})")
        written, n = search_write(point.workload, plan, capacity)
        total, probes = total + written, probes + n
    return total, probes, "; ".join(sorted(because))


def estimate_line(combos: sweeps.Sweep, plan: SearchPlan) -> str:
    """How much the searches keep, said before the first probe: one line."""
    written, probes, because = expected_write(combos, plan)
    n = len(combos.points)
    services = sum(p.workload.serves for p in combos.points)
    line = (
        f"{n} search{'es' if n != 1 else ''}, probes of {plan.probe_duration:g} s "
        f"(at most {plan.max_probes} per search)"
    )
    if services < n:
        line += (
            f"; about {probes} probe{'s' if probes != 1 else ''} writing up to about "
            f"{megabytes(written)} to {combos.out} if "
            f"{'each ends' if n - services != 1 else 'it ends'} near {because}"
        )
    if services:
        line += (
            "; what a search of your service writes follows its pace, said after its first probe"
        )
    return line


def service_line(w: Workload, plan: SearchPlan, first: Probe) -> str | None:
    """After a service search's first probe: its pace and what the search will keep."""
    pace = service_pace(first, w.producers)
    if pace is None:
        return None
    capacity, why = pace
    written, probes = search_write(w, plan, capacity)
    return (
        f"  your service: about {capacity:,} req/s per producer ({why}); the search writes up to "
        f"about {megabytes(written)} in about {probes} probes"
    )


def _rate(value: Optional[int]) -> str:
    return "-" if value is None else f"{value:,}"


def _us(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:,.0f}"


def probe_line(index: int, probe: Probe, words: Words = MESSAGES) -> str:
    f = probe.figures or Figures()
    verdict = "pass" if probe.passed else ("GENERATOR" if probe.generator_limited else "FAIL")
    rate = words.rate()
    line = f"  probe {index:>2}{' (again)' if probe.confirm else ''}  {probe.rate:>12,} {rate}  {verdict:<9}"
    if probe.error:
        return f"{line}  {probe.error}"
    line += (
        f"  {words.received} {f.throughput_msgs:,.0f} {rate}, achieved "
        f"{f.achieved or 0:.3f}, loss {f.loss_ratio:.2%}"
        + (f" (and {f.dropped_restart:,} at restarts)" if f.dropped_restart else "")
        + f", p99 {_us(f.p99_us)} µs"
    )
    if probe.breaches:
        line += f"  [{probe.breaches[0].text}]"
    elif probe.generator_limited:
        line += (
            f"  [reached {f.reached_rate or 0:,.0f} {rate}, blocked {f.blocked_ms or 0:,.0f} ms "
            f"of a {f.lag_ms or 0:,.0f} ms lag]"
        )
    return line


def answer_line(
    tag: str, outcome: Outcome, words: Words = MESSAGES, restart: Optional[str] = None
) -> str:
    """The search's answer in a line; with --restart, the rate sustained through those restarts
    (their own loss judged by --slo-restart-lost, not --max-loss)."""
    lo, hi = outcome.bracket
    rate = words.rate()
    if not outcome.converged:
        return (
            f"{tag}: no capacity found: {outcome.reason}; bracket {_rate(lo)} - {_rate(hi)} {rate}"
        )
    at = [p for p in outcome.probes if p.rate == lo and p.passed][-1].figures or Figures()
    failing = [p for p in outcome.probes if p.rate == hi and not p.passed]
    above = (
        f"above it {failing[-1].breaches[0].text}"
        if failing and failing[-1].breaches
        else "above it: -"
    )
    peak, rss = at.queue_peak, at.consumer_max_rss_kb
    # a service of the user's has no queue or consumer of zmqload's to show
    queue = (
        f", queue peak {peak.messages or 0:,} (kernel {peak.kernel_messages or 0:,} / "
        f"libzmq {peak.libzmq_messages or 0:,})"
        if peak
        else ""
    )
    memory = f", consumer RSS {rss / 1024:,.1f} MiB" if rss is not None else ""
    return (
        f"{tag}: max sustainable rate {lo:,} {rate} per producer"
        + (f" with the restarts {restart}" if restart else "")
        + f" (bracket {_rate(lo)} - {_rate(hi)}); "
        f"{above}; at it: p99 {_us(at.p99_us)} µs, p99.9 {_us(at.p99_9_us)} µs"
        f"{queue}{memory}"
    )


def search_entry(point: sweeps.Point, outcome: Outcome, wall_s: float) -> SearchEntry:
    """One combination's search as capacity-search.json holds it: finished, or so far."""
    return SearchEntry(
        values=dict(point.values),
        workload=SearchTemplate.of(point.workload),
        producers=point.workload.producers,
        wall_s=round(wall_s, 2),
        converged=outcome.converged,
        max_sustainable_rate=outcome.max_sustainable_rate,
        bracket=list(outcome.bracket),
        failed_slo=None if outcome.failed_slo is None else Slo(outcome.failed_slo),
        generator_limited=outcome.generator_limited,
        reason=outcome.reason,
        probes=[p.to_record() for p in outcome.probes],
    )


def starting(point: sweeps.Point) -> SearchEntry:
    """A combination's search before its first probe."""
    from ..plan.capacity_search import Outcome

    return search_entry(
        point, Outcome(False, None, [None, None], None, False, "searching: no probe yet", []), 0.0
    )


def run(args: argparse.Namespace) -> ExitStatus:
    from .display import LiveProgress
    from ..plan.capacity_search import find_max_rate, probe_once
    from ..runner import signals

    if "consumer" in (
        getattr(args, "role", None) or ()
    ):  # (an axis: a list) before its probes' rates are refused, less clearly
        refuse_unjudged("consumer")
    plan = SearchPlan(**{name: getattr(args, name) for name in SEARCH_OPTIONS})
    slos = Slos(**{name: getattr(args, name) for name in SLO_OPTIONS}).with_search_defaults()
    report = (
        report_module() if args.report or args.report_out else None
    )  # ConfigError (exit 2) before any run
    combos = plan_searches(args, plan)
    for point in combos.points:
        Slos().check_with(point.workload, "capacity")
        slos.check_restarts(point.workload)
    say = (lambda text: None) if args.quiet or args.json else print
    say(estimate_line(combos, plan))
    disk_warning("zmqload capacity", args.out, expected_write(combos, plan)[0], "the search is")
    # Written before the first probe, after every probe and at the end: the search's last entry
    # is the combination it is in (so one cut short says where it stopped), until it is complete.
    record = SearchRecord(
        search_id=combos.sweep_id,
        out=args.out,
        status=SearchStatus.RUNNING,
        varying=list(combos.varying),
        slos=slos,
        plan=plan,
        searches=[starting(combos.points[0])],
    )
    os.makedirs(args.out, exist_ok=True)
    write_search(args.out, record)
    status = ExitStatus.OK
    started = time.monotonic()
    with (
        signals.handled()
    ):  # Ctrl-C and SIGTERM raised as KeyboardInterrupt; each probe records itself
        try:
            for point in combos.points:
                tag = sweeps.point_tag(point.values) or point.workload.pattern
                say(f"search {point.index + 1}/{len(combos.points)}: {tag}")
                started = time.monotonic()
                count = [0]
                words = words_for(point.workload.pattern, point.workload.role)

                def probe(
                    rate: int,
                    point: sweeps.Point = point,
                    count: list[int] = count,
                    words: Words = words,
                ) -> Probe:
                    count[0] += 1
                    name = f"{point.run_id}-p{count[0]:02d}-r{rate}"[: sweeps.MAX_RUN_NAME]
                    live = (
                        None
                        if args.quiet or args.json
                        else LiveProgress(total_s=plan.probe_duration)
                    )
                    result = probe_once(
                        point.workload, slos, rate, plan.probe_duration, name, progress=live
                    )
                    say(probe_line(count[0], result, words))
                    if count[0] == 1 and point.workload.serves:
                        said = service_line(point.workload, plan, result)
                        if said is not None:
                            say(said)
                    return result

                def so_far(
                    outcome: Outcome, point: sweeps.Point = point, started: float = started
                ) -> None:
                    record.searches[-1] = search_entry(point, outcome, time.monotonic() - started)
                    write_search(args.out, record)

                outcome = find_max_rate(probe, plan, on_probe=so_far)
                say(answer_line(tag, outcome, words, point.workload.restart))
                if not outcome.converged:
                    status = ExitStatus.FAILED
                following = combos.points[point.index + 1 :]
                record.searches[-1:] = [
                    search_entry(point, outcome, time.monotonic() - started),
                    *(starting(p) for p in following[:1]),
                ]
                if not following:
                    record.status = SearchStatus.COMPLETE
                write_search(args.out, record)
        except BaseException as exc:
            with signals.held():  # the record says how the search ended, whatever comes meanwhile
                if record.status is SearchStatus.RUNNING:
                    interrupted = isinstance(exc, KeyboardInterrupt)
                    record.status = SearchStatus.INTERRUPTED if interrupted else SearchStatus.FAILED
                    last = record.searches[-1]
                    last.wall_s = round(time.monotonic() - started, 2)
                    last.reason = (
                        f"cut short ({record.status}) after {len(last.probes)} "
                        f"probe{'s' * (len(last.probes) != 1)}"
                    )
                write_search(args.out, record)
            if isinstance(exc, KeyboardInterrupt):
                raise KeyboardInterrupt(
                    f"the probes' records are kept; {search_path(args.out)} says {record.status}"
                ) from exc
            raise
    if args.json:
        print(json.dumps(to_builtins(record)))
    if report is not None:
        status = status or run_report(report, args.out, args.report_out)
    return status
