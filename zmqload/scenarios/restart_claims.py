"""Claims about restarts (U-9..U-12), measured with the engine's sockets and the restarted peer
a process of its own (forked) ended cleanly (close), by SIGKILL (kill) or hung by SIGSTOP
while its successor starts (freeze); U-12 also by zmqload runs with --restart."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, Callable, Optional

from .. import _engine
from ..errors import EngineError
from ..store.parquet_parts import read_parts
from .framework import (
    DOES_NOT_HOLD,
    HOLDS,
    Outcome,
    Scenario,
    ScenarioRunner,
    Verdict,
    depends,
    scratch_dir,
)

WAIT_S = 10.0  # every wait on a peer is bounded by this
IDLE_MS = 150  # a SUB that hears nothing this long has had everything in flight
OPT = _engine.SOCKET_OPTION_IDS
EHOSTUNREACH = _engine.LIBZMQ_NUMBERS["EHOSTUNREACH"]
ROUTING_ID = b"dealer-1"  # the DEALER's fixed identity, the same in every incarnation
# a peer is forked: it starts in milliseconds with this process's libzmq (a new interpreter
# importing zmqload took 0.5-2.7 s on the shared machine, longer than the restarts it measures)
_FORK = multiprocessing.get_context("fork")


def _endpoint(transport: str, name: str) -> str:
    return (
        "tcp://127.0.0.1:*"
        if transport == "tcp"
        else f"ipc://{os.path.join(scratch_dir('zmqload-rc-'), name)}"
    )


def _pub_peer(link: Connection, endpoint: str, options: dict[str, int]) -> None:
    """A PUB: binds, says "up ENDPOINT", then per command: ("publish", width, first, n) sends the
    n topics t%0*d from `first` (one message each) and says "published"; "exit" closes socket
    and context."""
    ctx = _engine.Context()
    sock = _socket(ctx, "PUB", options)
    link.send(f"up {sock.bind(endpoint)}")
    while True:
        # its socket's commands run while it waits, as a publisher that publishes does: the
        # subscriptions are taken in as they come (a PUB that stops leaves them in its pipe, then in
        # the kernel's buffers, and the SUB drops what no longer fits)
        while not link.poll(0.005):
            sock.get_option(OPT["EVENTS"])
        command = link.recv()
        if command == "exit":
            break
        width, first, n = command[1:]
        for i in range(first, first + n):
            sock.send_bytes(b"t%0*d" % (width, i))
        link.send("published")
    sock.close(0)
    ctx.term()
    link.send("closed")


def _dealer_peer(
    link: Connection, endpoint: str, options: dict[str, int], hello: bool = False
) -> None:
    """A DEALER with a fixed routing id: connects (and sends one message if `hello`), says "up",
    then "r SEQ" for each message it receives (the seq's text) and "connected" for each handshake
    that succeeds, until told "exit": closes socket and context."""
    ctx = _engine.Context()
    sock = _socket(ctx, "DEALER", options)
    sock.set_routing_id(ROUTING_ID)
    # its ZMTP handshakes with the ROUTER, each said as "connected": connected again, or not
    sock.monitor("inproc://handshakes", _engine.HANDSHAKE_EVENTS["succeeded"])
    events = _socket(ctx, "PAIR")
    events.connect("inproc://handshakes")
    sock.connect(endpoint)
    if hello:
        sock.send_bytes(b"hello")
    link.send("up")
    while not link.poll(0):
        message = sock.recv_bytes(5)
        if message is not None:
            link.send(f"r {message.decode()}")
        while events.recv_bytes(0) is not None:  # two frames an event: its number, the endpoint
            events.recv_bytes(100)
            link.send("connected")
    sock.monitor(None)
    events.close(0)
    sock.close(0)
    ctx.term()
    link.send("closed")


class Peer:
    """One incarnation of the restarted peer, a process of its own forked from this one (so on the
    engine's libzmq, already loaded; it makes its own context), its lines gathered by a thread,
    each with the time it came."""

    def __init__(
        self, role: Callable[..., None], endpoint: str, options: dict[str, int], *more: Any
    ):
        self.link, child_link = _FORK.Pipe()
        self.proc = _FORK.Process(
            target=role, args=(child_link, endpoint, options, *more), daemon=True
        )
        self.proc.start()
        child_link.close()
        self.lines: list[tuple[float, str]] = []
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        try:
            while True:
                line = self.link.recv()
                with self.changed:
                    self.lines.append((time.monotonic(), line))
                    self.changed.notify_all()
        except (EOFError, OSError):  # the peer ended (or was killed)
            with self.changed:
                self.changed.notify_all()

    def wait_for(self, prefix: str, after: int = 0, limit_s: float = WAIT_S) -> Optional[str]:
        """The first line from index `after` on that starts with prefix (None at the limit, or
        once the peer is gone)."""
        deadline = time.monotonic() + limit_s
        with self.changed:
            while True:
                for _, line in self.lines[after:]:
                    if line.startswith(prefix):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or not self.reader.is_alive():
                    return None
                self.changed.wait(left)

    def tell(self, command: Any) -> None:
        self.link.send(command)

    def received(self) -> list[tuple[float, int]]:
        """A DEALER's receipts so far: (time read, seq)."""
        with self.changed:
            return [(t, int(line[2:])) for t, line in self.lines if line.startswith("r ")]

    def end(self, mode: str) -> None:
        """close: told to close its socket and context; kill: SIGKILL; freeze: SIGSTOP (hung,
        its connections open, until `reap` kills it)."""
        if mode == "close":
            self.tell("exit")
            self.wait_for("closed")
            self.proc.join(WAIT_S)
        elif mode == "kill":
            self.proc.kill()
            self.proc.join(WAIT_S)
        else:
            assert self.proc.pid is not None  # started in __init__
            os.kill(self.proc.pid, signal.SIGSTOP)

    def reap(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(WAIT_S)
        self.link.close()
        self.reader.join(WAIT_S)


def _socket(ctx: _engine.Context, kind: str, options: Optional[dict[str, int]] = None) -> Any:
    sock = _engine.Socket(ctx, _engine.SOCKET_TYPES[kind])
    sock.set_option(OPT["LINGER"], 0)
    for name, value in (options or {}).items():
        sock.set_option(OPT[name], value)
    return sock


# ---------------------------------------------------------------------------- U-9 and U-12
WIDTH = 5  # topics t00000..: one width, so no topic is a prefix of another
BATCH = 250  # subscriptions set at a time before a restart, each batch let through before the next
# the data's path unlimited (the PUB's SNDHWM, the SUB's RCVHWM, before bind/connect), so a round of
# one message per topic reaches the SUB whole and only the subscriptions' path is under test
DATA_UNLIMITED_PUB, DATA_UNLIMITED_SUB = {"SNDHWM": 0}, {"RCVHWM": 0}


class _Subscribers:
    """SUBs here, each subscribed to its own number of topics with its own options, connected to
    one PUB peer that is restarted under them."""

    def __init__(self, transport: str, subs: dict[str, tuple[int, dict[str, int]]]):
        self.ctx = _engine.Context()
        self.peers: list[Peer] = []
        self.subs = {
            k: _socket(self.ctx, "SUB", {**DATA_UNLIMITED_SUB, **o}) for k, (_, o) in subs.items()
        }
        self.n = {k: n for k, (n, _) in subs.items()}
        self.endpoint = self._start_pub(_endpoint(transport, "pub"))
        for sub in self.subs.values():
            sub.connect(self.endpoint)
            sub.subscribe(b"t%0*d" % (WIDTH, 0))
        # connected first (a subscription set before the connection is up waits in a pipe of
        # SNDHWM places), then a batch at a time, each heard in force at the PUB (its last topic
        # published until it arrives: subscriptions travel in order) before the next: every
        # subscription reaches the PUB before the restart
        self.heard(topics=1)
        for key, sub in self.subs.items():
            for start in range(1, self.n[key], BATCH):
                last = min(self.n[key], start + BATCH) - 1
                for i in range(start, last + 1):
                    sub.subscribe(b"t%0*d" % (WIDTH, i))
                self._until_heard(sub, last)

    def _until_heard(self, sub: Any, topic: int) -> None:
        """Publish one topic until this SUB receives it (bounded by WAIT_S)."""
        peer, deadline = self.peers[-1], time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            mark = len(peer.lines)
            peer.tell(("publish", WIDTH, topic, 1))
            peer.wait_for("published", mark)
            if sub.recv_bytes(5) is not None:
                while sub.recv_bytes(0) is not None:  # the copies still in flight
                    pass
                return

    def _start_pub(self, endpoint: str) -> str:
        peer = Peer(_pub_peer, endpoint, DATA_UNLIMITED_PUB)
        self.peers.append(peer)
        up = peer.wait_for("up ")
        if up is None:
            raise RuntimeError(f"the PUB peer did not start on {endpoint}")
        return up.split(" ", 1)[1]

    def heard(self, topics: int = 0, limit_s: float = WAIT_S) -> dict[str, dict[str, Any]]:
        """Publish every topic (or the first `topics`) once a round until two rounds in a row hear
        the same topics, some (a SUB reconnects within ~100 ms and resends its subscriptions at
        once): per SUB, the topics the PUB now holds for it and the time of the round it first
        heard (from the call)."""
        start = time.monotonic()
        rounds: dict[str, list[int]] = {k: [] for k in self.subs}
        first: dict[str, Optional[float]] = {k: None for k in self.subs}
        while time.monotonic() - start < limit_s:
            peer = self.peers[-1]
            mark, published = len(peer.lines), time.monotonic()
            peer.tell(("publish", WIDTH, 0, topics or max(self.n.values())))
            peer.wait_for("published", mark)
            for key, got in self._drain().items():
                rounds[key].append(len(got))
                if got and first[key] is None:
                    first[key] = published
            if all(len(r) >= 2 and r[-1] == r[-2] and r[-1] for r in rounds.values()):
                break
        return {
            k: {
                "topics": rounds[k][-1],
                "rounds": rounds[k],
                "first_s": None if (t := first[k]) is None else round(t - start, 3),
            }
            for k in self.subs
        }

    def _drain(self) -> dict[str, set[bytes]]:
        """What each SUB receives until none has received anything for IDLE_MS."""
        got: dict[str, set[bytes]] = {k: set() for k in self.subs}
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < IDLE_MS / 1000:
            heard = False
            for key, sub in self.subs.items():
                while (message := sub.recv_bytes(0)) is not None:
                    got[key].add(message)
                    heard = True
            if heard:
                idle_since = time.monotonic()
            else:
                time.sleep(0.002)
        return got

    def restart(self, mode: str) -> None:
        old = self.peers[-1]
        old.end(mode)
        old.reap()
        self._start_pub(self.endpoint)

    def close(self) -> None:
        for peer in self.peers:
            peer.reap()
        for sub in self.subs.values():
            sub.close(0)
        self.ctx.term()


def _pub_restart(
    transport: str, mode: str, subs: dict[str, tuple[int, dict[str, int]]]
) -> dict[str, dict[str, Any]]:
    """Per SUB: topics heard before the PUB's restart and after it, and when the first came."""
    group = _Subscribers(transport, subs)
    try:
        before = group.heard()
        group.restart(mode)
        after = group.heard()
        return {
            k: {
                "n": group.n[k],
                "before": before[k]["topics"],
                "after": after[k]["topics"],
                "rounds_after": after[k]["rounds"],
                "first_after_s": after[k]["first_s"],
            }
            for k in subs
        }
    finally:
        group.close()


# ---------------------------------------------------------------------------- U-10
SEND_CAP = 20_000  # sends tried per socket with no peer (the default SNDHWM is 1000)


def _no_peer_endpoint(transport: str) -> str:
    """An endpoint nobody listens on: a tcp port just freed, or an ipc path never bound."""
    if transport == "ipc":
        return _endpoint("ipc", "nobody")
    ctx = _engine.Context()
    probe = _socket(ctx, "PULL")
    endpoint = str(probe.bind("tcp://127.0.0.1:*"))
    probe.close(0)
    ctx.term()
    return endpoint


PEER_OF = {"PUSH": "PULL", "DEALER": "DEALER"}


def _queued_without_peer(
    transport: str, kind: str, side: str, options: dict[str, int]
) -> dict[str, Any]:
    """A PUSH or DEALER that connects to (or binds) an endpoint with no peer: how many sends with
    DONTWAIT it accepts before EAGAIN; then a peer comes (binds, or connects): how many arrive,
    and whether a send is accepted once it is there."""
    ctx = _engine.Context()
    sock, peer = _socket(ctx, kind, options), _socket(ctx, PEER_OF[kind])
    try:
        endpoint = _no_peer_endpoint(transport)
        if side == "connect":
            sock.connect(endpoint)
        else:
            endpoint = sock.bind(endpoint)
        accepted = 0
        while accepted < SEND_CAP and sock.send_bytes(b"%d" % accepted, dontwait=True):
            accepted += 1
        if side == "connect":
            peer.bind(endpoint)
        else:
            peer.connect(endpoint)
        arrived = set()
        while (message := peer.recv_bytes(200)) is not None:
            arrived.add(int(message))
        deadline, later = time.monotonic() + WAIT_S, False
        while not later and time.monotonic() < deadline:  # once the peer is there, sends go
            later = sock.send_bytes(b"-1", dontwait=True)
            if not later:
                time.sleep(0.005)
        return {
            "sndhwm": sock.get_option(OPT["SNDHWM"]),
            "accepted": accepted,
            "arrived": len(arrived),
            "arrived_in_order": sorted(arrived) == list(range(len(arrived))),
            "accepted_once_peer_came": later,
        }
    finally:
        sock.close(0)
        peer.close(0)
        ctx.term()


# ---------------------------------------------------------------------------- U-11
PACE_S = 0.001  # the ROUTER sends one message to the DEALER's identity every ms
SETTLED = 100  # the new DEALER has this many: the flow is back


class _RouterFlow:
    """A ROUTER here (ROUTER_MANDATORY, ROUTER_HANDOVER as asked) that sends seq after seq to one
    routing id, each send's outcome kept: ok, EHOSTUNREACH (no such peer) or EAGAIN (its pipe full)."""

    def __init__(self, transport: str, handover: bool):
        self.ctx = _engine.Context()
        options = {"ROUTER_MANDATORY": 1, "ROUTER_HANDOVER": int(handover)}
        self.router = _socket(self.ctx, "ROUTER", options)
        self.endpoint = str(self.router.bind(_endpoint(transport, "router")))
        self.sends: list[tuple[float, int, str]] = []  # (time, seq, outcome)

    def send_until(self, done: Callable[[], bool], limit_s: float) -> None:
        deadline = time.monotonic() + limit_s
        while not done() and time.monotonic() < deadline:
            seq = len(self.sends)
            try:
                if self.router.send_bytes(ROUTING_ID, dontwait=True, more=True):
                    ok = self.router.send_bytes(b"%d" % seq, dontwait=True)
                    outcome = "ok" if ok else "eagain"
                else:
                    outcome = "eagain"
            except EngineError as exc:
                if exc.errno != EHOSTUNREACH:
                    raise
                outcome = "unreachable"
            self.sends.append((time.monotonic(), seq, outcome))
            time.sleep(PACE_S)

    def close(self) -> None:
        self.router.close(0)
        self.ctx.term()


def _dealer_restart(
    transport: str,
    mode: str,
    handover: bool,
    window_s: float,
    gap_s: float = 0.0,
    hello: bool = False,
) -> dict[str, Any]:
    """A ROUTER sends to a DEALER's fixed identity every ms; the DEALER restarts (mode) and a new
    one, same identity, connects gap_s later (and sends one message first if `hello`); sends go
    on until the new one has SETTLED messages or window_s passes. Per send after the restart its
    outcome; per message accepted, where it went."""
    flow = _RouterFlow(transport, handover)
    old: Optional[Peer] = None
    new: Optional[Peer] = None
    try:
        old = Peer(_dealer_peer, flow.endpoint, {})
        first = old
        flow.send_until(lambda: len(first.received()) >= 20, WAIT_S)
        restarted = time.monotonic()
        mark = len(flow.sends)
        old.end(mode)
        if gap_s:
            flow.send_until(lambda: False, gap_s)
        new = Peer(_dealer_peer, flow.endpoint, {}, hello)
        latest = new
        flow.send_until(lambda: len(latest.received()) >= SETTLED, window_s)
        stopped = time.monotonic()
        if mode == "freeze":  # the hung one ends at last: what was queued for it dies with it
            old.reap()
        time.sleep(0.3)  # what is in flight to the new one arrives
        after = flow.sends[mark:]
        got_old = {seq for _, seq in old.received()}
        got_new = dict((seq, t) for t, seq in new.received())
        accepted = [seq for _, seq, o in after if o == "ok"]
        lost = [seq for seq in accepted if seq not in got_new and seq not in got_old]
        first_new = min(got_new.values(), default=None)
        unreachable = [t for t, _, o in after if o == "unreachable"]
        return {
            "sends_after": len(after),
            "accepted": len(accepted),
            "unreachable": len(unreachable),
            "unreachable_ms": round((max(unreachable) - min(unreachable)) * 1000, 1)
            if unreachable
            else 0.0,
            "eagain": sum(1 for _, _, o in after if o == "eagain"),
            "to_old": len([s for s in accepted if s in got_old]),
            "to_new": len([s for s in accepted if s in got_new]),
            "lost": len(lost),
            "first_new_ms": None if first_new is None else round((first_new - restarted) * 1000, 1),
            "new_handshakes": sum(1 for _, line in new.lines if line == "connected"),
            "window_ms": round((stopped - restarted) * 1000, 1),
        }
    finally:
        for peer in (old, new):
            if peer is not None:
                peer.reap()
        flow.close()


# ---------------------------------------------------------------------------- scenarios
U9_SUBS: dict[str, tuple[int, dict[str, int]]] = {  # key: topics/SUB's SNDHWM
    "1/default": (1, {}),
    "1000/default": (1000, {}),
    "5000/default": (5000, {}),
    "5000/sndhwm-2000": (5000, {"SNDHWM": 2000}),
    "5000/sndhwm-0": (5000, {"SNDHWM": 0}),
}
RESTART_MODES = ("close", "kill")


def _sndhwm(key: str) -> int:
    """The SUB's SNDHWM from its key (".../TOPICS/SETTING")."""
    setting = key.rsplit("/", 1)[1]
    return 1000 if setting == "default" else int(setting.split("-")[1])


def _fits(topics: int, sndhwm: int) -> int:
    """What a pipe of sndhwm places takes of a burst of `topics` (0: no limit)."""
    return topics if sndhwm == 0 else min(topics, sndhwm)


def publisher_restart(r: ScenarioRunner) -> Outcome:
    """U-9 and U-12: SUBs with 1 to 5000 topics (the SUB's SNDHWM default, 2000 or 0, set before
    connect) under one PUB, every topic heard before the PUB restarts (close, kill), then the
    topics heard after; U-12 also zmqload pub-sub runs with --restart p0."""
    transports = r.scale(("tcp", "ipc"), ("tcp",))
    figures: dict[str, Any] = {"restarts": {}, "runs": {}}
    measured: list[str] = []
    for transport in transports:
        for mode in RESTART_MODES:
            cell = _pub_restart(transport, mode, U9_SUBS)
            figures["restarts"][f"{transport}/{mode}"] = cell
            measured.append(
                f"{transport}, the PUB restarted ({mode}): topics heard after / before, per SUB "
                "(topics, its SNDHWM): "
                + ", ".join(
                    f"{k.replace('/', ' ')}: {c['after']:,} / {c['before']:,}"
                    for k, c in cell.items()
                )
                + f"; the first heard in the round published {_first(cell)} after the new PUB was up"
            )
    for mode in ("kill",):  # the in-process SUBs cover both modes; a run is 8 s
        res = r.run(
            f"pub-sub-restart-p0-{mode}",
            pattern="pub-sub",
            transport="tcp",
            rate=2000,
            # 3 s after the restart: the new process starts in 0.5-2 s on a shared machine, then
            # sends what it missed at once, before the SUB's subscription reaches it (all dropped
            # in a 2 s run once); the paced sends after that are what the SUB hears
            duration=4.0,
            restart="p0@1",
            restart_mode=mode,
        )
        restart = res.restarts[0]
        recvs = read_parts(res.run_dir, "recvs", ["seq"])
        seqs = recvs["seq"].to_numpy() if recvs is not None else []
        new = [int(s) for s in seqs if s >= restart["first_seq"]]
        run = {
            "sent_after": int(res.sent) - int(restart["first_seq"]),
            "received_after": len(new),
            # the new PUB's first sends, made before the SUB's subscription reached it: a PUB
            # with no subscriber drops them
            "dropped_before_subscribed": min(new, default=int(res.sent))
            - int(restart["first_seq"]),
            "lost_at_restart": int(restart["lost"]),
            "first_after_up_ms": None
            if restart["first_recv_after_up_ns"] is None
            else round(restart["first_recv_after_up_ns"] / 1e6, 1),
            "down_ms": round(restart["down_ns"] / 1e6, 1),
        }
        figures["runs"][mode] = run
        measured.append(
            f"zmqload run, pub-sub tcp 2,000 msg/s for 4 s, the PUB (p0) restarted at 1 s ({mode}): down "
            f"{run['down_ms']:,} ms; the SUB received {len(new):,} of the {run['sent_after']:,} the "
            f"new PUB sent"
            + (
                f", the first {run['first_after_up_ms']} ms after it was up"
                if run["first_after_up_ms"] is not None
                else ""
            )
            + "; the new PUB's first "
            f"{run['dropped_before_subscribed']:,} (its catch-up on the schedule it missed while down, "
            "sent before the SUB's subscription reached it) dropped; "
            f"{run['lost_at_restart']:,} lost at the restart in all"
        )
    return Outcome([_u9_verdict(figures), _u12_verdict(figures)], measured, figures)


def _first(cell: dict[str, Any]) -> str:
    firsts = [c["first_after_s"] for c in cell.values() if c["first_after_s"] is not None]
    return f"{min(firsts) * 1000:,.0f}-{max(firsts) * 1000:,.0f} ms" if firsts else "never"


def _u9_verdict(figures: dict[str, Any]) -> Verdict:
    cells = figures["restarts"]
    kept = {f"{c}/{k}": v["after"] for c, cell in cells.items() for k, v in cell.items()}
    before = {f"{c}/{k}": v["before"] for c, cell in cells.items() for k, v in cell.items()}
    many = {k: v for k, v in kept.items() if "/5000/default" in k}
    at_hwm = all(kept[k] == _fits(before[k], _sndhwm(k)) for k in kept)
    measurements = {"kept": kept, "before": before, "kept_is_sndhwm": at_hwm}
    by_sub = {
        sub: {v["after"] for cell in cells.values() for k, v in cell.items() if k == sub}
        for sub in U9_SUBS
    }
    because = (
        f"topics kept after the PUB's restart ({', '.join(cells)}), per SUB: "
        + "; ".join(
            f"{sub.split('/')[0]} topics, SNDHWM {_sndhwm(sub):,}: kept {_values(by_sub[sub])}"
            for sub in U9_SUBS
        )
        + (
            "; every SUB kept min(its topics, its SNDHWM) (0: all): it resends its subscriptions "
            "through its pipe to the PUB at once and drops what does not fit"
            if at_hwm
            else ""
        )
        + (
            ""
            if all(
                b == v["n"] for cell in cells.values() for v in cell.values() for b in [v["before"]]
            )
            else "; some SUBs held fewer before the restart: "
            + ", ".join(f"{k} {b:,}" for k, b in before.items() if b != int(k.split("/")[2]))
        )
    )
    if all(v < before[k] for k, v in many.items()):
        return Verdict("U-9", HOLDS, because, measurements)
    if not any(v < before[k] for k, v in many.items()):
        return Verdict("U-9", DOES_NOT_HOLD, because, measurements)
    return Verdict(
        "U-9",
        depends(
            "on the restart: lost with " + ", ".join(k for k, v in many.items() if v < before[k])
        ),
        because,
        measurements,
    )


def _u12_verdict(figures: dict[str, Any]) -> Verdict:
    heard = {c: {k: v["after"] for k, v in cell.items()} for c, cell in figures["restarts"].items()}
    runs = figures["runs"]
    measurements = {"topics_after": heard, "runs": runs}
    deaf = [c for c, h in heard.items() if not any(h.values())] + [
        f"run/{m}" for m, v in runs.items() if not v["received_after"]
    ]
    cases = len(heard) + len(runs)
    because = (
        "after the PUB's restart every SUB heard its topics again ("
        + "; ".join(f"{c}: 1-topic SUB {h['1/default']} of 1" for c, h in heard.items())
        + "); zmqload runs: "
        + "; ".join(
            f"{m}: {v['received_after']:,} of {v['sent_after']:,} received from the new PUB, the first "
            f"{v['first_after_up_ms']} ms after it was up"
            for m, v in runs.items()
        )
    )
    if len(deaf) == cases:
        return Verdict("U-12", HOLDS, because, measurements)
    if not deaf:
        return Verdict("U-12", DOES_NOT_HOLD, because, measurements)
    return Verdict(
        "U-12", depends(f"heard nothing after: {', '.join(deaf)}"), because, measurements
    )


U10_KINDS = ("PUSH", "DEALER")
U10_SETTINGS: dict[str, dict[str, int]] = {
    "default": {},
    "immediate": {"IMMEDIATE": 1},
    "sndhwm-10": {"SNDHWM": 10},
}


def send_without_peer(r: ScenarioRunner) -> Outcome:
    """U-10: a PUSH and a DEALER that connect to (or, for contrast, bind) an endpoint nobody is at,
    sends with DONTWAIT until EAGAIN, default, ZMQ_IMMEDIATE 1 or SNDHWM 10; then a peer comes."""
    figures: dict[str, Any] = {}
    measured: list[str] = []
    for transport in r.scale(("tcp", "ipc"), ("tcp",)):
        for kind in U10_KINDS:
            for side in ("connect", "bind"):
                for name, options in U10_SETTINGS.items():
                    if side == "bind" and name != "default":
                        continue  # a bound socket with no peer refuses at once whatever is set
                    p = _queued_without_peer(transport, kind, side, options)
                    key = f"{transport}/{kind}/{side}/{name}"
                    figures[key] = p
                    measured.append(
                        f"{transport}, {kind} that {side}s, {name}, no peer: {p['accepted']:,} sends "
                        f"accepted before EAGAIN (SNDHWM {p['sndhwm']:,}); a peer came: "
                        f"{p['arrived']:,} arrived"
                        + (" in order" if p["arrived"] and p["arrived_in_order"] else "")
                    )
    return Outcome([_u10_verdict(figures)], measured, figures)


def _values(values: set[int]) -> str:
    return " or ".join(f"{v:,}" for v in sorted(values))


def _u10_verdict(figures: dict[str, Any]) -> Verdict:
    connect = {k: p for k, p in figures.items() if "/connect/" in k}
    queued = {k: p for k, p in connect.items() if not k.endswith("/immediate")}
    refused = {k: p for k, p in connect.items() if k.endswith("/immediate")}
    bind = {k: p for k, p in figures.items() if "/bind/" in k}
    measurements = {
        "accepted": {k: p["accepted"] for k, p in figures.items()},
        "arrived": {k: p["arrived"] for k, p in figures.items()},
    }
    because = (
        f"connected to nobody ({', '.join(sorted({k.split('/')[0] for k in figures}))}, PUSH and "
        "DEALER): accepted "
        + _values({p["accepted"] for p in queued.values()})
        + " (SNDHWM "
        + _values({p["sndhwm"] for p in queued.values()})
        + "), arrived once a peer bound "
        + _values({p["arrived"] for p in queued.values()})
        + (" in order" if all(p["arrived_in_order"] for p in queued.values()) else "")
        + "; with ZMQ_IMMEDIATE accepted "
        + _values({p["accepted"] for p in refused.values()})
        + "; bound with no peer accepted "
        + _values({p["accepted"] for p in bind.values()})
    )
    holds = all(
        p["accepted"] == p["sndhwm"] and p["arrived"] == p["accepted"] for p in queued.values()
    ) and all(p["accepted"] == 0 for p in refused.values())
    if holds:
        return Verdict(
            "U-10",
            HOLDS,
            "a connecting socket queues SNDHWM messages, all delivered once a peer comes: "
            + because,
            measurements,
        )
    if all(p["accepted"] == 0 for p in connect.values()):
        return Verdict("U-10", DOES_NOT_HOLD, because, measurements)
    return Verdict(
        "U-10", depends("on the socket and transport: " + because), because, measurements
    )


U11_MODES = ("close", "kill", "freeze")
# and a case that is no race: the new DEALER connects 300 ms after the kill and speaks first
LATE = "kill-late"
LATE_GAP_S = 0.3
U11_WINDOW_S = 0.8  # sends after a restart go on this long, unless the new DEALER has SETTLED


def dealer_restart(r: ScenarioRunner) -> Outcome:
    """U-11: a ROUTER (ROUTER_MANDATORY) sends to a DEALER's fixed identity every ms; the DEALER
    restarts (close, kill, freeze: hung while the new one connects) with ROUTER_HANDOVER 0 and 1;
    repeated, as the new connection races the old one's end."""
    repeats = r.scale(2, 1)
    figures: dict[str, Any] = {"repeats": repeats, "cells": {}}
    measured: list[str] = []
    for transport in r.scale(("tcp", "ipc"), ("tcp",)):
        for handover in (False, True):
            late = () if handover or (transport == "ipc") else (LATE,)  # not a race: tcp is enough
            for mode in U11_MODES + late:
                key = f"{transport}/{mode}/handover-{int(handover)}"
                cells = [
                    _dealer_restart(
                        transport,
                        "kill" if mode == LATE else mode,
                        handover,
                        U11_WINDOW_S,
                        gap_s=LATE_GAP_S if mode == LATE else 0.0,
                        hello=mode == LATE,
                    )
                    for _ in range(repeats)
                ]
                figures["cells"][key] = cells
                measured += [
                    f"{transport}, DEALER restarted ({_mode_text(mode)}), ROUTER_HANDOVER {int(handover)}, run "
                    f"{i + 1}: of {c['sends_after']:,} sends in {c['window_ms']:,.0f} ms, "
                    f"{c['unreachable']:,} EHOSTUNREACH, {c['eagain']:,} EAGAIN, {c['accepted']:,} "
                    f"accepted: {c['to_new']:,} reached the new DEALER"
                    + (
                        f" (the first {c['first_new_ms']} ms after the restart)"
                        if c["first_new_ms"] is not None
                        else ""
                    )
                    + f", {c['to_old']:,} the old one, "
                    f"{c['lost']:,} lost; the new DEALER's handshakes with the ROUTER: "
                    f"{c['new_handshakes']}"
                    for i, c in enumerate(cells)
                ]
    return Outcome([_u11_verdict(figures)], measured, figures)


def _spread(values: list[Any]) -> str:
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"{low:,}-{high:,}"


def _mode_text(mode: str) -> str:
    if mode == LATE:
        return f"kill, the new one connecting {LATE_GAP_S * 1000:.0f} ms later and sending first"
    return mode


def _u11_verdict(figures: dict[str, Any]) -> Verdict:
    cells, n = figures["cells"], figures["repeats"]
    failing = {  # runs in which the new DEALER got nothing in the window: every send failed or was lost
        k: sum(1 for c in v if c["to_new"] == 0) for k, v in cells.items()
    }
    measurements = {
        "runs_new_dealer_unreached": failing,
        "repeats": n,
        "unreachable": {k: [c["unreachable"] for c in v] for k, v in cells.items()},
        "lost": {k: [c["lost"] for c in v] for k, v in cells.items()},
        "first_new_ms": {k: [c["first_new_ms"] for c in v] for k, v in cells.items()},
        "new_handshakes": {k: [c["new_handshakes"] for c in v] for k, v in cells.items()},
    }
    because = "; ".join(
        f"{k}: the new DEALER (handshakes "
        + _spread([c["new_handshakes"] for c in v])
        + f") got nothing in {failing[k]} of {n} runs (EHOSTUNREACH "
        + _spread([c["unreachable"] for c in v])
        + ", lost "
        + _spread([c["lost"] for c in v])
        + (
            ", first receipt after "
            + _spread([c["first_new_ms"] for c in v if c["first_new_ms"] is not None])
            + " ms"
            if failing[k] < n
            else ""
        )
        + ")"
        for k, v in cells.items()
    )
    without = [k for k in cells if k.endswith("handover-0")]
    with_ = [k for k in cells if k.endswith("handover-1")]
    if all(failing[k] == n for k in cells):
        return Verdict("U-11", HOLDS, because, measurements)
    if not any(failing.values()):
        return Verdict("U-11", DOES_NOT_HOLD, because, measurements)
    modes = [m for m in U11_MODES if any(failing[k] for k in without if k.split("/")[1] == m)]
    late = any(failing[k] for k in without if k.split("/")[1] == LATE)
    fixed = all(failing[k] == 0 for k in with_)
    condition = (
        f"without ROUTER_HANDOVER, after a {' / '.join(modes)} restart"
        + (
            ", the new DEALER connected (its handshake succeeded) yet unreached"
            if all(c["new_handshakes"] for k in without for c in cells[k])
            else ""
        )
        + (
            ""
            if all(failing[k] == n for k in without if k.split("/")[1] in modes)
            else " (some runs)"
        )
        + (
            ": close and kill give EHOSTUNREACH, a hung (freeze) old DEALER takes the sends and loses them"
            if {"close", "kill", "freeze"} <= set(modes)
            else ""
        )
        + (
            f", and a new DEALER that connects {LATE_GAP_S * 1000:.0f} ms after the kill and sends "
            "first is not reached either"
            if late
            else ""
        )
        + ("; ROUTER_HANDOVER 1 fixes every mode" if fixed else "")
    )
    return Verdict("U-11", depends(condition), because, measurements)


SCENARIOS = (
    Scenario(
        "publisher-restart",
        "SUBs with 1 to 5000 topics under a PUB that restarts (close, kill): the topics kept, by the "
        "SUB's SNDHWM; zmqload pub-sub runs with the PUB restarted (libzmq #2258, zmq.rs PR 231)",
        ("U-9", "U-12"),
        publisher_restart,
        expected_s=13,
    ),
    Scenario(
        "send-without-peer",
        "PUSH and DEALER sends with DONTWAIT and no peer, connected or bound, default, ZMQ_IMMEDIATE "
        "or SNDHWM 10; then a peer comes (libzmq #3248)",
        ("U-10",),
        send_without_peer,
        expected_s=4,
    ),
    Scenario(
        "dealer-restart",
        "A ROUTER with ROUTER_MANDATORY sending to a DEALER's fixed identity while the DEALER "
        "restarts (close, kill, freeze), ROUTER_HANDOVER 0 and 1, repeated (libzmq #2348, #4603; "
        "pyzmq #1899)",
        ("U-11",),
        dealer_restart,
        expected_s=22,
    ),
)
