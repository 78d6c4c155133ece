"""The report of a run against a request-reply service of the user's (issue 27: req-rep with
--role producer). The services are plain pyzmq in threads of the test, as a user writes them: a
REP that echoes each request, a REP that answers with its own payload (matched by order), a REP
that stops answering, and a ROUTER|DEALER broker (zmq.proxy) in front of two REP workers. Every
figure the report shows (summary.parquet, the page, capacity.json's verdicts) is checked against
run.json and against numpy over the Parquet records (pyarrow straight over sends/ and replies/,
no zmqload code), and the services' own counts. One report over all the runs (one Spark job).
Loopback only, bounded in count and time."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import threading

import numpy as np
import pyarrow.parquet as pq
import pytest
import zmq

from conftest import end_with_the_test, report_here, zmqload_cli
from zmqload.contract.workload import UNPACED_RATE_GUESS
from test_one_side import UserRep, _proxy, stream_seq, until_quiet

ALL = -1  # the summary's consumer / stream of a run's total row
HIST_ERROR = (
    0.01  # the latency histogram's bucket error (< 0.8 %, contract/histogram.py), rounded up
)


def _run(*args: str, status: int = 0) -> dict:
    done = zmqload_cli(
        "run", "--json", "--pattern", "req-rep", "--role", "producer", *args, timeout=300
    )
    assert done.returncode == status, done.stderr
    return json.loads(done.stdout)


def _records(run_dir: str, kind: str) -> dict[str, np.ndarray]:
    table = pq.read_table(sorted(glob.glob(os.path.join(run_dir, kind, "*.parquet"))))
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}


class Broker:
    """The user's ROUTER|DEALER broker (zmq.proxy) in front of `workers` REP threads that echo.
    join() (or, at the latest, the end of the test or fixture that made it: tests/conftest.py)
    terminates its context: the proxy and a worker still waiting end (ETERM) and close their own sockets."""

    def __init__(self, workers: int = 2):
        self.context = zmq.Context()
        front, back = self.context.socket(zmq.ROUTER), self.context.socket(zmq.DEALER)
        self.endpoint = f"tcp://127.0.0.1:{front.bind_to_random_port('tcp://127.0.0.1')}"
        back_port = back.bind_to_random_port("tcp://127.0.0.1")
        self.proxy = threading.Thread(target=lambda: _proxy(front, back), daemon=True)
        self.served: list[tuple[int, int]] = []
        self.workers = [
            threading.Thread(target=self._worker, args=(back_port,), daemon=True)
            for _ in range(workers)
        ]
        end_with_the_test(self.stop)
        for t in (self.proxy, *self.workers):
            t.start()

    def _worker(self, port: int) -> None:
        rep = self.context.socket(zmq.REP)
        rep.setsockopt(zmq.RCVTIMEO, 90_000)
        rep.connect(f"tcp://127.0.0.1:{port}")
        try:
            while True:
                request = rep.recv()
                rep.setsockopt(zmq.RCVTIMEO, 2000)
                self.served.append(stream_seq(request))
                rep.send(request)
        except (zmq.Again, zmq.ContextTerminated):  # idle, or stopped
            pass
        finally:
            rep.close(linger=0)

    def join(self) -> None:
        """Once the run ended: until_quiet, then stop (as UserRep.join)."""
        until_quiet(lambda: len(self.served))
        self.stop()

    def stop(self) -> None:
        self.context.term()
        for t in (self.proxy, *self.workers):
            t.join(timeout=10)
            assert not t.is_alive(), f"the broker's thread {t.name} did not end within 10 s"


@pytest.fixture(scope="module")
def service_runs(tmp_path_factory, spark):
    """Four runs against services of the user's, and one report over them: {name: (run --json, service)}."""
    out = tmp_path_factory.mktemp("service")
    runs = {}
    echo = UserRep(echo=True)
    runs["echo"] = (
        _run(
            "--producers-connect",
            echo.endpoint,
            "--rate",
            "2k",
            "--count",
            "1500",
            "--max-loss",
            "0",
            "--slo-p99-us",
            "5000000",
            "--out",
            str(out),
        ),
        echo,
    )
    echo.join()
    own = UserRep(echo=False)
    runs["own"] = (
        _run(
            "--producers-connect",
            own.endpoint,
            "--rate",
            "2k",
            "--count",
            "1500",
            "--out",
            str(out),
        ),
        own,
    )
    own.join()
    stops = UserRep(stop_after=201)  # the 201st request is read and never answered
    runs["stops"] = (
        _run(
            "--producers-connect",
            stops.endpoint,
            "--rate",
            "1k",
            "--count",
            "260",
            "--reply-timeout-ms",
            "50",
            "--max-loss",
            "0",
            "--out",
            str(out),
            status=3,
        ),
        stops,
    )
    stops.join()
    broker = Broker()
    runs["broker"] = (
        _run(
            "--producers-connect",
            broker.endpoint,
            "--producers",
            "2",
            "--rate",
            "1k",
            "--count",
            "400",
            "--out",
            str(out),
        ),
        broker,
    )
    broker.join()
    # the max sustainable rate of a service that takes 2 ms per answer (REQ, one in flight: < 500/s)
    searched = UserRep(echo=True, idle_ms=20_000, work_s=0.002)
    done = zmqload_cli(
        "capacity",
        "--pattern",
        "req-rep",
        "--role",
        "producer",
        "--producers-connect",
        searched.endpoint,
        "--start-rate",
        "200",
        "--probe-duration",
        "1",
        "--max-probes",
        "8",
        "--precision",
        "0.5",
        "--max-loss",
        "0",
        "--slo-p99-us",
        "5000000",
        "--min-achieved",
        "0.9",
        "--out",
        str(out),
        timeout=600,
    )
    searched.join()
    assert done.returncode == 0, done.stderr  # the search converged
    with open(out / "capacity-search.json") as f:
        doc = json.load(f)
    # what the search kept: its record and its probes' directories (what it said it would write)
    kept = os.path.getsize(out / "capacity-search.json") + sum(
        _kept(p["run_dir"]) for s in doc["searches"] for p in s["probes"]
    )
    runs["search"] = (doc, searched)
    runs["search said"] = (done.stdout, kept)
    # a copy of the echo run with its first replies part cut short: its answers' figures are blanked
    damaged = out / "run=damaged-copy"
    shutil.copytree(runs["echo"][0]["run_dir"], damaged)
    with open(damaged / "run.json") as f:
        record = json.load(f)
    with open(damaged / "run.json", "w") as f:
        json.dump({**record, "run_id": "damaged-copy"}, f)
    first = min(glob.glob(str(damaged / "replies" / "*.parquet")))
    os.truncate(first, os.path.getsize(first) // 2)
    report = out / "report"
    done = report_here(str(out), "--out", str(report))
    assert done.returncode == 0, done.stderr
    assert "skipped" not in done.stderr, done.stderr  # the report refuses nothing it can read
    assert "run damaged-copy: 1 unreadable part left out: replies/" in done.stderr, done.stderr
    # the report's judge over each probe's records agrees with the search's (search_answer.disagreements)
    assert "the search judged it" not in done.stderr, done.stderr
    summary = pq.read_table(str(report / "summary.parquet")).to_pylist()
    totals = {r["run"]: r for r in summary if r["consumer"] == ALL and r["stream"] == ALL}
    with open(report / "capacity.json") as f:
        capacity = json.load(f)
    groups = capacity["groups"]
    runs["search"] = (*runs["search"], capacity["searches"])
    verdicts = {run_id: g["failed_slo"] for g in groups for run_id in g["run_ids"]}
    with open(report / "index.html") as f:
        page = f.read()
    return runs, totals, verdicts, page


def _kept(path: str) -> int:
    """The bytes of every file under `path`."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def _check_against_records(got: dict, row: dict) -> tuple[dict, dict]:
    """The report's run row equals run.json's figures, and both equal numpy over the records."""
    with open(os.path.join(got["run_dir"], "run.json")) as f:
        record = json.load(f)
    service, rtt_ns = record["summary"]["service"], record["summary"]["round_trip_ns"]
    sends, replies = _records(got["run_dir"], "sends"), _records(got["run_dir"], "replies")
    requests = int(np.count_nonzero(sends["status"] == 0))
    answered, echoed = len(replies["seq"]), int(np.count_nonzero(replies["echoed"]))
    # numpy over the records
    assert (requests, answered, echoed) == (
        service["requests"],
        service["answered"],
        service["echoed"],
    )
    assert service["unanswered"] == requests - answered and service["by_order"] == answered - echoed
    # the report's figures: the same values
    assert (row["sent"], row["round_trips"], row["echoed"], row["by_order"], row["unanswered"]) == (
        service["requests"],
        service["answered"],
        service["echoed"],
        service["by_order"],
        service["unanswered"],
    )
    assert row["recv_rate"] == pytest.approx(service["answer_rate"], rel=1e-9)
    rtt = replies["t_reply_ns"] - replies["t_intended_ns"]
    for key, q in (("p50", 50), ("p99", 99), ("p99_9", 99.9), ("max", 100)):
        ours = rtt_ns[key.replace("_", ".")]
        assert row[f"round_trip_{key}_us"] * 1e3 == pytest.approx(ours, rel=1e-9), (
            key
        )  # report == run.json
        exact = np.percentile(rtt, q, method="inverted_cdf")
        assert abs(ours - exact) <= HIST_ERROR * exact, (
            key,
            ours,
            exact,
        )  # == numpy, within a bucket
    assert rtt_ns["max"] == int(rtt.max())
    return record, sends


def test_an_echo_service_every_request_answered_by_echo(service_runs):
    runs, totals, verdicts, page = service_runs
    got, echo = runs["echo"]
    row = totals[got["run_id"]]
    _check_against_records(got, row)
    assert echo.requests == [(0, seq) for seq in range(1500)]  # what the user's service saw
    assert (row["sent"], row["round_trips"], row["echoed"], row["unanswered"]) == (
        1500,
        1500,
        1500,
        0,
    )
    assert row["serves"] and row["loss_ratio"] == 0
    # the same verdict as run's (exit 0, no breach) under the SLOs the run was made with
    assert got["slo_breaches"] == [] and verdicts[got["run_id"]] is None
    assert "Round trips and answers" in page and got["run_id"] in page


def test_a_service_with_its_own_payload_matched_by_order(service_runs):
    runs, totals, verdicts, _ = service_runs
    got, own = runs["own"]
    row = totals[got["run_id"]]
    _check_against_records(got, row)
    assert len(own.requests) == 1500
    assert (row["round_trips"], row["echoed"], row["by_order"], row["unanswered"]) == (
        1500,
        0,
        1500,
        0,
    )
    assert (
        verdicts[got["run_id"]] is None
    )  # made without SLOs: judged on loss only, nothing unanswered


def test_a_service_that_stops_answering_counts_its_timeouts_as_run_json_does(service_runs):
    runs, totals, verdicts, _ = service_runs
    got, stops = runs["stops"]
    row = totals[got["run_id"]]
    record, sends = _check_against_records(got, row)
    assert len(stops.requests) == 201
    assert (row["sent"], row["round_trips"], row["unanswered"]) == (260, 200, 60)
    assert row["lost"] == 60 and row["loss_ratio"] == pytest.approx(60 / 260)
    assert sum(p["unanswered"] for p in record["producers"]) == 60
    # run exited 3 on --max-loss 0; the report's verdict on it is the same breach
    assert [b["slo"] for b in got["slo_breaches"]] == ["max-loss"] and verdicts[
        got["run_id"]
    ] == "loss"
    # each unanswered request waited its timeout: the run ended in bounded time
    assert np.diff(np.sort(sends["t_sent_ns"]))[-59:].min() >= 45e6


def test_a_service_behind_the_users_router_dealer_broker(service_runs):
    runs, totals, verdicts, _ = service_runs
    got, broker = runs["broker"]
    row = totals[got["run_id"]]
    _check_against_records(got, row)
    assert sorted(broker.served) == sorted((p, seq) for p in range(2) for seq in range(400))
    assert (row["sent"], row["round_trips"], row["echoed"], row["unanswered"]) == (800, 800, 800, 0)
    assert verdicts[got["run_id"]] is None


def test_capacity_of_a_service_agrees_with_the_report_of_its_probes(service_runs):
    """`zmqload capacity` against the user's service: each probe's figures are its run.json's (the
    answers' rate, the round trip's p99, the unanswered share) and the report's row of it; the
    report's answer is the search's."""
    runs, totals, _, _ = service_runs
    doc, service, answers = runs["search"]
    search = doc["searches"][0]
    assert search["probes"] and len(service.requests) == sum(
        totals[os.path.basename(p["run_dir"])[4:].split(".")[0]]["sent"] for p in search["probes"]
    )
    for probe in search["probes"]:
        run_id = os.path.basename(probe["run_dir"])[4:].split(".")[0]
        row = totals[run_id]
        with open(os.path.join(probe["run_dir"], "run.json")) as f:
            summary = json.load(f)["summary"]
        figures = probe["figures"]
        assert figures["throughput_msgs"] == round(summary["service"]["answer_rate"], 1)
        assert row["recv_rate"] == pytest.approx(summary["service"]["answer_rate"], rel=1e-9)
        assert figures["lost"] == summary["service"]["unanswered"] == row["unanswered"]
        assert figures["p99_us"] == pytest.approx(row["round_trip_p99_us"], abs=0.05)
    assert [(a["max_sustainable_rate"], a["bracket"]) for a in answers] == [
        (search["max_sustainable_rate"], search["bracket"])
    ]
    assert 0 < search["max_sustainable_rate"] < 500  # 2 ms an answer, one request in flight


def test_a_service_search_says_what_it_writes_from_the_services_pace(service_runs):
    """(Moved from test_said_before_start.py, on this file's search.) Before the search nothing is
    said from 5,000,000 msg/s; after the first probe, the service's pace (one request per round
    trip) and what the search keeps, within 2x of the bytes it kept."""
    runs = service_runs[0]
    stdout, kept = runs["search said"]
    lines = stdout.splitlines()
    assert "your service writes follows its pace, said after its first probe" in lines[0], lines
    assert f"{UNPACED_RATE_GUESS:,}" not in lines[0] and "MB" not in lines[0]
    first = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("probe  1"))
    said = re.search(
        r"the search writes up to about ([\d,.]+) MB in about (\d+) probes", lines[first + 1]
    )
    assert said and "your service: about" in lines[first + 1], lines
    assert 0.5 <= kept / (float(said.group(1).replace(",", "")) * 1e6) <= 2.0, (lines, kept)


def test_an_unreadable_replies_part_blanks_the_answers_not_the_run(service_runs):
    """A service's answers stand for its receipts: a replies part the report cannot read blanks
    them (and the round trips) rather than counting its answers as unanswered."""
    _, totals, _, _ = service_runs
    row = totals["damaged-copy"]
    assert row["status"].startswith("complete") and row["status"] != "complete"  # marked partial
    assert row["sent"] == 1500  # the sends are whole
    for column in (
        "round_trips",
        "unanswered",
        "echoed",
        "by_order",
        "received",
        "lost",
        "loss_ratio",
        "recv_rate",
        "round_trip_p99_us",
    ):
        assert row[column] is None, column
