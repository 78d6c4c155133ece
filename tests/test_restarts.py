"""--restart, a worker's process ended and replaced mid-run: its rules (refused in one line, in this
process), and five short real runs (each --restart-mode, consumers and producers) shared by every check
of them: their records kept per process (c0, c0.g1), the accounting joining them, the loss placed
as `dropped_restart` exactly as numpy over the Parquet records places it, run.json's restarts; and a
plain pyzmq PUSH/PULL pair restarted the same way (no zmqload code) losing the same kind of
messages."""

from __future__ import annotations

import contextlib
import glob
import io
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import check_identity, in_process, read_meta, read_table

import zmqload
from zmqload import Workload
from zmqload import cli
from zmqload.errors import ConfigError

RESTART_AT = 0.4  # seconds after the start
GAP_MS = 150
RATE = 5_000
SECONDS = 2.2  # the new process is up soon after the gap (it waited, started with the run): the
# flow goes on well over a second after it, on a loaded machine too
SLOW_US = 300  # a PULL's work per message: 3.3k/s against 5k/s sent, a backlog when it dies


# ------------------------------------------------------------------------------------- the rules
@pytest.mark.parametrize(
    "values, says",
    [
        (dict(restart="c0@1", transport="inproc"), "over inproc"),
        (dict(restart="c0@1", endpoint="inproc://zl-restart"), "over inproc"),
        (dict(restart="c2@1", consumers=2), "not one of the 2 consumer(s)"),
        (dict(restart="p1@1"), "not one of the 1 producer(s)"),
        (dict(restart="c00@1"), "not one of the 1 consumer(s)"),
        (dict(restart="c0@2"), "not within the run's 2 s"),
        (dict(restart="c0@1", duration=None, count=1000, rate=1000), "not within the run's 1 s"),
        (dict(restart="c0@1", duration=None), "without a run length in time"),
        (dict(restart="c0@0"), "not after the start"),
        (
            dict(restart="c0@1", role="producer", producers_connect="tcp://127.0.0.1:5999"),
            "the consumers are yours",
        ),
        (
            dict(restart="p0@1", role="consumer", consumers_connect="tcp://127.0.0.1:5999"),
            "the producers are yours",
        ),
        (dict(restart="c0@1,c0@1.1", restart_gap_ms=200), "restarts again before"),
        (dict(restart="c0@1", pattern="req-rep"), "wait for its reply"),
        (dict(restart="c0@1", pattern="pub-sub", topics=2), "with --topics"),
        (dict(restart="x0@1"), "got 'x0@1'"),
        (dict(restart="c0"), "got 'c0'"),
    ],
)
def test_restart_is_refused_in_one_line(values, says):
    values = {"duration": 2, **values}
    with pytest.raises(ConfigError) as info:
        Workload(**values).validate()
    assert info.value.option == "--restart" and says in info.value.message, info.value.message
    assert "accepted: " in info.value.message and "\n" not in str(info.value)


def test_restart_options_are_read_and_refused_as_options():
    w = Workload(restart="c1@2, c0@1", consumers=2, duration=3, restart_gap_ms=250)
    assert w.restarts == (("c0", 1.0), ("c1", 2.0)) and w.restart_mode == "kill"
    # "+" joins restarts too: the form a sweep or a search keeps in one run (a comma is an axis)
    assert Workload(restart="c1@2 + c0@1", consumers=2, duration=3).restarts == w.restarts
    assert Workload().restarts == ()
    with pytest.raises(ConfigError) as info:
        Workload(restart="c0@1", duration=2, restart_mode="pause")
    assert info.value.option == "--restart-mode" and "accepted: kill" in info.value.message
    with pytest.raises(ConfigError) as info:
        Workload(restart_gap_ms=-1)
    assert info.value.option == "--restart-gap-ms"


def test_the_command_refuses_a_restart_with_exit_2_in_one_line(tmp_path):
    out = tmp_path / "out"
    err = io.StringIO()
    argv = ["run", "--duration", "2", "--restart", "c3@1", "--out", str(out)]
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = cli.main(argv)
    lines = err.getvalue().splitlines()
    assert status == 2 and len(lines) == 1 and "--restart: " in lines[0], err.getvalue()
    assert "accepted: " in lines[0] and not out.exists()


