"""--size as a distribution and --payload (issue 27): the size of the message with seq s is entry
s mod the table's length. Checked with no zmqload code: the uniform table drawn again here with
numpy, the files read here, the records read with pyarrow, a user's plain pyzmq PULL reading the
payload behind the header (docs/RECORDS.md's 16 bytes), and the report (real local Spark) held to
run.json. Loopback only, bounded in count and time."""

from __future__ import annotations

import glob
import json
import os
import struct
import threading

import numpy as np
import pyarrow.parquet as pq
import pytest
import zmq
from conftest import free_ports, recv_until, report_here, zmqload_cli
from test_parts import Forwarder

UNIFORM_SEED, UNIFORM_ENTRIES = 27, 65536  # docs/RECORDS.md "Each message's size"


def _run(*args: str) -> dict:
    done = zmqload_cli("run", "--json", *args, timeout=180)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _records(run_dir: str, kind: str) -> dict[str, np.ndarray]:
    table = pq.read_table(os.path.join(run_dir, kind))
    return {name: table.column(name).to_numpy() for name in table.column_names}


def _run_json(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "run.json")) as f:
        return json.load(f)


def _check_run(got: dict, table: np.ndarray, parts: int = 1) -> tuple[dict, dict]:
    """Every received message has its (stream, seq)'s size, and run.json's byte counts are the records'."""
    run_dir = got["run_dir"]
    recvs, sends = _records(run_dir, "recvs"), _records(run_dir, "sends")
    assert got["lost"] == 0 and got["received"] == len(recvs["seq"]) > 0
    np.testing.assert_array_equal(recvs["size"], table[recvs["seq"] % len(table)])
    np.testing.assert_array_equal(sends["size"], table[sends["seq"] % len(table)])
    ok = sends["status"] == 0
    record = _run_json(run_dir)
    assert (
        record["counters"]["bytes_sent"]
        == got["bytes_sent"]
        == int(sends["size"][ok].sum()) * parts
    )
    assert (
        record["counters"]["bytes_received"]
        == got["bytes_received"]
        == int(recvs["size"].sum()) * parts
    )
    facts = record["summary"]["sizes"]
    assert (facts["min"], facts["max"], facts["entries"]) == (
        int(table.min()),
        int(table.max()),
        len(table),
    )
    assert facts["mean"] == pytest.approx(float(table.mean()), rel=1e-12)
    assert got["throughput_mb"] == pytest.approx(
        got["throughput_msgs"] * got["bytes_received"] / got["received"] / 1e6, rel=1e-9
    )
    assert got["size_mismatches"] == 0
    return record, recvs


@pytest.fixture(scope="module")
def uniform_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("uniform")
    return _run("--size", "64:1024", "--count", "20000", "--rate", "20k", "--out", str(out))


def test_uniform_sizes_follow_the_rule_and_the_bytes_are_the_records(uniform_run):
    table = np.random.Generator(np.random.PCG64(UNIFORM_SEED)).integers(64, 1025, UNIFORM_ENTRIES)
    record, recvs = _check_run(uniform_run, table)
    assert (
        record["summary"]["sizes"]["seed"] == UNIFORM_SEED
        and record["workload"]["size"] == "64:1024"
    )
    assert (
        recvs["size"].min() < 128 and recvs["size"].max() > 960
    )  # the range is used, not one size


def test_a_file_of_sizes_with_parts(tmp_path):
    sizes = [16, 100, 4096, 17, 70000, 64]
    path = tmp_path / "sizes.txt"
    path.write_text(
        "# sizes of the test\n"
        + "\n".join(map(str, sizes[:3]))
        + "\n\n"
        + "\n".join(map(str, sizes[3:]))
    )
    got = _run(
        "--size",
        f"@{path}",
        "--parts",
        "3",
        "--count",
        "6000",
        "--rate",
        "20k",
        "--out",
        str(tmp_path / "r"),
    )
    _check_run(got, np.array(sizes), parts=3)
    assert got["frame_mismatches"] == 0


