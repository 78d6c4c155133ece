"""What a run checks on this machine once before it starts, after Workload.validate: key and size
files read, binds beyond loopback allowed, ports free, ipc paths bindable, hosts resolved, the
output directory made; refusals are ConfigErrors, before anything is written."""

from __future__ import annotations

import functools
import os
import socket
import stat
from typing import Optional

from .. import libzmq
from ..contract import exposure, patterns, uris
from ..contract.curve import (
    KEY_FILE_FORMS,
    MAX_KEY_FILE,
    SECRET_FILE_FORMS,
    parse_public_key,
    parse_server_pair,
)
from ..contract.run_record import Libzmq
from ..contract.workload import IPC_PATH_MAX, LIBZMQ_SINCE, OPTIONS, Workload, tcp_parts
from ..errors import ConfigError
from ..store.size_files import sizes_of


def preflight(w: Workload) -> Workload:
    """The checks of a validated workload that touch this machine; `w`, its files read, again."""
    check_libzmq_options(w, load_libzmq(w))
    if w.metrics is not None:
        exposure.check_served(OPTIONS["metrics"].flag, w.metrics, w.insecure, addresses)
    if w.curve_server_key is not None:
        read_public_key(w.curve_server_key, OPTIONS["curve_server_key"].flag)
    if w.curve_server_cert is not None:
        read_server_pair(w.curve_server_cert, OPTIONS["curve_server_cert"].flag)
    w.check_topic_room(sizes_of(w.size, w.payload))  # a bad file is refused before the run
    topology = w.topology
    if topology.given:
        binder = (
            topology.side(topology.binder) if topology.binder in ("producer", "consumer") else None
        )
        for side in (topology.producers, topology.consumers):
            if side is binder:
                binds = w.bind_endpoints(w.producers if side.name == "producers" else w.consumers)
                check_binds([(side.flag, e) for e in binds], w.curve == "on", w.insecure)
                for endpoint in binds:
                    check_bindable(side.flag, endpoint)
            elif side.attach is patterns.Attach.CONNECT:
                for endpoint in side.endpoints:
                    _check_resolvable(side.flag, endpoint)
        return w
    binding = patterns.get(w.pattern).binding_sockets(w.producers, w.consumers)
    if w.transport == "tcp":  # where zmqload's binders (and its proxy) bind
        host = f"[{w.host}]" if ":" in w.host else w.host
        check_binds(
            [("--endpoint" if w.endpoint else "--host", f"tcp://{host}:{w.port}")],
            w.curve == "on",
            w.insecure,
        )
    if w.transport == "tcp" and w.port:
        for offset in range(binding):
            _check_port_free("--endpoint" if w.endpoint else "--port", w.host, w.port + offset)
    elif w.transport == "ipc" and w.endpoint is not None:
        for endpoint in w.bind_endpoints(binding):
            check_bindable("--endpoint", endpoint)
    return w


def load_libzmq(w: Workload) -> Libzmq:
    """The run's libzmq (--libzmq), found and described; loaded into this process's engine where
    its workers are threads of this process (inproc), while worker processes load it themselves.
    ConfigError in one line otherwise."""
    return use_libzmq(w.libzmq) if w.transport == "inproc" else _libzmq(w.libzmq, load=False)


def check_libzmq_options(w: Workload, lib: Libzmq) -> None:
    """Each socket option set is one the run's libzmq knows (an older one refuses it, EINVAL, in
    every worker): ConfigError naming the option and the release that brought it."""
    have = tuple(int(part) for part in lib.version.split(".")[:2])
    for name, since in LIBZMQ_SINCE.items():
        value = getattr(w, name)
        if value not in (None, False) and have < since:
            wanted = ".".join(map(str, since))
            raise ConfigError(
                OPTIONS[name].flag,
                f"got {value} with libzmq {lib.version} ({lib.file}), which has no such socket "
                f"option; accepted: libzmq {wanted} or later (--libzmq), or the option unset",
            )


def use_libzmq(choice: str) -> Libzmq:
    """--libzmq CHOICE found, described and loaded into this process's engine (a command that uses
    the engine itself: inproc runs, scenarios, info); ConfigError in one line otherwise."""
    return _libzmq(choice, load=True)


def _libzmq(choice: str, load: bool) -> Libzmq:
    try:
        lib = _described(choice)
        if load:
            libzmq.use(lib)
    except ValueError as exc:
        raise ConfigError(
            OPTIONS["libzmq"].flag, f"{exc}; accepted: {OPTIONS['libzmq'].accepts}"
        ) from None
    return lib


@functools.lru_cache(maxsize=8)
def _described(
    choice: str,
) -> Libzmq:  # a sweep's runs describe it once (the sha256 reads the file)
    return libzmq.describe(choice)


def read_public_key(path: str, option: str) -> bytes:
    """The public key in the file at `path`; ConfigError naming `option` when the file is missing,
    unreadable or holds no key in either form (contract/curve.py KEY_FILE_FORMS)."""
    return parse_public_key(_read_key_file(path, option, KEY_FILE_FORMS), path, option)


def read_server_pair(path: str, option: str) -> tuple[bytes, bytes]:
    """(public, secret) of the server certificate at `path` (contract/curve.py SECRET_FILE_FORMS): the
    identity zmqload's binding sockets take so that a client of the user's, which holds the public
    half, can connect. ConfigError naming `option` when it is missing, unreadable or not a secret
    certificate."""
    return parse_server_pair(_read_key_file(path, option, SECRET_FILE_FORMS), path, option)


