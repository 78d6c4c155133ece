"""Each metric function against numpy ground truth on synthetic runs with known defects."""

from __future__ import annotations

import numpy as np
import pytest

from zmqload.analysis import finish, metrics
from zmqload.analysis.pipeline import collect
from zmqload.analysis.runs import discover_runs, load_records
from zmqload.contract import run_record as rr
from zmqload.store import record_files
from zmqload.contract.states import RunStatus
from zmqload.contract.fates import TAIL_AT_CLOSE

from .synth import make_run


def _load(spark, synth):
    runs, _ = discover_runs([synth.path])
    return runs, load_records(spark, runs, "sends"), load_records(spark, runs, "recvs")


def _views(run, consumers, completed=True, tail_placement=TAIL_AT_CLOSE, died=()):
    """(run, consumer, completed, tail_placement, died) views; `run` is the run's number, its
    index in the loaded runs; `died`: the consumers whose worker died."""
    return [(run, c, completed, tail_placement, c in died) for c in consumers]


def _no_lines(rs):
    """A receive summary for a completed drain: no certain line."""
    from pyspark.sql import functions as F

    return rs.withColumn("limit", F.lit(None).cast("long")).withColumn(
        "got_below_limit", F.lit(0).cast("long")
    )


def _truth_loss(synth, fanout):
    s, r = synth.sends, synth.recvs
    out = {}
    for stream in np.unique(s["stream"]):
        ok = np.sort(s["seq"][(s["stream"] == stream) & (s["status"] == 0)])
        consumers = np.unique(r["consumer"]) if fanout else [metrics.ALL]
        for c in consumers:
            m = (r["stream"] == stream) & ((r["consumer"] == c) if fanout else True)
            got = r["seq"][m]
            uniq = np.unique(got)
            lost = np.setdiff1d(ok, uniq)
            out[(int(c), int(stream))] = dict(
                sent=len(ok),
                received=len(got),
                unique=len(uniq),
                duplicates=len(got) - len(uniq),
                lost=len(lost),
                lost_start=int((lost < uniq.min()).sum()),
                lost_tail=int((lost > uniq.max()).sum()),
                eagain=int(((s["stream"] == stream) & (s["status"] == 1)).sum()),
                timeout=int(((s["stream"] == stream) & (s["status"] == 2)).sum()),
            )
    return out


def _edges(rs):
    return [
        (r["run"], r["consumer"], r["stream"], r["seq_min"], r["seq_max"], None)
        for r in rs.collect()
    ]


@pytest.mark.parametrize("form", ["join", "send cells"])
def test_loss_where_duplicates_and_drops_match_numpy(spark, lossy_run, form):
    runs, sends, recvs = _load(spark, lossy_run)
    rs = _no_lines(metrics.recv_summary(recvs))
    if form == "join":
        counts = metrics.send_counts(sends, rs)
    else:
        assert metrics.single_consumer_edges(_edges(rs))
        counts = metrics.send_counts_from_cells(metrics.send_cells(sends, _edges(rs)))
    got = {
        (r.consumer, r.stream): r.columns()
        for r in finish.fates(collect(counts), collect(rs), _views(0, [metrics.ALL]))
    }
    truth = _truth_loss(lossy_run, fanout=False)
    assert set(got) == set(truth)
    for key, t in truth.items():
        g = got[key]
        for k in ("sent", "received", "unique", "duplicates", "lost", "eagain", "timeout"):
            assert g[k] == t[k], (key, k)
        assert (g["dropped_start"], g["dropped_tail"]) == (t["lost_start"], t["lost_tail"])
        assert g["dropped_mid"] == t["lost"] - t["lost_start"] - t["lost_tail"]
        # no drain in this run: everything arrived is delivered, every missing one dropped
        assert (g["delivered"], g["drained"], g["stranded"]) == (t["unique"], 0, 0)
        assert g["dropped_sender"] == t["eagain"] + t["timeout"]
        assert g["loss_ratio"] == pytest.approx(t["lost"] / t["sent"])
        # ... and the numpy truth is what the generator injected.
        assert (t["lost_start"], t["lost_tail"], g["dropped_mid"]) == (37, 23, 41)
        assert (t["eagain"], t["timeout"], t["duplicates"]) == (17, 5, 11)


