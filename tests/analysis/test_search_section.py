"""The report opens with the capacity search's answer (zmqload/report/search_answer.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import base64
import glob
import itertools
import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import report_here

from zmqload.analysis.verdicts import fmt_rate
from zmqload.contract.workload import Slos
from zmqload.contract import search_record as sr
from zmqload.contract.states import Slo
from zmqload.report import html, markdown, plots
from zmqload.report import search_answer as search

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _search(**over):
    """A converged search (through its type, contract/search_record.py); `over`: SearchEntry's fields."""
    probe_pass = sr.ProbeEntry(
        rate=5000,
        passed=True,
        confirm=False,
        failed_slo=None,
        breaches=[],
        run_dir="/x/run=a",
        figures=sr.Figures(
            p99_us=812.4,
            achieved=1.0,
            loss_ratio=0.0,
            queue_peak=sr.ProbeQueuePeak(messages=40, kernel_messages=30, libzmq_messages=10),
            consumer_max_rss_kb=81920,
        ),
    )
    probe_fail = sr.ProbeEntry(
        rate=5250,
        passed=False,
        confirm=False,
        failed_slo=Slo.BACKLOG,
        breaches=[sr.BreachEntry(slo=Slo.BACKLOG, text="backlog grew by 900 messages")],
        run_dir="/x/run=b",
        figures=None,
    )
    fields = {
        "values": {"rcvhwm": 100},
        "workload": sr.SearchTemplate(
            pattern="pub-sub", transport="tcp", size=256, consumer_delay_us=20.0, consumers=1
        ),
        "producers": 1,
        "converged": True,
        "max_sustainable_rate": 5000,
        "bracket": [5000, 5250],
        "failed_slo": Slo.BACKLOG,
        "generator_limited": False,
        "probes": [probe_pass, probe_fail],
    }
    fields.update(over)
    return sr.SearchEntry(**fields)


def test_the_sentence_restates_answer_bracket_cause_and_cost():
    text = search.sentence(_search())
    assert text.startswith(
        "pub-sub tcp 256 B, rcvhwm=100: 5.0k/s sustainable (bracket 5.0k/s - 5.2k/s)"
    )
    assert "above it at 5.2k/s: backlog grew by 900 messages" in text
    assert "20 µs of work per message (at most 50.0k/s each" in text
    assert (
        "p99 812 µs, queue peak 40 messages (30 in kernel buffers, 10 in libzmq), consumer RSS 80 MiB"
        in text
    )


def test_a_generator_limit_is_never_a_capacity():
    probe = sr.ProbeEntry(
        rate=50_000_000,
        passed=False,
        generator_limited=True,
        figures=sr.Figures(reached_rate=1.4e6),
    )
    text = search.sentence(
        _search(
            converged=False,
            generator_limited=True,
            max_sustainable_rate=None,
            bracket=[None, None],
            probes=[probe],
        )
    )
    assert "no capacity measured" in text and "reached 1.40M/s" in text and "--producers" in text
    assert "sustainable" not in text


def test_a_search_without_an_answer_says_why():
    text = search.sentence(
        _search(converged=False, max_sustainable_rate=None, reason="--max-probes 20 used up")
    )
    assert text.endswith("no answer: --max-probes 20 used up.")


def test_the_report_judges_probes_by_the_searchs_own_p99_slo():
    docs = [
        sr.SearchRecord(slos=Slos(slo_p99_us=5000.0)),
        sr.SearchRecord(slos=Slos(slo_p99_us=None)),
        sr.SearchRecord(slos=Slos(slo_p99_us=8000.0)),
    ]
    assert search.slo_p99_us(docs) == 5000.0  # the strictest of those given
    assert search.slo_p99_us([sr.SearchRecord(slos=Slos())]) is None


