"""Argument parsers built from the option tables (zmqload.contract.workload.OPTIONS, SLO_OPTIONS,
SEARCH_OPTIONS; zmqload.contract.report_options.REPORT_OPTIONS): `run` takes one value per option,
`sweep` a value or a comma-separated list (an axis). Every option's help shows what it accepts
(its range or choices) and its default, from the table."""

from __future__ import annotations

import argparse
from typing import Any, Callable, Collection, Optional, Sequence, Union

from ..contract.workload import OPTIONS, Option, Workload
from ..errors import ConfigError

AXIS_NOTE = "V or V1,V2,...: a list is an axis"


def option_type(opt: Option) -> Callable[[str], object]:
    """argparse `type=`: text -> the option's value, or argparse's one-line error."""

    def parse(text: str) -> object:
        try:
            return opt.convert(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    return parse


def list_type(opt: Option) -> Callable[[str], list[object]]:
    """argparse `type=` of a sweep axis: `V` or `V1,V2,...` -> list of values."""

    def parse(text: str) -> list[object]:
        parts = [p.strip() for p in text.split(",")]
        if any(not p for p in parts):
            raise argparse.ArgumentTypeError(
                f"got {text!r}; accepted: a value or a comma-separated list of values"
            )
        return [option_type(opt)(p) for p in parts]

    return parse


def is_switch(opt: Option) -> bool:
    """A flag that takes no value and sets True (the report's --strict): a path after it is
    never read as its value."""
    return bool(getattr(opt, "switch", False))


def help_text(opt: Option) -> str:
    """The option's help, then what it accepts (its choices or range: the "accepted: ..." text
    of its errors) and its default."""
    details: list[str] = []
    if opt.choices is not None:
        details.append(", ".join(opt.choice_list))
    elif opt.accepted and opt.kind is not bool:
        details.append(opt.accepted)
    default = opt.default_text or opt.default
    if isinstance(default, bool):
        default = str(default).lower()
    if default is not None and not is_switch(opt):
        details.append(f"default {default}")
    text = opt.help + (f" ({'; '.join(details)})" if details else "")
    return text.replace("%", "%%")  # argparse formats help with %


class _Axis(argparse.Action):
    """Stores an axis and remembers the order options were given in (the first axis given
    is the outermost loop of the product)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Union[str, Sequence[Any], None],
        option_string: Optional[str] = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        given = [name for name in (getattr(namespace, "given", None) or []) if name != self.dest]
        namespace.given = given + [self.dest]


class _NegatedAxis(_Axis):
    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Union[str, Sequence[Any], None],
        option_string: Optional[str] = None,
    ) -> None:
        super().__call__(parser, namespace, [False], option_string)


def add_workload_arguments(
    parser: argparse.ArgumentParser,
    axes: bool = False,
    skip: Collection[str] = (),
    table: dict[str, Option] = OPTIONS,
) -> None:
    """One argument per command-line option of the table (default the Workload's; also
    SLO_OPTIONS, SEARCH_OPTIONS, REPORT_OPTIONS), in the table's groups. With `axes`, every option
    takes a value or a list, is absent from the namespace unless given, and
    `namespace.given` lists the options given, in order (zmqload sweep)."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    if axes:
        parser.set_defaults(given=None)
    for opt in table.values():
        if not opt.cli or opt.field in skip:
            continue
        if opt.group not in groups:
            groups[opt.group] = parser.add_argument_group(
                _axis_title(opt.group) if axes else opt.group
            )
        group = groups[opt.group]
        if is_switch(opt):
            group.add_argument(opt.flag, dest=opt.field, action="store_true", help=help_text(opt))
            continue
        metavar = opt.flag[2:].upper().replace("-", "_")
        kind: dict[str, Any]  # add_argument's keywords
        if axes:
            kind = dict(type=list_type(opt), action=_Axis, default=argparse.SUPPRESS)
            metavar = f"{metavar}[,...]"
        else:
            kind = dict(type=option_type(opt), default=opt.default)
        if opt.kind is bool:  # a bare --immediate means true
            kind.update(nargs="?", const="true")
            metavar = "BOOL[,BOOL]" if axes else "BOOL"
        group.add_argument(opt.flag, dest=opt.field, metavar=metavar, help=help_text(opt), **kind)
        if opt.negation:
            negated: dict[str, Any] = (
                dict(nargs=0, action=_NegatedAxis, default=argparse.SUPPRESS)
                if axes
                else dict(action="store_const", const=False)
            )
            group.add_argument(
                opt.negation, dest=opt.field, help=f"same as {opt.flag} false", **negated
            )


def _axis_title(group: str) -> str:
    return f"{group[:-1]}; {AXIS_NOTE})" if group.endswith(")") else f"{group} ({AXIS_NOTE})"


def workload_from_args(args: argparse.Namespace) -> Workload:
    """The Workload of `run`'s parsed arguments (checked as it is made)."""
    return Workload(**{name: getattr(args, name) for name, opt in OPTIONS.items() if opt.cli})
