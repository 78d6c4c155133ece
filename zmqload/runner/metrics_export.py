"""--metrics HOST:PORT: a run's figures for Prometheus (prometheus-client), live from the progress
the controller receives for the display, then run.json's totals for --metrics-linger: Prometheus
stamps a value when it scrapes, so one gone before the last scrape would lose them."""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Optional

import numpy as np
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from ..contract import control
from ..contract.fates import FATES
from ..contract.workload import OPTIONS, Workload
from ..errors import ConfigError
from ..measure.histogram import Histogram, bucket_index
from ..measure.queue_depth import frame_bytes
from ..store.size_files import sizes_of
from .state import ProgressListener, ProgressSnapshot, disk_used
from .parquet_writer import free_bytes

if TYPE_CHECKING:
    from ..measure.result import RunResult

PREFIX = "zmqload"
BUCKET_BOUNDS_NS = tuple(((4 + j) << (k - 2)) - 1 for k in range(10, 37) for j in range(4))
"""The latency histogram's `le` bounds: 2^k x (1, 1.25, 1.5, 1.75) - 1 ns, 1 us to 120 s. Each
starts one of the run's log-linear buckets (contract/histogram.py) but for the - 1, so a bound's
count is exact; Prometheus's histogram_quantile interpolates within a quarter of an octave."""
_FIRST_ABOVE = bucket_index(np.array(BUCKET_BOUNDS_NS) + 1).tolist()  # where each 2^k begins
assert (bucket_index(np.array(BUCKET_BOUNDS_NS)) < _FIRST_ABOVE).all()  # so the bounds are exact
RATE_WINDOW_S = 1.0  # the reached rates: messages over the last second or so, as the display
ROLES = {"p": "producer", "c": "consumer", "x": "proxy"}


def bucket_counts(hist: Histogram) -> list[tuple[str, float]]:
    """Cumulative (le, count) pairs of `hist` at BUCKET_BOUNDS_NS (in seconds), then +Inf: a bound
    2^k - 1 is the last value of the bucket before the one 2^k begins."""
    cumulative = hist.counts.cumsum()
    out = []
    for bound, first in zip(BUCKET_BOUNDS_NS, _FIRST_ABOVE):
        out.append((_seconds(bound), float(cumulative[first - 1])))
    out.append(("+Inf", float(cumulative[-1])))
    return out


def _seconds(ns: int) -> str:
    return repr(ns / 1e9)


