"""Where a PUB's missing messages are placed follows the close order the run used (issue 11):
after-drain (the consumer drained to idle before the PUB closed) makes them mid-run drops for
certain; a PUB closed right after its last send leaves them `dropped_tail`, flagged ambiguous.
Real runs (U-2's setup: HWM 1, a subscriber 10x slower, tcp and ipc) through the command
line; the figures checked with numpy straight over the Parquet files, against the Spark
report, and against plain pyzmq doing the same close orders (tests/oracle/close_order.py)."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.oracle.close_order import close_order_run
from zmqload.analysis import analyze, discover_runs
from zmqload.contract.fates import (
    AMBIGUOUS_TAIL,
    FATES,
    TAIL_AMBIGUOUS,
    TAIL_AT_CLOSE,
    TAIL_MID_RUN,
)

ORDERS = ("producer-first", "after-drain")
U2 = dict(
    pattern="pub-sub",
    size=64,
    rate=200,
    count=60,
    sndhwm=1,
    rcvhwm=1,
    consumer_delay_us=50_000,
    drain_timeout_ms=300,
)


def _cli(*args) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")  # the summary table on one line per figure
    return subprocess.run(
        [sys.executable, "-m", "zmqload", "run", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


def _options(**options) -> list[str]:
    return [x for k, v in options.items() for x in (f"--{k.replace('_', '-')}", str(v))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> (the --json summary, run.json) of each run."""
    out = str(tmp_path_factory.mktemp("tail"))
    plan = {
        f"{t}-{o}": dict(U2, transport=t, close_order=o) for t in ("ipc", "tcp") for o in ORDERS
    }
    # a socket that blocks at HWM: what is missing after the last arrival was lost at close
    plan["pair-linger-0"] = dict(pattern="pair", transport="ipc", size=32, count=10_000, linger=0)
    found = {}
    for name, options in plan.items():
        done = _cli(*_options(**options), "--out", out, "--run-name", name, "--json")
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        with open(os.path.join(summary["run_dir"], "run.json")) as f:
            found[name] = (summary, json.load(f))
    return out, found


def _identity(figures: dict) -> None:
    assert figures["expected"] == sum(figures[f] for f in FATES), figures
    assert figures["lost"] == figures["dropped"] + figures["stranded"] + figures["unknown"], figures


def test_the_run_says_which_rule_it_used_and_why(runs):
    _, found = runs
    for name, (summary, meta) in found.items():
        drain = meta["drain"]
        assert summary["drain"] == drain, name  # --json says what run.json says
        _identity(summary)
        _identity(meta["counters"])
        assert summary["streams"] == meta["streams"], name
        for stream in meta["streams"]:
            assert stream["expected"] == sum(stream[f] for f in FATES), (name, stream)
        assert drain["tail_placement_why"], name
        if name == "pair-linger-0":
            assert (
                drain["tail_placement"] == TAIL_AT_CLOSE
                and "PAIR blocks at HWM" in drain["tail_placement_why"]
            )
            assert drain[AMBIGUOUS_TAIL] == 0
        elif name.endswith("after-drain"):
            assert (
                drain["ended"] in ("idle", "complete") and drain["tail_placement"] == TAIL_MID_RUN
            ), drain
            assert summary["dropped_tail"] == drain[AMBIGUOUS_TAIL] == 0, name
            assert "after-drain" in drain["tail_placement_why"]
        else:
            assert drain["tail_placement"] == TAIL_AMBIGUOUS, drain
            assert (
                drain[AMBIGUOUS_TAIL]
                == summary["dropped_tail"]
                == sum(s[AMBIGUOUS_TAIL] for s in summary["streams"])
            )
            assert "producer-first" in drain["tail_placement_why"]
    # ipc's close loses what the kernel still held: the ambiguous tail is most of what was in flight
    ipc, ipc_meta = found["ipc-producer-first"]
    assert ipc["dropped_tail"] > _in_flight_at_close(ipc, ipc_meta) / 2, ipc
    assert found["pair-linger-0"][0]["dropped_mid"] == 0


def _parts(run_dir: str, kind: str) -> dict:
    files = sorted(glob.glob(os.path.join(run_dir, kind, "*.parquet")))
    return {k: np.asarray(v) for k, v in pq.ParquetDataset(files).read().to_pydict().items()}


def _in_flight_at_close(summary: dict, meta: dict) -> int:
    """Messages sent and not yet received when the producer began to close (right after its
    last send: close order producer-first, no pause), from the records. How many that is
    varies with how far the consumer got before the close (54 of 60 on a quiet run)."""
    (producer,) = meta["producers"]
    t_recv = _parts(summary["run_dir"], "recvs")["t_recv_ns"]
    return summary["sent"] - int((t_recv <= producer["t_last_send_ns"]).sum())


