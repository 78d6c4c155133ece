"""The capacity search, the generator-limited verdict and the SLO gates of `run`.

The search's logic (ramp, bisect, the re-run of the final pass) is tested on fake probe
functions; everything else on real runs over loopback, each answer checked against the
Parquet records read with pyarrow/numpy (no zmqload code in the check).
"""

from __future__ import annotations

import glob
import json
import math
import os

import numpy as np
import pytest

import zmqload
from conftest import children, in_process, read_meta, read_table, zmqload_cli
from zmqload.contract.workload import SearchPlan, Slos
from zmqload.contract import search_record as sr
from zmqload.contract.states import Slo
from zmqload.plan.capacity_search import Probe, find_max_rate, probe_once
from zmqload.plan.slo import Breach


# -- the search's logic on fake probes ---------------------------------------------------------------
def threshold(capacity: int, generator_limit: int | None = None, calls: list | None = None):
    """A system that sustains every rate up to `capacity`; a generator that cannot send
    above `generator_limit`."""

    def probe(rate: int) -> Probe:
        if calls is not None:
            calls.append(rate)
        if generator_limit is not None and rate > generator_limit:
            return Probe(
                rate,
                False,
                generator_limited=True,
                figures=sr.Figures(reached_rate=generator_limit),
            )
        if rate <= capacity:
            return Probe(rate, True)
        return Probe(rate, False, [Breach("max-loss", 0.1, 0.0, "lost")])

    return probe


@pytest.mark.parametrize(
    "capacity, start",
    [
        (15_000, 1_000),
        (15_000, 10_000),
        (15_000, 14_999),
        (15_000, 400_000),
        (3_000_000, 10_000),
        (7, 1),
    ],
)
def test_search_brackets_the_capacity_within_the_precision(capacity, start):
    plan = SearchPlan(start_rate=start, precision=0.05)
    out = find_max_rate(threshold(capacity), plan)
    lo, hi = out.bracket
    assert out.converged and out.max_sustainable_rate == lo
    assert lo <= capacity < hi
    assert hi - lo <= 0.05 * lo or hi == lo + 1
    assert out.failed_slo == "max-loss" and not out.generator_limited
    assert out.probes[-1].confirm and out.probes[-1].rate == lo and out.probes[-1].passed
    ramp = math.ceil(abs(math.log2(capacity / start))) + 1  # doubling (or halving) to the bracket
    assert len(out.probes) <= ramp + 5 + 1, [p.rate for p in out.probes]  # bisect 2x to 5%, confirm


def test_search_from_a_start_near_the_answer_needs_at_most_12_probes():
    for capacity in (9_000, 12_345, 15_000, 19_999, 31_000):
        out = find_max_rate(threshold(capacity), SearchPlan(start_rate=5_000, precision=0.05))
        assert out.converged and len(out.probes) <= 12, (capacity, [p.rate for p in out.probes])


def test_a_final_pass_that_does_not_repeat_moves_the_answer_down():
    seen: dict[int, int] = {}

    def flaky(rate: int) -> Probe:  # 15k passes the first time only (noise)
        seen[rate] = seen.get(rate, 0) + 1
        ok = rate <= 14_000 or (rate <= 15_000 and seen[rate] == 1)
        return Probe(rate, ok, [] if ok else [Breach("backlog", 1, 0, "grew")])

    out = find_max_rate(flaky, SearchPlan(start_rate=15_000, precision=0.05))
    assert out.converged
    assert out.max_sustainable_rate <= 14_000 < out.bracket[1] <= 15_000
    confirms = [p for p in out.probes if p.confirm]
    assert confirms[0].rate == 15_000 and not confirms[0].passed and confirms[-1].passed


