"""The controller: starts the workers, steers them through a run, reconciles the counts.

Phases: launch (binders report their endpoints, connecters get them) -> warm-up (every
consumer hears every producer, so nothing is lost to slow joining unless asked) -> start
(a common t0 for the open-loop schedule) -> run -> drain (consumers stop once everything
sent has arrived or after an idle timeout) -> reconcile and write run.json.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import multiprocessing
import os
import secrets
import shutil
import signal
import threading
import time

from . import _engine, patterns
from .accounting import reconcile
from .config import Workload, check_output_dir
from .control import ControlServer, new_endpoint
from .errors import ConfigError, RunError
from .histogram import Histogram
from .recorder import SCHEMA_VERSION, write_json_atomic
from .result import RunResult
from .versions import clock_pair, host, versions
from .worker import WorkerSpec, process_entry, run_worker

LAUNCH_TIMEOUT_S = 60.0
WARMUP_TIMEOUT_S = 15.0
FINAL_TIMEOUT_S = 30.0
INTERRUPT_GRACE_S = 0.8
START_MARGIN_NS = 30_000_000


class _WorkerFailed(Exception):
    def __init__(self, name: str, message: dict):
        self.name, self.message = name, message
        super().__init__(f"{name}: {message.get('message')}")


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def new_run_id(w: Workload) -> str:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return w.run_name or f"{stamp}-{w.pattern}-{w.transport}-{secrets.token_hex(2)}"


def binder_endpoints(w: Workload, count: int, ipc_dir: str, run_id: str) -> list[str]:
    """Endpoints the binding side binds: explicit --endpoint, or one per binder."""
    if w.endpoint:
        base = w.endpoint
        if w.transport == "tcp":
            host_part, _, port = base.rpartition(":")
            if port in ("*", "0"):
                return [f"{host_part}:*"] * count
            return [f"{host_part}:{int(port) + i}" for i in range(count)]
        return [base if i == 0 else f"{base}-{i}" for i in range(count)]
    if w.transport == "tcp":
        host_part = f"[{w.host}]" if ":" in w.host else w.host
        return [f"tcp://{host_part}:{w.port + i}" if w.port else f"tcp://{host_part}:*" for i in range(count)]
    if w.transport == "ipc":
        return [f"ipc://{os.path.join(ipc_dir, f'data-{i}')}" for i in range(count)]
    return [f"inproc://zmqload-{run_id}-{i}" for i in range(count)]


@contextlib.contextmanager
def _worker_environment():
    """Environment for spawned workers only: numpy's OpenBLAS threads would spin on a small
    machine and steal cycles from the send and receive loops (zmqload does no linear algebra)."""
    saved = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["OPENBLAS_NUM_THREADS"]
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = saved


class _Launcher:
    """Workers as processes (tcp, ipc) or threads sharing one engine context (inproc)."""

    def __init__(self, threads: bool, io_threads: int):
        self.threads = threads
        self.context = _engine.Context(io_threads) if threads else None
        self.workers: dict[str, object] = {}
        self._mp = multiprocessing.get_context("spawn")

    def start(self, spec: WorkerSpec) -> None:
        if self.threads:
            worker = threading.Thread(target=run_worker, args=(spec, self.context), name=spec.name, daemon=True)
        else:
            worker = self._mp.Process(target=process_entry, args=(spec,), name=f"zmqload-{spec.name}", daemon=True)
        with _worker_environment():
            worker.start()
        self.workers[spec.name] = worker

    def dead(self, names) -> list[str]:
        """Workers among `names` that ended (or crashed) without a word."""
        return [n for n in names if not self.workers[n].is_alive()]

    def exit_code(self, name: str):
        return getattr(self.workers[name], "exitcode", None)

    def finish(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for worker in self.workers.values():
            worker.join(max(0.0, deadline - time.monotonic()))
        for worker in self.workers.values():
            if worker.is_alive() and not self.threads:
                worker.terminate()
                worker.join(1.0)
        if self.context is not None and not any(w.is_alive() for w in self.workers.values()):
            self.context.term()


class _Run:
    def __init__(self, w: Workload, run_dir: str, run_id: str, progress):
        self.w = w
        self.pattern = patterns.get(w.pattern)
        self.run_dir = run_dir
        self.run_id = run_id
        self.progress = progress
        self.ready: dict[str, object] = {}
        self.connected: set[str] = set()
        self.warm: set[str] = set()
        self.live: dict[str, dict] = {}
        self.done: dict[str, dict] = {}
        self.final: dict[str, dict] = {}
        self.errors: dict[str, dict] = {}
        self.producers = [f"p{i}" for i in range(w.producers)]
        self.consumers = [f"c{i}" for i in range(w.consumers)]
        self.proxies: list[str] = []
        self.t0_ns = 0
        self.interrupted = False

    # -- the control loop --------------------------------------------------------------
    def pump(self, timeout_ms: int = 20) -> None:
        item = self.server.recv(timeout_ms)
        while item is not None:
            name, message = item
            kind = message["type"]
            if kind == "ready":
                self.ready[name] = message["endpoint"]
            elif kind == "connected":
                self.connected.add(name)
            elif kind == "warm":
                self.warm.add(name)
            elif kind == "progress":
                self.live[name] = message
            elif kind == "done":
                self.done[name] = message
            elif kind == "final":
                self.final[name] = message
            elif kind == "error":
                self.errors[name] = message
                raise _WorkerFailed(name, message)
            item = self.server.recv(0)
        if self.progress is not None:
            self.progress.update(self)

    def wait(self, condition, timeout_s: float, what: str, watch=()) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            self.pump()
            if condition():
                return
            dead = [n for n in self.launcher.dead(watch) if n not in self.final]
            if dead:
                self.pump(0)
                raise RunError(f"worker {dead[0]} exited (code {self.launcher.exit_code(dead[0])}) while {what}")
            if time.monotonic() > deadline:
                raise RunError(f"timed out after {timeout_s:g} s {what}")

    def send_all(self, names, message: dict) -> None:
        for name in names:
            self.server.send(name, message)

    # -- phases ----------------------------------------------------------------------------
    def execute(self) -> None:
        w = self.w
        everyone = self.producers + self.consumers
        if self.pattern.proxy:
            self.launch_proxy()
            binders, connect_to = [], {"producer": [self.proxy_endpoints["frontend"]],
                                       "consumer": [self.proxy_endpoints["backend"]]}
        else:
            binders = self.consumers if self.pattern.binder == "consumer" else self.producers
        endpoints = binder_endpoints(w, len(binders), self.ipc_dir, self.run_id)
        for name in everyone:
            role = "producer" if name[0] == "p" else "consumer"
            bind = endpoints[binders.index(name)] if name in binders else None
            self.launcher.start(WorkerSpec(role, int(name[1:]), w.to_dict(), self.server.endpoint,
                                           self.run_dir, bind=bind))
        self.wait(lambda: all(n in self.ready for n in everyone), LAUNCH_TIMEOUT_S,
                  "waiting for the workers to start", everyone + self.proxies)
        connecters = [n for n in everyone if n not in binders]
        if not self.pattern.proxy:
            connect_to = {"producer": [self.ready[n] for n in binders], "consumer": [self.ready[n] for n in binders]}
        late = self.consumers if w.join_delay_ms else []     # slow joiners connect after the start
        for name in connecters:
            if name not in late:
                role = "producer" if name[0] == "p" else "consumer"
                self.server.send(name, {"type": "connect", "endpoints": connect_to[role]})
        self.wait(lambda: all(n in self.connected for n in connecters if n not in late), LAUNCH_TIMEOUT_S,
                  "waiting for the workers to connect", everyone + self.proxies)
        if late:
            self.t0_ns = _engine.now_ns() + START_MARGIN_NS
            self.send_all(self.producers, {"type": "start", "t0_ns": self.t0_ns})
            join_at = self.t0_ns + w.join_delay_ms * 1_000_000
            while _engine.now_ns() < join_at:
                self.pump(max(1, min(20, (join_at - _engine.now_ns()) // 1_000_000)))
            for name in late:
                self.server.send(name, {"type": "connect", "endpoints": connect_to["consumer"]})
                self.server.send(name, {"type": "start", "t0_ns": self.t0_ns})
        # Round trips need no warm-up (nothing can be lost to a slow join: every request
        # waits for its reply), and REQ's strict send/recv alternation forbids one.
        if w.warmup and not self.pattern.round_trip and not late:
            self.send_all(self.producers, {"type": "warmup"})
            self.wait(lambda: all(n in self.warm for n in self.consumers), WARMUP_TIMEOUT_S,
                      "waiting for every consumer to hear every producer (warm-up)", everyone + self.proxies)
        if not late:
            self.t0_ns = _engine.now_ns() + START_MARGIN_NS
            self.send_all(self.consumers, {"type": "start", "t0_ns": self.t0_ns})
            self.send_all(self.producers, {"type": "start", "t0_ns": self.t0_ns})
        self.wait(lambda: all(n in self.done for n in self.producers), float("inf"),
                  "waiting for the producers to finish", everyone + self.proxies)
        if w.close_order == "consumer-first":
            # the receivers close first; then the producers close with their linger
            self.send_all(self.consumers, {"type": "stop"})
            self.wait(lambda: all(n in self.final for n in self.consumers), FINAL_TIMEOUT_S,
                      "waiting for the consumers to close", everyone + self.proxies)
            self.send_all(self.producers, {"type": "close"})
        else:
            self.drain()
            self.send_all(self.consumers, {"type": "stop"})
        self.wait(lambda: all(n in self.final for n in everyone), float("inf") if w.linger_ms == -1 else
                  FINAL_TIMEOUT_S + max(0, (w.linger_ms or 0) / 1000) + w.close_pause_ms / 1000,
                  "waiting for the final counters", everyone + self.proxies)
        self.send_all(self.proxies, {"type": "stop"})
        self.wait(lambda: all(n in self.final for n in self.proxies), FINAL_TIMEOUT_S,
                  "waiting for the proxy to stop", self.proxies)

    def launch_proxy(self) -> None:
        w = self.w
        if w.endpoint:
            raise ConfigError("--endpoint", "pattern proxy picks its own two endpoints; accepted: --host/--port")
        front, back = binder_endpoints(w, 2, self.ipc_dir, self.run_id)
        self.proxies = ["x0"]
        self.launcher.start(WorkerSpec("proxy", 0, w.to_dict(), self.server.endpoint, self.run_dir,
                                       bind=[front, back]))
        self.wait(lambda: "x0" in self.ready, LAUNCH_TIMEOUT_S, "waiting for the proxy to start", self.proxies)
        self.proxy_endpoints = self.ready["x0"]

    def delivered_so_far(self) -> int:
        return sum(self.live.get(n, {}).get("messages", 0) for n in self.consumers)

    def drain(self) -> None:
        """Wait until everything sent has arrived, or nothing arrived for drain_timeout_ms."""
        sent = sum(self.done[n]["sent"] for n in self.producers)
        expected = sent * (len(self.consumers) if self.pattern.fanout else 1)
        idle_ns = self.w.drain_timeout_ms * 1_000_000
        last_count, last_change = -1, _engine.now_ns()
        while True:
            self.pump()
            count = self.delivered_so_far()
            now = _engine.now_ns()
            if count >= expected:
                return
            if count != last_count:
                last_count, last_change = count, now
            elif now - last_change >= idle_ns:
                return

    def interrupt(self) -> None:
        """Ctrl-C / SIGTERM: tell every worker to stop, collect what they recorded."""
        self.interrupted = True
        everyone = self.producers + self.consumers + self.proxies
        self.send_all(everyone, {"type": "stop", "interrupted": True})
        deadline = time.monotonic() + INTERRUPT_GRACE_S
        while time.monotonic() < deadline and not all(n in self.final or n in self.errors for n in everyone):
            try:
                self.pump()
            except _WorkerFailed:
                pass
            if len(self.launcher.dead(everyone)) == len(everyone):
                self.pump(0)
                break


def sigterm_as_interrupt():
    """Treat SIGTERM like Ctrl-C while a run is in progress (main thread only).
    Returns the previous handler for the caller to restore, or None off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise KeyboardInterrupt
    return signal.signal(signal.SIGTERM, handler)


