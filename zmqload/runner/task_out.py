"""`--out URI` in a placed run: each task stages its worker on its own host and copies its files to
the URI, each checked by size, as it ends; the driver copies them down before it reconciles
(docs/CLUSTER.md; why: docs/ARCHITECTURE.md, "Runs at a URI")."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import tempfile
import threading
from typing import TYPE_CHECKING, Callable

from ..contract import control, uris
from ..store import remote_runs
from ..contract.bitmaps import Bits
from ..errors import ZmqloadError
from .spec import WorkerSpec

if TYPE_CHECKING:
    from .state import WorkerFinal

TASK_STAGING_PREFIX = "zmqload-task-"
"""A task's staging directory under its host's $TMPDIR (else /tmp): zmqload-task-<random>/run=<id>/."""

UPLOAD_BASE_S = 30.0
UPLOAD_SLOWEST_BYTES_PER_S = 5_000_000
"""The driver waits for a task's copy at most UPLOAD_BASE_S plus its bytes at this rate (a slow
link's; the S3 client's own waits are bounded: store/remote_runs.py), then gives it up: the
run ends failed, the task's staging copy is named. A copy that is done ends the wait at once."""

BEGUN, DONE = "uploading", "uploaded"
"""What a task tells the driver (runner/clocks.py): its copy begins (its bytes), its copy is done
('' or why it failed)."""


def upload_bound_s(nbytes: int) -> float:
    """The longest the driver waits for a copy of `nbytes` bytes."""
    return UPLOAD_BASE_S + nbytes / UPLOAD_SLOWEST_BYTES_PER_S


def run_and_upload(
    spec: WorkerSpec,
    run: Callable[[WorkerSpec], None],
    tell: Callable[[str, dict[str, object]], None],
) -> None:
    """`run(spec)` (the worker) with its run directory in a new staging directory of this host,
    then, however it ended, its files copied to `spec.upload_to` (`tell`: the driver hears the
    copy begin and end); the staging directory removed once the copy is checked, else kept and
    named in what the driver hears."""
    assert spec.upload_to is not None
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C at a terminal reaches a local master's tasks too (one process group): the driver
        # stops the worker, as on a cluster, and the copy is not cut short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    staging = tempfile.mkdtemp(prefix=TASK_STAGING_PREFIX)
    run_dir = os.path.join(staging, os.path.basename(spec.run_dir))
    os.mkdir(run_dir)
    try:
        run(dataclasses.replace(spec, run_dir=run_dir))
    finally:
        tell(BEGUN, {"worker": spec.name, "bytes": _bytes(run_dir)})
        why = _upload(run_dir, spec.upload_to)
        if why:
            why = f"{why}; what it recorded is kept on {socket.gethostname()} in {run_dir}"
        else:
            shutil.rmtree(staging, ignore_errors=True)
        tell(DONE, {"worker": spec.name, "error": why})


def _bytes(run_dir: str) -> int:
    """What the copy of `run_dir` will move: its files' sizes, as copy_checked checks them."""
    import pyarrow.fs as pafs

    return sum(remote_runs.file_sizes(pafs.LocalFileSystem(), os.path.abspath(run_dir)).values())


def _upload(run_dir: str, upload_to: str) -> str:
    """The worker's files copied to `upload_to`: '' or why not, in one line without secrets."""
    try:
        remote_runs.upload_worker_files(run_dir, remote_runs.open_remote(upload_to, "--out"))
    except (ZmqloadError, OSError, ValueError) as exc:
        return uris.scrubbed(str(exc) or type(exc).__name__, upload_to)
    return ""


def download(upload_to: str, run_dir: str) -> int:
    """What the tasks copied to `upload_to` copied into the driver's `run_dir`; its bytes.
    ConfigError, OSError or ValueError when it cannot be."""
    return remote_runs.download_into(remote_runs.open_remote(upload_to, "--out"), run_dir)


def rebased(final: WorkerFinal, run_dir: str) -> WorkerFinal:
    """A task's final with the files of its maps (paths in the task's staging run directory, of
    the same name) found in the driver's `run_dir`, where they were copied."""
    name = os.path.basename(run_dir)

    def here(bits: Bits) -> Bits:
        if not isinstance(bits, str):
            return bits
        _, found, relative = bits.rpartition(f"{os.sep}{name}{os.sep}")
        return os.path.join(run_dir, relative) if found else bits

    if isinstance(final, control.ProducerFinal):
        return dataclasses.replace(final, sent_ok_map=here(final.sent_ok_map))
    if isinstance(final, control.ConsumerFinal):
        return dataclasses.replace(
            final,
            streams=[
                dataclasses.replace(s, seen_map=here(s.seen_map), drained_map=here(s.drained_map))
                for s in final.streams
            ],
        )
    return final
