"""Named scenarios: the claims users make about HWM, linger and backpressure, settled by
measurement against the installed libzmq (`claims` lists them, `framework` holds what
every scenario shares, one module per source of claims)."""

from __future__ import annotations

from typing import Optional

from ..errors import ConfigError
from . import (
    conflate_and_linger,
    connection_resets,
    restart_claims,
    seed_000,
    seed_001,
    seed_002,
    seed_003,
    user_reports,
)
from .claims import CLAIMS, Claim
from .framework import Outcome, Scenario, ScenarioRunner, Verdict, remove_scratch_dirs

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for module in (
        seed_000,
        seed_001,
        seed_002,
        seed_003,
        user_reports,
        conflate_and_linger,
        connection_resets,
        restart_claims,
    )
    for s in module.SCENARIOS
}


def get(name: str) -> Scenario:
    if name not in SCENARIOS:
        raise ConfigError("NAME", f"unknown scenario {name!r}; accepted: {', '.join(SCENARIOS)}")
    return SCENARIOS[name]


def run_scenario(name: str, out: str, fast: bool = False, libzmq: Optional[str] = None) -> Outcome:
    scenario = get(name)
    runner = ScenarioRunner(scenario, out, fast, libzmq)
    try:
        outcome = scenario.body(runner)
    finally:
        remove_scratch_dirs()  # its ipc endpoints' directories: nothing left in the temp directory
    outcome.run_dirs = runner.run_dirs
    return outcome


def unsettled_claims() -> list[str]:
    """Claim ids no scenario settles yet."""
    settled = {c for s in SCENARIOS.values() for c in s.claims}
    return [c for c in CLAIMS if c not in settled]


__all__ = [
    "CLAIMS",
    "Claim",
    "Outcome",
    "SCENARIOS",
    "Scenario",
    "Verdict",
    "get",
    "run_scenario",
    "unsettled_claims",
]
