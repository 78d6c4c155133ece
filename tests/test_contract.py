"""The contracts in zmqload.contract against their other statements: the engine's C
constants (csrc/zl_wire.h, exported by the compiled engine) and docs/RECORDS.md."""

from __future__ import annotations

import ast
import enum
import os
import random
import re
import subprocess
import sys
import typing

from zmqload import _engine
from zmqload.contract import records, wire

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _public_values(module) -> dict:
    """Every public constant and enum a module defines (enums as {member: value})."""
    out = {}
    for name, value in vars(module).items():
        if name.startswith("_") or getattr(value, "__module__", module.__name__) != module.__name__:
            continue
        if isinstance(value, type) and issubclass(value, enum.Enum):
            out[name] = {member.name: member.value for member in value}
        elif name.isupper():
            out[name] = value
    return out


def test_wire_contract_equals_engine_constants():
    engine = {
        "HEADER_SIZE": _engine.HEADER_SIZE,
        "SEQ_BITS": _engine.SEQ_BITS,
        "SEQ_MASK": _engine.SEQ_MASK,
        "WIRE_SEQ_BITS": _engine.WIRE_SEQ_BITS,
        "MAX_SEQ": (1 << _engine.WIRE_SEQ_BITS) - 1,
        "WARMUP_STREAM": _engine.WARMUP_STREAM,
        "MAX_STREAMS": _engine.MAX_STREAMS,
        "MAX_TOPIC_WIDTH": _engine.MAX_TOPIC_WIDTH,
        "FOREIGN_STREAM": _engine.FOREIGN_STREAM,
        "LOOKBACK_NS": _engine.LOOKBACK_NS,
        "FUTURE_NS": _engine.FUTURE_NS,
        "MAX_RATE": _engine.MAX_RATE,
        "SendStatus": {
            "OK": _engine.STATUS_OK,
            "EAGAIN": _engine.STATUS_EAGAIN,
            "TIMEOUT": _engine.STATUS_TIMEOUT,
            "ERROR": _engine.STATUS_ERROR,
        },
        "SendMode": {word.upper(): code for word, code in _engine.SEND_MODES.items()},
        "SEND_MODES": tuple(_engine.SEND_MODES),
    }
    # One equality over every name: a constant added on one side only fails here too.
    assert _public_values(wire) == engine


def test_the_header_and_its_check_are_the_same_in_c_and_python():
    """zl_put_header (through the engine) and contract/wire.header agree on every field's edges."""
    rng = random.Random(5)
    edges = [0, 1, 63, 0xFFFE, 0xFFFF]
    for _ in range(3000):
        stream = rng.choice(edges + [rng.getrandbits(16)])
        seq = rng.choice([0, 1, wire.MAX_SEQ, rng.getrandbits(40)])
        t = rng.choice([0, -1, 2**63 - 1, -(2**63), rng.getrandbits(63)])
        key = rng.choice([0, 2**64 - 1, rng.getrandbits(64)])
        assert _engine.header(stream, seq, t, key) == wire.header(stream, seq, t, key), (
            stream,
            seq,
            t,
            key,
        )
    assert wire.check(0, 0, 0) == 0x5A5A  # all zeros never carry their own check


def test_send_mode_type_lists_the_send_modes():
    assert typing.get_args(wire.SendModeWord) == wire.SEND_MODES


def _documented_columns(kind: str) -> list[tuple[str, str]]:
    """(column, Parquet type) rows of the table under "## {kind}/" in docs/RECORDS.md."""
    with open(os.path.join(ROOT, "docs", "RECORDS.md")) as f:
        text = f.read()
    section = text.split(f"\n## {kind}/", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\w+) \| (\w+) \|", section, re.MULTILINE)
    return [row for row in rows if row != ("column", "Parquet")]


def test_record_schemas_match_records_md():
    for kind, schema in records.SCHEMAS.items():
        assert _documented_columns(kind) == [
            (name, str(kind_.arrow)) for name, kind_ in schema.columns
        ], kind


