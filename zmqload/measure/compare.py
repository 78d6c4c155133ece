"""Two groups of runs compared figure by figure, a difference called a change only where the runs'
own spread cannot explain it: throughput and latency by a two-stage bootstrap over the runs and
their windows, the figures a run has once by an exact permutation test over the runs (the method
and its measured reliability: docs/COMPARE.md)."""

from __future__ import annotations

import glob
import itertools
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..contract.comparison import FIGURES, PERCENTILES, UNITS, WINDOWED, Limit, RunFigures
from ..contract.histogram import PPM, ppm
from ..errors import ConfigError
from ..store.record_files import is_run_dir
from .histogram import bucket_value
from .run_figures import WINDOWS, run_figures

RESAMPLES = 2000
LEVEL = 0.95
MIN_CHANGE = 0.01
"""Smallest relative change called one: the latency buckets are up to 0.8 % wide."""
SINGLE_RUN_CHANGE = 0.10
"""Smallest relative change called one when a side has a single run: two runs of one workload
made at the same time on the shared 2-core development machine differed in throughput by under
10 % in 10 of the first 14 pairs, often beyond what their windows showed (docs/COMPARE.md)."""
PERMUTATION_ALPHA = 0.05
SEED = 20261128  # fixed: the same runs give the same verdicts

CHANGE_UP, CHANGE_DOWN, SAME, UNJUDGED = "higher", "lower", "no difference", "not judged"


@dataclass
class Group:
    """One side: a name and its runs."""

    name: str
    runs: list[RunFigures]

    def mean(self, figure: str) -> Optional[float]:
        values = [r.figures.get(figure) for r in self.runs]
        known = [v for v in values if v is not None]
        return float(np.mean(known)) if known and len(known) == len(values) else None


@dataclass
class Row:
    """One figure of the comparison."""

    figure: str
    base: Optional[float]
    candidate: Optional[float]
    change: Optional[float]
    """Relative difference, candidate / base - 1 (windows' statistic for WINDOWED figures)."""
    low: Optional[float] = None
    high: Optional[float] = None
    """The 95 % interval of `change` (WINDOWED figures)."""
    p_value: Optional[float] = None
    """Permutation test over the runs (the other figures, enough runs)."""
    verdict: str = UNJUDGED
    method: str = ""

    def cells(self) -> tuple[str, str, str, str, str, str]:
        """The row as the terminal and the report show it (COLUMNS)."""
        unit = UNITS.get(self.figure, "")
        return (
            self.figure + (f" ({unit})" if unit else ""),
            _value(self.figure, self.base),
            _value(self.figure, self.candidate),
            self.change_text(),
            self.interval_text(),
            self.verdict,
        )

    def change_text(self) -> str:
        if self.change is not None:
            return f"{self.change * 100:+.1f}%"
        if self.base is not None and self.candidate is not None and self.candidate != self.base:
            return f"{self.candidate - self.base:+,g}"
        return ""

    def interval_text(self) -> str:
        if self.low is not None and self.high is not None:
            return f"{self.low * 100:+.1f}..{self.high * 100:+.1f}%"
        if self.p_value is not None:
            return f"p = {self.p_value:.3f}"
        return ""


COLUMNS = ("figure", "base", "candidate", "change", "95% interval", "verdict")


def _value(figure: str, value: Optional[float]) -> str:
    if value is None:
        return "-"
    if figure in PERCENTILES:
        return f"{value / 1000:,.1f}"  # ns as us
    return f"{value:,.0f}" if abs(value) >= 100 or value == int(value) else f"{value:,.2f}"