def test_after_a_failed_re_run_one_step_below_it_is_tried_before_bisecting():
    # bench_capacity on the quiet machine: a consumer at its 20k/s edge passed 20,000 on the way
    # up and failed its re-run; bisecting down from 10,000 again cost 4 probes more (14 in all)
    def passes_once_at(flaky: int, capacity: int):
        """Every rate up to `capacity` passes; `flaky` passes its first probe only."""
        seen: dict[int, int] = {}

        def probe(rate: int) -> Probe:
            seen[rate] = seen.get(rate, 0) + 1
            ok = rate <= capacity or (rate == flaky and seen[rate] == 1)
            return Probe(rate, ok, [] if ok else [Breach("backlog", 1, 0, "grew")])

        return probe

    out = find_max_rate(
        passes_once_at(20_000, 19_500), SearchPlan(start_rate=5_000, precision=0.05)
    )
    rates = [p.rate for p in out.probes]
    assert out.converged and out.max_sustainable_rate == 19_048, rates  # 20,000 / 1.05, rounded up
    assert (
        out.bracket == [19_048, 20_000]
        and (out.bracket[1] - out.bracket[0]) <= 0.05 * out.bracket[0]
    )
    assert rates[-3:] == [20_000, 19_048, 19_048] and out.probes[-1].confirm, rates
    assert len(rates) <= 12, rates
    # a step below that fails too is not walked further: the search bisects down to the last pass
    out = find_max_rate(
        passes_once_at(20_000, 15_000), SearchPlan(start_rate=5_000, precision=0.05)
    )
    rates = [p.rate for p in out.probes]
    assert out.converged and 15_000 / 1.05 <= out.max_sustainable_rate <= 15_000, rates
    assert rates.count(19_048) == 1 and all(
        p.passed == (p.rate <= 15_000) for p in out.probes if p.rate != 20_000
    ), rates


def test_the_generator_limit_ends_the_search_without_a_capacity():
    calls: list = []
    out = find_max_rate(
        threshold(10**9, generator_limit=2_000_000, calls=calls), SearchPlan(start_rate=500_000)
    )
    assert not out.converged and out.generator_limited
    assert out.max_sustainable_rate is None and out.failed_slo == "generator"
    assert calls == [500_000, 1_000_000, 2_000_000, 4_000_000]
    assert out.bracket == [2_000_000, 4_000_000]
    assert "--producers" in out.reason


@pytest.mark.parametrize(
    "probe, why",
    [
        (threshold(10**9), "every probe passed"),
        (threshold(0), "every probe failed"),
    ],
)
def test_a_search_without_a_bracket_does_not_converge(probe, why):
    out = find_max_rate(probe, SearchPlan(start_rate=1000, max_probes=200), max_rate=50_000)
    assert not out.converged and out.max_sustainable_rate is None and why in out.reason


def test_the_probe_budget_bounds_the_search():
    out = find_max_rate(threshold(15_000), SearchPlan(start_rate=1, precision=0.001, max_probes=6))
    assert not out.converged and len(out.probes) == 6 and "--max-probes" in out.reason


# -- the generator verdict's logic on hand-made producers ----------------------------------------------
def producer(rate: int, sent_s: float, lag_ms: float, blocked_ms: float, lateness_ms: list):
    from zmqload.contract.control import ProducerFinal, SendCounters
    from zmqload.measure.histogram import Histogram

    attempted = int(sent_s * rate)
    late = Histogram()
    late.record(np.array([int(x * 1e6) for x in lateness_ms], np.int64))
    t_last = T0 + (attempted - 1) * 10**9 // rate + int(lag_ms * 1e6)
    counters = SendCounters(
        attempted=attempted, t_last_send_ns=t_last, blocked_ns=int(blocked_ms * 1e6)
    )
    return ProducerFinal(counters, sent_ok_map=np.zeros(0, np.uint8), lateness=late.to_payload())


T0 = 10**12


@pytest.mark.parametrize(
    "lag_ms, blocked_ms, lateness_ms, limited",
    [
        (0.02, 0, [0.01] * 100, False),  # on schedule
        (500, 0, list(np.linspace(0, 500, 100)), True),  # CPU-bound: later and later
        (500, 480, list(np.linspace(0, 500, 100)), False),  # pushback: the lag was spent blocked
        (900, 600, list(np.linspace(0, 900, 100)), True),  # both, the generator short by 300 ms
        (8.1, 0, [0.01] * 99 + [8.1], False),  # one late wake-up just before the end
    ],
)
def test_generator_verdict(lag_ms, blocked_ms, lateness_ms, limited):
    from zmqload.measure.schedule_keeping import schedule_keeping

    verdict = schedule_keeping(2000, T0, [producer(2000, 1.0, lag_ms, blocked_ms, lateness_ms)])
    assert verdict["generator_limited"] is limited
    assert verdict["lag_ms"] == pytest.approx(lag_ms, abs=0.01)
    offered = verdict["scheduled_messages"] - 2000  # the lag the sockets caused counts as offered
    assert offered == int(min(lag_ms, blocked_ms) * 2)


