"""CURVE in a run (--curve on): its keys, made with pyzmq's libzmq; each data socket made a
server (it binds) or a client (it connects), a client's handshakes watched until one succeeds; the
controller's own sockets servers of their own pair."""

from __future__ import annotations

import dataclasses

import zmq

from .. import _engine
from ..contract.curve import CurveKeys
from ..contract.run_record import Libzmq
from ..contract.workload import OPTIONS, Workload
from ..errors import ConfigError, RunError
from .preflight import read_public_key, read_server_pair


def run_keys(w: Workload, lib: Libzmq) -> CurveKeys | None:
    """The keys of a run with --curve on (None: off): a client pair, and zmqload's own server pair
    (made per run, or --curve-server-cert's) or, against a server of the user's, its public key
    from --curve-server-key. ConfigError when the run's libzmq `lib` has no CURVE (built without
    libsodium) or the key file cannot be read."""
    if w.curve == "off":
        return None
    if "curve" not in lib.capabilities:
        raise ConfigError(
            "--curve",
            f"got 'on', but the libzmq {lib.version} the run uses ({lib.file}) has no "
            'CURVE (zmq_has("curve") is false: built without libsodium); accepted: off, '
            "or a libzmq built with CURVE (--libzmq)",
        )
    client_public, client_secret = keypair()
    if w.curve_server_key is not None:
        server_key = read_public_key(w.curve_server_key, OPTIONS["curve_server_key"].flag)
        return CurveKeys(server_key, None, client_public, client_secret)
    if w.curve_server_cert is not None:  # a pair whose public half a client of the user's holds
        server_public, server_secret = read_server_pair(
            w.curve_server_cert, OPTIONS["curve_server_cert"].flag
        )
    else:
        server_public, server_secret = keypair()
    return CurveKeys(server_public, server_secret, client_public, client_secret)


def keypair() -> tuple[bytes, bytes]:
    """A CURVE key pair (z85 public, secret) made by pyzmq's libzmq: keys are the same whatever
    library uses them, and the controller need not load the run's libzmq (its workers do)."""
    return zmq.curve_keypair()


def control_keys(w: Workload) -> CurveKeys | None:
    """With --curve on (None: off), the keys of the controller's sockets: a server pair apart from the
    data sockets' (whose server may be the user's) and a client pair for the workers. Handed to the
    workers in their WorkerSpec (through Spark with --master), never written to run.json."""
    if w.curve == "off":
        return None
    server_public, server_secret = keypair()
    client_public, client_secret = keypair()
    return CurveKeys(server_public, server_secret, client_public, client_secret)


def client_view(keys: CurveKeys | None) -> CurveKeys | None:
    """What a connecting side is given of `keys`: no server secret."""
    return None if keys is None else dataclasses.replace(keys, server_secret=None)


def secure_zmq(sock: zmq.Socket[bytes], keys: CurveKeys | None, server: bool) -> None:
    """secure() for a pyzmq socket of the controller's (server) or a worker's (client)."""
    if keys is None:
        return
    if server:
        assert keys.server_secret is not None
        sock.curve_server = True
        sock.curve_secretkey = keys.server_secret
        return
    sock.curve_serverkey = keys.server_public
    sock.curve_publickey = keys.client_public
    sock.curve_secretkey = keys.client_secret


def secure(sock: _engine.Socket, keys: CurveKeys | None, server: bool) -> None:
    """CURVE on `sock` (nothing without keys): the server of the run's key, or its client."""
    if keys is None:
        return
    if server:
        assert keys.server_secret is not None  # run_keys: a server key of zmqload's own
        sock.set_option(_engine.SOCKET_OPTION_IDS["CURVE_SERVER"], 1)
        sock.set_option_bytes(_engine.BYTES_OPTION_IDS["CURVE_SECRETKEY"], keys.server_secret)
        return
    sock.set_option_bytes(_engine.BYTES_OPTION_IDS["CURVE_SERVERKEY"], keys.server_public)
    sock.set_option_bytes(_engine.BYTES_OPTION_IDS["CURVE_PUBLICKEY"], keys.client_public)
    sock.set_option_bytes(_engine.BYTES_OPTION_IDS["CURVE_SECRETKEY"], keys.client_secret)


HANDSHAKE_FAILURES = 3
"""CURVE handshakes failed without detail, none succeeded, that end a connecting worker: a wrong server
key, not a hiccup (libzmq retries each for ever, silently); a protocol error or a refusal ends it at once."""


class HandshakeWatch:
    """A connecting CURVE client's handshakes (zmq_socket_monitor), read between slices: the first
    that succeeds ends the watch; failures before any (HANDSHAKE_FAILURES) fail the worker in one line."""

    def __init__(self, context: _engine.Context, sock: _engine.Socket, name: str):
        self.sock = sock
        sock.monitor(name, sum(_engine.HANDSHAKE_EVENTS.values()))
        self.events: _engine.Socket | None = _engine.Socket(context, _engine.SOCKET_TYPES["PAIR"])
        self.events.connect(name)
        self.failures = 0
        self.failed = False  # for good: nothing queued will ever be delivered (close with linger 0)

    @property
    def watching(self) -> bool:
        return self.events is not None

    def check(self) -> None:
        """Read the events so far; RunError naming the endpoint once the handshakes keep failing."""
        while self.events is not None and (frame := self.events.recv_bytes(0)) is not None:
            endpoint = (self.events.recv_bytes(1000) or b"?").decode(errors="replace")
            event = int.from_bytes(frame[:2], "little")
            if event == _engine.HANDSHAKE_EVENTS["succeeded"]:
                self.close()
                return
            self.failures += 1
            # libzmq retries a handshake that failed without detail (a wrong server key), not one that
            # broke the protocol (no CURVE server there: a mismatch of mechanisms) or was refused
            if (
                event != _engine.HANDSHAKE_EVENTS["handshake failed"]
                or self.failures >= HANDSHAKE_FAILURES
            ):
                self.failed = True
                what = next(
                    name for name, bits in _engine.HANDSHAKE_EVENTS.items() if bits == event
                )
                times = f", {self.failures} times" if self.failures > 1 else ""
                raise RunError(
                    f"the CURVE handshake with {endpoint} failed ({what}{times}), none succeeded: is "
                    "a CURVE server there, and --curve-server-key its public key?"
                )

    def close(self) -> None:
        """Before the context ends (its termination waits for every socket of it)."""
        if self.events is not None:
            try:
                self.sock.monitor(None)
            except ValueError:
                pass  # the socket closed first: its monitor stopped with it
            self.events.close(0)
            self.events = None