def test_schema_version_matches_records_md():
    with open(os.path.join(ROOT, "docs", "RECORDS.md")) as f:
        documented = re.search(r"Schema version: \*\*(\d+)\*\*", f.read())
    assert documented and int(documented.group(1)) == records.SCHEMA_VERSION


def test_schema_forms_agree():
    schema = records.Schema.of(
        run=records.INT32,
        ok=records.BOOL,
        role=records.STRING,
        depth=records.FLOAT64,
        status=records.INT8,
        seq=records.INT64,
    )
    assert (
        schema.ddl == "run INT, ok BOOLEAN, role STRING, depth DOUBLE, status TINYINT, seq BIGINT"
    )
    assert schema.names == ("run", "ok", "role", "depth", "status", "seq")
    assert [(f.name, str(f.type)) for f in schema.arrow] == [
        ("run", "int32"),
        ("ok", "bool"),
        ("role", "string"),
        ("depth", "double"),
        ("status", "int8"),
        ("seq", "int64"),
    ]


def test_analysis_imports_only_the_pure_data_modules_of_zmqload():
    """zmqload.analysis runs where the engine may not be built (a Spark driver, a laptop
    reading someone's runs): it may import zmqload.contract, zmqload.errors and the workload
    model the run record holds (zmqload.contract.workload, with the pattern table it checks against),
    the reader of run.json (zmqload.store.record_files: the codec on a file) and the queue's replay
    (zmqload.measure.queue_replay: pure numpy, the run's and the report's one definition), nothing
    else; and with the engine missing, all of it imports."""
    allowed = (
        "zmqload.contract",
        "zmqload.errors",
        "zmqload.analysis",
        "zmqload.contract.workload",
        "zmqload.contract.patterns",
        "zmqload.store.record_files",
        "zmqload.measure.queue_replay",
    )
    package = os.path.join(ROOT, "zmqload", "analysis")
    seen = set()
    for name in sorted(os.listdir(package)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(package, name)) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = (
                    "zmqload.analysis" if node.level == 1 else "zmqload" if node.level == 2 else ""
                )
                target = (
                    f"{base}.{node.module}" if base and node.module else base or node.module or ""
                )
                # `from ..measure import queue_replay` imports the module zmqload.measure.queue_replay
                modules = [
                    f"{target}.{a.name}"
                    if os.path.exists(os.path.join(ROOT, *target.split("."), a.name + ".py"))
                    else target
                    for a in node.names
                ]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            seen.update((name, m) for m in modules if m == "zmqload" or m.startswith("zmqload."))
    outside = {(file, m) for file, m in seen if not m.startswith(allowed)}
    assert not outside
    assert ("runs.py", "zmqload.contract.records") in seen  # the walk sees relative imports
    no_engine = (
        "import sys; sys.modules['zmqload._engine'] = None\n"
        "import zmqload.analysis.pipeline, zmqload.analysis.verdicts, zmqload.contract.run_record, zmqload.store.record_files\n"
        "assert 'zmqload.runner.parquet_writer' not in sys.modules and 'zmqload.runner' not in sys.modules"
    )
    done = subprocess.run(
        [sys.executable, "-c", no_engine], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr


def test_summary_parquet_columns_are_typed_once():
    """summary.parquet's own columns take their types from analysis.pipeline.SUMMARY, not from
    their names; the verdict columns follow them."""
    from zmqload.analysis.pipeline import SUMMARY
    from zmqload.analysis.summary_row import SummaryRow
    from zmqload.report.outputs import summary_table

    table = summary_table(
        [SummaryRow(run="r", consumer=-1, stream=-1, size="64", loss_ratio=0, fanout=True)]
    )
    assert table.schema.names[: len(SUMMARY.names)] == list(SUMMARY.names)
    for field, (name, kind) in zip(table.schema, SUMMARY.columns):
        assert field.type == kind.arrow, name
    assert table.column("loss_ratio").to_pylist() == [0.0] and table.column(
        "fanout"
    ).to_pylist() == [True]