def test_a_services_wait_for_answers_counts_as_offered():
    """REQ to a service of the user's: the lag is the wait for the answers (nothing is timed as
    blocked), so the requests it held back were offered: a service answering 500/s of 2000/s
    scheduled is not "achieved 1.0" on its attempts alone; and the generator is not blamed."""
    from zmqload.measure.schedule_keeping import schedule_keeping

    verdict = schedule_keeping(
        2000, T0, [producer(2000, 0.25, 750, 0, list(np.linspace(0, 750, 100)))], round_trip=True
    )
    assert verdict["generator_limited"] is False
    assert (
        verdict["scheduled_messages"] == 500 + 750 * 2
    )  # 500 attempted, 1,500 held back by the lag


# -- what the Parquet records say, without zmqload ----------------------------------------------------
def schedule_lag(run_dir: str) -> tuple[float, float, int]:
    """(lag of the last send in ms, sending span in ms, rows) from the sends records."""
    sends = read_table(run_dir, "sends")
    t_sent = sends.column("t_sent_ns").to_numpy()
    intended = sends.column("t_intended_ns").to_numpy()
    last = int(np.argmax(sends.column("seq").to_numpy()))
    return (t_sent[last] - intended[last]) / 1e6, (t_sent.max() - intended.min()) / 1e6, len(t_sent)


def kept_up(run_dir: str) -> float:
    """Share of the accepted sends that had arrived by the time sending ended."""
    sends, recvs = read_table(run_dir, "sends"), read_table(run_dir, "recvs")
    ok = sends.column("status").to_numpy() == 0
    end = sends.column("t_sent_ns").to_numpy()[ok].max()
    return float((recvs.column("t_recv_ns").to_numpy() <= end).sum()) / int(ok.sum())


# -- generator limit vs pushback on real runs ---------------------------------------------------------
def test_an_unreachable_rate_is_generator_limited_with_the_rate_reached(out_dir):
    r = zmqload_cli("run", "--rate", "100000000", "--duration", "1", "--out", out_dir)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("generator limited")]
    assert len(lines) == 1, r.stdout
    (run_dir,) = glob.glob(os.path.join(out_dir, "run=*"))
    meta = read_meta(run_dir)
    gen = meta["summary"]["generator"]
    assert meta["summary"]["generator_limited"] is True and gen["generator_limited"] is True
    lag_ms, span_ms, rows = schedule_lag(run_dir)
    assert lag_ms > 0.5 * span_ms  # the schedule was out of reach
    assert gen["lag_ms"] == pytest.approx(lag_ms, rel=0.01)
    reached = rows / (span_ms / 1e3)
    assert gen["reached_rate"] == pytest.approx(reached, rel=0.05)
    assert gen["reached_rate"] < 0.2 * 100_000_000
    assert f"{gen['reached_rate']:,.0f} msg/s" in lines[0]
    sends = read_table(run_dir, "sends")
    lateness_ms = (
        sends.column("t_sent_ns").to_numpy() - sends.column("t_intended_ns").to_numpy()
    ) / 1e6
    assert gen["lateness_p90_ms"] == pytest.approx(np.percentile(lateness_ms, 90), rel=0.02)


