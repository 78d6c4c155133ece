"""What every command shares: the one-line argument parser and the one error -> exit-status
mapping (each error class's `exit_status`; Ctrl-C is ExitStatus.INTERRUPTED)."""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import Any, Callable, Iterable, NoReturn, Optional, TypeVar, overload

from ..errors import ExitStatus, ZmqloadError

N = TypeVar("N")


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports bad input as one line naming the (sub)command, exit status 2."""

    def error(self, message: str) -> NoReturn:
        message = re.sub(
            r"^argument ([^:]+): ", lambda m: m.group(1).split("/")[-1] + ": ", message
        )
        self.exit(ExitStatus.BAD_INPUT, f"{self.prog}: error: {message}\n")

    @overload
    def parse_known_args(
        self, args: Optional[Iterable[str]] = None, namespace: None = None
    ) -> tuple[argparse.Namespace, list[str]]: ...
    @overload
    def parse_known_args(
        self, args: Optional[Iterable[str]], namespace: N
    ) -> tuple[N, list[str]]: ...
    @overload
    def parse_known_args(self, *, namespace: N) -> tuple[N, list[str]]: ...

    def parse_known_args(
        self, args: Optional[Iterable[str]] = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        # Refuse leftovers here, where the subcommand is known: argparse would report them
        # from the top-level parser as "zmqload: error: unrecognized arguments".
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(self._unrecognized(extras))
        return namespace, extras

    def _unrecognized(self, extras: list[str]) -> str:
        options = [e for e in extras if e.startswith("-") and len(e) > 1]
        if not options:
            return f"unrecognized arguments: {' '.join(extras)}"
        given = options[0].split("=", 1)[0]
        # argparse keeps its option strings only in this attribute
        known = [s for s in self._option_string_actions if s.startswith("--")]
        close = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
        return f"unrecognized option {given}" + (f"; did you mean {close[0]}?" if close else "")


def usage_error(
    parser: argparse.ArgumentParser, choices: Iterable[str]
) -> Callable[[argparse.Namespace], ExitStatus]:
    """Handler of a parser whose command was left out: its usage and one line, exit 2."""

    def handler(args: argparse.Namespace) -> ExitStatus:
        parser.print_usage(sys.stderr)
        print(
            f"{parser.prog}: error: missing command; accepted: {', '.join(choices)}",
            file=sys.stderr,
        )
        return ExitStatus.BAD_INPUT

    return handler


def guarded(
    prog: str, command: Callable[[argparse.Namespace], int], args: argparse.Namespace
) -> ExitStatus:
    """Run `command(args)`; a zmqload error or Ctrl-C becomes one line on stderr and the exit
    status of its class. A KeyboardInterrupt's message (if any) says what was kept."""
    try:
        return ExitStatus(command(args))
    except ZmqloadError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt as exc:
        print(f"{prog}: interrupted" + (f"; {exc}" if str(exc) else ""), file=sys.stderr)
        return ExitStatus.INTERRUPTED


# -- what a command will write, said before it starts ------------------------------------------


def megabytes(n: int) -> str:
    """Bytes as the lines before a sweep or a search say them: '1,008 MB', '0.4 MB'."""
    return f"{n / 1e6:,.0f} MB" if n >= 10e6 else f"{n / 1e6:.1f} MB"


def disk_warning(prog: str, directory: str, needed: int, what: str) -> None:
    """One warning line on stderr when the file system of `directory` (or of its nearest
    existing parent) has less free than `needed` bytes; nothing otherwise."""
    from ..runner.run import free_space

    free = free_space(directory)
    if 0 <= free < needed:
        print(
            f"{prog}: warning: {directory}: {free:,} bytes free, {what} expected to write about {needed:,}; "
            "a run fails if the disk fills",
            file=sys.stderr,
        )
