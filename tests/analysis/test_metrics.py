"""Each metric function against numpy ground truth on synthetic runs with known defects."""
from __future__ import annotations

import numpy as np
import pytest

from zmqload.analysis import metrics
from zmqload.analysis.runs import discover_runs, load_records

from .synth import make_run


def _load(spark, synth):
    runs, _ = discover_runs([synth.path])
    return runs, load_records(spark, runs, "sends"), load_records(spark, runs, "recvs")


def _keys(spark, run, consumers):
    """(run, consumer) keys; `run` is the run's number, its index in the loaded runs."""
    return spark.createDataFrame([(run, c) for c in consumers], "run int, consumer int")


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
                sent=len(ok), received=len(got), unique=len(uniq), duplicates=len(got) - len(uniq),
                lost=len(lost), lost_start=int((lost < uniq.min()).sum()), lost_tail=int((lost > uniq.max()).sum()),
                eagain=int(((s["stream"] == stream) & (s["status"] == 1)).sum()),
                timeout=int(((s["stream"] == stream) & (s["status"] == 2)).sum()))
    return out


def _edges(rs):
    return [(r["run"], r["consumer"], r["stream"], r["seq_min"], r["seq_max"]) for r in rs.collect()]


@pytest.mark.parametrize("form", ["join", "send cells"])
def test_loss_where_duplicates_and_drops_match_numpy(spark, lossy_run, form):
    runs, sends, recvs = _load(spark, lossy_run)
    rs = metrics.recv_summary(recvs)
    if form == "join":
        counts = metrics.send_counts(sends, rs)
    else:
        assert metrics.single_consumer_edges(_edges(rs))
        counts = metrics.send_counts_from_cells(metrics.send_cells(sends, 10**7, _edges(rs)))
    got = {(r["consumer"], r["stream"]): r.asDict()
           for r in metrics.loss(counts, rs, _keys(spark, 0, [metrics.ALL])).collect()}
    truth = _truth_loss(lossy_run, fanout=False)
    assert set(got) == set(truth)
    for key, t in truth.items():
        g = got[key]
        for k in ("sent", "received", "unique", "duplicates", "lost", "lost_start", "lost_tail", "eagain", "timeout"):
            assert g[k] == t[k], (key, k)
        assert g["lost_middle"] == t["lost"] - t["lost_start"] - t["lost_tail"]
        assert g["dropped_sender"] == t["eagain"] + t["timeout"]
        assert g["loss_ratio"] == pytest.approx(t["lost"] / t["sent"])
        # ... and the numpy truth is what the generator injected.
        assert (t["lost_start"], t["lost_tail"], g["lost_middle"]) == (37, 23, 41)
        assert (t["eagain"], t["timeout"], t["duplicates"]) == (17, 5, 11)


def test_fanout_loss_is_per_consumer_and_silent_consumer_is_all_lost(spark, fanout_run, tmp_path):
    runs, sends, recvs = _load(spark, fanout_run)
    rs = metrics.recv_summary(recvs, fanout_runs=[0])
    # Consumer 2 is expected (3 consumers subscribed) but received nothing.
    rows = metrics.loss(metrics.send_counts(sends, rs), rs, _keys(spark, 0, [0, 1, 2])).collect()
    got = {(r["consumer"], r["stream"]): r for r in rows}
    truth = _truth_loss(fanout_run, fanout=True)
    for key, t in truth.items():
        assert (got[key]["lost"], got[key]["lost_start"], got[key]["lost_tail"], got[key]["duplicates"]) == \
            (t["lost"], t["lost_start"], t["lost_tail"], t["duplicates"])
        assert t["lost_start"] == 100 and t["lost_tail"] == 3 and t["lost"] == 112
    silent = got[(2, 0)]
    assert silent["unique"] == 0 and silent["lost"] == silent["sent"] == 4000 and silent["lost_start"] == 4000


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
    got = {(r["consumer"], r["stream"]): r["reordered"] for r in metrics.reordering(recvs).collect()}
    truth = _truth_late(lossy_run.recvs, fanout=False)
    assert got == truth
    assert sum(truth.values()) >= 7   # the injected swaps (some may share a consumer's view)


