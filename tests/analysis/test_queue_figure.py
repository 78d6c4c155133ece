"""One queue figure (issue 26, item 2): the queue's depth and peak, as zmqload/measure/queue_replay.py defines
them, are the same number in `run`'s --json, run.json, the summary table the pytest plugin shows, and
every table of the report, and equal what numpy computes straight from the Parquet records (no zmqload
code in the check): sent minus received minus dropped over time, where a drop before the first
arrival or mid-run leaves at its send time and one after the last arrival when its producer closed.

Three real runs (real libzmq over loopback tcp, a real local Spark): a paced slow consumer with a
backlog, a PUB dropping at its HWM, an unpaced run; and a PUB that loses nearly everything, in the
pytest plugin's failure report.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow.parquet as pq
import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

pytestmark = pytest.mark.slow
pytest_plugins = ["pytester"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN_NS = 1_000_000

RUNS = {
    "backlog": [
        "--pattern",
        "push-pull",
        "--transport",
        "tcp",
        "--rate",
        "20k",
        "--consumer-delay-us",
        "80",
        "--duration",
        "1",
    ],
    "pub-drops": [
        "--pattern",
        "pub-sub",
        "--sndhwm",
        "100",
        "--rcvhwm",
        "100",
        "--consumer-delay-us",
        "50",
        "--rate",
        "40k",
        "--duration",
        "1",
    ],
    "unpaced": ["--pattern", "push-pull", "--count", "500000"],
}


# -- numpy over the records: the ground truth ------------------------------------------------------
def _columns(run_dir: str, kind: str, names: list[str]) -> dict[str, np.ndarray]:
    files = sorted(glob.glob(os.path.join(run_dir, kind, "*.parquet")))
    table = pq.ParquetDataset(files).read(columns=names)
    return {n: table.column(n).to_numpy() for n in names}


def truth(run_dir: str) -> dict:
    """The queue from the send and receive records and run.json: every ok send enters its
    consumer's queue at its send time (each consumer of a fan-out its own copy); it leaves at its
    first arrival there, or, never arriving, at its send time (dropped at the start or mid-run: it
    never queued) or at its producer's close (sent after that consumer's last arrival: a tail drop).
    Returns the exact peak, its time, and the depth at the end of every millisecond."""
    meta = json.load(open(os.path.join(run_dir, "run.json")))
    assert meta["drain"]["completed"], "the check assumes a completed drain (nothing stranded)"
    s = _columns(run_dir, "sends", ["stream", "seq", "t_sent_ns", "status"])
    r = _columns(run_dir, "recvs", ["consumer", "stream", "seq", "t_recv_ns"])
    fanout = meta["schedule"]["fanout"]
    views = list(range(meta["workload"]["consumers"])) if fanout else [None]
    closed = {
        p["worker"]: p["t_last_send_ns"] + p["close_ns"] + p["term_ns"] for p in meta["producers"]
    }
    mid_run = meta["drain"]["tail_placement"] == "mid-run"
    entered, left = [], []
    sent = received = dropped_at_send = dropped_at_close = duplicates = 0
    for view in views:
        mine = np.ones(len(r["seq"]), bool) if view is None else r["consumer"] == view
        for stream in np.unique(s["stream"]):
            ok = (s["stream"] == stream) & (s["status"] == 0)
            seq, t_sent = s["seq"][ok], s["t_sent_ns"][ok]
            here = mine & (r["stream"] == stream)
            order = np.lexsort((r["t_recv_ns"][here], r["seq"][here]))
            got, first = np.unique(r["seq"][here][order], return_index=True)
            duplicates += int(here.sum()) - len(got)
            t_recv = r["t_recv_ns"][here][order][first]  # first arrival of each seq
            arrived = np.isin(seq, got)
            at = np.searchsorted(seq, got)  # sends are in seq order
            assert (seq[at] == got).all()
            entered += [t_sent]
            left += [t_recv, t_sent[~arrived & (seq <= (got.max() if len(got) else -1))]]
            tail = ~arrived & (seq > (got.max() if len(got) else -1))
            if mid_run or not len(got):
                left.append(t_sent[tail])
                dropped_at_send += int(tail.sum())
            else:
                left.append(np.full(int(tail.sum()), closed[int(stream)], np.int64))
                dropped_at_close += int(tail.sum())
            sent += int(ok.sum())
            received += len(got)
            dropped_at_send += int((~arrived & (seq <= (got.max() if len(got) else -1))).sum())
    e, x = np.concatenate(entered), np.concatenate(left)
    times = np.concatenate([e, x])
    signs = np.concatenate([np.ones(len(e), np.int64), -np.ones(len(x), np.int64)])
    order = np.lexsort((signs, times))  # at one instant, departures first
    running = np.cumsum(signs[order])
    i = int(np.argmax(running))
    b0, b1 = int(times.min() // BIN_NS), int(times.max() // BIN_NS)
    ends = np.cumsum(np.bincount(e // BIN_NS - b0, minlength=b1 - b0 + 1)) - np.cumsum(
        np.bincount(x // BIN_NS - b0, minlength=b1 - b0 + 1)
    )
    return {
        "peak": int(running[i]),
        "t_ns": int(times[order][i]),
        "t0_ns": meta["schedule"]["t0_ns"],
        "ends": ends,
        "sent": sent,
        "received": received,
        "dropped_at_send": dropped_at_send,
        "dropped_at_close": dropped_at_close,
        "duplicates": duplicates,
        "meta": meta,
    }


def _cli(*args, timeout=300):
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run(
        [sys.executable, "-m", "zmqload", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    return p.stdout


def _report(paths: list[str], out: str, *extra: str) -> None:
    """The real report command, in this process (it reuses the test session's local Spark)."""
    from zmqload.cli import report as command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    assert command.run(parser.parse_args([*paths, "--out", out, "--no-server", *extra])) == 0


@pytest.fixture(scope="module")
def measured(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("queue")
    runs, out = str(root / "runs"), str(root / "report")
    printed = {
        name: json.loads(_cli("run", *args, "--out", runs, "--run-name", name, "--json"))
        for name, args in RUNS.items()
    }
    _report([runs], out)
    rows = {
        r["run"]: r
        for r in pq.read_table(os.path.join(out, "summary.parquet")).to_pylist()
        if r["consumer"] == -1 and r["stream"] == -1
    }
    page = open(os.path.join(out, "index.html")).read()
    return {
        "printed": printed,
        "truth": {n: truth(os.path.join(runs, f"run={n}")) for n in RUNS},
        "rows": rows,
        "page": page,
        "runs": runs,
    }


def test_the_three_runs_are_what_they_should_be(measured):
    t = measured["truth"]
    for name, x in t.items():
        assert x["duplicates"] == 0, name
    # a paced consumer at 80 us per message (12.5k/s) offered 20k/s: a backlog of thousands, all drained
    assert (
        t["backlog"]["peak"] > 2000
        and t["backlog"]["dropped_at_send"] + t["backlog"]["dropped_at_close"] == 0
    )
    # the PUB at HWM 100 dropped (at send, mid-run) while its queue was full
    assert t["pub-drops"]["dropped_at_send"] > 0 and t["pub-drops"]["peak"] >= 100
    assert t["unpaced"]["peak"] > 100
    print(
        {
            n: (
                x["peak"],
                round((x["t_ns"] - x["t0_ns"]) / 1e9, 4),
                x["dropped_at_send"],
                x["dropped_at_close"],
            )
            for n, x in t.items()
        }
    )


@pytest.mark.parametrize("name", list(RUNS))
def test_run_json_and_json_say_the_numpy_peak(measured, name):
    x, printed = measured["truth"][name], measured["printed"][name]
    peak = printed["queue_peak"]
    recorded = x["meta"]["summary"]["queue_peak"]
    assert peak["messages"] == recorded["messages"] == x["peak"], (peak, x["peak"])
    assert peak["kernel_messages"] + peak["libzmq_messages"] == peak["messages"]
    assert peak["at_s"] == pytest.approx((x["t_ns"] - x["t0_ns"]) / 1e9, abs=0.0006)


@pytest.mark.parametrize("name", list(RUNS))
def test_the_report_says_the_numpy_peak_and_depth(measured, name):
    x, row = measured["truth"][name], measured["rows"][name]
    assert row["depth_max"] == x["peak"]
    assert row["depth_peak_at_s"] == pytest.approx((x["t_ns"] - x["t0_ns"]) / 1e9, abs=1e-9)
    # mean and p99 of the depth at the end of every millisecond, from the first event to the last
    assert row["depth_mean"] == pytest.approx(x["ends"].mean(), rel=1e-9)
    assert row["depth_p99"] == pytest.approx(np.percentile(x["ends"], 99), rel=1e-9)
    assert row["queued_bytes_max"] == pytest.approx(x["peak"] * row["mean_size"])


@pytest.mark.parametrize("name", list(RUNS))
def test_every_table_of_the_page_shows_that_peak(measured, name):
    peak, page = measured["truth"][name]["peak"], measured["page"]
    runs_table = page.split("<h2>Runs</h2>", 1)[1].split("</table>", 1)[0]
    (line,) = [ln for ln in runs_table.split("<tr>") if f"href='#{name}'" in ln]
    assert f"<td>{peak:,} (" in line  # queue peak, msgs (memory)
    own = page.split(f"<h3 id='{name}'>", 1)[1].split("<h3", 1)[0]
    fates, latency = own.split("</table>")[:2]
    totals = [c for c in fates.split("<tr>") if c.startswith("<td>all</td><td>all</td>")][0]
    assert (
        totals.endswith(f"<td>{peak:,}</td></tr>\n") or f"<td>{peak:,}</td></tr>" in totals
    )  # queue peak column
    assert f"<td rowspan=5>{peak:,} / " in latency  # queue peak / mean / p99


def test_the_plugin_shows_a_dropping_pubs_peak(pytester, monkeypatch):
    """A PUB at HWM 100 flooding a subscriber doing 20 us a message loses ~99% of 30,000 messages;
    its queue still filled before it dropped: the failure report says the numpy peak, not 0."""
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    for name in list(os.environ):
        if name.startswith("PYTEST_XDIST_"):
            monkeypatch.delenv(name)
    pytester.makepyfile(
        test_inner=textwrap.dedent("""
        def test_slow_subscriber(zmqload):
            result = zmqload.run(pattern="pub-sub", size=1024, count=30_000, sndhwm=100, rcvhwm=100,
                                 consumer_delay_us=20)
            assert result.lost == 0
    """)
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    shown = re.search(r"queue peak \(kernel / libzmq\)\s*\S\s*([\d,]+) at ([\d.]+) s", output)
    run_dir = re.search(r"^records: (\S+)$", output, re.M).group(1)
    x = truth(run_dir)
    assert (
        x["dropped_at_send"] + x["dropped_at_close"] > 0.9 * 30_000
    )  # the premise: it lost nearly all
    assert shown and int(shown.group(1).replace(",", "")) == x["peak"] > 0, (
        shown and shown.group(0),
        x["peak"],
    )
    assert float(shown.group(2)) == pytest.approx((x["t_ns"] - x["t0_ns"]) / 1e9, abs=0.006)


def test_replayed_in_small_pieces_the_report_says_the_same_numpy_peak(
    measured, tmp_path, monkeypatch
):
    """A long run's exact peak is replayed a piece of at most finish.REPLAY_EVENTS events at a time
    (and its never-arrived messages, when many, binned in Spark): with a budget of 1 event every
    candidate bin is a piece of its own (how many events and candidate bins a run has varies with
    the load: pieces of 50 events once gave two pieces for the three runs), and every peak and
    instant are still numpy's."""
    from zmqload.analysis import finish

    pieces: list[list] = []
    whole = finish.replay_pieces
    monkeypatch.setattr(finish, "REPLAY_EVENTS", 1)
    monkeypatch.setattr(
        finish, "replay_pieces", lambda bins: pieces.append(whole(bins)) or pieces[-1]
    )
    out = str(tmp_path / "report")
    _report([measured["runs"]], out)
    assert pieces and len(pieces[-1]) > 1, pieces  # replayed in pieces, not at once
    rows = {
        r["run"]: r
        for r in pq.read_table(os.path.join(out, "summary.parquet")).to_pylist()
        if r["consumer"] == -1 and r["stream"] == -1
    }
    for name, x in measured["truth"].items():
        assert rows[name]["depth_max"] == x["peak"], name
        assert rows[name]["depth_peak_at_s"] == pytest.approx(
            (x["t_ns"] - x["t0_ns"]) / 1e9, abs=1e-9
        ), name
