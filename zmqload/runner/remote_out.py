"""`--out URI` in a run: recorded in a staging directory on this host, then copied to the URI and
checked file by file however the run ends; the staging copy removed once checked, kept and named
when the copy fails (why stage: docs/ARCHITECTURE.md, "Runs at a URI")."""

from __future__ import annotations

import copy
import os
import secrets
import shutil
import tempfile
from typing import Callable

from ..contract import uris
from ..store import remote_runs
from ..contract import run_record as rr
from ..store import record_files
from ..contract.workload import Workload
from ..errors import ConfigError, Interrupted, RunError, ZmqloadError
from ..measure.result import RunResult
from . import signals

STAGING_PREFIX = "zmqload-out-"
"""A staging directory's name under $TMPDIR (else /tmp): zmqload-out-<random>/run=<id>/."""


def local_out(w: Workload) -> str:
    """Where a run's directory is made on this host: --out itself, or for a URI the system's
    temporary directory, where its staging directory will be (the disk check looks there)."""
    return tempfile.gettempdir() if uris.is_uri(w.out) else w.out


def run_staged(
    w: Workload, run_here: Callable[[Workload, str, Callable[[], None]], RunResult]
) -> RunResult:
    """`run_here(staged, uri, check_target)` (runner/run.py: the run itself into a staging
    directory, `uri` where it goes (run.json's workload.out names it without its secrets),
    `check_target()` its last check before the run directory is made), then its run directory
    copied to `w.out`. ConfigError before anything is
    made when the URI cannot be opened or written (checked last, so no other bad input leaves the
    check's traces there); RunError when the copy fails (the run's own errors, and Ctrl-C, are
    raised once the copy is made). Signals are held but in the run's own raised sections and the
    copy (runner/signals.py): Ctrl-C or SIGTERM during the copy stops it, the staging copy is kept,
    its run.json keeps the status the run ended with and says why it is there, and
    errors.Interrupted says where it is."""
    checked: list[remote_runs.Remote] = []

    def check_target() -> None:
        name = rr.run_dir_name(w.run_name, w.role) if w.run_name else None
        checked.append(remote_runs.check_writable(w.out, "--out", new_child=name))

    staged = copy.copy(w)  # not replace(): the validated workload as it is
    staged.out = os.path.join(local_out(w), f"{STAGING_PREFIX}{secrets.token_hex(4)}")
    with (
        signals.held()
    ):  # the run raises where it may (runner/signals.py), the copy while it copies
        try:
            result = run_here(staged, w.out, check_target)
        except ConfigError:
            shutil.rmtree(staged.out, ignore_errors=True)  # bad input: nothing was recorded
            raise
        except RunError as exc:
            failed: RunResult | None = getattr(exc, "result", None)
            raise (
                _copied(staged.out, checked, failed, f"the run failed ({exc})", "failed")[0] or exc
            )
        except KeyboardInterrupt as exc:
            status = getattr(exc, "status", "interrupted")
            error, where = _copied(staged.out, checked, None, "the run was interrupted", status)
            if error is not None:
                raise error from None
            raise Interrupted(
                f"what was recorded is at {where}" if where else "", status=status
            ) from None
        except BaseException:
            if not _run_dirs(staged.out):  # else kept: what was recorded stays where it is
                shutil.rmtree(staged.out, ignore_errors=True)
            raise
        error, _ = _copied(staged.out, checked, result, "", result.status)
        if error is not None:
            raise error
        signals.current().take()  # one that came once the copy was checked: the command ends as it is
        return result


def _run_dirs(staging: str) -> list[str]:
    try:
        return sorted(d for d in os.listdir(staging) if d.startswith("run="))
    except FileNotFoundError:
        return []


def _copied(
    staging: str, checked: list[remote_runs.Remote], result: RunResult | None, how: str, status: str
) -> tuple[RunError | Interrupted | None, str]:
    """The staging directory's run directory copied to the URI `checked` (before the directory
    was made) and checked, then removed, and `result` pointed at the copy: (None, the copy's URI as
    shown). Else the staging copy kept: (a RunError saying where it is and why, `how` the run
    itself ended when not complete, or Interrupted when a signal stopped the copy; its path).
    (None, "") when the run ended before it had one. `status`: what its run.json says."""
    names = _run_dirs(staging)
    if not names or not checked:
        shutil.rmtree(staging, ignore_errors=True)
        return None, ""
    remote = checked[0]
    local = os.path.join(staging, names[0])
    target = remote.child(names[0])
    if result is not None:
        result.workload["out"] = remote.without_secrets
    try:
        with signals.raised():  # a signal stops the copy (one that came before it: at once)
            signals.pause_in("copy")  # the tests' pause (runner/signals.py)
            remote_runs.upload(local, target)
    except (OSError, ValueError, KeyboardInterrupt) as exc:
        stopped = isinstance(exc, KeyboardInterrupt)
        why = "interrupted (Ctrl-C or SIGTERM)" if stopped else target.why(exc)
        _note_kept(
            local,
            f"the copy to {target.without_secrets} failed ({why}): this directory is the run's complete record",
        )
        said = (
            f"{how + '; ' if how else ''}the run's records are complete in {local}, "
            f"not copied to {target.without_secrets}: {why}"
        )
        error: RunError | Interrupted = (
            Interrupted(said, status=status) if stopped else RunError(said)
        )
        if result is not None:
            result.run_dir = local
            error.result = result  # type: ignore[union-attr]  # the figures, shown before the error
        return error, local
    shutil.rmtree(staging, ignore_errors=True)
    if result is not None:
        result.run_dir = target.without_secrets
    return None, target.without_secrets


def _note_kept(run_dir: str, warning: str) -> None:
    """run.json of a staging copy left behind says why it is here (its workload.out names the URI)."""
    try:
        record = record_files.read_run(run_dir)
        record.warnings.append(warning)
        record_files.write_run(run_dir, record)
    except (OSError, ZmqloadError):
        pass  # the error line says it too
