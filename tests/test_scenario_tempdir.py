"""A scenario leaves the temp directory as it found it: the directories of its ipc endpoints
(zmqload.scenarios.framework.scratch_dir) are removed when it ends, and runs remove their own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from zmqload.scenarios import framework, run_scenario

pytestmark = pytest.mark.slow  # a real scenario: a dozen seconds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_an_ipc_scenario_leaves_nothing_in_the_temp_directory(tmp_path):
    """term-and-linger binds and connects ipc endpoints (the engine's and pyzmq's sockets), in
    this process and in no run: everything it made under TMPDIR must be gone when it ends."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = dict(os.environ, PYTHONPATH=ROOT, TMPDIR=str(temp))
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "zmqload",
            "scenario",
            "run",
            "term-and-linger",
            "--fast",
            "--out",
            str(tmp_path / "runs"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert '"verdict"' in p.stdout
    assert sorted(os.listdir(temp)) == []


def test_scratch_directories_go_even_when_the_scenario_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(framework.tempfile, "tempdir", str(tmp_path))
    made: list[str] = []

    def body(runner: framework.ScenarioRunner) -> framework.Outcome:
        made.append(framework.scratch_dir("zmqload-test-"))
        open(os.path.join(made[-1], "s"), "w").close()  # a socket file's stand-in
        raise RuntimeError("the scenario broke")

    from zmqload import scenarios

    monkeypatch.setitem(
        scenarios.SCENARIOS, "broken", framework.Scenario("broken", "t", (), body, expected_s=1)
    )
    with pytest.raises(RuntimeError, match="broke"):
        run_scenario("broken", str(tmp_path / "runs"))
    assert made and not os.path.exists(made[0]) and os.listdir(tmp_path) == []
