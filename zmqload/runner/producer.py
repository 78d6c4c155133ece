"""The producer role: one socket, the open-loop send schedule run slice by slice."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..store.size_files import sizes_of
from .. import _engine
from ..contract import control
from .lifecycle import WorkerLifecycle, max_rss_kb
from .placement import place_this_worker, placed
from .parquet_writer import ChunkPipeline, SendConverter

if TYPE_CHECKING:
    import numpy as np

    from ..contract.workload import Workload

WARMUP_EVERY_MS = 2


class Producer(WorkerLifecycle):
    def run(self) -> None:
        w = self.workload
        if placed(w):  # before the first socket, so libzmq's I/O thread inherits the CPU
            place_this_worker(w, "producer", self.spec.worker.index)
        sndtimeo = (
            None
            if w.send_mode == "dontwait"
            else (min(w.sndtimeo_ms, w.slice_ms) if w.send_mode == "timeout" else w.slice_ms)
        )
        sock = self.open_socket(
            self.pattern.producer_socket,
            {
                "SNDHWM": w.sndhwm,
                "SNDBUF": w.sndbuf,
                "LINGER": w.linger_ms,
                "IMMEDIATE": int(w.immediate) if w.immediate else None,
                "SNDTIMEO": sndtimeo,
                "CONFLATE": 1 if w.conflate in ("producers", "both") else None,
                **w.heartbeats,
            },
            # a DEALER restarted (--restart) comes back under the same routing id, as a user's
            # worker with a fixed identity does
            routing_id=str(self.spec.worker).encode()
            if w.restart and self.pattern.producer_socket == "DEALER"
            else None,
        )
        sizes = sizes_of(w.size, w.payload)
        convert = SendConverter(
            self.spec.run_dir,
            self.spec.name,
            self.spec.worker.index,
            sizes,
            w.rate,
            0,
            w.compression,
            self.pattern.round_trip,
            maps=True,
            parts=w.parts,
            first_seq=self.spec.first_seq,
        )
        chunk_rows = (w.chunk_rows + 7) // 8 * 8  # whole bytes of the packed ok-map per chunk
        # before the start: preparing its spill files takes time (ChunkPipeline)
        pipeline = ChunkPipeline(
            convert.columns(),
            chunk_rows,
            convert,
            self.spill_dir(),
            expected_rows=w.expected_sends_per_producer,
        )
        self.wait_for_start(sock, int(sizes.sizes.min()))
        convert.t0_ns = self.t0_ns
        if self.stop_requested:
            self.ctl.send(control.ProducerDone(self.counters(None)))
            close_ns, term_ns = self.close(sock, None)
            self.close_pipeline(pipeline)
            self.ctl.send(
                control.ProducerFinal(
                    self.counters(None), _empty_map(), close_ns, term_ns, max_rss_kb=max_rss_kb()
                )
            )
            return
        end_ns = self.t0_ns + int(w.duration * 1e9) if w.duration else 0
        round_trip = self.pattern.round_trip
        reply_timeout_ms = w.reply_timeout if round_trip else 0
        if round_trip:  # replies come back on the same socket: let recv return each slice
            sock.set_option(
                _engine.SOCKET_OPTION_IDS["RCVTIMEO"],
                min(w.slice_ms, reply_timeout_ms) if reply_timeout_ms else w.slice_ms,
            )
        if reply_timeout_ms:  # after a timeout the next request may go; a late reply is dropped
            sock.set_option(_engine.SOCKET_OPTION_IDS["REQ_RELAXED"], 1)
            sock.set_option(_engine.SOCKET_OPTION_IDS["REQ_CORRELATE"], 1)
        fixed = sizes.fixed  # the engine's fixed path, else its table (contract/sizes.py)
        sender = _engine.Sender(
            sock,
            self.spec.worker.index,
            int(sizes.sizes[0]),
            w.messages_per_producer,
            w.rate,
            self.t0_ns,
            end_ns,
            w.send_mode,
            w.sndtimeo_ms * 1_000_000,
            round_trip,
            _engine.SPIN_BELOW_NS if w.pacing == "spin" else 0,
            reply_timeout_ms * 1_000_000,
            parts=w.parts,
            sizes=None if fixed else sizes.sizes,
            body=sizes.body,
            key=self.spec.header_key,
            first_seq=self.spec.first_seq,
            **_topic_args(w),
        )
        if not w.rate:
            time.sleep(max(0.0, (self.t0_ns - _engine.now_ns()) / 1e9))
        try:
            while not sender.finished:
                now = _engine.now_ns()
                row = sender.run_slice(
                    pipeline.current["t_sent"],
                    pipeline.current["status"],
                    pipeline.row,
                    now + w.slice_ms * 1_000_000,
                    pipeline.current.get("t_reply"),
                    pipeline.current.get("echoed"),
                )
                pipeline.advance(row)
                now = _engine.now_ns()
                dropped = sender.eagain + sender.timeouts
                sendq, recvq, rss = self.sampled_state(now)
                self.samples.add(now, sender.sent, dropped, sendq, recvq, rss)
                self.tick(
                    now,
                    control.Progress(
                        sender.sent,
                        dropped,
                        attempted=sender.attempted,
                        eagain=sender.eagain,
                        timeouts=sender.timeouts,
                        blocked_sends=sender.blocked_sends,
                        tcp_sendq_bytes=sendq,
                        tcp_recvq_bytes=recvq,
                    ),
                )
                if self.hold_requested:
                    self.hold(pipeline, sender)
                if self.stop_requested:
                    sender.stop()
        finally:
            self.ctl.send(control.ProducerDone(self.counters(sender)))
            self.before_close()
            # a service that stopped answering (or died) holds the REQ's unanswered requests:
            # waiting to deliver them would hold the close for ever, unless --linger says so
            give_up = (
                self.interrupted
                or (reply_timeout_ms > 0 and w.linger_ms is None and sender.unanswered > 0)
                or (self.handshakes is not None and self.handshakes.failed)
            )  # its queue can go nowhere
            close_ns, term_ns = self.close(sock, 0 if give_up else None)
            unconverted = self.close_pipeline(pipeline)
            self.samples.flush()
        self.ctl.send(
            control.ProducerFinal(
                self.counters(sender),
                convert.sent_ok_map(),
                close_ns,
                term_ns,
                convert.sends.parts,
                max_rss_kb(),
                unconverted,
                pipeline.writer_cpu_s,
                convert.rtt.to_payload() if round_trip else None,
                convert.lateness.to_payload(),
                convert.bytes_sent,
            )
        )

    def hold(self, pipeline: ChunkPipeline, sender: _engine.Sender) -> None:
        """--restart: this process is about to end. Nothing more is sent and every row goes to disk
        first, so the records hold exactly what its socket accepted; its new process goes on from
        the seq it did not try. Returns on a Stop (--restart-mode close: the close flushes what the
        socket holds, with the linger) or without a controller; a kill ends it here."""
        pipeline.spill_now()
        self.ctl.send(control.Held(sender.next_seq, sender.sent))
        self.wait_while(lambda: True)

    def before_close(self) -> None:
        """Shutdown semantics: an optional pause after the last send, and with
        close-order consumer-first or after-drain, wait for the controller's Close."""
        w = self.workload
        if self.interrupted:
            return
        if w.close_pause_ms:
            deadline = _engine.now_ns() + w.close_pause_ms * 1_000_000
            self.wait_while(
                lambda: _engine.now_ns() < deadline and not self.interrupted,
                step_ms=max(1, min(50, w.close_pause_ms)),
            )
        if w.close_order in ("consumer-first", "after-drain"):
            self.wait_while(lambda: not self.close_allowed and not self.interrupted)

    def wait_for_start(self, sock: _engine.Socket, size: int) -> None:
        """Send warm-up messages of `size` bytes (if asked) until the start command arrives."""
        warming = False
        topics = self.workload.topic_set
        warm_msg = _engine.warmup_message(
            self.spec.worker.index, size, topics.warmup if topics else b"", self.spec.header_key
        )
        while not self.t0_ns and not self.stop_requested:
            self.check_handshakes()
            message = self.ctl.recv(WARMUP_EVERY_MS if warming else 100)
            if message is not None:
                warming = warming or isinstance(message, control.Warmup)
                self.handle(message)
            elif warming:
                sock.send_bytes(warm_msg, dontwait=True)
            else:
                self.watch_controller()

    def counters(self, sender: _engine.Sender | None) -> control.SendCounters:
        if sender is None:
            return control.SendCounters(interrupted=self.interrupted)
        return control.SendCounters(
            sender.attempted,
            sender.sent,
            sender.eagain,
            sender.timeouts,
            sender.errors,
            sender.last_errno,
            sender.t_first_send_ns,
            sender.t_last_send_ns,
            self.interrupted,
            sender.blocked_sends,
            sender.blocked_ns,
            sender.unanswered,
        )

    def close(self, sock: _engine.Socket, linger_ms: int | None) -> tuple[int, int]:
        """Close with the configured linger (or 0 when interrupted) and time both steps."""
        close_ns = sock.close(linger_ms)
        return close_ns, self.finish_context()


def _topic_args(w: Workload) -> dict[str, Any]:
    """The Sender's topics (contract/topics.py): the pattern's names, slot after slot."""
    topics = w.topic_set
    return {"topics": topics.table(), "topic_width": topics.width} if topics else {}


def _empty_map() -> np.ndarray:
    import numpy as np

    return np.zeros(0, np.uint8)
