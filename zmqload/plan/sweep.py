"""Sweeps: the cartesian product of option lists (or explicit points), one run each, in turn. Every
point is validated before the first run; a failed run is recorded and the sweep goes on. Each
point's axis values go into its `label` (docs/SWEEPS.md)."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import itertools
import math
import os
import re
import secrets
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Optional

from ..contract.workload import OPTIONS, Option, Workload, flag_of, shown
from ..contract import uris
from ..contract.codec import convert, to_builtins
from ..contract.states import PointStatus, RunStatus, SweepStatus
from ..contract.sweep_record import Counts, PointEntry, PointSummary, SweepRecord
from ..errors import ConfigError, RecordError
from ..store.record_files import read_run, write_sweep
from ..runner.preflight import preflight
from ..runner.resets import check_can_reset

if TYPE_CHECKING:
    from ..runner.state import ProgressSnapshot

# Workload fields the sweep sets itself: a point cannot vary them.
RESERVED = ("out", "run_name", "label")
# Keys of a TOML file's [sweep] table besides fixed workload options.
SWEEP_KEYS = ("out", "name", "report")
TOML_TABLES = ("sweep", "axes", "points")
MAX_RUN_NAME = 100
MAX_SWEEP_NAME = 40
MAX_POINTS = 10_000
"""Points of one sweep at most (each a run of a second or more: 10,000 is hours), checked before any is
made: a few axes of a hundred values each would otherwise be millions of Workloads in memory."""
MAX_SWEEP_FILE = 1024 * 1024
"""Bytes of a sweep file at most (a hand-written file is a few hundred)."""
# Wall time of a run beyond its duration (spawn workers, warm up, drain, write run.json),
# measured for tiny tcp runs on 2 cores; replaced by what the sweep itself observes.
RUN_OVERHEAD_S = 1.0
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.\-]+")
# Options whose values name themselves in a run name ("pub-sub", not "patternpub-sub").
_SELF_NAMED = ("pattern", "transport", "send_mode", "close_order", "compression")


# -- options ---------------------------------------------------------------------------------
def options() -> dict[str, Option]:
    """field -> Option (zmqload.contract.workload.OPTIONS) of every workload option a sweep can set or
    vary: all but the ones the sweep sets itself."""
    return {name: opt for name, opt in OPTIONS.items() if name not in RESERVED}


def _key_to_field(key: str) -> Optional[str]:
    """A TOML key (field name or option spelling, `-` or `_`) -> workload field, or None."""
    opts = options()
    name = key.replace("-", "_")
    if name in opts:
        return name
    for opt in opts.values():
        if opt.flag[2:].replace("-", "_") == name:
            return opt.field
    return None


def _accepted_keys(extra: Iterable[str] = ()) -> str:
    return ", ".join(list(extra) + list(options()))


def parse_value(name: str, value: Any, where: str = "") -> Any:
    """A value from a file or the API, converted and checked as on the command line (so
    rates accept 10k / 1M / max); ConfigError naming the option and `where` it came from."""
    opt = options()[name]
    if isinstance(value, (list, dict)):
        raise ConfigError(opt.flag, f"{where}got {shown(value)}; accepted: a single value")
    try:
        return opt.convert(value)
    except ConfigError as exc:
        raise ConfigError(exc.option, f"{where}{exc.message}") from None


# -- what to sweep ---------------------------------------------------------------------------
@dataclass
class SweepSpec:
    """What the user asked for: fixed values, axes (lists: their product is swept) and
    explicit points (each a dict of values on top of the fixed ones)."""

    fixed: dict[str, Any] = field(default_factory=dict)
    axes: dict[str, list[Any]] = field(default_factory=dict)
    points: list[dict[str, Any]] = field(default_factory=list)
    out: str = "runs"
    name: Optional[str] = None
    report: bool = False

    def set_option(self, name: str, values: list[Any]) -> None:
        """One value fixes the option for every point; several make it an axis. Replaces
        whatever the spec said about the option before (command line over file)."""
        self.fixed.pop(name, None)
        self.axes.pop(name, None)
        if len(values) == 1:
            self.fixed[name] = values[0]
        else:
            self.axes[name] = list(values)


def load_toml(path: str) -> SweepSpec:
    """Read a sweep file: [sweep] fixed values and out/name/report, [axes] lists,
    [[points]] explicit points. See docs/SWEEPS.md."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise ConfigError(
                "--config",
                "reading TOML needs Python 3.11+ or the tomli package; accepted: pip install tomli",
            )
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SWEEP_FILE + 1)
    except (OSError, ValueError) as exc:  # ValueError: a path with a NUL byte
        raise ConfigError(
            "--config",
            f"cannot read {path!r} ({getattr(exc, 'strerror', None) or exc}); "
            "accepted: a readable TOML file",
        )
    if len(raw) > MAX_SWEEP_FILE:
        raise ConfigError(
            "--config",
            f"{path}: above {MAX_SWEEP_FILE:,} bytes; accepted: a sweep file as in docs/SWEEPS.md",
        )
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (
        ValueError,
        RecursionError,
    ) as exc:  # TOMLDecodeError, not UTF-8, an int of 4300+ digits
        why = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise ConfigError(
            "--config", f"{path}: {why}; accepted: TOML (UTF-8) as in docs/SWEEPS.md"
        ) from None
    for key in data:
        if key not in TOML_TABLES:
            raise ConfigError(
                "--config",
                f"{path}: unknown table {shown(key)}; accepted: [sweep], [axes], [[points]]",
            )
    spec = SweepSpec()
    sweep = _table(path, data, "sweep", dict)
    for key, value in sweep.items():
        if key in SWEEP_KEYS:
            if key == "report" and not isinstance(value, bool):
                raise ConfigError(
                    "--config", f"{path} [sweep]: report = {shown(value)}; accepted: true or false"
                )
            if key in ("out", "name") and not isinstance(value, str):
                raise ConfigError(
                    "--config", f"{path} [sweep]: {key} = {shown(value)}; accepted: a string"
                )
            setattr(spec, key, value)
            continue
        name = _field(path, "[sweep]", key, SWEEP_KEYS)
        spec.fixed[name] = parse_value(name, value, f"{path} [sweep]: ")
    for key, values in _table(path, data, "axes", dict).items():
        name = _field(path, "[axes]", key)
        values = values if isinstance(values, list) else [values]
        if len(values) > MAX_POINTS:
            raise ConfigError(
                options()[name].flag,
                f"{path} [axes]: {len(values):,} values; accepted: at most {MAX_POINTS:,} points",
            )
        if not values:
            raise ConfigError(
                options()[name].flag, f"{path} [axes]: empty list; accepted: one or more values"
            )
        spec.axes[name] = [parse_value(name, v, f"{path} [axes]: ") for v in values]
    points = _table(path, data, "points", list)
    if len(points) > MAX_POINTS:
        raise ConfigError(
            "--config", f"{path}: {len(points):,} [[points]]; accepted: at most {MAX_POINTS:,}"
        )
    for number, point in enumerate(points, 1):
        if not isinstance(point, dict):
            raise ConfigError(
                "--config", f"{path}: points must be tables; accepted: [[points]] entries"
            )
        where = f"{path} [[points]] #{number}: "
        spec.points.append(
            {
                (name := _field(path, f"[[points]] #{number}", key)): parse_value(
                    name, value, where
                )
                for key, value in point.items()
            }
        )
    return spec


