"""The controller: steers the workers of one run through its phases.

    launch -> connect -> warm-up -> start -> producers done -> drain -> collect

(docs/ARCHITECTURE.md, "Process model", "The end of a run")."""

from __future__ import annotations

import dataclasses
import os
import secrets
import time
from typing import TYPE_CHECKING, Callable, Iterable

from .. import _engine
from ..contract import patterns
from ..contract.curve import CurveKeys
from ..contract.workload import Workload
from ..contract import control, ids
from ..contract import run_record as rr
from ..contract.states import DrainEnd, DrainMode
from ..errors import RunError
from .lifecycle import PROGRESS_EVERY_NS
from .state import Footprint, ProgressListener, ProgressSnapshot, RunState

from .launch import TOOL_ENV, TOOL_SLOWDOWN, WorkerLauncher
from .preflight import load_libzmq
from .resets import Resets
from .restarts import Restarts
from . import signals

if TYPE_CHECKING:
    from .channel import ControlServer

LAUNCH_TIMEOUT_S = 60.0
FINAL_TIMEOUT_S = 30.0
HOLD_TIMEOUT_S = 5.0  # a worker told to hold before its restart answers within a slice
CONVERT_S_PER_ROW = 1e-6
"""Time allowed per row a worker recorded for its converter's work after the loop (the held spill
to Parquet: ~0.1 us a row measured alone, 10x for a loaded machine): a billion-message run's
consumer converts for minutes, which a fixed FINAL_TIMEOUT_S failed (issue 30)."""
FINAL_IN_FLIGHT_S = 1.0  # how long a worker seen ended may still have its final on the way
INTERRUPT_GRACE_S = 2.5  # a stopped worker converts for 1 s at most, then sends its final
START_MARGIN_NS = 30_000_000
NO_LIMIT = float("inf")
NO_COUNT = 2**63 - 1  # a count never reached


def drain_decision(
    expected: int, received: int, idle_ns: int, since_start_ns: int, w: Workload
) -> str | None:
    """Whether the drain is over, and why: "complete" (everything sent arrived), "idle"
    (nothing arrived for --drain-timeout-ms: what is missing was dropped), "limit"
    (--drain-limit-s passed while messages still arrived: what is missing is stranded)."""
    if received >= expected:
        return "complete"
    # The consumers' counts arrive with their progress, every PROGRESS_EVERY_NS; a slow drain
    # keeps the consumers' work, so a quiet spell of one message's work is not idle either.
    patience_ns = (
        w.drain_timeout_ms * 1_000_000
        + PROGRESS_EVERY_NS
        + (w.consumer_delay_ns if w.drain == "slow" else 0)
    )
    if idle_ns >= patience_ns:
        return "idle"
    if since_start_ns >= w.drain_limit_s * 1e9:
        return "limit"
    return None


