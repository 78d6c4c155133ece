"""A run's restarts (--restart, run.json restarts) as one row each: the cells the page, summary.md
and `run`'s summary show, every figure in one unit (seconds for when, milliseconds for how long)."""

from __future__ import annotations

from ..contract.run_record import Restart

COLUMNS = (
    "worker",
    "generation",
    "mode",
    "at (s)",
    "down (ms)",
    "lost",
    "first message (ms)",
    "recovery (ms)",
)
NOTE = (
    "One row per restart (run.json restarts). at: when the old process was ended, seconds after "
    "the start; down: until the new process was up; lost: its dropped_restart; first message: from "
    "the new process up to the first message it received (a producer's: the first of its messages "
    "received); recovery: from up until what the restart held back had arrived (the first message "
    "when it held nothing back); none: nothing arrived."
)


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.0f}"


def at_s(r: Restart) -> str:
    return f"{r.at_s:.3f}"


def down_ms(r: Restart) -> str:
    return _ms(r.down_ns) if r.t_up_ns else "never up"


def lost(r: Restart) -> str:
    return f"{r.lost:,}"


def first_message_ms(r: Restart) -> str:
    return _ms(r.first_recv_after_up_ns) if r.t_first_recv_ns else "none"


def recovery_ms(r: Restart) -> str:
    ns = r.recovery_ns
    return "none" if ns is None else _ms(ns)


def cells(r: Restart) -> list[str]:
    """One restart's row, in COLUMNS' order."""
    return [
        r.worker,
        str(r.generation),
        r.mode,
        at_s(r),
        down_ms(r),
        lost(r),
        first_message_ms(r),
        recovery_ms(r),
    ]


def brief(r: Restart) -> str:
    """One restart in a line of `run`'s summary: 'c0 at 0.400 s (down 512 ms, lost 1,234, first
    message 30 ms, recovery 80 ms)'."""
    first, recovery = first_message_ms(r), recovery_ms(r)
    return (
        f"{r.worker} at {at_s(r)} s (down {down_ms(r)}{' ms' if r.t_up_ns else ''}, lost {lost(r)}, "
        f"first message {first}{' ms' if first != 'none' else ''}, recovery {recovery}"
        f"{' ms' if recovery != 'none' else ''})"
    )
