"""The package's modules import each other in layers (``docs/design.md`` section 6).

Every ``import`` of a ``cdc_assets`` module counts, at module level or deferred inside a function:
no two modules may import each other, directly or through others, and the lower packages never
import the ones above them (the emulator knows neither the SQL Server layer nor the workload that
drives it; the SQL Server layer knows no emulator).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cdc_assets"

# package -> the packages of cdc_assets it must not import (its layer or higher)
FORBIDDEN: dict[str, set[str]] = {
    "lsn": {"sqlserver", "emulator", "workload", "tds_server", "spark", "dagster", "config"},
    "records": {"sqlserver", "emulator", "workload", "tds_server", "spark", "dagster", "config"},
    "emulator": {"sqlserver", "workload", "tds_server", "spark", "dagster", "config"},
    "sqlserver": {"emulator", "workload", "tds_server", "spark", "dagster", "config"},
    "workload": {"emulator", "tds_server", "spark", "dagster", "config"},
    "tds_server": {"sqlserver", "workload", "spark", "dagster", "config"},
    "spark": {"dagster", "workload", "tds_server"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imported(module: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The cdc_assets modules ``module`` imports (anywhere in it), with a line of each."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:  # ``from pkg import module`` imports the module
                target = f"{source}.{alias.name}"
                targets.append(target if target in modules else source)
        for target in targets:
            if target in modules and target != module:
                found.setdefault(target, node.lineno)
    return found


def _graph() -> dict[str, dict[str, int]]:
    modules = _modules()
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for dep in graph[module]:
            if dep not in index:
                visit(dep)
                low[module] = min(low[module], low[dep])
            elif dep in on_stack:
                low[module] = min(low[module], index[dep])
        if low[module] == index[module]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    return circles


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = _graph()
    assert "cdc_assets.emulator.session.session" in graph["cdc_assets.emulator.dbapi"]  # relative
    assert "cdc_assets.sqlserver.quoting" in graph["cdc_assets.workload.demo_schema"]  # absolute
    assert "cdc_assets.emulator" in graph["cdc_assets.tds_server.client"]  # from pkg import mod
    assert "cdc_assets.config" in graph["cdc_assets.cli.project_commands"]  # deferred


def test_a_circle_is_found() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert _circles(graph) == [["a", "b", "c"]]


def test_no_import_circle() -> None:
    assert _circles(_graph()) == []


def test_no_package_imports_a_higher_layer() -> None:
    upward = [
        f"{module} imports {dep} (line {line})"
        for module, deps in _graph().items()
        for dep, line in deps.items()
        if _package(dep) in FORBIDDEN.get(_package(module), set())
    ]
    assert upward == []


def _dagster_layer(module: str) -> int | None:
    """0 the machinery (dagster/sync), 1 the definitions (dagster/*.py), 2 the demo tools."""
    parts = module.split(".")
    if parts[:2] != ["cdc_assets", "dagster"] or len(parts) < 3:
        return None
    return {"sync": 0, "demo": 2}.get(parts[2], 1)


def test_dagster_layers_point_down() -> None:
    graph = _graph()
    assert "cdc_assets.dagster.sync.chain" in graph["cdc_assets.dagster.mirror"]
    upward = [
        f"{module} imports {dep} (line {line})"
        for module, deps in graph.items()
        for dep, line in deps.items()
        if (low := _dagster_layer(module)) is not None
        and (high := _dagster_layer(dep)) is not None
        and high > low
    ]
    assert upward == []


def test_a_code_location_loads_without_the_emulator() -> None:
    """Every run's worker loads the code location: for a source on a real SQL Server, the
    emulator and its T-SQL translator (sqlglot) stay unimported (they cost ~0.4 s of each run's
    start); an ``emulator:`` source imports them when its first connection opens."""
    probe = (
        "import sys, cdc_assets.config, cdc_assets.dagster.code_location, cdc_assets.definitions\n"
        "print(sorted(m for m in sys.modules if m == 'sqlglot' or m.startswith('cdc_assets.emu')))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert found.stdout.strip() == "['cdc_assets.emulator_source']", found.stdout + found.stderr


def test_benchmark_scripts_import_no_circle() -> None:
    """``benchmarks/`` imports its shared modules top-level (``import _common``), so two scripts
    importing each other would only work in one import order."""
    modules = {path.stem: path for path in sorted((ROOT / "benchmarks").glob("*.py"))}
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    assert "_common" in graph["source_read"]  # the graph sees a benchmark's imports
    assert _circles(graph) == []


def test_no_merge_leftovers() -> None:
    """No ``.orig``/``.rej`` file a merge or a patch left beside the sources."""
    leftovers = [
        str(path.relative_to(ROOT))
        for folder in ("cdc_assets", "cdc_assets_tests", "benchmarks", "scripts", "docs", "deploy")
        for pattern in ("*.orig", "*.rej")
        for path in (ROOT / folder).rglob(pattern)
    ]
    assert leftovers == []
