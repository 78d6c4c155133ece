"""--curve (issue 27): CURVE on every data socket of a run. Checked against what shares no code with
zmqload: numpy over the run's Parquet records for the accounting, plain pyzmq peers for the
encryption (a NULL or wrongly keyed subscriber hears nothing where a plain one hears the run),
and a user's CURVE server written with zmq.auth's key files, which checks every header. Loopback
only, bounded in count and time."""

from __future__ import annotations

import glob
import json
import os
import shutil
import threading
import time

import numpy as np
import pytest
import zmq
import zmq.auth
import zmq.utils.z85
from conftest import (
    check_identity,
    end_with_the_test,
    free_ports,
    read_table,
    recv_until,
    zmqload_cli,
)
from test_devices import Device, proxy_thread
from test_consumer_side import UserPush, header
from test_one_side import UserPull

import zmqload
from zmqload import ConfigError, Workload
from zmqload.runner.preflight import load_libzmq, read_public_key

pytestmark = pytest.mark.skipif(
    not zmq.has("curve"), reason="pyzmq's libzmq has no CURVE: no peer to check with"
)


def run_dir_of(out: str) -> str:
    (run_dir,) = glob.glob(os.path.join(out, "run=*"))
    return run_dir


def security_of(run_dir: str) -> str:
    with open(os.path.join(run_dir, "run.json")) as f:
        return json.load(f)["security"]


@pytest.fixture
def certificates(tmp_path):
    """A user's server certificate as zmq.auth writes it: (server.key, server.key_secret)."""
    (tmp_path / "certificates").mkdir()
    return zmq.auth.create_certificates(str(tmp_path / "certificates"), "server")


# -- the accounting, with numpy over the records --------------------------------------------------
@pytest.mark.parametrize(
    "pattern, transport",
    [
        ("push-pull", "tcp"),  # the consumers bind: CURVE servers
        ("pub-sub", "tcp"),  # the producers bind
        ("proxy", "tcp"),  # zmqload's own proxy binds both ends
        ("push-pull", "ipc"),
        ("req-rep", "tcp"),  # round trips: the reply travels back through the same CURVE session
    ],
)
def test_a_curve_run_accounts_for_every_message(tmp_path, pattern, transport):
    producers, consumers, count = (1, 1, 3000) if pattern == "req-rep" else (2, 2, 20_000)
    # HWMs without limit: a stall of this shared machine must not drop (what is checked is the accounting)
    hwms = {
        "sndhwm": 0,
        "rcvhwm": 0,
        **({"proxy_sndhwm": 0, "proxy_rcvhwm": 0} if pattern == "proxy" else {}),
    }
    result = zmqload.run(
        pattern=pattern,
        transport=transport,
        producers=producers,
        consumers=consumers,
        count=count,
        rate=20_000,
        curve="on",
        out=str(tmp_path),
        **hwms,
    )
    check_identity(result)
    copies = consumers if result.workload["pattern"] in ("pub-sub", "proxy") else 1
    assert result.status == "complete" and result.lost == 0 and result.sent == producers * count
    assert result.received == producers * count * copies
    run_dir = result.run_dir
    assert security_of(run_dir) == "curve"
    with open(os.path.join(run_dir, "run.json")) as f:
        assert "secret" not in f.read().lower()
    sends, recvs = read_table(run_dir, "sends"), read_table(run_dir, "recvs")
    assert (
        len(sends) == result.sent
        and int((sends.column("status").to_numpy() == 0).sum()) == result.sent
    )
    assert len(recvs) == result.received
    keys = recvs.column("stream").to_numpy().astype(np.int64) << 48 | recvs.column("seq").to_numpy()
    expected = np.repeat(np.arange(producers, dtype=np.int64) << 48, count) + np.tile(
        np.arange(count), producers
    )
    if copies == 1:
        assert np.array_equal(np.sort(keys), expected)
    else:
        per_consumer = recvs.column("consumer").to_numpy()
        for consumer in range(consumers):
            assert np.array_equal(np.sort(keys[per_consumer == consumer]), expected), consumer


