"""The connection-reset claims U-6 and U-8 in their fast form: the scenarios' measurements and verdict
rules, each verdict cross-checked against a plain pyzmq PUSH/PULL pair (its bundled libzmq, no
zmqload code) with the same resets injected by ss -K (tests/oracle/resets.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from scenario_checks import check_all_or_none, check_verdict

from tests.oracle.resets import lost_at_resets
from zmqload.scenarios import SCENARIOS, run_scenario, unsettled_claims
from zmqload.scenarios.connection_resets import RECEIVERS, SLOW_US
from zmqload.scenarios.framework import DOES_NOT_HOLD, HOLDS


@pytest.fixture(scope="module")
def reset_runs(tmp_path_factory):
    """The reset scenario, fast; meanwhile the oracle's slow receiver (the scenario's 80 us per
    message), without and with ZMQ_IMMEDIATE, each pair on its own port and its own resets."""
    out = str(tmp_path_factory.mktemp("reset-scenarios"))
    with ThreadPoolExecutor(2) as pool:
        pairs = {
            immediate: pool.submit(lost_at_resets, SLOW_US, immediate, seconds=1.5)
            for immediate in (False, True)
        }
        outcome = run_scenario("connection-reset", out, fast=True)
        slow_pair = {k: f.result() for k, f in pairs.items()}
    return {"outcome": outcome, "slow_pair": slow_pair}


def test_the_claims_are_settled():
    assert SCENARIOS["connection-reset"].claims == ("U-6", "U-8")
    assert not {"U-6", "U-8"} & set(unsettled_claims())


def _cells_are_accounted(cells):
    for c in cells:
        # the reset's loss, and only it: PUSH blocks at HWM, the drain completed
        assert c["lost"] == c["dropped_reset"] and c["other_drops"] == 0 and c["duplicates"] == 0, c
        assert c["lost_sent_before"] + c["lost_sent_after"] == c["lost"]
        assert c["connections"] == 1 and c["sent"] == c["attempted"]
        f = c["facts"]
        assert f["stranded"] == 0 and f["expected"] == f["sent"]


def test_reset_loss(reset_runs):
    outcome, slow_pair = reset_runs["outcome"], reset_runs["slow_pair"]
    assert len(outcome.run_dirs) == len(set(outcome.run_dirs))  # its own runs, each new
    v = check_verdict(outcome, "connection-reset", "U-6")
    n = outcome.figures["repeats"]
    cells = {
        k: c for k, c in outcome.figures["cells"].items() if k.endswith("/default")
    }  # U-6's: no IMMEDIATE
    assert set(cells) == {f"{r}/default" for r, _ in RECEIVERS} and all(
        len(c) == n for c in cells.values()
    )
    for runs in cells.values():
        _cells_are_accounted(runs)
    # a slow receiver has a backlog in flight at the reset: it loses, and never more than was in flight
    assert all(0 < c["dropped_reset"] <= c["in_flight"] for c in cells["slow/default"])
    # the rule, from the numbers
    losing = {k: sum(1 for c in runs if c["dropped_reset"]) for k, runs in cells.items()}
    assert v.measurements["runs_losing"] == losing
    check_all_or_none(v, losing, n, "depends: on what is in flight at the instant: ")
    assert v.measurements["lost_all_sent_before_reset"] == all(
        c["lost_sent_after"] == 0 for runs in cells.values() for c in runs
    )
    # cross-check: the plain pyzmq pair with the same slow receiver loses too, a run of consecutive seqs
    # sent before a reset, nothing twice, and delivers again after it
    plain = slow_pair[False]
    assert plain["lost"] > 0 and plain["duplicates"] == 0, plain
    assert all(last < plain["reset_boundaries"][-1] for _, last in plain["lost_runs"]), plain


def test_reset_immediate(reset_runs):
    outcome, slow_pair = reset_runs["outcome"], reset_runs["slow_pair"]
    v = check_verdict(outcome, "connection-reset", "U-8")
    cells, n = outcome.figures["cells"], outcome.figures["repeats"]
    assert set(cells) == {f"{r}/{i}" for r, _ in RECEIVERS for i in ("default", "immediate")}
    assert all(len(runs) == n for runs in cells.values())
    for runs in cells.values():
        _cells_are_accounted(runs)
    losing = {k: sum(1 for c in runs if c["dropped_reset"]) for k, runs in cells.items()}
    assert v.measurements["runs_losing"] == losing
    # what arrived of what was sent before the reset, after the lost run: the sender's queue, kept or not
    assert v.measurements["kept_after_loss"] == {
        k: [c["kept_after_loss"] for c in runs if c["lost"]] for k, runs in cells.items()
    }
    with_immediate = [k for k in cells if k.endswith("/immediate")]
    if not any(losing[k] for k in with_immediate) and any(
        losing[k] for k in cells if k.endswith("/default")
    ):
        assert v.verdict == HOLDS
    elif any(losing[k] for k in with_immediate) and all(
        losing[k] >= losing[k.replace("immediate", "default")] for k in with_immediate
    ):
        assert v.verdict == DOES_NOT_HOLD and "ZMQ_IMMEDIATE" in v.because
    else:
        assert v.verdict.startswith("depends: on the receiver: ")
    # cross-check: plain pyzmq with ZMQ_IMMEDIATE on both sides, the same slow receiver and resets: if it
    # still loses, IMMEDIATE did not prevent it there either, and zmqload's verdict must not say it does
    plain = slow_pair[True]
    assert plain["duplicates"] == 0
    assert (plain["lost"] > 0) == (losing["slow/immediate"] > 0), (plain, losing)
    if plain["lost"] > 0:
        assert v.verdict != HOLDS