def test_several_runs_counted_from_send_cells_as_by_the_join(spark, lossy_run, tmp_path):
    """Runs reported together (a capacity search's probes) are counted from the send cells, one
    scan without a join, with the join's counts: per run, per stream, column for column."""
    other = make_run(
        str(tmp_path), "other", streams=3, count=3000, lost_start=5, lost_tail=7, lost_middle=11,
        eagain=3, duplicates=4, seed=9,
    )  # fmt: skip
    runs, _ = discover_runs([lossy_run.path, other.path])
    sends, recvs = load_records(spark, runs, "sends"), load_records(spark, runs, "recvs")
    rs = _no_lines(metrics.recv_summary(recvs))
    edges = _edges(rs)
    assert {e[0] for e in edges} == {0, 1} and metrics.single_consumer_edges(edges)
    by_cells = collect(metrics.send_counts_from_cells(metrics.send_cells(sends, edges)))
    by_join = collect(metrics.send_counts(sends, rs))
    assert len(by_cells) == 2 + 3 and all(r["sent"] > 0 for r in by_cells)
    key = lambda r: (r["run"], r["stream"], r["consumer"])  # noqa: E731
    assert sorted(by_cells, key=key) == sorted(by_join, key=key)


def test_fanout_loss_is_per_consumer_and_silent_consumer_is_all_lost(spark, fanout_run, tmp_path):
    runs, sends, recvs = _load(spark, fanout_run)
    rs = _no_lines(metrics.recv_summary(recvs, fanout_runs=[0]))
    # Consumer 2 is expected (3 consumers subscribed) but received nothing.
    rows = finish.fates(collect(metrics.send_counts(sends, rs)), collect(rs), _views(0, [0, 1, 2]))
    got = {(r.consumer, r.stream): r.columns() for r in rows}
    truth = _truth_loss(fanout_run, fanout=True)
    for key, t in truth.items():
        assert (
            got[key]["lost"],
            got[key]["dropped_start"],
            got[key]["dropped_tail"],
            got[key]["duplicates"],
        ) == (t["lost"], t["lost_start"], t["lost_tail"], t["duplicates"])
        assert t["lost_start"] == 100 and t["lost_tail"] == 3 and t["lost"] == 112
    silent = got[(2, 0)]
    assert (
        silent["unique"] == 0
        and silent["lost"] == silent["sent"] == 4000
        and silent["dropped_start"] == 4000
    )
    # the same views with the drain cut short: a consumer's missing seqs above its last
    # arrival may still be queued (stranded); below it they are drops
    cut = _views(0, [0, 1, 2], completed=False)
    lines = rs.drop("limit", "got_below_limit").selectExpr(
        "*", "seq_max as limit", "unique - 1 as got_below_limit"
    )
    got = {
        (r.consumer, r.stream): r.columns()
        for r in finish.fates(collect(metrics.send_counts(sends, lines)), collect(lines), cut)
    }
    for key, t in truth.items():
        g = got[key]
        assert (g["dropped_start"], g["dropped_tail"], g["stranded"]) == (
            t["lost_start"],
            0,
            t["lost_tail"],
        )
        assert g["dropped_mid"] == t["lost"] - t["lost_start"] - t["lost_tail"]
    assert got[(2, 0)]["stranded"] == 4000 and got[(2, 0)]["dropped"] == 0
    # consumer 1 died (and stream 0's producer in another run): what was stranded on its path is unknown,
    # drops stay drops
    dead = {
        (r.consumer, r.stream): r.columns()
        for r in finish.fates(
            collect(metrics.send_counts(sends, lines)),
            collect(lines),
            _views(0, [0, 1, 2], completed=False, died={1}),
            {1: [0]},
        )
    }
    for key, g in got.items():
        d = dead[key]
        on_dead_path = key[0] == 1
        assert (d["unknown"], d["stranded"]) == (
            (g["stranded"], 0) if on_dead_path else (0, g["stranded"])
        ), key
        assert [
            d[f] for f in ("delivered", "drained", "dropped_start", "dropped_mid", "dropped_tail")
        ] == [
            g[f] for f in ("delivered", "drained", "dropped_start", "dropped_mid", "dropped_tail")
        ], key
    assert sum(d["unknown"] for d in dead.values()) > 0 and any(
        d["stranded"] for d in dead.values()
    )