@pytest.mark.parametrize("flag", ["--slo-restart-lost", "--slo-recovery-ms"])
def test_an_slo_on_restarts_without_restart_is_refused_with_exit_2(tmp_path, flag):
    out = tmp_path / "out"
    err = io.StringIO()
    argv = ["run", "--duration", "1", flag, "5", "--out", str(out)]
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = cli.main(argv)
    lines = err.getvalue().splitlines()
    assert status == 2 and len(lines) == 1 and f"{flag}: got 5 without --restart" in lines[0]
    assert "accepted: " in lines[0] and not out.exists()


def test_a_restarts_process_is_started_with_the_run_and_waits_for_its_turn(tmp_path):
    """Each --restart's new process is started at launch and waits, zmqload imported, for its spec:
    the restart takes it (the worker's first start does not), so the time a worker is down is its
    mode's and its gap's, not a Python start's; one never needed ends with the run."""
    import dataclasses

    from zmqload.contract.ids import WorkerId
    from zmqload.runner.launch import Launcher
    from zmqload.runner.spec import WorkerSpec

    c0 = WorkerId.parse("c0")
    launcher = Launcher(threads=False, io_threads=1)
    launcher.stand_by(c0)
    launcher.stand_by(c0)
    first, second = launcher.standing_by[c0]
    try:
        # no controller listens: the processes wait for one until they are killed
        spec = WorkerSpec(c0, Workload(), f"ipc://{tmp_path}/control", str(tmp_path))
        launcher.start(spec)
        assert launcher.workers[c0] not in (first, second)
        launcher.end(c0, "kill")  # as the controller does before the new process
        launcher.start(dataclasses.replace(spec, generation=1))
        assert launcher.workers[c0] is first and launcher.standing_by[c0] == [second]
        assert second.poll() is None  # still waiting for a spec
    finally:
        launcher.finish(timeout=0.5)
    assert first.poll() is not None and second.poll() is not None
    assert not launcher.standing_by


# ------------------------------------------------------------------------------ two real runs
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One run per --restart-mode, each worker restarted once, --restart-gap-ms later: a slow PULL
    that binds killed with a backlog; one of two SUBs that connect (over ipc) closed while the PUB
    goes on; one of two round-robin PULLs frozen, its connection left open through the gap; a PUB
    (it binds) killed under two SUBs; a DEALER closed."""
    out = str(tmp_path_factory.mktemp("restarts"))
    # the producers sleep between sends and only one consumer works (both spin otherwise): the run
    # leaves the CPUs to the processes it starts and to what runs beside it
    common = dict(
        out=out,
        rate=RATE,
        duration=SECONDS,
        restart_gap_ms=GAP_MS,
        pacing="sleep",
        drain_timeout_ms=300,
    )
    push = zmqload.run(
        pattern="push-pull",
        transport="tcp",
        restart=f"c0@{RESTART_AT}",
        consumer_delay_us=SLOW_US,
        run_name="push",
        **common,
    )
    pub = zmqload.run(
        pattern="pub-sub",
        transport="ipc",
        consumers=2,
        restart=f"c1@{RESTART_AT}",
        restart_mode="close",
        run_name="pub",
        **common,
    )
    frozen = zmqload.run(
        pattern="push-pull",
        transport="tcp",
        consumers=2,
        restart=f"c0@{RESTART_AT}",
        restart_mode="freeze",
        run_name="frozen",
        **common,
    )
    publisher = zmqload.run(
        pattern="pub-sub",
        transport="tcp",
        consumers=2,
        restart=f"p0@{RESTART_AT}",
        run_name="publisher",
        # the new PUB sends what fell due while it was away at once, dropped before the SUBs are
        # back: a longer run, so each SUB has a flow from the new process after that
        **dict(common, duration=SECONDS + 1),
    )
    dealer = zmqload.run(
        pattern="dealer-router",
        transport="tcp",
        restart=f"p0@{RESTART_AT}",
        restart_mode="close",
        run_name="dealer",
        # a close waits for the old process's exit (its records written, its linger), which took
        # over 2 s with the CPUs shared by three other jobs: a longer run, so the new one sends
        **dict(common, duration=SECONDS + 1),
    )
    return {"push": push, "pub": pub, "frozen": frozen, "publisher": publisher, "dealer": dealer}


RESTARTED = {"push": ("c0", "kill"), "pub": ("c1", "close"), "frozen": ("c0", "freeze")}
"""The consumer restarts: run -> (the worker, --restart-mode)."""


def _parts(run_dir: str, kind: str, name: str) -> list[str]:
    return sorted(glob.glob(os.path.join(run_dir, kind, f"part-{name}-*.parquet")))


def _seqs(run_dir: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(seqs, receive times) of one process's records, by their names alone."""
    tables = [
        pq.read_table(p, columns=["seq", "t_recv_ns"]) for p in _parts(run_dir, "recvs", name)
    ]
    if not tables:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return (
        np.concatenate([t["seq"].to_numpy() for t in tables]),
        np.concatenate([t["t_recv_ns"].to_numpy() for t in tables]),
    )


