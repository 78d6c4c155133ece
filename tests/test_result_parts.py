"""RunResult's parts are run.json's typed records, read by attribute, and still by key as when they
were dicts (docs/PYTEST.md: `streams[i]["missing_ranges"]`, a producer's `blocked_sends`); no run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from zmqload.contract import codec, control
from zmqload.contract import run_record as rr
from zmqload.contract.fates import AMBIGUOUS_TAIL, TAIL_AMBIGUOUS
from zmqload.contract.states import DrainEnd, DrainMode
from zmqload.contract.workload import Workload
from zmqload.measure.result import RunResult
from zmqload.measure.stream_account import StreamAccount, ViewFates
from zmqload.runner.collect import consumer_entry, producer_entry


def _result() -> RunResult:
    counters = control.SendCounters(attempted=np.int64(10), sent=9, blocked_sends=3, unanswered=1)
    producer = producer_entry(
        0, control.ProducerFinal(counters, sent_ok_map=np.zeros(2, np.uint8), close_ns=7)
    )
    consumer = consumer_entry(
        0,
        control.ConsumerFinal(
            received=8,
            warmups=1,
            foreign=2,
            errors=0,
            t_first_recv_ns=1,
            t_last_recv_ns=2,
            t_drain_ns=0,
            latency_intended={},
            latency_sent={},
            streams=[],
            frame_mismatches=4,
        ),
    )
    stream = StreamAccount(
        stream=0,
        sent=9,
        expected=18,
        missing_ranges={1: [[3, 4]]},
        dropped_tail=2,
        dropped_tail_ambiguous=2,
        fates_by_consumer={0: ViewFates(delivered=9), 1: ViewFates()},
    )
    drain = rr.Drain(
        mode=DrainMode.FAST,
        ended=DrainEnd.IDLE,
        completed=True,
        tail_placement=TAIL_AMBIGUOUS,
        dropped_tail_ambiguous=2,
    )
    return RunResult(
        "r",
        "runs/run=r",
        "complete",
        Workload(pattern="pub-sub").to_dict(),  # a run's result holds every option
        producers=[producer],
        consumers=[consumer],
        streams=[stream],
        drain=drain,
        generator=rr.GeneratorVerdict(scheduled_rate=100, lag_ms=1.5),
        versions=rr.Versions(libzmq="4"),
    )


def test_parts_read_by_attribute_and_by_key_alike():
    result = _result()
    producer, stream = result.producers[0], result.streams[0]
    assert producer.blocked_sends == producer["blocked_sends"] == producer.get("blocked_sends") == 3
    assert type(producer.attempted) is int and producer["close_ns"] == 7 and producer["worker"] == 0
    assert (
        stream["missing_ranges"][1] == stream.missing_ranges[1] == [[3, 4]]
    )  # a view by its index
    assert stream["fates_by_consumer"][0]["delivered"] == 9
    assert result.drain["ended"] == "idle" and result.drain[AMBIGUOUS_TAIL] == 2  # run.json's names
    assert result.generator["lag_ms"] == 1.5 and result.versions.get("libzmq") == "4"
    assert (
        result.consumers[0].get("nothing", "default") == "default"
        and "foreign" in result.consumers[0]
    )
    with pytest.raises(KeyError):
        producer["nothing"]
    assert dict(producer) == codec.to_builtins(producer) and list(producer) == list(producer.keys())
    assert (result.unanswered, result.frame_mismatches, result.generator_limited) == (1, 4, False)


def test_the_summary_is_plain_json_with_run_jsons_parts():
    result = _result()
    summary = json.loads(json.dumps(result.summary()))
    assert summary["producers"][0]["blocked_sends"] == 3 and summary["drain"]["ended"] == "idle"
    assert summary["streams"][0]["missing_ranges"] == {"1": [[3, 4]]}
    assert summary["generator"]["scheduled_rate"] == 100 and summary["versions"]["libzmq"] == "4"
    # what run.json keeps of them: the same fields, in the same order
    entry = codec.convert(result.streams, list[rr.StreamEntry])[0]
    assert list(codec.to_builtins(entry)) == list(summary["streams"][0])
    assert entry.fates_by_consumer is not None and entry.fates_by_consumer["0"].delivered == 9
