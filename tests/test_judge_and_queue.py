"""The one judge (zmqload/contract/judge.py) and the queue's exact peak (zmqload/measure/queue_replay.py) on
hand-made figures with known answers; their use on real runs is tested in tests/analysis
(test_one_answer.py, test_queue_figure.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from zmqload.contract import judge as rules
from zmqload.measure import queue_replay as q
from zmqload.contract.workload import Slos


def _brute(entered: np.ndarray, left: np.ndarray) -> tuple[int, int | None]:
    """The most in flight at any instant (what left and entered at an instant both count), and the
    first instant it was reached: every event replayed in time order."""
    times = np.concatenate([entered, left])
    signs = np.concatenate([np.ones(len(entered), np.int64), -np.ones(len(left), np.int64)])
    best, at = 0, None
    for t in np.unique(times):
        depth = int(signs[times <= t].sum())
        if depth > best:
            best, at = depth, int(t)
    return best, at


@pytest.mark.parametrize("seed", range(40))
def test_the_exact_peak_equals_replaying_every_event(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    spread = int(rng.choice([q.BIN_NS // 50, q.BIN_NS, 20 * q.BIN_NS]))
    entered = 10**12 + rng.integers(0, spread, n)
    if seed % 4 == 0:  # instants on bin edges and ties between an arrival and a departure
        entered = 10**12 + rng.integers(0, 8, n) * q.BIN_NS
    wait = rng.integers(0, spread // 3 + 1, n)
    left = entered + wait
    keep = rng.random(n) > 0.1  # some never leave (stranded)
    bins = q.Bins.from_times(entered, left[keep])
    peak = q.exact_peak(bins, entered, left[keep])
    assert (peak.messages, peak.t_ns) == _brute(entered, left[keep])
    # the bins alone: the depth at every bin's end
    ends = (bins.first + np.arange(len(bins.entered)) + 1) * q.BIN_NS
    assert bins.depth().tolist() == [
        int((entered < e).sum() - (left[keep] < e).sum()) for e in ends
    ]
    assert bins.depth().max() <= peak.messages
    # replayed a piece at a time (the report's bounded memory): the same peak and instant
    depth, candidates = bins.depth(), q.candidate_bins(bins)
    pieces = [
        q.replay(bins, depth, entered, left[keep], part) for part in np.array_split(candidates, 3)
    ]
    assert q.peak_of(bins, depth, pieces) == peak


def test_the_peak_needs_only_the_candidate_bins_events():
    entered = np.array([10, 20, 30, 5 * q.BIN_NS + 1, 5 * q.BIN_NS + 2], np.int64)
    left = np.array(
        [q.BIN_NS + 5, q.BIN_NS + 6, q.BIN_NS + 7, 5 * q.BIN_NS + 3, 5 * q.BIN_NS + 4], np.int64
    )
    bins = q.Bins.from_times(entered, left)
    # 3 in flight at bin 0's end; bin 5 starts empty and only 2 enter it: it cannot hold more
    assert q.candidate_bins(bins).tolist() == [0]
    inside = np.isin(entered // q.BIN_NS, q.candidate_bins(bins))
    assert q.exact_peak(
        bins, entered[inside], left[np.isin(left // q.BIN_NS, q.candidate_bins(bins))]
    ) == q.Peak(3, 30)
    assert (
        q.exact_peak(
            q.Bins.from_times(np.zeros(0, np.int64), np.zeros(0, np.int64)) or bins, entered, left
        ).messages
        == 3
    )


def _figures(**over):
    f = dict(
        expected=10_000,
        lost=0,
        dropped=0,
        stranded=0,
        unknown=0,
        unique_received=10_000,
        offered=10_000,
        p99_us=500.0,
        backlog=rules.Backlog(went_in=5_000, came_out=5_000, tolerated=100.0),
    )
    f.update(over)
    return rules.Figures(**f)


def test_every_rule_in_order_with_its_numbers():
    f = _figures(
        lost=10,
        dropped=10,
        unique_received=9_000,
        p99_us=None,
        backlog=rules.Backlog(went_in=5_000, came_out=4_000, tolerated=100.0),
    )
    slos = Slos(max_loss=0.0, min_achieved=0.99, slo_p99_us=1000.0)
    names = [b.slo for b in rules.judge(f, slos, backlog=True)]
    assert names == list(rules.ORDER[:4]) == ["max-loss", "min-achieved", "backlog", "slo-p99-us"]
    assert rules.ORDER[4:] == ("slo-restart-lost", "slo-recovery-ms")  # judged per restart
    texts = [b.text for b in rules.judge(f, slos, backlog=True)]
    assert (
        texts[0] == "--max-loss 0: lost 0.1000% (10 of 10,000: 10 dropped, 0 stranded, 0 unknown)"
    )
    assert texts[1] == "--min-achieved 0.99: received 0.9000 of the offered load (9,000 of 10,000)"
    assert texts[2] == (
        "backlog: the queue grew by 1,000 messages over the second half of sending (tolerated 100)"
    )
    assert (
        texts[3] == "--slo-p99-us 1000: p99 from the intended send time unknown (nothing received)"
    )
    assert math.isinf(rules.judge(f, slos)[-1].measured)
    # the backlog rule only when asked (the capacity search's), unset SLOs never
    assert [b.slo for b in rules.judge(f, slos)] == ["max-loss", "min-achieved", "slo-p99-us"]
    assert rules.judge(f, Slos()) == []
    assert [b.slo for b in rules.judge(f, rules.LOSS_ONLY)] == ["max-loss"]


def _restart(worker: str, at_s: float, lost: int, first_ms: float, drained_ms: float, **over):
    """A restart as run.json has it (t_up at 1 s, on the records' clock); 0 ms: none."""
    from zmqload.contract.run_record import Restart

    up = 1_000_000_000
    fields = dict(
        worker=worker,
        generation=1,
        at_s=at_s,
        t_up_ns=up,
        lost=lost,
        t_first_recv_ns=up + round(first_ms * 1e6) if first_ms else 0,
        first_recv_after_up_ns=round(first_ms * 1e6),
        backlog_drained_after_up_ns=round(drained_ms * 1e6),
    )
    fields.update(over)
    return Restart(**fields)


def test_each_restart_is_judged_on_its_own_and_its_loss_apart_from_max_loss():
    restarts = (_restart("c0", 1.0, 40, 30, 250), _restart("c1", 2.0, 90, 20, 0))
    # 130 lost at the restarts, 5 more mid-run: --max-loss judges the 5
    f = _figures(lost=135, dropped=135, dropped_restart=130, restarts=restarts)
    assert f.judged_loss_ratio == 5 / 10_000 and f.loss_ratio == 135 / 10_000
    (loss,) = rules.judge(f, Slos(max_loss=0.0))
    assert loss.text == (
        "--max-loss 0: lost 0.0500% (5 of 10,000: 5 dropped, 0 stranded, 0 unknown), apart from "
        "130 at restarts"
    )
    assert rules.judge(f, Slos(max_loss=0.0005)) == []
    # what the restarts lost counts as received for --min-achieved: 9,865 + 130 of 10,000
    f = _figures(
        lost=135, dropped=135, dropped_restart=130, unique_received=9_865, restarts=restarts
    )
    assert f.achieved == 9_995 / 10_000
    (short,) = rules.judge(f, Slos(min_achieved=0.9999))
    assert short.text == (
        "--min-achieved 0.9999: received 0.9995 of the offered load (9,865 + 130 lost at restarts "
        "of 10,000)"
    )
    # the worst restart named: c1 lost the most, c0 took longest (its backlog, 250 ms; c1 held
    # nothing back: its first message, 20 ms)
    assert [r.recovery_ns for r in restarts] == [250_000_000, 20_000_000]
    broken = rules.judge(f, Slos(slo_restart_lost=89, slo_recovery_ms=200))
    assert [(b.slo, b.measured, b.limit) for b in broken] == [
        ("slo-restart-lost", 90.0, 89),
        ("slo-recovery-ms", 250.0, 200),
    ]
    assert broken[0].text == "--slo-restart-lost 89: the restart of c1 at 2.000 s lost 90"
    assert (
        broken[1].text == "--slo-recovery-ms 200: the restart of c0 at 1.000 s recovered in 250 ms"
    )
    assert rules.judge(f, Slos(slo_restart_lost=90, slo_recovery_ms=250)) == []
    # nothing arrived after a restart: it never recovered (unknown counts as broken, as a p99 does)
    never = _figures(restarts=(_restart("p0", 1.5, 0, 0, 0),))
    (b,) = rules.judge(never, Slos(slo_recovery_ms=1e9))
    assert math.isinf(b.measured) and b.text.endswith("never recovered (nothing arrived after it)")
    assert rules.describe(Slos(slo_restart_lost=0, slo_recovery_ms=500)) == (
        "--slo-restart-lost 0, --slo-recovery-ms 500"
    )


def test_the_slos_on_restarts_are_refused_without_restart_and_kept_by_the_search():
    from zmqload.contract.workload import Workload
    from zmqload.errors import ConfigError

    slos = Slos(slo_restart_lost=3, slo_recovery_ms=400)
    slos.check_with(Workload(duration=2, restart="c0@1"))
    with pytest.raises(ConfigError) as info:
        slos.check_with(Workload(duration=2))
    assert info.value.option == "--slo-restart-lost"
    assert "got 3 without --restart; accepted: --slo-restart-lost with --restart" in str(info.value)
    searched = slos.with_search_defaults()
    assert (searched.slo_restart_lost, searched.slo_recovery_ms) == (3, 400)
    assert (searched.max_loss, searched.min_achieved) == (0.0, 0.99)
    with pytest.raises(ConfigError) as info:
        Slos(slo_restart_lost=-1)
    assert info.value.option == "--slo-restart-lost"


def test_a_drained_backlog_and_refused_sends_are_not_loss():
    # 4,000 drained (arrived late) and 500 refused by the sender (never accepted): lost 0
    f = _figures(expected=9_500, unique_received=9_500, offered=10_000)
    assert rules.judge(f, rules.LOSS_ONLY) == []
    assert [b.slo for b in rules.judge(f, Slos(min_achieved=0.99))] == ["min-achieved"]


def test_offered_backlog_window_and_tolerance():
    assert (
        rules.offered_messages(
            rate=1000, consumers=2, expected=200, sent=100, attempted=100, scheduled=120
        )
        == 240
    )
    assert (
        rules.offered_messages(
            rate=0, consumers=2, expected=100, sent=100, attempted=100, scheduled=None
        )
        == 100
    )
    assert rules.backlog_window(1000, [1500], [3000, 2000]) == (2000, 3000)
    assert rules.backlog_window(0, [0, 1200], [3000]) == (2100, 3000)
    assert rules.backlog_window(0, [0], [0]) is None
    assert rules.backlog_tolerance(1000) == 64 and rules.backlog_tolerance(100_000) == 1000
    assert rules.describe(None) == "none set"
    assert (
        rules.describe(Slos(max_loss=0, min_achieved=0.99, slo_p99_us=50000), backlog=True)
        == "--max-loss 0, --min-achieved 0.99, --slo-p99-us 50000, no growing backlog"
    )