def _restart_loss_from_parquet(run_dir: str, consumer: int, fanout: bool) -> tuple[int, int, int]:
    """Restated from the records alone (one producer): the seqs after the highest the ended process
    recorded, up to the first its new one received; the accepted ones among them that the view
    (that consumer with fan-out, else any) never received. Returns (their count, the region's
    first seq and the one past its last)."""
    sends, recvs = read_table(run_dir, "sends"), read_table(run_dir, "recvs")
    ok = np.unique(sends["seq"].to_numpy()[sends["status"].to_numpy() == 0])
    got = recvs["seq"].to_numpy()
    if fanout:
        got = got[recvs["consumer"].to_numpy() == consumer]
    before, _ = _seqs(run_dir, f"c{consumer}")
    after, _ = _seqs(run_dir, f"c{consumer}.g1")
    lo, hi = int(before.max(initial=-1)) + 1, int(after.min())
    region = ok[(ok >= lo) & (ok < hi)]
    return int(np.setdiff1d(region, got).size), lo, hi


def test_the_runs_complete_with_every_message_placed(runs):
    for result in runs.values():
        assert result.status == "complete", (result.run_dir, result.summary())
        check_identity(result)
        meta = read_meta(result.run_dir)
        assert meta["status"] == "complete" and meta["counters"]["lost"] == result.lost
        assert result.duplicates == 0


def test_each_process_records_under_its_generation(runs):
    for key, (name, _) in RESTARTED.items():
        result = runs[key]
        run_dir = result.run_dir
        assert _parts(run_dir, "recvs", name) and _parts(run_dir, "recvs", f"{name}.g1")
        assert _parts(run_dir, "samples", f"{name}.g1")
        old, t_old = _seqs(run_dir, name)
        new, t_new = _seqs(run_dir, f"{name}.g1")
        restart = read_meta(run_dir)["restarts"][0]
        # the ended process's every row precedes its end, the new one's follow it
        assert t_old.max() <= restart["t_ns"] < t_new.min()
        assert old.max() < new.min()
        # the accounting joins them: the consumer's receipts are both processes'
        entry = next(c for c in result.consumers if c.worker == int(name[1:]))
        assert entry.received == len(old) + len(new)
    assert not glob.glob(os.path.join(runs["push"].run_dir, "recvs", "part-c1*"))


def test_run_json_lists_each_restart_with_its_cost_and_recovery(runs):
    for key, (worker, mode) in RESTARTED.items():
        result = runs[key]
        meta = read_meta(result.run_dir)
        (restart,) = meta["restarts"]
        assert restart["worker"] == worker and restart["generation"] == 1
        assert restart["mode"] == mode and restart["gap_ms"] == GAP_MS
        assert restart["at_s"] == pytest.approx(RESTART_AT, abs=0.2)  # held within a slice
        assert restart["down_ns"] == restart["t_up_ns"] - restart["t_ns"] >= GAP_MS * 1_000_000
        assert restart["lost"] == result.dropped_restart == meta["counters"]["dropped_restart"] > 0
        assert restart["t_first_recv_ns"] > restart["t_ns"]
        assert restart["first_recv_after_up_ns"] == max(
            0, restart["t_first_recv_ns"] - restart["t_up_ns"]
        )
        assert restart["backlog_drained_after_up_ns"] >= 0
        assert result.restarts == meta["restarts"]
    # a connecting PUSH queued for the PULL it lost: delivered once the new process was up
    assert read_meta(runs["push"].run_dir)["restarts"][0]["backlog_drained_after_up_ns"] > 0


