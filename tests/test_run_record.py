"""run.json is one type: every record a real run, a failed run and `zmqload repair` write
round-trips through RunRecord byte for byte, says the same as plain `json` reads of it, is
refused with one line when it is not what the type says, and docs/RECORDS.md's table is the
type's."""

from __future__ import annotations

import json
import os
import re

import pytest

import fault_table as ft
import zmqload
from zmqload.contract.workload import Slos
from zmqload.cli import records_doc
from zmqload.contract import codec
from zmqload.contract import run_record as rr
from zmqload.store import record_files
from zmqload.contract.states import DrainEnd, RunStatus
from zmqload.errors import ExitStatus, RecordError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def assert_round_trips(run_dir: str) -> rr.RunRecord:
    """The file decodes, encodes back to the same bytes, and the type's values are the ones
    plain json reads from it."""
    path = os.path.join(run_dir, "run.json")
    with open(path, "rb") as f:
        data = f.read()
    record = record_files.read_run(run_dir)
    assert codec.encode(record) == data
    assert codec.to_builtins(record) == json.loads(data)
    return record


def test_records_md_lists_every_field_of_the_type():
    with open(os.path.join(ROOT, "docs", "RECORDS.md")) as f:
        text = f.read()
    table = re.search(
        r"<!-- run.json fields: generated, do not edit -->\n(.*?)<!-- end of run.json fields -->",
        text,
        re.S,
    )
    assert table, "docs/RECORDS.md has no generated run.json table"
    assert table.group(1) == records_doc.markdown_table(rr.RunRecord), (
        "regenerate: python -m zmqload.cli.records_doc run_record docs/RECORDS.md"
    )


def test_real_runs_round_trip(tmp_path):
    out = str(tmp_path)
    push = zmqload.run(pattern="push-pull", count=20_000, out=out, run_name="push")
    fan = zmqload.run(
        pattern="pub-sub", consumers=2, count=20_000, rate=40_000, out=out, run_name="fan"
    )
    record = assert_round_trips(push.run_dir)
    assert record.status is RunStatus.COMPLETE and record.counters is not None
    assert record.counters.unique_received == push.unique_received == 20_000
    assert (
        record.workload.count == 20_000
        and record.drain is not None
        and record.drain.ended is DrainEnd.COMPLETE
    )
    fanned = assert_round_trips(fan.run_dir)
    assert fanned.fanout and fanned.counters is not None and fanned.counters.expected == 40_000
    assert set(fanned.streams[0].fates_by_consumer or {}) == {"0", "1"}


def test_the_slos_a_run_was_judged_by_are_in_its_record(tmp_path):
    """`run --max-loss 0 --slo-p99-us ...` records the SLOs (the report judges by them)."""
    done = ft.subprocess.run(
        [
            ft.sys.executable,
            "-m",
            "zmqload",
            "run",
            "--count",
            "5000",
            "--out",
            str(tmp_path),
            "--run-name",
            "gated",
            "--max-loss",
            "0",
            "--slo-p99-us",
            "900000",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    record = assert_round_trips(os.path.join(str(tmp_path), "run=gated"))
    assert record.slos == Slos(max_loss=0.0, slo_p99_us=900000.0)


@pytest.mark.slow  # a Spark session or many runs: out of make test-fast, in make test
def test_a_failed_and_a_repaired_run_round_trip(tmp_path):
    ft.kill_worker(str(tmp_path / "killed"), "c0")
    record = assert_round_trips(str(tmp_path / "killed" / "run=kill-c0"))
    assert (
        record.status is RunStatus.FAILED
        and record.salvaged is not None
        and record.salvaged.died == ["c0"]
    )

    run_dir, _ = ft.kill_everything(str(tmp_path / "everything"))
    assert record_files.read_run(run_dir).status is RunStatus.RUNNING
    done = ft.repair(run_dir)
    assert done.returncode == 0, done.stderr
    repaired = assert_round_trips(run_dir)
    assert repaired.status is RunStatus.FAILED and repaired.counters is not None


@pytest.mark.parametrize(
    "change, says",
    [
        (
            lambda m: m.update(schema_version=9),
            "unknown record schema version 9 (this zmqload reads version 1)",
        ),
        (lambda m: m.pop("schema_version"), "not a zmqload run (no schema_version)"),
        (
            lambda m: m["counters"].update(sent="many"),
            "Expected `int`, got `str` - at `$.counters.sent`",
        ),
        (lambda m: m.update(colour="blue"), "Object contains unknown field `colour`"),
        (lambda m: m.update(status="finished"), "Invalid enum value 'finished' - at `$.status`"),
        (lambda m: m["workload"].update(size=3), "--size: got 3"),
    ],
)
def test_a_record_that_is_not_one_is_refused_in_one_line(tmp_path, change, says):
    result = zmqload.run(count=2_000, out=str(tmp_path), run_name="r")
    path = os.path.join(result.run_dir, "run.json")
    with open(path) as f:
        meta = json.load(f)
    change(meta)
    with open(path, "w") as f:
        json.dump(meta, f)
    with pytest.raises(RecordError) as caught:
        record_files.read_run(result.run_dir)
    message = str(caught.value)
    assert message.startswith(path + ": ") and says in message and "\n" not in message, message
    assert caught.value.exit_status is ExitStatus.BAD_INPUT


# Where the package may parse JSON that is not a record: each with why.
JSON_READERS_NOT_RECORDS = {
    "zmqload/contract/codec.py": "the codec itself (msgspec)",
    "zmqload/contract/control.py": "control messages between the controller and its workers",
    "zmqload/runner/spec.py": "a worker's spec on its standard input",
    "zmqload/cli/scenario.py": "the scenarios' outcomes, a child zmqload's --json (one per library)",
    "zmqload/runner/clocks.py": "where a Spark task runs, told the driver before the start (run.json takes it "
    "through the codec)",
    "zmqload/report/server.py": "the warm report server's requests and answers",
    "zmqload/analysis/class_archive.py": "the java and Spark the class archive was made for",
    "zmqload/scenarios/seed_000.py": "the lines a scenario's plain pyzmq script prints",
    "zmqload/scenarios/seed_002.py": "the line a scenario's plain pyzmq script prints",
}


def test_records_are_read_only_through_their_codec():
    """No module reads run.json (or any record) as a dict: JSON is parsed only by the codec
    and by the readers of what is not a record, and the record's file name is stated once."""
    import ast

    readers, names = set(), set()
    for directory, _, files in os.walk(os.path.join(ROOT, "zmqload")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, ROOT)
            with open(path) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr in ("load", "loads")
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "json"
                ):
                    readers.add(rel)
                if isinstance(node, ast.Constant) and node.value == rr.RUN_FILE:
                    names.add(rel)
    assert readers <= set(JSON_READERS_NOT_RECORDS), sorted(readers - set(JSON_READERS_NOT_RECORDS))
    assert names == {"zmqload/contract/run_record.py"}, names
