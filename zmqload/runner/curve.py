"""CURVE in a run (--curve on): the run's keys, made with the engine's libzmq, and each data socket
made a server (it binds) or a client (it connects) before it binds or connects."""
from __future__ import annotations

from .. import _engine
from ..contract.curve import CurveKeys, read_public_key
from ..contract.workload import OPTIONS, Workload
from ..errors import ConfigError


def run_keys(w: Workload) -> CurveKeys | None:
    """The keys of a run with --curve on (None: off): a client pair, and zmqload's own server pair
    or, against a server of the user's, its public key from --curve-server-key. ConfigError when the
    engine's libzmq has no CURVE (built without libsodium) or the key file cannot be read."""
    if w.curve == "off":
        return None
    if not _engine.has("curve"):
        version = ".".join(map(str, _engine.libzmq_version()))
        raise ConfigError("--curve", f"got 'on', but the libzmq {version} zmqload's engine uses has no CURVE "
                                     "(zmq_has(\"curve\") is false: built without libsodium); accepted: off, or a "
                                     "libzmq built with CURVE")
    client_public, client_secret = _engine.curve_keypair()
    if w.curve_server_key is not None:
        server_key = read_public_key(w.curve_server_key, OPTIONS["curve_server_key"].flag)
        return CurveKeys(server_key, None, client_public, client_secret)
    server_public, server_secret = _engine.curve_keypair()
    return CurveKeys(server_public, server_secret, client_public, client_secret)


def secure(sock: _engine.Socket, keys: CurveKeys | None, server: bool) -> None:
    """CURVE on `sock` (nothing without keys): the server of the run's key, or its client."""
    if keys is None:
        return
    if server:
        assert keys.server_secret is not None       # run_keys: a server key of zmqload's own
        sock.set_option(_engine.SOCKET_OPTION_IDS["CURVE_SERVER"], 1)
        sock.set_option_bytes(_engine.BYTES_OPTION_IDS["CURVE_SECRETKEY"], keys.server_secret)
        return
    sock.set_option_bytes(_engine.BYTES_OPTION_IDS["CURVE_SERVERKEY"], keys.server_public)
    sock.set_option_bytes(_engine.BYTES_OPTION_IDS["CURVE_PUBLICKEY"], keys.client_public)
    sock.set_option_bytes(_engine.BYTES_OPTION_IDS["CURVE_SECRETKEY"], keys.client_secret)