def test_a_slow_consumer_pushes_back_it_does_not_limit_the_generator(run_workload):
    # 50 us of work per message: at most ~20k msg/s; 60k msg/s of 4 KiB in block mode fills the
    # pipes (HWM 100 each side) and the kernel's buffers within a fraction of a second
    r = run_workload(
        pattern="push-pull",
        rate=60_000,
        duration=1.5,
        consumer_delay_us=50,
        send_mode="block",
        size=4096,
        sndhwm=100,
        rcvhwm=100,
    )
    lag_ms, span_ms, _ = schedule_lag(r.run_dir)
    assert lag_ms > 0.2 * span_ms  # behind schedule, as the records show
    assert r.generator["blocked_ms"] > 0.5 * r.generator["lag_ms"]
    assert not r.generator_limited and read_meta(r.run_dir)["summary"]["generator_limited"] is False


def test_a_modest_paced_run_is_neither(run_workload):
    r = run_workload(pattern="push-pull", rate=2_000, duration=1)
    lag_ms, span_ms, rows = schedule_lag(r.run_dir)
    sends = read_table(r.run_dir, "sends")
    lateness_ms = (
        sends.column("t_sent_ns").to_numpy() - sends.column("t_intended_ns").to_numpy()
    ) / 1e6
    # on schedule, as the records show, within the verdict's tolerance (2% of the span; a busy
    # machine makes a paced producer wake up late now and then)
    assert lag_ms < 0.02 * span_ms and np.percentile(lateness_ms, 90) < 0.02 * span_ms
    assert r.generator["blocked_ms"] == 0 and r.producers[0]["blocked_sends"] == 0  # no pushback
    assert not r.generator_limited and r.generator["lag_ms"] == pytest.approx(lag_ms, abs=0.01)


# -- the search on real runs -----------------------------------------------------------------------
@pytest.mark.alone
def test_the_search_finds_a_slow_consumers_ceiling(out_dir):
    """R, the answer, passes at 0.9 R and fails at 1.25 R; the ceiling is measured first."""
    template = zmqload.Workload(pattern="push-pull", consumer_delay_us=50, out=out_dir)
    # unpaced, and the consumer keeps its work through the drain: it reads as fast as it can throughout
    ceiling_run = zmqload.run(
        zmqload.Workload(
            **{
                **template.to_dict(),
                "rate": 0,
                "count": 20_000,
                "drain": "slow",
                "run_name": "ceiling",
            }
        )
    )
    recvs = np.sort(read_table(ceiling_run.run_dir, "recvs").column("t_recv_ns").to_numpy())
    ceiling = len(recvs) / ((recvs[-1] - recvs[0]) / 1e9)  # msg/s, straight from the records
    assert ceiling == pytest.approx(ceiling_run.throughput_msgs, rel=0.1)

    slos = Slos().with_search_defaults()
    # the default probe budget: on a busy machine the consumer's speed moves between probes,
    # and every re-run that fails costs probes (bench/bench_capacity.py counts them when quiet)
    plan = SearchPlan(start_rate=max(1000, int(ceiling / 3)), precision=0.05, probe_duration=1.0)
    names = iter(range(100))
    out = find_max_rate(
        lambda rate: probe_once(template, slos, rate, plan.probe_duration, f"probe-{next(names)}"),
        plan,
    )
    assert out.converged, [p.to_dict() for p in out.probes]
    answer = out.max_sustainable_rate
    assert 0.3 * ceiling < answer < 1.2 * ceiling, (answer, ceiling)
    below = probe_once(template, slos, int(0.9 * answer), 1.0, "check-0.9")
    if not below.passed:
        # the search's own rule: one failed probe is not a verdict (its answer passed twice); a
        # second try is, so a scheduling stall of the 2-core machine in one second is not one
        below = probe_once(template, slos, int(0.9 * answer), 1.0, "check-0.9-again")
    above = probe_once(template, slos, int(1.25 * answer), 1.0, "check-1.25")
    assert below.passed, below.to_dict()
    assert not above.passed and above.breaches and not above.generator_limited, above.to_dict()
    assert kept_up(below.run_dir) > 0.95 > kept_up(above.run_dir)


