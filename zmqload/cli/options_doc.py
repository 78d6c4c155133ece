"""docs/OPTIONS.md, the option reference, generated from the parser `zmqload COMMAND --help`
prints: every command's options with what they accept, their default and their help. An option
of a table (zmqload.contract.workload.OPTIONS, SLO_OPTIONS, SEARCH_OPTIONS;
zmqload.contract.report_options.REPORT_OPTIONS) is described by its entry there, so the page
and `--help` have one source.

    python -m zmqload.cli.options_doc docs/OPTIONS.md      # what `make docs` runs
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Optional, Sequence

from ..contract.report_options import REPORT_OPTIONS
from ..contract.workload import OPTIONS, SEARCH_OPTIONS, SLO_OPTIONS, Option
from . import PROG, build_parser
from .options import _Axis, help_text, is_switch

COMMAND = "make docs"
TABLES = (OPTIONS, SLO_OPTIONS, SEARCH_OPTIONS, REPORT_OPTIONS)
FLAG = "a flag (no value)"
GENERIC_TITLES = {
    "positional arguments": "arguments",
    "optional arguments": "options",
}  # Python < 3.10: options

INTRO = f"""# Option reference

<!-- Generated from the option tables by `{COMMAND}` (python -m zmqload.cli.options_doc docs/OPTIONS.md);
do not edit: tests/test_options.py fails when this page differs from what the code generates. -->

Every option of every command, as `zmqload COMMAND --help` prints it, from one source: the
option tables in zmqload/contract/workload.py (`run`, `sweep`, `capacity`) and
zmqload/contract/report_options.py (`report`).

- A bad value is refused before anything starts, in one line naming the option and what it
  accepts (`--size: got 8; accepted: ...`), exit status 2.
- Rates and counts take `k`/`M` suffixes (`10k`, `1.5M`). Boolean options take an optional value:
  `--immediate` is `--immediate true`, `--immediate false` turns it off.
- Every option of `run` is a field of `zmqload.Workload` and a keyword of the pytest plugin's
  `zmqload.run`, named after its flag (`--send-mode` is `send_mode`; `--linger` is `linger_ms`)
  and taking the same values, text included (`Workload(rate="10k")`).
- "unset" leaves the choice to libzmq (socket options) or to the rule the help names.
"""


def page() -> str:
    """The whole of docs/OPTIONS.md."""
    parts = [INTRO]
    parser = build_parser()
    run_flags = [opt.flag for opt in OPTIONS.values() if opt.cli]
    for prog, command, summary in _commands(parser, PROG, ""):
        parts.append(_command(prog, command, summary, run_flags))
    parts.append(_api_only())
    return "\n".join(parts)


def _commands(
    parser: argparse.ArgumentParser, prog: str, summary: str
) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """(`zmqload run`, its parser, its line in the list of commands), ... for the parser and every
    (sub)command under it, in order."""
    found = [(prog, parser, summary)]
    for action in parser._actions:  # argparse keeps its subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                found += _commands(sub, f"{prog} {name}", helps.get(name, ""))
    return found


def _command(prog: str, parser: argparse.ArgumentParser, summary: str, run_flags: list[str]) -> str:
    lines = [f"## `{prog}`", ""]
    if parser.description or summary:
        lines += [_text(parser.description or summary), ""]
    axes: list[str] = []
    for group in parser._action_groups:
        rows = []
        for action in group._group_actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            opt = _option_of(action)
            if isinstance(action, _Axis):
                axes += action.option_strings
            elif opt is not None:
                rows.append(_table_row(opt))
            elif not _is_negation(action):
                rows.append(_plain_row(action, prog))
        if rows:
            lines += [
                f"### {GENERIC_TITLES.get(group.title or '', group.title)}",
                "",
                "| option | accepts | default | meaning |",
                "|---|---|---|---|",
                *rows,
                "",
            ]
    if axes:
        left_out = [flag for flag in run_flags if flag not in axes]
        lines += [
            "Every workload option of `zmqload run` (above) takes one value or a comma-separated list "
            "of values, an axis"
            + (f", except {', '.join(f'`{f}`' for f in left_out)}" if left_out else "")
            + "; a boolean option's list is `true,false`.",
            "",
        ]
    if parser.epilog:
        lines += [_text(parser.epilog), ""]
    return "\n".join(lines)


def _option_of(action: argparse.Action) -> Optional[Option]:
    """The table entry an argument was built from (add_workload_arguments: its dest and help)."""
    for table in TABLES:
        opt = table.get(action.dest)
        if (
            opt is not None
            and action.option_strings[:1] == [opt.flag]
            and action.help == help_text(opt)
        ):
            return opt
    return None


def _is_negation(action: argparse.Action) -> bool:
    return any(
        opt.negation and action.option_strings == [opt.negation]
        for table in TABLES
        for opt in table.values()
    )


def _table_row(opt: Option) -> str:
    flags = f"`{opt.flag}`" + (f", `{opt.negation}`" if opt.negation else "")
    if is_switch(opt):
        accepts, default = FLAG, ""
    else:
        accepts = opt.accepts
        default = _shown(opt.default_text or opt.default)
    return _row(flags, accepts, default, opt.help)


def _plain_row(action: argparse.Action, prog: str) -> str:
    """An argument of a command's own (not from a table): argparse's own description of it."""
    metavar = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
    if not action.option_strings:
        flags = f"`{metavar}`" + (" ..." if action.nargs in ("*", "+") else "")
    else:
        flags = ", ".join(f"`{s}`" for s in action.option_strings)
    accepts = (
        FLAG
        if action.nargs == 0
        else (", ".join(map(str, action.choices)) if action.choices else metavar)
    )
    default = (
        ""
        if action.nargs == 0 or action.default in (None, argparse.SUPPRESS)
        else _shown(action.default)
    )
    meaning = (action.help or "") % dict(vars(action), prog=prog)  # argparse's %(default)s
    return _row(flags, accepts, default, meaning)


def _shown(default: Any) -> str:
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return str(default).lower()
    return str(default)


def _row(*cells: str) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _text(text: str) -> str:
    """Text as Markdown shows it as written: `*` and `<` escaped outside code, on one line."""
    pieces = re.split(r"(`[^`]*`)", " ".join(text.split()))
    return "".join(
        p if p.startswith("`") else p.replace("*", r"\*").replace("<", "&lt;") for p in pieces
    )


def _cell(text: str) -> str:
    """Text as a table cell shows it as written (`|` escaped too, code included: GitHub's rule)."""
    return _text(text).replace("|", r"\|")


def _api_only() -> str:
    rows = [
        _row(f"`{opt.field}`", opt.accepts, _shown(opt.default), opt.help)
        for opt in OPTIONS.values()
        if not opt.cli
    ]
    return "\n".join(
        [
            "## `Workload` fields without a flag",
            "",
            "Set from Python (`Workload(chunk_rows=...)`) or in a sweep file only.",
            "",
            "| field | accepts | default | meaning |",
            "|---|---|---|---|",
            *rows,
            "",
        ]
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print(
            "usage: python -m zmqload.cli.options_doc PATH   (writes the option reference, docs/OPTIONS.md)",
            file=sys.stderr,
        )
        return 2
    with open(args[0], "w", encoding="utf-8") as f:
        f.write(page())
    return 0


if __name__ == "__main__":
    sys.exit(main())
