"""Which libzmq a process runs (--libzmq): pyzmq's, the system's or a file of the user's, found,
described (version, sha256, capabilities) and loaded into the engine once per process."""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Optional

from .contract.run_record import Libzmq

PYZMQ, SYSTEM = "pyzmq", "system"
CAPABILITIES = ("ipc", "pgm", "tipc", "norm", "curve", "gssapi", "draft")


def pyzmq_file() -> str:
    """The libzmq pyzmq runs in this interpreter: the file that pyzmq's extension gets zmq_version
    from (its own dependency, whatever else this process has loaded)."""
    from zmq.backend.cython import _zmq
    from . import _engine

    return _engine.probe_libzmq(_zmq.__file__, ())[1]


def system_name() -> str:
    """The name the dynamic linker resolves to the system's libzmq."""
    return "libzmq.5.dylib" if sys.platform == "darwin" else "libzmq.so.5"


def describe(choice: str) -> Libzmq:
    """The library --libzmq CHOICE names, found and probed (not loaded for the engine); ValueError
    in one line for one that cannot be found or is not a libzmq 4.x."""
    from . import _engine

    if choice == PYZMQ:
        target = pyzmq_file()
    elif choice == SYSTEM:
        target = system_name()
    else:
        if not os.path.isfile(choice):
            raise ValueError(f"{choice}: no such file")
        target = os.path.abspath(choice)
    try:
        version, file, has = _engine.probe_libzmq(target, CAPABILITIES)
    except ValueError as exc:  # the linker's words name the file already; ours do not
        raise ValueError(f"{target}: {str(exc).replace(f'{target}: ', '')}") from None
    file = os.path.realpath(file or target)
    return Libzmq(
        choice=choice,
        file=file,
        version=".".join(map(str, version)),
        sha256=_sha256(file),
        capabilities=[c for c in CAPABILITIES if has[c]],
    )


def use(lib: Libzmq) -> None:
    """Loads `lib` into this process's engine; a process that runs another libzmq already gets
    ValueError (one process, one libzmq: the run then needs a process of its own)."""
    from . import _engine

    current = _engine.libzmq_file()
    if current is None:
        _engine.load_libzmq(lib.file)
    elif os.path.realpath(current) != os.path.realpath(lib.file):
        raise ValueError(
            f"one libzmq per process, and this one runs {os.path.realpath(current)}: an inproc "
            f"run's workers are its threads; give {lib.file} to a zmqload command of its own, or "
            "use tcp or ipc (each worker a process that loads the run's libzmq)"
        )


def load_default() -> None:
    """--libzmq's default, for a process that uses the engine without choosing (a script, a test)."""
    from .contract.workload import OPTIONS

    use(describe(OPTIONS["libzmq"].default))


def found() -> list[tuple[str, Optional[Libzmq], str]]:
    """Each libzmq zmqload can name (pyzmq's, the system's): (choice, its facts or None, why not)."""
    out: list[tuple[str, Optional[Libzmq], str]] = []
    for choice in (PYZMQ, SYSTEM):
        try:
            out.append((choice, describe(choice), ""))
        except ValueError as exc:
            out.append((choice, None, str(exc)))
    return out


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
