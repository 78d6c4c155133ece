"""Named scenarios: questions users really ask about HWM, linger and backpressure,
settled by measurement against the installed libzmq.

Each scenario runs one or more ordinary zmqload runs (so their run directories feed the
Spark report too), then states the claim, what was measured, and a verdict computed from
the measurement: holds / does not hold / depends (on what). `fast=True` shrinks counts and
delays for the test suite; the questions and the verdict rules stay the same.
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pyarrow.parquet as pq

from . import _engine
from .config import Workload
from .errors import ConfigError


@dataclass
class Outcome:
    measured: list[str]
    verdict: str                       # "holds", "does not hold" or "depends: ..."
    because: str
    figures: dict = field(default_factory=dict)
    run_dirs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    claim: str
    body: Callable[["ScenarioRunner"], Outcome]


class ScenarioRunner:
    """Runs the workloads of one scenario, labelled so the report can group them."""

    def __init__(self, scenario: Scenario, out: str, fast: bool):
        self.scenario, self.out, self.fast = scenario, out, fast
        self.run_dirs: list[str] = []

    def scale(self, full, fast):
        return fast if self.fast else full

    def run(self, variant: str, **options):
        from .runner import run
        options.setdefault("out", self.out)
        label = {"scenario": self.scenario.name, "variant": variant, "fast": self.fast}
        result = run(Workload(label=label, **options))
        self.run_dirs.append(result.run_dir)
        return result


# -- measurements shared by scenarios -----------------------------------------------------

def read_samples(run_dir: str) -> dict:
    files = sorted(glob.glob(os.path.join(run_dir, "samples", "part-*.parquet")))
    return pq.ParquetDataset(files).read().to_pydict() if files else {}


def max_queued(run_dir: str) -> int:
    """Most delivered messages ever waiting at once (one stream, one consumer, FIFO).

    When message k is received, every later-delivered message already sent by then was
    queued behind it. Counting only delivered messages keeps drops out of the figure,
    which counts alone (sent - received) cannot do."""
    files = sorted(glob.glob(os.path.join(run_dir, "recvs", "part-*.parquet")))
    if not files:
        return 0
    table = pq.ParquetDataset(files).read(columns=["seq", "t_sent_ns", "t_recv_ns"])
    order = np.argsort(table.column("seq").to_numpy())
    t_sent = table.column("t_sent_ns").to_numpy()[order]
    t_recv = table.column("t_recv_ns").to_numpy()[order]
    behind = np.searchsorted(t_sent, t_recv, side="right") - 1 - np.arange(len(t_recv))
    return int(max(0, behind.max())) if len(behind) else 0


def max_kernel_queues(run_dir: str) -> dict:
    """Peak kernel send/receive queue bytes per role (tcp runs)."""
    s = read_samples(run_dir)
    peaks = {}
    for role in sorted(set(s.get("role", []))):
        mask = np.asarray(s["role"]) == role
        peaks[role] = (int(np.max(np.asarray(s["tcp_sendq_bytes"])[mask])),
                       int(np.max(np.asarray(s["tcp_recvq_bytes"])[mask])))
    return peaks


def _ms(ns) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.1f} ms"


def _ranges(ranges) -> str:
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges) or "none"


# -- the scenarios -----------------------------------------------------------------------------

def linger_tail(r: ScenarioRunner) -> Outcome:
    repeats = 3
    gap_s, work_s = r.scale(0.2, 0.02), r.scale(0.4, 0.04)
    measured, lost_runs, figures = [], 0, {"runs": []}
    for i in range(repeats):
        res = r.run(f"repeat-{i}", pattern="push-pull", transport="ipc", size=64, count=10,
                    rate=round(1 / gap_s), rcvhwm=1, consumer_delay_us=work_s * 1e6,
                    drain_timeout_ms=int(work_s * 5000))
        p = res.producers[0]
        missing = res.streams[0]["missing_ranges"]["all"]
        lost_runs += res.lost > 0
        figures["runs"].append({"arrived": res.unique_received, "lost": res.lost, "missing": missing,
                                "close_ns": p["close_ns"], "term_ns": p["term_ns"]})
        measured.append(f"run {i + 1}: {res.unique_received}/10 arrived, missing seqs: {_ranges(missing)}; "
                        f"close blocked {_ms(p['close_ns'])}, context term blocked {_ms(p['term_ns'])}")
    verdict = "holds" if lost_runs else "does not hold"
    because = (f"{lost_runs} of {repeats} runs lost messages at the tail although LINGER was the default"
               if lost_runs else f"all 10 messages arrived in all {repeats} runs; termination waited for them")
    return Outcome(measured, verdict, because, figures)


def proxy_pileup(r: ScenarioRunner) -> Outcome:
    rate, duration = r.scale(20_000, 10_000), r.scale(2.0, 0.5)
    delay_us = r.scale(200, 200)
    measured, figures = [], {}
    for variant, extra in (("pub-only", {}), ("pub-and-proxy", {"proxy_sndhwm": 100})):
        res = r.run(variant, pattern="proxy", transport="tcp", size=256, rate=rate, duration=duration,
                    sndhwm=100, consumer_delay_us=delay_us, drain_timeout_ms=500, close_order="consumer-first",
                    **extra)
        queues = max_kernel_queues(res.run_dir)
        in_flight = max_queued(res.run_dir)
        figures[variant] = {"sent": res.sent, "received": res.unique_received, "lost": res.lost,
                            "max_queued": in_flight, "kernel_queue_peaks": queues,
                            "latency_p99_ns": res.latency_summary()["p99"]}
        where = "; ".join(f"{role} sendq {s:,} B / recvq {q:,} B" for role, (s, q) in queues.items())
        measured.append(f"SNDHWM=100 on {variant.replace('-', ' ')}: sent {res.sent:,}, received "
                        f"{res.unique_received:,}, lost {res.lost:,}; up to {in_flight:,} delivered messages queued at once; "
                        f"kernel peaks: {where}; p99 latency {_ms(res.latency_summary()['p99'])}")
    a, b = figures["pub-only"], figures["pub-and-proxy"]
    holds = a["max_queued"] <= 4 * 100
    because = (f"with the HWM on the PUB only, up to {a['max_queued']:,} delivered messages waited between PUB and "
               f"SUB, not ~100 (the SUB's own RCVHWM queue and the kernel's socket buffers absorb them; peaks per "
               f"role above); with the proxy's XPUB at 100 too: {b['max_queued']:,}")
    claim_verdict = "holds" if holds else "does not hold"
    return Outcome(measured, claim_verdict, because, figures)


def slow_subscriber(r: ScenarioRunner) -> Outcome:
    work_us = r.scale(100_000, 10_000)
    size = 4096                      # enough volume to overflow the kernel's socket buffers
    rate, duration = r.scale(2_000, 4_000), r.scale(3.0, 1.0)
    measured, figures = [], {}
    for hwm in (10, 1000, 10000):
        res = r.run(f"rcvhwm-{hwm}", pattern="pub-sub", transport="tcp", size=size, rate=rate, duration=duration,
                    rcvhwm=hwm, consumer_delay_us=work_us, close_order="consumer-first")
        in_flight = max_queued(res.run_dir)
        rss = res.consumers[0].get("max_rss_kb", 0)
        lat = res.latency_summary()
        figures[hwm] = {"sent": res.sent, "received": res.unique_received, "lost": res.lost,
                        "loss_ratio": res.loss_ratio, "p50_ns": lat["p50"], "max_ns": lat["max"],
                        "max_queued": in_flight, "queued_bytes": in_flight * size, "consumer_rss_kb": rss}
        measured.append(f"RCVHWM={hwm}: received {res.unique_received:,} of {res.sent:,} "
                        f"({res.loss_ratio:.1%} lost by the end), latency p50 {_ms(lat['p50'])} max {_ms(lat['max'])}, "
                        f"up to {in_flight:,} queued (~{in_flight * size / 1e6:.2f} MB payload), consumer RSS {rss / 1024:.0f} MiB")
    small, large = figures[10], figures[10000]
    extra_mib = (large["consumer_rss_kb"] - small["consumer_rss_kb"]) / 1024
    same_delivery = large["received"] <= small["received"] * 1.1 + 5
    because = (f"the subscriber got {small['received']:,} messages with RCVHWM=10 and {large['received']:,} with "
               f"RCVHWM=10000: it is bound by its own speed. The larger HWM held up to {extra_mib:,.0f} MiB more "
               f"in the consumer's memory (peak RSS), discarded when the subscriber closed, and latency went "
               f"from max {_ms(small['max_ns'])} to {_ms(large['max_ns'])}")
    verdict = "does not hold" if same_delivery and large["loss_ratio"] > 0 else "depends: on the run being short enough for the queue to absorb the excess"
    return Outcome(measured, verdict, because, figures)


def linger_on_close(r: ScenarioRunner) -> Outcome:
    from .info import socket_defaults
    default = socket_defaults()["PUB"]["LINGER"]
    measured, figures = [f"installed libzmq {'.'.join(map(str, _engine.libzmq_version()))}: "
                         f"a fresh PUB socket's LINGER is {default}"], {"default_linger": default}
    for linger in (0, 1000, -1):
        res = r.run(f"linger-{linger}", pattern="pub-sub", transport="tcp", size=64, count=5,
                    linger_ms=linger, drain_timeout_ms=300)
        p = res.producers[0]
        figures[linger] = {"arrived": res.unique_received, "close_ns": p["close_ns"], "term_ns": p["term_ns"]}
        measured.append(f"LINGER={linger}: {res.unique_received}/5 arrived; close blocked {_ms(p['close_ns'])}, "
                        f"term blocked {_ms(p['term_ns'])}")
    holds = figures[0]["arrived"] < 5
    because = (f"with LINGER 0, {figures[0]['arrived']}/5 arrived (pending messages discarded at close)"
               if holds else "with LINGER 0 all 5 still arrived: on an idle loopback link they had already left "
               "the socket's queue when close was called")
    return Outcome(measured, "holds" if holds else "depends: on whether messages are still queued at close", because, figures)


def hwm_behaviour(r: ScenarioRunner) -> Outcome:
    count, timeout_ms = r.scale(20_000, 10_000), 50
    tight = dict(size=1024, count=count, sndhwm=1, rcvhwm=1, sndbuf=4096, rcvbuf=4096,
                 consumer_delay_us=r.scale(100_000, 50_000), duration=r.scale(3.0, 1.5),
                 drain_timeout_ms=200, close_order="consumer-first", linger_ms=0)
    measured, figures, verdicts = [], {}, []
    for pattern, claim in (("push-pull", "drops"), ("dealer-router", "blocks"), ("pub-sub", "drops")):
        blocking = r.run(f"{pattern}-timeout", pattern=pattern, transport="tcp", send_mode="timeout",
                         sndtimeo_ms=timeout_ms, **tight)
        nowait = r.run(f"{pattern}-dontwait", pattern=pattern, transport="tcp", send_mode="dontwait", **tight)
        # A send that cannot complete within SNDTIMEO blocks; sends that all complete while
        # the stalled consumer gets almost nothing mean the socket dropped them.
        blocks = blocking.timeout > 0
        drops = not blocks and blocking.sent > 10 * max(1, blocking.unique_received)
        behaviour = "blocks" if blocks else "drops" if drops else "neither (queues had room)"
        figures[pattern] = {"timeouts": blocking.timeout, "lost_blocking": blocking.lost,
                            "eagain": nowait.eagain, "attempted_dontwait": nowait.attempted, "behaviour": behaviour}
        verdicts.append(f"{pattern.split('-')[0].upper()} {claim} at HWM: "
                        f"{'holds' if behaviour == claim else 'does not hold'} ({behaviour})")
        measured.append(f"{pattern}: blocking send with SNDTIMEO {timeout_ms} ms -> {blocking.timeout} sends timed out, "
                        f"{blocking.lost} sent messages lost; DONTWAIT -> EAGAIN on {nowait.eagain} of "
                        f"{nowait.attempted} sends")
    return Outcome(measured, "depends: on the socket type", "; ".join(verdicts), figures)


def slow_joiner(r: ScenarioRunner) -> Outcome:
    join_ms = 50
    res = r.run("join-late", pattern="pub-sub", transport="tcp", size=64, rate=r.scale(100_000, 50_000),
                count=r.scale(20_000, 10_000), join_delay_ms=join_ms, sndhwm=0, rcvhwm=0)
    missing = res.streams[0]["missing_ranges"].get(0, [])
    starts_at_zero = bool(missing) and missing[0][0] == 0
    measured = [f"PUB sent {res.sent:,} at {res.workload['rate']:,} msg/s; the SUB connected {join_ms} ms after "
                f"the start and got "
                f"{res.unique_received:,}; missing seqs: {_ranges(missing[:5])}"]
    holds = res.lost > 0 and starts_at_zero
    because = (f"the first {missing[0][1] + 1:,} messages were sent before the subscription arrived" if holds
               else "nothing was missed at the start")
    return Outcome(measured, "holds" if holds else "does not hold", because,
                   {"lost": res.lost, "missing": missing})


SCENARIOS = {s.name: s for s in (
    Scenario("linger-tail", "PUSH/PULL, RCVHWM=1, slow receiver, sender terminates right after sending",
             "Over ipc with the receiver slower than the sender, a sender that terminates its context right "
             "after its last send (default LINGER) loses the last messages (2014, 0MQ 3.2.4: last 2 of 10).",
             linger_tail),
    Scenario("proxy-pileup", "PUB -> XSUB/XPUB proxy -> slow SUB",
             "SNDHWM=100 on the PUB bounds what waits between PUB and a slow SUB to about 100 messages.",
             proxy_pileup),
    Scenario("slow-subscriber", "Fast PUB, SUB doing 100 ms of work per message",
             "Raising RCVHWM (10 -> 1000 -> 10000) stops a slow subscriber from losing messages.",
             slow_subscriber),
    Scenario("linger-on-close", "PUB sends 5 messages and closes: LINGER 0 / 1000 / -1",
             "With LINGER 0 the messages still queued at close are discarded.", linger_on_close),
    Scenario("hwm-behaviour", "Drop or block at HWM, with blocking sends and with DONTWAIT",
             "PUSH drops at HWM; DEALER blocks at HWM; PUB drops at HWM.", hwm_behaviour),
    Scenario("slow-joiner", "PUB starts sending before the SUB has connected",
             "A SUB that connects after the PUB started misses the first messages.", slow_joiner),
)}


def get(name: str) -> Scenario:
    if name not in SCENARIOS:
        raise ConfigError("NAME", f"unknown scenario {name!r}; accepted: {', '.join(SCENARIOS)}")
    return SCENARIOS[name]


def run_scenario(name: str, out: str, fast: bool = False) -> Outcome:
    scenario = get(name)
    runner = ScenarioRunner(scenario, out, fast)
    outcome = scenario.body(runner)
    outcome.run_dirs = runner.run_dirs
    return outcome
