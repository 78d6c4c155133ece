"""CURVE's keys: those a run hands its workers (the server's secret only to the binding side), the
key files a user gives parsed (a zmq.auth certificate or a bare Z85 line), run.json's `Security`.
Reading files and making keys are runner/'s."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .states import Word


class Security(Word):
    """run.json `security`: libzmq's security mechanism on the run's data sockets."""

    NULL = "null"
    CURVE = "curve"


Z85_KEY = re.compile(r"[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}")
Z85_CHARS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
MAX_KEY_FILE = 64 * 1024
"""Bytes of a key file read at most: a certificate is a few hundred; a larger file is refused."""
KEY_FILE_FORMS = (
    'a file with a public-key = "<40 Z85 characters>" line (a zmq.auth certificate, .key or '
    ".key_secret), or one line of the bare 40-character Z85 public key"
)
_CERT_LINE = re.compile(r'\s*public-key\s*=\s*"([^"]*)"\s*')
_SECRET_LINE = re.compile(r'\s*secret-key\s*=\s*"([^"]*)"\s*')
SECRET_FILE_FORMS = (
    "a zmq.auth secret certificate (server.key_secret from zmq.auth.create_certificates, or czmq's "
    'zcert): its public-key = "..." and secret-key = "..." lines, 40 Z85 characters each'
)


def z85_key(text: str) -> bool:
    """40 characters of Z85 that decode to 32 bytes: each group of 5 is below 2**32 (libzmq's
    zmq_z85_decode refuses the others, and a socket would refuse the key once the run has started)."""
    if not Z85_KEY.fullmatch(text):
        return False
    for group in range(0, 40, 5):
        value = 0
        for char in text[group : group + 5]:
            value = value * 85 + Z85_CHARS.index(char)
        if value >= 2**32:
            return False
    return True


def parse_public_key(text: str, path: str, option: str) -> bytes:
    """The public key in `text`, the key file at `path`; ConfigError naming `option` when it holds
    no key in either form (KEY_FILE_FORMS). The file is read by runner/preflight.py."""
    # '#' begins a comment line, unless the line is a bare key (Z85 has '#')
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and (not line.lstrip().startswith("#") or Z85_KEY.fullmatch(line.strip()))
    ]
    certified = [m.group(1) for line in lines if (m := _CERT_LINE.fullmatch(line))]
    key = (
        certified[0]
        if len(certified) == 1
        else lines[0]
        if len(lines) == 1 and not certified
        else None
    )
    if key is None or not z85_key(key):
        raise ConfigError(
            option, f"got {path!r}: no CURVE public key in it; accepted: {KEY_FILE_FORMS}"
        )
    return key.encode()


def parse_server_pair(text: str, path: str, option: str) -> tuple[bytes, bytes]:
    """(public, secret) of `text`, the server certificate at `path` (SECRET_FILE_FORMS): the identity
    zmqload's binding sockets take so that a client of the user's, which holds the public half, can
    connect. ConfigError naming `option` when it is not a secret certificate. The file is read by
    runner/preflight.py."""
    lines = text.splitlines()
    found = [
        [m.group(1) for line in lines if (m := rule.fullmatch(line))]
        for rule in (_CERT_LINE, _SECRET_LINE)
    ]
    if any(len(keys) != 1 or not z85_key(keys[0]) for keys in found):
        raise ConfigError(
            option, f"got {path!r}: no CURVE key pair in it; accepted: {SECRET_FILE_FORMS}"
        )
    return found[0][0].encode(), found[1][0].encode()


@dataclass(frozen=True)
class CurveKeys:
    """One run's CURVE keys as its workers get them (runner/spec.py WorkerSpec): zmqload's binding
    sockets are servers with `server_secret`; its connecting sockets are clients of `server_public`
    (zmqload's own server's, or the user's from --curve-server-key) with the client pair. The
    secret keys travel only to the workers, never into run.json."""

    server_public: bytes
    server_secret: (
        bytes | None
    )  # None: for a worker that connects, and against a server of the user's
    client_public: bytes
    client_secret: bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            name: None if value is None else value.decode() for name, value in self.__dict__.items()
        }

    @classmethod
    def from_dict(cls, data: Any) -> CurveKeys:
        """Inverse of to_dict(), checked: each key 40 characters of Z85 that decode (the server's secret
        may be null); ConfigError otherwise."""
        names = ("server_public", "server_secret", "client_public", "client_secret")
        if not isinstance(data, dict) or sorted(data) != sorted(names):
            raise ConfigError("curve", f"accepted: an object of {', '.join(names)}")
        for name in names:
            value = data[name]
            if not (value is None and name == "server_secret") and not (
                isinstance(value, str) and z85_key(value)
            ):
                raise ConfigError("curve", f"{name}: not a key; accepted: 40 characters of Z85")
        secret = data["server_secret"]
        return cls(
            data["server_public"].encode(),
            None if secret is None else secret.encode(),
            data["client_public"].encode(),
            data["client_secret"].encode(),
        )
