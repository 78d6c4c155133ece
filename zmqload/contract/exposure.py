"""Sockets bound beyond loopback, and the one rule for them: CURVE (--curve on) or --insecure, else
refused before the run. Loopback, ipc:// and inproc:// are this host's alone. The rule only:
runner/preflight.py resolves the names."""

from __future__ import annotations

import ipaddress
from typing import Callable, Optional

from ..errors import ConfigError

INSECURE_FLAG = "--insecure"
Resolve = Callable[[str], Optional[list[str]]]
"""A host name -> the addresses it resolves to, or None when it resolves to none."""

ACCEPTED = (
    "--curve on (CURVE on every socket of the run), --insecure (bind it in the clear), or a loopback "
    "address (127.0.0.1, ::1, ipc://)"
)


def _loopback_address(text: str) -> bool:
    return ipaddress.ip_address(text.split("%", 1)[0]).is_loopback


def beyond_loopback(endpoint: str, resolve: Resolve) -> bool:
    """Whether a socket bound at `endpoint` can be reached from another host: a wildcard (*, 0.0.0.0,
    ::), an address or a name that is not loopback's, an interface other than `lo` (libzmq binds an
    interface by name; one that is no name this host resolves counts as reachable)."""
    transport, _, where = endpoint.partition("://")
    if transport in ("ipc", "inproc"):
        return False
    host = where.rsplit(":", 1)[0].strip("[]") if ":" in where else where
    if host in ("", "*"):
        return True
    try:
        return not _loopback_address(host)
    except ValueError:
        pass
    if host == "lo":
        return False
    found = resolve(host)
    if found is None:
        return True
    return not all(_loopback_address(address) for address in found)


def check_binds(
    binds: list[tuple[str, str]], curve: bool, insecure: bool, resolve: Resolve
) -> None:
    """ConfigError naming the option of the first (option, endpoint) bound beyond loopback, unless
    CURVE protects the run's sockets or --insecure allows them in the clear."""
    if curve or insecure:
        return
    for option, endpoint in binds:
        if beyond_loopback(endpoint, resolve):
            raise ConfigError(
                option,
                f"got {endpoint!r}: a socket bound there is open to other hosts, in the clear; "
                f"accepted: {ACCEPTED}",
            )


SERVED_ACCEPTED = (
    "a loopback address (127.0.0.1, ::1, localhost), or --insecure (serve it to other hosts: "
    "plain HTTP, which CURVE does not cover)"
)


def check_served(option: str, address: str, insecure: bool, resolve: Resolve) -> None:
    """ConfigError unless an HTTP endpoint of zmqload's (`--metrics HOST:PORT`) stays on this host or
    --insecure allows it: the data sockets' rule, where only --insecure opens it (no CURVE on HTTP)."""
    host = address.rsplit(":", 1)[0]
    if not insecure and beyond_loopback(f"tcp://{address}", resolve):
        raise ConfigError(
            option,
            f"got {address!r}: {host} is reachable from other hosts, and what it serves is in the "
            f"clear; accepted: {SERVED_ACCEPTED}",
        )