def test_without_curve_the_record_says_null(tmp_path):
    result = zmqload.run(count=1000, rate=10_000, out=str(tmp_path))
    assert result.lost == 0 and security_of(result.run_dir) == "null"


def test_info_says_whether_the_engine_has_curve():
    done = zmqload_cli("info", "--json")
    assert (
        done.returncode == 0 and json.loads(done.stdout)["curve"] is True
    )  # the curve runs in this file need it


def test_the_summary_says_curve(tmp_path):
    done = zmqload_cli(
        "run", "--curve", "on", "--count", "1000", "--rate", "10k", "--out", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    assert "push-pull over tcp with CURVE, 64 B" in done.stdout


@pytest.mark.skipif(
    shutil.which("java") is None, reason="Spark needs a Java runtime (make test installs one)"
)
def test_the_keys_reach_tasks_of_a_spark_stage(tmp_path, monkeypatch):
    """--master: the keys travel in each task's spec through Spark (issue 28 will hand them to other hosts)."""
    pytest.importorskip("pyspark")
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")  # no traffic leaves loopback
    done = zmqload_cli(
        "run",
        "--master",
        "local[2]",
        "--curve",
        "on",
        "--count",
        "20000",
        "--rate",
        "20k",
        "--sndhwm",
        "0",
        "--rcvhwm",
        "0",
        "--json",
        "--out",
        str(tmp_path),
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["status"] == "complete" and got["sent"] == 20_000 and got["lost"] == 0
    run_dir = run_dir_of(str(tmp_path))
    assert security_of(run_dir) == "curve"
    seqs = read_table(run_dir, "recvs").column("seq").to_numpy()
    assert np.array_equal(np.sort(seqs), np.arange(20_000))


def test_the_keys_are_made_per_run_and_a_connecting_worker_gets_no_server_secret(tmp_path):
    """What each worker is handed (its WorkerSpec, through the JSON it reads on standard input): the
    binding side the server's secret, the connecting side only the server's public key and its own pair."""
    from zmqload.contract.ids import Role, WorkerId
    from zmqload.runner.channel import ControlServer, new_endpoint
    from zmqload.runner.controller import Controller
    from zmqload.runner.curve import run_keys
    from zmqload.runner.spec import WorkerSpec

    class Recorded:  # a launcher that starts nothing: what the controller hands each worker
        def __init__(self) -> None:
            self.specs: list[WorkerSpec] = []

        def start(self, spec: WorkerSpec) -> None:
            self.specs.append(WorkerSpec.from_json(spec.to_json()))

    w = Workload(curve="on").validate()
    lib = load_libzmq(w)
    keys, again = run_keys(w, lib), run_keys(w, lib)
    assert keys is not None and again is not None and keys != again
    assert keys.server_secret is not None and keys.server_public != keys.client_public
    endpoint, directory = new_endpoint()
    server, launcher = ControlServer(endpoint), Recorded()
    try:
        controller = Controller(w, str(tmp_path), "keys", server, launcher, directory, curve=keys)
        controller.start_worker(WorkerId(Role.CONSUMER, 0), ["tcp://127.0.0.1:*"])
        controller.start_worker(WorkerId(Role.PRODUCER, 0), [])
    finally:
        server.close()
        shutil.rmtree(directory, ignore_errors=True)
    binder, connecter = launcher.specs
    assert binder.curve == keys
    assert connecter.curve is not None and connecter.curve.server_secret is None
    assert (
        connecter.curve.server_public,
        connecter.curve.client_public,
        connecter.curve.client_secret,
    ) == (keys.server_public, keys.client_public, keys.client_secret)
    # what libzmq takes: 40 Z85 characters, checked by pyzmq's own decoder
    assert all(
        len(zmq.utils.z85.decode(k)) == 32
        for k in (keys.server_public, keys.server_secret, keys.client_public)
    )


# -- the traffic really is encrypted ----------------------------------------------------------------
class Listener:
    """A subscriber of the user's in a thread, connected to a PUB of zmqload's: plain (NULL), or a
    CURVE client of `server_key` (its own fresh key pair); counts what it hears until stop() (at the
    latest at the end of the test: tests/conftest.py). The thread closes its socket and context."""

    def __init__(self, endpoint: str, server_key: bytes | None = None):
        self.context = zmq.Context()
        self.sock = self.context.socket(zmq.SUB)
        self.sock.linger = 0
        if server_key is not None:
            public, secret = zmq.curve_keypair()
            self.sock.curve_serverkey, self.sock.curve_publickey, self.sock.curve_secretkey = (
                server_key,
                public,
                secret,
            )
        self.sock.subscribe(b"")
        self.sock.connect(endpoint)
        self.heard = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._listen, daemon=True, name="Listener._listen")
        end_with_the_test(self.stop)
        self.thread.start()

    def _listen(self) -> None:
        try:
            while not self.done.is_set():
                if self.sock.poll(50):
                    self.sock.recv()
                    self.heard += 1
        finally:
            self.sock.close()
            self.context.term()

    def stop(self) -> int:
        self.done.set()
        self.thread.join(5)
        assert not self.thread.is_alive(), "the Listener's thread did not end within 5 s"
        return self.heard


@pytest.mark.parametrize("curve", ["off", "on"])
def test_a_peer_without_the_runs_key_hears_nothing(tmp_path, curve):
    """zmqload's PUB binds a known port; a plain subscriber and one keyed to another server connect to
    it beside zmqload's own subscribers. Without CURVE the plain one hears the run (the check can see
    traffic); with it, neither hears a message while zmqload's subscribers get every one."""
    (port,) = free_ports(1)
    endpoint = f"tcp://127.0.0.1:{port}"
    plain, wrong_key = Listener(endpoint), Listener(endpoint, server_key=zmq.curve_keypair()[0])
    try:
        result = zmqload.run(
            pattern="pub-sub",
            producers_bind=endpoint,
            consumers=2,
            count=20_000,
            rate=20_000,
            sndhwm=0,
            rcvhwm=0,
            curve=curve,
            out=str(tmp_path),
        )
    finally:
        heard = plain.stop(), wrong_key.stop()
    check_identity(result)
    assert result.lost == 0 and result.received == 2 * 20_000
    if curve == "off":
        assert heard[0] > 10_000 and heard[1] == 0, (
            heard
        )  # a CURVE client of a NULL server fails too
    else:
        assert heard == (0, 0)
        assert security_of(result.run_dir) == "curve"


# -- a user's CURVE server, its key given as a file -------------------------------------------------
@pytest.mark.parametrize("form", ["certificate", "bare line"])
def test_producers_alone_into_a_users_curve_pull_every_header_once(tmp_path, certificates, form):
    public_file, secret_file = certificates
    server_public, server_secret = zmq.auth.load_certificate(secret_file)
    if form == "bare line":
        public_file = str(tmp_path / "server.z85")
        with open(public_file, "w") as f:
            f.write(server_public.decode() + "\n")
    user = UserPull(
        "tcp://127.0.0.1:*", curve_secret_key=server_secret, idle_ms=8000
    ).start()  # a loaded machine starts slowly
    done = zmqload_cli(
        "run",
        "--json",
        "--role",
        "producer",
        "--producers-connect",
        user.endpoint,
        "--producers",
        "2",
        "--rate",
        "20k",
        "--count",
        "10000",
        "--curve",
        "on",
        "--curve-server-key",
        public_file,
        "--out",
        str(tmp_path / "runs"),
    )
    user.join()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sent"] == 20_000
    assert user.short == 0
    assert sorted(user.seen) == [(stream, seq) for stream in (0, 1) for seq in range(10_000)]
    assert security_of(run_dir_of(str(tmp_path / "runs"))) == "curve"


# -- a CURVE client of the user's, connecting to zmqload ----------------------------------------------
def _client_keys(sock: zmq.Socket, server_public: bytes) -> None:
    """A CURVE client as a user writes one: the server's public key from its certificate, a pair of its own."""
    sock.curve_serverkey = server_public
    sock.curve_publickey, sock.curve_secretkey = zmq.curve_keypair()


def _holds_no_secret(run_dir: str, secret: bytes) -> None:
    for path in glob.glob(os.path.join(run_dir, "**", "*"), recursive=True):
        if os.path.isfile(path):
            with open(path, "rb") as f:
                assert secret not in f.read(), path


class ClientPush(UserPush):
    """UserPush's sending (and its ending: stop()), from a socket that connects (a client) instead of binding."""

    def __init__(self, endpoint: str, messages, server_public: bytes | None):
        self.context = zmq.Context()
        self.sock = self.context.socket(zmq.PUSH)
        self.sock.setsockopt(zmq.LINGER, 3000)
        if server_public is not None:
            _client_keys(self.sock, server_public)
        self.sock.connect(endpoint)
        self.messages, self.gap_s, self.wait_s = messages, 0.0002, 1.0
        self._start()


def test_consumers_alone_serve_a_users_curve_client_and_no_plain_one(tmp_path, certificates):
    """--role consumer --consumers-bind with --curve-server-cert: a user's PUSH that holds the server's
    public certificate is a CURVE client and every seq it sends is received; a plain (NULL) PUSH of the
    user's connecting to the same endpoint gets nothing through (no message of it, foreign or not)."""
    public_file, secret_file = certificates
    server_public, server_secret = zmq.auth.load_certificate(secret_file)
    (port,) = free_ports(1)
    endpoint = f"tcp://127.0.0.1:{port}"
    keyed = ClientPush(
        endpoint,
        [lambda s=s: header(0, s, time.monotonic_ns()) + b"k" * 16 for s in range(2000)],
        server_public,
    )
    plain = ClientPush(
        endpoint, [lambda s=s: header(1, s, time.monotonic_ns()) for s in range(500)], None
    )
    done = zmqload_cli(
        "run",
        "--json",
        "--role",
        "consumer",
        "--consumers-bind",
        endpoint,
        "--duration",
        "4",
        "--curve",
        "on",
        "--curve-server-cert",
        secret_file,
        "--out",
        str(tmp_path / "runs"),
    )
    keyed.join()
    plain.stop()  # its sends wait for ever: a NULL client never completes a handshake with a CURVE server
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert len(keyed.sent) == 2000 and got["received"] == 2000 and got["foreign"]["messages"] == 0
    recvs = read_table(got["run_dir"], "recvs")
    assert sorted(zip(recvs.column("stream").to_pylist(), recvs.column("seq").to_pylist())) == [
        (0, s) for s in range(2000)
    ]  # none of the plain PUSH's stream 1
    assert security_of(got["run_dir"]) == "curve"
    _holds_no_secret(got["run_dir"], server_secret)


def test_producers_alone_serve_a_users_curve_pull_client(tmp_path, certificates):
    """--role producer --producers-bind with --curve-server-cert: a user's PULL that connects with the
    server's public certificate reads every header once."""
    _, secret_file = certificates
    server_public, server_secret = zmq.auth.load_certificate(secret_file)
    (port,) = free_ports(1)
    endpoint = f"tcp://127.0.0.1:{port}"
    context = zmq.Context()
    pull = context.socket(zmq.PULL)
    pull.linger = 0
    _client_keys(pull, server_public)
    pull.connect(endpoint)
    seen: list[tuple[int, int]] = []
    ended = threading.Event()

    def read() -> None:
        pull.rcvtimeo = 30_000  # the run's start on a loaded machine
        try:
            while True:
                word = int.from_bytes(recv_until(pull, ended)[:8], "little")
                seen.append(
                    ((word >> 48) & 0xFF, word & ((1 << 40) - 1))
                )  # docs/RECORDS.md: seq is the low 40 bits
                pull.rcvtimeo = 3000  # then: until idle
        except zmq.Again:
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        done = zmqload_cli(
            "run",
            "--json",
            "--role",
            "producer",
            "--producers-bind",
            endpoint,
            "--rate",
            "10k",
            "--count",
            "5000",
            "--curve",
            "on",
            "--curve-server-cert",
            secret_file,
            "--out",
            str(tmp_path / "runs"),
        )
        reader.join(60)
    finally:
        ended.set()  # a reader still waiting (the run failed) lets go of the socket within 0.1 s
        reader.join(10)
        assert not reader.is_alive(), "the reader did not end: its socket is not closed under it"
        pull.close()
        context.term()
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["sent"] == 5000
    assert sorted(seen) == [(0, s) for s in range(5000)]
    _holds_no_secret(got["run_dir"], server_secret)


def test_through_a_users_curve_device_nothing_is_lost(tmp_path, certificates):
    """Seed 001's XSUB|XPUB proxy with both ends CURVE servers of the user's key: zmqload's producers
    and consumers are its clients."""
    public_file, secret_file = certificates
    _, server_secret = zmq.auth.load_certificate(secret_file)
    xsub, xpub = proxy_thread(
        zmq.Context(), sndhwm=0, rcvhwm=0
    )  # as tests/test_devices.py: no drops
    for sock in (xsub, xpub):
        sock.curve_server, sock.curve_secretkey = True, server_secret
    device = Device(xsub, xpub)
    try:
        result = zmqload.run(
            pattern="pub-sub",
            producers_connect=device.producers_connect,
            consumers_connect=device.back_endpoint,
            consumers=2,
            count=10_000,
            rate=10_000,
            sndhwm=0,
            rcvhwm=0,
            curve="on",
            curve_server_key=public_file,
            out=str(tmp_path),
        )
    finally:
        device.stop()
    check_identity(result)
    assert result.lost == 0 and result.received == 2 * 10_000
    recvs = read_table(result.run_dir, "recvs")
    for consumer in (0, 1):
        got = recvs.column("seq").to_numpy()[recvs.column("consumer").to_numpy() == consumer]
        assert np.array_equal(np.sort(got), np.arange(10_000)), consumer


# -- key files and bad input ------------------------------------------------------------------------
def test_key_files_in_both_forms_read_the_same_key(tmp_path, certificates):
    public_file, secret_file = certificates
    public, _ = zmq.auth.load_certificate(public_file)
    bare = tmp_path / "bare"
    bare.write_text(f"# the server's key\n\n{public.decode()}\n")
    hashed = tmp_path / "hashed"  # Z85 has '#', but no key begins with it: 84 * 85**4 > 2**32
    hashed.write_text("#" + public.decode()[1:] + "\n")
    assert read_public_key(public_file, "--k") == read_public_key(secret_file, "--k") == public
    assert read_public_key(str(bare), "--k") == public
    with pytest.raises(
        ConfigError, match="no CURVE public key"
    ):  # libzmq would refuse it once the run started
        read_public_key(str(hashed), "--k")


def test_the_rules_need_no_io_and_the_file_is_read_by_the_preflight(tmp_path):
    from zmqload.runner.preflight import preflight

    missing = str(tmp_path / "nope.key")
    w = Workload(
        role="producer",
        producers_connect="tcp://127.0.0.1:5999",
        curve="on",
        curve_server_key=missing,
    )
    assert (
        Workload.from_dict(w.to_dict()).curve_server_key == missing
    )  # what a worker does: no read
    w.validate()  # the values only: no read
    with pytest.raises(ConfigError) as info:
        preflight(w)
    assert info.value.option == "--curve-server-key" and "No such file" in info.value.message


BAD_CURVE_INPUT = [
    (("--curve", "maybe"), "--curve", "off, on"),
    (("--curve", "on", "--transport", "inproc"), "--curve", "inproc"),
    (("--curve-server-key", "KEYFILE"), "--curve-server-key", "--curve off"),
    (
        ("--curve", "on", "--curve-server-key", "KEYFILE"),
        "--curve-server-key",
        "no server of yours",
    ),
    (
        ("--curve", "on", "--role", "producer", "--producers-connect", "tcp://127.0.0.1:5999"),
        "--curve-server-key",
        "tcp://127.0.0.1:5999",
    ),
    (
        (
            "--curve",
            "on",
            "--pattern",
            "pub-sub",
            "--producers-connect",
            "tcp://127.0.0.1:5999",
            "--consumers-connect",
            "tcp://127.0.0.1:5998",
        ),
        "--curve-server-key",
        "public key is needed",
    ),
    (
        ("--curve", "on", "--role", "producer", "--producers-bind", "tcp://127.0.0.1:5999"),
        "--curve-server-cert",
        "--producers-bind",
    ),
    (
        (
            "--curve",
            "on",
            "--role",
            "consumer",
            "--consumers-bind",
            "tcp://127.0.0.1:5999",
            "--duration",
            "1",
        ),
        "--curve-server-cert",
        "--consumers-bind",
    ),
    (("--curve-server-cert", "SECRET"), "--curve-server-cert", "--curve off"),
    (
        ("--curve", "on", "--curve-server-cert", "KEYFILE"),
        "--curve-server-cert",
        "no CURVE key pair",
    ),
    (("--curve", "on", "--curve-server-cert", "MISSING"), "--curve-server-cert", "No such file"),
    (
        (
            "--curve",
            "on",
            "--pattern",
            "pub-sub",
            "--producers-connect",
            "tcp://127.0.0.1:5999",
            "--consumers-connect",
            "tcp://127.0.0.1:5998",
            "--curve-server-key",
            "KEYFILE",
            "--curve-server-cert",
            "SECRET",
        ),
        "--curve-server-cert",
        "binds no socket",
    ),
    (
        (
            "--curve",
            "on",
            "--role",
            "producer",
            "--producers-connect",
            "tcp://127.0.0.1:5999",
            "--curve-server-key",
            "MISSING",
        ),
        "--curve-server-key",
        "No such file",
    ),
    (
        (
            "--curve",
            "on",
            "--role",
            "producer",
            "--producers-connect",
            "tcp://127.0.0.1:5999",
            "--curve-server-key",
            "MALFORMED",
        ),
        "--curve-server-key",
        "no CURVE public key",
    ),
    (
        (
            "--curve",
            "on",
            "--role",
            "producer",
            "--producers-connect",
            "tcp://127.0.0.1:5999",
            "--curve-server-key",
            "BINARY",
        ),
        "--curve-server-key",
        "cannot read",
    ),
]


def _bad_input_files(tmp_path, certificates) -> dict[str, str]:
    files = {
        "KEYFILE": certificates[0],
        "SECRET": certificates[1],
        "MISSING": str(tmp_path / "missing.key"),
        "MALFORMED": str(tmp_path / "malformed.key"),
        "BINARY": str(tmp_path / "binary.key"),
    }
    with open(files["MALFORMED"], "w") as f:
        f.write('curve\n    public-key = "too short"\n')
    with open(files["BINARY"], "wb") as f:
        f.write(bytes(range(256)))
    return files


def _bad_input_argvs(args, files, out):
    """(command, argv) for run and capacity (capacity refuses --role producer or consumer before it reads a key)."""
    for command in ("run", "capacity"):
        if command == "capacity" and ("producer" in args or "consumer" in args):
            continue
        bound = (
            ()
            if "--duration" in args
            else ("--count", "10")
            if command == "run"
            else ("--probe-duration", "0.2")
        )
        yield command, [command, *[files.get(a, a) for a in args], *bound, "--out", str(out)]


def _one_refusal_line(command, status, err, flag, words, out) -> None:
    assert status == 2, (command, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and words in lines[0] and "accepted" in lines[0], (
        err
    )
    assert "Traceback" not in err
    assert not out.exists() or not os.listdir(out)


@pytest.mark.parametrize("args, flag, words", BAD_CURVE_INPUT)
def test_bad_curve_input_is_one_line_exit_2_nothing_left(
    tmp_path, certificates, capsys, args, flag, words
):
    """In this process, through the CLI's own entry (`python -m zmqload` is sys.exit(cli.main())):
    exit status 2 and one line on stderr, nothing written; the same from a real process below."""
    from zmqload import cli

    out = tmp_path / "runs"
    for command, argv in _bad_input_argvs(args, _bad_input_files(tmp_path, certificates), out):
        try:
            status = cli.main(argv)
        except SystemExit as exc:  # argparse's refusals exit as a process would
            status = exc.code
        _one_refusal_line(command, status, capsys.readouterr().err, flag, words, out)


@pytest.mark.parametrize(
    "case", [0, 1, 10], ids=["argparse-choice", "validation", "preflight-file"]
)
def test_bad_curve_input_from_a_process_is_one_line_exit_2_nothing_left(
    tmp_path, certificates, case
):
    """As a user runs it (`python -m zmqload`): one refusal of each kind (argparse's, the workload's
    rules, the preflight's read of a key file) for run and capacity."""
    args, flag, words = BAD_CURVE_INPUT[case]
    out = tmp_path / "runs"
    for command, argv in _bad_input_argvs(args, _bad_input_files(tmp_path, certificates), out):
        done = zmqload_cli(*argv)
        _one_refusal_line(command, done.returncode, done.stderr, flag, words, out)


@pytest.mark.parametrize("server", ["another key", "no CURVE"])
def test_a_server_that_fails_every_handshake_fails_the_run_in_one_line(
    tmp_path, certificates, server
):
    """A user's server whose key is not the one given (every handshake fails, libzmq retries for ever), or
    one without CURVE (a mismatch of mechanisms): nothing arrives, and the run fails within seconds in one
    line naming the endpoint, with the default linger (the queued messages can go nowhere)."""
    public_file, _ = certificates
    other_secret = zmq.curve_keypair()[1] if server == "another key" else None
    # it hears nothing: its wait for a first message ends with the run's bound
    user = UserPull(
        "tcp://127.0.0.1:*", curve_secret_key=other_secret, idle_ms=8000, first_ms=50_000
    ).start()
    started = time.monotonic()
    done = zmqload_cli(
        "run",
        "--role",
        "producer",
        "--producers-connect",
        user.endpoint,
        "--rate",
        "1k",
        "--duration",
        "5",
        "--curve",
        "on",
        "--curve-server-key",
        public_file,
        "--out",
        str(tmp_path / "runs"),
        timeout=60,
    )
    elapsed = time.monotonic() - started
    user.stop()  # it heard nothing and would wait out its first_ms: the run is over
    user.join()
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert (
        f"the CURVE handshake with {user.endpoint} failed" in lines[0]
        and "--curve-server-key" in lines[0]
    )
    # libzmq reports a mismatch of mechanisms as a protocol error or without detail, by timing
    assert "(handshake failed" in lines[0] or "(protocol error" in lines[0]
    assert elapsed < 20 and user.seen == []
    # what was recorded stays readable: the run failed, naming why
    with open(os.path.join(run_dir_of(str(tmp_path / "runs")), "run.json")) as f:
        record = json.load(f)
    assert record["status"] == "failed" and "CURVE handshake" in record["error"]
