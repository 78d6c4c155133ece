"""The connection-reset fault (--reset-at): when due, the kernel aborts every tcp connection of the
run's data sockets (sock_destroy, as `ss -K` does) and libzmq reconnects. The privilege is proven
before the run (`check_can_reset`): unprivileged, `ss -K` silently kills nothing."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field

from .. import _engine
from ..contract.run_record import Reset
from ..contract.workload import Workload
from ..errors import ConfigError, RunError

SS_TIMEOUT_S = 5.0
NEEDED = (
    "root or CAP_NET_ADMIN, iproute2's ss, and a Linux kernel with sock_destroy "
    "(CONFIG_INET_DIAG_DESTROY)"
)


def _ss_kill(ports: Iterable[int]) -> tuple[list[str], str]:
    """`ss -K` over the established tcp connections with a local or remote port in `ports`:
    (the lines of the sockets it destroyed, what it said on stderr)."""
    terms: list[str] = []
    for port in sorted(set(ports)):
        terms += (["or"] if terms else []) + [
            "sport",
            "=",
            f":{port}",
            "or",
            "dport",
            "=",
            f":{port}",
        ]
    done = subprocess.run(
        ["ss", "-K", "-t", "-n", "-H", "state", "established", "(", *terms, ")"],
        capture_output=True,
        text=True,
        timeout=SS_TIMEOUT_S,
        check=False,
    )
    return [line for line in done.stdout.splitlines() if line.strip()], done.stderr.strip()


def _connections(lines: list[str]) -> int:
    """Distinct connections among `ss` lines (both ends of one count once)."""
    ends = set()
    for line in lines:
        local, peer = line.split()[-2:]
        ends.add(frozenset((local, peer)))
    return len(ends)


def check_can_reset(w: Workload) -> None:
    """--reset-at needs the privilege to destroy sockets: proven on a loopback pair of this
    process's own (both ends must end in an error). ConfigError naming --reset-at otherwise."""
    if not w.reset_times:
        return

    def refuse(why: str) -> ConfigError:
        return ConfigError(
            "--reset-at",
            f"got {w.reset_at!r}, but this process cannot abort tcp connections "
            f"({why}); accepted: a run with {NEEDED}, or no --reset-at",
        )

    if shutil.which("ss") is None:
        raise refuse("no ss on PATH")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                try:
                    _, said = _ss_kill([port])
                except (OSError, subprocess.SubprocessError) as exc:
                    raise refuse(f"ss: {exc}") from None
                ended = [
                    s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) for s in (client, accepted)
                ]
    if not all(ended):
        why = said.splitlines()[0] if said else "ss -K destroyed nothing"
        raise refuse(why)


@dataclass
class Resets:
    """The run's reset schedule: `poll` makes the resets that are due (the controller calls it while
    the producers send); `made` is what run.json records."""

    t0_ns: int  # the schedule's start, from which --reset-at counts
    at_ns: list[int]  # when each reset is due, on the records' clock
    ports: frozenset[int]  # the data sockets' tcp ports (the binders', zmqload's proxy's)
    made: list[Reset] = field(default_factory=list)  # RunState.resets

    @classmethod
    def plan(cls, w: Workload, t0_ns: int, endpoints: Iterable[str], made: list[Reset]) -> Resets:
        """The resets of --reset-at after t0, on the connections to `endpoints` (what the run's
        connecting sockets connect to), recorded in `made`."""
        ports = frozenset(int(e.rpartition(":")[2]) for e in endpoints if e.startswith("tcp://"))
        return cls(t0_ns, [t0_ns + round(s * 1e9) for s in w.reset_times], ports, made)

    def poll(self) -> None:
        while len(self.made) < len(self.at_ns) and _engine.now_ns() >= self.at_ns[len(self.made)]:
            asked = _engine.now_ns()
            try:
                lines, _ = _ss_kill(self.ports)
            except (
                OSError,
                subprocess.SubprocessError,
            ) as exc:  # proven before the run; gone since?
                raise RunError(
                    f"the connection reset due at {(self.at_ns[len(self.made)] - self.t0_ns) / 1e9:g} s "
                    f"failed: ss: {exc}"
                ) from None
            # the records' mark is when the connections were surely gone: ss starts in a few ms, and
            # what was sent and received meanwhile went through the old connection
            done = _engine.now_ns()
            self.made.append(
                Reset(
                    t_ns=done,
                    at_s=(done - self.t0_ns) / 1e9,
                    took_ns=done - asked,
                    connections=_connections(lines),
                )
            )
