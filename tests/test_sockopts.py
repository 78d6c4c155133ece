"""The socket options users reach for around restarts (--router-handover, --xpub-nodrop, the
heartbeats, --router-mandatory): refused in one line where no socket of zmqload's has the type or
transport libzmq applies them to, and where the run's libzmq is older than the option; all in
this process."""

from __future__ import annotations

import contextlib
import io

import pytest

from zmqload import Workload, cli
from zmqload.contract.run_record import Libzmq
from zmqload.contract.workload import OPTIONS
from zmqload.errors import ConfigError
from zmqload.runner.preflight import check_libzmq_options

BEATS = dict(heartbeat_ivl_ms=100, heartbeat_timeout_ms=300)


@pytest.mark.parametrize(
    "values, flag, why",
    [
        (
            dict(router_mandatory=True, pattern="dealer-router"),
            "--router-mandatory",
            "only receive",
        ),
        (dict(router_mandatory=True), "--router-mandatory", "only receive"),
        (dict(router_handover=True), "--router-handover", "no ROUTER"),
        (dict(router_handover=True, pattern="req-rep"), "--router-handover", "no ROUTER"),
        (
            dict(
                router_handover=True,
                pattern="dealer-router",
                role="producer",
                producers_connect="tcp://127.0.0.1:5555",
            ),
            "--router-handover",
            "--role producer",
        ),
        (dict(xpub_nodrop=True, pattern="pub-sub"), "--xpub-nodrop", "a PUB is not an XPUB"),
        (dict(xpub_nodrop=True), "--xpub-nodrop", "no XPUB"),
        (dict(BEATS, transport="inproc"), "--heartbeat-ivl-ms", "inproc"),
        (dict(BEATS, endpoint="inproc://x"), "--heartbeat-ivl-ms", "inproc"),
        (dict(heartbeat_timeout_ms=300), "--heartbeat-timeout-ms", "without --heartbeat-ivl-ms"),
        (dict(heartbeat_ttl_ms=300), "--heartbeat-ttl-ms", "without --heartbeat-ivl-ms"),
        (dict(BEATS, heartbeat_ttl_ms=6_553_600), "--heartbeat-ttl-ms", "6553599"),
        (dict(heartbeat_ivl_ms=-1), "--heartbeat-ivl-ms", "from 0"),
    ],
)
def test_refused_in_one_line_where_no_socket_of_zmqloads_takes_it(values, flag, why):
    with pytest.raises(ConfigError) as refused:
        Workload(**values).validate()
    line = str(refused.value)
    assert line.startswith(f"{flag}: ") and why in line and "accepted: " in line, line
    assert "\n" not in line


@pytest.mark.parametrize(
    "values",
    [
        dict(router_handover=True, pattern="dealer-router"),
        # a user's DEALERs with fixed routing ids, zmqload's ROUTER recording them
        dict(
            router_handover=True,
            pattern="dealer-router",
            role="consumer",
            consumers_bind="tcp://127.0.0.1:5555",
            duration=1,
        ),
        dict(xpub_nodrop=True, pattern="proxy"),
        dict(BEATS, heartbeat_ttl_ms=6_553_599, transport="ipc"),
        dict(BEATS, pattern="req-rep", role="producer", producers_connect="tcp://127.0.0.1:5555"),
    ],
)
def test_accepted_where_a_socket_of_zmqloads_takes_it(values):
    w = Workload(**values).validate()
    assert all(getattr(w, name) == OPTIONS[name].convert(value) for name, value in values.items())


def test_the_heartbeats_reach_every_socket_by_libzmqs_names():
    w = Workload(heartbeat_ivl_ms="1k", heartbeat_ttl_ms=500, heartbeat_timeout_ms=300)
    assert w.heartbeats == {"HEARTBEAT_IVL": 1000, "HEARTBEAT_TTL": 500, "HEARTBEAT_TIMEOUT": 300}
    assert set(Workload().heartbeats.values()) == {None}


def test_a_libzmq_older_than_the_option_is_refused_naming_both():
    def lib(version: str) -> Libzmq:
        return Libzmq(choice="/opt/libzmq.so", file="/opt/libzmq.so", version=version)

    cases = [
        (Workload(**BEATS), "4.1.8", "--heartbeat-ivl-ms", "4.2"),
        (
            Workload(router_handover=True, pattern="dealer-router"),
            "4.0.10",
            "--router-handover",
            "4.1",
        ),
        (Workload(xpub_nodrop=True, pattern="proxy"), "4.0.10", "--xpub-nodrop", "4.1"),
    ]
    for w, version, flag, wanted in cases:
        with pytest.raises(ConfigError) as refused:
            check_libzmq_options(w, lib(version))
        line = str(refused.value)
        assert line.startswith(f"{flag}: ") and f"libzmq {version}" in line, line
        assert f"accepted: libzmq {wanted} or later" in line
        check_libzmq_options(w, lib("4.3.5"))  # no error
    check_libzmq_options(Workload(), lib("4.0.1"))  # nothing set: any 4.x


def test_the_command_refuses_with_exit_2_in_one_line(tmp_path):
    err = io.StringIO()
    argv = ["run", "--pattern", "pub-sub", "--xpub-nodrop", "--out", str(tmp_path / "out")]
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = cli.main(argv)
    lines = err.getvalue().splitlines()
    assert status == 2 and len(lines) == 1 and "--xpub-nodrop: " in lines[0], err.getvalue()
    assert not (tmp_path / "out").exists()


def test_each_option_is_in_the_socket_options_group():
    for name in (
        "router_mandatory",
        "router_handover",
        "xpub_nodrop",
        "heartbeat_ivl_ms",
        "heartbeat_ttl_ms",
        "heartbeat_timeout_ms",
    ):
        assert OPTIONS[name].group.startswith("socket options"), name
