"""The package's layers (docs/ARCHITECTURE.md, "The layout"): every import of a zmqload module
points to its own layer or one below, and no modules import one another round a circle."""
from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LAYERS = (
    ("zmqload.errors", "zmqload._engine"),
    ("zmqload.contract", "zmqload.versions"),
    ("zmqload.store",),
    ("zmqload.measure", "zmqload.analysis"),
    ("zmqload.runner", "zmqload.report", "zmqload.info"),
    ("zmqload.plan",),
    ("zmqload.scenarios",),
    ("zmqload.cli", "zmqload.pytest_plugin", "zmqload.__main__", "zmqload.report.__main__", "zmqload"),
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
            package = module.rsplit(".", 1)[0] if name != "__init__.py" else module[: -len(".__init__")]
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
                    for alias in node.names:        # `from . import x` imports the module x
                        sub = f"{target}.{alias.name}"
                        exists = os.path.exists(os.path.join(ROOT, *sub.split("."))) or \
                            os.path.exists(os.path.join(ROOT, *sub.split(".")) + ".py")
                        out.add(sub if exists or alias.name == "_engine" else target)
                elif isinstance(node, ast.Import):
                    out.update(a.name for a in node.names if a.name.startswith("zmqload"))
            out.discard(module)
    return found


def test_contract_does_no_io_through_store_or_runner():
    """zmqload.contract is types and rules: it imports nothing of the I/O above it (store, runner)."""
    reaching = sorted(f"{m} -> {t}" for m, targets in imports().items() if layer(m) == layer("zmqload.contract")
                      for t in targets if t.startswith(("zmqload.store", "zmqload.runner")))
    assert not reaching, reaching


def test_no_import_runs_up_a_layer():
    upward = sorted(f"{m} -> {t}" for m, targets in imports().items() for t in targets
                    if t != "zmqload" and layer(t) > layer(m))
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