def _truth_late(r, fanout):
    late = {}
    for c in np.unique(r["consumer"]):
        for s in np.unique(r["stream"]):
            m = (r["consumer"] == c) & (r["stream"] == s)
            seq = r["seq"][m][np.argsort(r["t_recv_ns"][m], kind="stable")]
            runmax = np.maximum.accumulate(seq)
            n = int((seq[1:] < runmax[:-1]).sum())
            key = (int(c) if fanout else metrics.ALL, int(s))
            late[key] = late.get(key, 0) + n
    return late


def test_reordering_counts_late_arrivals(spark, lossy_run):
    _, _, recvs = _load(spark, lossy_run)
    got = {
        (r["consumer"], r["stream"]): r["reordered"] for r in metrics.reordering(recvs).collect()
    }
    truth = _truth_late(lossy_run.recvs, fanout=False)
    assert got == truth
    assert sum(truth.values()) >= 7  # the injected swaps (some may share a consumer's view)


def _np_percentile_hdr(values, q):
    v = np.sort(values)
    return v[max(int(np.ceil(q * len(v))) - 1, 0)]


@pytest.mark.parametrize(
    "metric,fn",
    [
        ("latency_intended", lambda s, r: r["t_recv_ns"] - r["t_intended_ns"]),
        ("latency_sent", lambda s, r: r["t_recv_ns"] - r["t_sent_ns"]),
        ("stall", lambda s, r: (s["t_sent_ns"] - s["t_intended_ns"])[s["status"] == 0]),
    ],
)
def test_latency_percentiles_within_one_percent(spark, lossy_run, metric, fn):
    _, sends, recvs = _load(spark, lossy_run)
    hist = finish.latency_histograms(
        collect(metrics.latency_pairs(recvs)),
        collect(metrics.stall_histogram(metrics.send_cells(sends))),
    )
    got = {r["stream"]: r for r in finish.percentiles(hist) if r["metric"] == metric}
    s, r = lossy_run.sends, lossy_run.recvs
    for stream in (0, 1):
        ss = {k: v[s["stream"] == stream] for k, v in s.items()}
        rr = {k: v[r["stream"] == stream] for k, v in r.items()}
        vals = fn(ss, rr)
        g = got[stream]
        assert g["count"] == len(vals)
        assert g["max"] == vals.max()
        assert g["mean"] == pytest.approx(vals.mean(), rel=1e-9)
        for name, q in metrics.PERCENTILES:
            exact = _np_percentile_hdr(vals, q)
            assert g[name] == pytest.approx(exact, rel=0.0101), (metric, name)


