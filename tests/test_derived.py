"""Rules derived from a workload's settings, each stated once and used by every stage that
states it: the consumer's work in nanoseconds (Workload.consumer_delay_ns: the consumer's
engine and the controller's slow drain) and the rate that work caps a consumer near
(contract.derived.work_ceiling: the report's verdicts and the capacity search's answer)."""

from __future__ import annotations

import pytest

from zmqload.analysis import verdicts
from zmqload.analysis.summary_row import Percentiles, SummaryRow
from zmqload.contract.workload import Workload
from zmqload.contract.derived import work_ceiling
from zmqload.contract import search_record as sr
from zmqload.contract.run_record import RunRecord
from zmqload.contract.states import Slo
from zmqload.report import search_answer
from zmqload.runner.controller import PROGRESS_EVERY_NS, drain_decision


@pytest.mark.parametrize(
    "us, ns",
    [(0, 0), (20, 20_000), ("2.5", 2500), (1.001, 1001), (0.0005, 0), (60_000_000, 60_000_000_000)],
)
def test_consumer_delay_ns_is_the_option_in_whole_nanoseconds(us, ns):
    assert Workload(consumer_delay_us=us).consumer_delay_ns == ns


def test_the_slow_drain_waits_one_more_message_of_work_the_engines_nanoseconds():
    w = Workload(consumer_delay_us=1.001, drain="slow", drain_timeout_ms=5)
    patience = 5_000_000 + PROGRESS_EVERY_NS + w.consumer_delay_ns
    assert w.consumer_delay_ns == 1001
    assert drain_decision(10, 5, patience - 1, 0, w) is None
    assert drain_decision(10, 5, patience, 0, w) == "idle"
    fast = Workload(consumer_delay_us=1.001, drain="fast", drain_timeout_ms=5)
    assert drain_decision(10, 5, 5_000_000 + PROGRESS_EVERY_NS, 0, fast) == "idle"


def test_work_ceiling():
    assert (
        work_ceiling(20) == 50_000
        and work_ceiling(40.0) == 25_000
        and work_ceiling(0.5) == 2_000_000
    )
    for nothing in (0, 0.0, -5):
        with pytest.raises(ValueError):
            work_ceiling(nothing)


def _slow_consumer_search(delay_us):
    """A converged search whose failing probe's consumer fell behind (as test_capacity's)."""
    return sr.SearchEntry(
        converged=True,
        max_sustainable_rate=20_000,
        bracket=[20_000, 40_000],
        producers=1,
        workload=sr.SearchTemplate(pattern="push-pull", consumers=1, consumer_delay_us=delay_us),
        probes=[
            sr.ProbeEntry(
                rate=40_000,
                passed=False,
                breaches=[sr.BreachEntry(slo=Slo.MIN_ACHIEVED)],
                figures=sr.Figures(offered_rate=40_000, throughput_msgs=21_000, achieved=0.5),
            )
        ],
    )


def test_the_report_and_the_search_answer_state_the_ceiling_by_the_one_rule():
    row = SummaryRow(
        run="r", offered_rate=40_000, received=1000, latency_intended=Percentiles(p99=9000.0)
    )
    for delay, text in ((40, "25.0k/s"), (30, "33.3k/s")):
        view = verdicts.RunView(row, RunRecord(workload=Workload(consumer_delay_us=delay)))
        cause, _ = verdicts.advice(view, [(verdicts.P99, "p99 9000 us")], 1000.0)
        assert f"{delay} µs of work per message caps a consumer near {text}" in cause
        search = _slow_consumer_search(delay)
        assert f"(at most {text} each, 1 consumer)" in search_answer.cause(search, search.probes[0])
