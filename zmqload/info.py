"""`zmqload info`: the facts a measurement depends on, read from the installed libraries."""

from __future__ import annotations

import re
import subprocess
import time
from typing import Any

from . import _engine, libzmq
from .analysis.javacheck import find_java
from .errors import ConfigError
from .versions import clock_pair, host, versions

PROBED_SOCKETS = ("PUSH", "PULL", "PUB", "SUB", "DEALER", "ROUTER", "PAIR")
PROBED_OPTIONS = (
    "SNDHWM",
    "RCVHWM",
    "LINGER",
    "SNDBUF",
    "RCVBUF",
    "IMMEDIATE",
    "SNDTIMEO",
    "RCVTIMEO",
)


def socket_defaults() -> dict[str, dict[str, int]]:
    """Defaults of fresh sockets of the engine's libzmq (not what the docs say: what it does)."""
    context = _engine.Context(1)
    defaults: dict[str, dict[str, int]] = {}
    try:
        for name in PROBED_SOCKETS:
            sock = _engine.Socket(context, _engine.SOCKET_TYPES[name])
            defaults[name] = {
                opt: sock.get_option(_engine.SOCKET_OPTION_IDS[opt]) for opt in PROBED_OPTIONS
            }
            sock.close(0)
    finally:
        context.term()
    return defaults


def java_version() -> str | None:
    """The version of the java a Spark report runs (analysis.javacheck.find_java: JAVA_HOME's
    whenever it is set, else java on PATH); None when there is none, or JAVA_HOME names a
    directory without bin/java (the report refuses it)."""
    try:
        java = find_java()
    except ConfigError:
        return None
    if java is None:
        return None
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=20).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "([^"]+)"', out)
    return match.group(1) if match else out.strip().splitlines()[0]


def libraries() -> list[dict[str, Any]]:
    """Each libzmq --libzmq can name here, with run.json's facts (or why it is not there)."""
    from .contract import codec

    return [
        dict(codec.to_builtins(lib), missing=None)
        if lib is not None
        else {"choice": choice, "missing": why}
        for choice, lib, why in libzmq.found()
    ]


def gather() -> dict[str, Any]:
    return {
        "versions": versions(),
        "libraries": libraries(),
        "socket_defaults": socket_defaults(),
        "clock": dict(
            clock_pair(), resolution_ns=int(time.clock_getres(time.CLOCK_MONOTONIC) * 1e9)
        ),
        "host": host(),
        "java": java_version(),
        "curve": _engine.has("curve"),  # --curve on needs it (libzmq built with libsodium)
    }
