"""`zmqload info`: versions, the real defaults of fresh sockets, the clock, Java."""

from __future__ import annotations

import argparse
import json

from ..contract.workload import OPTIONS
from ..errors import ExitStatus

NAME = "info"
HELP = "libzmq/pyzmq versions, real socket defaults, clock"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the facts as JSON")
    libzmq = OPTIONS["libzmq"]
    parser.add_argument(
        libzmq.flag,
        default=libzmq.default,
        metavar="LIBZMQ",
        help="the libzmq whose fresh-socket defaults are measured: " + libzmq.accepts,
    )


def run(args: argparse.Namespace) -> ExitStatus:
    from rich.console import Console
    from rich.table import Table

    from ..info import gather
    from ..runner.preflight import use_libzmq

    use_libzmq(args.libzmq)
    facts = gather()
    if args.json:
        print(json.dumps(facts, indent=2))
        return ExitStatus.OK
    console = Console()
    v = facts["versions"]
    # short lines and one row per option, one column per socket type: fits 80 columns
    console.print(f"zmqload {v['zmqload']}, engine libzmq {v['libzmq']}, python {v['python']}")
    console.print(f"pyzmq {v['pyzmq']} (bundled libzmq {v['pyzmq_libzmq']})")
    console.print(
        f"CURVE (--curve on): {'yes' if facts['curve'] else 'no: the engine libzmq has no libsodium'}"
    )
    for lib in facts["libraries"]:  # what --libzmq can name
        console.print(
            f"--libzmq {lib['choice']}: "
            + (
                f"libzmq {lib['version']}, {lib['file']}, sha256 "
                f"{lib['sha256'][:16]}, has {' '.join(lib['capabilities'])}"
                if not lib["missing"]
                else f"none ({lib['missing']})"
            )
        )
    sockets = list(facts["socket_defaults"])
    table = Table(title=f"fresh-socket defaults, libzmq {v['libzmq']} (measured)")
    table.add_column("option")
    for name in sockets:
        table.add_column(name, justify="right")
    for option in next(iter(facts["socket_defaults"].values())):
        table.add_row(option, *(str(facts["socket_defaults"][s][option]) for s in sockets))
    console.print(table)
    c = facts["clock"]
    console.print(f"clock: {c['source']}, resolution {c['resolution_ns']} ns")
    console.print(f"clock pair: realtime {c['realtime_ns']}, monotonic {c['monotonic_ns']}")
    console.print(
        f"host: {facts['host']['hostname']}, {facts['host']['cpus']} CPUs, {facts['host']['platform']}"
    )
    console.print(
        f"java (for Spark reports): {facts['java'] or 'not found: install a Java 17+ runtime'}"
    )
    return ExitStatus.OK
