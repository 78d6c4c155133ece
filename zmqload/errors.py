"""The one error tree and the one exit-status map of every zmqload command.

Every error a user can cause or meet reaches them as one line, never as a traceback; its
class says which exit status the command ends with. Nothing here imports anything else of
zmqload, so every layer (engine, analysis, commands) can raise these.
"""

from __future__ import annotations

import enum
import errno as _errno


class ExitStatus(enum.IntEnum):
    """Exit statuses of every command (README.md, "Exit status")."""

    OK = 0
    FAILED = 1  # the run (or report, or search) could not be carried out
    BAD_INPUT = 2  # one line naming the option and what it accepts
    SLO_VIOLATED = 3  # a run broke a --max-loss / --slo-* gate; compare: --fail-if regressed
    INTERRUPTED = 130  # Ctrl-C or SIGTERM; what was recorded is kept


class ZmqloadError(Exception):
    """Base class of errors the command line reports as one line."""

    exit_status = ExitStatus.FAILED


class ConfigError(ZmqloadError, ValueError):
    """An invalid option value. `option` is the command-line name, e.g. '--size'."""

    exit_status = ExitStatus.BAD_INPUT

    def __init__(self, option: str, message: str):
        self.option = option
        self.message = message
        super().__init__(f"{option}: {message}")


class RunError(ZmqloadError, RuntimeError):
    """A run could not be carried out (a worker failed, peers never connected, ...)."""


class ReportInputError(ZmqloadError):
    """The report's input is unusable (missing directory, not a run, no Java...)."""

    exit_status = ExitStatus.BAD_INPUT


class RecordError(ZmqloadError):
    """A record file (run.json, capacity-search.json, ...) is missing, of another schema
    version, or not what its type says; the message names the file. Also a worker's spec on
    its standard input that is not one (runner/spec.py: "worker spec: ...")."""

    exit_status = ExitStatus.BAD_INPUT


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM that came once a run's last run.json was written (while it was written,
    or during the copy to an --out URI): `status` is what that run.json says (complete, interrupted
    or failed); the message, where its records are."""

    def __init__(self, message: str = "", status: str = "interrupted"):
        super().__init__(message)
        self.status = status


class EngineError(ZmqloadError, OSError):
    """A libzmq call made by the engine failed; `errno` and libzmq's message are attached."""


class EngineTerminated(EngineError):
    """The socket's context was terminated (ETERM)."""


class EngineAddressInUse(EngineError):
    """bind() found the address taken (EADDRINUSE)."""


class EngineInterrupted(EngineError):
    """A blocking libzmq call was interrupted by a signal (EINTR)."""


_ERRNO_CLASSES = {
    _errno.EADDRINUSE: EngineAddressInUse,
    _errno.EINTR: EngineInterrupted,
    156384765: EngineTerminated,  # ETERM: ZMQ_HAUSNUMERO + 53, libzmq's own errno
}


def engine_error(err: int, what: str, detail: str) -> EngineError:
    """The only errno -> exception-class map (as pyzmq's `_check_rc`)."""
    cls = _ERRNO_CLASSES.get(err, EngineError)
    return cls(err, f"{what}: {detail}")
