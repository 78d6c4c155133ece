"""`--out URI` against a real S3 API server on loopback (moto's, a subprocess, like any S3 a user
runs): a run records into a staging directory and its run directory is copied to the URI when it
ends (complete, interrupted or failed); the report copies runs at a URI here first. Every outcome
is checked with pyarrow reading the bucket directly, sharing nothing with zmqload."""

from __future__ import annotations

import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import conftest
from conftest import end_with_the_test, free_ports, moto_server

pytest.importorskip(
    "moto.server",
    reason="the S3 API server of the tests: pip install 'moto[server]' (the test extra)",
)

KEY, SECRET = "AKIAZMQLOADTEST", "fake-secret-Zq81"  # moto takes any credentials


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """`python -m moto.server` on a free loopback port, until the module's tests are done."""
    log = open(tmp_path_factory.mktemp("moto") / "server.log", "w")
    port, server = moto_server(log)
    yield port
    server.terminate()
    server.wait(timeout=10)
    log.close()


def filesystem(port: int) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(
        access_key=KEY,
        secret_key=SECRET,
        endpoint_override=f"127.0.0.1:{port}",
        scheme="http",
        allow_bucket_creation=True,
        allow_bucket_deletion=True,
    )


@pytest.fixture
def bucket(s3):
    """A new empty bucket of the server's: (its name, the server's port)."""
    name = f"runs-{uuid.uuid4().hex[:12]}"
    filesystem(s3).create_dir(name)
    return name, s3


def uri(bucket: tuple[str, int], prefix: str = "runs", credentials: bool = False) -> str:
    name, port = bucket
    user = f"{KEY}:{SECRET}@" if credentials else ""
    return f"s3://{user}{name}/{prefix}?endpoint_override=127.0.0.1:{port}&scheme=http"


def user_env(tmp_path, credentials: bool = True) -> dict[str, str]:
    """A user's environment: the staging directory under the test's own TMPDIR, fake AWS
    credentials (or none: they are in the URI), no EC2 metadata lookups."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        TMPDIR=str(tmp_path / "tmp"),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_DEFAULT_REGION="us-east-1",
    )
    if credentials:
        env.update(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET)
    os.makedirs(env["TMPDIR"], exist_ok=True)
    return env


def zmqload(
    *args: str, env: dict[str, str], timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zmqload", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def staged(tmp_path) -> list[str]:
    return glob.glob(str(tmp_path / "tmp" / "zmqload-out-*"))


def uploaded_runs(bucket: tuple[str, int], prefix: str = "runs") -> list[str]:
    name, port = bucket
    found = filesystem(port).get_file_info(
        pafs.FileSelector(f"{name}/{prefix}", allow_not_found=True)
    )
    return sorted(i.path for i in found if i.base_name.startswith("run="))


def read_from_s3(port: int, run_path: str, kind: str):
    fs = filesystem(port)
    parts = sorted(
        i.path
        for i in fs.get_file_info(pafs.FileSelector(f"{run_path}/{kind}"))
        if i.path.endswith(".parquet")
    )
    assert parts, f"no {kind} parts at {run_path}"
    return pq.ParquetDataset(parts, filesystem=fs).read()


def run_json_from_s3(port: int, run_path: str) -> dict:
    with filesystem(port).open_input_stream(f"{run_path}/run.json") as f:
        return json.loads(f.read())


def distinct_messages(table) -> int:
    return table.group_by(["stream", "seq"]).aggregate([]).num_rows


def test_run_records_reach_the_bucket_whole_and_staging_goes(bucket, tmp_path):
    # the credentials in the URI only: they must not be printed, nor stored in run.json
    target = uri(bucket, credentials=True)
    done = zmqload(
        "run",
        "--count",
        "20k",
        "--rate",
        "0",
        "--json",
        "--out",
        target,
        env=user_env(tmp_path, credentials=False),
    )
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr and KEY not in done.stdout + done.stderr
    summary = json.loads(done.stdout)
    (run_path,) = uploaded_runs(bucket)
    name, port = bucket
    shown = uri(bucket)
    assert summary["run_dir"] == shown.replace("/runs?", f"/runs/{os.path.basename(run_path)}?")
    assert not staged(tmp_path), "the staging copy is removed once the copy is checked"

    record = run_json_from_s3(port, run_path)
    assert record["status"] == "complete" and record["workload"]["out"] == shown
    assert SECRET not in json.dumps(record) and KEY not in json.dumps(record)
    sends, recvs = read_from_s3(port, run_path, "sends"), read_from_s3(port, run_path, "recvs")
    accepted = sends.filter(pc.equal(sends["status"], 0))
    assert accepted.num_rows == summary["sent"] == record["counters"]["sent"] == 20_000
    assert distinct_messages(accepted) == 20_000
    assert recvs.num_rows == summary["received"] == record["counters"]["received"]
    assert (
        distinct_messages(recvs)
        == summary["unique_received"]
        == record["counters"]["unique_received"]
    )


@pytest.fixture
def silent_endpoint():
    """A loopback port that accepts connections and never answers (a hung server): the S3 client's
    waits are all that bound the check."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.parametrize(
    "case",
    [
        "missing bucket",
        "unreachable endpoint",
        "silent endpoint",
        "unknown scheme",
        "malformed query",
    ],
)
def test_an_unusable_uri_is_refused_before_the_run(s3, tmp_path, case, request):
    port = {
        "unreachable endpoint": lambda: free_ports(1)[0],
        "silent endpoint": lambda: request.getfixturevalue("silent_endpoint"),
    }.get(case, lambda: s3)()
    target = {
        "missing bucket": f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/r?endpoint_override=127.0.0.1:{port}"
        "&scheme=http",
        "unreachable endpoint": f"s3://b/r?endpoint_override=127.0.0.1:{port}&scheme=http",
        "silent endpoint": f"s3://b/r?endpoint_override=127.0.0.1:{port}&scheme=http",
        "unknown scheme": "nosuchfs://b/r",
        "malformed query": f"s3://b/r?endpoint_override=127.0.0.1:{port}&retries=2",
    }[case]
    started = time.monotonic()
    done = zmqload("run", "--count", "1000", "--out", target, env=user_env(tmp_path))
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("zmqload run: error: --out: "), (
        done.stderr
    )
    assert "accepted: " in done.stderr and "Traceback" not in done.stderr
    assert took < 30, took
    assert not staged(tmp_path) and not glob.glob(str(tmp_path / "tmp" / "*")), (
        "nothing may be written"
    )


