"""The consumer role: one socket, received slice by slice, then the drain."""

from __future__ import annotations

from typing import Any

from .. import _engine
from ..contract import control
from ..contract.sizes import message_bytes
from ..store.size_files import sizes_of
from ..measure.histogram import Histogram
from ..contract.wire import SEQ_BITS, SEQ_MASK
from .parquet_writer import ChunkPipeline, ForeignRecorder, RecvConverter
from .lifecycle import WorkerLifecycle, max_rss_kb
from .placement import place_this_worker, placed

LATENCY_EVERY_NS = 1_000_000_000  # --metrics: a consumer's latency histograms sent this often


class Consumer(WorkerLifecycle):
    def run(self) -> None:
        w = self.workload
        if placed(w):  # before the first socket, so libzmq's I/O thread inherits the CPU
            place_this_worker(w, "consumer", self.spec.worker.index)
        # Before the socket: commands (Start, even ProducersDone for a late joiner) may
        # arrive while it connects, and they set the converter's times.
        self.t_drain_ns = 0
        self._next_latency = 0
        # --metrics: latency so far, made here from each slice's rows (the converter's wait for
        # a full chunk: 262,144 rows by default)
        self.live_latency = None if w.metrics is None else (Histogram(), Histogram())
        self.convert = RecvConverter(
            self.spec.run_dir,
            self.spec.name,
            self.spec.worker.index,
            w.rate,
            min(w.messages_per_producer, 1 << 24),
            w.compression,
            maps=True,
        )
        self.convert.t0_ns = self.spec.t0_ns or self.convert.t0_ns  # a restarted one's, at once
        alone = (
            w.topology.consumers_alone
        )  # the producer is the user's: it may send foreign messages
        if alone:
            self.convert.foreign = ForeignRecorder(
                self.spec.run_dir, self.spec.name, self.spec.worker.index, w.compression
            )
        else:  # zmqload's producers: each received size is held to the size rule
            self.convert.expected_sizes = sizes_of(w.size, w.payload)
        sock = self.open_socket(
            self.pattern.consumer_socket,
            {
                "RCVHWM": w.rcvhwm,
                "RCVBUF": w.rcvbuf,
                "LINGER": 0,
                "IMMEDIATE": int(w.immediate) if w.immediate else None,
                "CONFLATE": 1 if w.conflate in ("consumers", "both") else None,
                "ROUTER_HANDOVER": 1 if w.router_handover else None,
                **w.heartbeats,
            },
        )  # the Receiver ends each slice
        topics = w.topic_set
        if topics is not None:  # its topics, and the warm-up's (contract/topics.py)
            mine = topics.subscribed[self.spec.worker.index]
            for prefix in [topics.warmup, *(topics.names[i].encode() for i in mine)]:
                sock.subscribe(prefix)
        elif self.pattern.subscribe:
            sock.subscribe(b"")
        self.receiver = receiver = _engine.Receiver(
            sock,
            w.consumer_delay_ns,
            self.pattern.consumer_envelope_frames(w.topology),
            self.pattern.round_trip,
            record_foreign=alone,
            parts=w.parts,
            topic_width=topics.width if topics else 0,
        )
        self.expect()
        pipeline = ChunkPipeline(
            RecvConverter.COLUMNS,
            w.chunk_rows,
            self.convert,
            self.spill_dir(),
            expected_rows=w.expected_receives_per_consumer,
        )
        warm_mask = (1 << w.producers) - 1
        warm_sent = False
        try:
            latest: dict[int, int] = {}  # stream -> newest seq seen: the live gap count
            while not self.stop_requested and not receiver.terminated:
                now = _engine.now_ns()
                before = pipeline.row
                row = receiver.run_slice(
                    pipeline.current["words"],
                    pipeline.current["t_sent"],
                    pipeline.current["t_recv"],
                    pipeline.current["size"],
                    pipeline.row,
                    now + w.slice_ms * 1_000_000,
                )
                if self.live_latency is not None and row > before:
                    self.convert.live_latency(pipeline.current, before, row, *self.live_latency)
                if row > before:  # one row per slice, not per message: the display's gaps only
                    word = int(pipeline.current["words"][row - 1])
                    stream, seq = word >> SEQ_BITS, word & SEQ_MASK
                    latest[stream] = max(latest.get(stream, -1), seq)
                pipeline.advance(row)
                if self.drain_mode == "fast":
                    receiver.delay_ns = 0
                now = _engine.now_ns()
                sendq, recvq, rss = self.sampled_state(now)
                if self.t0_ns:
                    self.samples.add(now, receiver.received, 0, sendq, recvq, rss)
                if not warm_sent and receiver.warmup_mask & warm_mask == warm_mask:
                    self.ctl.send(control.Warm())
                    warm_sent = True
                if self.hold_requested:
                    self.hold(pipeline)
                    continue
                gaps = max(0, sum(latest.values()) + len(latest) - receiver.received)
                self.tick(
                    now,
                    control.Progress(
                        receiver.received,
                        t_last_recv_ns=receiver.t_last_recv_ns,
                        gaps=gaps,
                        tcp_sendq_bytes=sendq,
                        tcp_recvq_bytes=recvq,
                    ),
                )
        finally:
            sock.close(0)
            self.finish_context()
            unconverted = self.close_pipeline(pipeline)
            self.samples.flush()
        streams = []
        for stream, seen in sorted(self.convert.streams.items()):
            seen_map, drained_map = seen.packed()
            streams.append(
                control.StreamSeen(
                    stream,
                    seen.unique,
                    seen.duplicates,
                    seen.reordered,
                    seen_map,
                    drained_map,
                    seen.beyond,
                )
            )
        self.ctl.send(
            control.ConsumerFinal(
                receiver.received,
                receiver.warmups,
                receiver.foreign,
                receiver.errors,
                receiver.t_first_recv_ns,
                receiver.t_last_recv_ns,
                self.t_drain_ns,
                self.convert.latency_intended.to_payload(),
                self.convert.latency_sent.to_payload(),
                streams,
                self.convert.recvs.parts,
                self.interrupted,
                max_rss_kb(),
                unconverted,
                pipeline.writer_cpu_s,
                self.foreign_seen(),
                receiver.frame_mismatches,
                message_bytes(self.convert.first_frame_bytes, w.parts),
                self.convert.size_mismatches,
                receiver.implausible,
            )
        )

    def hold(self, pipeline: ChunkPipeline) -> None:
        """--restart: this process is about to be killed. Every row received goes to disk first and
        nothing more is received, so the records hold exactly what the process took from libzmq;
        what libzmq and the kernel still queue for it dies with it (`dropped_restart`). Returns
        only on a Stop (an interrupted run) or without a controller."""
        pipeline.spill_now()
        self.ctl.send(control.Held())
        self.wait_while(lambda: True)

    def more_progress(self, now: int) -> dict[str, Any]:
        """With --metrics, the latency histograms so far, at most once a second."""
        if self.live_latency is None or now < self._next_latency:
            return {}
        self._next_latency = now + LATENCY_EVERY_NS
        intended, sent = self.live_latency
        return {"latency_intended": intended.to_payload(), "latency_sent": sent.to_payload()}

    def expect(self) -> None:
        """Tell the receiver what a message of this run is (zl_wire.h zl_classify): the run's key and
        producers, and once the start says t0, the pace of zmqload's producers from t0. Producers
        of the user's (--role consumer, a consumer half) are held to the loosest bounds."""
        w = self.workload
        if w.topology.consumers_alone:
            self.receiver.expect(0)
        else:
            self.receiver.expect(self.spec.header_key, w.producers, self.convert.t0_ns, w.rate)

    def foreign_seen(self) -> control.ForeignSeen | None:
        foreign = self.convert.foreign
        if foreign is None:
            return None
        return control.ForeignSeen(
            foreign.bytes, foreign.t_first_ns, foreign.t_last_ns, foreign.gaps.to_payload()
        )

    def on_command(self, message: control.Message) -> None:
        if isinstance(message, control.Start):
            self.convert.t0_ns = message.t0_ns
            if hasattr(self, "receiver"):
                self.expect()
        elif isinstance(message, control.ProducersDone):
            # From here on, what arrives was still queued when the producers finished.
            self.t_drain_ns = _engine.now_ns()
            self.convert.t_drain_ns = self.t_drain_ns
            self.ctl.send(control.Draining())
            if message.drain == "fast" and hasattr(self, "receiver"):
                self.receiver.delay_ns = 0  # before the next slice, not after it
            if message.drain == "none":
                self.stop_requested = True