class RunMetrics:
    """One run's series: updated by the controller's thread (a snapshot reference, swapped whole),
    read by the HTTP server's thread at each scrape."""

    def __init__(self, w: Workload):
        self.w = w
        # as the run's own split is made (runner/collect.py)
        self.frame = frame_bytes(round(sizes_of(w.size, w.payload).mean))
        self.snapshot: Optional[ProgressSnapshot] = None
        self.result: Optional[RunResult] = None
        self.disk: tuple[int, int] = (-1, -1)  # written, free: measured once the run ended
        self._rates: deque[tuple[float, int, int]] = deque()  # (time, sent, received)
        self.rates = (0.0, 0.0)  # sent, received per second over the last second

    def update(self, snapshot: ProgressSnapshot) -> None:
        now = time.monotonic()
        self._rates.append((now, snapshot.sent, snapshot.received))
        while len(self._rates) > 2 and now - self._rates[1][0] >= RATE_WINDOW_S:
            self._rates.popleft()
        then, sent, received = self._rates[0]
        if now - then >= RATE_WINDOW_S / 2:
            self.rates = (
                (snapshot.sent - sent) / (now - then),
                (snapshot.received - received) / (now - then),
            )
        self.snapshot = snapshot

    def finish(self, result: RunResult) -> None:
        """run.json's figures from now on (the totals after the last send)."""
        if os.path.isdir(result.run_dir):  # not a URI's (--out s3://...)
            self.disk = (disk_used(result.run_dir), free_bytes(result.run_dir))
        self.result = result

    # -- the series, built at each scrape ------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        snap, result = self.snapshot, self.result
        if snap is None:
            return
        run = snap.run_id
        yield from self._workers(run, snap, result)
        yield from self._run(run, snap, result)
        if result is not None:
            yield from self._streams(run, result)

    def _workers(
        self, run: str, snap: ProgressSnapshot, result: Optional[RunResult]
    ) -> Iterator[Metric]:
        labels = ["run", "role", "worker"]
        live: dict[str, control.Progress] = dict(snap.workers)
        final_p = {f"p{p.worker}": p for p in result.producers} if result else {}
        final_c = {f"c{c.worker}": c for c in result.consumers} if result else {}
        producers = sorted(set(final_p) | {n for n in live if n[0] == "p"})
        consumers = sorted(set(final_c) | {n for n in live if n[0] == "c"})

        def counter(name: str, doc: str, unit: str = "") -> CounterMetricFamily:
            return CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=labels, unit=unit)

        families = {
            "attempted": counter("attempted_messages", "Sends attempted so far"),
            "sent": counter("sent_messages", "Messages the producer's socket accepted so far"),
            "eagain": counter("eagain_messages", "Sends refused with EAGAIN (a full socket)"),
            "timeout": counter("timeout_messages", "Sends refused after --sndtimeo-ms"),
            "blocked_sends": counter("blocked_sends", "Sends that found the socket full"),
        }
        live_names = {"attempted": "attempted", "sent": "messages", "eagain": "eagain"}
        live_names.update(timeout="timeouts", blocked_sends="blocked_sends")
        for name in producers:
            values = (
                {key: getattr(final_p[name], key) for key in families}
                if name in final_p
                else {key: getattr(live[name], field) for key, field in live_names.items()}
            )
            for key, family in families.items():
                family.add_metric([run, "producer", name], values[key])
        yield from families.values()
        received = counter(
            "received_messages", "Messages the consumer received so far (copies too)"
        )
        gaps = GaugeMetricFamily(
            f"{PREFIX}_gap_messages",
            "Seqs the consumer skipped so far (a live estimate)",
            labels=labels,
        )
        for name in consumers:
            if name in final_c:
                received.add_metric([run, "consumer", name], final_c[name].received)
            else:
                received.add_metric([run, "consumer", name], live[name].messages)
            if name in live:
                gaps.add_metric([run, "consumer", name], live[name].gaps)
        yield received
        yield gaps
        if result is not None:
            sent_bytes = counter("sent", "Bytes of the messages accepted, every frame", "bytes")
            for p in result.producers:
                sent_bytes.add_metric([run, "producer", f"p{p.worker}"], p.bytes_sent)
            received_bytes = counter("received", "Bytes of the messages received", "bytes")
            for c in result.consumers:
                received_bytes.add_metric([run, "consumer", f"c{c.worker}"], c.bytes_received)
            peak = GaugeMetricFamily(
                f"{PREFIX}_peak_rss", "A worker's peak resident memory", labels=labels, unit="bytes"
            )
            for role, entries in (("producer", result.producers), ("consumer", result.consumers)):
                for e in entries:
                    peak.add_metric([run, role, f"{role[0]}{e.worker}"], e.max_rss_kb * 1024)
            yield from (sent_bytes, received_bytes, peak)
        rss = GaugeMetricFamily(
            f"{PREFIX}_rss", "Resident memory (VmRSS) now", labels=labels, unit="bytes"
        )
        queues = GaugeMetricFamily(
            f"{PREFIX}_kernel_queue",
            "The kernel's tcp queues of the worker's connections (send: not acknowledged, "
            "receive: not read)",
            labels=[*labels, "direction"],
            unit="bytes",
        )
        for name, progress in sorted(live.items()):
            role = ROLES.get(name[0], name)
            if progress.rss_kb >= 0:
                rss.add_metric([run, role, name], progress.rss_kb * 1024)
            for direction, value in (
                ("send", progress.tcp_sendq_bytes),
                ("receive", progress.tcp_recvq_bytes),
            ):
                if value >= 0:
                    queues.add_metric([run, role, name, direction], value)
        if snap.controller_rss_kb >= 0:
            rss.add_metric([run, "controller", "controller"], snap.controller_rss_kb * 1024)
        yield from (rss, queues)

    def _run(
        self, run: str, snap: ProgressSnapshot, result: Optional[RunResult]
    ) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            f"{PREFIX}_run_info",
            "The run: its pattern, transport and phase (starting, running, draining, closing, "
            "stopping, then its status)",
            labels=["run", "pattern", "transport", "phase"],
        )
        phase = result.status if result is not None else snap.phase
        info.add_metric([run, snap.pattern, snap.transport, phase], 1)
        yield info
        yield _gauge("elapsed", "Since the run was launched", run, snap.elapsed_s, "seconds")
        queue = GaugeMetricFamily(
            f"{PREFIX}_queue",
            "Messages accepted and neither received nor skipped yet, where they wait (kernel: the "
            "tcp queues' bytes in whole messages, libzmq: the rest)",
            labels=["run", "place"],
            unit="messages",
        )
        kernel, libzmq = self.queue(snap)
        queue.add_metric([run, "kernel"], kernel)
        queue.add_metric([run, "libzmq"], libzmq)
        yield queue
        if self.w.rate:
            yield _gauge(
                "offered_rate",
                "The open-loop schedule's rate, all producers (messages per second)",
                run,
                self.w.rate * self.w.producer_workers,
                "messages_per_second",
            )
        reached = GaugeMetricFamily(
            f"{PREFIX}_reached_rate",
            "Messages per second over the last second; once the run ended, its send_rate and "
            "throughput_msgs",
            labels=["run", "side"],
            unit="messages_per_second",
        )
        sent_rate, received_rate = (
            self.rates if result is None else (result.send_rate, result.throughput_msgs)
        )
        reached.add_metric([run, "sent"], sent_rate)
        reached.add_metric([run, "received"], received_rate)
        yield reached
        written, free = (snap.disk_bytes, snap.disk_free_bytes) if result is None else self.disk
        if written >= 0:
            yield _gauge(
                "disk_written", "What the run directory holds on disk", run, written, "bytes"
            )
        if free >= 0:
            yield _gauge(
                "disk_free", "What the run directory's file system has left", run, free, "bytes"
            )
        yield from self._latency(run, snap, result)
        if result is not None:
            peak = result.queue_peak_figures()
            if peak:
                family = GaugeMetricFamily(
                    f"{PREFIX}_queue_peak",
                    "The run's queue peak from its records (run.json summary.queue_peak)",
                    labels=["run", "place"],
                    unit="messages",
                )
                for place, key in (
                    ("all", "messages"),
                    ("kernel", "kernel_messages"),
                    ("libzmq", "libzmq_messages"),
                ):
                    family.add_metric([run, place], peak[key])
                yield family

    def queue(self, snap: ProgressSnapshot) -> tuple[int, int]:
        """The live queue depth split as measure/queue_depth.py splits the run's: the kernel's
        bytes on the message path (senders' send queues, receivers' receive queues) in whole
        messages, at most the depth; libzmq's pipes the rest."""
        total = snap.in_flight
        kernel_bytes = 0
        for name, progress in snap.workers.items():
            if name[0] in "px":
                kernel_bytes += max(progress.tcp_sendq_bytes, 0)
            if name[0] in "cx":
                kernel_bytes += max(progress.tcp_recvq_bytes, 0)
        kernel = min(kernel_bytes // self.frame, total)
        return kernel, total - kernel

    def _latency(
        self, run: str, snap: ProgressSnapshot, result: Optional[RunResult]
    ) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            f"{PREFIX}_latency",
            "Receive time minus intended (open-loop schedule) or actual send time; the run's "
            "log-linear histogram at bounds of 2^k - 1 ns, exact",
            labels=["run", "since"],
            unit="seconds",
        )
        for since in ("intended", "sent"):
            hist = self._histogram(snap, result, since)
            if hist is not None and hist.count:
                family.add_metric([run, since], bucket_counts(hist), sum_value=hist.total / 1e9)
        yield family

    @staticmethod
    def _histogram(
        snap: ProgressSnapshot, result: Optional[RunResult], since: str
    ) -> Optional[Histogram]:
        if result is not None:
            return result.latency_intended if since == "intended" else result.latency_sent
        payloads = [getattr(p, f"latency_{since}") for p in snap.workers.values()]
        merged = None
        for payload in payloads:
            if payload is not None:
                hist = Histogram.from_payload(payload)
                if merged is None:
                    merged = hist
                else:
                    merged.merge(hist)
        return merged

    def _streams(self, run: str, result: RunResult) -> Iterator[Metric]:
        labels = ["run", "stream"]
        fates = CounterMetricFamily(
            f"{PREFIX}_fate_messages",
            "Every expected message's fate, reconciled from the records once the run ended "
            "(their sum is expected)",
            labels=[*labels, "fate"],
        )
        others = {
            name: CounterMetricFamily(f"{PREFIX}_{name}_messages", doc, labels=labels)
            for name, doc in (
                ("expected", "Deliveries expected: sent, times the consumers with fan-out"),
                ("lost", "Expected messages no consumer received"),
                ("duplicates", "Deliveries of a message already received"),
                ("reordered", "Messages that came after a higher seq of their stream"),
            )
        }
        for stream in result.streams:
            where = [run, str(stream.stream)]
            for fate in FATES:
                fates.add_metric([*where, fate], getattr(stream, fate))
            for name, family in others.items():
                family.add_metric(where, getattr(stream, name))
        yield fates
        yield from others.values()


