"""A sweep's file, `<out>/sweep-<id>.json`, as a type, `SweepRecord`, through the one codec as
run.json is; rewritten atomically after every run so it is current even if the sweep is killed.
docs/SWEEPS.md's field table is generated from these types."""

from __future__ import annotations

from typing import Optional, Union

import msgspec

from .codec import Record
from .records import SCHEMA_VERSION
from .states import PointStatus, SweepStatus

OptionValue = Union[bool, int, float, str, None]
"""An option's value as a record holds it: parsed on the command line and in a TOML file
(`10k` is 10000, unset is null), as given through the Python API."""


class PointSummary(Record):
    """The figures of the point's run (RunResult.summary(), a part of it)."""

    sent: int = 0
    received: int = 0
    lost: int = 0
    loss_ratio: float = 0.0
    eagain: int = 0
    timeout: int = 0
    throughput_msgs: float = 0.0
    throughput_mb: float = 0.0
    elapsed_s: float = 0.0
    """The run's own elapsed time (sending and receiving)."""
    latency_intended_p99_us: Optional[float] = None
    """p99 latency from the intended send time (null: nothing received)."""


class PointEntry(Record):
    """One point of the sweep: its values, its run and how the run ended."""

    index: int
    """Its place in the sweep, from 0 (the run name's number)."""
    values: dict[str, OptionValue] = {}
    """The varying options' values at this point (also the run's workload.label)."""
    run_id: str = ""
    run_dir: str = ""
    status: PointStatus = PointStatus.PENDING
    """The run's status once run; `pending` before, `not run` when the sweep was interrupted first."""
    error: Optional[str] = None
    """Why the run failed (one line), else null."""
    elapsed_s: Optional[float] = None
    """Wall time of the run, start-up and drain included; null until run."""
    estimate_s: Optional[float] = None
    """The run's expected sending time (duration, or count / rate); null: unknown (unpaced --count)."""
    summary: Optional[PointSummary] = None
    """null until the run completed (and for a run that raised)."""


class Counts(Record):
    """Points by status."""

    complete: int = 0
    failed: int = 0
    interrupted: int = 0
    not_run: int = msgspec.field(default=0, name="not run")
    pending: int = 0


class SweepRecord(Record):
    """One `zmqload sweep`'s sweep-<id>.json (docs/SWEEPS.md)."""

    schema_version: int = SCHEMA_VERSION
    """The records' schema version (contract.records.SCHEMA_VERSION, run.json's too)."""
    sweep_id: str = ""
    """--name, or time and a random suffix; the prefix of every run name."""
    status: SweepStatus = SweepStatus.RUNNING
    """`running` from the start on (left so: the sweep was killed), then how it ended."""
    out: str = ""
    """--out: the parent of the run directories and of this file."""
    started_at: Optional[str] = None
    """ISO-8601 UTC."""
    finished_at: Optional[str] = None
    """ISO-8601 UTC; null while running."""
    axes: dict[str, list[OptionValue]] = {}
    """The options given several values: their product is swept (the first given is the outermost loop)."""
    fixed: dict[str, OptionValue] = {}
    """The options given one value, the same for every point."""
    explicit_points: list[dict[str, OptionValue]] = []
    """A TOML file's [[points]], each run after the product."""
    varying: list[str] = []
    """The options that differ between points (every run's label keys)."""
    counts: Counts = msgspec.field(default_factory=Counts)
    points: list[PointEntry] = []
    """Every point, in the order run."""
