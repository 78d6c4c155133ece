"""The report's option table (`ReportOptions`, `REPORT_OPTIONS`): every option of `zmqload report`,
stated once as the Workload's are, so cli/report.py parses and refuses values as everywhere. The
Spark URLs and heap size are text checks: nothing here starts or imports Spark."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..errors import ConfigError
from .masters import (
    MASTERS_ACCEPTED as MASTERS_ACCEPTED,
    spark_master as spark_master,
)  # the report's --master rule
from .masters import REMOTES_ACCEPTED as REMOTES_ACCEPTED, spark_remote
from .workload import Option, rate_option

# -- the rules of the two Spark options ----------------------------------------------------------

# The JVM takes -Xmx<digits><k|m|g|t>; Spark passes spark.driver.memory through as -Xmx
# (a bare number would be bytes), and refuses a heap under ~450 MiB.
_MEMORY = re.compile(r"^(\d+)([kmgt])$", re.IGNORECASE)
MIN_DRIVER_MEMORY_MIB = 512
_MIB_PER_UNIT = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
DRIVER_MEMORY_ACCEPTED = (
    f"a JVM heap size of at least {MIN_DRIVER_MEMORY_MIB}m, a number and k, m, g or t "
    "(e.g. 2g, 4096m)"
)
DEFAULT_DRIVER_MEMORY = "4g"
"""The embedded local Spark's heap unless --driver-memory or ZMQLOAD_SPARK_DRIVER_MEMORY says
otherwise (analysis.session; the warm report server sizes its own, report.server)."""


def jvm_heap_size(value: str, flag: str = "--driver-memory") -> str:
    """A JVM heap size Spark can start with (e.g. 4g, 2048m), else ConfigError(flag)."""
    m = _MEMORY.match(value.strip())
    if not m or int(m.group(1)) * _MIB_PER_UNIT[m.group(2).lower()] < MIN_DRIVER_MEMORY_MIB:
        raise ConfigError(flag, f"got {value!r}; accepted: {DRIVER_MEMORY_ACCEPTED}")
    return value.strip()


def heap_mib(value: str) -> float:
    """A heap size jvm_heap_size accepts, in MiB."""
    m = _MEMORY.match(jvm_heap_size(value))
    assert m is not None
    return int(m.group(1)) * _MIB_PER_UNIT[m.group(2).lower()]


# -- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportOption(Option):
    """An Option of the report's table. `rule`: text -> the checked value, or ConfigError
    naming the flag (--master, --driver-memory); `switch`: a flag that takes no value and
    sets True (--strict), so a path after it is not read as its value."""

    rule: Optional[Callable[[str, str], str]] = None
    switch: bool = False

    def convert(self, value: object) -> Any:
        value = super().convert(value)
        if self.rule is not None and isinstance(value, str):
            return self.rule(value, self.flag)
        return value


def _option(default: Any, kind: type, accepted: str, help: str, **details: Any) -> Any:
    return field(
        default=default, metadata={"option": ReportOption(kind, accepted, help, **details)}
    )


def _switch(help: str, group: str) -> Any:
    return _option(False, bool, "a flag (no value)", help, switch=True, group=group)


OUTPUT, SPARK, PLANNING, RUNNING = "output", "Spark", "capacity planning", "how the report runs"


@dataclass
class ReportOptions:
    """What `zmqload report` is asked: the run directories and every option, checked when
    made (text as on the command line is accepted: `ReportOptions(["runs"], window_ms="20")`)."""

    paths: list[str] = field(default_factory=list)  # PATH...: the one positional argument
    out: str = _option(
        "report",
        str,
        "a directory path",
        "output directory (index.html, summary.md, summary.parquet, summary.csv, capacity.json)",
        form=re.compile(r".+"),
        group=OUTPUT,
    )
    master: Optional[str] = _option(
        None,
        str,
        MASTERS_ACCEPTED,
        "Spark master URL",
        nullable=True,
        rule=spark_master,
        default_text="embedded local[*]",
        group=SPARK,
    )
    remote: Optional[str] = _option(
        None,
        str,
        REMOTES_ACCEPTED,
        "a Spark Connect server that computes the report (it reads the run directories "
        "by their absolute paths: storage it shares with this host); not with --master or --driver-memory",
        nullable=True,
        rule=spark_remote,
        default_text="none: Spark runs here",
        group=SPARK,
    )
    master_timeout: float = _option(
        20.0,
        float,
        "seconds > 0",
        "seconds to reach a cluster master (--master) and get an executor, or a "
        "Spark Connect server (--remote) and its first answer",
        low=0,
        low_open=True,
        group=SPARK,
    )
    driver_memory: Optional[str] = _option(
        None,
        str,
        DRIVER_MEMORY_ACCEPTED,
        "Spark driver memory (the JVM heap) of the embedded session",
        nullable=True,
        rule=jvm_heap_size,
        default_text=f"{DEFAULT_DRIVER_MEMORY}, or ZMQLOAD_SPARK_DRIVER_MEMORY",
        group=SPARK,
    )
    slo_p99_us: Optional[float] = _option(
        None,
        float,
        "microseconds > 0",
        "a what-if latency SLO: p99 from the intended send time, in microseconds, in "
        "place of the p99 SLO each run was made under (a capacity probe: its search's)",
        low=0,
        low_open=True,
        nullable=True,
        group=PLANNING,
        default_text="none: each run's own SLOs (run.json)",
    )
    target_rate: Optional[int] = field(
        default=None,
        metadata={
            "option": rate_option(
                "msgs/s (all producers) the recommendation must carry",
                per_producer=False,
                nullable=True,
                default_text="the highest clean rate seen",
                group=PLANNING,
            )
        },
    )
    memory_budget: Optional[str] = _option(
        None,
        str,
        "bytes, e.g. 64MiB, 1GiB, 500MB",
        "memory budget for queued messages when recommending HWM",
        nullable=True,
        group=PLANNING,
    )
    window_ms: Optional[float] = _option(
        None,
        float,
        "milliseconds > 0",
        "time window for rates and queue depth",
        low=0,
        low_open=True,
        nullable=True,
        default_text="100, finer (down to 1) so that the shortest run has 30 windows",
        group=OUTPUT,
    )
    reorder: str = _option(
        "auto",
        str,
        "",
        "count reordered messages: needs a sort of every record per stream; auto = on up to "
        "20M receive records",
        choices=("auto", "on", "off"),
        group=OUTPUT,
    )
    strict: bool = _switch(
        "an unreadable file (a run.json, a Parquet part) is an error (exit 2), not a warning",
        RUNNING,
    )
    timings: bool = _switch("print the wall time of each Spark step on stderr", RUNNING)
    no_server: bool = _switch(
        "run Spark in this process, not in the warm report server (docs/REPORT.md)", RUNNING
    )
    debug: bool = _switch(
        "show tracebacks for unexpected errors; the JVM writes to the terminal", RUNNING
    )
    stop_server: bool = _switch(
        "stop your warm report servers (their JVMs with them) and exit; takes no PATH", RUNNING
    )

    def __post_init__(self) -> None:
        for name, opt in REPORT_OPTIONS.items():
            setattr(self, name, opt.convert(getattr(self, name)))


def _table(cls: type) -> dict[str, Option]:
    """field name -> its Option with the field's name, default and flag (--field-name unless given)."""
    return {
        f.name: dataclasses.replace(
            f.metadata["option"],
            field=f.name,
            default=f.default,
            flag=f.metadata["option"].flag or "--" + f.name.replace("_", "-"),
        )
        for f in dataclasses.fields(cls)
        if "option" in f.metadata
    }


REPORT_OPTIONS: dict[str, Option] = _table(ReportOptions)
"""field name -> Option, in field order: the report's one option table."""
