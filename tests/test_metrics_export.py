"""--metrics (runner/metrics_export.py): the run's live figures served for Prometheus. In process: the
option's refusals (a bad HOST:PORT, a bind beyond loopback without --insecure, a port taken), the
latency buckets against numpy, and one short run scraped as it goes and after it, its series against
run.json and numpy over its Parquet. With a real Prometheus server (Debian's `prometheus`, 1 s
scrapes of a 20 s run): the counters' last values equal run.json's, the queue and memory series
follow the run's own samples."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict

import numpy as np
import pytest

import zmqload
from zmqload.contract.fates import FATES
from zmqload.contract.workload import Workload
from zmqload.errors import ConfigError
from zmqload.measure.histogram import Histogram
from zmqload.contract import control
from zmqload.contract.ids import WorkerId
from zmqload.runner.metrics_export import (
    BUCKET_BOUNDS_NS,
    MetricsExporter,
    RunMetrics,
    bucket_counts,
)
from zmqload.runner.state import ProgressSnapshot, RunState
from zmqload.runner.preflight import preflight
from conftest import (
    by,
    end_with_the_test,
    free_ports,
    in_process,
    read_meta,
    read_table,
    scrape,
)


# -- the option's refusals, in process -------------------------------------------------------------
@pytest.mark.parametrize(
    "bad, says",
    [
        ("127.0.0.1", "HOST:PORT"),
        ("127.0.0.1:0", "HOST:PORT"),
        ("127.0.0.1:65536", "HOST:PORT"),
        (":9100", "HOST:PORT"),
        ("h:p", "HOST:PORT"),
        ("0.0.0.0:9464", "--insecure"),
    ],
)
def test_a_bad_address_is_one_line_exit_2(capsys, tmp_path, bad, says):
    done = in_process(capsys, "run", "--metrics", bad, "--out", str(tmp_path))
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "\n" not in line and "--metrics" in line and says in line, line
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("address", ["0.0.0.0:9464", "[::]:9464", "*:9464", "10.1.2.3:9464"])
def test_beyond_loopback_is_refused_without_insecure(address):
    if address.startswith("*"):  # not a host name: the form refuses it first
        with pytest.raises(ConfigError, match="--metrics"):
            Workload(metrics=address)
        return
    with pytest.raises(
        ConfigError, match=r"--metrics: got .*accepted: a loopback address.*--insecure"
    ):
        preflight(Workload(metrics=address).validate())
    preflight(Workload(metrics=address, insecure=True).validate())  # allowed; nothing bound yet


@pytest.mark.parametrize("address", ["127.0.0.1:9464", "localhost:9464", "[::1]:9464"])
def test_loopback_needs_nothing(address):
    preflight(Workload(metrics=address).validate())


def test_a_port_taken_is_one_line(busy_port):
    with pytest.raises(ConfigError) as refused:
        MetricsExporter(Workload(metrics=f"127.0.0.1:{busy_port}"))
    assert str(refused.value).startswith(f"--metrics: got '127.0.0.1:{busy_port}': cannot listen")
    assert "\n" not in str(refused.value)


def test_latency_buckets_are_exact_against_numpy():
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [rng.integers(1, 1 << 40, 20_000), (1 << np.arange(8, 40)), (1 << np.arange(8, 40)) - 1]
    )
    hist = Histogram()
    hist.record(values)
    pairs = bucket_counts(hist)
    assert [le for le, _ in pairs[:-1]] == [repr(b / 1e9) for b in BUCKET_BOUNDS_NS]
    for (le, count), bound in zip(pairs, BUCKET_BOUNDS_NS):
        assert count == np.count_nonzero(values <= bound), le
    assert pairs[-1] == ("+Inf", len(values))


def test_the_live_queue_is_split_as_the_runs_own():
    """kernel = the tcp bytes on the message path (producers' send queues, consumers' receive
    queues) in whole 66-byte frames of 64 B messages, at most the depth; libzmq the rest."""
    metrics = RunMetrics(Workload(size=64, producers=2))
    workers = {
        "p0": control.Progress(600, tcp_sendq_bytes=660, tcp_recvq_bytes=10_000),
        "p1": control.Progress(400, tcp_sendq_bytes=100, tcp_recvq_bytes=-1),
        "c0": control.Progress(900, tcp_sendq_bytes=10_000, tcp_recvq_bytes=200),
    }
    snap = ProgressSnapshot("push-pull", "tcp", "running", 1.0, 1000, 0, 900, 2, 0, workers=workers)
    assert metrics.queue(snap) == ((660 + 100 + 200) // 66, 100 - (660 + 100 + 200) // 66)
    full = dict(workers, c0=control.Progress(990, tcp_recvq_bytes=66_000))
    assert metrics.queue(dataclasses.replace(snap, received=990, workers=full)) == (10, 0)


def test_a_consumers_latency_is_kept_between_the_progress_that_carries_it():
    state = RunState([WorkerId.parse("p0")], [WorkerId.parse("c0")])
    c0 = WorkerId.parse("c0")
    payload = {"index": [3], "count": [5], "min": 3, "max": 3, "total": 15}
    state.receive(c0, control.Progress(5, latency_intended=payload, latency_sent=payload))
    state.receive(c0, control.Progress(9))  # the next ones, within the second, carry none
    assert state.live[c0].messages == 9 and state.live[c0].latency_sent == payload


# -- one short run, scraped as it goes and during its linger ----------------------------------------
def test_a_run_served_live_then_its_totals(tmp_path):
    (port,) = free_ports(1)
    w = Workload(
        rate=4000,
        duration=1.5,
        producers=2,
        out=str(tmp_path),
        metrics=f"127.0.0.1:{port}",
        metrics_linger=2.0,
    )
    got: dict = {}
    runner = threading.Thread(target=lambda: got.update(result=zmqload.run(w)), name="metrics-run")
    runner.start()
    end_with_the_test(runner)
    live, final = None, None
    deadline = time.monotonic() + 90
    while runner.is_alive() and time.monotonic() < deadline:
        try:
            now = scrape(port)
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.05)  # not listening yet, or closed
            continue
        phases = by(now.get("zmqload_run_info", {}), "phase")
        if "running" in phases and sum(by(now["zmqload_sent_messages_total"], "worker").values()):
            live = now  # the last scrape while it sent
        if "complete" in phases:
            final = now
            break
        time.sleep(0.1)
    assert live is not None and final is not None
    t_final = time.monotonic()
    runner.join(30)
    assert time.monotonic() - t_final >= 1.5  # the linger: run() returned after it
    result = got["result"]
    with pytest.raises(urllib.error.URLError):  # closed once the linger is over
        scrape(port)

    run_dir = result.run_dir
    meta = read_meta(run_dir)
    run = meta["run_id"]
    # every series carries the run's id; the live ones the roles and workers
    assert {dict(k)["run"] for k in live["zmqload_sent_messages_total"]} == {run}
    assert set(by(live["zmqload_rss_bytes"], "worker")) == {"p0", "p1", "c0", "controller"}
    assert by(live["zmqload_offered_rate_messages_per_second"], "run") == {run: 8000}

    # the totals against run.json, and against numpy over the Parquet records
    sends, recvs = read_table(run_dir, "sends"), read_table(run_dir, "recvs")
    stream = sends.column("stream").to_numpy()
    status = sends.column("status").to_numpy()
    consumer = recvs.column("consumer").to_numpy()
    sent = by(final["zmqload_sent_messages_total"], "worker")
    for p in meta["producers"]:
        name = f"p{p['worker']}"
        assert sent[name] == p["sent"] == np.count_nonzero((stream == p["worker"]) & (status == 0))
        for figure in ("attempted", "eagain", "timeout"):
            assert by(final[f"zmqload_{figure}_messages_total"], "worker")[name] == p[figure]
        assert by(final["zmqload_blocked_sends_total"], "worker")[name] == p["blocked_sends"]
    received = by(final["zmqload_received_messages_total"], "worker")
    for c in meta["consumers"]:
        name = f"c{c['worker']}"
        assert received[name] == c["received"] == np.count_nonzero(consumer == c["worker"])
    counters = meta["counters"]
    fates = final["zmqload_fate_messages_total"]
    for fate in FATES:
        per_stream = {dict(k)["stream"]: v for k, v in fates.items() if dict(k)["fate"] == fate}
        assert sum(per_stream.values()) == counters[fate], fate
        assert per_stream == {str(s["stream"]): s[fate] for s in meta["streams"]}, fate
    assert sum(final["zmqload_sent_bytes_total"].values()) == counters["bytes_sent"]
    assert sum(final["zmqload_received_bytes_total"].values()) == counters["bytes_received"]
    # the latency histogram: its count and buckets against the records' own latencies
    t_recv = recvs.column("t_recv_ns").to_numpy()
    for since in ("intended", "sent"):
        latency = t_recv - recvs.column(f"t_{since}_ns").to_numpy()
        buckets = {
            dict(k)["le"]: v
            for k, v in final["zmqload_latency_seconds_bucket"].items()
            if dict(k)["since"] == since
        }
        assert buckets["+Inf"] == len(latency) == counters["received"]
        for bound in BUCKET_BOUNDS_NS:
            assert buckets[repr(bound / 1e9)] == np.count_nonzero(latency <= bound), bound
        total = by(final["zmqload_latency_seconds_sum"], "since")[since]
        assert total == pytest.approx(latency.sum() / 1e9, rel=1e-12)
    assert len(by(live["zmqload_latency_seconds_count"], "since")) == 2  # served while it ran
    peak = by(final["zmqload_queue_peak_messages"], "place")
    assert peak["all"] == meta["summary"]["queue_peak"]["messages"]


# -- a real Prometheus server ------------------------------------------------------------------------
PROMETHEUS = shutil.which("prometheus")


def _query(base: str, path: str, **params) -> list:
    url = f"{base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as reply:
        answer = json.load(reply)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def _ready(base: str, proc: subprocess.Popen, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        try:
            with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.1)
    pytest.fail("prometheus did not become ready")


SCRAPE_TIMEOUT_NS = 900_000_000  # the config's scrape_timeout
PAIR_NS = 300_000_000  # a worker's progress: every 100 ms, read by the controller every 20 ms


@pytest.mark.slow
@pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus (make prereqs)")
def test_prometheus_scrapes_a_run(tmp_path):
    metrics_port, web_port = free_ports(2)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
        "scrape_configs:\n  - job_name: zmqload\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{metrics_port}']\n"
    )
    base = f"http://127.0.0.1:{web_port}"
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{web_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    end_with_the_test(proc)
    _ready(base, proc)
    # a queue that grows: the consumer's work (250 us a message) below the offered 4,500 msg/s
    linger = 3.0
    result = zmqload.run(
        rate=4500,
        duration=20,
        consumer_delay_us=250,
        sndhwm=0,
        rcvhwm=0,
        pacing="sleep",
        out=str(tmp_path / "runs"),
        metrics=f"127.0.0.1:{metrics_port}",
        metrics_linger=linger,
    )
    meta = read_meta(result.run_dir)
    run, counters = meta["run_id"], meta["counters"]

    def last(name: str, label: str = "", **match: str) -> dict[str, float]:
        """The series' last values in Prometheus, by `label`."""
        selector = ",".join(f'{k}="{v}"' for k, v in {"run": run, **match}.items())
        rows = _query(base, "query", query=f"last_over_time({name}{{{selector}}}[1m])")
        return {r["metric"].get(label, ""): float(r["value"][1]) for r in rows}

    # the counters' last values: run.json's exactly
    assert last("zmqload_sent_messages_total", "worker") == {"p0": counters["sent"]}
    assert last("zmqload_attempted_messages_total", "worker") == {"p0": counters["attempted"]}
    assert last("zmqload_eagain_messages_total", "worker") == {"p0": counters["eagain"]}
    assert last("zmqload_timeout_messages_total", "worker") == {"p0": counters["timeout"]}
    assert last("zmqload_received_messages_total", "worker") == {"c0": counters["received"]}
    assert last("zmqload_fate_messages_total", "fate") == {f: counters[f] for f in FATES}
    assert last("zmqload_lost_messages_total") == {"": counters["lost"]}
    assert last("zmqload_expected_messages_total") == {"": counters["expected"]}
    assert last("zmqload_sent_bytes_total") == {"": counters["bytes_sent"]}
    assert last("zmqload_received_bytes_total") == {"": counters["bytes_received"]}
    for since in ("intended", "sent"):
        count = last("zmqload_latency_seconds_count", since=since)
        assert count == {"": counters["received"]}, since

    # the queue and memory series against the run's own samples (CLOCK_MONOTONIC, put on the
    # wall clock Prometheus stamps with by run.json's clock pair)
    clock = meta["clock"]
    samples = read_table(result.run_dir, "samples")
    cols = {c: samples.column(c).to_numpy(zero_copy_only=False) for c in samples.column_names}

    def series(role: str, column: str) -> tuple[np.ndarray, np.ndarray]:
        mask = (cols["role"] == role) & (cols["worker"] == 0)
        order = np.argsort(cols["t_ns"][mask], kind="stable")
        return cols["t_ns"][mask][order], cols[column][mask][order]

    def to_wall(t_ns: int) -> float:
        return (t_ns - clock["monotonic_ns"] + clock["realtime_ns"]) / 1e9

    def to_mono(wall: float) -> int:
        return int(wall * 1e9) - clock["realtime_ns"] + clock["monotonic_ns"]

    def over_the_run(query: str) -> np.ndarray:
        rows = _query(
            base,
            "query_range",
            query=query,
            start=to_wall(int(cols["t_ns"].min())) + 1,
            end=to_wall(int(cols["t_ns"].max())) - 0.5,
            step="1s",
        )
        assert len(rows) == 1, rows
        return np.array(rows[0]["values"], dtype=float)

    # each scrape's queue, as Prometheus stored it (raw, stamped with its scrape's start): sent -
    # received of the producer's and the consumer's last progress, values of their samples (the
    # same counters at one instant), sent at most PAIR_NS apart, from at most a second before the
    # scrape began to its timeout (the server answers when it gets the GIL)
    rows = _query(base, "query", query=f'zmqload_queue_messages{{run="{run}"}}[5m]')
    scraped: dict[float, float] = defaultdict(float)
    for row in rows:  # kernel + libzmq, by scrape
        for wall, value in row["values"]:
            scraped[float(wall)] += float(value)
    sent_t, sent = series("producer", "messages")
    recv_t, received = series("consumer", "messages")
    checked = 0
    for wall, value in sorted(scraped.items()):
        late = to_mono(wall)
        if not sent_t[0] + 1e9 < late < recv_t[-1]:  # not before the start, nor once it ended
            continue
        a = (sent_t >= late - 1e9) & (sent_t <= late + SCRAPE_TIMEOUT_NS)
        b = (recv_t >= late - 1e9) & (recv_t <= late + SCRAPE_TIMEOUT_NS)
        near = np.abs(sent_t[a][:, None] - recv_t[b][None, :]) <= PAIR_NS
        possible = (sent[a][:, None] - received[b][None, :])[near]
        assert value in set(possible.tolist()), (wall, value, possible.min(), possible.max())
        checked += 1
    assert checked >= 15, sorted(scraped.items())
    assert max(scraped.values()) > 1000, scraped  # it grew: not a check of an empty queue
    window_ns = 1_500_000_000  # query_range's point at T: a scrape of the second before T
    rss_t, rss_kb = series("consumer", "rss_kb")
    rss = over_the_run(f'zmqload_rss_bytes{{run="{run}",worker="c0"}}')
    for wall, value in rss:
        late = to_mono(wall)
        near = rss_kb[(rss_t >= late - window_ns) & (rss_t <= late + SCRAPE_TIMEOUT_NS)]
        # sampled ~10/s at other instants than the progress: within 1 MiB of the window's
        assert near.size and near.min() - 1024 <= value / 1024 <= near.max() + 1024, (wall, value)
