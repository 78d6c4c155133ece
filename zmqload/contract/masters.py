"""A Spark master URL: the one rule for its form, for `report --master` (the report's Spark) and
`run --master` (where the producers and consumers run). A text check of the contract: nothing
here starts Spark or imports it."""
from __future__ import annotations

import re

from ..errors import ConfigError

MASTERS_ACCEPTED = ("local, local[N], local[*], local[N,F], local-cluster[N,C,M], spark://HOST:PORT[,HOST:PORT...], "
                    "yarn (with HADOOP_CONF_DIR or YARN_CONF_DIR set), k8s://https://HOST:PORT")
MASTER_FORM = re.compile(
    r"local(\[(\*|[1-9]\d*)(,[1-9]\d*)?\])?|local-cluster\[\d+,\d+,\d+\]"      # local, local-cluster
    r"|spark://([^,:/\s]+:\d{1,5})(,[^,:/\s]+:\d{1,5})*"                           # standalone
    r"|k8s://(https?://)?[^\s/]+(:\d+)?/?|yarn")


def spark_master(master: str, flag: str = "--master") -> str:
    """The master URL if Spark would accept its form, else ConfigError(flag)."""
    if MASTER_FORM.fullmatch(master):
        return master
    raise ConfigError(flag, f"got {master!r}; accepted: {MASTERS_ACCEPTED}")