def _np_percentile_hdr(values, q):
    v = np.sort(values)
    return v[max(int(np.ceil(q * len(v))) - 1, 0)]


@pytest.mark.parametrize("metric,fn", [
    ("latency_intended", lambda s, r: r["t_recv_ns"] - r["t_intended_ns"]),
    ("latency_sent", lambda s, r: r["t_recv_ns"] - r["t_sent_ns"]),
    ("stall", lambda s, r: (s["t_sent_ns"] - s["t_intended_ns"])[s["status"] == 0]),
])
def test_latency_percentiles_within_one_percent(spark, lossy_run, metric, fn):
    _, sends, recvs = _load(spark, lossy_run)
    hist = metrics.latency_histograms(metrics.latency_pairs(metrics.recv_cells(recvs, 10**8)),
                                      metrics.stall_histogram(metrics.send_cells(sends, 10**8)))
    got = {(r["stream"]): r for r in metrics.percentiles(hist).where(f"metric = '{metric}'").collect()}
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
    rates = metrics.rates_over_time(metrics.send_windows(metrics.send_cells(sends, window)),
                                    metrics.recv_windows(metrics.recv_cells(recvs, window)))
    rows = {(r["stream"], r["window"]): r for r in rates.collect()}
    s, r = lossy_run.sends, lossy_run.recvs
    for stream in (0, 1):
        ms, mr = s["stream"] == stream, r["stream"] == stream
        for col, t in (("offered", s["t_intended_ns"][ms]), ("sent", s["t_sent_ns"][ms & (s["status"] == 0)]),
                       ("received", r["t_recv_ns"][mr]), ("delivered_sent", r["t_sent_ns"][mr])):
            w, n = np.unique(t // window, return_counts=True)
            assert {int(k): int(v) for k, v in zip(w, n)} == {k[1]: v[col] for k, v in rows.items() if k[0] == stream and v[col]}, col
    depth = metrics.queue_depth(rates)
    drows = {(d["stream"], d["window"]): d["depth"] for d in depth.collect()}
    # Ground truth: in flight at the end of window w = sent by then - received by then.
    ends = (np.unique(np.concatenate([r["t_sent_ns"], r["t_recv_ns"]]) // window) + 1) * window - 1
    for stream in (0, 1, metrics.ALL):
        m = np.ones(len(r["seq"]), bool) if stream == metrics.ALL else r["stream"] == stream
        ts, tr = np.sort(r["t_sent_ns"][m]), np.sort(r["t_recv_ns"][m])
        for e in ends:
            key = (stream, int(e // window))
            if key in drows:
                assert drows[key] == np.searchsorted(ts, e, "right") - np.searchsorted(tr, e, "right")
    stats = {x["stream"]: x for x in metrics.queue_depth_stats(depth).collect()}
    d_all = np.array([v for (st, _), v in drows.items() if st == metrics.ALL])
    assert stats[metrics.ALL]["depth_max"] == d_all.max()
    assert stats[metrics.ALL]["depth_mean"] == pytest.approx(d_all.mean())
    assert stats[metrics.ALL]["queued_bytes_max"] == pytest.approx(d_all.max() * 64)


def test_multi_run_load_adds_run_column(spark, tmp_path):
    a = make_run(str(tmp_path), "a", streams=1, count=300, seed=5)
    b = make_run(str(tmp_path), "b", streams=1, count=500, seed=6, lost_tail=7)
    runs, warnings = discover_runs([str(tmp_path)])
    assert sorted(r.run_id for r in runs) == ["a", "b"] and not warnings
    recvs = load_records(spark, runs, "recvs")
    counts = {runs[r["run"]].run_id: r["count"] for r in recvs.groupBy("run").count().collect()}
    assert counts == {"a": len(a.recvs["seq"]), "b": len(b.recvs["seq"])}


def _recvs_of_seqs(spark, tmp_path, run_id, seq, rows_per_part, stream=None):
    """Receive records with exactly these seqs, in this order, as a run: of stream 0, or of
    the streams in `stream` (one per seq)."""
    import pyarrow as pa
    from .synth import RECV_SCHEMA, write_parts
    n = len(seq)
    t = np.arange(n, dtype=np.int64) * 1000 + 10**9
    d = tmp_path / f"run={run_id}"
    stream = np.zeros(n, np.int32) if stream is None else stream
    write_parts(str(d / "recvs"), pa.table({"consumer": np.zeros(n, np.int32), "stream": stream,
                "seq": seq, "t_intended_ns": t, "t_sent_ns": t, "t_recv_ns": t + 5, "size": np.full(n, 16, np.int32)},
                schema=RECV_SCHEMA), rows_per_part, "c000")
    (d / "run.json").write_text(f'{{"schema_version": 1, "run_id": "{run_id}", "status": "complete"}}')
    runs, _ = discover_runs([str(d)])
    return load_records(spark, runs, "recvs")


def test_duplicate_hidden_by_a_gap_is_still_found(spark, tmp_path):
    """A block with one duplicate and one gap has n = max - min + 1: the power sums must flag it."""
    seq = np.array([0, 1, 2, 2, 4, 5] + list(range(1024, 1030)), np.int64)   # 3 is missing, 2 twice
    recvs = _recvs_of_seqs(spark, tmp_path, "gap", seq, rows_per_part=100)
    blocks = {b["block"]: b for b in metrics.recv_blocks(recvs).collect()}
    assert blocks[0]["exact"] is False and blocks[1]["exact"] is True
    for form in ([(0, metrics.ALL, 0, 0)], metrics.recv_blocks(recvs).where("not exact")):
        summary = metrics.recv_summary_from_blocks(metrics.recv_blocks(recvs),
                                                   metrics.distinct_in_blocks(recvs, form)).collect()[0]
        assert (summary["received"], summary["unique"], summary["duplicates"]) == (12, 11, 1)


@pytest.mark.parametrize("block,missing,dups,certain", [
    (0, [7], [], True),                       # one drop
    (1, [3, 900], [], True),                  # two drops
    (2, list(range(100, 400)), [], True),     # an HWM burst: one contiguous run
    (3, [5, 50, 500], [], False),             # three scattered: needs the exact count
    (4, [7, 9], [8], False),                  # a duplicate among gaps: never called certain
    (5, [10], [11, 12], False),               # n fits "one missing", the sums do not
    (6, list(range(20, 30)), [40], False),    # a run plus a duplicate
])
def test_gaps_explained_by_power_sums(spark, tmp_path, block, missing, dups, certain):
    """Blocks with gaps skip the exact distinct pass only when their power sums prove there are
    no duplicates; whatever the flag, unique counts stay exact."""
    base = block * metrics.SEQ_BLOCK
    seq = np.array(sorted(set(range(base, base + metrics.SEQ_BLOCK)) - {base + m for m in missing})
                   + [base + d for d in dups], np.int64)
    n = len(seq)
    recvs = _recvs_of_seqs(spark, tmp_path, "gaps", seq, rows_per_part=400)
    (b,) = metrics.recv_blocks(recvs).collect()
    assert b["exact"] is certain
    summary = metrics.recv_summary(recvs).collect()[0]
    assert (summary["received"], summary["unique"], summary["duplicates"]) == (n, len(set(seq.tolist())), len(dups))


@pytest.mark.parametrize("switch_max", [metrics.SWITCH_MAX, 0])
def test_exact_pass_counts_only_the_named_blocks(spark, tmp_path, monkeypatch, switch_max):
    """The coarse filter on the block number lets the same block number of another stream
    through; the exact key must still keep the result to the named (stream, block) only,
    with or without the coarse filter (more blocks than an int switch takes)."""
    monkeypatch.setattr(metrics, "SWITCH_MAX", switch_max)
    s0 = np.array(list(range(0, 50)) + [7, 7, 9], np.int64)        # stream 0, block 0: 3 duplicates
    s1 = np.arange(0, 60, dtype=np.int64)                         # stream 1, block 0: clean
    stream = np.concatenate([np.zeros(len(s0), np.int32), np.ones(len(s1), np.int32)])
    recvs = _recvs_of_seqs(spark, tmp_path, "two", np.concatenate([s0, s1]), 40, stream=stream)
    got = [r.asDict() for r in metrics.distinct_in_blocks(recvs, [(0, metrics.ALL, 0, 0)]).collect()]
    assert got == [{"run": 0, "consumer": metrics.ALL, "stream": 0, "block": 0, "unique": 50}]
