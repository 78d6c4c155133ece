"""The page's figures, drawn on every core: each is a call recorded in its place as the page is
written (`later`), then run in forked processes (`draw`). A failed pool (a child killed, a figure
over its time) leaves the rest to this process: the page is the same either way."""

from __future__ import annotations

import html
import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor
from contextvars import ContextVar
from typing import Any, Callable, Optional

Plot = Callable[..., Optional[str]]
"""A function of plots.py: base64 PNG, or None where it has nothing to draw."""

FIGURE_TIMEOUT_S = 120.0
"""Longest wait for one figure from the pool (a plot of a long run takes about a second)."""

_pending: ContextVar[Optional[list[tuple[Plot, tuple[Any, ...], str]]]] = ContextVar(
    "zmqload_figures", default=None
)
_calls: list[tuple[Plot, tuple[Any, ...], str]] = []  # what a forked child draws, by index


def tag(b64: Optional[str], alt: str) -> str:
    """The <img> of a base64 PNG, or "" for none."""
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">' if b64 else ""


def _mark(i: int) -> str:
    return f"\x00figure {i}\x00"


def later(alt: str, plot: Plot, *args: Any) -> str:
    """The <img> of `plot(*args)`, or "" where it draws nothing: drawn now outside `collecting`,
    else a mark in the page that `draw` replaces."""
    calls = _pending.get()
    if calls is None:
        return tag(plot(*args), alt)
    calls.append((plot, args, alt))
    return _mark(len(calls) - 1)


class collecting:
    """`with collecting() as calls:` the figures of the page written inside are recorded."""

    def __enter__(self) -> list[tuple[Plot, tuple[Any, ...], str]]:
        self.calls: list[tuple[Plot, tuple[Any, ...], str]] = []
        self.token = _pending.set(self.calls)
        return self.calls

    def __exit__(self, *exc: object) -> None:
        _pending.reset(self.token)


def _draw_one(i: int) -> Optional[str]:
    plot, args, _ = _calls[i]
    return plot(*args)


def draw(page: str, calls: list[tuple[Plot, tuple[Any, ...], str]]) -> str:
    """`page` with each recorded figure in place of its mark."""
    global _calls
    pngs: list[Optional[str]] = [None] * len(calls)
    done = [False] * len(calls)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = min(cores or 1, len(calls))
    if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
        _calls = calls
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
        try:
            futures = [pool.submit(_draw_one, i) for i in range(len(calls))]
            for i, f in enumerate(futures):
                pngs[i] = f.result(timeout=FIGURE_TIMEOUT_S)
                done[i] = True
        except Exception:  # noqa: BLE001 - what is not drawn is drawn below, in this process
            for p in list((getattr(pool, "_processes", None) or {}).values()):
                p.kill()
        finally:
            # waited for (its processes are done or killed): a pool left running at exit has
            # Python print "Exception ignored" from its thread
            pool.shutdown(wait=True, cancel_futures=True)
            _calls = []
    for i, (plot, args, _) in enumerate(calls):
        if not done[i]:
            pngs[i] = plot(*args)
    return re.sub(
        "\x00figure (\\d+)\x00", lambda m: tag(pngs[int(m[1])], calls[int(m[1])][2]), page
    )
