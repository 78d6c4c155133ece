"""Errors that reach the user as one line (exit status 2), never as a traceback."""


class ZmqloadError(Exception):
    """Base class of errors the command line reports as one line."""


class ConfigError(ZmqloadError, ValueError):
    """An invalid option value. `option` is the command-line name, e.g. '--size'."""

    def __init__(self, option: str, message: str):
        self.option = option
        self.message = message
        super().__init__(f"{option}: {message}")


class RunError(ZmqloadError, RuntimeError):
    """A run could not be carried out (a worker failed, peers never connected, ...)."""