@pytest.mark.parametrize("pattern", ["pub-sub", "proxy", "req-rep"])
def test_uniform_sizes_through_each_pattern(tmp_path, pattern):
    got = _run(
        "--pattern",
        pattern,
        "--size",
        "16:300",
        "--count",
        "3000",
        "--rate",
        "10k",
        "--out",
        str(tmp_path),
    )
    _check_run(
        got, np.random.Generator(np.random.PCG64(UNIFORM_SEED)).integers(16, 301, UNIFORM_ENTRIES)
    )


def test_a_users_pull_gets_the_header_then_each_record(tmp_path):
    records = [
        b"alpha",
        b"",
        b"a longer record, with spaces and \x00 bytes",
        b"x" * 3000,
        b"\xff\xfe",
    ]
    path = tmp_path / "payload.bin"
    path.write_bytes(b"\n".join(records) + b"\n")
    context = zmq.Context()
    pull = context.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVTIMEO, 90_000)
    (port,) = free_ports(1)
    pull.bind(f"tcp://127.0.0.1:{port}")
    messages: list[bytes] = []
    ended = threading.Event()

    def read() -> None:
        try:
            while True:
                messages.append(recv_until(pull, ended))
                pull.setsockopt(zmq.RCVTIMEO, 3000)
        except zmq.Again:
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        got = _run(
            "--role",
            "producer",
            "--producers-connect",
            f"tcp://127.0.0.1:{port}",
            "--payload",
            str(path),
            "--count",
            "3000",
            "--rate",
            "20k",
            "--out",
            str(tmp_path / "r"),
        )
        reader.join(timeout=60)
    finally:
        ended.set()  # a reader still waiting (the run failed) lets go of the socket within 0.1 s
        reader.join(timeout=10)
        assert not reader.is_alive(), "the reader did not end: its socket is not closed under it"
        pull.close(0)
        context.term()
    seqs = []
    for message in messages:
        (word,) = struct.unpack_from("<Q", message, 0)
        seq = word & ((1 << 40) - 1)  # docs/RECORDS.md: seq is the low 40 bits
        seqs.append(seq)
        assert message[16:] == records[seq % len(records)], seq
    assert seqs == list(range(3000)) and got["sent"] == 3000
    assert got["bytes_sent"] == sum(len(m) for m in messages)
    assert _run_json(got["run_dir"])["summary"]["sizes"]["spec"] == "payload payload.bin"


class Cutter:
    """What a user's device does wrong: cuts every 7th data message to its first 16 bytes (the
    header), and counts the ones it changed."""

    def __init__(self) -> None:
        self.cut = self.data = 0

    def __call__(self, frames: list[bytes]) -> list[bytes]:
        (word,) = struct.unpack_from("<Q", frames[0], 0)
        if (word >> 48) & 0xFF == 0xFF:  # a warm-up (docs/RECORDS.md: stream 0xFF)
            return frames
        self.data += 1
        if self.data % 7 or len(frames[0]) == 16:
            return frames
        self.cut += 1
        return [frames[0][:16]]


def test_a_device_that_cuts_messages_is_caught_by_the_rule(tmp_path):
    cutter = Cutter()
    device = Forwarder(change=cutter)  # a user's PULL|PUSH forwarder, in a thread
    try:
        got = _run(
            "--size",
            "17:200",
            "--producers-connect",
            device.producers,
            "--consumers-connect",
            device.consumers,
            "--count",
            "3500",
            "--rate",
            "20k",
            "--out",
            str(tmp_path),
        )
    finally:
        device.stop()
    assert got["received"] == 3500 and got["lost"] == 0 and cutter.cut > 400
    assert got["size_mismatches"] == cutter.cut


@pytest.mark.slow  # a Spark session or many runs: out of make test-fast, in make test
def test_the_report_shows_the_bytes_and_mb_s_of_run_json(spark, uniform_run, tmp_path):
    run_dir = uniform_run["run_dir"]
    report = str(tmp_path / "report")
    done = report_here(run_dir, "--out", report)  # in this process, on the session's Spark
    assert done.returncode == 0, done.stderr
    rows = pq.read_table(os.path.join(report, "summary.parquet")).to_pylist()
    total = next(r for r in rows if r["consumer"] == -1 and r["stream"] == -1)
    recvs = _records(run_dir, "recvs")
    assert total["size"] == "64:1024"
    assert total["bytes_received"] == uniform_run["bytes_received"] == int(recvs["size"].sum())
    assert total["bytes_sent"] == uniform_run["bytes_sent"]
    assert total["recv_mb_s"] == pytest.approx(uniform_run["throughput_mb"], rel=1e-9)


