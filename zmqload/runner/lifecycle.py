"""The one worker lifecycle producers, consumers and the proxy share: the control client and its
commands (only between engine slices), the watchdog that ends a worker whose controller died, the
samples, kernel queue sampling and the engine context."""

from __future__ import annotations

import dataclasses
import os
import resource
from typing import Any, Callable

from .. import _engine
from ..errors import EngineError, engine_error
from ..contract import patterns
from ..contract import control
from .kernel_queues import TcpQueues, ports_of
from .parquet_writer import SAMPLES_SCHEMA, ChunkPipeline, PartWriter, Samples
from .channel import ControlClient
from .curve import HandshakeWatch, secure
from .spec import WorkerSpec

PROGRESS_EVERY_NS = 100_000_000
KERNEL_SAMPLE_EVERY_NS = 100_000_000


_seen_rss_kb = -1  # the largest VmRSS this process has sampled


def rss_kb() -> int:
    """Resident memory of this process now (VmRSS), -1 if unknown: a worker's, or the
    controller's for the live display."""
    global _seen_rss_kb
    try:
        with open("/proc/self/statm") as f:
            now = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError, IndexError):
        return -1
    _seen_rss_kb = max(_seen_rss_kb, now)
    return now


def max_rss_kb() -> int:
    """Peak resident memory of this worker's process (shared by threads in inproc runs).

    VmHWM belongs to the process image, while ru_maxrss survives fork+exec and so reports
    the parent's peak for a freshly spawned worker. The kernel updates VmHWM lazily from
    per-thread counters, so it was measured up to ~100 kB below a VmRSS sample taken earlier;
    the peak is never below what this process itself sampled."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return max(int(line.split()[1]), _seen_rss_kb)
    except OSError:
        pass
    return max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, _seen_rss_kb)


class WorkerLifecycle:
    """Subclasses implement run(); they call tick() between slices."""

    def __init__(self, spec: WorkerSpec, ctl: ControlClient, context: _engine.Context | None):
        self.spec = spec
        self.ctl = ctl
        self.workload = spec.workload
        self.pattern = patterns.get(self.workload.pattern)
        self.own_context = context is None
        self.context = _engine.Context(self.workload.io_threads) if context is None else context
        self.sockets: list[_engine.Socket] = []
        self.t0_ns = spec.t0_ns  # 0 until Start, but for a restarted worker's new process
        self.connect_to: list[str] = []
        self.stop_requested = False
        self.interrupted = False
        self.close_allowed = False
        self.drain_mode: str | None = None  # set by ProducersDone (consumers)
        self.hold_requested = False  # set by Hold (--restart): the role holds after its slice
        self.samples = Samples(
            PartWriter(os.path.join(spec.run_dir, "samples"), spec.name, SAMPLES_SCHEMA, "snappy"),
            spec.role.value,
            spec.worker.index,
        )
        self._next_progress = 0
        self._next_kernel_sample = 0
        self._sampled = (-1, -1, -1)
        self.tcp_queues = TcpQueues([])
        self.handshakes: HandshakeWatch | None = (
            None  # a connecting CURVE client's, until one succeeds
        )

    def run(self) -> None:
        """The role's whole life: open the socket, wait for Start, send or receive, report."""
        raise NotImplementedError

    # -- the controller ----------------------------------------------------------------------
    def controller_alive(self) -> bool:
        """The watchdog: a worker process whose controller died stops by itself (as if
        interrupted) instead of sending into the void forever."""
        return self.spec.controller_alive()

    def watch_controller(self) -> None:
        if not self.controller_alive():
            self.stop_requested = self.interrupted = True

    def handle(self, message: control.Message) -> None:
        if isinstance(message, control.Connect):
            self.connect_to = list(message.endpoints)
        elif isinstance(message, control.Start):
            self.t0_ns = message.t0_ns
        elif isinstance(message, control.Stop):
            self.stop_requested = True
            self.interrupted = message.interrupted
        elif isinstance(message, control.Close):
            self.close_allowed = True
        elif isinstance(message, control.ProducersDone):
            self.drain_mode = message.drain
        elif isinstance(message, control.Hold):
            self.hold_requested = True
        self.on_command(message)

    def on_command(self, message: control.Message) -> None:
        """Role-specific reaction to a command (after the common one)."""

    def poll_commands(self, timeout_ms: int = 0) -> None:
        self.check_handshakes()
        message = self.ctl.recv(timeout_ms)
        while message is not None:
            self.handle(message)
            message = self.ctl.recv(0)

    def wait_while(self, condition: Callable[[], bool], step_ms: int = 50) -> None:
        """Serve commands until condition() is false, the controller is gone or a stop came."""
        while condition() and not self.stop_requested:
            self.poll_commands(step_ms)
            self.watch_controller()

    # -- between slices ----------------------------------------------------------------------
    def tick(self, now: int, progress: control.Progress | None) -> None:
        """Progress to the controller (~10/s), the watchdog, and commands."""
        if progress is not None and now >= self._next_progress:
            self._next_progress = now + PROGRESS_EVERY_NS
            self.ctl.send(dataclasses.replace(progress, rss_kb=rss_kb(), **self.more_progress(now)))
            self.watch_controller()
        self.poll_commands()

    def more_progress(self, now: int) -> dict[str, Any]:
        """Fields a role adds to the Progress being sent (a consumer's latency for --metrics)."""
        return {}

    def sampled_state(self, now: int) -> tuple[int, int, int]:
        """Kernel send/receive queue bytes of this worker's tcp connections and the
        process's resident memory, sampled ~10/s (each sample costs a few syscalls)."""
        if now >= self._next_kernel_sample:
            self._next_kernel_sample = now + KERNEL_SAMPLE_EVERY_NS
            self._sampled = (*self.tcp_queues.sample(), rss_kb())
        return self._sampled

    # -- sockets -------------------------------------------------------------------------------
    def open_socket(
        self, socket_type: str, options: dict[str, int | None], routing_id: bytes | None = None
    ) -> "_engine.Socket":
        """A socket with `options` (and `routing_id`) set, bound (binders) or connected once the
        controller says where (the binders' tcp ports are only known after they bound)."""
        sock = _engine.Socket(self.context, _engine.SOCKET_TYPES[socket_type])
        self.sockets.append(sock)
        for name, value in options.items():
            if value is not None:
                try:
                    sock.set_option(_engine.SOCKET_OPTION_IDS[name], int(value))
                except EngineError as exc:  # named as libzmq names it, not by its number
                    raise engine_error(
                        exc.errno or 0,
                        f"ZMQ_{name} {value} on a {socket_type}",
                        str(exc.strerror).rpartition(": ")[2],
                    ) from None
        if routing_id is not None:
            sock.set_routing_id(routing_id)
        secure(sock, self.spec.curve, server=bool(self.spec.bind))
        if self.spec.bind:
            endpoint = sock.bind(self.spec.bind[0])
            self.tcp_queues = TcpQueues(ports_of([endpoint]))
            self.ctl.send(control.Ready([endpoint], _engine.now_ns()))
            return sock
        self.ctl.send(control.Ready())
        self.wait_while(lambda: not self.connect_to, step_ms=100)
        if self.spec.curve is not None:
            self.handshakes = HandshakeWatch(
                self.context, sock, f"inproc://zmqload-handshakes-{id(self)}"
            )
        for endpoint in self.connect_to:
            sock.connect(endpoint)
        self.tcp_queues = TcpQueues(ports_of(self.connect_to))
        self.ctl.send(control.Connected(_engine.now_ns()))
        return sock

    def spill_dir(self) -> str:
        """Hidden (readers skip names starting with '_') home of raw chunks awaiting conversion."""
        return os.path.join(self.spec.run_dir, "_spill", self.spec.name)

    def close_pipeline(self, pipeline: ChunkPipeline) -> int:
        """Wait for the records; after an interrupt, give the converter a second at most."""
        return pipeline.close(abandon_after_s=1.0 if self.interrupted else None)

    def check_handshakes(self) -> None:
        """A connecting CURVE client whose handshakes keep failing fails (runner/curve.py HandshakeWatch)."""
        if self.handshakes is not None and self.handshakes.watching:
            self.handshakes.check()

    def close_sockets(self) -> None:
        """Close what a failure left open (linger 0): an inproc worker shares the controller's
        context, whose termination waits for every socket of it, forever."""
        if self.handshakes is not None:
            self.handshakes.close()
        for sock in self.sockets:
            sock.close(0)

    def finish_context(self) -> int:
        if self.handshakes is not None:
            self.handshakes.close()
        return self.context.term() if self.own_context else 0
