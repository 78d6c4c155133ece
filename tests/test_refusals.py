"""Refusals point at what to do now: a refusal of a combination that zmqload can carry another way
(one side alone with --role, a service of yours with req-rep, a device of yours, a CURVE server of
yours) names that way, in one line with the option and what is accepted, exit status 2. No refusal
says a feature is missing "(yet)". Checked in-process (zmqload.cli.main): nothing here starts a run."""

from __future__ import annotations

import ast
import contextlib
import io
import os
import pathlib
import re

import pytest

import zmqload
from zmqload import cli
from zmqload.contract import patterns
from zmqload.contract.report_options import REPORT_OPTIONS
from zmqload.contract.workload import OPTIONS, SEARCH_OPTIONS, SLO_OPTIONS

EP, EP2 = "tcp://127.0.0.1:5601", "tcp://127.0.0.1:5602"

# argv (OUT: the test's directory), the option the line names, words that point at the feature
CHANGED = [
    pytest.param(
        ["run", "--producers-connect", EP],
        "--producers-connect",
        [
            "without endpoints for the consumers",
            "--consumers-connect too",
            "a device of yours",
            "--consumers-bind",
            "--role producer to load a consumer of yours alone",
        ],
        id="producers-alone",
    ),
    pytest.param(
        ["run", "--consumers-connect", EP],
        "--consumers-connect",
        [
            "without endpoints for the producers",
            "--producers-connect too",
            "--producers-bind",
            "--role consumer with --duration SECONDS",
            "a producer of yours alone",
        ],
        id="consumers-alone",
    ),
    pytest.param(
        ["run", "--pattern", "pair", "--producers-connect", EP],
        "--producers-connect",
        ["--consumers-bind", "--role producer"],
        id="pair-producers-alone",
    ),
    pytest.param(
        ["run", "--pattern", "req-rep", "--producers-connect", EP],
        "--producers-connect",
        ["--role producer to load a request-reply service of yours"],
        id="req-rep-producers-alone",
    ),
    pytest.param(
        ["run", "--pattern", "req-rep", "--producers-connect", EP, "--consumers-connect", EP2],
        "--consumers-connect",
        [
            "through a broker of yours",
            "--role producer with --producers-connect alone",
            "your broker's frontend",
        ],
        id="req-rep-device",
    ),
    pytest.param(
        ["run", "--pattern", "proxy", "--master", "local[2]"],
        "--master",
        [
            "no --master with pattern proxy",
            "--pattern pub-sub with --producers-connect and --consumers-connect",
            "XSUB|XPUB proxy of yours",
        ],
        id="proxy-on-a-cluster",
    ),
    pytest.param(
        ["run", "--consumers-connect", "tcp://127.0.0.1"],
        "--consumers-connect",
        ["tcp://HOST:PORT", "HOST a host name or address, PORT a port number"],
        id="connect-form",
    ),
    pytest.param(
        ["run", "--producers-connect", "tcp://127.0.0.1:*", "--consumers-connect", EP2],
        "--producers-connect",
        ["* is for binding", "where your device listens", "tcp://127.0.0.1:5599"],
        id="star-device",
    ),
    pytest.param(
        ["run", "--role", "producer", "--producers-connect", "tcp://*:5601"],
        "--producers-connect",
        ["where your consumer listens", "tcp://127.0.0.1:5601"],
        id="star-consumer-of-yours",
    ),
    pytest.param(
        [
            "run",
            "--role",
            "producer",
            "--pattern",
            "req-rep",
            "--producers-connect",
            "tcp://localhost:0",
        ],
        "--producers-connect",
        ["where your service listens", "tcp://localhost:5599"],
        id="port-0-service-of-yours",
    ),
    pytest.param(
        ["run", "--role", "consumer", "--duration", "1", "--consumers-connect", "ipc://*"],
        "--consumers-connect",
        ["where your producer", "ipc:///tmp/NAME"],
        id="ipc-star-producer-of-yours",
    ),
    pytest.param(
        ["run", "--consumers-bind", EP, "--producers-connect", "tcp://127.0.0.1:*"],
        "--producers-connect",
        ["the endpoints the consumers bind (--consumers-bind)"],
        id="star-zmqloads-consumers",
    ),
    pytest.param(
        ["run", "--role", "producer", "--producers-connect", EP, "--max-loss", "0"],
        "--max-loss",
        ["no SLO options with --role producer", "or --pattern req-rep against a service of yours"],
        id="slo-producers-alone",
    ),
    pytest.param(
        ["capacity", "--role", "producer", "--producers-connect", EP],
        "--role",
        [
            "--role both",
            "--role producer with --pattern req-rep against a service of yours",
            "judged by its answers",
        ],
        id="capacity-producers-alone",
    ),
    pytest.param(
        ["capacity", "--role", "consumer", "--consumers-bind", EP],
        "--role",
        ["your producer sent is not seen", "--role both", "--role producer with --pattern req-rep"],
        id="capacity-consumers-alone",
    ),
    pytest.param(
        [
            "run",
            "--pattern",
            "pub-sub",
            "--producers-connect",
            EP,
            "--consumers-connect",
            EP2,
            "--curve",
            "on",
            "--curve-server-key",
            "OUT/server.key",
            "--curve-server-cert",
            "OUT/server.key_secret",
        ],
        "--curve-server-cert",
        [
            "binds no socket here",
            f"connects to yours at {EP}, {EP2}",
            "no --curve-server-cert",
            "--curve-server-key names",
        ],
        id="cert-with-a-device",
    ),
    pytest.param(
        [
            "run",
            "--role",
            "producer",
            "--producers-connect",
            EP,
            "--curve",
            "on",
            "--curve-server-cert",
            "OUT/server.key_secret",
        ],
        "--curve-server-cert",
        ["binds no socket here", f"connects to yours at {EP};"],
        id="cert-with-a-consumer-of-yours",
    ),
    pytest.param(
        ["run", "--curve", "on", "--curve-server-key", "OUT/server.key"],
        "--curve-server-key",
        [
            "no server of yours",
            "a key pair made per run, or --curve-server-cert's",
            "--role consumer --consumers-connect",
        ],
        id="key-with-zmqloads-own",
    ),
    pytest.param(
        ["report", "s3://bucket/runs", "--remote", "sc://127.0.0.1:15002"],
        "--remote",
        ["accepted: no --remote"],
        id="report-uri-remote",
    ),
]