def test_the_summary_table_says_each_restart_and_its_loss(runs):
    from rich.console import Console

    from zmqload.cli.display import summary_table

    result = runs["push"]
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(summary_table(result))
    text = console.export_text()
    assert "restarts" in text and f"c0 at {result.restarts[0]['at_s']:.3f} s" in text
    (line,) = [line for line in text.splitlines() if "dropped at a restart" in line]
    assert f"{result.dropped_restart:,}" in line


@pytest.mark.parametrize("key", ["push", "frozen"])
def test_a_killed_or_frozen_pull_loses_its_backlog_as_dropped_restart_and_nothing_else(runs, key):
    result = runs[key]
    placed, lo, hi = _restart_loss_from_parquet(result.run_dir, 0, fanout=False)
    assert result.dropped_restart == placed > 0 and hi - lo >= placed
    # PUSH blocks at HWM and the drain completed: nothing else was lost
    assert result.lost == result.dropped_restart
    assert result.dropped_start == result.dropped_mid == result.dropped_tail == 0
    assert result.dropped_reset == result.stranded == result.unknown == 0
    sends = read_table(result.run_dir, "sends")
    ok = sends["seq"].to_numpy()[sends["status"].to_numpy() == 0]
    got = np.unique(read_table(result.run_dir, "recvs")["seq"].to_numpy())
    missing = np.setdiff1d(ok, got)
    assert missing.size == result.lost and lo <= missing.min() and missing.max() < hi
    if len(result.consumers) == 1:  # one run of seqs: what the dead process's pipe held
        assert np.all(np.diff(missing) == 1)


def test_a_restarted_sub_misses_what_was_sent_while_away_in_its_view_only(runs):
    result = runs["pub"]
    placed, _, _ = _restart_loss_from_parquet(result.run_dir, 1, fanout=True)
    (stream,) = result.streams
    away, stayed = stream["fates_by_consumer"][1], stream["fates_by_consumer"][0]
    assert away["dropped_restart"] == placed == result.dropped_restart > 0
    assert stayed["dropped_restart"] == 0
    # away for at least the gap: everything sent meanwhile missed (RATE msg/s)
    assert placed >= RATE * GAP_MS / 1000 * 0.8


def test_a_restarted_dealer_comes_back_on_its_stream_and_its_close_loses_nothing(runs):
    """A DEALER (its routing id is its name in runs with restarts, the new process's too) closed
    cleanly: its LINGER delivered what its socket held, and the ROUTER took every message of the
    new process (the id itself is not in the records)."""
    result = runs["dealer"]
    check_identity(result)
    (restart,) = read_meta(result.run_dir)["restarts"]
    assert restart["worker"] == "p0" and restart["mode"] == "close" and restart["first_seq"] > 0
    new = pq.ParquetDataset(_parts(result.run_dir, "sends", "p0.g1")).read()
    assert new["seq"].to_numpy().min() == restart["first_seq"]
    assert result.lost == result.dropped_restart == restart["lost"] == 0
    assert result.unique_received == result.sent == result.attempted