@pytest.mark.alone
def test_a_rate_6_percent_above_the_consumers_ceiling_is_not_sustainable(out_dir):
    """With 1 s probes (the demo's, the bench's) the backlog check sees a consumer 6% short of
    the rate; it used to pass such a probe (a 19.5k/s consumer answered at 20.9k/s: the
    sampled depth with two slices of messages tolerated, 8% of a 1 s probe's half). The
    growth is checked in the records first: the setup must have overloaded the consumer."""
    template = zmqload.Workload(pattern="push-pull", consumer_delay_us=50, out=out_dir)
    ceiling_run = zmqload.run(
        zmqload.Workload(
            **{
                **template.to_dict(),
                "rate": 0,
                "count": 20_000,
                "drain": "slow",
                "run_name": "ceiling",
            }
        )
    )
    recvs = np.sort(read_table(ceiling_run.run_dir, "recvs").column("t_recv_ns").to_numpy())
    ceiling = len(recvs) / ((recvs[-1] - recvs[0]) / 1e9)
    probe = probe_once(template, Slos().with_search_defaults(), int(1.06 * ceiling), 1.0, "over")
    # numpy over the records: over the second half of sending, more went in than came out
    sent = np.sort(read_table(probe.run_dir, "sends").column("t_sent_ns").to_numpy())
    got = read_table(probe.run_dir, "recvs").column("t_recv_ns").to_numpy()
    mid = sent[0] + (sent[-1] - sent[0]) / 2
    into = int((sent >= mid).sum())
    out_of = int(((got >= mid) & (got <= sent[-1])).sum())
    assert into - out_of > 0.02 * into, (into, out_of)
    assert not probe.passed and not probe.generator_limited, probe.to_dict()
    assert {b.slo for b in probe.breaches} & {"backlog", "min-achieved"}, probe.to_dict()


def test_the_consumers_simulated_work_takes_what_it_asks_per_message(run_workload):
    """--consumer-delay-us 50 on an unpaced push-pull run (a message always waiting, the work kept
    through the drain): the gaps between receives in the records are the consumer's real time per
    message. Every gap is at least the 50 us asked (the work is done for every message); the
    median is the work plus one zmq_recv (~1-3 us). The band's top, 60 us, leaves a loaded 2-core
    machine room (measured medians: 50.1-50.4 us) while catching work that costs a fifth more than
    asked; a timing target belongs in bench/consumer_work.py, not here."""
    r = run_workload(pattern="push-pull", rate=0, count=20_000, consumer_delay_us=50, drain="slow")
    assert r.lost == 0
    t_recv = np.sort(read_table(r.run_dir, "recvs").column("t_recv_ns").to_numpy())
    gaps_us = np.diff(t_recv) / 1e3
    assert len(t_recv) == 20_000
    assert gaps_us.min() >= 50.0
    assert 50.0 <= np.median(gaps_us) <= 60.0, np.percentile(gaps_us, [10, 50, 90])


def test_a_search_far_above_one_producer_reports_the_generator_limit(out_dir):
    r = zmqload_cli(
        "capacity", "--start-rate", "50M", "--probe-duration", "0.5", "--out", out_dir, "--json"
    )
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc == json.load(open(os.path.join(out_dir, "capacity-search.json")))
    (search,) = doc["searches"]
    assert search["generator_limited"] is True and search["max_sustainable_rate"] is None
    assert search["failed_slo"] == "generator" and search["converged"] is False
    (probe,) = search["probes"]
    lag_ms, span_ms, rows = schedule_lag(probe["run_dir"])
    assert rows / (span_ms / 1e3) < 0.2 * 50_000_000 and lag_ms > 0.5 * span_ms


def test_capacity_cli_answers_and_writes_its_result(out_dir):
    # 200 us of work: at most 5k/s; a start at 3k brackets it in two probes instead of four
    r = zmqload_cli(
        "capacity",
        "--start-rate",
        "3k",
        "--probe-duration",
        "0.5",
        "--precision",
        "0.5",
        "--consumer-delay-us",
        "200",
        "--out",
        out_dir,
        timeout=300,
    )
    assert r.returncode == 0, (r.stdout, r.stderr)
    doc = json.load(open(os.path.join(out_dir, "capacity-search.json")))
    (search,) = doc["searches"]
    assert set(search) >= {
        "max_sustainable_rate",
        "bracket",
        "failed_slo",
        "probes",
        "generator_limited",
    }
    assert len(
        [line for line in r.stdout.splitlines() if line.lstrip().startswith("probe ")]
    ) == len(search["probes"])
    for probe in search["probes"]:
        assert os.path.isfile(os.path.join(probe["run_dir"], "run.json"))
    assert search["converged"] and search["max_sustainable_rate"] == search["bracket"][0]
    assert f"max sustainable rate {search['max_sustainable_rate']:,} msg/s" in r.stdout