class Controller:
    def __init__(
        self,
        w: Workload,
        run_dir: str,
        run_id: str,
        server: ControlServer,
        launcher: WorkerLauncher,
        ipc_dir: str,
        listener: ProgressListener | None = None,
        curve: CurveKeys | None = None,
    ):
        self.w = w
        self.pattern = patterns.get(w.pattern)
        self.run_dir, self.run_id = run_dir, run_id
        self.server, self.launcher, self.ipc_dir = server, launcher, ipc_dir
        self.listener = listener
        self.curve = curve
        # the run's header key (csrc/zl_wire.h zl_check): a peer that does not have it cannot pass
        # for one of its producers; a producer or consumer of the user's knows only the public key 0
        alone = w.topology.producers_alone or w.topology.consumers_alone
        self.header_key = 0 if alone else secrets.randbits(64)
        self.state = RunState(ids.producers(w.producer_workers), ids.consumers(w.consumer_workers))
        self.started = time.monotonic()
        self.footprint = Footprint()  # memory and disk for the live display
        self.interrupted = False
        self.on_start: Callable[[int], None] | None = None  # told t0 once the workers have it
        self.on_reset: Callable[[], None] | None = (
            None  # told each connection reset made (--reset-at)
        )
        from .endpoints import plan

        binder = w.topology.binder
        self.plan = plan(
            w,
            w.consumers if binder == "consumer" else w.producers if binder == "producer" else 0,
            ipc_dir,
            run_id,
        )
        self.binders: list[ids.WorkerId] = []
        self.connect_to: dict[ids.Role, list[str]] = {}
        self.resets = Resets(
            0, [], frozenset(), self.state.resets
        )  # planned at the start (--reset-at)
        self.restarts = Restarts(0)  # planned at the start (--restart)
        self.on_restart: Callable[[], None] | None = None  # told each restart made (--restart)

    # -- plumbing ----------------------------------------------------------------------------
    def pump(self, timeout_ms: int = 20) -> None:
        item = self.server.recv(timeout_ms)
        while item is not None:
            self.state.receive(*item)
            item = self.server.recv(0)
        if self.listener is not None:
            self.listener.update(self.snapshot())

    def snapshot(self) -> ProgressSnapshot:
        now = time.monotonic()
        self.footprint = self.footprint.fresh(self.run_dir, now)
        return self.state.snapshot(
            self.w.pattern,
            self.w.transport,
            now - self.started,
            self.w.consumers if self.w.fanout else 1,
            self.footprint,
            self.run_id,
        )

    def wait(self, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        # workers run under a tool (ZMQLOAD_WORKER_TOOL: valgrind) start and end tens of times slower
        timeout_s *= TOOL_SLOWDOWN if os.environ.get(TOOL_ENV) else 1.0
        deadline = time.monotonic() + timeout_s
        while not condition():
            self.pump()
            if condition():
                return
            self.check_alive(what)
            if time.monotonic() > deadline:
                raise RunError(f"timed out after {timeout_s:g} s {what}")

    def check_alive(self, what: str) -> None:
        """RunError naming a worker that ended before its final: nothing it would have sent can
        end the phase now (a consumer killed before it heard of the drain keeps the drain's
        idle clock from ever starting)."""
        dead = [n for n in self.launcher.dead(self.state.everyone) if n not in self.state.final]
        # a worker that sent its final and ended at once may be seen ended before its final is read
        deadline = time.monotonic() + FINAL_IN_FLIGHT_S
        while dead and time.monotonic() < deadline:
            self.pump(20)
            dead = [n for n in dead if n not in self.state.final]
        if dead:
            raise RunError(
                f"worker {dead[0]} ended ({self.launcher.how_it_ended(dead[0])}) while {what}"
            )

    def send_all(self, workers: Iterable[ids.WorkerId], message: control.Message) -> None:
        for worker in workers:
            self.server.send(worker, message)

    def start_worker(
        self, worker: ids.WorkerId, bind: list[str], generation: int = 0, first_seq: int = 0
    ) -> None:
        from .spec import WorkerSpec

        # a worker that connects is a CURVE client: it gets no server secret
        curve = (
            self.curve
            if bind or self.curve is None
            else dataclasses.replace(self.curve, server_secret=None)
        )
        self.launcher.start(
            WorkerSpec(
                worker,
                self.w,
                self.server.endpoint,
                self.run_dir,
                bind,
                curve=curve,
                control_curve=self.server.client_keys,
                header_key=self.header_key,
                libzmq=load_libzmq(self.w),
                generation=generation,
                t0_ns=self.state.t0_ns if generation else 0,
                first_seq=first_seq,
            )
        )

    # -- phases ------------------------------------------------------------------------------
    def execute(self) -> None:
        if self.listener is not None:
            self.listener.start(self.snapshot())
        self.launch()
        late = self.connect()
        self.warm_up(late)
        self.start(late)
        self.wait_producers_done()
        self.drain()
        self.collect()

    def launch(self) -> None:
        """Start every worker; binders bind and report their endpoints. Who binds where: the
        plan (runner/endpoints.py) from the pattern's rules and the endpoints per side."""
        from .endpoints import binder_endpoints

        s, w = self.state, self.w
        for name, _ in w.restarts:  # each restart's new process, ready before it is due
            self.launcher.stand_by(ids.WorkerId.parse(name))
        if self.pattern.proxy:
            s.proxies = [ids.WorkerId(ids.Role.PROXY, 0)]
            self.start_worker(s.proxies[0], binder_endpoints(w, 2, self.ipc_dir, self.run_id))
            self.wait(
                lambda: s.proxies[0] in s.ready, LAUNCH_TIMEOUT_S, "waiting for the proxy to start"
            )
        binder = self.plan.binder
        self.binders = (
            [] if binder is None else s.consumers if binder is ids.Role.CONSUMER else s.producers
        )
        assert len(self.plan.bind) == len(
            self.binders
        )  # the plan counted the binding side's workers
        for worker in s.producers + s.consumers:
            bind = [self.plan.bind[self.binders.index(worker)]] if worker in self.binders else []
            self.start_worker(worker, bind)
        self.launcher.all_started()
        self.wait(
            lambda: all(n in s.ready for n in s.producers + s.consumers),
            LAUNCH_TIMEOUT_S,
            "waiting for the workers to start",
        )

    def connect(self) -> list[ids.WorkerId]:
        """Tell the connecting side where to connect; slow joiners (--join-delay-ms) wait
        until after the start. Returns the late joiners."""
        s = self.state
        if self.pattern.proxy:
            front, back = s.ready[s.proxies[0]]
            self.connect_to = {ids.Role.PRODUCER: [front], ids.Role.CONSUMER: [back]}
        else:
            bound = [s.ready[n][0] for n in self.binders]
            self.connect_to = {
                role: bound if to is None else to for role, to in self.plan.connect.items()
            }
        late = s.consumers if self.w.join_delay_ms else []
        connecters = [
            n for n in s.producers + s.consumers if n not in self.binders and n not in late
        ]
        for worker in connecters:
            self.server.send(worker, control.Connect(self.connect_to[worker.role]))
        self.wait(
            lambda: all(n in s.connected for n in connecters),
            LAUNCH_TIMEOUT_S,
            "waiting for the workers to connect",
        )
        return late

    def warm_up(self, late: list[ids.WorkerId]) -> None:
        # Round trips need no warm-up (nothing can be lost to a slow join: every request
        # waits for its reply), and REQ's strict send/recv alternation forbids one.
        # Nor does a consumer of the user's: nobody of zmqload's hears it, and it would get them.
        # Nor a producer of the user's (--role consumer): it sends no warm-up.
        if (
            not self.w.warmup
            or self.pattern.round_trip
            or late
            or not self.state.consumers
            or not self.state.producers
        ):
            self.wait_for_device()
            return
        self.send_all(self.state.producers, control.Warmup())
        try:
            self.wait(
                lambda: all(n in self.state.warm for n in self.state.consumers),
                self.w.warmup_timeout_s,
                "waiting for every consumer to hear every producer (warm-up)",
            )
        except RunError as exc:
            if not self.plan.device or "timed out" not in str(exc):
                raise
            raise RunError(self.device_silence(self.w.warmup_timeout_s, "warm-up")) from None

    def device_silence(self, waited_s: float, waiting_for: str) -> str:
        """One line naming the endpoints of the user's device (or consumer) nobody answered on, or,
        all answering, that the device forwarded no warm-up message from every producer to every
        consumer. `waiting_for`: what the run waited for, as the line says it."""
        from .endpoints import unanswered

        silent = unanswered(self.plan.user_endpoints())
        if silent:
            named = "; ".join(f"{endpoint} ({why})" for endpoint, why in silent)
            what = (
                f"the device ({self.pattern.device.what.split(':')[0] if self.pattern.device else 'yours'})"
                if self.plan.device
                else self.users_side()
            )
            return f"timed out after {waited_s:g} s ({waiting_for}): nobody answered on {named}; is {what} running?"
        return (
            f"timed out after {waited_s:g} s ({waiting_for}): the device accepted connections on "
            f"{', '.join(self.plan.user_endpoints())} but did not carry a warm-up message from every producer to "
            "every consumer (does it forward every message, the consumers' subscription included?)"
        )

    def wait_for_device(self) -> None:
        """Without a warm-up, a device (or a consumer of the user's) that never came up is caught
        here: its endpoints must answer within the warm-up's deadline, or the run fails naming the
        silent ones."""
        if not self.plan.user_listens:
            return
        from .endpoints import unanswered

        timeout_s = self.w.warmup_timeout_s * (TOOL_SLOWDOWN if os.environ.get(TOOL_ENV) else 1.0)
        deadline = time.monotonic() + timeout_s
        while unanswered(self.plan.user_endpoints(), timeout_s=0.5):
            self.check_alive(
                "waiting for the device's endpoints"
                if self.plan.device
                else f"waiting for {self.users_side()}'s endpoints"
            )
            if time.monotonic() > deadline:
                raise RunError(
                    self.device_silence(
                        timeout_s,
                        "the device's endpoints"
                        if self.plan.device
                        else f"{self.users_side()}'s endpoints",
                    )
                )
            self.pump(100)

    def users_side(self) -> str:
        """The user's side of a one-side run, as the lines name it."""
        return "your producer" if self.w.topology.consumers_alone else "your consumer"

    def start(self, late: list[ids.WorkerId]) -> None:
        s = self.state
        s.t0_ns = _engine.now_ns() + START_MARGIN_NS
        if not late:
            self.send_all(s.consumers, control.Start(s.t0_ns))
            self.send_all(s.producers, control.Start(s.t0_ns))
        else:
            self.send_all(s.producers, control.Start(s.t0_ns))
            join_at = s.t0_ns + self.w.join_delay_ms * 1_000_000
            while _engine.now_ns() < join_at:
                self.pump(max(1, min(20, (join_at - _engine.now_ns()) // 1_000_000)))
            for worker in late:
                self.server.send(worker, control.Connect(self.connect_to[ids.Role.CONSUMER]))
                self.server.send(worker, control.Start(s.t0_ns))
        s.phase = "running"
        self.resets = Resets.plan(
            self.w, s.t0_ns, [e for to in self.connect_to.values() for e in to], s.resets
        )
        self.restarts = Restarts.plan(self.w, s.t0_ns)
        if self.on_start is not None:
            self.on_start(s.t0_ns)

    def wait_producers_done(self) -> None:
        s = self.state
        if self.w.topology.consumers_alone:
            # the producers are the user's: what is recorded is --duration's window, then the drain
            assert self.w.duration is not None  # validate() requires it
            window_end = s.t0_ns + int(self.w.duration * 1e9)

            def recorded() -> bool:
                for worker in self.restarts.due():  # --restart of a consumer of zmqload's
                    self.restart(worker)
                return _engine.now_ns() >= window_end

            self.wait(recorded, NO_LIMIT, "recording your producer")
            return

        def done() -> bool:
            made = len(s.resets)
            self.resets.poll()  # a reset due while the producers send (--reset-at)
            if len(s.resets) > made and self.on_reset is not None:
                self.on_reset()
            for worker in self.restarts.due():  # --restart; a producer done has nothing to hold
                if worker not in s.done:
                    self.restart(worker)
            return all(n in s.done for n in s.producers)

        self.wait(done, NO_LIMIT, "waiting for the producers to finish")

    def restart(self, worker: ids.WorkerId) -> None:
        """--restart: the worker's process ended (--restart-mode), kept down --restart-gap-ms, then a
        new one in its place, told the schedule in its spec (a producer's: the seq it goes on from):
        a binder binds the endpoint the old one had bound, a connecting one connects where the old
        one did (as a late joiner is told)."""
        s, w = self.state, self.w
        names = s.incarnations.setdefault(worker, [str(worker)])
        generation = len(names)
        bound = list(s.ready.get(worker, [])) if worker in self.binders else []
        # the records, not the fault: the process stops sending or receiving a slice before it
        # ends, so its records hold every message it took or its socket accepted (control.Hold)
        self.server.send(worker, control.Hold())
        self.wait(lambda: worker in s.held, HOLD_TIMEOUT_S, f"waiting for {worker} to hold")
        held = s.held.pop(worker)
        first_seq = held.next_seq
        if worker.role is ids.Role.PRODUCER:
            s.sent_before[worker] = s.sent_before.get(worker, 0) + held.sent
        # what an ended consumer said it received still counts for the drain; whatever else it
        # sends (a closing one's final) is not the new process's: dropped until the new one's Ready
        last = s.live.pop(worker, None)
        if worker.role is ids.Role.CONSUMER:
            s.received_before[worker] = s.received_before.get(worker, 0) + (
                last.messages if last else 0
            )
        s.restarting.add(worker)
        ended = _engine.now_ns()  # the fault's moment: told to close, or signalled
        if w.restart_mode == "close":  # its socket closed and its context terminated, then it exits
            self.server.send(worker, control.Close())  # a producer closes now, whatever the order
            self.server.send(worker, control.Stop())
        self.launcher.end(worker, w.restart_mode)
        s.ready.pop(worker, None)
        s.connected.discard(worker)
        try:  # its marker (runner/workers.py) would keep the last worker of an orphaned run waiting
            os.remove(os.path.join(self.ipc_dir, f"{names[-1]}.alive"))
        except OSError:
            pass
        up_at = _engine.now_ns() + w.restart_gap_ms * 1_000_000  # from its end (a close's exit)
        while (left := up_at - _engine.now_ns()) > 0:
            self.pump(max(1, min(20, left // 1_000_000)))
        if w.restart_mode == "freeze":  # hung until now, its connections open: killed now
            self.launcher.reap(worker)
        self.start_worker(worker, bound, generation, first_seq)
        names.append(ids.incarnation(worker, generation))
        self.wait(
            lambda: worker in s.ready, LAUNCH_TIMEOUT_S, f"waiting for {worker}'s new process"
        )
        if not bound:
            self.server.send(worker, control.Connect(self.connect_to[worker.role]))
            self.wait(
                lambda: worker in s.connected,
                LAUNCH_TIMEOUT_S,
                f"waiting for {worker}'s new process to connect",
            )
        # up as the new process said it (it may send or receive before the controller hears it)
        up = s.up_ns.get(worker) or _engine.now_ns()
        s.restarts.append(
            rr.Restart(
                worker=str(worker),
                generation=generation,
                mode=w.restart_mode,
                at_s=(ended - s.t0_ns) / 1e9,
                t_ns=ended,
                gap_ms=w.restart_gap_ms,
                t_up_ns=up,
                down_ns=up - ended,
                first_seq=first_seq,
            )
        )
        if self.on_restart is not None:
            self.on_restart()

    def drain(self) -> None:
        s, w = self.state, self.w
        s.phase = "draining"
        start = _engine.now_ns()
        if w.close_order == "consumer-first":
            # the receivers close first (nothing drains); then the producers close with their linger
            self.send_all(s.consumers, control.Stop())
            self.wait(
                lambda: all(n in s.final for n in s.consumers),
                FINAL_TIMEOUT_S,
                "waiting for the consumers to close",
            )
            self.send_all(s.producers, control.Close())
            ended = "none"
        else:
            s.drain_sent_ns = _engine.now_ns()
            self.send_all(s.consumers, control.ProducersDone(w.drain))
            signals.pause_in(
                "drain"
            )  # the tests' pause (runner/signals.py), the consumers draining
            ended = "none" if w.drain == "none" else self.drain_until_done(start)
            if w.close_order == "after-drain":
                # the producers held their sockets open through the drain; what their close
                # still flushes is read before the consumers stop
                self.send_all(s.producers, control.Close())
                self.wait(
                    lambda: all(n in s.final for n in s.producers),
                    self.close_timeout_s(),
                    "waiting for the producers to close",
                )
                if w.drain != "none":
                    self.drain_until_done(_engine.now_ns())
            self.send_all(s.consumers, control.Stop())
        end = DrainEnd(ended)
        s.drain = rr.Drain(
            mode=DrainMode("none" if w.close_order == "consumer-first" else w.drain),
            ended=end,
            t_start_ns=start,
            t_end_ns=_engine.now_ns(),
            completed=end.completed,
        )
        s.phase = "closing"

    def drain_until_done(self, start: int) -> str:
        s = self.state
        sent = sum(s.done[n].counters.sent for n in s.producers) + sum(s.sent_before.values())
        # the user's producer (--role consumer) said nothing of what it sent: drain until idle
        expected = (
            NO_COUNT
            if self.w.topology.consumers_alone
            else sent * (len(s.consumers) if self.pattern.fanout else 1)
        )
        last_count, last_change = -1, None
        while True:
            self.pump()
            count, now = s.received_so_far(), _engine.now_ns()
            # The idle clock starts once every consumer has begun the drain: one busy with a
            # long simulated work item hears of it only after that item.
            if last_change is None and all(c in s.draining or c in s.final for c in s.consumers):
                last_change = now
            if count != last_count and last_change is not None:
                last_count, last_change = count, now
            idle_ns = 0 if last_change is None else now - last_change
            ended = drain_decision(expected, count, idle_ns, now - start, self.w)
            if ended:
                return ended
            self.check_alive("draining")

    def close_timeout_s(self) -> float:
        """How long the workers' finals may take: FINAL_TIMEOUT_S, the linger and pause, and the
        conversion of what each recorded (CONVERT_S_PER_ROW: a worker that dies meanwhile is
        noticed at once, so only a hung one waits this long)."""
        w = self.w
        linger_s = NO_LIMIT if w.linger_ms == -1 else max(0, (w.linger_ms or 0) / 1000)
        rows = max((p.messages for p in self.state.live.values()), default=0)
        return FINAL_TIMEOUT_S + rows * CONVERT_S_PER_ROW + linger_s + w.close_pause_ms / 1000

    def collect(self) -> None:
        s = self.state
        signals.pause_in("collect")  # the tests' pause (runner/signals.py)
        self.wait(
            lambda: all(n in s.final for n in s.producers + s.consumers),
            self.close_timeout_s(),
            "waiting for the final counters",
        )
        self.send_all(s.proxies, control.Stop())
        self.wait(
            lambda: all(n in s.final for n in s.proxies),
            FINAL_TIMEOUT_S,
            "waiting for the proxy to stop",
        )

    def topology(self) -> rr.Topology:
        """run.json's `topology` as far as the run got: what the binders bound once they reported it."""
        from .endpoints import topology_record

        s = self.state
        bound: dict[ids.Role, list[str]] = {}
        if (
            self.plan.binder is not None
            and self.binders
            and all(s.ready.get(n) for n in self.binders)
        ):
            bound[self.plan.binder] = [s.ready[n][0] for n in self.binders]
        proxy = list(s.ready.get(s.proxies[0], [])) if s.proxies else []
        return topology_record(self.w, self.plan, bound, proxy)

    def interrupt(self) -> None:
        """Ctrl-C / SIGTERM / a failure: tell every worker to stop, collect what they recorded."""
        from .state import WorkerFailed

        self.interrupted = True
        s = self.state
        s.phase = "stopping"

        def ended(n: ids.WorkerId) -> bool:
            return (
                n in s.final
                or n in s.failures
                or n not in self.launcher.workers
                or not self.launcher.alive(n)
            )

        deadline = time.monotonic() + INTERRUPT_GRACE_S
        while time.monotonic() < deadline and not all(ended(n) for n in s.everyone):
            # again and again: a worker still starting has no connection yet, and the
            # control socket drops what it cannot route (its first Stop would be lost)
            self.send_all([n for n in s.everyone if not ended(n)], control.Stop(interrupted=True))
            try:
                self.pump(100)
            except WorkerFailed:
                pass
        self.pump_last()

    def pump_last(self) -> None:
        """Whatever the workers sent before they ended (their finals), failures included."""
        from .state import WorkerFailed

        while True:
            try:
                self.pump(0)
                return
            except WorkerFailed:
                continue
