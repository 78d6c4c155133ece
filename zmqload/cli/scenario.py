"""`zmqload scenario list [--json] | run NAME... | run --all [--fast] [--libzmq A,B] [--markdown [FILE]]`."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import sys
import time
from typing import TYPE_CHECKING, Any

from ..contract.workload import OPTIONS
from ..runner.preflight import check_output_dir, use_libzmq
from ..errors import ConfigError, ExitStatus
from .common import OneLineParser, usage_error

if TYPE_CHECKING:
    from ..scenarios.framework import Outcome

NAME = "scenario"
HELP = "named HWM / linger / backpressure questions, measured"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=OneLineParser)
    listing = actions.add_parser("list", help="list the scenarios and their claims")
    listing.add_argument("--json", action="store_true", help="print the scenarios as JSON")
    listing.set_defaults(handler=list_scenarios)
    running = actions.add_parser(
        "run", help="run some scenarios (or --all) and give each a verdict"
    )
    running.add_argument(
        "names", nargs="*", metavar="NAME", help="scenario names (see: zmqload scenario list)"
    )
    running.add_argument("--all", action="store_true", help="run every scenario")
    running.add_argument(
        "--fast",
        action="store_true",
        help="short form (smaller counts and delays), as in the tests",
    )
    running.add_argument(
        "--out",
        default="runs/scenarios",
        help="parent of the run directories (default %(default)s)",
    )
    running.add_argument(
        "--markdown",
        nargs="?",
        const="-",
        default=None,
        metavar="FILE",
        help="write the verdict table as Markdown to FILE (or stdout)",
    )
    running.add_argument("--json", action="store_true", help="print the outcomes as JSON")
    libzmq = OPTIONS["libzmq"]
    running.add_argument(
        libzmq.flag,
        default=libzmq.default,
        metavar="LIBZMQ[,LIBZMQ...]",
        help=f"the libzmq the scenarios run: {libzmq.accepts}; several, separated by commas, run "
        "every scenario once per library (a process each) and give the verdict table a "
        "column per library",
    )
    running.set_defaults(handler=run)
    parser.set_defaults(handler=usage_error(parser, ["list", "run"]))


def list_scenarios(args: argparse.Namespace) -> ExitStatus:
    from ..scenarios import CLAIMS, SCENARIOS

    if args.json:
        print(json.dumps(_listing()))
        return ExitStatus.OK
    from rich.console import Console

    console = Console()
    for scenario in SCENARIOS.values():
        console.print(f"[bold]{scenario.name}[/] ({about(scenario.expected_s)}): {scenario.title}")
        for claim in scenario.claims:
            console.print(f"    {claim}: {CLAIMS[claim].text}")
    console.print(_expected(list(SCENARIOS)) + " in all (--all, full form)")
    return ExitStatus.OK


def _expected(names: list[str]) -> str:
    """'about 9 minutes: 24 scenarios', from each scenario's own expected_s."""
    from ..scenarios import SCENARIOS

    return f"{about(sum(SCENARIOS[n].expected_s for n in names))}: {len(names)} scenario{'s' * (len(names) != 1)}"


def about(seconds: float) -> str:
    """'about 40 s' / 'about 9 minutes': how long something is expected to take."""
    return f"about {seconds:.0f} s" if seconds < 90 else f"about {seconds / 60:.0f} minutes"


def _command() -> str:
    return "python -m zmqload " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def verdict_markdown(outcomes: dict[str, Outcome], command: str, took_s: float, fast: bool) -> str:
    """The whole file, header included: it is regenerated whole by the command it names, never edited."""
    from .. import versions

    v = versions.versions()
    return libraries_markdown({f"libzmq {v['libzmq']}": outcomes}, command, took_s, fast)