def _table(path: str, data: dict[str, Any], key: str, kind: type) -> Any:
    value = data.get(key, kind())
    if not isinstance(value, kind):
        form = "[[points]] (an array of tables)" if kind is list else f"[{key}] (a table)"
        raise ConfigError("--config", f"{path}: {key} has the wrong form; accepted: {form}")
    return value


def _field(path: str, where: str, key: str, extra: Iterable[str] = ()) -> str:
    name = _key_to_field(key)
    if name is None:
        raise ConfigError(
            "--config",
            f"{path} {where}: unknown key {shown(key)}; accepted: {_accepted_keys(extra)}",
        )
    return name


# -- the planned sweep -----------------------------------------------------------------------
@dataclass
class Point:
    index: int
    values: dict[str, Any]  # the varying options' values at this point
    workload: Workload  # validated; run_name and label set
    estimate_s: Optional[float]  # run time from the duration / count / rate, None if unknown
    status: PointStatus = PointStatus.PENDING
    error: Optional[str] = None
    elapsed_s: Optional[float] = None  # wall time of the run, overhead included
    summary: Optional[PointSummary] = None

    @property
    def run_id(self) -> str:
        assert self.workload.run_name is not None  # plan() names every point's run
        return self.workload.run_name

    @property
    def run_dir(self) -> str:
        return os.path.join(self.workload.out, f"run={self.run_id}")

    def to_record(self) -> PointEntry:
        return PointEntry(
            index=self.index,
            values=dict(self.values),
            run_id=self.run_id,
            run_dir=self.run_dir,
            status=self.status,
            error=self.error,
            elapsed_s=self.elapsed_s,
            estimate_s=self.estimate_s,
            summary=self.summary,
        )

    def to_dict(self) -> dict[str, Any]:
        plain: dict[str, Any] = to_builtins(self.to_record())
        return plain