def test_a_restarted_pub_goes_on_with_its_stream_and_its_subs_lose_the_gap(runs):
    result = runs["publisher"]
    run_dir = result.run_dir
    meta = read_meta(run_dir)
    (restart,) = meta["restarts"]
    assert restart["worker"] == "p0" and restart["generation"] == 1
    old = pq.ParquetDataset(_parts(run_dir, "sends", "p0")).read()
    new = pq.ParquetDataset(_parts(run_dir, "sends", "p0.g1")).read()
    # the new process goes on where the ended one held: one stream, no seq twice, none skipped
    first = restart["first_seq"]
    assert old["seq"].to_numpy().max() + 1 == first == new["seq"].to_numpy().min() > 0
    assert result.attempted == new["seq"].to_numpy().max() + 1 == len(old) + len(new)
    assert result.sent == int((old["status"].to_numpy() == 0).sum()) + int(
        (new["status"].to_numpy() == 0).sum()
    )
    # each SUB's view: after the highest seq it got below the new process's first, up to the first
    # it got from the new process (sent before it had reconnected and subscribed again)
    sends, recvs = read_table(run_dir, "sends"), read_table(run_dir, "recvs")
    ok = np.unique(sends["seq"].to_numpy()[sends["status"].to_numpy() == 0])
    (stream,) = result.streams
    total = 0
    for consumer in (0, 1):
        got = recvs["seq"].to_numpy()[recvs["consumer"].to_numpy() == consumer]
        back = got[got >= first]
        assert len(back), consumer  # the SUB reconnected and subscribed again
        lo, hi = int(got[got < first].max(initial=-1)) + 1, int(back.min())
        region = ok[(ok >= lo) & (ok < hi)]
        placed = int(np.setdiff1d(region, got).size)
        assert stream["fates_by_consumer"][consumer]["dropped_restart"] == placed > 0
        total += placed
    assert result.dropped_restart == total == restart["lost"]


def test_a_repaired_run_places_its_restarts_losses_as_the_run_did(runs, tmp_path):
    """run.json holds each restart as it is made: a run its controller never finished is repaired
    from the records with them (here a finished run's copy, put back to `running`)."""
    import json
    import shutil

    from zmqload.runner.repair import repair_run

    for key in ("push", "publisher"):
        finished = read_meta(runs[key].run_dir)
        run_dir = str(tmp_path / key)
        shutil.copytree(runs[key].run_dir, run_dir)
        left = dict(finished, status="running", finished_at=None, counters=None, summary=None)
        left.update(drain=None, streams=[], producers=[], consumers=[], controller_pid=None)
        left["restarts"] = [
            {k: v for k, v in r.items() if k not in ("lost", "t_first_recv_ns")}
            for r in finished["restarts"]
        ]
        with open(os.path.join(run_dir, "run.json"), "w") as f:
            json.dump(left, f)
        repair_run(run_dir, "repaired by the test", workers_died=False)
        meta = read_meta(run_dir)
        assert meta["status"] == "failed" and len(meta["restarts"]) == 1
        assert meta["restarts"][0]["lost"] == finished["restarts"][0]["lost"]
        for fate in ("dropped_restart", "dropped_mid", "expected", "unique_received"):
            assert meta["counters"][fate] == finished["counters"][fate], fate


# ------------------------------------------ each restart in the report's table, judged by SLOs
def _new_process_arrivals(run_dir: str, restart: dict) -> tuple[np.ndarray, np.ndarray]:
    """(receive times, whether held back) of what arrived at (a consumer's) or from (a producer's)
    the new process, from the records alone: held back = sent (a producer's: due) before it was up."""
    if restart["worker"].startswith("c"):
        tables = [pq.read_table(p) for p in _parts(run_dir, "recvs", f"{restart['worker']}.g1")]
        recvs = {
            k: np.concatenate([t[k].to_numpy() for t in tables]) for k in ("t_recv_ns", "t_sent_ns")
        }
        return recvs["t_recv_ns"], recvs["t_sent_ns"] < restart["t_up_ns"]
    recvs = read_table(run_dir, "recvs")
    new = recvs["seq"].to_numpy() >= restart["first_seq"]  # one producer: its stream's seqs
    return (
        recvs["t_recv_ns"].to_numpy()[new],
        recvs["t_intended_ns"].to_numpy()[new] < restart["t_up_ns"],
    )


def _recovery_from_records(run_dir: str, restart: dict) -> tuple[int | None, int | None]:
    """(first message, recovery) in ns from the new process up, restated from the records (None:
    nothing arrived): recovery is the last arrival of what was held back, else the first."""
    t_recv, held = _new_process_arrivals(run_dir, restart)
    if not len(t_recv):
        return None, None
    up = restart["t_up_ns"]
    first = max(0, int(t_recv.min()) - up)
    backlog = max(0, int(t_recv[held].max()) - up) if held.any() else 0
    return first, backlog or first


