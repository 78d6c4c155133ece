"""--libzmq: the engine opens the run's libzmq at run time (csrc/zl_libzmq.h). Checked against what
shares no code with zmqload: pyzmq's constants, ctypes calling each library, the ELF file, and
/proc's maps of the worker processes."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import zmq

from conftest import children, in_process

import zmqload
from zmqload import _engine, libzmq
from zmqload.contract.run_record import Libzmq
from zmqload.errors import RunError
from zmqload.runner.workers import load_runs_libzmq


def _maps_libzmq(pid: int | str = "self") -> set[str]:
    with open(f"/proc/{pid}/maps") as maps:
        return {line.split()[-1] for line in maps if "libzmq" in os.path.basename(line.split()[-1])}


def _ctypes_version(path: str) -> str:
    lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
    v = [ctypes.c_int() for _ in range(3)]
    lib.zmq_version(*map(ctypes.byref, v))
    return ".".join(str(x.value) for x in v)


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_the_declared_abi_is_libzmqs():
    """Every number csrc/zl_libzmq.h declares is pyzmq's (which compiled zmq.h), and zmq_msg_t
    is libzmq 4.x's 64 bytes."""
    numbers = {
        **_engine.SOCKET_TYPES,
        **_engine.SOCKET_OPTION_IDS,
        **_engine.BYTES_OPTION_IDS,
        **_engine.LIBZMQ_NUMBERS,
    }
    numbers.pop("EINTR")
    assert numbers == {k: int(getattr(zmq, k)) for k in numbers}
    assert _engine.LIBZMQ_NUMBERS["EINTR"] == errno.EINTR
    events = {
        "handshake failed": "EVENT_HANDSHAKE_FAILED_NO_DETAIL",
        "protocol error": "EVENT_HANDSHAKE_FAILED_PROTOCOL",
        "authentication refused": "EVENT_HANDSHAKE_FAILED_AUTH",
        "succeeded": "EVENT_HANDSHAKE_SUCCEEDED",
    }
    assert _engine.HANDSHAKE_EVENTS == {k: int(getattr(zmq, v)) for k, v in events.items()}
    assert _engine.MSG_T_SIZE == 64


def test_the_extension_links_no_libzmq():
    readelf = shutil.which("readelf")
    assert readelf, "readelf (binutils, with the C compiler)"
    dynamic = subprocess.run(
        [readelf, "-d", _engine.__file__], capture_output=True, text=True, check=True
    ).stdout
    needed = [line for line in dynamic.splitlines() if "NEEDED" in line]
    assert needed and not any("zmq" in line for line in needed), needed
    generated = os.path.splitext(_engine.__file__)[0].split(".cpython")[0] + ".c"
    if os.path.exists(generated):  # the in-place build keeps the generated C beside it
        with open(generated) as f:
            assert not re.search(r'#include\s*[<"]zmq\.h[>"]', f.read())


def test_default_is_the_options_and_facts_match_ctypes():
    """A process that chose none runs --libzmq's default (pyzmq's); pyzmq's is the file
    pyzmq's extension maps; each library `info` names is described as ctypes and hashlib see it."""
    _engine.Context().term()
    assert os.path.realpath(_engine.libzmq_file()) in _maps_libzmq()
    found = {choice: lib for choice, lib, _ in libzmq.found()}
    assert found["pyzmq"] is not None and found["pyzmq"].file == os.path.realpath(
        _engine.libzmq_file()
    )
    assert found["system"] is not None and found["system"].file != found["pyzmq"].file
    assert ".".join(map(str, _engine.libzmq_version())) == _ctypes_version(found["pyzmq"].file)
    from zmq.backend.cython import _zmq

    with open("/proc/self/maps") as maps:
        pyzmqs = {
            line.split()[-1]
            for line in maps
            if "libzmq" in line
            and os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(_zmq.__file__))))
            in line
        }
    assert found["pyzmq"] is not None and found["pyzmq"].file in pyzmqs
    assert found["pyzmq"].version == zmq.zmq_version()
    for lib in found.values():
        if lib is None:
            continue
        assert lib.version == _ctypes_version(lib.file)
        assert lib.sha256 == _sha256(lib.file)
        assert ("curve" in lib.capabilities) == bool(ctypes.CDLL(lib.file).zmq_has(b"curve"))
    info = json.loads(
        subprocess.run(
            [sys.executable, "-m", "zmqload", "info", "--json"],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
    )
    assert {lib["choice"]: lib.get("sha256") for lib in info["libraries"]} == {
        c: (lib.sha256 if lib else None) for c, lib in found.items()
    }


@pytest.mark.parametrize(
    "given, why",
    [
        ("/nonexistent/libzmq.so", "/nonexistent/libzmq.so: no such file"),
        ("/etc/hostname", "cannot load it"),
        ("libc", "not a libzmq 4.x"),
    ],
)
def test_refused_in_one_line(capsys, tmp_path, given, why):
    if given == "libc":  # a shared library, but not libzmq: this process's C library
        with open("/proc/self/maps") as maps:
            given = next(
                line.split()[-1]
                for line in maps
                if os.path.basename(line.split()[-1]).startswith("libc.")
            )
    before = children()
    r = in_process(capsys, "run", "--count", "100", "--libzmq", given, "--out", str(tmp_path))
    assert r.returncode == 2
    assert (
        r.stderr.count("\n") == 1
        and r.stderr.startswith("zmqload run: error: --libzmq: ")
        and why in r.stderr
    )
    assert "accepted: pyzmq, system, or the path of a libzmq 4.x file" in r.stderr
    assert os.listdir(tmp_path) == [] and children() <= before


def test_a_worker_refuses_another_librarys_bytes():
    """A placed worker finds --libzmq on its own host: other bytes than the controller's fail it."""
    here = libzmq.describe("pyzmq")
    other = Libzmq(choice="pyzmq", file="/elsewhere/libzmq.so.5", version="4.3.9", sha256="0" * 64)
    with pytest.raises(
        RunError,
        match=r"--libzmq pyzmq here is .* not the run's /elsewhere/libzmq.so.5 "
        r"\(libzmq 4.3.9, sha256 000000000000\)",
    ):
        load_runs_libzmq(other)
    load_runs_libzmq(here)  # the same file: loaded (this process runs it already)


@pytest.mark.skipif(
    not os.path.exists("/proc/self/maps"), reason="reads the workers' maps in /proc"
)
def test_a_run_runs_the_file_it_names(tmp_path):
    """A copy of the system's libzmq, given by path: run.json names it, its workers map it, and
    the messages flow; the default run names pyzmq's."""
    system = libzmq.describe("system")
    copy = tmp_path / "libzmq-copy.so.5"
    shutil.copyfile(system.file, copy)
    out = tmp_path / "runs"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zmqload",
            "run",
            "--duration",
            "2",
            "--rate",
            "2000",
            "--libzmq",
            str(copy),
            "--out",
            str(out),
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: dict[int, set[str]] = {}
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        for pid in _descendants(proc.pid):
            try:
                if "zmqload.runner.entry" in open(f"/proc/{pid}/cmdline").read():
                    seen.setdefault(pid, set()).update(_maps_libzmq(pid))
            except OSError:
                pass
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.1)  # the run's end, or the next look at its workers
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert len(seen) == 2 and all(str(copy) in maps for maps in seen.values()), seen
    (run_dir,) = out.iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["libzmq"] == {
        "choice": str(copy),
        "file": str(copy),
        "version": _ctypes_version(str(copy)),
        "sha256": _sha256(str(copy)),
        "capabilities": system.capabilities,
    }
    assert record["versions"]["libzmq"] == system.version and record["status"] == "complete"
    assert record["workload"]["libzmq"] == str(copy)
    result = zmqload.run(zmqload.Workload(count=2000, out=str(tmp_path / "default")))
    assert result.workload["libzmq"] == "pyzmq"
    (default_dir,) = (tmp_path / "default").iterdir()
    default_version = json.loads((default_dir / "run.json").read_text())["libzmq"]["version"]
    assert default_version == zmq.zmq_version()


