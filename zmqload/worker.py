"""Producer and consumer bodies: one socket each, driven slice by slice.

A worker runs in its own process (tcp, ipc) or thread (inproc, sharing one engine
context). It talks to the controller over the control channel only between engine
slices, so the per-message loop never waits on Python.
"""
from __future__ import annotations

import multiprocessing
import os
import resource
import signal
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from . import _engine, patterns
from .config import Workload
from .control import ControlClient
from .histogram import Histogram
from .kernelq import TcpQueues, ports_of
from .recorder import (RECVS_SCHEMA, REPLIES_SCHEMA, SAMPLES_SCHEMA, SENDS_SCHEMA, ChunkPipeline,
                       PartWriter, Samples, SeenMap, intended_times)

PROGRESS_EVERY_NS = 100_000_000
KERNEL_SAMPLE_EVERY_NS = 100_000_000
WARMUP_EVERY_S = 0.002
SEQ_MASK = (1 << _engine.SEQ_BITS) - 1


@dataclass
class WorkerSpec:
    role: str                     # "producer" or "consumer"
    index: int
    workload: dict
    control: str                  # control channel endpoint
    run_dir: str
    bind: "str | list | None" = None   # endpoint(s) to bind, for the binding side
    connect: list = field(default_factory=list)   # endpoints to connect, for the other side

    @property
    def name(self) -> str:
        return {"producer": "p", "consumer": "c", "proxy": "x"}[self.role] + str(self.index)


def process_entry(spec: WorkerSpec) -> None:
    """Entry point of a worker process: the controller handles Ctrl-C and tells us to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    run_worker(spec)


def run_worker(spec: WorkerSpec, context: "_engine.Context | None" = None) -> None:
    from .proxy import ProxyWorker
    body = {"producer": Producer, "consumer": Consumer, "proxy": ProxyWorker}[spec.role]
    ctl = ControlClient(spec.control, spec.name)
    try:
        body(spec, ctl, context).run()
    except BaseException as exc:
        ctl.send("error", message=f"{type(exc).__name__}: {exc}", errno=getattr(exc, "errno", None),
                 traceback=traceback.format_exc())
    finally:
        ctl.close()


def _max_rss_kb() -> int:
    """Peak resident memory of this worker's process (shared by threads in inproc runs).

    VmHWM belongs to the process image, while ru_maxrss survives fork+exec and so reports
    the parent's peak for a freshly spawned worker."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _parent_alive() -> bool:
    parent = multiprocessing.parent_process()
    return parent is None or parent.is_alive()


