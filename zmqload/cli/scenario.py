"""`zmqload scenario list [--json] | run NAME... | run --all [--fast] [--markdown [FILE]]`."""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import sys
import time
from typing import TYPE_CHECKING, Any

from ..runner.preflight import check_output_dir
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
    running = actions.add_parser("run", help="run some scenarios (or --all) and give each a verdict")
    running.add_argument("names", nargs="*", metavar="NAME", help="scenario names (see: zmqload scenario list)")
    running.add_argument("--all", action="store_true", help="run every scenario")
    running.add_argument("--fast", action="store_true", help="short form (smaller counts and delays), as in the tests")
    running.add_argument("--out", default="runs/scenarios", help="parent of the run directories (default %(default)s)")
    running.add_argument("--markdown", nargs="?", const="-", default=None, metavar="FILE",
                         help="write the verdict table as Markdown to FILE (or stdout)")
    running.add_argument("--json", action="store_true", help="print the outcomes as JSON")
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
    from ..scenarios import CLAIMS, SCENARIOS
    v = versions.versions()
    scope = ("" if len(outcomes) == len(SCENARIOS) else f" It covers {len(outcomes)} of the {len(SCENARIOS)} "
             "scenarios only.") + (" Short form (--fast): the figures are not the full measurements." if fast else "")
    lines = [f"# Verdicts, measured on libzmq {v['libzmq']}", "",
             f"Generated whole by `{command}` on {_dt.date.today().isoformat()} in {took_s / 60:.1f} minutes, with "
             f"zmqload {v['zmqload']} and the engine's libzmq {v['libzmq']} (pyzmq {v['pyzmq']} bundles libzmq "
             f"{v['pyzmq_libzmq']}).{scope} Do not edit it by hand: run the command again. Every figure below was "
             "measured, not assumed.", "",
             "| claim | source's words | verdict | because | scenario |", "|---|---|---|---|---|"]
    rows = sorted(((verdict, name) for name, outcome in outcomes.items() for verdict in outcome.verdicts),
                  key=lambda item: list(CLAIMS).index(item[0].claim))
    for verdict, name in rows:
        claim = CLAIMS[verdict.claim].text.replace("|", "\\|")
        lines.append(f"| {verdict.claim} | {claim} | **{verdict.verdict}** | {verdict.because.replace('|', '/')} "
                     f"| `{name}` |")
    lines += ["", "## Measurements", ""]
    for name, outcome in outcomes.items():
        lines += [f"### {name}: {SCENARIOS[name].title}", ""]
        lines += [f"- {m}" for m in outcome.measured]
        lines.append("")
    return "\n".join(lines)


def _listing() -> list[dict[str, Any]]:
    from ..scenarios import CLAIMS, SCENARIOS
    return [{"name": s.name, "title": s.title, "expected_s": s.expected_s,
             "claims": [{"id": c, "source": CLAIMS[c].source, "text": CLAIMS[c].text} for c in s.claims]}
            for s in SCENARIOS.values()]


def _as_json(outcome: Outcome) -> dict[str, Any]:
    return {"claims": {v.claim: {"verdict": v.verdict, "because": v.because, "measurements": v.measurements}
                       for v in outcome.verdicts},
            "measured": outcome.measured, "figures": outcome.figures, "run_dirs": outcome.run_dirs}


def run(args: argparse.Namespace) -> ExitStatus:
    from rich.console import Console

    from ..scenarios import CLAIMS, SCENARIOS, get, run_scenario
    console = Console(stderr=args.json)         # stdout is the JSON's
    names = list(SCENARIOS) if args.all else args.names
    if not names:
        raise ConfigError("NAME", f"name a scenario or give --all; accepted: {', '.join(SCENARIOS)}")
    for name in names:
        get(name)
    check_output_dir(args.out)
    if not args.fast:
        console.print(_expected(names))
    outcomes, started = {}, time.monotonic()
    for name in names:
        scenario = SCENARIOS[name]
        if not args.json:
            console.rule(f"[bold]{name}[/]: {scenario.title}")
        t0 = time.monotonic()
        outcome = run_scenario(name, args.out, fast=args.fast)
        outcomes[name] = outcome
        took = time.monotonic() - t0
        if not args.fast and took > 1.5 * scenario.expected_s + 10:     # the figure `list` shows is out of date
            console.print(f"  {name} took {took:.0f} s, expected {about(scenario.expected_s)}: measure it again on a "
                          "quiet machine and update its expected_s")
        if not args.json:
            for line in outcome.measured:
                console.print(f"  measured: {line}")
            for verdict in outcome.verdicts:
                console.print(f"  {verdict.claim} {CLAIMS[verdict.claim].text}\n    verdict: [bold]{verdict.verdict}[/] "
                              f"({verdict.because})")
            console.print(f"  runs: {', '.join(os.path.basename(d) for d in outcome.run_dirs)} in {args.out}")
    if args.json:
        print(json.dumps({n: _as_json(o) for n, o in outcomes.items()}, default=str))
    if args.markdown:
        text = verdict_markdown(outcomes, _command(), time.monotonic() - started, args.fast)
        if args.markdown == "-":
            sys.stdout.write(text + "\n")
        else:
            with open(args.markdown, "w") as f:
                f.write(text + "\n")
            console.print(f"verdict table: {args.markdown}")
    return ExitStatus.OK
