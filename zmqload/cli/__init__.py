"""`zmqload COMMAND ...` (also `python -m zmqload`): one module per command in this package,
each with NAME, HELP, add_arguments(parser) and run(args) -> ExitStatus. Errors become one
line and the exit status of their class (zmqload.errors.ExitStatus; README "Exit status")."""

from __future__ import annotations

from typing import Sequence

from ..versions import ZMQLOAD_VERSION as __version__
from ..errors import ExitStatus
from .common import OneLineParser, guarded, usage_error

PROG = "zmqload"


def build_parser() -> OneLineParser:
    # Imported here, not at the top: zmqload.report.command imports .common, and importing
    # a command module must never be skipped silently (a broken one fails loudly).
    from . import capacity, compare, info, repair, report, run, scenario, sweep

    commands = (run, info, sweep, capacity, scenario, report, compare, repair)
    parser = OneLineParser(prog=PROG, description="Load generator and capacity planner for ZeroMQ.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for module in commands:
        command = sub.add_parser(module.NAME, help=module.HELP)
        command.set_defaults(handler=module.run)  # first: a command with actions sets its own
        module.add_arguments(command)
    parser.set_defaults(handler=usage_error(parser, [m.NAME for m in commands]))
    return parser


def main(argv: Sequence[str] | None = None) -> ExitStatus:
    args = build_parser().parse_args(argv)
    prog = f"{PROG} {args.command}" if args.command else PROG
    return guarded(prog, args.handler, args)