class _Worker:
    socket_option_names: tuple = ()

    def __init__(self, spec: WorkerSpec, ctl: ControlClient, context):
        self.spec = spec
        self.ctl = ctl
        self.workload = Workload.from_dict(spec.workload)
        self.pattern = patterns.get(self.workload.pattern)
        self.own_context = context is None
        self.context = _engine.Context(self.workload.io_threads) if context is None else context
        self.t0_ns = 0
        self.stop_requested = False
        self.interrupted = False
        self.samples = Samples(PartWriter(os.path.join(spec.run_dir, "samples"), spec.name,
                                          SAMPLES_SCHEMA, "snappy"), spec.role, spec.index)
        self._next_progress = 0
        self._next_kernel_sample = 0
        self._kernel_queues = (-1, -1)
        self.tcp_queues = TcpQueues([])

    def kernel_queues(self, now: int) -> tuple[int, int]:
        """Kernel send/receive queue bytes of this worker's tcp connections (sampled ~10/s)."""
        if now >= self._next_kernel_sample:
            self._next_kernel_sample = now + KERNEL_SAMPLE_EVERY_NS
            self._kernel_queues = self.tcp_queues.sample()
        return self._kernel_queues

    def open_socket(self, socket_type: str, options: dict) -> "_engine.Socket":
        sock = _engine.Socket(self.context, _engine.SOCKET_TYPES[socket_type])
        for name, value in options.items():
            if value is not None:
                sock.set_option(_engine.OPTIONS[name], int(value))
        if self.spec.bind:
            endpoint = sock.bind(self.spec.bind)
            self.tcp_queues = TcpQueues(ports_of([endpoint]))
            self.ctl.send("ready", endpoint=endpoint)
            return sock
        # The connecting side learns the binders' endpoints (tcp ports chosen at bind time)
        # from the controller once every binder is ready.
        self.ctl.send("ready", endpoint=None)
        while not self.spec.connect and not self.stop_requested:
            self.poll_commands(100)
            if not _parent_alive():
                self.stop_requested = self.interrupted = True
        for endpoint in self.spec.connect:
            sock.connect(endpoint)
        self.tcp_queues = TcpQueues(ports_of(self.spec.connect))
        self.ctl.send("connected")
        return sock

    def handle_command(self, message: dict) -> None:
        kind = message["type"]
        if kind == "connect":
            self.spec.connect = message["endpoints"]
        elif kind == "start":
            self.t0_ns = message["t0_ns"]
        elif kind == "stop":
            self.stop_requested = True
            self.interrupted = message.get("interrupted", False)
        elif kind == "close":
            self.close_allowed = True
        self.on_command(message)

    def on_command(self, message: dict) -> None:
        pass

    def poll_commands(self, timeout_ms: int = 0) -> None:
        message = self.ctl.recv(timeout_ms)
        while message is not None:
            self.handle_command(message)
            message = self.ctl.recv(0)

    def spill_dir(self) -> str:
        """Hidden (readers skip names starting with '_') home of raw chunks awaiting conversion."""
        return os.path.join(self.spec.run_dir, "_spill", self.spec.name)

    def close_pipeline(self, pipeline) -> int:
        """Wait for the records; after an interrupt, give the converter a second at most."""
        return pipeline.close(abandon_after_s=1.0 if self.interrupted else None)

    def due_progress(self, now: int) -> bool:
        if now >= self._next_progress:
            self._next_progress = now + PROGRESS_EVERY_NS
            return True
        return False

    def finish_context(self) -> int:
        return self.context.term() if self.own_context else 0