def cli_main(argv: list[str]) -> tuple[int, str]:
    """`zmqload ARGV` in this process: its exit status and its stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = cli.main(argv)
        except SystemExit as exc:  # argparse's refusals
            status = exc.code
    return int(status), err.getvalue()


@pytest.mark.parametrize("argv, option, words", CHANGED)
def test_a_refusal_points_at_what_to_do_now(tmp_path, argv, option, words):
    out = tmp_path / "out"
    argv = [a.replace("OUT", str(tmp_path)) for a in argv]
    if argv[0] != "report":
        argv += ["--out", str(out)]
    status, err = cli_main(argv)
    assert status == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"error: {option}: " in lines[0] and "accepted: " in lines[0], lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert not YET.search(lines[0]), lines[0]
    assert "nothing to connect to at *" not in lines[0]
    if not any("*" in a for a in argv):  # a `*` the user did not write is not theirs to drop
        assert "* is for binding" not in lines[0], lines[0]
    assert not out.exists() or not os.listdir(out), "nothing may start on bad input"


# -- no refusal says "(yet)" ----------------------------------------------------------------------
YET = re.compile(r"\byet\b", re.IGNORECASE)
"""Catches "(yet)", "not yet", "yet)" and "not measured yet" alike."""

PACKAGE = pathlib.Path(zmqload.__file__).parent
ERROR_CALLS = {
    "ConfigError",
    "ReportInputError",
    "RecordError",
    "RunError",
    "ArgumentTypeError",
    "refuse",
    "_refuse",
    "refuse_unjudged",
    "error",
    "exit",
}
"""Calls whose text reaches the user as a refusal or an error line (their helpers included)."""
REFUSAL_TEXT = re.compile(r"(ACCEPTED|_FORMS|HINT)$")
"""Module constants spliced into refusals (SIZE_ACCEPTED, KEY_FILE_FORMS, INSTALL_HINT, ...)."""


def _texts(node: ast.AST) -> list[str]:
    return [
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def refusal_texts(source: str) -> list[tuple[int, str]]:
    """Every string (f-string pieces included) in an error call, a constant spliced into one, or a
    pattern's `no_device` (the reason its device refusal gives), with its line."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else ""
            )
            parts: list[ast.AST] = []
            if name in ERROR_CALLS:
                parts = [*node.args, *(k.value for k in node.keywords)]
            else:
                parts = [k.value for k in node.keywords if k.arg == "no_device"]
            found += [(node.lineno, text) for part in parts for text in _texts(part)]
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and REFUSAL_TEXT.search(t.id) for t in node.targets
        ):
            found += [(node.lineno, text) for text in _texts(node.value)]
    return found


def test_the_scanner_sees_the_refusals_it_checks():
    old = (
        'raise ConfigError(flag, f"got {v!r}; zmqload loads both sides of a system, not one alone (yet); "\n'
        '                  "accepted: ...")\n'
        'register(Pattern("req-rep", no_device="round trips through a broker are not measured yet"))\n'
        'SOME_ACCEPTED = "not yet"\n'
    )
    assert sorted(line for line, text in refusal_texts(old) if YET.search(text)) == [1, 3, 4]
    everything = [t for path in PACKAGE.rglob("*.py") for _, t in refusal_texts(path.read_text())]
    assert len(everything) > 300, len(everything)  # the scan reaches the package's refusals


def test_no_refusal_says_a_feature_is_not_there_yet():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, text in refusal_texts(path.read_text())
        if YET.search(text)
    ]
    # what the option tables put after "accepted:" and the patterns' reasons, as built
    built = [
        (f"{opt.flag} accepts", opt.accepts)
        for table in (OPTIONS, SLO_OPTIONS, SEARCH_OPTIONS, REPORT_OPTIONS)
        for opt in table.values()
    ]
    built += [(f"pattern {p.name} no_device", p.no_device) for p in patterns.PATTERNS.values()]
    found += [f"{where}: {text!r}" for where, text in built if YET.search(text)]
    assert not found, "refusals that say '(yet)' (say what to do now instead):\n" + "\n".join(found)


def test_connect_endpoints_accept_text_fits_any_input():
    """The "accepted:" of a connect option's form refusal describes the form; it says nothing about
    * (refused apart, with its own line) that an input without one would not have."""
    for name in ("producers_connect", "consumers_connect"):
        assert "*" not in OPTIONS[name].accepts, OPTIONS[name].accepts