# -- the SLO gates of run ---------------------------------------------------------------------------
def test_run_exits_3_naming_the_broken_loss_slo(out_dir):
    r = zmqload_cli(
        "run",
        "--pattern",
        "pub-sub",
        "--rcvhwm",
        "10",
        "--sndhwm",
        "10",
        "--rate",
        "100k",
        "--duration",
        "1",
        "--consumer-delay-us",
        "20",
        "--max-loss",
        "0",
        "--json",
        "--out",
        out_dir,
    )
    assert r.returncode == 3, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "--max-loss 0" in r.stderr
    summary = json.loads(r.stdout)
    sends, recvs = read_table(summary["run_dir"], "sends"), read_table(summary["run_dir"], "recvs")
    accepted = int((sends.column("status").to_numpy() == 0).sum())
    lost = accepted - len(np.unique(recvs.column("seq").to_numpy()))
    assert lost > 0 and summary["lost"] == lost
    assert f"{lost / accepted:.4%}" in r.stderr


def test_run_exits_3_naming_the_broken_latency_slo_and_0_within_it(out_dir, capsys):
    """In this process, through the CLI's own entry; exit status 3 of a real process is checked above."""
    r = in_process(
        capsys,
        "run",
        "--rate",
        "2k",
        "--duration",
        "0.5",
        "--slo-p99-us",
        "1",
        "--quiet",
        "--out",
        out_dir,
    )
    assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--slo-p99-us 1: p99 from the intended send time" in r.stderr
    measured = float(r.stderr.split("send time ")[1].split(" µs")[0].replace(",", ""))
    ok = in_process(
        capsys,
        "run",
        "--rate",
        "2k",
        "--duration",
        "0.5",
        "--slo-p99-us",
        "10000000",
        "--max-loss",
        "0",
        "--json",
        "--out",
        out_dir,
    )
    assert ok.returncode == 0, ok.stderr
    recvs = read_table(json.loads(ok.stdout)["run_dir"], "recvs")
    latency_us = (
        recvs.column("t_recv_ns").to_numpy() - recvs.column("t_intended_ns").to_numpy()
    ) / 1e3
    assert measured > 1 and np.percentile(latency_us, 99) < 10_000_000


