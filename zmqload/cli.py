"""`python -m zmqload run | info | report | ...`: argument parsing and exit statuses.

Exit statuses: 0 done, 1 the run failed, 2 bad input (one line naming the option and
what it accepts, no traceback), 130 interrupted (records kept, run.json says so).
"""
from __future__ import annotations

import argparse
import importlib
import json
import re
import sys

from .config import COMPRESSIONS, SEND_MODES, TRANSPORTS, Workload
from .errors import ConfigError, ZmqloadError

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 1, 2, 130

# Subcommands that live in their own modules: name -> module with add_arguments(parser)
# and run(args) -> int.
EXTERNAL_COMMANDS = {
    "report": ("zmqload.report.command", "Spark analysis and HTML capacity report of run directories"),
    "scenario": ("zmqload.scenario_command", "named HWM / linger / backpressure questions, measured"),
    "sweep": ("zmqload.sweep_command", "run the cartesian product of option lists, one run directory each"),
}


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports bad input as one line and exit status 2."""

    def error(self, message: str):
        message = re.sub(r"^argument ([^:]+): ", lambda m: m.group(1).split("/")[-1] + ": ", message)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _number(text: str, accepted: str, allow_float: bool = False):
    multipliers = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}
    t = text.strip().lower().replace("_", "")
    factor = 1
    if t and t[-1] in multipliers:
        factor, t = multipliers[t[-1]], t[:-1]
    try:
        value = float(t) * factor if (allow_float or factor != 1 or "e" in t) else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; accepted: {accepted}")
    if not allow_float:
        if value != int(value):
            raise argparse.ArgumentTypeError(f"got {text!r}; accepted: {accepted}")
        value = int(value)
    return value


def int_arg(accepted: str):
    def parse(text: str) -> int:
        return _number(text, accepted)
    return parse


def float_arg(accepted: str):
    def parse(text: str) -> float:
        return _number(text, accepted, allow_float=True)
    return parse


def rate_arg(text: str) -> int:
    """Rates accept 10k, 1M, 250000, and max (= 0: unpaced)."""
    if text.strip().lower() in ("max", "0"):
        return 0
    return _number(text, "messages per second (e.g. 50000, 10k, 1M) or max")


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    d = Workload()
    g = parser.add_argument_group("workload")
    g.add_argument("--pattern", default=d.pattern, help="push-pull, pub-sub, proxy, pair, dealer-router, req-rep (default %(default)s)")
    g.add_argument("--transport", default=d.transport, help=f"{', '.join(TRANSPORTS)} (default %(default)s)")
    g.add_argument("--host", default=d.host, help="tcp host to bind/connect (default %(default)s)")
    g.add_argument("--port", type=int_arg("a tcp port 0-65535"), default=d.port,
                   help="first tcp port, 0 = any free port (default)")
    g.add_argument("--endpoint", default=None, help="explicit endpoint, e.g. tcp://127.0.0.1:5555 or ipc:///tmp/x")
    g.add_argument("--size", type=int_arg("bytes >= 16"), default=d.size, help="message size in bytes, >= 16 (default %(default)s)")
    g.add_argument("--count", type=int_arg("a positive integer (e.g. 1000000 or 1M)"), default=None,
                   help=f"messages per producer (default {d.count or 100_000} unless --duration)")
    g.add_argument("--duration", type=float_arg("seconds > 0"), default=None, help="seconds, wall-clock bound")
    g.add_argument("--rate", type=rate_arg, default=d.rate, help="msg/s per producer: 50000, 10k, 1M or max (default: max)")
    g.add_argument("--producers", type=int_arg("an integer 1-64"), default=d.producers)
    g.add_argument("--consumers", type=int_arg("an integer 1-64"), default=d.consumers)
    g.add_argument("--send-mode", default=d.send_mode, help=f"{', '.join(SEND_MODES)} (default %(default)s)")
    g.add_argument("--sndtimeo-ms", type=int_arg("milliseconds >= 1"), default=d.sndtimeo_ms,
                   help="SNDTIMEO for --send-mode timeout (default %(default)s)")
    g.add_argument("--consumer-delay-us", type=float_arg("microseconds >= 0"), default=d.consumer_delay_us,
                   help="simulated work per received message (slow consumer)")
    g.add_argument("--drain-timeout-ms", type=int_arg("milliseconds >= 1"), default=d.drain_timeout_ms,
                   help="consumers stop after this long without messages once producers are done")
    g.add_argument("--drain", default=d.drain, choices=("fast", "slow", "none"),
                   help="once the producers are done: fast = consumers stop their simulated work and read what "
                        "is queued (default), slow = keep it, none = close at once (unreceived: stranded)")
    g.add_argument("--drain-limit-s", type=float_arg("seconds > 0"), default=d.drain_limit_s,
                   help="cut the drain short after this long (default %(default)s; unreceived: stranded)")
    g.add_argument("--close-pause-ms", type=int_arg("milliseconds >= 0"), default=d.close_pause_ms,
                   help="producers pause this long after their last send before close/term")
    g.add_argument("--close-order", default=d.close_order,
                   help="producer-first (default; consumers drain) or consumer-first (consumers close first)")
    g.add_argument("--join-delay-ms", type=int_arg("milliseconds >= 0"), default=d.join_delay_ms,
                   help="consumers connect this long after the producers start (slow joiner; no warm-up)")
    g.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="start without checking that every consumer hears every producer (slow-joiner studies)")
    s = parser.add_argument_group("socket options (default: libzmq's own)")
    s.add_argument("--sndhwm", type=int_arg("an integer >= 0"), default=None, help="producers' SNDHWM")
    s.add_argument("--rcvhwm", type=int_arg("an integer >= 0"), default=None, help="consumers' RCVHWM")
    s.add_argument("--proxy-sndhwm", type=int_arg("an integer >= 0"), default=None,
                   help="pattern proxy: SNDHWM of the proxy's XPUB")
    s.add_argument("--proxy-rcvhwm", type=int_arg("an integer >= 0"), default=None,
                   help="pattern proxy: RCVHWM of the proxy's XSUB")
    s.add_argument("--linger", dest="linger_ms", type=int_arg("-1, 0 or milliseconds"), default=None,
                   help="producers' LINGER in ms (-1 = forever)")
    s.add_argument("--sndbuf", type=int_arg("bytes >= 0"), default=None, help="producers' SO_SNDBUF")
    s.add_argument("--rcvbuf", type=int_arg("bytes >= 0"), default=None, help="consumers' SO_RCVBUF")
    s.add_argument("--immediate", action="store_true", help="ZMQ_IMMEDIATE on both sides")
    s.add_argument("--io-threads", type=int_arg("an integer 1-64"), default=d.io_threads)
    o = parser.add_argument_group("recording")
    o.add_argument("--out", default=d.out, help="parent directory of run directories (default %(default)s)")
    o.add_argument("--run-name", default=None, help="run directory name (default: time-pattern-transport-id)")
    o.add_argument("--compression", default=d.compression, help=f"Parquet codec: {', '.join(COMPRESSIONS)}")


WORKLOAD_FIELDS = ("pattern", "transport", "host", "port", "endpoint", "size", "count", "duration", "rate",
                   "producers", "consumers", "send_mode", "sndtimeo_ms", "consumer_delay_us",
                   "drain_timeout_ms", "drain", "drain_limit_s", "warmup", "join_delay_ms", "close_pause_ms", "close_order", "proxy_sndhwm",
                   "proxy_rcvhwm", "sndhwm", "rcvhwm", "linger_ms", "sndbuf", "rcvbuf",
                   "immediate", "io_threads", "out", "run_name", "compression")


def workload_from_args(args: argparse.Namespace) -> Workload:
    return Workload(**{name: getattr(args, name) for name in WORKLOAD_FIELDS})


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .display import LiveProgress, print_summary
    from .runner import run

    workload = workload_from_args(args)
    workload.validate()
    progress = None if args.json or args.quiet else LiveProgress()
    try:
        result = run(workload, progress=progress)
    except KeyboardInterrupt:
        print("zmqload run: interrupted; what was recorded is kept (run.json status: interrupted)",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.json:
        print(json.dumps(result.summary(), default=str))
    elif not args.quiet:
        print_summary(result, Console())
    return 0 if result.status == "complete" else EXIT_FAILED


def cmd_info(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from .info import gather
    facts = gather()
    if args.json:
        print(json.dumps(facts, indent=2))
        return 0
    console = Console()
    v = facts["versions"]
    console.print(f"zmqload {v['zmqload']}  engine libzmq {v['libzmq']}  pyzmq {v['pyzmq']} "
                  f"(bundled libzmq {v['pyzmq_libzmq']})  python {v['python']}")
    table = Table(title=f"defaults of fresh sockets, libzmq {v['libzmq']} (as measured, not as documented)")
    table.add_column("socket")
    options = list(next(iter(facts["socket_defaults"].values())))
    for option in options:
        table.add_column(option, justify="right")
    for name, values in facts["socket_defaults"].items():
        table.add_row(name, *(str(values[o]) for o in options))
    console.print(table)
    c = facts["clock"]
    console.print(f"clock: {c['source']} (resolution {c['resolution_ns']} ns); realtime/monotonic pair "
                  f"{c['realtime_ns']} / {c['monotonic_ns']}")
    console.print(f"host: {facts['host']['hostname']}, {facts['host']['cpus']} CPUs, {facts['host']['platform']}")
    console.print(f"java (for Spark reports): {facts['java'] or 'not found: install a Java 17+ runtime'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="zmqload", description="Load generator and capacity planner for ZeroMQ.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    sub.required = True
    run_parser = sub.add_parser("run", help="run one workload and record every message")
    add_workload_arguments(run_parser)
    run_parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    run_parser.add_argument("--quiet", action="store_true", help="print nothing but errors")
    run_parser.set_defaults(handler=cmd_run)
    info_parser = sub.add_parser("info", help="libzmq/pyzmq versions, real socket defaults, clock")
    info_parser.add_argument("--json", action="store_true")
    info_parser.set_defaults(handler=cmd_info)
    for name, (module_name, help_text) in EXTERNAL_COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        command_parser = sub.add_parser(name, help=help_text)
        module.add_arguments(command_parser)
        command_parser.set_defaults(handler=module.run)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except ConfigError as exc:
        print(f"zmqload {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ZmqloadError as exc:
        print(f"zmqload {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"zmqload {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