def run(workload: Workload, progress=None) -> RunResult:
    """Carry out one run. Raises ConfigError for bad options (before anything starts),
    RunError when the run fails, KeyboardInterrupt after an interrupted run was recorded."""
    w = workload.validate()
    check_output_dir(w.out)
    run_id = new_run_id(w)
    run_dir = os.path.join(w.out, f"run={run_id}")
    try:
        os.makedirs(run_dir)
    except FileExistsError:
        raise ConfigError("--run-name", f"{run_dir} already exists; accepted: a new run name")
    except OSError as exc:
        raise ConfigError("--out", f"cannot create {run_dir} ({exc.strerror}); accepted: a writable directory")
    meta = {
        "schema_version": SCHEMA_VERSION, "run_id": run_id, "status": "running", "error": None,
        "workload": w.to_dict(), "pattern": {"fanout": w.fanout, "binder": patterns.get(w.pattern).binder},
        "versions": versions(), "host": host(), "clock": clock_pair(), "started_at": _utc_now(),
    }
    meta_path = os.path.join(run_dir, "run.json")
    write_json_atomic(meta_path, meta)

    control_endpoint, control_dir = new_endpoint()
    state = _Run(w, run_dir, run_id, progress)
    state.server = ControlServer(control_endpoint)
    state.ipc_dir = control_dir
    state.launcher = _Launcher(threads=(w.transport == "inproc"), io_threads=w.io_threads)
    previous_sigterm = sigterm_as_interrupt()
    status, error, pending = "complete", None, None
    try:
        if progress is not None:
            progress.start(state)
        state.execute()
    except KeyboardInterrupt as exc:
        status, pending = "interrupted", exc
        state.interrupt()
    except _WorkerFailed as exc:
        status, error = "failed", exc.message.get("message")
        state.interrupt()
        pending = _worker_error(w, exc)
    except RunError as exc:
        status, error, pending = "failed", str(exc), exc
        state.interrupt()
    finally:
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
        if progress is not None:
            progress.stop()
        state.launcher.finish(timeout=2.0 if status != "complete" else FINAL_TIMEOUT_S)
        state.server.close()
        shutil.rmtree(control_dir, ignore_errors=True)

    result = _result(state, status, meta)
    meta.update({"status": status, "error": error, "finished_at": _utc_now(),
                 "schedule": {"t0_ns": state.t0_ns, "rate_per_producer": w.rate, "fanout": w.fanout},
                 "producers": result.producers, "consumers": result.consumers,
                 "counters": {k: v for k, v in result.summary().items()
                              if k in ("attempted", "sent", "eagain", "timeout", "errors", "expected",
                                       "received", "unique_received", "duplicates", "reordered", "lost")},
                 "streams": result.streams,
                 "summary": {k: v for k, v in result.summary().items()
                             if k in ("elapsed_s", "send_rate", "throughput_msgs", "throughput_mb",
                                      "loss_ratio", "latency_intended_ns", "latency_sent_ns", "round_trip_ns")}})
    write_json_atomic(meta_path, meta)
    if pending is not None:
        raise pending
    return result