def test_fates_from_numpy_over_the_parquet(runs):
    """Missing seqs placed by position in the records alone; the run's rule decides only
    whether those after the last arrival are mid-run or tail drops."""
    _, found = runs
    for name, (summary, meta) in found.items():
        s, r = _parts(summary["run_dir"], "sends"), _parts(summary["run_dir"], "recvs")
        ok = np.unique(s["seq"][s["status"] == 0])
        got = np.unique(r["seq"])
        missing = np.setdiff1d(ok, got)
        start = int((missing < got.min()).sum())
        after = int((missing > got.max()).sum())
        mid_run = meta["drain"]["tail_placement"] == TAIL_MID_RUN
        truth = {
            "dropped_start": start,
            "dropped_mid": len(missing) - start - (0 if mid_run else after),
            "dropped_tail": 0 if mid_run else after,
        }
        assert {f: summary[f] for f in truth} == truth, name
        ambiguous = after if meta["drain"]["tail_placement"] == TAIL_AMBIGUOUS else 0
        assert meta["drain"][AMBIGUOUS_TAIL] == ambiguous, name


def test_the_summary_table_flags_the_ambiguous_tail(tmp_path):
    done = _cli(*_options(**U2, transport="ipc"), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    meta = json.load(open(glob.glob(str(tmp_path / "run=*" / "run.json"))[0]))
    n = meta["drain"][AMBIGUOUS_TAIL]
    line = next(x for x in done.stdout.splitlines() if "dropped start / mid / tail" in x)
    c = meta["counters"]
    assert f"{c['dropped_start']:,} / {c['dropped_mid']:,} / {c['dropped_tail']:,}" in line, line
    assert (
        n == c["dropped_tail"] > 0
        and f"({n:,} of the tail: mid-run or at close, ambiguous)" in line
    ), line


def test_report_equals_run_json(spark, runs):
    out, found = runs
    analysis = analyze(spark, discover_runs(out)[0])
    by_id = {meta["run_id"]: (summary, meta) for summary, meta in found.values()}
    totals = {r.run: r.columns() for r in analysis.summary if r.is_run_total}
    assert set(totals) == set(by_id)
    for run_id, (summary, meta) in by_id.items():
        row = totals[run_id]
        for name in (*FATES, "dropped", "lost", "expected"):
            assert row[name] == meta["counters"][name], (run_id, name)
        assert row[AMBIGUOUS_TAIL] == meta["drain"][AMBIGUOUS_TAIL], run_id
        assert row["expected"] == sum(row[f] for f in FATES), run_id
        for stream in summary["streams"]:
            rows = [
                x.columns()
                for x in analysis.summary
                if x.run == run_id and x.stream == stream["stream"]
            ]
            for name in (*FATES, "dropped", AMBIGUOUS_TAIL):
                assert sum(x[name] for x in rows) == stream[name], (run_id, stream["stream"], name)


def test_close_orders_against_plain_pyzmq(runs):
    """The same setup in plain pyzmq (a PUB in its own process, its own libzmq), the SUB noting
    what it had when the PUB's close returned. After-drain: nothing arrived after the close,
    so what was missing at the end was already missing with nothing in flight: a mid-run
    drop. ipc closed right after the last send: most messages die and they are the tail, as in
    zmqload's run (which cannot tell them from drops at a full pipe: ambiguous). tcp: what
    was in flight at the close still arrives."""
    _, found = runs
    for transport in ("ipc", "tcp"):
        for order in ORDERS:
            py = close_order_run(
                transport,
                order,
                n=U2["count"],
                rate=U2["rate"],
                delay_s=U2["consumer_delay_us"] / 1e6,
                size=U2["size"],
            )
            ours = found[f"{transport}-{order}"][0]
            if order == "after-drain":
                # nothing was in flight at the close: whatever is missing, even after the last arrival
                # (plain pyzmq over tcp: 13 of 60 once, under load), was dropped mid-run
                assert py["arrived_after_close"] == 0, py
                assert ours["dropped_tail"] == 0
                # both lose at most a few here (HWM 1 drops now and then under CPU load, 0-12 of 60 measured)
                assert py["missing"] <= py["sent"] / 2 and ours["lost"] <= ours["sent"] / 2, (
                    py,
                    ours["lost"],
                )
            elif transport == "ipc":
                # the close cut the backlog off: most of what was in flight then never arrived, in both
                assert py["missing_after_last_arrival"] > py["missing_at_close"] / 2, py
                assert (
                    ours["dropped_tail"]
                    > _in_flight_at_close(ours, found["ipc-producer-first"][1]) / 2
                ), ours
                assert found["ipc-after-drain"][0]["lost"] < ours["lost"]
            else:
                assert (
                    py["arrived_after_close"] > py["sent"] / 2 and py["missing"] <= py["sent"] / 2
                ), py
                assert ours["lost"] <= ours["sent"] / 2, ours
