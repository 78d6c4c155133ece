"""The page's figures drawn in forked processes (zmqload/report/figures.py): each lands where its
call stood, a figure with nothing to draw leaves nothing, and a pool that fails (a child killed)
still gives the page drawn in this process."""

from __future__ import annotations

import os
import signal

from zmqload.report import figures

PARENT = os.getpid()


def _png(label: str) -> str | None:
    return None if label == "none" else f"{label}-{len(label)}"


def _dies_in_a_child(label: str) -> str | None:
    if os.getpid() != PARENT:
        os.kill(os.getpid(), signal.SIGKILL)
    return _png(label)


def _page(plot) -> str:
    with figures.collecting() as calls:
        written = "|".join(figures.later(f"alt {x}", plot, x) for x in ("a", "none", "bb", "c"))
    assert len(calls) == 4 and "\x00" in written
    return figures.draw(written, calls)


def test_each_figure_lands_where_its_call_stood():
    drawn_now = "|".join(figures.later(f"alt {x}", _png, x) for x in ("a", "none", "bb", "c"))
    assert "\x00" not in drawn_now  # outside `collecting`: drawn at once
    assert _page(_png) == drawn_now
    assert drawn_now.split("|")[1] == ""  # nothing to draw: no <img>
    assert 'alt="alt bb" src="data:image/png;base64,bb-2"' in drawn_now


def test_a_pool_that_fails_still_gives_the_whole_page():
    assert _page(_dies_in_a_child) == _page(_png)