def _write(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize(
    "args, flag",
    [
        (("--size", "1024:64"), "--size"),
        (("--size", "8:64"), "--size"),
        (("--size", "64:300000000"), "--size"),
        (("--size", "64:"), "--size"),
        (("--size", "15"), "--size"),
        (("--size", "@{missing}"), "--size"),
        (("--size", "@{empty}"), "--size"),
        (("--size", "@{words}"), "--size"),
        (("--size", "@{small}"), "--size"),
        (("--payload", "{missing}"), "--payload"),
        (("--payload", "{empty}"), "--payload"),
        (("--payload", "{dir}"), "--payload"),
        (("--payload", "{words}", "--size", "128"), "--size"),
    ],
)
def test_bad_sizes_are_one_line_exit_2_nothing_left(tmp_path, args, flag):
    files = {
        "missing": str(tmp_path / "missing.txt"),
        "empty": _write(tmp_path, "empty.txt", b"\n"),
        "words": _write(tmp_path, "words.txt", b"64\nsixty\n"),
        "small": _write(tmp_path, "small.txt", b"64\n8\n"),
        "dir": str(tmp_path),
    }
    out = tmp_path / "out"
    done = zmqload_cli(
        "run", *(a.format(**files) for a in args), "--count", "10", "--out", str(out)
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"error: {flag}: got" in lines[0] and "accepted" in lines[0], (
        done.stderr
    )
    assert not out.exists() or not any(out.iterdir())
    assert not glob.glob(str(tmp_path / "**" / "run.json"), recursive=True)


def test_every_surface_takes_the_same_sizes(tmp_path):
    """One option in the table: the Python API, a sweep's axis and a sweep file (TOML), and the
    command line's parser give the same values, refused alike."""
    from zmqload import ConfigError, Workload
    from zmqload.cli import build_parser
    from zmqload.plan import sweep as sweeps

    sizes = tmp_path / "sizes.txt"
    sizes.write_text("64\n128\n")
    assert Workload(size="64:1024").size == "64:1024" and Workload(size="1k").size == 1000
    assert build_parser().parse_args(["run", "--size", f"@{sizes}"]).size == f"@{sizes}"
    assert build_parser().parse_args(["sweep", "--size", "64,64:1024"]).size == [64, "64:1024"]
    toml = tmp_path / "sweep.toml"
    toml.write_text(
        f'[sweep]\ncount = 2000\nout = "{tmp_path / "out"}"\n[axes]\nsize = [64, "64:1024", "@{sizes}"]\n'
    )
    spec = sweeps.load_toml(str(toml))
    assert [p.workload.size for p in sweeps.plan(spec).points] == [64, "64:1024", f"@{sizes}"]
    with pytest.raises(ConfigError, match="--size: got '1024:64'"):
        Workload(size="1024:64").validate()


def test_a_service_echoing_requests_of_varying_sizes_is_matched_by_echo(tmp_path):
    """--size A:B against a user's REP that echoes each request (plain pyzmq): every answer begins
    with its request's header, whatever table entry the request was sent from."""
    from test_one_side import UserRep

    echo = UserRep(echo=True)
    done = zmqload_cli(
        "run",
        "--json",
        "--pattern",
        "req-rep",
        "--role",
        "producer",
        "--producers-connect",
        echo.endpoint,
        "--rate",
        "2k",
        "--count",
        "600",
        "--size",
        "32:512",
        "--out",
        str(tmp_path),
    )
    echo.join()
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    (run_dir,) = glob.glob(os.path.join(str(tmp_path), "run=*"))
    replies = pq.read_table(os.path.join(run_dir, "replies")).column("echoed").to_numpy()
    assert echo.requests == [(0, seq) for seq in range(600)]
    assert len(replies) == 600 and int(replies.sum()) == 600
    assert got["service"]["echoed"] == 600 and got["service"]["by_order"] == 0