def test_the_commands_that_write_as_they_go_refuse_a_uri_and_a_cluster_run_takes_one(
    bucket, tmp_path
):
    from zmqload.contract.workload import Workload

    env, target = user_env(tmp_path), uri(bucket)
    for args, flag in (
        (("sweep", "--rate", "1k,2k", "--count", "100"), "--out"),
        (("capacity", "--probe-duration", "1"), "--out"),
        (("scenario", "run", "linger-tail"), "--out"),
    ):
        done = zmqload(*args, "--out", target, env=env)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.count("\n") == 1 and f"error: {flag}: " in done.stderr, done.stderr
    # a cluster's tasks copy their records to the URI themselves (runner/task_out.py)
    Workload(master="spark://127.0.0.1:7077", count=100, out=target).validate()
    report = zmqload("report", target, "--master", "spark://127.0.0.1:7077", env=env)
    assert (
        report.returncode == 2 and report.stderr.count("\n") == 1 and "--master" in report.stderr
    ), report.stderr
    assert not uploaded_runs(bucket) and not staged(tmp_path)


def wait_for_schedule(tmp_path, timeout: float = 60) -> int:
    """t0 of the run being staged under the test's TMPDIR, once it is set."""
    return conftest.wait_for_schedule(
        str(tmp_path / "tmp" / "zmqload-out-*" / "run=*" / "run.json"), timeout
    )


def test_a_copy_that_fails_keeps_the_local_copy_and_fails_the_command(bucket, tmp_path):
    name, port = bucket
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zmqload",
            "run",
            "--rate",
            "10k",
            "--duration",
            "3",
            "--quiet",
            "--out",
            uri(bucket),
        ],
        env=user_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    end_with_the_test(proc)
    wait_for_schedule(tmp_path)
    filesystem(port).delete_dir(name)  # the bucket goes while the run records
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    (kept,) = glob.glob(str(tmp_path / "tmp" / "zmqload-out-*" / "run=*"))
    assert f"records are complete in {kept}" in stderr and uri(bucket).split("?")[0] in stderr
    with open(os.path.join(kept, "run.json")) as f:
        record = json.load(f)
    assert record["status"] == "complete" and any("copy to" in w for w in record["warnings"])
    recvs = pq.ParquetDataset(sorted(glob.glob(os.path.join(kept, "recvs", "*.parquet")))).read()
    assert recvs.num_rows == record["counters"]["received"] > 20_000