def libraries_markdown(
    by_library: dict[str, dict[str, Outcome]], command: str, took_s: float, fast: bool
) -> str:
    """The verdict table of the scenarios run on each library (a column each where several), with
    the claims whose verdicts differ named; regenerated whole by `command`, never edited."""
    from .. import versions
    from ..scenarios import CLAIMS, SCENARIOS

    v = versions.versions()
    names = list(by_library)
    first = by_library[names[0]]
    scope = (
        ""
        if len(first) == len(SCENARIOS)
        else f" It covers {len(first)} of the {len(SCENARIOS)} scenarios only."
    ) + (" Short form (--fast): the figures are not the full measurements." if fast else "")
    lines = [
        f"# Verdicts, measured on {' and '.join(names)}",
        "",
        f"Generated whole by `{command}` on {_dt.date.today().isoformat()} in {took_s / 60:.1f} minutes, with "
        f"zmqload {v['zmqload']} and pyzmq {v['pyzmq']}.{scope} Do not edit it by hand: run the command "
        "again. Every figure below was measured, not assumed.",
        "",
    ]
    verdicts = {
        lib: {
            verdict.claim: (verdict, name)
            for name, outcome in outcomes.items()
            for verdict in outcome.verdicts
        }
        for lib, outcomes in by_library.items()
    }
    claims = sorted({c for per in verdicts.values() for c in per}, key=list(CLAIMS).index)
    if len(names) == 1:
        lines += [
            "| claim | source's words | verdict | because | scenario |",
            "|---|---|---|---|---|",
        ]
    else:
        lines += [
            "| claim | source's words | "
            + " | ".join(f"verdict on {lib}" for lib in names)
            + " | scenario |",
            "|---|---|" + "---|" * len(names) + "---|",
        ]
    for claim in claims:
        text = CLAIMS[claim].text.replace("|", "\\|")
        cells = [verdicts[lib].get(claim) for lib in names]
        scenario = next(c[1] for c in cells if c is not None)
        if len(names) == 1:
            verdict = verdicts[names[0]][claim][0]
            lines.append(
                f"| {claim} | {text} | **{verdict.verdict}** | {verdict.because.replace('|', '/')} "
                f"| `{scenario}` |"
            )
        else:
            lines.append(
                f"| {claim} | {text} | "
                + " | ".join(
                    "not run" if c is None else f"**{c[0].verdict.replace('|', '/')}**"
                    for c in cells
                )
                + f" | `{scenario}` |"
            )
    if len(names) > 1:
        differ = [
            c
            for c in claims
            if len(
                {
                    verdicts[lib][c][0].verdict.split(":")[0] if c in verdicts[lib] else None
                    for lib in names
                }
            )
            > 1
        ]
        lines += ["", "## Where the libraries differ", ""]
        lines += [
            f"- {c}: "
            + "; ".join(
                f"{lib}: {verdicts[lib][c][0].verdict} ({verdicts[lib][c][0].because})"
                for lib in names
                if c in verdicts[lib]
            )
            for c in differ
        ] or [
            "Nowhere: every claim has the same verdict on each library (the figures differ; below)."
        ]
    lines += ["", "## Measurements", ""]
    for lib, outcomes in by_library.items():
        for name, outcome in outcomes.items():
            lines += [
                f"### {name}: {SCENARIOS[name].title}" + ("" if len(names) == 1 else f" ({lib})"),
                "",
            ]
            lines += [f"- {m}" for m in outcome.measured]
            if len(names) > 1:
                lines += [
                    f"- {verdict.claim}: **{verdict.verdict}**, because {verdict.because}"
                    for verdict in outcome.verdicts
                ]
            lines.append("")
    return "\n".join(lines)


def _listing() -> list[dict[str, Any]]:
    from ..scenarios import CLAIMS, SCENARIOS

    return [
        {
            "name": s.name,
            "title": s.title,
            "expected_s": s.expected_s,
            "claims": [
                {"id": c, "source": CLAIMS[c].source, "text": CLAIMS[c].text} for c in s.claims
            ],
        }
        for s in SCENARIOS.values()
    ]


def _as_json(outcome: Outcome) -> dict[str, Any]:
    return {
        "claims": {
            v.claim: {"verdict": v.verdict, "because": v.because, "measurements": v.measurements}
            for v in outcome.verdicts
        },
        "measured": outcome.measured,
        "figures": outcome.figures,
        "run_dirs": outcome.run_dirs,
    }