@dataclass
class Sweep:
    sweep_id: str
    out: str
    spec: SweepSpec
    varying: list[str]  # options that differ between points (label keys)
    points: list[Point]
    status: Optional[SweepStatus] = None  # None: planned, not started
    started_at: Optional[str] = None
    finished_at: Optional[str] = None

    @property
    def path(self) -> str:
        return os.path.join(self.out, f"sweep-{self.sweep_id}.json")

    def count(self, status: str) -> int:
        return sum(p.status == status for p in self.points)

    def to_record(self) -> SweepRecord:
        """The sweep as its file holds it (contract/sweep_record.py); a started sweep's only."""
        if self.status is None:
            raise ValueError(f"sweep {self.sweep_id} has not started: it has no record yet")
        counts = {status: self.count(status) for status in PointStatus}
        return SweepRecord(
            sweep_id=self.sweep_id,
            status=self.status,
            out=self.out,
            started_at=self.started_at,
            finished_at=self.finished_at,
            axes={k: list(v) for k, v in self.spec.axes.items()},
            fixed=dict(self.spec.fixed),
            explicit_points=[dict(p) for p in self.spec.points],
            varying=list(self.varying),
            counts=Counts(
                complete=counts[PointStatus.COMPLETE],
                failed=counts[PointStatus.FAILED],
                interrupted=counts[PointStatus.INTERRUPTED],
                not_run=counts[PointStatus.NOT_RUN],
                pending=counts[PointStatus.PENDING],
            ),
            points=[p.to_record() for p in self.points],
        )

    def to_dict(self) -> dict[str, Any]:
        plain: dict[str, Any] = to_builtins(self.to_record())
        return plain

    def write(self) -> None:
        """The sweep's file, rewritten atomically through the codec."""
        write_sweep(self.path, self.to_record())

    # -- time left ---------------------------------------------------------------------------
    def estimate(self) -> tuple[float, int]:
        """(seconds for the whole sweep, points whose length is unknown: count-bound unpaced)."""
        known = [p.estimate_s for p in self.points if p.estimate_s is not None]
        return sum(known) + RUN_OVERHEAD_S * len(self.points), len(self.points) - len(known)

    def time_left(self, current: Optional[Point] = None, current_elapsed: float = 0.0) -> float:
        """Seconds until the sweep ends: the estimates of the points not yet run, corrected
        by the overhead (and the length of unknown-length runs) observed so far."""
        finished = [
            (p.elapsed_s, p.estimate_s)
            for p in self.points
            if p.elapsed_s is not None and p.status in (PointStatus.COMPLETE, PointStatus.FAILED)
        ]
        timed = [elapsed - estimate for elapsed, estimate in finished if estimate is not None]
        overhead = max(0.0, sum(timed) / len(timed)) if timed else RUN_OVERHEAD_S
        untimed = [elapsed for elapsed, estimate in finished if estimate is None]
        unknown = sum(untimed) / len(untimed) if untimed else overhead
        left = 0.0
        for p in self.points:
            if p.status is not PointStatus.PENDING:
                continue
            expected = (p.estimate_s + overhead) if p.estimate_s is not None else unknown
            left += max(0.0, expected - current_elapsed) if p is current else expected
        return left


def new_sweep_id() -> str:
    return f"{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def _compact(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if value is None:
        return "default"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and value:
        for suffix, unit in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
            if value % unit == 0:
                return f"{value // unit}{suffix}"
    return str(value)


def point_tag(values: dict[str, Any]) -> str:
    """Short readable tag of a point's values: pub-sub_sndhwm10_size64_rate10k."""
    words = []
    for name, value in values.items():
        if name in _SELF_NAMED and isinstance(value, str):
            words.append(value)
        elif name == "rate" and value == 0:
            words.append("ratemax")
        elif isinstance(value, bool):
            words.append(name if value else "no" + name)
        else:
            words.append(f"{name}{_compact(value)}")
    return _NAME_CHARS.sub("-", "_".join(words))


