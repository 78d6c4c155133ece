"""Where Spark is: the one rule for a Spark master URL's form, for `report --master` (the report's
Spark) and `run --master` (where the producers and consumers run), and for a Spark Connect
server's URL (`report --remote`). Text checks of the contract: nothing here starts Spark or
imports it."""

from __future__ import annotations

import re

from ..errors import ConfigError

MASTERS_ACCEPTED = (
    "local, local[N], local[*], local[N,F], local-cluster[N,C,M], spark://HOST:PORT[,HOST:PORT...], "
    "yarn (with HADOOP_CONF_DIR or YARN_CONF_DIR set), k8s://https://HOST:PORT"
)
MASTER_FORM = re.compile(
    r"local(\[(\*|[1-9]\d*)(,[1-9]\d*)?\])?|local-cluster\[\d+,\d+,\d+\]"  # local, local-cluster
    r"|spark://([^,:/\s]+:\d{1,5})(,[^,:/\s]+:\d{1,5})*"  # standalone
    r"|k8s://(https?://)?[^\s/]+(:\d+)?/?|yarn"
)


def spark_master(master: str, flag: str = "--master") -> str:
    """The master URL if Spark would accept its form, else ConfigError(flag)."""
    if MASTER_FORM.fullmatch(master):
        return master
    raise ConfigError(flag, f"got {master!r}; accepted: {MASTERS_ACCEPTED}")


def on_this_host(master: str) -> bool:
    """Whether a master's executors all run on this host (local, local[N], local-cluster[...]):
    they reach the driver at loopback and read and write its files."""
    return master.startswith("local")


REMOTES_ACCEPTED = "sc://HOST:PORT, optionally followed by /;NAME=VALUE;... (e.g. sc://spark.example:15002/;token=T)"
REMOTE_FORM = re.compile(
    r"sc://(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s/:;\[\]]+):(?P<port>\d{1,5})(?P<params>/(;[^;=\s]+=[^;\s]*)+)?/?"
)
"""Spark Connect's URL as its client parses it; the port is required here, so the one a report
reaches is written where it is asked (Connect's default, 15002, is a server's setting)."""


def spark_remote(url: str, flag: str = "--remote") -> str:
    """The Spark Connect URL if its form is one the client takes, else ConfigError(flag)."""
    m = REMOTE_FORM.fullmatch(url)
    if m and 0 < int(m.group("port")) < 65536:
        return url
    raise ConfigError(flag, f"got {remote_shown(url)!r}; accepted: {REMOTES_ACCEPTED}")


def remote_shown(url: str) -> str:
    """The URL as messages show it: its parameters (a token among them) left out."""
    return url.split("/;", 1)[0]


def remote_address(url: str) -> tuple[str, int]:
    """(host, port) of a URL spark_remote accepts."""
    m = REMOTE_FORM.fullmatch(spark_remote(url))
    assert m is not None
    return m.group("host").strip("[]"), int(m.group("port"))