# -- the report's capacity-search section over real searches ------------------------------------
@pytest.fixture(scope="module")
def searched(spark, tmp_path_factory):
    """Two real searches and one report over both (real libzmq, real local
    Spark): push-pull whose consumer does 200 us of work per message, RCVHWM 10 and 1000 (two
    combinations); and a search stopped by --max-probes 2 before it could confirm an answer."""
    root = tmp_path_factory.mktemp("searched")
    out, stopped = str(root / "cap"), str(root / "stopped")
    # the two searches at once (the stopped one is two light probes of 20 messages): a consumer doing
    # 200 us a message tops out near 5k/s, so from 2k in 0.3 s probes (600+ messages each) the
    # search ramps, fails, bisects to 50% and confirms in a few probes per combination
    env = dict(os.environ, PYTHONPATH=ROOT)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "zmqload", "capacity", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for args in (
            [
                "--pattern",
                "push-pull",
                "--rcvhwm",
                "10,1000",
                "--start-rate",
                "2k",
                "--probe-duration",
                "0.3",
                "--precision",
                "0.5",
                "--consumer-delay-us",
                "200",
                "--out",
                out,
            ],
            [
                "--pattern",
                "push-pull",
                "--start-rate",
                "100",
                "--probe-duration",
                "0.2",
                "--max-probes",
                "2",
                "--out",
                stopped,
            ],
        )
    ]
    (r, r_stopped) = [(p.communicate(timeout=600), p.returncode) for p in procs]
    assert r[1] == 0, r[0]
    assert r_stopped[1] == 1, r_stopped[0]  # one search found no answer
    report = str(root / "report")
    rep = report_here(out, stopped, "--out", report)  # in this process, on the session's Spark
    assert rep.returncode == 0, rep.stderr
    docs = {d: json.load(open(os.path.join(d, "capacity-search.json"))) for d in (out, stopped)}
    with open(os.path.join(report, "capacity.json")) as f:
        written = json.load(f)
    with open(os.path.join(report, "index.html")) as f:
        page = f.read()
    with open(
        os.path.join(report, "summary.md")
    ) as f:  # the report's tables (stdout: its short summary)
        markdown = f.read()
    return {
        "docs": docs,
        "out": out,
        "stopped": stopped,
        "stdout": rep.stdout,
        "markdown": markdown,
        "page": page,
        "capacity": written,
        "summary": pq.read_table(os.path.join(report, "summary.parquet")).to_pylist(),
    }


def _records(run_dir, kind):
    files = sorted(glob.glob(os.path.join(run_dir, kind, "*.parquet")))
    return {k: np.asarray(v) for k, v in pq.ParquetDataset(files).read().to_pydict().items()}


def _p(values, q):
    """Nearest-rank percentile: the smallest value with at least q of the values at or below it."""
    values = np.sort(values)
    return values[max(int(np.ceil(q * len(values))) - 1, 0)]


def _markdown_rows(stdout):
    """The Markdown search table as {heading: cell} per row."""
    lines = stdout.split("### " + search.TABLE_TITLE, 1)[1].strip().splitlines()
    table = list(itertools.takewhile(lambda ln: ln.startswith("|"), lines))  # up to the runs table
    heads = [h.strip() for h in table[0].strip("|").split("|")]
    return [dict(zip(heads, (c.strip() for c in ln.strip("|").split("|")))) for ln in table[2:]]


def test_the_search_table_restates_each_answer_probes_run(searched):
    """capacity.json's search table: per combination its HWM, answer, bracket and failed SLO as
    capacity-search.json says; p99 / p99.9, queue peak and consumer RSS as the answer probe's
    run.json says; p99 within the histogram's 1% of numpy over the probe's receive records (the
    intended time recomputed from run.json's schedule), and Spark's p99 for that run too."""
    doc = searched["docs"][searched["out"]]
    rows = [r for r in searched["capacity"]["searches"] if r["search_id"] == doc["search_id"]]
    assert [r["keys"] for r in rows] == [{"rcvhwm": 10}, {"rcvhwm": 1000}]
    spark_p99 = {
        r["run"]: r["latency_intended_p99_us"] for r in searched["summary"] if r["consumer"] == -1
    }
    for row, s in zip(rows, doc["searches"]):
        assert (
            row["status"] == "converged"
            and row["setting"] == f"push-pull tcp {s['workload']['size']} B"
        )
        assert row["max_sustainable_rate"] == s["max_sustainable_rate"] == s["bracket"][0] > 0
        assert row["bracket"] == s["bracket"] and row["bracket"][1] > row["bracket"][0]
        assert row["failed_slo"] == s["failed_slo"] is not None
        probe = [p for p in s["probes"] if p["rate"] == s["max_sustainable_rate"] and p["passed"]][
            -1
        ]
        assert (
            probe["confirm"]
            and row["answer_run"] == os.path.basename(probe["run_dir"])[len("run=") :]
        )
        meta = json.load(open(os.path.join(probe["run_dir"], "run.json")))
        lat = meta["summary"]["latency_intended_ns"]
        assert row["p99_us"] == pytest.approx(lat["p99"] / 1e3, abs=0.051)
        assert row["p99_9_us"] == pytest.approx(lat["p99.9"] / 1e3, abs=0.051)
        peak = meta["summary"]["queue_peak"]
        assert (
            row["queue_peak_messages"],
            row["queue_peak_kernel_messages"],
            row["queue_peak_libzmq_messages"],
        ) == (peak["messages"], peak["kernel_messages"], peak["libzmq_messages"])
        assert row["consumer_max_rss_kb"] == max(c["max_rss_kb"] for c in meta["consumers"]) > 0
        # numpy straight over the Parquet: latency from the schedule's intended time
        recvs = _records(probe["run_dir"], "recvs")
        schedule = meta["schedule"]
        intended = schedule["t0_ns"] + recvs["seq"] * 1_000_000_000 // schedule["rate_per_producer"]
        exact = _p(recvs["t_recv_ns"] - intended, 0.99) / 1e3
        assert len(recvs["seq"]) >= 100, "too few messages for a p99"
        sends = _records(probe["run_dir"], "sends")  # a pass lost nothing: every ok send arrived
        assert len(np.unique(recvs["seq"])) == int((sends["status"] == 0).sum())
        assert row["p99_us"] == pytest.approx(exact, rel=0.0101)
        assert spark_p99[row["answer_run"]] == pytest.approx(exact, rel=0.0101)


