"""What every claim test asserts of a scenario's outcome (tests/test_scenarios_user.py,
tests/test_scenarios_conflate.py)."""

from __future__ import annotations

from zmqload.scenarios import SCENARIOS
from zmqload.scenarios.framework import DOES_NOT_HOLD, HOLDS


def check_verdict(outcome, name, claim=None):
    """The scenario's verdict on `claim` (default: its one claim), of a known form, with figures in
    its reason and its measurements."""
    assert [v.claim for v in outcome.verdicts] == list(SCENARIOS[name].claims)
    v = outcome.verdict(claim) if claim else outcome.verdicts[0]
    assert v.verdict in (HOLDS, DOES_NOT_HOLD) or v.verdict.startswith("depends: "), v
    assert v.because and any(ch.isdigit() for ch in v.because) and v.measurements, v
    return v


def fates_add_up(f):
    """Every message sent has exactly one fate."""
    assert (
        f["delivered"]
        + f["drained"]
        + f["dropped_start"]
        + f["dropped_mid"]
        + f["dropped_tail"]
        + f["stranded"]
        == f["sent"]
    )


def check_all_or_none(v, counts, n, depends_prefix):
    """The verdict rule of a claim judged over repeated runs: holds when it held in all `n` runs of
    every case (`counts`: case -> runs it held in), does not hold when in none, else depends."""
    if all(k == n for k in counts.values()):
        assert v.verdict == HOLDS, v
    elif not any(counts.values()):
        assert v.verdict == DOES_NOT_HOLD, v
    else:
        assert v.verdict.startswith(depends_prefix), v
