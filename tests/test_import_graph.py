"""simbench's modules import one another without cycles and only from their own layer or one below: data flows
one way (histogram -> strategies -> cost models -> simulator -> report), so no module waits on one downstream of
it. The graph sees every import form (`import a.b`, `from a import b`, `from . import x`, `from .a import b`,
`importlib.import_module("a.b")`), at module level and inside functions alike; imports only a type checker
runs (`if TYPE_CHECKING:`) are left out."""

import ast
from pathlib import Path

import simbench

PACKAGE = Path(simbench.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    anchor = module.split(".") if is_package else module.split(".")[:-1]
    anchor = anchor[:len(anchor) - node.level + 1]
    return ".".join(anchor + ([node.module] if node.module else []))


def imported_names(source: str, module: str, is_package: bool) -> set[str]:
    """Every dotted name `module`'s code imports, wherever the import statement stands."""
    found = set()

    def visit(node: ast.AST) -> None:
        if _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, is_package)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


# Arrows the tests let pass while code moves (none now).
PENDING: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def import_graph() -> dict[str, set[str]]:
    """Each simbench module -> the simbench modules importing it runs (an import of `a.b.c` also runs the
    packages' `a.b/__init__`), leaving out a module's own packages, which Python has imported before it."""
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        names = imported_names(path.read_text(), module, path.name == "__init__.py")
        with_packages = {".".join(name.split(".")[:end]) for name in names for end in range(2, name.count(".") + 2)}
        graph[module] = {name for name in with_packages if name in modules and name != module
                         and not module.startswith(name + ".") and (module, name) not in PENDING}
    return graph


def package_graph(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The graph between `package`'s direct members (its modules and sub-packages, each one node)."""
    def member(module: str) -> str | None:
        if not module.startswith(package + "."):
            return None
        return ".".join(module.split(".")[:package.count(".") + 2])

    folded = {}
    for module, imports in graph.items():
        if member(module) is not None:
            folded.setdefault(member(module), set()).update(
                member(name) for name in imports if member(name) not in (None, member(module)))
    return folded


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for child in sorted(graph.get(node, ())):
            if state.get(child) == "open":
                return stack[stack.index(child):] + [child]
            if child not in state:
                found = visit(child)
                if found:
                    return found
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_sees_every_import_form():
    names = imported_names("import simbench.a.b\nfrom simbench.c import d\nfrom . import e\nfrom .f import g\n"
                           "def lazy():\n    import simbench.h\n    from simbench.i import j\n"
                           "importlib.import_module('simbench.k')\n"
                           "if TYPE_CHECKING:\n    import simbench.typing_only\n",
                           "simbench.pkg.mod", is_package=False)
    assert {"simbench.a.b", "simbench.c", "simbench.c.d", "simbench.pkg", "simbench.pkg.e", "simbench.pkg.f",
            "simbench.pkg.f.g", "simbench.h", "simbench.i.j", "simbench.k"} <= names
    assert "simbench.typing_only" not in names
    graph = import_graph()
    assert len(graph) > 80
    assert "simbench.costmodels.base" in graph["simbench.sim.simulate"]


def test_no_module_imports_itself_through_others():
    cycle = _cycle(import_graph())
    assert cycle is None, " -> ".join(cycle)


def test_no_package_imports_itself_through_others():
    """Between the members of every package (a sub-package counted whole), no circle either."""
    graph = import_graph()
    packages = sorted({_module_name(path.parent) for path in PACKAGE.rglob("__init__.py")})
    cycles = [" -> ".join(cycle) for package in packages
              if (cycle := _cycle(package_graph(graph, package))) is not None]
    assert not cycles, "\n".join(cycles)


# The layers, lowest first: a module imports only from its own layer or a lower one. A name stands for the
# module or package and everything in it, unless a longer name in the list claims a part of it.
# docs/architecture.md draws the same order.
LAYERS = ("simbench.errors", "simbench.validation", "simbench.processes", "simbench.plugins", "simbench.registry", "simbench.yamlfile",
          "simbench.atomic", "simbench.distinct", "simbench.data",
          "simbench.histogram", "simbench.histogram_hf", "simbench.histogram_build", "simbench.stored_results",
          "simbench.strategies", "simbench.costmodels", "simbench.sim",
          "simbench.scenario", "simbench.checked", "simbench.resolved", "simbench.workers", "simbench.experiment",
          "simbench.sweep_ledger", "simbench.sweep", "simbench.calibrate",
          "simbench.report", "simbench.validation_runs", "simbench.report.docs_pages",
          "simbench.report.main_job_table",
          "simbench.testing", "simbench.api", "simbench", "simbench.commands", "simbench.cli", "simbench.__main__")

def _layer(module: str) -> int:
    matches = [index for index, layer in enumerate(LAYERS) if module == layer or module.startswith(layer + ".")]
    return max(matches, key=lambda index: len(LAYERS[index]))


def test_every_import_points_down_the_layers():
    graph = import_graph()
    upward = [f"{module} -> {name}" for module, imports in graph.items() for name in imports
              if _layer(name) > _layer(module)]
    assert not upward, "\n".join(sorted(upward))