@pytest.mark.parametrize(
    "args, option",
    [
        (["capacity", "--precision", "0"], "--precision"),
        (["capacity", "--max-loss", "2"], "--max-loss"),
        (["capacity", "--min-achieved", "x"], "--min-achieved"),
        (["capacity", "--start-rate", "0"], "--start-rate"),
        (["capacity", "--probe-duration", "0.01"], "--probe-duration"),
        (["capacity", "--rate", "5k"], "--rate"),
        (["capacity", "--size", "64,8"], "--size"),
        (["run", "--slo-p99-us", "-1"], "--slo-p99-us"),
        (["run", "--max-loss", "1.5"], "--max-loss"),
        (["capacity", "--slo-restart-lost", "0"], "--slo-restart-lost"),  # no --restart
        (["capacity", "--restart", "c0@1", "--slo-recovery-ms", "0"], "--slo-recovery-ms"),
        (["run", "--duration", "1", "--slo-recovery-ms", "50"], "--slo-recovery-ms"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, option, out_dir, capsys):
    """In this process, through the CLI's own entry (that `python -m zmqload` refuses in one line,
    exit status 2, no traceback is test_cli.py's): nothing written, no process started."""
    before = children()
    r = in_process(capsys, *args, "--out", out_dir)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert (
        len(r.stderr.strip().splitlines()) == 1
        and option in r.stderr
        and "Traceback" not in r.stderr
    )
    assert not os.path.exists(out_dir) or not os.listdir(out_dir)
    assert children() <= before, "a refused command started a process"


def test_capacity_refuses_a_directory_that_holds_a_search(out_dir, capsys):
    os.makedirs(out_dir)
    open(os.path.join(out_dir, "capacity-search.json"), "w").close()
    before = children()
    r = in_process(capsys, "capacity", "--out", out_dir)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--out" in r.stderr
    assert os.listdir(out_dir) == ["capacity-search.json"] and children() <= before


# -- the live line ------------------------------------------------------------------------------------
def test_the_live_line_shows_rate_refusals_gaps_and_elapsed_of_total(out_dir):
    import io

    from rich.console import Console

    from zmqload.cli.display import LiveProgress

    class Recording(LiveProgress):
        snapshots: list = []

        def update(self, snapshot):
            self.snapshots.append(snapshot)
            super().update(snapshot)

    screen = io.StringIO()
    live = Recording(Console(file=screen, force_terminal=True, width=200), total_s=2.0)
    # a subscriber that cannot keep up with RCVHWM 10: messages go missing as the run goes on
    result = zmqload.run(
        zmqload.Workload(
            pattern="pub-sub",
            rate=100_000,
            duration=2,
            rcvhwm=10,
            sndhwm=10,
            consumer_delay_us=20,
            out=out_dir,
        ),
        progress=live,
    )
    running = [s for s in live.snapshots if s.phase == "running"]
    assert running and max(s.gaps for s in running) > 0
    sends, recvs = read_table(result.run_dir, "sends"), read_table(result.run_dir, "recvs")
    never_came = int((sends.column("status").to_numpy() == 0).sum()) - len(
        np.unique(recvs.column("seq").to_numpy())
    )
    assert (
        0 < max(s.gaps for s in live.snapshots) <= never_came
    )  # gaps are messages that never came
    shown = screen.getvalue()
    assert "/ 2.0 s" in shown and "gaps " in shown and "msg/s)" in shown and "refused " in shown


# -- the cause the report's answer names (report/search_answer.py), on hand-made searches ---------------
def demo_search(hwm: int, failing_figures: dict, breaches: list) -> sr.SearchEntry:
    """A converged pub-sub search (20 us of work per message) whose lowest failing probe broke
    `breaches` (each an SLO and maybe its text) with `failing_figures` (Figures' values)."""
    passing = sr.ProbeEntry(
        rate=15_400,
        passed=True,
        figures=sr.Figures(
            p99_us=3170.0,
            achieved=1.0,
            queue_peak=sr.ProbeQueuePeak(messages=240, kernel_messages=1, libzmq_messages=239),
        ),
    )
    failing = sr.ProbeEntry(
        rate=16_100,
        passed=False,
        figures=sr.Figures(**failing_figures),
        breaches=[sr.BreachEntry(slo=Slo(b["slo"]), text=b.get("text", "")) for b in breaches],
    )
    template = sr.SearchTemplate(
        pattern="pub-sub",
        transport="tcp",
        size=256,
        sndhwm=hwm,
        rcvhwm=hwm,
        consumer_delay_us=20.0,
        consumers=1,
    )
    return sr.SearchEntry(
        values={},
        workload=template,
        producers=1,
        converged=True,
        max_sustainable_rate=15_400,
        bracket=[15_400, 16_100],
        generator_limited=False,
        probes=[passing, failing],
    )


def test_drops_while_the_consumer_kept_up_are_put_on_the_hwm_not_the_consumer():
    # the demo's search with HWM 100 (docs/CAPACITY.md, "A small HWM drops under scheduling jitter"):
    # 8 of 16,105 dropped at 16.1k/s, everything else received in time
    from zmqload.report.search_answer import sentence

    text = sentence(
        demo_search(
            100,
            {
                "achieved": 0.9995,
                "loss_ratio": 8 / 16105,
                "dropped": 8,
                "offered_rate": 16_100,
                "throughput_msgs": 16_090.0,
            },
            [{"slo": "max-loss", "text": "--max-loss 0: lost 0.0497% (8 of 16,105)"}],
        )
    )
    assert text.startswith("pub-sub tcp 256 B, SNDHWM 100, RCVHWM 100: 15.4k/s sustainable")
    assert "limited by drops at the HWM while the consumer kept up on average" in text
    assert (
        "received 16.1k/s, 99.95% of the offered load" in text
        and "a larger HWM absorbs them" in text
    )
    assert "limited by the consumer" not in text


@pytest.mark.parametrize(
    "figures, breaches",
    [
        (
            {"achieved": 0.62, "loss_ratio": 0.38},
            [{"slo": "max-loss"}, {"slo": "min-achieved"}],
        ),  # drops: fell behind
        (
            {"achieved": 0.96, "loss_ratio": 0.04},
            [{"slo": "max-loss"}, {"slo": "min-achieved"}],
        ),  # 4% dropped
        ({"achieved": 0.999, "loss_ratio": 0.0}, [{"slo": "backlog"}]),  # nothing lost, queue grew
        # seen on a loaded machine: the queue filled early (no growth in the second half), 0.5% dropped,
        # the rest read by the drain (achieved 0.995), but until the drain it took 10.7k/s of 16.1k/s
        (
            {
                "achieved": 0.995,
                "loss_ratio": 0.005,
                "offered_rate": 16_100,
                "throughput_msgs": 10_690.0,
            },
            [{"slo": "max-loss"}],
        ),
        # only p99 broke, nothing lost, no backlog breach, but the consumer took 90% of the offered rate
        (
            {
                "achieved": 1.0,
                "loss_ratio": 0.0,
                "offered_rate": 16_100,
                "throughput_msgs": 14_500.0,
            },
            [{"slo": "slo-p99-us"}],
        ),
    ],
)
def test_a_consumer_that_fell_behind_is_named_as_the_limit(figures, breaches):
    from zmqload.report.search_answer import sentence

    text = sentence(demo_search(1000, figures, breaches))
    if "throughput_msgs" in figures:
        assert f"took {figures['throughput_msgs'] / 1e3:.1f}k/s of the 16.1k/s offered" in text
    assert (
        "limited by the consumer, doing 20 µs of work per message (at most 50.0k/s each, 1 consumer)"
        in text
    )
    # 16.1k/s is a third of what 20 us allows: the sentence says the work alone did not set the pace
    assert (
        "fell behind at 16.1k/s per consumer" in text and "below what its work alone allows" in text
    )
    assert "larger HWM" not in text


def test_a_latency_breach_alone_is_queueing():
    from zmqload.report.search_answer import cause

    search = demo_search(
        1000,
        {"achieved": 1.0, "loss_ratio": 0.0, "offered_rate": 16_100, "throughput_msgs": 16_050.0},
        [{"slo": "slo-p99-us"}],
    )
    assert cause(search, search.probes[1]).startswith("limited by latency")


def test_a_search_with_restarts_answers_the_rate_sustained_through_them():
    """--restart in a search: the answer says which restarts the rate held through, in the page's
    sentence and capacity's line; a probe's line counts what the restarts lost beside its loss."""
    import msgspec

    from zmqload.cli.capacity import answer_line, probe_line
    from zmqload.plan.capacity_search import Outcome
    from zmqload.report.search_answer import sentence

    search = demo_search(1000, {"achieved": 0.9, "loss_ratio": 0.1}, [{"slo": "max-loss"}])
    search.workload = msgspec.structs.replace(search.workload, restart="c0@1")
    assert "15.4k/s sustainable with the restarts c0@1 (bracket 15.4k/s - 16.1k/s)" in sentence(
        search
    )
    figures = sr.Figures(achieved=0.998, loss_ratio=0.0, lost=12, dropped=12, dropped_restart=12)
    passing = Probe(15_400, True, [], figures=figures)
    outcome = Outcome(True, 15_400, [15_400, 16_100], None, False, "", [passing])
    assert answer_line("push-pull", outcome, restart="c0@1").startswith(
        "push-pull: max sustainable rate 15,400 msg/s per producer with the restarts c0@1 (bracket"
    )
    assert "loss 0.00% (and 12 at restarts), p99" in probe_line(1, passing)
