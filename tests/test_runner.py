"""The controller's parts on their own: control messages, worker ids, the drain rule,
and workers that start without re-importing the caller's script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from zmqload.contract.workload import Workload
from zmqload.contract import control
from zmqload.contract.ids import Role, WorkerId
from zmqload.errors import RunError
from zmqload.runner.controller import drain_decision

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _payload(index: list[int], count: list[int]) -> dict:
    """A histogram payload as measure/histogram.py's to_payload makes it."""
    return {
        "index": index,
        "count": count,
        "min": min(index, default=None),
        "max": max(index, default=None),
        "total": sum(i * n for i, n in zip(index, count)),
    }


def test_every_control_message_round_trips_as_data():
    seen = control.StreamSeen(3, 10, 1, 2, np.packbits([1, 0, 1, 1]), np.zeros(1, np.uint8))
    messages = [
        control.Connect(["tcp://127.0.0.1:5555"]),
        control.Warmup(),
        control.Start(123),
        control.ProducersDone("fast"),
        control.Close(),
        control.Stop(True),
        control.Ready(["ipc:///tmp/x"]),
        control.Connected(),
        control.Warm(),
        control.Progress(5, 1, 7),
        control.ProducerDone(control.SendCounters(1, 2, 3)),
        control.ProducerFinal(
            control.SendCounters(4, 4), np.packbits([1, 1, 1, 1]), 1, 2, rtt=_payload([1], [1])
        ),
        control.ConsumerFinal(1, 2, 3, 4, 5, 6, 7, _payload([0], [1]), _payload([], []), [seen]),
        control.ProxyFinal(9),
        control.Failed("boom", 98, "tb"),
    ]
    for message in messages:
        frames = [bytes(f) for f in control.encode(message)]
        assert b"pickle" not in frames[0]
        json.loads(frames[0])  # the head is plain JSON
        back = control.decode(frames)
        assert type(back) is type(message)
        if isinstance(message, control.ConsumerFinal):
            assert back.streams[0].stream == 3
            assert np.array_equal(back.streams[0].seen_map, seen.seen_map)
        elif isinstance(message, control.ProducerFinal):
            assert (
                np.array_equal(back.sent_ok_map, message.sent_ok_map)
                and back.counters == message.counters
            )
        else:
            assert back == message


def test_decode_rejects_what_is_not_a_message():
    # RunError, one line: a peer that hands the controller such a message fails the run
    # (every shape of bad frames: tests/test_fuzz_inputs.py)
    with pytest.raises(RunError, match="^control message: "):
        control.decode([b'{"a": 1}'])


def test_worker_ids():
    assert str(WorkerId(Role.CONSUMER, 12)) == "c12"
    assert WorkerId.parse("x0") == WorkerId(Role.PROXY, 0)
    for bad in ("q1", "p", "pp", ""):
        with pytest.raises(ValueError):
            WorkerId.parse(bad)


@pytest.mark.parametrize(
    "received,idle_ms,since_s,drain,expect",
    [
        (100, 0, 0, "fast", "complete"),
        (50, 1101, 1, "fast", "idle"),
        (50, 1000, 1, "fast", None),
        (50, 10, 61, "fast", "limit"),
        (50, 10, 1, "fast", None),
        # a slow drain waits one work item (300 ms here) longer before it calls the consumers idle
        (50, 1101, 1, "slow", None),
        (50, 1401, 1, "slow", "idle"),
    ],
)
def test_drain_decision(received, idle_ms, since_s, drain, expect):
    # idle = --drain-timeout-ms + the 100 ms the consumers' counts take to arrive (+ work, slow)
    w = Workload(drain_timeout_ms=1000, drain_limit_s=60, consumer_delay_us=300_000, drain=drain)
    assert drain_decision(100, received, idle_ms * 1_000_000, int(since_s * 1e9), w) == expect


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_readme_example_as_plain_script_without_main_guard(tmp_path, how):
    """Workers start as their own module, so a script without `if __name__ == "__main__":`
    runs once, is not re-imported by the workers, and its run completes; as a file and as
    `python - <<EOF` (which multiprocessing's spawn could not re-import at all)."""
    script = tmp_path / "example.py"
    script.write_text(
        textwrap.dedent(f"""
        from zmqload import Workload, run
        print("top level ran")
        result = run(Workload(pattern="pub-sub", rate=5_000, size=512, duration=0.5, sndhwm=1000,
                              rcvhwm=1000, out={str(tmp_path / "runs")!r}))
        print("status", result.status, result.lost, result.run_dir)
    """)
    )
    argv, stdin = (
        ([sys.executable, str(script)], None)
        if how == "file"
        else ([sys.executable, "-"], script.read_text())
    )
    done = subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("top level ran") == 1
    assert "status complete 0" in done.stdout
    assert "Traceback" not in done.stderr
    run_dir = done.stdout.split()[-1]
    with open(os.path.join(run_dir, "run.json")) as f:
        assert json.load(f)["status"] == "complete"
