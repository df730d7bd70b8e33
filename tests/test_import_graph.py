"""The shape of src/: no import circle, the decoding layer below the modes built on it, short files.

Read from the source with `ast`, not by importing: an import inside a function counts as much as
one at the top (it is a circle that merely waits for its first call), one under
`if TYPE_CHECKING:` does not (it never runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "paraspec"
MAX_LINES = 400
SOURCE_SUFFIXES = {".py", ".cpp", ".h", ".js", ".css", ".html"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST, skip_type_checking: bool):
    """Every Import / ImportFrom below `node`, at any depth (functions, classes, try blocks)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        if skip_type_checking and isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _imports(ast.Module(body=[other], type_ignores=[]), skip_type_checking)
            continue
        yield from _imports(child, skip_type_checking)


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The paraspec modules an import statement loads (a name that is a submodule: that submodule)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in MODULES}
    if node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    if base not in MODULES:
        return set()
    subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES}
    names = {a.name for a in node.names if f"{base}.{a.name}" not in MODULES}
    return subs | ({base} if names else set())


def import_graph(skip_type_checking: bool = True) -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[module] = set().union(
            *(_targets(module, n) for n in _imports(tree, skip_type_checking))
        ) - {module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None (depth-first, colouring the modules)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n) :] + [n]
            if n not in state and (cycle := visit(n)):
                return cycle
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m)):
            return cycle
    return None


def test_graph_sees_function_level_imports():
    # the reader itself: a lazy import inside a function is an edge, a TYPE_CHECKING one is not
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n"
        "def f():\n    from .b import c\n"
    )
    found = {
        n.module for n in _imports(tree, skip_type_checking=True) if isinstance(n, ast.ImportFrom)
    }
    assert found == {"typing", "b"}
    assert find_cycle({"x": {"y"}, "y": {"z"}, "z": {"x"}}) == ["x", "y", "z", "x"]
    assert find_cycle({"x": {"y"}, "y": set()}) is None


def test_no_import_circle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_decoding_layer_never_imports_aspd():
    # a decode mode registers itself with the drafters (decoding/drafters/plugins.py), never the reverse;
    # type-only imports count here too: the layer should not even name the mode above it
    graph = import_graph(skip_type_checking=False)
    upward = sorted(
        f"{m} -> {t}"
        for m, ts in graph.items()
        if m.startswith("paraspec.decoding")
        for t in ts
        if t == "paraspec.aspd" or t.startswith("paraspec.aspd.")
    )
    assert not upward, "the decoding layer imports aspd: " + ", ".join(upward)


# what each folder of decoding/ may import from the others: the contract at the bottom (naming
# only the cost curve, which StepContext carries), memory and policy on it, the drafters on all three
DECODING_LAYERS = {
    "contract": {"paraspec.decoding.policy.cost"},
    "memory": {"contract"},
    "policy": {"contract"},
    "drafters": {"contract", "memory", "policy"},
}


def test_decoding_folders_are_layered():
    graph = import_graph()  # type-only imports (annotations) do not count
    wrong = []
    for m, ts in graph.items():
        if not m.startswith("paraspec.decoding."):
            continue
        folder = m.split(".")[2]
        for t in ts:
            if t.startswith("paraspec.decoding.") and t.split(".")[2] != folder:
                if (
                    t.split(".")[2] not in DECODING_LAYERS[folder]
                    and t not in DECODING_LAYERS[folder]
                ):
                    wrong.append(f"{m} -> {t}")
            elif t.startswith("paraspec.") and not t.startswith("paraspec.decoding"):
                if t != "paraspec.errors":  # the layer knows no engine, server or model
                    wrong.append(f"{m} -> {t}")
    assert not wrong, "decoding/ imports against its layers: " + ", ".join(sorted(wrong))


def test_engine_reaches_the_model_only_through_the_runner():
    # the step loop asks the runner (vocabulary, context, draft room, forwards), never model/
    graph = import_graph()
    reach = sorted(
        f"{m} -> {t}"
        for m in ("paraspec.engine", "paraspec.decode_step")
        for t in graph[m]
        if t.startswith("paraspec.model")
    )
    assert not reach, "the step loop imports model/ directly: " + ", ".join(reach)


def test_no_source_file_over_400_lines():
    long = sorted(
        f"{p.relative_to(SRC)}: {n} lines"
        for p in PACKAGE.rglob("*")
        if p.suffix in SOURCE_SUFFIXES
        and "__pycache__" not in p.parts
        and (n := len(p.read_text().splitlines())) > MAX_LINES
    )
    assert not long, f"over {MAX_LINES} lines (split by what the parts do): " + "; ".join(long)
