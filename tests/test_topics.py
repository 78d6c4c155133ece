"""--topics, --topic-weights, --subscribe (issue 27): the topic leads the first frame, zmqload's
header follows it, and each consumer accounts only for the topics it subscribed to. Checked
against numpy over the Parquet records (the topic of a seq restated here by hand, not taken from
zmqload), a plain pyzmq SUB and a plain pyzmq XSUB|XPUB proxy, and a real local Spark report.
Loopback only, bounded in count and time."""

from __future__ import annotations

import csv
import os
import struct
import threading
import time

import numpy as np
import pytest
import zmq
from conftest import free_ports, read_meta, read_table, report_here, zmqload_cli

import zmqload

WEIGHTS = (4, 3, 2, 1)
SLOTS = np.repeat(np.arange(4), WEIGHTS)  # the weighted rule, by hand: topic = SLOTS[seq % 10]


def sent_by_topic(run_dir: str, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(stream, seq) of every accepted send, and its topic, from the sends records."""
    sends = read_table(run_dir, "sends")
    ok = sends.column("status").to_numpy() == 0
    seq = sends.column("seq").to_numpy()[ok]
    keys = sends.column("stream").to_numpy()[ok].astype(np.int64) << 48 | seq
    return keys, slots[seq % len(slots)]


def received_keys(run_dir: str, consumer: int) -> np.ndarray:
    """Distinct (stream, seq) a consumer received, from the receive records."""
    recvs = read_table(run_dir, "recvs")
    mine = recvs.column("consumer").to_numpy() == consumer
    return np.unique(
        recvs.column("stream").to_numpy()[mine].astype(np.int64) << 48
        | recvs.column("seq").to_numpy()[mine]
    )


def report_rows(run_dir: str, out: str) -> tuple[list[dict], list[dict]]:
    """A real local Spark report of one run: (summary.csv rows, topics.csv rows)."""
    done = report_here(run_dir, "--out", out)
    assert done.returncode == 0, done.stderr
    with open(os.path.join(out, "summary.csv")) as f:
        summary = list(csv.DictReader(f))
    with open(os.path.join(out, "topics.csv")) as f:
        topics = list(csv.DictReader(f))
    return summary, topics


def check_against_numpy(
    run_dir: str, subscribed: list[set[int]], slots: np.ndarray
) -> dict[int, int]:
    """Each consumer's received set within its topics' accepted sends, run.json's per topic figures
    and its loss equal numpy's; returns each consumer's lost by numpy."""
    record = read_meta(run_dir)
    keys, topic = sent_by_topic(run_dir, slots)
    lost = {}
    for c, topics in enumerate(subscribed):
        want = keys[np.isin(topic, sorted(topics))]
        got = received_keys(run_dir, c)
        assert np.isin(got, want).all(), (
            "a consumer received a message of a topic it did not subscribe to"
        )
        lost[c] = int(len(want) - np.isin(want, got).sum())
        for t, entry in enumerate(record["topics"]):
            mine = entry["consumers"][c]
            assert entry["topic"] == f"t{t}" and entry["sent"] == int((topic == t).sum())
            assert mine["subscribed"] == (t in topics)
            assert mine["expected"] == (int((topic == t).sum()) if t in topics else 0)
            assert mine["received"] == int(np.isin(keys[topic == t], got).sum())
            assert mine["lost"] == mine["expected"] - mine["received"]
        by_consumer = record["streams"][0]["fates_by_consumer"][str(c)]
        unreceived = (
            "dropped_start",
            "dropped_mid",
            "dropped_tail",
            "dropped_reset",
            "stranded",
            "unknown",
        )
        assert sum(by_consumer[f] for f in unreceived) == lost[c]
    assert record["counters"]["expected"] == sum(
        int(np.isin(topic, sorted(s)).sum()) for s in subscribed
    )
    assert record["counters"]["lost"] == sum(lost.values())
    return lost


def queue_peak(run_dir: str, subscribed: list[set[int]], slots: np.ndarray) -> int:
    """The most messages in flight at once over every consumer's queue, by numpy: each received message
    from its send to its receipt; each unreceived message of a consumer's topics after its last arrival
    from its send until the producer closed (a tail drop, unless the run placed those mid-run), or for
    ever when the drain was cut short (stranded). Only the consumer's topics: the others never enter
    its queue. One producer."""
    record = read_meta(run_dir)
    producer = record["producers"][0]
    closed = producer["t_last_send_ns"] + producer["close_ns"] + producer["term_ns"]
    sends, recvs = read_table(run_dir, "sends"), read_table(run_dir, "recvs")
    ok = sends.column("status").to_numpy() == 0
    seq, t_sent = sends.column("seq").to_numpy()[ok], sends.column("t_sent_ns").to_numpy()[ok]
    entered, left = [], []
    for c, topics in enumerate(subscribed):
        mine = recvs.column("consumer").to_numpy() == c
        got = recvs.column("seq").to_numpy()[mine]
        entered.append(recvs.column("t_sent_ns").to_numpy()[mine])
        left.append(recvs.column("t_recv_ns").to_numpy()[mine])
        tail = (
            np.isin(slots[seq % len(slots)], sorted(topics))
            & (seq > got.max(initial=-1))
            & ~np.isin(seq, got)
        )
        if not record["drain"]["completed"]:
            entered.append(t_sent[tail])
        elif record["drain"]["tail_placement"] != "mid-run":
            entered.append(t_sent[tail])
            left.append(np.full(int(tail.sum()), closed))
    times = np.concatenate(entered + left)
    step = np.concatenate(
        [np.ones(sum(map(len, entered)), np.int64), -np.ones(sum(map(len, left)), np.int64)]
    )
    order = np.lexsort((step, times))  # at one instant, departures first
    return int(np.cumsum(step[order]).max())


def check_report(
    run_dir: str, out: str, lost: dict[int, int], subscribed: list[set[int]], slots: np.ndarray
) -> None:
    """The report's loss per consumer and per topic, and the queue's peak, are run.json's and numpy's."""
    summary, topics = report_rows(run_dir, out)
    record = read_meta(run_dir)
    peak = queue_peak(run_dir, subscribed, slots)
    assert record["summary"]["queue_peak"]["messages"] == peak
    for c, n in lost.items():
        row = next(r for r in summary if r["consumer"] == str(c) and r["stream"] == "0")
        assert int(row["lost"]) == n
        expected = sum(e["consumers"][c]["expected"] for e in record["topics"])
        assert int(row["expected"]) == expected
    total = next(r for r in summary if r["consumer"] == "-1" and r["stream"] == "-1")
    assert (
        int(total["lost"]) == record["counters"]["lost"]
        and int(total["expected"]) == record["counters"]["expected"]
    )
    assert int(total["depth_max"]) == peak
    from_run = {
        (e["topic"], str(m["consumer"])): m for e in record["topics"] for m in e["consumers"]
    }
    assert len(topics) == len(from_run)
    for row in topics:
        mine = from_run[(row["topic"], row["consumer"])]
        assert (int(row["expected"]), int(row["received"]), int(row["lost"])) == (
            mine["expected"],
            mine["received"],
            mine["lost"],
        )


def test_two_consumers_of_different_topics_each_get_exactly_theirs(tmp_path, spark):
    """pub-sub, 4 weighted topics, consumer 0 on t0,t1 and consumer 1 on t1,t3 (t2: nobody's);
    large HWMs: each received exactly its topics' messages, nothing lost, the report agrees."""
    result = zmqload.run(
        pattern="pub-sub",
        consumers=2,
        topics=4,
        topic_weights="4,3,2,1",
        subscribe="t0,t1;t1,t3",
        count=20_000,
        rate=40_000,
        sndhwm=0,
        rcvhwm=0,
        out=str(tmp_path / "runs"),
    )
    lost = check_against_numpy(result.run_dir, [{0, 1}, {1, 3}], SLOTS)
    assert lost == {0: 0, 1: 0} and result.lost == 0
    assert result.expected == 20_000 * (7 + 4) // 10
    check_report(result.run_dir, str(tmp_path / "report"), lost, [{0, 1}, {1, 3}], SLOTS)


def test_a_slow_consumer_loses_only_within_its_topics(tmp_path, spark):
    """Small HWMs and a slow consumer: what each consumer lost is numpy's count of its topics'
    accepted messages it never received, in run.json and the report alike."""
    result = zmqload.run(
        pattern="pub-sub",
        consumers=2,
        topics=4,
        subscribe="t0;t1,t2",
        count=30_000,
        rate=60_000,
        sndhwm=20,
        rcvhwm=20,
        rcvbuf=4096,
        consumer_delay_us=100,
        drain="slow",
        out=str(tmp_path / "runs"),
    )
    lost = check_against_numpy(result.run_dir, [{0}, {1, 2}], np.arange(4))
    assert max(lost.values()) > 0
    check_report(result.run_dir, str(tmp_path / "report"), lost, [{0}, {1, 2}], np.arange(4))


def test_a_drain_cut_short_strands_only_subscribed_messages(tmp_path, spark):
    """--drain none with a slow consumer: what each consumer still held is stranded, counted only
    over its topics (an unsubscribed message is not stranded, not lost, not in its queue), in
    run.json and the report alike, as numpy counts it from the records."""
    result = zmqload.run(
        pattern="pub-sub",
        consumers=2,
        topics=4,
        subscribe="t0;t1,t2,t3",
        count=20_000,
        rate=40_000,
        sndhwm=0,
        rcvhwm=0,
        consumer_delay_us=150,
        drain="none",
        out=str(tmp_path / "runs"),
    )
    lost = check_against_numpy(result.run_dir, [{0}, {1, 2, 3}], np.arange(4))
    record = read_meta(result.run_dir)
    assert not record["drain"]["completed"] and record["counters"]["stranded"] > 0
    assert lost[1] > lost[0] > 0  # consumer 1 has three times the work per second of sends
    check_report(result.run_dir, str(tmp_path / "report"), lost, [{0}, {1, 2, 3}], np.arange(4))


def test_a_users_sub_gets_only_its_topic_and_reads_the_header_after_it(tmp_path):
    """A plain pyzmq SUB subscribed to t1 with zmq.SUBSCRIBE, connected to zmqload's PUB (the producers
    alone): only t1's messages, each with zmqload's header right after the 2-byte topic."""
    (port,) = free_ports(1)
    context = zmq.Context()
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"t1")
    sub.setsockopt(zmq.RCVTIMEO, 500)
    sub.connect(f"tcp://127.0.0.1:{port}")
    got: list[bytes] = []
    ran = threading.Event()

    def read() -> None:
        while True:
            try:
                got.append(sub.recv())
            except zmq.Again:  # nothing for 0.5 s: over once the run is
                if ran.is_set():
                    return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        result = zmqload.run(
            pattern="pub-sub",
            role="producer",
            producers_bind=f"tcp://127.0.0.1:{port}",
            topics=4,
            count=8000,
            rate=8000,
            size=64,
            out=str(tmp_path / "runs"),
        )
    finally:
        ran.set()  # also when the run failed: the reader ends within 0.5 s
        reader.join(timeout=30)
        assert not reader.is_alive(), "the reader did not end: its socket is not closed under it"
        sub.close(0)
        context.term()
    assert got and all(m[:2] == b"t1" and len(m) == 64 for m in got)
    words = [struct.unpack_from("<Qq", m, 2) for m in got]
    seqs = np.array(
        [w & ((1 << 40) - 1) for w, _ in words]
    )  # docs/RECORDS.md: seq is the low 40 bits
    assert all((w >> 48) & 0xFF == 0 for w, _ in words) and (seqs % 4 == 1).all()
    now = time.monotonic_ns()
    assert all(0 < t_sent <= now for _, t_sent in words)
    # from the first one it heard, every t1 message the PUB accepted came, in order
    keys, topic = sent_by_topic(result.run_dir, np.arange(4))
    t1 = keys[topic == 1] & ((1 << 48) - 1)
    assert np.array_equal(seqs, t1[t1 >= seqs[0]])


def test_through_a_users_xsub_xpub_proxy_subscriptions_travel_upstream(tmp_path):
    """A plain pyzmq XSUB|XPUB proxy (zmq.proxy) between zmqload's PUB and its two SUBs: their
    subscriptions reach the PUB through it, and each gets exactly its topics' messages."""
    context = zmq.Context()
    xsub, xpub = context.socket(zmq.XSUB), context.socket(zmq.XPUB)
    xsub.setsockopt(zmq.RCVHWM, 0)
    xpub.setsockopt(zmq.SNDHWM, 0)
    front, back = free_ports(2)
    xsub.bind(f"tcp://127.0.0.1:{front}")
    xpub.bind(f"tcp://127.0.0.1:{back}")

    def serve() -> None:
        try:
            zmq.proxy(xsub, xpub)
        except zmq.ContextTerminated:
            pass
        finally:
            xsub.close(0)
            xpub.close(0)

    proxy = threading.Thread(target=serve, daemon=True)
    proxy.start()
    try:
        result = zmqload.run(
            pattern="pub-sub",
            consumers=2,
            topics=4,
            subscribe="t0;t2,t3",
            count=10_000,
            rate=20_000,
            producers_connect=f"tcp://127.0.0.1:{front}",
            consumers_connect=f"tcp://127.0.0.1:{back}",
            sndhwm=0,
            rcvhwm=0,
            out=str(tmp_path / "runs"),
        )
    finally:
        context.term()
        proxy.join(timeout=10)
    assert read_meta(result.run_dir)["topology"]["device_in_path"]
    lost = check_against_numpy(result.run_dir, [{0}, {2, 3}], np.arange(4))
    assert lost == {0: 0, 1: 0}
    assert result.unique_received == 2500 + 5000


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--pattern", "push-pull", "--topics", "4"], "--topics"),
        (["--pattern", "req-rep", "--topics", "2"], "--topics"),
        (["--pattern", "pub-sub", "--subscribe", "t0"], "--subscribe"),
        (["--pattern", "pub-sub", "--topic-weights", "1,2"], "--topic-weights"),
        (["--pattern", "pub-sub", "--topics", "4", "--subscribe", "t7"], "--subscribe"),
        (["--pattern", "pub-sub", "--topics", "4", "--subscribe", "x"], "--subscribe"),
        (
            [
                "--pattern",
                "pub-sub",
                "--topics",
                "4",
                "--consumers",
                "2",
                "--subscribe",
                "t0;t1;t2",
            ],
            "--subscribe",
        ),
        (["--pattern", "pub-sub", "--topics", "1001"], "--topics"),
        (["--pattern", "pub-sub", "--topics", "-1"], "--topics"),
        (["--pattern", "pub-sub", "--topics", "3", "--topic-weights", "1,2"], "--topic-weights"),
        (["--pattern", "pub-sub", "--topics", "3", "--topic-weights", "1,0,2"], "--topic-weights"),
        (
            ["--pattern", "pub-sub", "--topics", "11", "--topic-weights", ",".join(["1000"] * 11)],
            "--topic-weights",
        ),
        (["--pattern", "pub-sub", "--topics", "100", "--size", "18"], "--size"),
    ],
)
def test_bad_topic_input_is_one_line_exit_2_nothing_left(tmp_path, args, flag):
    out = tmp_path / "runs"
    done = zmqload_cli("run", *args, "--count", "10", "--out", str(out))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and flag in lines[0]
        and "accepted" in lines[0]
        and "Traceback" not in done.stderr
    )
    assert not out.exists() or not os.listdir(out)


