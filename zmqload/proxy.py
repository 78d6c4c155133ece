"""The proxy role of the `proxy` pattern: XSUB (producers connect) | zmq_proxy | XPUB
(consumers connect), on the engine's libzmq, its HWMs set apart from the ends'.

zmq_proxy_steerable runs in a thread with the GIL released; the worker's main thread
talks to the controller and, on stop, sends TERMINATE on the proxy's control socket.
"""
from __future__ import annotations

import os
import threading

from . import _engine
from .recorder import SAMPLES_SCHEMA, PartWriter, Samples
from .kernelq import TcpQueues, ports_of
from .config import Workload

SAMPLE_EVERY_MS = 50


class ProxyWorker:
    def __init__(self, spec, ctl, context):
        self.spec, self.ctl = spec, ctl
        self.workload = Workload.from_dict(spec.workload)
        self.own_context = context is None
        self.context = _engine.Context(self.workload.io_threads) if context is None else context

    def run(self) -> None:
        w = self.workload
        frontend = _engine.Socket(self.context, _engine.SOCKET_TYPES["XSUB"])
        backend = _engine.Socket(self.context, _engine.SOCKET_TYPES["XPUB"])
        if w.proxy_rcvhwm is not None:
            frontend.set_option(_engine.OPTIONS["RCVHWM"], w.proxy_rcvhwm)
        if w.proxy_sndhwm is not None:
            backend.set_option(_engine.OPTIONS["SNDHWM"], w.proxy_sndhwm)
        for sock in (frontend, backend):
            sock.set_option(_engine.OPTIONS["LINGER"], 0)
        front_endpoint = frontend.bind(self.spec.bind[0])
        back_endpoint = backend.bind(self.spec.bind[1])
        control_name = f"inproc://zmqload-proxy-control-{os.getpid()}-{id(self)}"
        control = _engine.Socket(self.context, _engine.SOCKET_TYPES["PAIR"])
        control.bind(control_name)
        steer = _engine.Socket(self.context, _engine.SOCKET_TYPES["PAIR"])
        steer.connect(control_name)
        thread = threading.Thread(target=_engine.proxy, args=(frontend, backend, control),
                                  name="zmqload-proxy", daemon=True)
        thread.start()
        self.ctl.send("ready", endpoint={"frontend": front_endpoint, "backend": back_endpoint})
        samples = Samples(PartWriter(os.path.join(self.spec.run_dir, "samples"), self.spec.name,
                                     SAMPLES_SCHEMA, "snappy"), "proxy", self.spec.index)
        queues = TcpQueues(ports_of([front_endpoint, back_endpoint]))
        stop = False
        while not stop:
            message = self.ctl.recv(SAMPLE_EVERY_MS)
            if message is not None and message["type"] == "stop":
                stop = True
            samples.add(_engine.now_ns(), 0, 0, *queues.sample())
        steer.send_bytes(b"TERMINATE")
        thread.join(5.0)
        for sock in (steer, control, frontend, backend):
            sock.close(0)
        if self.own_context:
            self.context.term()
        samples.flush()
        self.ctl.send("final")