def test_an_interrupted_run_is_copied_and_readable(bucket, tmp_path):
    name, port = bucket
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zmqload",
            "run",
            "--rate",
            "20k",
            "--duration",
            "60",
            "--quiet",
            "--out",
            uri(bucket),
        ],
        env=user_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    end_with_the_test(proc)  # not left running 60 s if the test fails before the signal
    t0_ns = wait_for_schedule(tmp_path)
    while time.monotonic_ns() < t0_ns + 1_500_000_000:  # 1.5 s of the schedule: ~30k messages
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C at a terminal: the whole process group
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert (
        "Traceback" not in stderr and f"what was recorded is at s3://{name}/runs/run=" in stderr
    ), stderr
    (run_path,) = uploaded_runs(bucket)
    record = run_json_from_s3(port, run_path)
    assert record["status"] == "interrupted"
    sends, recvs = read_from_s3(port, run_path, "sends"), read_from_s3(port, run_path, "recvs")
    assert sends.num_rows == record["counters"]["attempted"] > 10_000
    assert (
        distinct_messages(sends.filter(pc.equal(sends["status"], 0))) == record["counters"]["sent"]
    )
    assert distinct_messages(recvs) == record["counters"]["unique_received"] > 10_000
    assert not staged(tmp_path)


@pytest.mark.slow  # a real local Spark (tests/conftest.py)
def test_report_from_a_uri_gives_the_figures_of_the_records(bucket, tmp_path, monkeypatch, spark):
    pytest.importorskip("pyspark")
    env = user_env(tmp_path)
    for i in range(2):  # a parent of two runs, as a local runs/ folder
        done = zmqload(
            "run",
            "--count",
            "20k",
            "--rate",
            "0",
            "--run-name",
            f"r{i}",
            "--quiet",
            "--out",
            uri(bucket),
            env=env,
        )
        assert done.returncode == 0, done.stderr
    # the report in this process, on the session's Spark (no JVM of its own), in the user's
    # environment: its credentials, and its TMPDIR for the copy of the runs
    for name in [name for name in os.environ if name.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(tempfile, "tempdir", env["TMPDIR"])
    report = conftest.report_here(uri(bucket), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    said = [line for line in report.stderr.splitlines() if "copied" in line]
    assert len(said) == 1 and uri(bucket) in said[0] and "MB" in said[0], report.stderr
    assert not glob.glob(str(tmp_path / "tmp" / "zmqload-report-in-*")), (
        "the report's copy is removed after it"
    )
    rows = {
        r["run"]: r
        for r in pq.read_table(tmp_path / "report" / "summary.parquet").to_pylist()
        if r["stream"] == -1 and r["consumer"] == -1
    }
    assert sorted(rows) == ["r0", "r1"]
    _, port = bucket
    for run_path in uploaded_runs(bucket):
        sends, recvs = read_from_s3(port, run_path, "sends"), read_from_s3(port, run_path, "recvs")
        row = rows[run_path.rsplit("run=", 1)[1]]
        assert row["sent"] == sends.filter(pc.equal(sends["status"], 0)).num_rows == 20_000
        assert row["received"] == recvs.num_rows and row["unique"] == distinct_messages(recvs)
        assert row["t_first_send_ns"] == pc.min(sends["t_sent_ns"]).as_py()
        assert row["t_last_recv_ns"] == pc.max(recvs["t_recv_ns"]).as_py()


def spark_cluster() -> None:
    """A local-cluster needs pyspark and Java (make test installs one)."""
    import shutil

    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("Spark needs a Java runtime (make test installs one)")


def staged_tasks(tmp_path) -> list[str]:
    return glob.glob(str(tmp_path / "tmp" / "zmqload-task-*"))


def run_entries(port: int, run_path: str) -> set[str]:
    return {i.base_name for i in filesystem(port).get_file_info(pafs.FileSelector(run_path))}


@pytest.mark.slow  # a local-cluster: two executor JVMs
def test_a_placed_run_s_tasks_copy_their_records_to_the_uri(bucket, tmp_path):
    """Each task stages its worker on its executor's host and copies its files up as it ends; the
    driver copies them down, reconciles, and copies the rest (run.json last). The bucket read with
    pyarrow alone holds every message; the credentials, in the URI only, reach the tasks in their
    spec and appear nowhere; no staging directory is left, the driver's nor the tasks'."""
    spark_cluster()
    env = {**user_env(tmp_path, credentials=False), "SPARK_LOCAL_IP": "127.0.0.1"}
    done = zmqload(
        "run",
        "--master",
        "local-cluster[2,1,1024]",
        "--placement",
        "spread",
        "--count",
        "20000",
        "--rate",
        "20k",
        "--json",
        "--out",
        uri(bucket, credentials=True),
        env=env,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr and KEY not in done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert summary["status"] == "complete" and summary["lost"] == 0
    (run_path,) = uploaded_runs(bucket)
    _, port = bucket
    record = run_json_from_s3(port, run_path)
    assert record["status"] == "complete" and record["workload"]["out"] == uri(bucket)
    assert SECRET not in json.dumps(record) and KEY not in json.dumps(record)
    placed = {w["worker"]: w for w in record["placement"]["workers"]}
    assert (
        set(placed) == {"p0", "c0"} and placed["p0"]["executor_id"] != placed["c0"]["executor_id"]
    )
    sends, recvs = read_from_s3(port, run_path, "sends"), read_from_s3(port, run_path, "recvs")
    accepted = sends.filter(pc.equal(sends["status"], 0))
    assert (
        accepted.num_rows
        == distinct_messages(accepted)
        == summary["sent"]
        == record["counters"]["sent"]
        == 20_000
    )
    assert recvs.num_rows == summary["received"] == record["counters"]["received"]
    assert (
        distinct_messages(recvs)
        == summary["unique_received"]
        == record["counters"]["unique_received"]
        == 20_000
    )
    # what the driver read and removed (the maps) is not left at the URI
    assert {"run.json", "sends", "recvs"} <= run_entries(
        port, run_path
    ) and "_maps" not in run_entries(port, run_path)
    # no staging directory is left (the Spark session's log config stays, made once per user)
    assert not staged(tmp_path) and not staged_tasks(tmp_path)
    assert [
        name for name in os.listdir(tmp_path / "tmp") if not name.startswith("zmqload-log4j2-")
    ] == []


@pytest.mark.slow  # a local-cluster: two executor JVMs
def test_a_killed_executor_with_a_uri_fails_the_run_and_the_others_records_reach_it(
    bucket, tmp_path
):
    """SIGKILL to c0's executor JVM mid-run: c0's task never copies its records (they stay in its
    staging directory on its host), the run ends failed naming c0 and what did not reach the URI,
    and the bucket holds a run.json saying so and p0's records, readable with pyarrow alone."""
    from test_spark_placement import _descendants, wait_for_records

    spark_cluster()
    env = {**user_env(tmp_path), "SPARK_LOCAL_IP": "127.0.0.1"}
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zmqload",
            "run",
            "--master",
            "local-cluster[2,1,1024]",
            "--duration",
            "20",
            "--rate",
            "10k",
            "--json",
            "--out",
            uri(bucket),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    end_with_the_test(run)
    deadline, victim = time.monotonic() + 150, None
    while victim is None and time.monotonic() < deadline and run.poll() is None:
        time.sleep(1)
        for path in glob.glob(str(tmp_path / "tmp" / "zmqload-out-*" / "run=*" / "run.json")):
            placement = json.load(open(path)).get("placement") or {}
            victim = next(
                (w["executor_id"] for w in placement.get("workers", []) if w["worker"] == "c0"),
                None,
            )
    assert victim is not None, (
        run.communicate()[1][-2000:] if run.poll() is not None else "no placement"
    )
    # the run is sending: both tasks' first records are in their staging directories
    wait_for_records(run, str(tmp_path / "tmp" / "zmqload-task-*" / "run=*"))
    executor = [
        pid
        for pid in _descendants(run.pid)
        if f"\0--executor-id\0{victim}\0" in open(f"/proc/{pid}/cmdline").read()
    ]
    assert len(executor) == 1, executor
    os.kill(executor[0], signal.SIGKILL)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        "zmqload run: error: worker c0 ended (its Spark task failed: an executor was lost)"
    ), err
    assert "c0's records did not reach s3://" in last and "p0's" not in last, last
    got = json.loads(out)
    (run_path,) = uploaded_runs(bucket)
    _, port = bucket
    record = run_json_from_s3(port, run_path)
    assert record["status"] == "failed" and "c0's records did not reach" in record["error"]
    assert {w["worker"] for w in record["placement"]["workers"]} == {"p0", "c0"}
    sends = read_from_s3(port, run_path, "sends")
    assert sends.num_rows == record["counters"]["attempted"] == got["attempted"] > 0
    assert (
        distinct_messages(sends.filter(pc.equal(sends["status"], 0)))
        == record["counters"]["sent"]
        == got["sent"]
    )
    assert "recvs" not in run_entries(port, run_path) and record["counters"]["received"] == 0
    assert got["expected"] == sum(
        got[f]
        for f in (
            "delivered",
            "drained",
            "dropped_start",
            "dropped_mid",
            "dropped_tail",
            "stranded",
            "unknown",
        )
    )
    # the driver's staging copy went; c0's stays where its task recorded it (its host's $TMPDIR)
    assert not staged(tmp_path)
    (kept,) = staged_tasks(tmp_path)
    assert glob.glob(os.path.join(kept, "run=*", "_spill", "c0")) or glob.glob(
        os.path.join(kept, "run=*", "recvs")
    )