def run_name(sweep_id: str, index: int, width: int, values: dict[str, Any]) -> str:
    name = f"{sweep_id}-{index:0{width}d}"
    tag = point_tag(values)
    if tag:
        name = f"{name}-{tag}"[:MAX_RUN_NAME].rstrip("-_.")
    return name


def estimate_run_s(w: Workload) -> Optional[float]:
    """Seconds the producers are busy, from the duration or count/rate; None when only an
    unpaced count bounds the run."""
    bounds = []
    if w.duration is not None:
        bounds.append(w.duration)
    if w.count is not None and w.rate:
        bounds.append(w.count / w.rate)
    if not bounds:
        return None
    return min(bounds) + w.close_pause_ms / 1000 + w.join_delay_ms / 1000


def plan(spec: SweepSpec) -> Sweep:
    """Every point of the sweep as a validated Workload. Raises ConfigError (naming the
    option and what it accepts) before anything runs or is created."""
    opts = options()
    for name in itertools.chain(spec.fixed, spec.axes, *spec.points):
        if name not in opts:
            raise ConfigError(
                flag_of(str(name)), f"not an option a sweep can set; accepted: {_accepted_keys()}"
            )
    for name, values in spec.axes.items():
        if not isinstance(values, (list, tuple)) or not values:
            raise ConfigError(
                opts[name].flag, f"got {shown(values)}; accepted: a non-empty list of values"
            )
    total = (
        math.prod(len(values) for values in spec.axes.values())
        if spec.axes or not spec.points
        else 0
    )
    if total + len(spec.points) > MAX_POINTS:
        named = " x ".join(opts[name].flag for name in spec.axes) or "--config"
        raise ConfigError(
            named,
            f"{total + len(spec.points):,} points; accepted: at most {MAX_POINTS:,} "
            "(the product of the axes' lengths, plus explicit points)",
        )
    for name, values in spec.axes.items():
        seen: set[tuple[type, object]] = set()
        for value in (parse_value(name, v) for v in values):
            if (type(value), value) in seen:
                raise ConfigError(
                    opts[name].flag, f"got {shown(value)} twice; accepted: distinct values"
                )
            seen.add((type(value), value))
    sweep_id = spec.name or new_sweep_id()
    if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,%d}" % MAX_SWEEP_NAME, sweep_id):
        raise ConfigError(
            "--name",
            f"got {shown(sweep_id)}; accepted: 1-{MAX_SWEEP_NAME} letters, digits, '.', '_' or '-'",
        )
    if not isinstance(spec.out, str) or not spec.out:
        raise ConfigError("--out", f"got {shown(spec.out)}; accepted: a directory path")
    uris.local_only(spec.out)  # the sweep's own record is written as it goes

    varying = list(spec.axes)
    for point in spec.points:
        varying += [name for name in point if name not in varying]
    combos = (
        [dict(zip(spec.axes, values)) for values in itertools.product(*spec.axes.values())]
        if spec.axes or not spec.points
        else []
    )
    combos += [dict(point) for point in spec.points]
    explicit_from = len(combos) - len(spec.points)
    width = max(3, len(str(len(combos) - 1)))

    points: list[Point] = []
    for index, combo in enumerate(combos):
        try:
            w = Workload(**{**spec.fixed, **combo})  # a point's own values over the fixed ones
            labels = {name: getattr(w, name) for name in varying}
            w.out = spec.out
            w.run_name = run_name(sweep_id, index, width, labels)
            w.label = dict(labels)
            preflight(w.validate())
            if w.reset_times and not any(p.workload.reset_times for p in points):
                check_can_reset(w)  # proven once, before the first run
        except ConfigError as exc:
            if index >= explicit_from:
                raise ConfigError(
                    exc.option, f"{exc.message} (in [[points]] #{index - explicit_from + 1})"
                )
            raise
        points.append(Point(index, labels, w, estimate_run_s(w)))
    sweep = Sweep(sweep_id, spec.out, spec, varying, points)
    if os.path.exists(sweep.path):
        raise ConfigError("--name", f"{sweep.path} already exists; accepted: a new sweep name")
    for planned in points:
        if os.path.exists(planned.run_dir):
            raise ConfigError(
                "--name", f"{planned.run_dir} already exists; accepted: a new sweep name"
            )
    return sweep


