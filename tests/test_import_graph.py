"""simbench's modules import one another without cycles: data flows one way (histogram -> strategies -> cost
models -> simulator -> report), so no module waits on one downstream of it. The graph is built from the code's
module-level imports (type-checking-only imports left out: they never run)."""

import ast
from pathlib import Path

import simbench

PACKAGE = Path(simbench.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level_imports(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    found = set()

    def visit(statements):
        for node in statements:
            if isinstance(node, ast.If) and _is_type_checking(node):
                continue
            if isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = module.split(".") if is_package else module.split(".")[:-1]
                    anchor = anchor[:len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)

    visit(tree.body)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {}
    for module, path in modules.items():
        imports = _module_level_imports(ast.parse(path.read_text()), module, path.name == "__init__.py")
        # An import of a module also runs its packages' __init__: `a.b.c` depends on `a.b` and `a.b.c`.
        with_packages = {".".join(name.split(".")[:end]) for name in imports
                         for end in range(2, name.count(".") + 2)}
        graph[module] = {name for name in with_packages if name in modules and name != module
                         and not module.startswith(name + ".")}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for child in sorted(graph[node]):
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


def test_the_graph_sees_the_imports():
    graph = import_graph()
    assert "simbench.costmodels.transformer" in graph["simbench.sim.simulate"] or any(
        name.startswith("simbench.costmodels") for name in graph["simbench.sim.simulate"])
    assert len(graph) > 80


def test_no_module_imports_itself_through_others():
    cycle = _cycle(import_graph())
    assert cycle is None, " -> ".join(cycle)


# The pipeline's stages, upstream first; a module may import (at module level or inside a function) only from
# its own stage or an upstream one. The runners that orchestrate timing and reports sit with the commands.
STAGES = ("simbench.errors", "simbench.validation", "simbench.processes", "simbench.plugins", "simbench.registry",
          "simbench.yamlfile", "simbench.atomic",
          "simbench.distinct", "simbench.data", "simbench.histogram", "simbench.histogram_hf",
          "simbench.histogram_build", "simbench.stored_results", "simbench.strategies", "simbench.costmodels", "simbench.sim",
          "simbench.calibrate", "simbench.scenario", "simbench.resolved", "simbench.workers", "simbench.experiment",
          "simbench.sweep_ledger", "simbench.sweep", "simbench.report", "simbench.validation_runs",
          "simbench.report.docs_pages", "simbench.report.main_job_table", "simbench.calibrate.runs",
          "simbench.testing", "simbench.api", "simbench", "simbench.commands", "simbench.cli", "simbench.__main__")


def _stage(module: str) -> int:
    matches = [index for index, stage in enumerate(STAGES) if module == stage or module.startswith(stage + ".")]
    return max(matches, key=lambda index: len(STAGES[index]))


def test_every_import_points_upstream():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        module = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("simbench."):
                if _stage(node.module) > _stage(module):
                    upward.append(f"{module} -> {node.module}")
    assert not upward, "\n".join(sorted(set(upward)))
