"""The package's import graph has no circle: between modules, and between the layer packages (`config`,
`run`, `rollout`, ...). Read from the source with `ast`, so an import inside a function or under
`TYPE_CHECKING` counts as much as one at the top (a circle hidden in a function is still a circle)."""

import ast
import os

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "trace_jax")


def _modules() -> dict[str, str]:
    out = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path[:-3], os.path.dirname(PACKAGE)).replace(os.sep, ".")
                out[dotted.removesuffix(".__init__")] = path
    return out


def _graph(layer: bool) -> dict[str, set[str]]:
    """module -> the trace_jax modules it imports (layer=True: package -> packages, `trace_jax.<first part>`)."""
    modules = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    def node(name: str) -> str:
        return ".".join(name.split(".")[:2]) if layer else name

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for statement in ast.walk(ast.parse(open(path).read())):
            if isinstance(statement, ast.Import):
                targets |= {resolve(a.name) for a in statement.names if a.name.startswith("trace_jax")}
            elif isinstance(statement, ast.ImportFrom) and (statement.module or "").startswith("trace_jax"):
                for alias in statement.names:  # `from pkg import module` imports pkg.module, else pkg
                    full = f"{statement.module}.{alias.name}"
                    targets.add(full if full in modules else resolve(statement.module))
        edges = graph.setdefault(node(module), set())
        edges |= {node(t) for t in targets if t and node(t) != node(module)}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


@pytest.mark.parametrize("layer", [False, True], ids=["modules", "packages"])
def test_the_import_graph_has_no_circle(layer):
    assert _circles(_graph(layer)) == []


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_the_top_level_is_packages_named_after_the_layers():
    entries = sorted(e for e in os.listdir(PACKAGE) if not e.startswith("__"))
    modules = [e for e in entries if e.endswith(".py")]
    assert modules == ["ranges.py", "registry.py"], (
        f"only the bottom layer (the registry, the field ranges) is top-level modules: {modules}")
    graph = _graph(layer=False)
    for bottom in ("trace_jax.ranges", "trace_jax.registry"):  # any config dataclass may use them: they use nothing
        assert not graph.get(bottom), f"{bottom} imports {sorted(graph[bottom])}"


def test_no_library_module_imports_another_modules_private_names():
    """A name with a leading underscore is its module's own; one another module needs is made public."""
    private = []
    for module, path in _modules().items():
        for statement in ast.walk(ast.parse(open(path).read())):
            if isinstance(statement, ast.ImportFrom) and (statement.module or "").startswith("trace_jax"):
                private += [f"{module}: from {statement.module} import {a.name}" for a in statement.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
    assert not private, private