def _table_row_from_records(run_dir: str, restart: dict) -> list[str]:
    """A restart's row of the report's table, restated from run.json's facts and numpy over the
    records (first message and recovery in ms, from the new process up)."""
    first, recovery = _recovery_from_records(run_dir, restart)
    return [
        restart["worker"],
        "1",
        restart["mode"],
        f"{restart['at_s']:.3f}",
        f"{(restart['t_up_ns'] - restart['t_ns']) / 1e6:,.0f}",
        f"{restart['lost']:,}",
        *("none" if ns is None else f"{ns / 1e6:,.0f}" for ns in (first, recovery)),
    ]


def test_the_reports_restart_table_shows_each_restart_as_the_records_have_it(runs):
    """The page's and summary.md's table, and `run`'s summary line, say the same figures; each held
    to run.json and to numpy over the Parquet records."""
    import html as html_text
    from types import SimpleNamespace

    from rich.console import Console

    from zmqload.analysis.runs import discover_runs
    from zmqload.cli.display import summary_table
    from zmqload.report import html, markdown, restart_table

    infos, _ = discover_runs([r.run_dir for r in runs.values()])
    analysis = SimpleNamespace(runs=infos)
    page = html_text.unescape("".join(html.restarts_table(analysis)))
    summary_md = "\n".join(markdown.restart_lines(analysis))
    assert page.count("<tr>") == 1 + len(runs) and "<h3>Restarts</h3>" in page
    for info in infos:
        run_dir = info.path
        (restart,) = read_meta(run_dir)["restarts"]
        row = _table_row_from_records(run_dir, restart)
        assert restart_table.cells(info.record.restarts[0]) == row, info.run_id
        assert "<td>" + "</td><td>".join(row) + "</td></tr>" in page, info.run_id
        assert f"| {info.run_id} | " + " | ".join(row) + " |" in summary_md
        result = next(r for r in runs.values() if r.run_dir == run_dir)
        console = Console(width=400, record=True, file=io.StringIO())
        console.print(summary_table(result))
        text = console.export_text()
        first, recovery = ("" if cell == "none" else " ms" for cell in row[6:8])
        assert (
            f"{row[0]} at {row[3]} s (down {row[4]} ms, lost {row[5]}, first message {row[6]}{first}, "
            f"recovery {row[7]}{recovery})" in text
        ), text
    # a PUSH queued for the PULL it lost: its recovery is that backlog's, after the first message
    push = next(i for i in infos if i.path == runs["push"].run_dir).record.restarts[0]
    assert push.recovery_ns == push.backlog_drained_after_up_ns > push.first_recv_after_up_ns


def test_each_restart_is_judged_by_the_slos_on_restarts(runs):
    """--slo-restart-lost and --slo-recovery-ms on the real runs: the worst restart of each, at its
    figure exactly (held) and just under it (broken, named in one line)."""
    from zmqload.contract.workload import Slos
    from zmqload.plan.slo import judge

    for key, result in runs.items():
        (restart,) = read_meta(result.run_dir)["restarts"]
        _, recovery_ns = _recovery_from_records(result.run_dir, restart)
        assert recovery_ns, key  # the flow came back after each restart
        recovery_ms = recovery_ns / 1e6
        lost = restart["lost"]
        assert judge(result, Slos(slo_restart_lost=lost, slo_recovery_ms=recovery_ms + 1e-6)) == []
        under = max(lost - 1, 0)  # a dealer's clean close loses nothing: 0 holds it
        broken = judge(result, Slos(slo_restart_lost=under, slo_recovery_ms=recovery_ms * 0.99))
        assert [b.slo for b in broken] == (["slo-restart-lost"] if lost else []) + [
            "slo-recovery-ms"
        ], key
        assert broken[-1].measured == pytest.approx(recovery_ms) and "\n" not in broken[-1].text
        if lost:
            assert broken[0].text == (
                f"--slo-restart-lost {lost - 1}: the restart of {restart['worker']} at "
                f"{restart['at_s']:.3f} s lost {lost:,}"
            )