def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    kids = {int(k) for k in f.read().split()}
                todo.extend(kids - found)
                found |= kids
        except OSError:
            pass
    return found


@pytest.mark.slow  # several runs: out of make test-fast, in make test
def test_scenarios_on_two_libraries_make_one_table(tmp_path):
    """`scenario run --libzmq pyzmq,system`: a process per library, each run recorded with its
    library, one verdict table with a column each."""
    table = tmp_path / "verdicts.md"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "zmqload",
            "scenario",
            "run",
            "hwm-defaults",
            "--fast",
            "--libzmq",
            "pyzmq,system",
            "--out",
            str(tmp_path / "runs"),
            "--markdown",
            str(table),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    found = {choice: lib for choice, lib, _ in libzmq.found()}
    by_label = json.loads(done.stdout)
    labels = [f"libzmq {_ctypes_version(found[c].file)} ({c})" for c in ("pyzmq", "system")]
    assert list(by_label) == labels
    for label, choice in zip(labels, ("pyzmq", "system")):
        (outcome,) = by_label[label].values()
        assert outcome["claims"]["001-1"]["verdict"] == "holds"
        for run_dir in outcome["run_dirs"]:
            with open(os.path.join(run_dir, "run.json")) as f:
                assert json.load(f)["libzmq"]["sha256"] == _sha256(found[choice].file)
    text = table.read_text()
    assert (
        f"| claim | source's words | verdict on {labels[0]} | verdict on {labels[1]} | scenario |"
        in text
    )
    assert (
        "| 001-1 | Default SNDHWM/RCVHWM is 1000 (per socket type) | **holds** | **holds** | `hwm-defaults` |"
        in text
    )
    assert "## Where the libraries differ" in text and f"({labels[1]})" in text


@pytest.mark.slow  # several runs: out of make test-fast, in make test
def test_a_sweep_over_libraries_runs_each_and_inproc_is_refused(capsys, tmp_path):
    """tcp: each point's workers load their own library; inproc's workers are this process's
    threads, so two libraries are refused before any run."""
    out = tmp_path / "sweep"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "zmqload",
            "sweep",
            "--libzmq",
            "pyzmq,system",
            "--count",
            "3000",
            "--out",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    found = {choice: lib for choice, lib, _ in libzmq.found()}
    records = [json.loads((d / "run.json").read_text()) for d in sorted(out.glob("run=*"))]
    assert sorted(
        (
            r["workload"]["label"]["libzmq"],
            r["versions"]["libzmq"],
            r["libzmq"]["sha256"],
            r["status"],
        )
        for r in records
    ) == sorted(
        (c, _ctypes_version(lib.file), _sha256(lib.file), "complete") for c, lib in found.items()
    )
    before = children()
    # the default first: its point loads it (as any run of this process would), the second is refused
    r = in_process(
        capsys,
        "sweep",
        "--libzmq",
        "pyzmq,system",
        "--transport",
        "inproc",
        "--count",
        "100",
        "--out",
        str(tmp_path / "inproc"),
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "an inproc run's workers are its threads" in r.stderr and "use tcp or ipc" in r.stderr
    assert not (tmp_path / "inproc").exists() or not list((tmp_path / "inproc").glob("run=*"))
    assert children() <= before
