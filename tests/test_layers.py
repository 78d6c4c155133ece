"""The package's layers (docs/ARCHITECTURE.md, "The layout"): every import of a zmqload module
points to its own layer or one below, and no modules import one another round a circle."""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LAYERS = (
    ("zmqload.errors", "zmqload._engine"),
    ("zmqload.contract", "zmqload.versions"),
    ("zmqload.store", "zmqload.libzmq"),
    ("zmqload.measure", "zmqload.analysis"),
    ("zmqload.runner", "zmqload.report", "zmqload.info"),
    ("zmqload.plan",),
    ("zmqload.scenarios",),
    (
        "zmqload.cli",
        "zmqload.pytest_plugin",
        "zmqload.__main__",
        "zmqload.report.__main__",
        "zmqload",
    ),
)


def layer(module: str) -> int:
    """The layer of a module: that of the longest prefix named in LAYERS."""
    best, rank = "", -1
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best, rank = name, i
    assert rank >= 0, f"{module} is in no layer"
    return rank


def imports() -> dict[str, set[str]]:
    """module -> the zmqload modules it imports (anywhere in it, lazily too)."""
    found: dict[str, set[str]] = {}
    for directory, _, files in os.walk(os.path.join(ROOT, "zmqload")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
            package = (
                module.rsplit(".", 1)[0] if name != "__init__.py" else module[: -len(".__init__")]
            )
            module = package if name == "__init__.py" else module
            with open(path) as f:
                tree = ast.parse(f.read())
            out = found.setdefault(module, set())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    base = package.split(".")
                    if node.level:
                        base = base[: len(base) - node.level + 1]
                        target = ".".join(base + ([node.module] if node.module else []))
                    else:
                        target = node.module or ""
                    if not target.startswith("zmqload"):
                        continue
                    for alias in node.names:  # `from . import x` imports the module x
                        sub = f"{target}.{alias.name}"
                        exists = os.path.exists(
                            os.path.join(ROOT, *sub.split("."))
                        ) or os.path.exists(os.path.join(ROOT, *sub.split(".")) + ".py")
                        out.add(sub if exists or alias.name == "_engine" else target)
                elif isinstance(node, ast.Import):
                    out.update(a.name for a in node.names if a.name.startswith("zmqload"))
            out.discard(module)
    return found


def test_contract_does_no_io_through_store_or_runner():
    """zmqload.contract is types and rules: it imports nothing of the I/O above it (store, runner)."""
    reaching = sorted(
        f"{m} -> {t}"
        for m, targets in imports().items()
        if layer(m) == layer("zmqload.contract")
        for t in targets
        if t.startswith(("zmqload.store", "zmqload.runner"))
    )
    assert not reaching, reaching


def test_no_import_runs_up_a_layer():
    upward = sorted(
        f"{m} -> {t}"
        for m, targets in imports().items()
        for t in targets
        if t != "zmqload" and layer(t) > layer(m)
    )
    assert not upward, upward


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every set of modules that import one another round a circle of any length (Tarjan's strongly
    connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_modules_import_each_other_round_a_circle():
    graph = {m: {t for t in targets if t != "zmqload"} for m, targets in imports().items()}
    assert not cycles(graph), cycles(graph)


def test_a_circle_of_three_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# -- zmqload.contract does no I/O ------------------------------------------------------------------
# contract/ is types and rules: files, sockets, names and directories are store/'s and runner/'s
# (docs/ARCHITECTURE.md). The check is an allowlist: of os only os.path's functions that compute a
# path from its text (join, basename, ...: no system call), and abspath, which reads the process's
# working directory and nothing of the file system's contents (contract/workload.py makes an ipc
# endpoint's path absolute when the option is parsed); pathlib's pure paths likewise. Any other use
# of os, and open(), socket, shutil, glob, pathlib's concrete paths or the other modules of I/O below
# fails, until it is moved out (or argued for here).
PURE_OS_PATH = {
    "join",
    "basename",
    "dirname",
    "splitext",
    "split",
    "normpath",
    "isabs",
    "abspath",
    "sep",
}
PURE_OS = {"sep", "fspath", "PathLike"}
PURE_PATHLIB = {"PurePath", "PurePosixPath", "PureWindowsPath"}
IO_MODULES = (
    "socket",
    "shutil",
    "glob",
    "tempfile",
    "subprocess",
    "mmap",
    "fcntl",
    "select",
    "selectors",
    "urllib.request",
    "http",
    "ftplib",
    "pyarrow.fs",
    "pyarrow.parquet",
    "pyarrow.csv",
    "pyarrow.dataset",
)
NUMPY_IO = {
    "fromfile",
    "tofile",
    "load",
    "save",
    "savez",
    "memmap",
    "loadtxt",
    "savetxt",
    "genfromtxt",
}
KNOWN_IO: set[tuple[str, str]] = set()  # none: contract/ does no I/O


def io_uses(source: str) -> list[tuple[str, int, str]]:
    """(enclosing function, line, what) of every use of I/O in a module's source: open(), os and
    os.path beyond the pure path functions, pathlib beyond its pure paths, numpy's file functions,
    and imports of the modules of I/O (IO_MODULES)."""
    tree = ast.parse(source)
    os_names, os_path_names, pathlib_names, numpy_names = (
        {"os"},
        set(),
        {"pathlib"},
        {"numpy", "np"},
    )
    found: list[tuple[str, int, str]] = []

    def io_module(name: str) -> bool:
        return any(name == m or name.startswith(m + ".") for m in IO_MODULES)

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            where = f"{where}.{node.name}" if where else node.name
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                if io_module(alias.name):
                    found.append((where, node.lineno, f"import {alias.name}"))
                elif alias.name == "os.path" and alias.asname:
                    os_path_names.add(alias.asname)
                elif alias.name in ("os", "os.path"):
                    os_names.add(bound)
                elif alias.name == "pathlib":
                    pathlib_names.add(bound)
                elif alias.name == "numpy":
                    numpy_names.add(bound)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                name = alias.name
                allowed = (
                    PURE_OS_PATH
                    if node.module == "os.path"
                    else PURE_OS | {"path"}
                    if node.module == "os"
                    else PURE_PATHLIB
                    if node.module == "pathlib"
                    else None
                )
                if (
                    io_module(node.module)
                    or (node.module == "io" and name == "open")
                    or (allowed is not None and name not in allowed)
                    or (node.module == "numpy" and name in NUMPY_IO)
                ):
                    found.append((where, node.lineno, f"from {node.module} import {name}"))
                elif node.module == "os" and name == "path":
                    os_path_names.add(alias.asname or name)
        elif isinstance(node, ast.Name) and node.id == "open" and isinstance(node.ctx, ast.Load):
            found.append((where, node.lineno, "open"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            base, attr = node.value.id, node.attr
            if base in os_names and attr not in PURE_OS | {"path"}:
                found.append((where, node.lineno, f"{base}.{attr}"))
            elif base in os_path_names and attr not in PURE_OS_PATH:
                found.append((where, node.lineno, f"{base}.{attr}"))
            elif base in pathlib_names and attr not in PURE_PATHLIB:
                found.append((where, node.lineno, f"{base}.{attr}"))
            elif base in numpy_names and attr in NUMPY_IO:
                found.append((where, node.lineno, f"{base}.{attr}"))
            elif base == "io" and attr == "open":
                found.append((where, node.lineno, "io.open"))
        if isinstance(node, ast.Attribute) and node.attr == "tofile":  # an array written to a file
            found.append((where, node.lineno, ".tofile"))
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id in os_names
            and node.value.attr == "path"
            and node.attr not in PURE_OS_PATH
        ):
            found.append((where, node.lineno, f"os.path.{node.attr}"))
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(tree, "")
    return found


def test_contract_calls_no_file_socket_or_directory_io():
    uses = []
    for name in sorted(os.listdir(os.path.join(ROOT, "zmqload", "contract"))):
        if not name.endswith(".py"):
            continue
        rel = f"zmqload/contract/{name}"
        with open(os.path.join(ROOT, rel)) as f:
            source = f.read()
        uses += [
            f"{rel}:{line} {what} (in {where or 'the module'})"
            for where, line, what in io_uses(source)
            if (rel, where) not in KNOWN_IO
        ]
    assert not uses, uses


def test_the_io_check_finds_io_and_passes_pure_path_work():
    found = {
        what
        for _, _, what in io_uses(
            "import os\nimport os.path as osp\nimport shutil\nimport socket as s\nfrom glob import glob\n"
            "from os import remove\nfrom os.path import isfile, join\nfrom pathlib import Path, PurePath\n"
            "import numpy as np\n"
            "def f(p, a):\n"
            "    open(p)\n    os.remove(p)\n    os.path.isdir(p)\n    osp.exists(p)\n    os.lseek(3, 0, 0)\n"
            "    np.fromfile(p)\n    a.tofile(p)\n"
            "    return os.path.join(p, 'x'), os.path.basename(p), osp.dirname(p), os.path.splitext(p), join(p)\n"
        )
    }
    assert found == {
        "import shutil",
        "import socket",
        "from glob import glob",
        "from os import remove",
        "from os.path import isfile",
        "from pathlib import Path",
        "open",
        "os.remove",
        "os.path.isdir",
        "osp.exists",
        "os.lseek",
        "np.fromfile",
        ".tofile",
    }, found
    where = {
        (w, what)
        for w, _, what in io_uses("import os\nclass A:\n    def f(self):\n        os.stat('x')\n")
    }
    assert where == {("A.f", "os.stat")}


# -- module docstrings are short --------------------------------------------------------------------
# A module's docstring says what it is and why, in a few lines (as pyzmq's do); the long explanation
# (rules, invariants, measured reasons) belongs in docs/ARCHITECTURE.md or the user docs it names.
# Words are counted as str.split() counts them in the docstring as written (ast, not cleaned).
DOCSTRING_MAX_WORDS = 60
# Exempt by name while another change rewrites them: the scenarios and the scenario commands.
DOCSTRING_EXEMPT = ("zmqload/scenarios/", "zmqload/cli/scenario")


def docstring_words(source: str) -> int:
    """The words of a module's docstring (0 without one)."""
    doc = ast.get_docstring(ast.parse(source), clean=False)
    return len(doc.split()) if doc else 0


def test_module_docstrings_are_short():
    long = []
    for directory, _, files in os.walk(os.path.join(ROOT, "zmqload")):
        for name in files:
            rel = os.path.relpath(os.path.join(directory, name), ROOT).replace(os.sep, "/")
            if not name.endswith(".py") or rel.startswith(DOCSTRING_EXEMPT):
                continue
            with open(os.path.join(ROOT, rel)) as f:
                words = docstring_words(f.read())
            if words > DOCSTRING_MAX_WORDS:
                long.append(f"{rel}: {words} words")
    assert not sorted(long), sorted(long)


def test_docstring_words_are_counted_as_written():
    assert docstring_words('"""One two\n\n    three."""\nx = 1\n') == 3
    assert docstring_words("x = 1\n") == 0