def run(args: argparse.Namespace) -> ExitStatus:
    from rich.console import Console

    from ..scenarios import CLAIMS, SCENARIOS, get, run_scenario
    from ..scenarios.seed_001 import zmq_header_path

    console = Console(stderr=args.json)  # stdout is the JSON's
    names = list(SCENARIOS) if args.all else args.names
    if not names:
        raise ConfigError(
            "NAME", f"name a scenario or give --all; accepted: {', '.join(SCENARIOS)}"
        )
    for name in names:
        get(name)
    reading = [n for n in names if SCENARIOS[n].reads_header]
    if reading and zmq_header_path() is None:
        raise ConfigError(
            "NAME",
            f"{', '.join(reading)} read libzmq's header zmq.h, not found here (pkg-config "
            "libzmq, /usr/include); install libzmq's headers (Debian: apt-get install "
            "libzmq3-dev), or name the other scenarios",
        )
    libraries = [lib.strip() for lib in args.libzmq.split(",")]
    for lib in libraries:  # each found and a libzmq 4.x before anything runs
        if not lib:
            raise ConfigError(
                OPTIONS["libzmq"].flag,
                f"an empty name in {args.libzmq!r}; accepted: "
                f"{OPTIONS['libzmq'].accepts}, several separated by commas",
            )
        from ..libzmq import describe

        try:
            describe(lib)
        except ValueError as exc:
            raise ConfigError(
                OPTIONS["libzmq"].flag, f"{exc}; accepted: {OPTIONS['libzmq'].accepts}"
            ) from None
    check_output_dir(args.out)
    if len(libraries) > 1:
        return _run_per_library(args, names, libraries, console)
    use_libzmq(libraries[0])  # the scenarios call the engine in this process too
    if not args.fast:
        console.print(_expected(names))
    outcomes, started = {}, time.monotonic()
    for name in names:
        scenario = SCENARIOS[name]
        if not args.json:
            console.rule(f"[bold]{name}[/]: {scenario.title}")
        t0 = time.monotonic()
        outcome = run_scenario(name, args.out, fast=args.fast, libzmq=libraries[0])
        outcomes[name] = outcome
        took = time.monotonic() - t0
        if (
            not args.fast and took > 1.5 * scenario.expected_s + 10
        ):  # the figure `list` shows is out of date
            console.print(
                f"  {name} took {took:.0f} s, expected {about(scenario.expected_s)}: measure it again on a "
                "quiet machine and update its expected_s"
            )
        if not args.json:
            console.print(f"  took {took:.0f} s")
            for line in outcome.measured:
                console.print(f"  measured: {line}")
            for verdict in outcome.verdicts:
                console.print(
                    f"  {verdict.claim} {CLAIMS[verdict.claim].text}\n    verdict: [bold]{verdict.verdict}[/] "
                    f"({verdict.because})"
                )
            console.print(
                f"  runs: {', '.join(os.path.basename(d) for d in outcome.run_dirs)} in {args.out}"
            )
    if args.json:
        print(json.dumps({n: _as_json(o) for n, o in outcomes.items()}, default=str))
    if args.markdown:
        _write_markdown(
            args.markdown,
            verdict_markdown(outcomes, _command(), time.monotonic() - started, args.fast),
            console,
        )
    return ExitStatus.OK


def _write_markdown(where: str, text: str, console: Any) -> None:
    """--markdown's table to FILE, or to stdout for '-'."""
    if where == "-":
        sys.stdout.write(text + "\n")
        return
    with open(where, "w") as f:
        f.write(text + "\n")
    console.print(f"verdict table: {where}")


def _run_per_library(
    args: argparse.Namespace, names: list[str], libraries: list[str], console: Any
) -> ExitStatus:
    """The scenarios once per library, each in a zmqload process of its own (a process runs one
    libzmq), their outcomes joined in one table."""
    import subprocess

    from ..libzmq import describe
    from ..scenarios.framework import Outcome, Verdict

    by_library: dict[str, dict[str, Outcome]] = {}
    started = time.monotonic()
    for lib in libraries:
        label = f"libzmq {describe(lib).version} ({lib})"
        console.print(
            f"{label}: {_expected(names) if not args.fast else f'{len(names)} scenarios'}, in a process "
            "of its own"
        )
        child = subprocess.run(
            [
                sys.executable,
                "-m",
                "zmqload",
                "scenario",
                "run",
                *names,
                "--libzmq",
                lib,
                "--out",
                args.out,
                "--json",
                *(["--fast"] if args.fast else []),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        if child.returncode != 0:
            console.print(
                f"{label}: the scenarios ended with exit status {child.returncode}; nothing written"
            )
            return (
                ExitStatus(child.returncode)
                if child.returncode in {s.value for s in ExitStatus}
                else ExitStatus.FAILED
            )
        outcomes = {}
        for name, data in json.loads(child.stdout).items():
            outcomes[name] = Outcome(
                [
                    Verdict(c, v["verdict"], v["because"], v["measurements"])
                    for c, v in data["claims"].items()
                ],
                data["measured"],
                data["figures"],
                data["run_dirs"],
            )
            for verdict in outcomes[name].verdicts:
                console.print(f"  {verdict.claim} on {label}: [bold]{verdict.verdict}[/]")
        by_library[label] = outcomes
    if args.json:
        print(
            json.dumps(
                {
                    label: {n: _as_json(o) for n, o in outcomes.items()}
                    for label, outcomes in by_library.items()
                },
                default=str,
            )
        )
    if args.markdown:
        _write_markdown(
            args.markdown,
            libraries_markdown(by_library, _command(), time.monotonic() - started, args.fast),
            console,
        )
    return ExitStatus.OK