def test_a_search_without_an_answer_has_no_capacity_in_the_table(searched):
    doc = searched["docs"][searched["stopped"]]
    (s,) = doc["searches"]
    assert not s["converged"] and s["max_sustainable_rate"] is None and len(s["probes"]) == 2
    (row,) = [r for r in searched["capacity"]["searches"] if r["search_id"] == doc["search_id"]]
    assert row["status"] == "no answer" and row["max_sustainable_rate"] is None
    assert row["reason"] == s["reason"] and "--max-probes 2" in row["reason"]
    assert row["bracket"] == s["bracket"] and row["p99_us"] is None and row["answer_run"] is None
    (md,) = [r for r in _markdown_rows(searched["markdown"]) if r["rcvhwm"] == "-"]
    assert md["max sustainable rate (/s per producer)"] == f"no capacity: {s['reason']}"
    assert md["bracket [highest pass - lowest fail]"] == " - ".join(
        "-" if b is None else f"{b:,}" for b in s["bracket"]
    )


def test_html_and_markdown_show_the_same_table(searched):
    """The table in the page and in summary.md: each combination's figures, as capacity.json has them."""
    md = _markdown_rows(searched["markdown"])
    assert len(md) == 3 and [r["rcvhwm"] for r in md] == ["10", "1000", "-"]
    page = searched["page"]
    section = page.split("<h3>" + search.TABLE_TITLE + "</h3>", 1)[1].split("</table>", 1)[0]
    for row, cells in zip(searched["capacity"]["searches"], md):
        if row["status"] != "converged":
            continue
        assert cells["max sustainable rate (/s per producer)"] == f"{row['max_sustainable_rate']:,}"
        assert (
            cells["bracket [highest pass - lowest fail]"]
            == f"{row['bracket'][0]:,} - {row['bracket'][1]:,}"
        )
        assert cells["failed SLO above it"] == row["failed_slos"]  # as the runs table says it
        assert cells["p99 at it (µs)"] == f"{row['p99_us']:,.0f}"
        assert cells["p99.9 at it (µs)"] == f"{row['p99_9_us']:,.0f}"
        assert cells["queue peak, msgs (kernel / libzmq)"] == (
            f"{row['queue_peak_messages']:,} ({row['queue_peak_kernel_messages']:,} / "
            f"{row['queue_peak_libzmq_messages']:,})"
        )
        assert cells["consumer peak RSS"] == f"{row['consumer_max_rss_kb'] / 1024:,.1f} MiB"
        html_row = "".join(
            f"<td>{cells[h]}</td>"
            for h in (
                "max sustainable rate (/s per producer)",
                "bracket [highest pass - lowest fail]",
                "failed SLO above it",
                "p99 at it (µs)",
                "p99.9 at it (µs)",
                "queue peak, msgs (kernel / libzmq)",
                "consumer peak RSS",
            )
        )
        assert html_row in section
        assert f"href='#{row['answer_run']}'" in section and f"id='{row['answer_run']}'" in page
    # one pair of probe plots per searched combination, and the answers first
    assert page.count('alt="probes of push-pull tcp') == 3
    head = searched["stdout"].split("\n## ", 2)
    assert head[1].startswith("Capacity search")
    for s in searched["docs"][searched["out"]]["searches"]:
        assert (
            f"{fmt_rate(s['max_sustainable_rate'])} sustainable (bracket {fmt_rate(s['bracket'][0])} - "
            f"{fmt_rate(s['bracket'][1])})" in head[1]
        )
    assert page.count("(re-run)") >= 2


