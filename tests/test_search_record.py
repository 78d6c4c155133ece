"""capacity-search.json and a sweep's file are types: what a real search and a real sweep write
round-trips through SearchRecord / SweepRecord byte for byte and says what plain `json` reads of
it; the search is recorded after every probe, so one interrupted keeps its probes and the report
says it was cut short; a file that is not what the type says (or of the zmqload before the types)
is refused with one line naming it; the docs' tables are the types'."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import msgspec
import pytest

from conftest import report_here

from zmqload.contract.workload import SearchPlan, Slos, Workload
from zmqload.cli import records_doc
from zmqload.contract import codec
from zmqload.contract import search_record as sr
from zmqload.contract import sweep_record as swr
from zmqload.store import record_files
from zmqload.contract.states import PointStatus, SearchStatus, Slo, SweepStatus
from zmqload.errors import RecordError
from zmqload.plan.capacity_search import Outcome, Probe, find_max_rate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zmqload", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def assert_round_trips(path: str, kind: type, read) -> object:
    """The file decodes, encodes back to the same bytes, and the type's values are the ones
    plain json reads from it."""
    with open(path, "rb") as f:
        data = f.read()
    record = read(path)
    assert isinstance(record, kind)
    assert codec.encode(record) == data
    assert codec.to_builtins(record) == json.loads(data)
    return record


# -- a real search ----------------------------------------------------------------------------------
def test_an_int_in_a_float_field_is_written_as_it_reads_back():
    """A breach's measure may be an int (a backlog of 216 messages): the file says 216.0, so it
    re-encodes to the same bytes (a real search under load once wrote 216, read back 216.0)."""
    entry = sr.BreachEntry(slo=Slo.BACKLOG, measured=216, limit=164, text="backlog")
    data = codec.encode(entry)
    assert b'"measured": 216.0' in data and b'"limit": 164.0' in data
    assert codec.encode(msgspec.json.decode(data, type=sr.BreachEntry)) == data


def test_a_real_search_round_trips_byte_for_byte(tmp_path):
    out = str(tmp_path / "cap")
    done = _cli(
        "capacity",
        "--pattern",
        "push-pull",
        "--start-rate",
        "5k",
        "--probe-duration",
        "0.3",
        "--max-probes",
        "3",
        "--out",
        out,
        "--json",
    )
    assert done.returncode in (0, 1), done.stderr  # 1: no answer within 3 probes
    path = os.path.join(out, sr.RESULT_FILE)
    record = assert_round_trips(path, sr.SearchRecord, record_files.read_search)
    assert isinstance(record, sr.SearchRecord)
    assert json.loads(done.stdout) == json.load(open(path))  # --json prints the document
    assert record.status is SearchStatus.COMPLETE and record.cut_short is None
    assert record.plan == SearchPlan(start_rate=5000, probe_duration=0.3, max_probes=3)
    assert record.slos == Slos(max_loss=0.0, min_achieved=0.99)
    (search,) = record.searches
    assert 1 <= len(search.probes) <= 3 and search.probes[0].rate == 5000
    assert search.reason and not search.reason.startswith("searching")
    for probe in search.probes:
        assert (
            probe.run_dir and probe.figures is not None and probe.figures.offered_rate == probe.rate
        )
        meta = json.load(open(os.path.join(probe.run_dir, "run.json")))
        assert meta["status"] == "complete" and meta["workload"]["rate"] == probe.rate
        # the template is the probe's workload but what each probe sets
        assert codec.to_builtins(search.workload) == {
            k: v for k, v in meta["workload"].items() if k not in sr.NOT_IN_TEMPLATE
        }
        assert probe.figures.lost == meta["counters"]["lost"]
    assert list(search.bracket) == json.load(open(path))["searches"][0]["bracket"]


def _wait(what, check, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, ValueError, RecordError):  # not written yet, or being replaced
            pass
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _complete(run_json: str) -> bool:
    with open(run_json) as f:
        return json.load(f)["status"] == "complete"


def test_an_interrupted_search_keeps_its_probes_and_the_report_says_it_was_cut_short(
    tmp_path, spark
):
    out, report = str(tmp_path / "cap"), str(tmp_path / "report")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zmqload",
            "capacity",
            "--pattern",
            "push-pull",
            "--start-rate",
            "5k",
            "--probe-duration",
            "0.3",
            "--max-probes",
            "8",
            "--name",
            "cut",
            "--out",
            out,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        # the record says `running` before the first probe
        _wait("the record before the first probe", lambda: os.path.exists(sr.search_path(out)))
        _wait(
            "the second probe's run.json, complete",
            lambda: any(
                _complete(f) for f in glob.glob(os.path.join(out, "run=cut-000-p02-*", "run.json"))
            ),
        )
        # ... and the search's record written after it (a signal between the two would stop the search
        # while it judged the second probe: the record would rightly hold one probe)
        _wait(
            "the record after the second probe",
            lambda: len(record_files.read_search(out).searches[-1].probes) == 2,
        )
        assert record_files.read_search(out).status is SearchStatus.RUNNING
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert (
        len(stderr.strip().splitlines()) == 1
        and "interrupted" in stderr
        and sr.RESULT_FILE in stderr
    )
    record = assert_round_trips(sr.search_path(out), sr.SearchRecord, record_files.read_search)
    assert isinstance(record, sr.SearchRecord)
    assert record.status is SearchStatus.INTERRUPTED
    (search,) = record.searches
    assert (
        record.cut_short is search and not search.converged and search.max_sustainable_rate is None
    )
    assert [p.rate for p in search.probes] == [5000, 10000]
    assert [os.path.basename(p.run_dir or "") for p in search.probes] == [
        "run=cut-000-p01-r5000",
        "run=cut-000-p02-r10000",
    ]
    lo, hi = search.bracket
    passed = [p.rate for p in search.probes if p.passed]
    assert lo == (max(passed) if passed else None)
    assert search.reason == "cut short (interrupted) after 2 probes"

    done = report_here(out, "--out", report)
    assert done.returncode == 0, done.stderr
    page = open(os.path.join(report, "index.html")).read()
    assert "the search was cut short (interrupted) after 2 probes" in page
    if lo is not None and hi is None:
        assert "every probe passing (no failing rate yet)" in page
    assert (
        "the search was cut short (interrupted) after 2 probes" in done.stdout
    )  # the Markdown summary
    (row,) = json.load(open(os.path.join(report, "capacity.json")))["searches"]
    assert (
        row["status"] == "cut short"
        and row["max_sustainable_rate"] is None
        and row["bracket"] == [lo, hi]
    )


def test_the_search_reports_every_probe_and_searches_as_before():
    """on_probe sees the search so far after each probe that does not end it; the search itself
    is the same with or without it."""

    def probe(rate: int) -> Probe:
        return Probe(rate, rate <= 15_000)

    seen: list[tuple[int, list[int | None]]] = []
    plan = SearchPlan(start_rate=1_000, precision=0.05)
    out = find_max_rate(
        probe, plan, on_probe=lambda so_far: seen.append((len(so_far.probes), list(so_far.bracket)))
    )
    plain = find_max_rate(probe, plan)
    assert [(p.rate, p.passed, p.confirm) for p in out.probes] == [
        (p.rate, p.passed, p.confirm) for p in plain.probes
    ]
    assert out.bracket == plain.bracket and out.converged
    assert [n for n, _ in seen] == list(range(1, len(out.probes)))  # all but the confirming one
    assert seen[0][1] == [1_000, None] and seen[-1][1] == out.bracket


# -- refused with one line naming the file -------------------------------------------------------
def _synthetic_search() -> sr.SearchRecord:
    figures = sr.Figures(
        offered_rate=5000,
        throughput_msgs=5000.0,
        achieved=1.0,
        p99_us=400.0,
        queue_peak=sr.ProbeQueuePeak(messages=3, kernel_messages=1, libzmq_messages=2),
    )
    failing = sr.ProbeEntry(
        rate=10_000,
        passed=False,
        failed_slo=Slo.MAX_LOSS,
        breaches=[sr.BreachEntry(slo=Slo.MAX_LOSS, measured=0.1, limit=0.0, text="lost")],
        figures=figures,
    )
    return sr.SearchRecord(
        search_id="s",
        out="o",
        status=SearchStatus.COMPLETE,
        slos=Slos().with_search_defaults(),
        searches=[
            sr.SearchEntry(
                bracket=[5000, 10_000],
                failed_slo=Slo.MAX_LOSS,
                probes=[sr.ProbeEntry(rate=5000, passed=True, figures=figures), failing],
            )
        ],
    )


def _refused(path: str, read, field: str | None = None) -> str:
    with pytest.raises(RecordError) as caught:
        read(path)
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and path in message, message
    if field:
        assert field in message, message
    return message


@pytest.mark.parametrize("kind", ["search", "sweep"])
def test_a_file_not_of_the_type_is_refused_with_one_line_naming_it(tmp_path, kind):
    if kind == "search":
        plain = codec.to_builtins(_synthetic_search())
        read = record_files.read_search
        wrong, where = (
            (lambda d: d["searches"][0]["probes"][1].update(rate="fast")),
            "$.searches[0].probes[1].rate",
        )
    else:
        plain = codec.to_builtins(
            swr.SweepRecord(sweep_id="w", out="o", points=[swr.PointEntry(index=0)])
        )
        read = record_files.read_sweep
        wrong, where = (lambda d: d["points"][0].update(status="done")), "$.points[0].status"
    path = str(tmp_path / f"{kind}.json")

    def write(change) -> None:
        doc = json.loads(json.dumps(plain))
        change(doc)
        with open(path, "w") as f:
            json.dump(doc, f)

    write(lambda d: None)
    assert codec.to_builtins(read(path)) == plain
    write(wrong)
    _refused(path, read, where)
    write(lambda d: d.update(extra=1))
    _refused(path, read, "extra")
    write(lambda d: d.pop("schema_version"))  # as the zmqload before the types wrote it
    assert "older zmqload (no schema_version)" in _refused(path, read)
    write(lambda d: d.update(schema_version=99))
    assert "99" in _refused(path, read)
    os.remove(path)
    assert "no such file" in _refused(path, read)


def test_the_report_skips_an_old_search_file_with_its_one_line(tmp_path):
    from zmqload.report import search_answer

    old = tmp_path / "old"
    old.mkdir()
    plain = codec.to_builtins(_synthetic_search())
    del plain["schema_version"]
    (old / sr.RESULT_FILE).write_text(json.dumps(plain))
    docs, warnings = search_answer.load([str(old)])
    assert docs == [] and len(warnings) == 1 and str(old / sr.RESULT_FILE) in warnings[0]
    assert "older zmqload" in warnings[0]


def test_the_template_is_the_workload_but_what_a_probe_sets():
    names = [f.name for f in dataclasses.fields(Workload) if f.name not in sr.NOT_IN_TEMPLATE]
    assert [f.name for f in msgspec.structs.fields(sr.SearchTemplate)] == names
    w = Workload(pattern="pub-sub", rcvhwm=10, consumer_delay_us=20, out="x")
    assert sr.SearchTemplate.of(w).workload() == dataclasses.replace(
        w, rate=0, duration=None, count=None
    )
    plain = codec.to_builtins(_synthetic_search())
    plain["searches"][0]["workload"]["pattern"] = "star"
    with pytest.raises(RecordError, match=r"--pattern: got 'star'.*\$\.searches\[0\]\.workload"):
        codec.decode(json.dumps(plain).encode(), sr.SearchRecord, "x")


# -- a real sweep ---------------------------------------------------------------------------------
def test_a_real_sweep_round_trips_byte_for_byte(tmp_path):
    out = str(tmp_path / "runs")
    done = _cli(
        "sweep", "--size", "64,128", "--count", "500", "--out", out, "--name", "rt", "--quiet"
    )
    assert done.returncode == 0, done.stderr
    record = assert_round_trips(
        os.path.join(out, "sweep-rt.json"), swr.SweepRecord, record_files.read_sweep
    )
    assert isinstance(record, swr.SweepRecord)
    assert (
        record.status is SweepStatus.COMPLETE
        and record.counts.complete == 2
        and record.counts.not_run == 0
    )
    assert [p.status for p in record.points] == [PointStatus.COMPLETE] * 2
    assert [p.values for p in record.points] == [{"size": 64}, {"size": 128}]
    for point in record.points:
        assert point.summary is not None and point.summary.sent == 500
        assert json.load(open(os.path.join(point.run_dir, "run.json")))["status"] == "complete"


# -- the docs' tables are the types' --------------------------------------------------------------
@pytest.mark.parametrize("doc, module", [("CAPACITY.md", sr), ("SWEEPS.md", swr)])
def test_the_docs_list_every_field_of_the_type(doc, module):
    with open(os.path.join(ROOT, "docs", doc)) as f:
        text = f.read()
    label = sr.RESULT_FILE if module is sr else "sweep-<id>.json"
    table = re.search(
        f"<!-- {re.escape(label)} fields: generated, do not edit -->\n(.*?)<!-- end of "
        f"{re.escape(label)} fields -->",
        text,
        re.S,
    )
    assert table, f"docs/{doc} has no generated table"
    kind = sr.SearchRecord if module is sr else swr.SweepRecord
    assert table.group(1) == records_doc.markdown_table(kind), (
        f"regenerate: python -m zmqload.cli.records_doc {module.__name__.rsplit('.', 1)[1]} docs/{doc}"
    )
    assert (
        re.search(r"\| `searches\[\]\.probes\[\]\.figures\.queue_peak\.messages` \|", text)
        or module is swr
    )


def test_outcome_and_probe_records_agree_with_their_plain_views():
    probe = Probe(7, False, generator_limited=True, figures=sr.Figures(reached_rate=5.0))
    record = probe.to_record()
    assert (
        record.failed_slo is Slo.GENERATOR
        and record.figures is not None
        and record.figures.reached_rate == 5.0
    )
    assert probe.to_dict() == codec.to_builtins(record)
    assert Probe(7, False, error="x").to_record().figures is None
    outcome = Outcome(False, None, [None, 7], "generator", True, "r", [probe])
    assert outcome.to_dict()["probes"] == [probe.to_dict()]
