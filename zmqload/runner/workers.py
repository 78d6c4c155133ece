"""Run one worker of any role, reporting a failure as its last control message."""
from __future__ import annotations

import traceback

from .. import _engine
from ..contract import control
from ..contract.ids import Role
from .channel import ControlClient
from .spec import WorkerSpec


def run_worker(spec: WorkerSpec, context: _engine.Context | None = None) -> None:
    from .consumer import Consumer
    from .producer import Producer
    from .proxy import ProxyWorker
    body = {Role.PRODUCER: Producer, Role.CONSUMER: Consumer, Role.PROXY: ProxyWorker}[spec.role]
    ctl = ControlClient(spec.control, spec.worker)
    try:
        body(spec, ctl, context).run()
    except BaseException as exc:
        ctl.send(control.Failed(f"{type(exc).__name__}: {exc}", getattr(exc, "errno", None),
                                traceback.format_exc()))
    finally:
        ctl.close()
