"""The layout of the repository's packages: an import graph without cycles (lazy imports included), and small modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
# Each package's import name -> its folder in the repository.
# The repository keeps envs/ and benchmarks/ as folders of their own; setup.py installs them under qc_sb3.
PACKAGES = {"qc_sb3": ROOT / "qc_sb3", "qc_sb3.envs": ROOT / "envs", "qc_sb3.benchmarks": ROOT / "benchmarks"}
MAX_LINES = 400


def module_name(package: str, folder: Path, path: Path) -> str:
    parts = (package, *path.relative_to(folder).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {
    module_name(package, folder, path): path for package, folder in PACKAGES.items() for path in sorted(folder.rglob("*.py"))
}
RUNNER = "qc_sb3.benchmarks.runner"


def imported_modules(importer: str, node: ast.Import | ast.ImportFrom, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that an import statement in ``importer`` loads, parent packages included."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            is_package = any(module.startswith(f"{importer}.") for module in modules)
            package = importer if is_package else importer.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
    loaded = set()
    for target in targets:
        parts = target.split(".")
        for end in range(1, len(parts) + 1):
            name = ".".join(parts[:end])
            # A module's own parent packages are already being imported when it runs: not an edge of the graph.
            if name in modules and not importer.startswith(f"{name}.") and name != importer:
                loaded.add(name)
    return loaded


def import_graph(sources: dict[str, str], lazy: bool) -> dict[str, set[str]]:
    """
    Module -> the modules of ``sources`` it imports: at module level (class bodies and ``if``/``try`` blocks
    included), and with ``lazy`` also inside functions.
    """
    modules = set(sources)
    graph: dict[str, set[str]] = {}
    for name, source in sources.items():
        edges: set[str] = set()
        pending: list[ast.AST] = [ast.parse(source)]
        while pending:
            node = pending.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Import | ast.ImportFrom):
                    edges |= imported_modules(name, child, modules)
                elif lazy or not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                    pending.append(child)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as the list of its modules (the first repeated at the end), or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for neighbour in sorted(graph[node]):
            if state.get(neighbour) == "open":
                return [*path[path.index(neighbour) :], neighbour]
            if neighbour not in state and (cycle := visit(neighbour)) is not None:
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def repository_sources() -> dict[str, str]:
    return {name: path.read_text(encoding="utf-8") for name, path in MODULES.items()}


def test_the_cycle_finder_finds_a_cycle_broken_only_by_a_lazy_import():
    # The shape of the old config -> tasks -> suites -> datasets -> config cycle, by hand.
    sources = {
        "runner": "",
        "runner.config": "from runner.tasks import get_task\n",
        "runner.tasks": "def load():\n    from runner import suites\n",
        "runner.suites": "from runner.datasets import cached\n",
        "runner.datasets": "from runner.config import RunSpec\n",
    }
    assert find_cycle(import_graph(sources, lazy=False)) is None
    cycle = find_cycle(import_graph(sources, lazy=True))
    assert cycle is not None and cycle[0] == cycle[-1]
    assert set(cycle) == {"runner.config", "runner.tasks", "runner.suites", "runner.datasets"}
    # A relative import and a submodule named in a from-import are edges too.
    sources = {
        "benchmarks": "",
        "benchmarks.a": "from . import b\n",
        "benchmarks.b": "from benchmarks import a\n",
    }
    assert find_cycle(import_graph(sources, lazy=False)) in (
        ["benchmarks.a", "benchmarks.b", "benchmarks.a"],
        ["benchmarks.b", "benchmarks.a", "benchmarks.b"],
    )


def test_a_package_importing_its_submodules_is_not_a_cycle():
    sources = {
        "runner": "",
        "runner.specs": "",
        "runner.suites": "from runner.suites import ogbench\n",
        "runner.suites.ogbench": "from runner.specs import SuiteSpec\n",
    }
    graph = import_graph(sources, lazy=True)
    assert graph["runner.suites"] == {"runner.suites.ogbench"}
    assert find_cycle(graph) is None


@pytest.mark.parametrize("lazy", [False, True], ids=["module-level", "lazy-included"])
def test_the_import_graph_has_no_cycle(lazy):
    graph = import_graph(repository_sources(), lazy=lazy)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_plain_networks_import_no_acceleration():
    # The networks are the plain reference modules; the acceleration package swaps its versions in from outside.
    graph = import_graph(repository_sources(), lazy=True)
    assert {"qc_sb3.common.networks", "qc_sb3.accel.fast_networks"} <= set(graph)
    assert not {name for name in graph["qc_sb3.common.networks"] if name.startswith("qc_sb3.accel")}


def test_specs_is_a_leaf_module():
    graph = import_graph(repository_sources(), lazy=True)
    assert {name for name in graph[f"{RUNNER}.specs"] if name.startswith("qc_sb3.benchmarks")} == set()


def test_each_suite_module_is_a_leaf_of_the_registry():
    # A suite imports the specs, the cache and the methods, never the registry, the config or the runner.
    graph = import_graph(repository_sources(), lazy=True)
    suites = [name for name in MODULES if name.startswith(f"{RUNNER}.suites.")]
    assert {f"{RUNNER}.suites.ogbench", f"{RUNNER}.suites.robomimic"} <= set(suites)
    allowed = {f"{RUNNER}.{name}" for name in ("specs", "cache", "methods", "atomic")}
    for suite in suites:
        imported = {name for name in graph[suite] if name.startswith("qc_sb3.benchmarks")}
        assert imported <= allowed, suite


def test_the_library_imports_neither_the_envs_nor_the_benchmarks():
    # qc_sb3's own modules stand alone: the environments and the benchmark tools are installed under it, not in it.
    graph = import_graph(repository_sources(), lazy=True)
    tools = ("qc_sb3.envs", "qc_sb3.benchmarks")
    library = [name for name in graph if name.startswith("qc_sb3") and not name.startswith(tools)]
    assert "qc_sb3.qc.qc" in library and "qc_sb3.benchmarks.run" in graph and "qc_sb3.envs.ogbench" in graph
    for name in library:
        assert not {imported for imported in graph[name] if imported.startswith(tools)}, name


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_are_small(name):
    lines = len(MODULES[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{MODULES[name]} has {lines} lines (at most {MAX_LINES}): split it"