# -- running it ------------------------------------------------------------------------------
class SweepReporter:
    """What a sweep tells its audience; the command line shows it with rich. Every method
    is optional to override."""

    def sweep_started(self, sweep: Sweep) -> None: ...

    def run_started(self, sweep: Sweep, point: Point) -> None: ...

    def run_progress(
        self,
        sweep: Sweep,
        point: Point,
        fraction: float,
        sent: int,
        received: int,
        elapsed_s: float,
    ) -> None: ...

    def run_finished(self, sweep: Sweep, point: Point) -> None: ...

    def sweep_finished(self, sweep: Sweep) -> None: ...


class _RunWatch:
    """The runner's progress hook, turned into the sweep's per-run progress."""

    def __init__(self, sweep: Sweep, point: Point, reporter: SweepReporter) -> None:
        self.sweep, self.point, self.reporter = sweep, point, reporter
        self.started = time.monotonic()
        self._last = 0.0

    def start(self, snapshot: ProgressSnapshot) -> None:
        self.started = time.monotonic()

    def update(self, snapshot: ProgressSnapshot) -> None:
        now = time.monotonic()
        if now - self._last < 0.1:
            return
        self._last = now
        try:
            w = self.point.workload
            sent, received = snapshot.sent, snapshot.received
            fraction = 0.0
            if w.count is not None:
                fraction = sent / (w.count * w.producers)
            if self.point.estimate_s:
                fraction = max(
                    fraction, (now - self.started) / (self.point.estimate_s + RUN_OVERHEAD_S)
                )
            self.reporter.run_progress(
                self.sweep, self.point, min(fraction, 0.99), sent, received, now - self.started
            )
        except Exception:  # a display problem must never break a run
            pass

    def stop(self) -> None:
        pass


_SUMMARY_KEYS = (
    "sent",
    "received",
    "lost",
    "loss_ratio",
    "eagain",
    "timeout",
    "throughput_msgs",
    "throughput_mb",
    "elapsed_s",
)


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def _recorded_status(point: Point) -> Optional[RunStatus]:
    try:
        return read_run(point.run_dir).status
    except RecordError:
        return None


def execute(sweep: Sweep, reporter: Optional[SweepReporter] = None) -> Sweep:
    """Run every point in order. A failed run is recorded and the sweep goes on. On Ctrl-C
    (or SIGTERM) the current run is recorded as interrupted by the runner, the sweep json
    says interrupted, and KeyboardInterrupt is raised again."""
    from ..runner import run, signals
    from ..runner.preflight import check_output_dir

    reporter = reporter or SweepReporter()
    check_output_dir(sweep.out)
    sweep.status, sweep.started_at = SweepStatus.RUNNING, _utc_now()
    sweep.write()
    reporter.sweep_started(sweep)
    current, started = None, time.monotonic()
    with (
        signals.handled()
    ):  # Ctrl-C and SIGTERM raised as KeyboardInterrupt; each run records itself
        try:
            for point in sweep.points:
                current, started = point, time.monotonic()
                reporter.run_started(sweep, point)
                try:
                    result = run(
                        dataclasses.replace(point.workload, label=dict(point.workload.label)),
                        progress=_RunWatch(sweep, point, reporter),
                    )
                    point.status = PointStatus(result.status)
                    figures = {k: v for k, v in result.summary().items() if k in _SUMMARY_KEYS}
                    point.summary = convert(
                        {**figures, "latency_intended_p99_us": result.latency_us(99)}, PointSummary
                    )
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # recorded; the sweep goes on
                    point.status = PointStatus.FAILED
                    point.error = str(exc) if str(exc) else type(exc).__name__
                finally:
                    point.elapsed_s = round(time.monotonic() - started, 3)
                if point.status is PointStatus.FAILED and _recorded_status(point) is None:
                    point.error = f"{point.error} (no run directory was created)"
                current = None
                sweep.write()
                reporter.run_finished(sweep, point)
            sweep.status = SweepStatus.COMPLETE
        except KeyboardInterrupt:
            sweep.status = SweepStatus.INTERRUPTED
            if current is not None and current.status is PointStatus.PENDING:
                if current.elapsed_s is None:
                    current.elapsed_s = round(time.monotonic() - started, 3)
                current.status = PointStatus.INTERRUPTED
                current.error = "interrupted (Ctrl-C or SIGTERM)"
            for point in sweep.points:
                if point.status is PointStatus.PENDING:
                    point.status = PointStatus.NOT_RUN
            raise
        finally:
            with signals.held():  # the sweep's record says how it ended, whatever comes meanwhile
                sweep.finished_at = _utc_now()
                sweep.write()
                reporter.sweep_finished(sweep)
    return sweep
