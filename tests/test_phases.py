"""The controller's phases one at a time, without spawning: workers are scripted peers that
speak the real control protocol over a real control socket (as the engine tests use plain
pyzmq peers), so each phase is checked against the contract, not against a mock of it."""

from __future__ import annotations

import shutil
import threading
import time

import pytest

from zmqload.contract.workload import Workload
from zmqload.contract import control
from zmqload.contract.ids import Role
from zmqload.errors import RunError
from zmqload.runner.channel import ControlClient, ControlServer, new_endpoint
from zmqload.runner.controller import Controller


class ScriptedLauncher:
    """Starts each worker as a thread running `script(spec, client)`."""

    def __init__(self, scripts):
        self.scripts, self.threads, self.specs = scripts, {}, {}

    def start(self, spec):
        def body():
            client = ControlClient(spec.control, spec.worker)
            try:
                self.scripts[spec.role](spec, client)
            finally:
                client.close()

        self.specs[spec.worker] = spec
        self.threads[spec.worker] = threading.Thread(target=body, daemon=True)
        self.threads[spec.worker].start()

    def all_started(self):
        """Each script began at its `start`."""

    def dead(self, workers):
        return [w for w in workers if w in self.threads and not self.threads[w].is_alive()]

    def how_it_ended(self, worker):
        return "script ended"


def until(client, kind, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = client.recv(50)
        if isinstance(message, kind):
            return message
    raise AssertionError(f"no {kind.__name__} within {timeout_s} s")


@pytest.fixture
def controller_for():
    made = []

    def make(scripts, **options):
        endpoint, directory = new_endpoint()
        server = ControlServer(endpoint)
        w = Workload(**{"pattern": "pub-sub", "warmup": False, **options})
        c = Controller(
            w.validate(), "/nonexistent", "phase-test", server, ScriptedLauncher(scripts), directory
        )
        made.append((server, directory))
        return c

    yield make
    for server, directory in made:
        server.close()
        shutil.rmtree(directory, ignore_errors=True)


def test_launch_and_connect_hand_the_binders_endpoint_to_the_other_side(controller_for):
    got = {}

    def producer(spec, client):  # pub-sub: producers bind
        client.send(control.Ready([spec.bind[0].replace("*", "5999")]))
        until(client, control.Stop)

    def consumer(spec, client):
        client.send(control.Ready())
        got["connect"] = until(client, control.Connect).endpoints
        client.send(control.Connected())
        until(client, control.Stop)

    c = controller_for({Role.PRODUCER: producer, Role.CONSUMER: consumer}, consumers=2)
    c.launch()
    assert c.connect() == []
    assert got["connect"] == ["tcp://127.0.0.1:5999"]
    assert c.state.connected == set(c.state.consumers)
    c.send_all(c.state.everyone, control.Stop())


def test_a_worker_that_dies_while_launching_is_named(controller_for):
    def producer(spec, client):
        return  # ends without a word

    c = controller_for({Role.PRODUCER: producer, Role.CONSUMER: producer})
    with pytest.raises(
        RunError, match=r"worker p0 ended \(script ended\) while waiting for the workers to start"
    ):
        c.launch()


@pytest.mark.parametrize(
    "behaviour,ended", [("all", "complete"), ("some", "idle"), ("trickle", "limit")]
)
def test_drain_ends_complete_idle_or_at_its_limit(controller_for, behaviour, ended):
    def consumer(spec, client):
        until(client, control.ProducersDone)
        client.send(control.Draining())
        count = {"all": 100, "some": 60}.get(behaviour, 0)
        client.send(control.Progress(count))
        while behaviour == "trickle":
            if isinstance(client.recv(40), control.Stop):
                return
            count += 1  # keeps arriving: never idle, never complete
            client.send(control.Progress(count))
        until(client, control.Stop)

    c = controller_for({Role.CONSUMER: consumer}, drain_timeout_ms=200, drain_limit_s=1.0)
    c.state.done = {
        p: control.ProducerDone(control.SendCounters(100, 100)) for p in c.state.producers
    }
    for worker in c.state.consumers:
        c.start_worker(worker, [])
    time.sleep(0.2)  # the scripted consumer's socket connects
    started = time.monotonic()
    c.drain()
    assert c.state.drain["ended"] == ended
    assert c.state.drain["completed"] == (ended in ("complete", "idle"))
    took = time.monotonic() - started
    assert took < {"complete": 1.0, "idle": 1.5, "limit": 2.0}[ended], took


def test_a_worker_whose_controller_stopped_before_its_spec_ends_quietly():
    """Ctrl-C between starting a worker process and writing its spec (seen once in
    test_search_record's interrupted search): the worker reads nothing and ends at once, no
    traceback on the user's terminal."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "zmqload.runner.entry"],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