def _read_key_file(path: str, option: str, forms: str) -> str:
    """A key file's text (ASCII, MAX_KEY_FILE characters at most); ConfigError naming `option` and
    what it accepts (`forms`) otherwise."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read(MAX_KEY_FILE + 1)
    except (
        OSError,
        ValueError,
    ) as exc:  # UnicodeDecodeError; ValueError: a path with a NUL character
        why = (
            exc.strerror
            if isinstance(exc, OSError) and exc.strerror
            else "not ASCII text"
            if isinstance(exc, UnicodeDecodeError)
            else str(exc)
        )
        raise ConfigError(
            option, f"got {path!r}: cannot read it ({why}); accepted: {forms}"
        ) from None
    if len(text) > MAX_KEY_FILE:
        raise ConfigError(
            option,
            f"got {path!r}: above {MAX_KEY_FILE:,} characters, not a key file; accepted: {forms}",
        )
    return text


def addresses(host: str) -> Optional[list[str]]:
    """The addresses `host` resolves to on this machine, or None when it resolves to none."""
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    return [str(info[4][0]) for info in found]


def beyond_loopback(endpoint: str) -> bool:
    """contract/exposure.py's rule, a name resolved by this machine."""
    return exposure.beyond_loopback(endpoint, addresses)


def check_binds(binds: list[tuple[str, str]], curve: bool, insecure: bool) -> None:
    """contract/exposure.py's check_binds, names resolved by this machine."""
    exposure.check_binds(binds, curve, insecure, addresses)


def _check_port_free(option: str, host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    probe = socket.socket(family, socket.SOCK_STREAM)
    # libzmq binds with SO_REUSEADDR, so a port in TIME_WAIT is free for it: probe alike
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind((host, port))
    except OSError as exc:
        raise ConfigError(
            option,
            f"cannot bind {host}:{port} ({exc.strerror}); accepted: a free local port, or 0 for any",
        )
    finally:
        probe.close()


def check_output_dir(path: str, option: str = "--out") -> None:
    """The output directory must exist or be creatable, and be writable (a local one: only a run
    copies its records to a filesystem URI, runner/remote_out.py)."""
    uris.local_only(path, option)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            option, f"cannot create {path!r} ({exc.strerror}); accepted: a writable directory"
        )
    if not os.path.isdir(path) or not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(
            option, f"{path!r} is not a writable directory; accepted: a writable directory"
        )


def check_bindable(option: str, endpoint: str) -> None:
    """What can be checked before anything starts of an endpoint a zmqload socket will bind: a
    tcp port free on its host, an ipc path whose directory exists and is writable and which is no
    other file and no live socket (libzmq removes whatever is there and binds: it would take a
    running system's endpoint away). ConfigError naming `option` otherwise."""
    host, port = tcp_parts(endpoint)
    if port is not None:
        if port not in ("*", "0"):
            _check_port_free(option, "0.0.0.0" if host == "*" else (host or ""), int(port))
        return
    if not endpoint.startswith("ipc://"):
        return
    path = endpoint[len("ipc://") :]
    if path == "*":  # libzmq makes a fresh path
        return
    if path.startswith("@"):  # Linux's abstract namespace: no file, but it may be live
        if refused(endpoint) is None:
            raise ConfigError(
                option,
                f"got {endpoint!r}: another process listens there; accepted: an ipc path "
                "nobody listens on",
            )
        return
    if "\x00" in path:  # a C string ends there: libzmq would bind another path
        raise ConfigError(
            option, f"got {endpoint!r}: a NUL character in the path; accepted: an ipc path"
        )
    if len(path.encode()) > IPC_PATH_MAX:
        raise ConfigError(
            option,
            f"got {endpoint!r}: the path is {len(path.encode())} bytes, a unix socket's "
            f"takes {IPC_PATH_MAX}; accepted: a shorter path",
        )
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigError(
            option,
            f"got {endpoint!r}: the directory {directory} does not exist; accepted: an ipc "
            "path in an existing, writable directory",
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(
            option,
            f"got {endpoint!r}: the directory {directory} is not writable; accepted: an ipc "
            "path in an existing, writable directory",
        )
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(
            option, f"got {endpoint!r}: {exc.strerror}; accepted: an ipc path zmqload can bind"
        )
    if not stat.S_ISSOCK(mode):
        raise ConfigError(
            option,
            f"got {endpoint!r}: {path} exists and is not a socket (binding would remove it); "
            "accepted: a path that does not exist or is a stale socket",
        )
    if refused(endpoint) is None:
        raise ConfigError(
            option,
            f"got {endpoint!r}: another process listens there (binding would take it "
            "away); accepted: an ipc path nobody listens on",
        )


def refused(endpoint: str, timeout_s: float = 1.0) -> Optional[str]:
    """Why nothing accepts a connection at a tcp or ipc endpoint now (a tcp connect refused or timed
    out, an ipc path absent, a stale socket file), or None when something does: one connection,
    opened and closed, which libzmq drops. Checks before a bind (`check_bindable`: a live ipc
    socket) and names the silent endpoints of a user's device or consumer (runner/endpoints.py)."""
    transport, _, where = endpoint.partition("://")
    try:
        if transport == "tcp":
            host, port = tcp_parts(endpoint)
            socket.create_connection((host or "", int(port or 0)), timeout=timeout_s).close()
        elif transport == "ipc":
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.settimeout(timeout_s)
            try:
                probe.connect("\0" + where[1:] if where.startswith("@") else where)
            finally:
                probe.close()
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def _check_resolvable(option: str, endpoint: str) -> None:
    """A tcp endpoint to connect to names a host this machine resolves (libzmq refuses it otherwise,
    once the run has started)."""
    host, port = tcp_parts(endpoint)
    if host is None or port is None:
        return
    try:
        socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        why = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ConfigError(
            option,
            f"got {endpoint!r}: cannot resolve {host!r} ({why}); accepted: a host name or "
            "address this machine resolves",
        )
