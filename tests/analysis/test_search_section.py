"""The report opens with the capacity search's answer (zmqload/report/search_answer.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq

from zmqload.analysis.capacity import fmt_rate
from zmqload.report import search_answer as search

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli(*args, timeout=600):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "zmqload", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)


def _search(**over):
    probe_pass = {"rate": 5000, "passed": True, "confirm": False, "failed_slo": None, "breaches": [],
                  "run_dir": "/x/run=a", "figures": {"p99_us": 812.4, "achieved": 1.0, "loss_ratio": 0.0,
                                                       "queue_peak": {"messages": 40, "kernel_messages": 30,
                                                                      "libzmq_messages": 10},
                                                       "consumer_max_rss_kb": 81920}}
    probe_fail = {"rate": 5250, "passed": False, "confirm": False, "failed_slo": "backlog",
                  "breaches": [{"slo": "backlog", "text": "backlog grew by 900 messages"}], "run_dir": "/x/run=b",
                  "figures": {}}
    s = {"values": {"rcvhwm": 100}, "workload": {"pattern": "pub-sub", "transport": "tcp", "size": 256,
                                                 "consumer_delay_us": 20.0, "consumers": 1},
         "producers": 1, "converged": True, "max_sustainable_rate": 5000, "bracket": [5000, 5250],
         "failed_slo": "backlog", "generator_limited": False, "probes": [probe_pass, probe_fail]}
    s.update(over)
    return s


def test_the_sentence_restates_answer_bracket_cause_and_cost():
    text = search.sentence(_search())
    assert text.startswith("pub-sub tcp 256 B, rcvhwm=100: 5.0k/s sustainable (bracket 5.0k/s - 5.2k/s)")
    assert "above it at 5.2k/s: backlog grew by 900 messages" in text
    assert "20 us of work per message (at most 50.0k/s each" in text
    assert "p99 812 us, queue peak 40 messages (30 in kernel buffers, 10 in libzmq), consumer RSS 80 MiB" in text


def test_a_generator_limit_is_never_a_capacity():
    probe = {"rate": 50_000_000, "passed": False, "generator_limited": True, "figures": {"reached_rate": 1.4e6}}
    text = search.sentence(_search(converged=False, generator_limited=True, max_sustainable_rate=None,
                                   bracket=[None, None], probes=[probe]))
    assert "no capacity measured" in text and "reached 1.40M/s" in text and "--producers" in text
    assert "sustainable" not in text


def test_a_search_without_an_answer_says_why():
    text = search.sentence(_search(converged=False, max_sustainable_rate=None, reason="--max-probes 20 used up"))
    assert text.endswith("no answer: --max-probes 20 used up.")


def test_report_over_a_real_search_opens_with_its_answer(tmp_path):
    out = str(tmp_path / "cap")
    r = _cli("capacity", "--pattern", "push-pull", "--start-rate", "1k", "--probe-duration", "0.5",
             "--precision", "0.5", "--consumer-delay-us", "200", "--out", out, timeout=300)
    assert r.returncode == 0, (r.stdout, r.stderr)
    with open(os.path.join(out, "capacity-search.json")) as f:
        (found,) = json.load(f)["searches"]
    rate = found["max_sustainable_rate"]
    # the answer's probe, from its records alone: what was sent was received, at about the rate
    answer = [p for p in found["probes"] if p["rate"] == rate and p["passed"]][-1]
    sends = pq.ParquetDataset(sorted(
        os.path.join(answer["run_dir"], "sends", f) for f in os.listdir(os.path.join(answer["run_dir"], "sends"))
    )).read()
    recvs = pq.ParquetDataset(sorted(
        os.path.join(answer["run_dir"], "recvs", f) for f in os.listdir(os.path.join(answer["run_dir"], "recvs"))
    )).read()
    ok = sends.column("status").to_numpy() == 0
    assert len(np.unique(recvs.column("seq").to_numpy())) == int(ok.sum()) > 0
    rep = _cli("report", out, "--out", str(tmp_path / "report"), "--no-server")
    assert rep.returncode == 0, rep.stderr
    head = rep.stdout.split("\n## ", 2)
    assert head[1].startswith("Capacity search"), rep.stdout[:400]
    assert f"{fmt_rate(rate)} sustainable (bracket {fmt_rate(found['bracket'][0])} - " \
           f"{fmt_rate(found['bracket'][1])})" in head[1]
    page = (tmp_path / "report" / "index.html").read_text()
    assert "<h2>Capacity search</h2>" in page and page.count("(re-run)") >= 1


def test_the_report_judges_probes_by_the_searchs_own_p99_slo():
    docs = [{"slos": {"slo_p99_us": 5000.0}, "searches": []}, {"slos": {"slo_p99_us": None}, "searches": []},
            {"slos": {"slo_p99_us": 8000.0}, "searches": []}]
    assert search.slo_p99_us(docs) == 5000.0         # the strictest of those given
    assert search.slo_p99_us([{"slos": {}, "searches": []}]) is None
