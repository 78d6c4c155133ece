"""Where the binding side binds: an explicit --endpoint, or one endpoint per binder."""
from __future__ import annotations

import os

from ..contract.workload import Workload


def binder_endpoints(w: Workload, count: int, ipc_dir: str, run_id: str) -> list[str]:
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