def test_run_exits_3_on_a_broken_slo_on_restarts(runs, monkeypatch, tmp_path):
    """`run`'s gate on a real run's output (the push run's, not made again): exit 3, the SLO named."""
    result = runs["push"]
    lost = result.restarts[0]["lost"]
    monkeypatch.setattr("zmqload.runner.run", lambda w, progress=None, slos=None: result)
    argv = ["run", "--duration", "2", "--restart", "c0@1", "--out", str(tmp_path), "--quiet"]
    for limit, status in ((lost, 0), (lost - 1, 3)):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert cli.main([*argv, "--slo-restart-lost", str(limit)]) == status
    assert err.getvalue().strip() == (
        f"zmqload run: SLO broken: --slo-restart-lost {lost - 1}: the restart of c0 at "
        f"{result.restarts[0]['at_s']:.3f} s lost {lost:,}"
    )


def test_the_pytest_fixture_fails_a_test_on_a_broken_slo_on_restarts(runs, monkeypatch, tmp_path):
    """The plugin's `zmqload.run(..., slo_restart_lost=N)`: the SLOs go to the run (kept in
    run.json) and a broken one fails the test with the same line; refused without --restart."""
    from zmqload.pytest_plugin import ZmqloadFixture

    result, given = runs["push"], []
    lost = result.restarts[0]["lost"]

    def run(w, progress=None, slos=None):
        given.append(slos)
        return result

    monkeypatch.setattr("zmqload.runner.run", run)
    fixture = ZmqloadFixture(str(tmp_path), keep=False)
    options = dict(pattern="push-pull", duration=2, restart="c0@1")
    assert fixture.run(**options, slo_restart_lost=lost) is result
    with pytest.raises(pytest.fail.Exception) as info:
        fixture.run(**options, slo_restart_lost=lost - 1)
    assert f"--slo-restart-lost {lost - 1}: the restart of c0 at" in str(info.value)
    assert [s.slo_restart_lost for s in given] == [lost, lost - 1] and fixture.results[-1] is result
    assert fixture.run(**options) is result and given[-1] is None  # no SLO: nothing judged
    with pytest.raises(ConfigError) as refused:
        fixture.run(pattern="push-pull", duration=2, slo_recovery_ms=100)
    assert refused.value.option == "--slo-recovery-ms" and len(given) == 3


# ------------------------------------------------------------------- in a sweep and a search
SWEPT = ["--pattern", "push-pull", "--restart", "c0@0.3", "--restart-gap-ms", "100"]
SWEPT += ["--pacing", "sleep", "--consumer-delay-us", str(SLOW_US)]


def _restart_of(run_dir: str) -> dict:
    meta = read_meta(run_dir)
    (restart,) = meta["restarts"]
    assert meta["workload"]["restart"] == "c0@0.3" and restart["worker"] == "c0"
    assert restart["at_s"] == pytest.approx(0.3, abs=0.2)  # held within a slice
    assert restart["lost"] == meta["counters"]["dropped_restart"]
    assert _parts(run_dir, "recvs", "c0.g1"), run_dir  # the new process recorded
    return meta


def test_every_point_of_a_sweep_restarts_at_the_same_time(tmp_path, capsys):
    out = str(tmp_path / "sweep")
    argv = ["sweep", *SWEPT, "--rate", "1k,2k", "--duration", "1.5", "--out", out, "--quiet"]
    r = in_process(capsys, *argv, "--name", "rs")
    assert r.returncode == 0, r.stderr
    run_dirs = sorted(glob.glob(os.path.join(out, "run=*")))
    assert [read_meta(d)["workload"]["rate"] for d in run_dirs] == [1000, 2000]
    for run_dir in run_dirs:
        _restart_of(run_dir)