def test_rates_over_time_and_queue_depth(spark, lossy_run):
    window = 10_000_000
    _, sends, recvs = _load(spark, lossy_run)
    recv_w = collect(metrics.recv_windows(recvs, window))
    rates = finish.rates_over_time(collect(metrics.send_windows(sends, window)), recv_w)
    rows = {(r["stream"], r["window"]): r for r in rates}
    s, r = lossy_run.sends, lossy_run.recvs
    for stream in (0, 1):
        ms, mr = s["stream"] == stream, r["stream"] == stream
        for col, t in (
            ("offered", s["t_intended_ns"][ms]),
            ("sent", s["t_sent_ns"][ms & (s["status"] == 0)]),
            ("received", r["t_recv_ns"][mr]),
        ):
            w, n = np.unique(t // window, return_counts=True)
            assert {int(k): int(v) for k, v in zip(w, n)} == {
                k[1]: v[col] for k, v in rows.items() if k[0] == stream and v[col]
            }, col
    depth = finish.queue_depth(recv_w)
    drows = {(d["stream"], d["window"]): d["depth"] for d in depth}
    # Ground truth: in flight at the end of window w = sent by then - received by then.
    ends = (np.unique(np.concatenate([r["t_sent_ns"], r["t_recv_ns"]]) // window) + 1) * window - 1
    for stream in (0, 1, metrics.ALL):
        m = np.ones(len(r["seq"]), bool) if stream == metrics.ALL else r["stream"] == stream
        ts, tr = np.sort(r["t_sent_ns"][m]), np.sort(r["t_recv_ns"][m])
        for e in ends:
            key = (stream, int(e // window))
            if key in drows:
                assert drows[key] == np.searchsorted(ts, e, "right") - np.searchsorted(
                    tr, e, "right"
                )
    stats = {x["stream"]: x for x in finish.queue_depth_stats(depth)}
    d_all = np.array([v for (st, _), v in drows.items() if st == metrics.ALL])
    assert stats[metrics.ALL]["depth_max"] == d_all.max()
    assert stats[metrics.ALL]["depth_mean"] == pytest.approx(d_all.mean())
    assert stats[metrics.ALL]["queued_bytes_max"] == pytest.approx(d_all.max() * 64)


def test_fanout_latency_and_depth_are_each_consumers_own(spark, tmp_path):
    """Two fan-out consumers of one stream, the second 5 ms later on every message: each
    consumer's percentiles and queue depth are its own, not the stream's (issue 14 item 2)."""
    import pyarrow as pa
    from .synth import RECV_SCHEMA, write_parts

    n = 2000
    seq = np.arange(n, dtype=np.int64)
    t_sent = 10**12 + seq * 100_000
    lag = {0: 200_000, 1: 5_200_000}
    d = tmp_path / "run=fan"
    table = {
        k: np.concatenate([v(c) for c in (0, 1)])
        for k, v in {
            "consumer": lambda c: np.full(n, c, np.int32),
            "stream": lambda c: np.zeros(n, np.int32),
            "seq": lambda c: seq,
            "t_intended_ns": lambda c: t_sent,
            "t_sent_ns": lambda c: t_sent,
            "t_recv_ns": lambda c: t_sent + lag[c],
            "size": lambda c: np.full(n, 16, np.int32),
        }.items()
    }
    write_parts(str(d / "recvs"), pa.table(table, schema=RECV_SCHEMA), 1000, "c000")
    record_files.write_run(str(d), rr.RunRecord(run_id="fan", status=RunStatus.COMPLETE))
    runs, _ = discover_runs([str(d)])
    recvs = load_records(spark, runs, "recvs")
    pct = {
        (r["consumer"], r["metric"]): r
        for r in finish.percentiles(
            finish.latency_histograms(collect(metrics.latency_pairs(recvs, fanout_runs=[0])))
        )
    }
    for c in (0, 1):
        assert pct[(c, "latency_intended")]["p50"] == pytest.approx(lag[c], rel=0.0101)
        assert pct[(c, "latency_intended")]["max"] == lag[c]
    depth = finish.queue_depth(collect(metrics.recv_windows(recvs, 1_000_000, fanout_runs=[0])))
    stats = {x["consumer"]: x for x in finish.queue_depth_stats(depth)}
    # one message per 0.1 ms: 2 in flight for a 0.2 ms lag, 52 for 5.2 ms (at window ends)
    assert stats[0]["depth_max"] <= 3 and 50 <= stats[1]["depth_max"] <= 53
    # the run's queue is both consumers' together, window by window
    per = {(d["consumer"], d["window"]): d["depth"] for d in depth}
    for (c, w), v in per.items():
        if c == metrics.ALL and (0, w) in per and (1, w) in per:
            assert v == per[(0, w)] + per[(1, w)]


def test_multi_run_load_adds_run_column(spark, tmp_path):
    a = make_run(str(tmp_path), "a", streams=1, count=300, seed=5)
    b = make_run(str(tmp_path), "b", streams=1, count=500, seed=6, lost_tail=7)
    runs, warnings = discover_runs([str(tmp_path)])
    assert sorted(r.run_id for r in runs) == ["a", "b"] and not warnings
    recvs = load_records(spark, runs, "recvs")
    counts = {runs[r["run"]].run_id: r["count"] for r in recvs.groupBy("run").count().collect()}
    assert counts == {"a": len(a.recvs["seq"]), "b": len(b.recvs["seq"])}


def test_a_directory_of_runs_directories_is_reported_whole(tmp_path):
    """`zmqload report runs/demo` (make demo's --out: capacity/ and max/ beside each other): the runs
    one level down are found, as those of a search there are; each once."""
    make_run(str(tmp_path / "max"), "m", streams=1, count=300, seed=1)
    make_run(str(tmp_path / "other"), "o", streams=1, count=300, seed=2)
    make_run(str(tmp_path), "top", streams=1, count=300, seed=3)
    runs, warnings = discover_runs([str(tmp_path), str(tmp_path / "max")])
    assert sorted(r.run_id for r in runs) == ["m", "o", "top"] and not warnings


def _recvs_of_seqs(spark, tmp_path, run_id, seq, rows_per_part, stream=None):
    """Receive records with exactly these seqs, in this order, as a run: of stream 0, or of
    the streams in `stream` (one per seq)."""
    import pyarrow as pa
    from .synth import RECV_SCHEMA, write_parts

    n = len(seq)
    t = np.arange(n, dtype=np.int64) * 1000 + 10**9
    d = tmp_path / f"run={run_id}"
    stream = np.zeros(n, np.int32) if stream is None else stream
    write_parts(
        str(d / "recvs"),
        pa.table(
            {
                "consumer": np.zeros(n, np.int32),
                "stream": stream,
                "seq": seq,
                "t_intended_ns": t,
                "t_sent_ns": t,
                "t_recv_ns": t + 5,
                "size": np.full(n, 16, np.int32),
            },
            schema=RECV_SCHEMA,
        ),
        rows_per_part,
        "c000",
    )
    record_files.write_run(str(d), rr.RunRecord(run_id=run_id, status=RunStatus.COMPLETE))
    runs, _ = discover_runs([str(d)])
    return load_records(spark, runs, "recvs")


def _summary_of_cases(spark, cases):
    """recv_summary over many blocks at once: case i is stream i, its seqs in order given."""
    rows = [
        (0, 0, i, int(q), 10**9 + j, 16) for i, seqs in enumerate(cases) for j, q in enumerate(seqs)
    ]
    df = spark.createDataFrame(
        rows, "run int, consumer int, stream int, seq long, t_recv_ns long, size int"
    )
    return {r["stream"]: r for r in metrics.recv_summary(df).collect()}


def _truth(seqs):
    return len(seqs) - len(set(seqs)), len(set(seqs))


ISSUE_CASES = [  # (missing, duplicated) in a block 0..11 (issue 14 item 3, and a 3-power-sum collision)
    ({1, 4, 5, 8}, [2, 7]),
    ({1, 4, 5, 8}, [2, 2, 7]),
    ({1, 2, 5, 6, 9, 10}, [0, 11]),
    ({1, 5, 8, 12}, [2, 3, 10, 11]),  # equal sums of k, k^2, k^3: the old shortcut's blind spot
]


def test_duplicates_exact_on_the_issue_cases(spark):
    cases = [[k for k in range(14) if k not in missing] + dups for missing, dups in ISSUE_CASES]
    got = _summary_of_cases(spark, cases)
    for i, seqs in enumerate(cases):
        dups, unique = _truth(seqs)
        assert (got[i]["duplicates"], got[i]["unique"], got[i]["received"]) == (
            dups,
            unique,
            len(seqs),
        ), ISSUE_CASES[i]
    # lost as the issue counts it: the block's 12 or 14 seqs minus the distinct ones that arrived
    assert [14 - got[i]["unique"] for i in range(3)] == [4, 4, 6]


def test_duplicates_exact_in_a_randomized_collision_search(spark):
    """6000 random 64-seq blocks at random offsets (so they straddle bitmap words), each with
    0-6 missing seqs and 0-3 duplicates (repeats allowed), in shuffled arrival order; plus
    every block where the missing and duplicated seqs have equal sums of k, k^2 and k^3 that
    a search over small shapes finds. Duplicates and unique counts must equal a set's."""
    import itertools

    rng = np.random.default_rng(14)
    cases = []
    for _ in range(6000):
        base = int(rng.integers(0, 10_000))
        block = np.arange(base, base + 64)
        missing = rng.choice(block[1:-1], int(rng.integers(0, 7)), replace=False)
        present = np.setdiff1d(block, missing)
        dups = rng.choice(present, int(rng.integers(0, 4)), replace=True)
        seqs = np.concatenate([present, dups])
        rng.shuffle(seqs)
        cases.append(seqs.tolist())
    # collisions of the three power sums, 4 missing against 4 duplicated, in 0..15
    sums = {}
    for quad in itertools.combinations(range(1, 15), 4):
        sums.setdefault(tuple(sum(k**p for k in quad) for p in (1, 2, 3)), []).append(quad)
    collisions = [
        (a, b)
        for group in sums.values()
        for a, b in itertools.combinations(group, 2)
        if not set(a) & set(b)
    ]
    assert collisions, "the search must find the shapes that fooled the power sums"
    for missing, dups in collisions:
        cases.append([k for k in range(16) if k not in missing] + list(dups))
    got = _summary_of_cases(spark, cases)
    wrong = [
        i
        for i, seqs in enumerate(cases)
        if (got[i]["duplicates"], got[i]["unique"]) != _truth(seqs)
    ]
    assert not wrong, [cases[i] for i in wrong[:3]]
    assert sum(_truth(c)[0] > 0 for c in cases) > 4000  # most blocks do carry duplicates


def test_drained_counts_seqs_whose_every_arrival_came_in_the_drain(spark):
    """drained = distinct seqs with no arrival before their consumer's drain began; a
    round-robin seq that reached one consumer before its drain is not drained anywhere."""
    # consumer 0 drains from t=100, consumer 1 from t=50
    rows = [
        (0, 0, 0, 1, 10),
        (0, 0, 0, 2, 101),
        (0, 0, 0, 2, 102),  # 1 delivered, 2 drained (twice)
        (0, 0, 0, 3, 90),
        (0, 0, 0, 3, 110),  # 3: first before the drain
        (0, 1, 0, 4, 60),
        (0, 0, 0, 4, 99),  # 4: c1 in its drain, c0 before its
        (0, 1, 0, 5, 70),
    ]  # 5: drained at c1
    df = spark.createDataFrame(
        [r + (16,) for r in rows],
        "run int, consumer int, stream int, seq long, t_recv_ns long, size int",
    )
    starts = {(0, 0): 100, (0, 1): 50}
    (rr,) = metrics.recv_summary(df, drain_starts=starts).collect()
    assert (rr["unique"], rr["duplicates"], rr["drained"]) == (5, 3, 2)
    fan = {
        r["consumer"]: r
        for r in metrics.recv_summary(df, fanout_runs=[0], drain_starts=starts).collect()
    }
    assert (fan[0]["unique"], fan[0]["drained"]) == (4, 1) and (
        fan[1]["unique"],
        fan[1]["drained"],
    ) == (2, 2)
