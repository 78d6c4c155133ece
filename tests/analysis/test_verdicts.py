"""The report's verdicts (zmqload/analysis/verdicts.py) on hand-made summaries with known answers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from zmqload.analysis.summary_row import SummaryRow
from zmqload.analysis.verdicts import (
    GENERATOR,
    LOSS,
    P99,
    capacity_table,
    recommend,
    verdict_columns,
)
from zmqload.contract.workload import Workload
from zmqload.contract import run_record as rr
from zmqload.contract.fates import AMBIGUOUS_TAIL

SLO = 1000.0


def _run(
    run_id,
    rate,
    *,
    p99=100.0,
    dropped_mid=0,
    dropped_tail=0,
    drained=0,
    stranded=0,
    eagain=0,
    recv_rate=None,
    generator_limited=None,
    ambiguous=0,
    **workload,
):
    """A summary row (as pipeline.analyze makes it) and its run.json, for one run."""
    w = {
        "pattern": "pub-sub",
        "transport": "tcp",
        "size": 64,
        "rate": rate,
        "producers": 1,
        "consumers": 1,
        "sndhwm": None,
        "rcvhwm": 1000,
        "consumer_delay_us": 0.0,
        "send_mode": "block",
        "linger_ms": None,
        "out": f"runs/{run_id}",
        "run_name": run_id,
    }
    w.update(workload)
    w["label"] = {"rate": rate, **workload}  # as a sweep writes it: never a grouping key
    sent = 10_000
    lost = dropped_mid + dropped_tail + stranded
    row = {
        "run": run_id,
        "status": "complete",
        "interrupted": False,
        "pattern": w["pattern"],
        "transport": w["transport"],
        "size": w["size"],
        "sndhwm": w["sndhwm"],
        "rcvhwm": w["rcvhwm"],
        "producers": w["producers"],
        "consumers": w["consumers"],
        "fanout": w["pattern"] == "pub-sub",
        "rate_per_producer": rate,
        "sent": sent,
        "expected": sent,
        "received": sent - lost,
        "unique": sent - lost,
        "lost": lost,
        "eagain": eagain,
        "timeout": 0,
        "errors": 0,
        "dropped_sender": eagain,
        "send_rate": rate or 500_000.0,
        "recv_rate": recv_rate if recv_rate is not None else (rate or 500_000.0),
        "latency_intended_p99_us": p99,
        "queued_bytes_max": 64.0 * 100,
        "depth_max": 100,
    }
    fates = {
        "delivered": sent - lost - drained,
        "drained": drained,
        "dropped_start": 0,
        "dropped_mid": dropped_mid,
        "dropped_tail": dropped_tail,
        "stranded": stranded,
        "unknown": 0,
    }
    row.update(fates, dropped=dropped_mid + dropped_tail)  # the report's own fates
    row[AMBIGUOUS_TAIL] = ambiguous  # of dropped_tail: a PUB closed at once
    libzmq = w.pop("libzmq", "4.3.4")
    summary = rr.Summary(
        queue_peak=rr.QueuePeak(messages=100, kernel_messages=40, libzmq_messages=60)
    )
    if (
        generator_limited is not None
    ):  # where zmqload.measure.schedule_keeping's verdict goes in run.json
        summary.generator_limited = generator_limited
        summary.generator = rr.GeneratorVerdict(
            generator_limited=generator_limited, reached_rate=91_000.0
        )
    record = rr.RunRecord(
        run_id=run_id,
        workload=Workload(**w),
        versions=rr.Versions(libzmq=libzmq),
        counters=rr.Counters(**fates),
        summary=summary,
    )
    return row, SimpleNamespace(run_id=run_id, record=record)


def _table(*runs, slo=SLO):
    rows, infos = zip(*runs)
    return capacity_table([SummaryRow.of(r) for r in rows], slo, runs=list(infos))


def test_monotone_bracket_names_highest_clean_and_lowest_failing_above():
    t = _table(
        _run("a", 20_000),
        _run("b", 50_000),
        _run("c", 100_000),
        _run("d", 200_000, dropped_mid=500, recv_rate=200_000),
    )
    assert len(t) == 1
    g = t[0]
    assert (g.highest_clean_rate, g.lowest_failing_rate, g.failed_slo) == (100_000, 200_000, LOSS)
    assert g.monotone and g.monotone_note is None
    assert g.group == "all runs" and g.key_names == []
    assert "500 dropped mid-run" in g.failure
    assert "clean up to 100.0k/s, fails at 200.0k/s" in g.verdict


def test_non_monotone_keeps_the_highest_clean_rate_and_says_so():
    t = _table(
        _run("a", 20_000),
        _run("b", 50_000, p99=5000.0),
        _run("c", 100_000),
        _run("d", 200_000, p99=9000.0),
    )
    g = t[0]
    assert (g.highest_clean_rate, g.lowest_failing_rate, g.failed_slo) == (100_000, 200_000, P99)
    assert not g.monotone
    assert "not monotone" in g.monotone_note and "50.0k/s" in g.monotone_note


def test_all_clean_says_no_failure_up_to_the_highest_rate():
    g = _table(_run("a", 10_000), _run("b", 30_000))[0]
    assert (g.highest_clean_rate, g.lowest_failing_rate, g.failed_slo) == (30_000, None, None)
    assert g.verdict.startswith("no failure up to 30.0k/s")
    assert g.advice is None


def test_all_failing_names_the_lowest_rate_and_its_slo():
    g = _table(_run("a", 10_000, p99=2000.0), _run("b", 30_000, p99=3000.0, dropped_mid=3))[0]
    assert (g.highest_clean_rate, g.lowest_failing_rate, g.failed_slo) == (None, 10_000, P99)
    assert g.verdict.startswith("fails at every tested rate, lowest 10.0k/s: p99")


def test_drained_messages_are_not_loss_but_stranded_ones_are():
    g = _table(_run("a", 10_000, drained=4000), _run("b", 20_000, stranded=7))[0]
    assert (g.highest_clean_rate, g.lowest_failing_rate, g.failed_slo) == (10_000, 20_000, LOSS)
    assert "7 stranded" in g.failure


def test_unpaced_runs_are_max_throughput_tests_without_rate_or_knee():
    g = _table(_run("flood", 0, p99=90_000.0, dropped_mid=10))[0]
    assert g.rates_tested == [] and g.highest_clean_rate is None and g.lowest_failing_rate is None
    assert g.failed_slo is None and g.advice is None
    assert g.verdict.startswith("max throughput tests only")
    assert g.max_throughput[0].recv_rate == 500_000.0
    mixed = _table(_run("flood", 0, p99=90_000.0), _run("a", 10_000), _run("b", 20_000))[0]
    assert mixed.rates_tested == [10_000, 20_000] and mixed.highest_clean_rate == 20_000
    text = recommend([mixed])[0]
    assert "Max throughput test flood: received 500.0k/s" in text and "fails" not in text


def test_a_two_delay_sweep_gives_two_groups_named_by_the_delay():
    runs = [
        _run(f"{d}-{r}", r, consumer_delay_us=d, p99=5000.0 if d and r > 20_000 else 80.0)
        for d in (0.0, 40.0)
        for r in (10_000, 20_000, 40_000)
    ]
    t = _table(*runs)
    assert [g.group for g in t] == ["consumer_delay_us=0", "consumer_delay_us=40"]  # as typed
    assert [(g.highest_clean_rate, g.lowest_failing_rate) for g in t] == [
        (40_000, None),
        (20_000, 40_000),
    ]
    cols = verdict_columns(t)
    assert cols["40.0-10000"]["group_consumer_delay_us"] == 40.0
    assert cols["40.0-10000"]["lowest_failing_rate"] == 40_000


def test_several_axes_and_libzmq_version_each_split_the_groups():
    runs = [
        _run(f"{h}-{m}-{v}-{r}", r, rcvhwm=h, send_mode=m, libzmq=v)
        for h in (10, 1000)
        for m in ("block", "dontwait")
        for v in ("4.3.4", "4.3.5")
        for r in (1, 2)
    ]
    t = _table(*runs)
    assert len(t) == 8 and all(g.runs == 2 for g in t)
    # in the Workload's field order, as a real run.json lists them (this test's hand-made dict
    # once listed rcvhwm first; the record built through the type has the real order)
    assert t[0].key_names == ["send_mode", "rcvhwm", "libzmq"]
    assert t[0].group == "send_mode=block, rcvhwm=10, libzmq=4.3.4"


@pytest.mark.parametrize(
    "case, expect",
    [
        (dict(p99=5000.0), ("nothing dropped: a backlog", "a rate below 200.0k/s, a smaller HWM")),
        (
            dict(dropped_mid=50, recv_rate=199_000),
            ("drops while the consumer kept up", "a larger HWM"),
        ),
        (
            dict(dropped_mid=50, recv_rate=60_000, consumer_delay_us=15.0),
            ("consumer falls behind", "a larger HWM only delays the drops"),
        ),
        (
            dict(p99=5000.0, recv_rate=90_000, generator_limited=True),
            ("could not keep its schedule", "add producers"),
        ),
        (dict(dropped_tail=30), ("lost at close", "--close-order after-drain")),
        (
            dict(dropped_tail=30, ambiguous=30),
            ("at a full pipe or at close", "--close-order after-drain) to tell"),
        ),
    ],
)
def test_advice_follows_the_measured_cause(case, expect):
    same = {k: v for k, v in case.items() if k == "consumer_delay_us"}  # one setting, two rates
    g = _table(_run("a", 100_000, **same), _run("b", 200_000, **case))[0]
    cause, what = expect
    assert cause in g.cause and what in g.advice, (g.cause, g.advice)
    if "consumer_delay_us" in case:
        assert "caps a consumer near 66.7k/s" in g.cause
    if case.get("generator_limited"):
        assert (
            GENERATOR in g.failed_slo.split("+") and "reached 91.0k/s of the 200.0k/s" in g.failure
        )


def test_a_latency_failure_never_advises_a_larger_hwm():
    g = _table(_run("a", 100_000), _run("b", 200_000, p99=5000.0))[0]
    assert "larger HWM" not in g.advice


def test_without_run_json_groups_come_from_the_summary_rows():
    rows = [_run(f"{h}-{r}", r, rcvhwm=h)[0] for h in (10, 1000) for r in (1000, 2000)]
    rows[1]["lost"] = rows[1]["dropped_mid"] = rows[1]["dropped"] = 5
    t = capacity_table([SummaryRow.of(r) for r in rows], SLO)
    assert [g.group for g in t] == ["rcvhwm=10", "rcvhwm=1000"]
    assert (t[0].highest_clean_rate, t[0].lowest_failing_rate) == (1000, 2000)


def test_recommendation_picks_the_cheapest_setting_that_carries_the_rate_within_the_budget():
    runs = [
        _run("10-1", 1000, rcvhwm=10),
        _run("10-2", 2000, rcvhwm=10, dropped_mid=5),
        _run("1k-1", 1000, rcvhwm=1000),
        _run("1k-2", 2000, rcvhwm=1000),
    ]
    runs[3][0]["queued_bytes_max"] = 5e6
    t = _table(*runs)
    assert recommend(t, memory_budget=64 * 2**20)[-1].startswith(
        "To carry 2.0k/s within 64.0 MiB: rcvhwm=1000 "
    )
    assert (
        recommend(t, memory_budget=1_000_000)[-1]
        == "No tested setting carries 2.0k/s cleanly within 976.6 KiB."
    )
    assert recommend(t, target_rate=1000)[-1].startswith("To carry 1.0k/s: rcvhwm=10 ")
