"""Each named scenario in its fast form: the measurement, not a fixed verdict string."""
from __future__ import annotations

import subprocess
import sys

import pytest

from zmqload.scenarios import SCENARIOS, run_scenario


@pytest.fixture(scope="module")
def scenario_out(tmp_path_factory):
    return str(tmp_path_factory.mktemp("scenarios"))


def test_linger_tail_accounts_for_every_message(scenario_out):
    outcome = run_scenario("linger-tail", scenario_out, fast=True)
    for run in outcome.figures["runs"]:
        missing = sum(b - a + 1 for a, b in run["missing"])
        assert run["arrived"] + missing == 10
        if missing:                              # whatever is lost is the tail
            assert run["missing"][-1][1] == 9
    assert outcome.verdict == ("holds" if any(r["lost"] for r in outcome.figures["runs"]) else "does not hold")


def test_hwm_behaviour_push_and_dealer_block_pub_drops(scenario_out):
    figures = run_scenario("hwm-behaviour", scenario_out, fast=True).figures
    assert figures["push-pull"]["timeouts"] > 0           # PUSH blocks (sends time out)
    assert figures["dealer-router"]["timeouts"] > 0       # DEALER blocks
    assert figures["pub-sub"]["timeouts"] == 0            # PUB never blocks ...
    assert figures["pub-sub"]["eagain"] == 0              # ... nor returns EAGAIN with DONTWAIT
    assert figures["push-pull"]["eagain"] > 0             # PUSH with DONTWAIT says EAGAIN


def test_slow_joiner_misses_the_first_messages(scenario_out):
    outcome = run_scenario("slow-joiner", scenario_out, fast=True)
    assert outcome.figures["lost"] > 0
    assert outcome.figures["missing"][0][0] == 0          # the loss is at the start


def test_slow_subscriber_is_bound_by_its_own_speed(scenario_out):
    figures = run_scenario("slow-subscriber", scenario_out, fast=True).figures
    assert all(figures[h]["lost"] > 0 for h in (10, 1000, 10000))
    assert figures[10000]["consumer_rss_kb"] > figures[10]["consumer_rss_kb"]


def test_proxy_pileup_measures_queues(scenario_out):
    outcome = run_scenario("proxy-pileup", scenario_out, fast=True)
    for variant in ("pub-only", "pub-and-proxy"):
        f = outcome.figures[variant]
        assert f["received"] + f["lost"] == f["sent"]
        assert f["max_queued"] > 0
        assert set(f["kernel_queue_peaks"]) == {"producer", "consumer", "proxy"}
    assert len(outcome.run_dirs) == 2


def test_linger_on_close_reports_the_real_default(scenario_out):
    outcome = run_scenario("linger-on-close", scenario_out, fast=True)
    assert outcome.figures["default_linger"] in (-1, 0, 30000)
    assert all(0 <= outcome.figures[l]["arrived"] <= 5 for l in (0, 1000, -1))


def test_scenario_cli_list_and_markdown(tmp_path):
    listing = subprocess.run([sys.executable, "-m", "zmqload", "scenario", "list"], capture_output=True, text=True)
    assert listing.returncode == 0
    for name in SCENARIOS:
        assert name in listing.stdout
    md = tmp_path / "verdicts.md"
    proc = subprocess.run([sys.executable, "-m", "zmqload", "scenario", "run", "slow-joiner", "--fast",
                           "--out", str(tmp_path / "runs"), "--markdown", str(md)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = md.read_text()
    assert "| `slow-joiner` |" in text and "libzmq" in text
    bad = subprocess.run([sys.executable, "-m", "zmqload", "scenario", "run", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