def test_topic_width_is_bounded_in_the_engine():
    """The receive buffer holds at most a 48-byte topic before the header: wider is refused."""
    from zmqload import _engine

    context = _engine.Context()
    sock = _engine.Socket(context, _engine.SOCKET_TYPES["SUB"])
    try:
        with pytest.raises(ValueError, match="topic"):
            _engine.Receiver(sock, topic_width=_engine.MAX_TOPIC_WIDTH + 1)
    finally:
        sock.close(0)
        context.term()


def test_through_zmqloads_own_proxy(tmp_path):
    """Pattern proxy (PUB -> XSUB | zmq_proxy | XPUB -> SUB): each consumer's subscriptions cross the
    proxy, and it gets exactly its topics' messages."""
    result = zmqload.run(
        pattern="proxy",
        consumers=2,
        topics=3,
        subscribe="t0;t1,t2",
        count=6000,
        rate=20_000,
        sndhwm=0,
        rcvhwm=0,
        proxy_sndhwm=0,
        proxy_rcvhwm=0,
        out=str(tmp_path / "runs"),
    )
    assert check_against_numpy(result.run_dir, [{0}, {1, 2}], np.arange(3)) == {0: 0, 1: 0}
    assert result.unique_received == 6000


def test_a_sweep_file_takes_topics_and_subscriptions(tmp_path):
    """The option table carries the topics into a sweep file's points (an axis of --topics, the
    subscriptions as one value each: on the command line a comma makes an axis)."""
    from zmqload.plan import sweep as sweeps

    path = tmp_path / "sweep.toml"
    path.write_text(
        f'[sweep]\npattern = "pub-sub"\nconsumers = 2\ncount = 100\nout = "{tmp_path / "runs"}"\n'
        '[axes]\ntopics = [2, 4]\n[[points]]\ntopics = 4\nsubscribe = "t0,t1;t3"\n'
        'topic_weights = "1,1,1,5"\n'
    )
    sweep = sweeps.plan(sweeps.load_toml(str(path)))
    workloads = [p.workload for p in sweep.points]
    assert [w.topics for w in workloads] == [2, 4, 4]
    last = workloads[-1].topic_set
    assert last is not None and last.subscribed == ((0, 1), (3,)) and len(last.pattern) == 8
    assert not (tmp_path / "runs").exists()