def test_a_search_with_restarts_restarts_every_probe_and_judges_its_loss_apart(tmp_path, capsys):
    """Each probe restarts c0 at the same time; its loss at the restart is counted beside the
    --max-loss figure, not in it (nothing else lost: the probe passes --max-loss 0)."""
    import json

    out = str(tmp_path / "search")
    argv = ["capacity", *SWEPT, "--start-rate", "1k", "--probe-duration", "1.5"]
    r = in_process(capsys, *argv, "--max-probes", "2", "--precision", "0.5", "--out", out)
    assert r.returncode in (0, 1), r.stderr  # 1: no answer within 2 probes
    with open(os.path.join(out, "capacity-search.json")) as f:
        (search,) = json.load(f)["searches"]
    lines = [line for line in r.stdout.splitlines() if line.lstrip().startswith("probe ")]
    assert len(search["probes"]) == len(lines) == 2
    for probe, line in zip(search["probes"], lines):
        meta = _restart_of(probe["run_dir"])
        counters, figures = meta["counters"], probe["figures"]
        assert figures["dropped_restart"] == counters["dropped_restart"]
        apart = counters["lost"] - counters["dropped_restart"]
        assert figures["loss_ratio"] == apart / counters["expected"]
        said = f"loss {figures['loss_ratio']:.2%}"
        if counters["dropped_restart"]:
            said += f" (and {counters['dropped_restart']:,} at restarts)"
        assert said + ", p99" in line, line
        if apart == 0:
            assert "max-loss" not in {b["slo"] for b in probe["breaches"]}, probe["breaches"]
    assert any(
        p["figures"]["dropped_restart"] for p in search["probes"]
    )  # a PULL killed with a backlog


# ------------------------------------------------ the same restart on a plain pyzmq PUSH/PULL pair
_PULL = r"""
import sys, time, zmq
work_s, endpoint = float(sys.argv[1]), sys.argv[2]
ctx = zmq.Context()
pull = ctx.socket(zmq.PULL)
pull.bind(endpoint)
print(pull.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)
while pull.poll(700):
    print(int(pull.recv()[:12]), flush=True)  # in the pipe's buffer: kept if this process is killed
    end = time.perf_counter() + work_s
    while time.perf_counter() < end:
        pass
"""


def _pull(endpoint: str, got: list[int]) -> tuple[subprocess.Popen, str, threading.Thread]:
    """A PULL process on `endpoint`: the process, where it bound, and the thread that reads what it
    received into `got` (read as it comes: a full pipe would stop it, and the PUSH with it)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _PULL, str(SLOW_US / 1e6), endpoint],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    bound = proc.stdout.readline().strip()
    reader = threading.Thread(target=lambda: got.extend(int(x) for x in proc.stdout.read().split()))
    reader.start()
    return proc, bound, reader


def test_a_plain_pyzmq_pair_restarted_the_same_way_loses_the_same_kind_of_messages(runs):
    """The oracle: pyzmq's own libzmq, a paced PUSH here, the same slow PULL in a process that is
    SIGKILLed at RESTART_AT and replaced GAP_MS later on the same endpoint. Both lose one run of
    seqs, all sent before the kill, and deliver everything after; neither duplicates."""
    import zmq

    got: list[int] = []
    first, endpoint, first_reader = _pull("tcp://127.0.0.1:0", got)
    second = second_reader = None
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    try:
        push.connect(endpoint)
        push.send(b"%012d" % 0)  # connected and heard before the clock starts
        t0, sent, killed_at = time.monotonic(), 1, None
        while sent < RATE * SECONDS:
            now = time.monotonic() - t0
            if killed_at is None and now >= RESTART_AT:
                first.send_signal(signal.SIGKILL)
                first.wait()
                killed_at = sent
                time.sleep(GAP_MS / 1000)
                second, _, second_reader = _pull(endpoint, got)
            while sent < min(RATE * now, RATE * SECONDS):
                push.send(b"%012d" % sent)
                sent += 1
            time.sleep(0.0005)
        assert second is not None and second.wait(60) == 0
    finally:
        push.close(linger=0)
        ctx.term()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        for reader in (first_reader, second_reader):
            if reader is not None:
                reader.join(10)
    assert len(got) == len(set(got))
    missing = np.setdiff1d(np.arange(sent), np.array(got))
    assert missing.size > 0 and np.all(np.diff(missing) == 1)  # one run of seqs
    assert missing.max() < killed_at  # all sent before the kill: in the dead process's pipe
    assert max(got) == sent - 1  # delivered again after
    result = runs["push"]
    assert result.dropped_restart > 0 and result.lost == result.dropped_restart
