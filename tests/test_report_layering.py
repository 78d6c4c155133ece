"""zmqload.report is a library under the command line: none of its modules imports
zmqload.cli (but __main__, the `python -m zmqload.report` entry point that runs the
report's command line), and its modules import each other without a cycle (every import
counted, those inside functions too)."""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "zmqload", "report")
ENTRY_POINT = "__main__"


def _imports(name: str) -> set[str]:
    """The zmqload modules (dotted) that module `name` of zmqload.report imports anywhere;
    `from . import x` names x as a module when the package has one of that name."""
    with open(os.path.join(PACKAGE, f"{name}.py")) as f:
        tree = ast.parse(f.read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = {1: "zmqload.report", 2: "zmqload"}[node.level]
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.add(module)
            found.update(
                f"{module}.{alias.name}"
                for alias in node.names
                if os.path.exists(os.path.join(ROOT, *module.split("."), f"{alias.name}.py"))
            )
    return {m for m in found if m == "zmqload" or m.startswith("zmqload.")}


def _modules() -> list[str]:
    return sorted(n[:-3] for n in os.listdir(PACKAGE) if n.endswith(".py"))


def test_report_imports_nothing_of_the_command_line():
    seen = {(name, m) for name in _modules() for m in _imports(name)}
    assert ("server", "zmqload.report.build") in seen  # the walk sees relative imports
    assert ("__main__", "zmqload.cli.report") in seen  # and absolute ones
    cli = {(name, m) for name, m in seen if m == "zmqload.cli" or m.startswith("zmqload.cli.")}
    assert {name for name, _ in cli} <= {ENTRY_POINT}, cli


def test_report_modules_import_each_other_without_a_cycle():
    prefix = "zmqload.report."
    graph = {
        name: {m[len(prefix) :] for m in _imports(name) if m.startswith(prefix)}
        for name in _modules()
    }
    assert (
        "build" in graph["command"] and "build" in graph["server"] and "server" in graph["command"]
    )
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path, name))
        if name in done:
            return
        for nxt in sorted(graph.get(name, ())):
            visit(nxt, (*path, name))
        done.add(name)

    for name in graph:
        visit(name, ())


def test_the_page_modules_import_no_spark():
    """The page's modules are imported in a thread while the JVM starts (report.build
    page_modules_loading): they must not import what the starting thread imports meanwhile
    (pyspark, the session module), or the two threads could wait on each other's imports."""
    import subprocess
    import sys

    code = (
        "import sys; import zmqload.report.html, zmqload.report.markdown; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark' "
        "or m == 'zmqload.analysis.session'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