def _worker_error(w: Workload, exc: _WorkerFailed) -> Exception:
    """Turn a worker's failure into the user's terms (a bind conflict is bad input)."""
    message = exc.message.get("message", "")
    if exc.message.get("errno") == errno.EADDRINUSE or "Address already in use" in message:
        option = "--endpoint" if w.endpoint else "--port"
        return ConfigError(option, f"address already in use ({message.split(': ', 1)[-1]}); accepted: a free address")
    if exc.message.get("errno") in (errno.ENOENT, errno.EACCES, errno.EINVAL) and w.endpoint:
        return ConfigError("--endpoint", f"cannot use {w.endpoint!r} ({message}); accepted: a bindable endpoint")
    return RunError(f"worker {exc.name} failed: {message}")


def _result(state: _Run, status: str, meta: dict) -> RunResult:
    w = state.w
    producers, consumers = {}, {}
    for name in state.producers:
        report = state.final.get(name) or state.done.get(name)
        if report is not None:
            producers[int(name[1:])] = dict(report, worker=int(name[1:]))
            producers[int(name[1:])].setdefault("sent_ok_map", None)
    for name in state.consumers:
        if name in state.final:
            consumers[int(name[1:])] = dict(state.final[name], worker=int(name[1:]))
    import numpy as np
    usable = {k: v for k, v in producers.items() if v["sent_ok_map"] is not None}
    for p in producers.values():
        if p["sent_ok_map"] is None:     # no final: nothing known beyond the done counters
            p["sent_ok_map"] = np.zeros(0, np.uint8)
    accounts = reconcile(producers if usable or not producers else {}, consumers, w.fanout)
    totals = accounts["totals"]
    lat_i, lat_s, rtt = Histogram(), Histogram(), Histogram()
    for p in producers.values():
        if p.get("rtt"):
            rtt.merge(Histogram.from_payload(p["rtt"]))
    for c in consumers.values():
        lat_i.merge(Histogram.from_payload(c["latency_intended"]))
        lat_s.merge(Histogram.from_payload(c["latency_sent"]))
    first_send = min((p.get("t_first_send_ns") or 0 for p in producers.values() if p.get("t_first_send_ns")), default=0)
    last_send = max((p.get("t_last_send_ns") or 0 for p in producers.values()), default=0)
    last_recv = max((c.get("t_last_recv_ns") or 0 for c in consumers.values()), default=0)
    elapsed = (last_recv - first_send) / 1e9 if first_send and last_recv > first_send else 0.0
    send_span = (last_send - first_send) / 1e9 if first_send and last_send > first_send else 0.0
    attempted = sum(p.get("attempted", 0) for p in producers.values())
    unique = totals["unique_received"]
    result = RunResult(
        run_id=state.run_id, run_dir=state.run_dir, status=status, workload=w.to_dict(),
        attempted=attempted, sent=sum(p.get("sent", 0) for p in producers.values()),
        eagain=sum(p.get("eagain", 0) for p in producers.values()),
        timeout=sum(p.get("timeout", 0) for p in producers.values()),
        errors=sum(p.get("errors", 0) for p in producers.values()),
        expected=totals["expected"], received=sum(c.get("received", 0) for c in consumers.values()),
        unique_received=unique, duplicates=totals["duplicates"], reordered=totals["reordered"],
        lost=totals["lost"], elapsed_s=elapsed,
        send_rate=attempted / send_span if send_span else 0.0,
        throughput_msgs=unique / elapsed if elapsed else 0.0,
        throughput_mb=unique * w.size / 1e6 / elapsed if elapsed else 0.0,
        latency_intended=lat_i, latency_sent=lat_s, streams=accounts["streams"],
        round_trip=rtt,
        producers=[{k: v for k, v in p.items() if k not in ("sent_ok_map", "type", "rtt")} for p in producers.values()],
        consumers=[{k: v for k, v in c.items() if k not in ("streams", "type", "latency_intended", "latency_sent")}
                   for c in consumers.values()],
        versions=meta["versions"])
    return result