# -- the table and the plots on hand-made searches ---------------------------------------------------
def test_a_generator_limited_search_is_no_capacity_in_the_table():
    probe = sr.ProbeEntry(
        rate=50_000_000,
        passed=False,
        generator_limited=True,
        run_dir="/x/run=g",
        figures=sr.Figures(
            offered_rate=50_000_000, throughput_msgs=1.4e6, reached_rate=1.4e6, p99_us=90.0
        ),
    )
    s = _search(
        converged=False,
        generator_limited=True,
        max_sustainable_rate=None,
        bracket=[None, 50_000_000],
        failed_slo=Slo.GENERATOR,
        probes=[probe],
        reason="the load generator could not keep its schedule",
    )
    row = search.table_row(s, "g")
    assert (
        row["status"] == "generator limited"
        and row["max_sustainable_rate"] is None
        and row["p99_us"] is None
    )
    (line,) = [ln for ln in markdown.search_table([row]) if ln.startswith("| pub-sub")]
    assert (
        "| 100 | no capacity: the load generator was the limit (add --producers) | - - 50,000,000 | generator |"
        in line
    )
    assert "<td class='bad'>no capacity: the load generator was the limit" in "".join(
        html.search_table([row])
    )
    assert _png(plots.search_probes(s, None, "generator limited"))


def test_several_producers_say_the_total_beside_the_rate_per_producer():
    row = search.table_row(_search(producers=4))
    assert search.cells(row)["max_sustainable_rate"] == "5,000 (20,000 in total)"
    assert (
        row["p99_us"] == 812.4
        and row["queue_peak_kernel_messages"] == 30
        and row["consumer_max_rss_kb"] == 81920
    )


def _png(b64):
    data = base64.b64decode(b64)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return data


def _probe(rate, passed, p99, confirm=False):
    return sr.ProbeEntry(
        rate=rate,
        passed=passed,
        confirm=confirm,
        figures=sr.Figures(offered_rate=rate, throughput_msgs=rate * 0.99, p99_us=p99),
    )


@pytest.mark.parametrize(
    "probes, bracket",
    [
        ([_probe(10_000, True, 800)], [10_000, None]),  # one probe
        ([_probe(10_000, True, 800), _probe(20_000, False, 9_000)], [10_000, 20_000]),  # two
        (
            [_probe(6_484, True, 800), _probe(6_484, False, 2_500, confirm=True)],
            [6_484, 6_484],
        ),  # width 0
        (
            [
                _probe(r, r < 3_300_000, 200.0 * r / 1e6)
                for r in (1e6, 2e6, 4e6, 3e6, 3.5e6, 3.25e6)
            ],
            [3_250_000, 3_500_000],
        ),
        (
            [_probe(r, r <= 3, 0.0 if r <= 3 else 3_000) for r in (8, 4, 2, 3)],
            [3, 4],
        ),  # tiny, a p99 of 0
    ],
)
def test_probe_plots_draw_every_shape_of_search(probes, bracket):
    """Rendered and checked by eye in development (docs/REPORT.md); here: a PNG of the usual size."""
    data = _png(plots.search_probes(_search(probes=probes, bracket=bracket), 1000.0, "t"))
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert 900 <= width <= 1100 and 300 <= height <= 450


def test_no_probe_with_figures_gives_no_plot():
    assert (
        plots.search_probes(
            _search(probes=[sr.ProbeEntry(rate=5, passed=False, error="x", figures=None)]),
            None,
            "t",
        )
        is None
    )


@pytest.mark.parametrize(
    "x, text",
    [
        (1_234_567, "1.23M"),
        (7071, "7.07k"),
        (2.5, "2.5"),
        (3e9, "3G"),
        (1000, "1k"),
        (999.6, "1k"),
        (0.1, "0.1"),
        (12_000_000_000_000, "12T"),
    ],
)
def test_rates_are_si_numbers_without_long_decimals(x, text):
    assert plots.si_short(x) == text


@pytest.mark.parametrize(
    "lo, hi", [(1.2, 8000), (4052, 10374), (6000, 16000), (1.9, 6.4), (1.5e6, 2.4e7), (0.06, 0.3)]
)
def test_log_ticks_are_round_and_inside_the_axis(lo, hi):
    ticks = plots._log_ticks(lo, hi)
    assert 2 <= len(ticks) <= 7 and all(lo <= t <= hi for t in ticks) and ticks == sorted(ticks)
    mantissas = {round(t / 10 ** math.floor(math.log10(t) + 1e-9), 6) for t in ticks}
    assert mantissas <= {1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8}, ticks