class Producer(_Worker):
    def run(self) -> None:
        w = self.workload
        slice_ms = w.slice_ms
        sndtimeo = None if w.send_mode == "dontwait" else (
            min(w.sndtimeo_ms, slice_ms) if w.send_mode == "timeout" else slice_ms)
        sock = self.open_socket(self.pattern.producer_socket, {
            "SNDHWM": w.sndhwm, "SNDBUF": w.sndbuf, "LINGER": w.linger_ms,
            "IMMEDIATE": int(w.immediate) if w.immediate else None, "SNDTIMEO": sndtimeo})
        self.wait_for_start(sock)
        if self.stop_requested:
            self.ctl.send("done", **self.counters(None))
            self.close(sock, None)
            return
        end_ns = self.t0_ns + int(w.duration * 1e9) if w.duration else 0
        round_trip = self.pattern.round_trip
        if round_trip:      # replies come back on the same socket: let recv return each slice
            sock.set_option(_engine.OPTIONS["RCVTIMEO"], slice_ms)
        sender = _engine.Sender(sock, self.spec.index, w.size, w.messages_per_producer, w.rate,
                                self.t0_ns, end_ns, w.send_mode, w.sndtimeo_ms * 1_000_000, round_trip)
        self.rtt = Histogram()
        replies = PartWriter(os.path.join(self.spec.run_dir, "replies"), self.spec.name, REPLIES_SCHEMA,
                             w.compression) if round_trip else None
        self.sent_ok_bits: list[np.ndarray] = []
        writer = PartWriter(os.path.join(self.spec.run_dir, "sends"), self.spec.name, SENDS_SCHEMA, w.compression)
        self._first_seq = 0
        chunk_rows = (w.chunk_rows + 7) // 8 * 8     # whole bytes of the packed ok-map per chunk

        def write_chunk(chunk: dict, rows: int) -> None:
            seqs = np.arange(self._first_seq, self._first_seq + rows, dtype=np.int64)
            self._first_seq += rows
            t_sent, status = chunk["t_sent"][:rows], chunk["status"][:rows]
            self.sent_ok_bits.append(np.packbits(status == _engine.STATUS_OK))
            t_intended = intended_times(self.t0_ns, seqs, w.rate, t_sent)
            if replies is not None:
                t_reply = chunk["t_reply"][:rows]
                self.rtt.record(t_reply - t_intended)
                replies.write({"stream": np.full(rows, self.spec.index, np.int32), "seq": seqs,
                               "t_intended_ns": t_intended, "t_sent_ns": t_sent, "t_reply_ns": t_reply})
            writer.write({"stream": np.full(rows, self.spec.index, np.int32), "seq": seqs,
                          "t_intended_ns": t_intended,
                          "t_sent_ns": t_sent, "status": status, "size": np.full(rows, w.size, np.int32)})

        columns = {"t_sent": np.int64, "status": np.int8}
        if round_trip:
            columns["t_reply"] = np.int64
        pipeline = ChunkPipeline(columns, chunk_rows, write_chunk, self.spill_dir())
        if not w.rate:
            time.sleep(max(0.0, (self.t0_ns - _engine.now_ns()) / 1e9))
        try:
            while not sender.finished:
                now = _engine.now_ns()
                row = sender.run_slice(pipeline.current["t_sent"], pipeline.current["status"],
                                       pipeline.row, now + slice_ms * 1_000_000, pipeline.current.get("t_reply"))
                pipeline.advance(row)
                now = _engine.now_ns()
                self.samples.add(now, sender.sent, sender.eagain + sender.timeouts, *self.kernel_queues(now))
                if self.due_progress(now):
                    self.ctl.send("progress", messages=sender.sent, dropped=sender.eagain + sender.timeouts,
                                  attempted=sender.attempted)
                    if not _parent_alive():
                        self.stop_requested = self.interrupted = True
                self.poll_commands()
                if self.stop_requested:
                    sender.stop()
        finally:
            self.ctl.send("done", **self.counters(sender))
            self.before_close()
            close_ns, term_ns = self.close(sock, 0 if self.interrupted else None)
            unconverted = self.close_pipeline(pipeline)
            self.samples.flush()
        sent_map = np.concatenate(self.sent_ok_bits) if self.sent_ok_bits else np.zeros(0, np.uint8)
        self.ctl.send("final", **self.counters(sender), close_ns=close_ns, term_ns=term_ns,
                      sent_ok_map=sent_map, parts=writer.parts, max_rss_kb=_max_rss_kb(),
                      unconverted_rows=unconverted,
                      writer_cpu_s=pipeline.writer_cpu_s,
                      rtt=self.rtt.to_payload() if round_trip else None)

    def before_close(self) -> None:
        """Shutdown semantics: an optional pause after the last send, and with
        close-order consumer-first, wait until the consumers have closed."""
        w = self.workload
        if self.interrupted:
            return
        if w.close_pause_ms:
            deadline = _engine.now_ns() + w.close_pause_ms * 1_000_000
            while _engine.now_ns() < deadline and not self.interrupted:
                self.poll_commands(min(50, max(1, (deadline - _engine.now_ns()) // 1_000_000)))
        if w.close_order == "consumer-first":
            self.close_allowed = False
            while not self.close_allowed and not self.interrupted:
                self.poll_commands(50)
                if not _parent_alive():
                    return

    def wait_for_start(self, sock) -> None:
        """Send warm-up messages (if asked) until the start command arrives."""
        warming = False
        warm_msg = _engine.warmup_message(self.spec.index, self.workload.size)
        while not self.t0_ns and not self.stop_requested:
            message = self.ctl.recv(int(WARMUP_EVERY_S * 1000) if warming else 100)
            if message is not None:
                if message["type"] == "warmup":
                    warming = True
                self.handle_command(message)
            elif warming:
                sock.send_bytes(warm_msg, dontwait=True)
            elif not _parent_alive():
                self.stop_requested = self.interrupted = True

    def counters(self, sender) -> dict:
        if sender is None:
            return {"attempted": 0, "sent": 0, "eagain": 0, "timeout": 0, "errors": 0,
                    "t_first_send_ns": 0, "t_last_send_ns": 0, "interrupted": self.interrupted}
        return {"attempted": sender.attempted, "sent": sender.sent, "eagain": sender.eagain,
                "timeout": sender.timeouts, "errors": sender.errors, "last_errno": sender.last_errno,
                "t_first_send_ns": sender.t_first_send_ns, "t_last_send_ns": sender.t_last_send_ns,
                "interrupted": self.interrupted}

    def close(self, sock, linger_ms) -> tuple[int, int]:
        """Close with the configured linger (or 0 when interrupted) and time both steps."""
        close_ns = sock.close(linger_ms)
        return close_ns, self.finish_context()


class Consumer(_Worker):
    def run(self) -> None:
        w = self.workload
        sock = self.open_socket(self.pattern.consumer_socket, {
            "RCVHWM": w.rcvhwm, "RCVBUF": w.rcvbuf, "LINGER": 0,
            "IMMEDIATE": int(w.immediate) if w.immediate else None, "RCVTIMEO": w.slice_ms})
        if self.pattern.subscribe:
            sock.subscribe(b"")
        receiver = _engine.Receiver(sock, int(w.consumer_delay_us * 1000), self.pattern.envelope_frames,
                                    self.pattern.round_trip)
        self.latency_intended = Histogram()
        self.latency_sent = Histogram()
        self.streams: dict[int, SeenMap] = {}
        expected = min(w.messages_per_producer, 1 << 24)
        writer = PartWriter(os.path.join(self.spec.run_dir, "recvs"), self.spec.name, RECVS_SCHEMA, w.compression)

        def write_chunk(chunk: dict, rows: int) -> None:
            words = chunk["words"][:rows]
            stream = (words >> np.uint64(_engine.SEQ_BITS)).astype(np.int32)
            seq = (words & np.uint64(SEQ_MASK)).astype(np.int64)
            t_sent, t_recv = chunk["t_sent"][:rows], chunk["t_recv"][:rows]
            t_intended = intended_times(self.t0_ns, seq, w.rate, t_sent)
            self.latency_intended.record(t_recv - t_intended)
            self.latency_sent.record(t_recv - t_sent)
            for s in np.unique(stream) if stream.min() != stream.max() else stream[:1]:
                seen = self.streams.setdefault(int(s), SeenMap(expected))
                seen.add(seq if stream.min() == stream.max() else seq[stream == s])
            writer.write({"consumer": np.full(rows, self.spec.index, np.int32), "stream": stream,
                          "seq": seq, "t_intended_ns": t_intended, "t_sent_ns": t_sent,
                          "t_recv_ns": t_recv, "size": chunk["size"][:rows]})

        pipeline = ChunkPipeline({"words": np.uint64, "t_sent": np.int64, "t_recv": np.int64,
                                  "size": np.int32}, w.chunk_rows, write_chunk, self.spill_dir())
        warm_mask = (1 << w.producers) - 1
        warm_sent = False
        try:
            while not self.stop_requested and not receiver.terminated:
                now = _engine.now_ns()
                row = receiver.run_slice(pipeline.current["words"], pipeline.current["t_sent"],
                                         pipeline.current["t_recv"], pipeline.current["size"],
                                         pipeline.row, now + w.slice_ms * 1_000_000)
                pipeline.advance(row)
                now = _engine.now_ns()
                if self.t0_ns:
                    self.samples.add(now, receiver.received, 0, *self.kernel_queues(now))
                if not warm_sent and receiver.warmup_mask & warm_mask == warm_mask:
                    self.ctl.send("warm")
                    warm_sent = True
                if self.due_progress(now):
                    self.ctl.send("progress", messages=receiver.received, t_last_recv_ns=receiver.t_last_recv_ns)
                    if not _parent_alive():
                        self.stop_requested = self.interrupted = True
                self.poll_commands()
        finally:
            sock.close(0)
            self.finish_context()
            unconverted = self.close_pipeline(pipeline)
            self.samples.flush()
        self.ctl.send("final", received=receiver.received, warmups=receiver.warmups,
                      foreign=receiver.foreign, errors=receiver.errors,
                      t_first_recv_ns=receiver.t_first_recv_ns, t_last_recv_ns=receiver.t_last_recv_ns,
                      latency_intended=self.latency_intended.to_payload(),
                      latency_sent=self.latency_sent.to_payload(),
                      streams={s: {"unique": m.unique, "duplicates": m.duplicates, "reordered": m.reordered,
                                   "seen_map": np.packbits(m.seen[:m.max_seq + 1]), "length": m.max_seq + 1}
                               for s, m in self.streams.items()},
                      parts=writer.parts, interrupted=self.interrupted, max_rss_kb=_max_rss_kb(),
                      unconverted_rows=unconverted,
                      writer_cpu_s=pipeline.writer_cpu_s)