@dataclass
class Comparison:
    base: str
    candidate: str
    base_runs: list[str]
    candidate_runs: list[str]
    rows: list[Row]
    regressed: list[str] = field(default_factory=list)
    """The --fail-if limits broken, as `p99=+10%: +23.1% (higher)`."""

    def changes(self) -> list[Row]:
        return [r for r in self.rows if r.verdict in (CHANGE_UP, CHANGE_DOWN)]

    def said(self) -> str:
        """One line: which figures changed, by what method, or that none did."""
        changed = self.changes()
        if not changed:
            return "no difference beyond the runs' spread in any figure judged"
        return "changed: " + ", ".join(
            f"{r.figure} {r.verdict} ({r.change_text()}, {r.method})" for r in changed
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# -- the sides ---------------------------------------------------------------------------------
def load_runs(path: str, option: str, windows: int = WINDOWS) -> list[RunFigures]:
    """A run directory, or a directory of them: their figures (ConfigError naming `option` when
    there are none)."""
    if is_run_dir(path):
        dirs = [path]
    elif os.path.isdir(path):
        dirs = sorted(
            d for d in glob.glob(os.path.join(glob.escape(path), "run=*")) if is_run_dir(d)
        )
    else:
        raise ConfigError(
            option, f"{path}: no such directory; accepted: a run directory or one of them"
        )
    if not dirs:
        raise ConfigError(option, f"{path}: holds no run directory (run=*/run.json)")
    return [run_figures(d, windows) for d in dirs]


def split_by(runs: list[RunFigures], setting: str, option: str = "--by") -> tuple[Group, Group]:
    """Two groups of one directory's runs by a setting (a workload option's name, as its flag
    without the dashes or its field: rcvhwm, libzmq, consumer-delay-us); the base is the first
    run's value (run directories in name order: by start time for the default names)."""
    from ..contract.workload import OPTIONS

    fields = {opt.flag[2:]: name for name, opt in OPTIONS.items()} | {n: n for n in OPTIONS}
    name = fields.get(setting.lstrip("-"))
    if name is None:
        raise ConfigError(option, f"got {setting!r}; accepted: a run option's name, e.g. rcvhwm")
    values = list(dict.fromkeys(r.settings.get(name, "") for r in runs))
    if len(values) != 2:
        raise ConfigError(
            option,
            f"the runs hold {len(values)} values of {setting} ({', '.join(values)}); "
            "accepted: exactly two",
        )
    groups = [
        Group(f"{setting}={v}", [r for r in runs if r.settings.get(name, "") == v]) for v in values
    ]
    return groups[0], groups[1]


# -- the figures compared ----------------------------------------------------------------------
def compare(
    base: Group,
    candidate: Group,
    limits: Sequence[Limit] = (),
    single_run_change: float = SINGLE_RUN_CHANGE,
    seed: int = SEED,
) -> Comparison:
    """`single_run_change`: the smallest relative change called one when a side has one run."""
    rng = np.random.default_rng(seed)
    repeated = min(len(base.runs), len(candidate.runs)) > 1
    floor = MIN_CHANGE if repeated else max(MIN_CHANGE, single_run_change)
    rows = [_windowed(base, candidate, figure, rng, floor) for figure in WINDOWED]
    rows += [_run_level(base, candidate, figure) for figure in FIGURES if figure not in WINDOWED]
    result = Comparison(
        base.name,
        candidate.name,
        [r.run_id for r in base.runs],
        [r.run_id for r in candidate.runs],
        rows,
    )
    by_name = {r.figure: r for r in rows}
    for limit in limits:
        row = by_name[limit.figure]
        if row.verdict == SAME or row.base is None or row.candidate is None:
            continue
        if limit.exceeded(row.base, row.candidate):
            moved = _said(row)
            result.regressed.append(f"{limit}: {moved} ({row.verdict})")
    return result


def _said(row: Row) -> str:
    if row.change is not None and row.base:
        return row.change_text()
    assert row.base is not None and row.candidate is not None
    return f"{row.candidate - row.base:+g}"


def _relative(base: Optional[float], candidate: Optional[float]) -> Optional[float]:
    if base is None or candidate is None or base == 0:
        return None
    return candidate / base - 1


def _windowed(
    base: Group, candidate: Group, figure: str, rng: np.random.Generator, floor: float
) -> Row:
    row = Row(figure, base.mean(figure), candidate.mean(figure), None)
    sides = [_WindowSet(g.runs) for g in (base, candidate)]
    if not all(s.usable for s in sides):
        row.method = "no receipts recorded"
        return row
    buckets = np.union1d(sides[0].buckets, sides[1].buckets)
    observed, drawn = [], []
    for side in sides:
        stat = side.statistic(figure, buckets)
        observed.append(stat(np.ones((1, side.windows))))
        drawn.append(stat(side.resample(rng, RESAMPLES)))
    if not (observed[0][0] > 0 and np.isfinite(observed[1][0])):
        row.method = "nothing to compare"
        return row
    with np.errstate(divide="ignore", invalid="ignore"):  # a resample without receipts: left out
        ratio = drawn[1] / drawn[0] - 1
    ratio = ratio[np.isfinite(ratio)]
    if len(ratio) < RESAMPLES // 2:
        row.method = "too few windows with receipts"
        return row
    row.change = float(observed[1][0] / observed[0][0] - 1)
    tail = (1 - LEVEL) / 2 * 100
    row.low, row.high = (float(v) for v in np.percentile(ratio, [tail, 100 - tail]))
    runs = max(len(base.runs), len(candidate.runs))
    row.method = (
        f"bootstrap over {'runs and ' if runs > 1 else ''}windows ({sides[0].windows} + "
        f"{sides[1].windows}), a change over {floor:.0%}"
    )
    apart = row.low > 0 or row.high < 0
    if apart and abs(row.change) > floor:
        row.verdict = CHANGE_UP if row.change > 0 else CHANGE_DOWN
    else:
        row.verdict = SAME
    return row


def _run_level(base: Group, candidate: Group, figure: str) -> Row:
    row = Row(figure, base.mean(figure), candidate.mean(figure), None)
    row.change = _relative(row.base, row.candidate)
    a = [r.figures.get(figure) for r in base.runs]
    b = [r.figures.get(figure) for r in candidate.runs]
    if any(v is None for v in (*a, *b)):
        row.method = "not measured in every run"
        return row
    values = np.array([*a, *b], dtype=float)
    if np.all(values == values[0]):
        row.verdict, row.method = SAME, "equal in every run"
        return row
    row.p_value = _permutation_p(values, len(a))
    row.method = f"permutation test over runs ({len(a)} + {len(b)})"
    if row.p_value >= PERMUTATION_ALPHA:
        # with too few runs no split can reach the level: say so rather than "no difference"
        least = 2 / math.comb(len(values), len(a))
        row.verdict = SAME if least < PERMUTATION_ALPHA else UNJUDGED
        if row.verdict == UNJUDGED:
            row.p_value = None  # no split of so few runs could have told
            row.method = f"too few runs to judge ({len(a)} + {len(b)}; 4 + 4 can)"
        return row
    assert row.base is not None and row.candidate is not None
    row.verdict = CHANGE_UP if row.candidate > row.base else CHANGE_DOWN
    return row


def _permutation_p(values: np.ndarray, n_base: int) -> float:
    """Two-sided exact p of the difference of means over every split of the runs (up to 20,000
    splits drawn at random beyond that)."""
    n = len(values)
    observed = abs(values[n_base:].mean() - values[:n_base].mean())
    total = values.sum()
    if math.comb(n, n_base) <= 20_000:
        splits = itertools.combinations(range(n), n_base)
        sums = np.array([values[list(s)].sum() for s in splits])
    else:
        rng = np.random.default_rng(SEED)
        sums = np.array([values[rng.permutation(n)[:n_base]].sum() for _ in range(20_000)])
    diffs = np.abs((total - sums) / (n - n_base) - sums / n_base)
    return float(np.mean(diffs >= observed - 1e-9 * max(1.0, observed)))


class _WindowSet:
    """A group's windows, stacked: per window its seconds, receipts and histogram."""

    def __init__(self, runs: list[RunFigures]):
        kept = [r.windows for r in runs if r.windows is not None and r.windows.seconds]
        self.usable = len(kept) == len(runs) and bool(kept)
        self.sizes = [len(w.seconds) for w in kept]
        self.windows = sum(self.sizes)
        self.seconds = np.array([s for w in kept for s in w.seconds])
        self.messages = np.array([m for w in kept for m in w.messages], dtype=float)
        self.buckets = np.unique(
            np.concatenate(
                [np.asarray(w.buckets, dtype=np.int64) for w in kept] or [np.zeros(0, np.int64)]
            )
        )
        self._kept = kept

    def histograms(self, buckets: np.ndarray) -> np.ndarray:
        """(windows, len(buckets)) counts."""
        out = np.zeros((self.windows, len(buckets)))
        row = 0
        for w in self._kept:
            where = np.searchsorted(buckets, w.buckets)
            for counts in w.counts:
                out[row, where] = counts
                row += 1
        return out

    def resample(self, rng: np.random.Generator, times: int) -> np.ndarray:
        """(times, windows) weights: runs drawn with replacement, then each drawn run's windows
        (the sum of a run's draws is one multinomial of its drawn count times its windows)."""
        runs = len(self.sizes)
        picks = rng.integers(runs, size=(times, runs))
        drawn = (picks[:, :, None] == np.arange(runs)).sum(axis=1)
        parts = [
            rng.multinomial(drawn[:, i] * size, np.full(size, 1 / size))
            for i, size in enumerate(self.sizes)
        ]
        return np.concatenate(parts, axis=1).astype(float)

    def statistic(self, figure: str, buckets: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        """weights (n, windows) -> the figure of each weighting (n,)."""
        if figure == "throughput":
            return lambda w: (w @ self.messages) / np.where((s := w @ self.seconds) > 0, s, np.nan)
        hist = self.histograms(buckets)
        values = bucket_value(buckets.astype(np.int64)).astype(float)
        q = ppm(PERCENTILES[figure])

        def percentile(w: np.ndarray) -> np.ndarray:
            cum = np.cumsum(w @ hist, axis=1)
            n = cum[:, -1]
            rank = np.maximum(1, np.ceil(q * n / PPM))
            index = (cum >= rank[:, None]).argmax(axis=1)
            return np.where(n > 0, values[index], np.nan)

        return percentile
