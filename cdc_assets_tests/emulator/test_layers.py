"""The emulator's modules import each other in layers: no import circle, no deferred import.

Statement planners (queries, DML, DDL, procedures) register with the dispatcher
(``statements``), which imports none of them; the wire server and the DB-API sit on top.
"""

from __future__ import annotations

import ast
from pathlib import Path

from sqlglot import exp

from cdc_assets.emulator import session, statements

PACKAGE = Path(__file__).resolve().parents[2] / "cdc_assets" / "emulator"


def _imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0])
                else:
                    deps.update(alias.name for alias in node.names)
        graph[path.stem] = deps
    return graph


def test_no_import_circle() -> None:
    graph = _imports()
    assert "statements" in graph and "session" in graph
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
    assert not graph["statements"] & {"queries", "dml", "ddl", "procedures", "translate"}


def test_no_deferred_imports() -> None:
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
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
