"""The emulator's modules import each other in layers: no import circle, no deferred import, and
its sub-packages import downward only, in the order of the package docstring.

Statement planners (queries, DML, DDL, procedures) register with the dispatcher
(``translate.statements``), which imports none of them; the wire server and the DB-API sit on top.
"""

from __future__ import annotations

import ast
from pathlib import Path

from sqlglot import exp

from cdc_assets.emulator.session import session
from cdc_assets.emulator.translate import statements

PACKAGE = Path(__file__).resolve().parents[2] / "cdc_assets" / "emulator"
# bottom up: a module imports only from its own sub-package, the ones before it, and errors
ORDER = (
    "errors",
    "values",
    "catalog",
    "cdc",
    "transactions",
    "batches",
    "translate",
    "ddl",
    "procedures",
    "session",
    "faults",
    "dbapi",
    "__init__",
)
MAX_LINES = 600


def _name(path: Path) -> str:
    """``translate.queries`` for translate/queries.py, ``translate`` for its __init__."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imports() -> dict[str, set[str]]:
    """Module -> the emulator modules it imports (relative imports resolved)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" and name != "__init__" else []
        here = here or name.split(".")[:-1]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            base = here[: len(here) - node.level + 1]
            source = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                target = f"{source}.{alias.name}" if source else alias.name
                deps.add(target if target in modules else source)
        graph[name] = {d for d in deps if d and d != name}
    return graph


def _layer(module: str) -> int:
    return ORDER.index(module.split(".")[0])


def test_the_graph_resolves_relative_imports() -> None:
    graph = _imports()
    assert "session.session" in graph["dbapi"]  # from .session.session import Session
    assert "values.types" in graph["translate.plan"]  # from ..values.types import SqlType
    assert "catalog.catalog" in graph["session.session"]  # from ..catalog import catalog
    assert "batches.batch_statement" in graph["batches.batch"]  # from .batch_statement import


def test_no_import_circle() -> None:
    graph = _imports()
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError("import circle: " + " -> ".join([*path, module]))
        if module in done:
            return
        for dep in sorted(graph.get(module, ())):
            visit(dep, [*path, module])
        done.add(module)

    for module in graph:
        visit(module, [])
    assert not graph["translate.statements"] & {
        "translate.queries",
        "translate.dml",
        "ddl.ddl",
        "procedures.procedures",
        "translate.translate",
    }


def test_sub_packages_import_downward() -> None:
    upward = [
        f"{module} imports {dep}"
        for module, deps in _imports().items()
        for dep in deps
        if _layer(dep) > _layer(module)
    ]
    assert upward == []


def test_every_folder_is_a_documented_sub_package_in_the_order() -> None:
    folders = {p.parent.name for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE}
    assert folders == set(ORDER) - {"errors", "faults", "dbapi", "__init__"}
    for folder in folders:
        doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text()))
        assert doc and len(doc) > 80, folder
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top == {"__init__", "errors", "faults", "dbapi"}


def test_no_module_over_600_lines() -> None:
    long = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_no_deferred_imports() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [
                    f"{path.name}:{inner.lineno}"
                    for inner in ast.walk(node)
                    if isinstance(inner, (ast.Import, ast.ImportFrom))
                ]
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                found.append(f"{path.name}:{node.lineno} (TYPE_CHECKING)")
    assert found == []


def test_every_statement_kind_has_its_planner() -> None:
    assert session.Session  # importing the session imports every planner
    planners = statements.planners()
    for kind in (
        exp.Select,
        exp.Union,
        exp.Insert,
        exp.Update,
        exp.Delete,
        exp.TruncateTable,
        exp.Create,
        exp.Alter,
        exp.Drop,
        exp.Execute,
    ):
        assert kind in planners, kind.__name__