def _gauge(name: str, doc: str, run: str, value: float, unit: str = "") -> GaugeMetricFamily:
    family = GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["run"], unit=unit)
    family.add_metric([run], value)
    return family


class MetricsExporter:
    """--metrics: the HTTP endpoint and the run it serves, a progress listener beside the run's own
    (`inner`: the live display, a sweep's bar), fed on the controller's thread, read on the
    server's."""

    def __init__(self, w: Workload, inner: Optional[ProgressListener] = None):
        assert w.metrics is not None
        self.address, self.linger_s, self.inner = w.metrics, w.metrics_linger, inner
        self.metrics = RunMetrics(w)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)  # a collector: collect() is enough
        host, port = self.address.rsplit(":", 1)
        try:
            self.server, self.thread = start_http_server(int(port), host.strip("[]"), registry)
        except (OSError, UnicodeError) as exc:
            why = getattr(exc, "strerror", None) or str(exc)
            raise ConfigError(
                OPTIONS["metrics"].flag,
                f"got {self.address!r}: cannot listen there ({why}); accepted: "
                f"{OPTIONS['metrics'].accepts}, a free port of an address of this host's",
            ) from None

    @classmethod
    def open(cls, w: Workload, inner: Optional[ProgressListener]) -> Optional["MetricsExporter"]:
        """The exporter of `w`, listening; None without --metrics."""
        return None if w.metrics is None else cls(w, inner)

    def collect(self) -> Iterator[Metric]:
        return self.metrics.collect()

    # -- ProgressListener ----------------------------------------------------------------------
    def start(self, snapshot: ProgressSnapshot) -> None:
        self.metrics.update(snapshot)
        if self.inner is not None:
            self.inner.start(snapshot)

    def update(self, snapshot: ProgressSnapshot) -> None:
        self.metrics.update(snapshot)
        if self.inner is not None:
            self.inner.update(snapshot)

    def stop(self) -> None:
        if self.inner is not None:
            self.inner.stop()

    # -- after the run ---------------------------------------------------------------------------
    def finish(self, result: Optional[RunResult]) -> None:
        """Serve `result`'s figures (run.json's) for --metrics-linger, then close; a run without
        figures (interrupted) closes at once. Ctrl-C in the linger ends it."""
        try:
            if result is not None:
                self.metrics.finish(result)
                time.sleep(self.linger_s)
        except KeyboardInterrupt:
            pass
        finally:
            self.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5.0)
