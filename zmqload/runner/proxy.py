"""The proxy role of the `proxy` pattern: XSUB (producers connect) | zmq_proxy | XPUB
(consumers connect), on the engine's libzmq, its HWMs set apart from the ends'.

zmq_proxy_steerable runs in a thread with the GIL released; the worker's main thread
samples queues, serves the controller and, on stop, sends TERMINATE on the proxy's
control socket.
"""

from __future__ import annotations

import os
import threading

from .. import _engine
from ..contract import control
from .curve import secure
from .kernel_queues import TcpQueues, ports_of
from .lifecycle import WorkerLifecycle, max_rss_kb, rss_kb

SAMPLE_EVERY_MS = 50


class ProxyWorker(WorkerLifecycle):
    def run(self) -> None:
        w = self.workload
        frontend = _engine.Socket(self.context, _engine.SOCKET_TYPES["XSUB"])
        backend = _engine.Socket(self.context, _engine.SOCKET_TYPES["XPUB"])
        if w.proxy_rcvhwm is not None:
            frontend.set_option(_engine.SOCKET_OPTION_IDS["RCVHWM"], w.proxy_rcvhwm)
        if w.proxy_sndhwm is not None:
            backend.set_option(_engine.SOCKET_OPTION_IDS["SNDHWM"], w.proxy_sndhwm)
        if w.xpub_nodrop:  # at its SNDHWM the proxy waits: the producers' PUBs drop instead
            backend.set_option(_engine.SOCKET_OPTION_IDS["XPUB_NODROP"], 1)
        for sock in (frontend, backend):
            sock.set_option(_engine.SOCKET_OPTION_IDS["LINGER"], 0)
            for name, value in w.heartbeats.items():
                if value is not None:
                    sock.set_option(_engine.SOCKET_OPTION_IDS[name], value)
            secure(
                sock, self.spec.curve, server=True
            )  # both bind: the producers and consumers are clients
        front_endpoint = frontend.bind(self.spec.bind[0])
        back_endpoint = backend.bind(self.spec.bind[1])
        control_name = f"inproc://zmqload-proxy-control-{os.getpid()}-{id(self)}"
        steering = _engine.Socket(self.context, _engine.SOCKET_TYPES["PAIR"])
        steering.bind(control_name)
        steer = _engine.Socket(self.context, _engine.SOCKET_TYPES["PAIR"])
        steer.connect(control_name)
        thread = threading.Thread(
            target=_engine.proxy,
            args=(frontend, backend, steering),
            name="zmqload-proxy",
            daemon=True,
        )
        thread.start()
        self.ctl.send(control.Ready([front_endpoint, back_endpoint]))
        self.tcp_queues = TcpQueues(ports_of([front_endpoint, back_endpoint]))
        while not self.stop_requested:
            self.poll_commands(SAMPLE_EVERY_MS)
            self.watch_controller()
            now = _engine.now_ns()
            sendq, recvq = self.tcp_queues.sample()
            self.samples.add(now, 0, 0, sendq, recvq, rss_kb())
            # its memory and queues, for the live display and --metrics
            self.tick(now, control.Progress(0, tcp_sendq_bytes=sendq, tcp_recvq_bytes=recvq))
        steer.send_bytes(b"TERMINATE")
        thread.join(5.0)
        for sock in (steer, steering, frontend, backend):
            sock.close(0)
        self.finish_context()
        self.samples.flush()
        self.ctl.send(control.ProxyFinal(max_rss_kb()))
