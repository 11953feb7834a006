"""The shape of ``operators/`` (issue 40 item 5): no module over 800 lines, and no private name
(a leading underscore) imported from another module -- a helper two modules share is public
in one of them."""

from __future__ import annotations

import ast
from pathlib import Path

import operators

ROOT = Path(operators.__file__).parent
MOST_LINES = 800


def _modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def test_no_module_is_over_800_lines():
    long = {str(p.relative_to(ROOT)): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > MOST_LINES}
    assert long == {}, "split these along their concerns"


def _private_imports(tree: ast.AST) -> list[str]:
    return [f"{node.module}.{alias.name}" for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names if alias.name.startswith("_") and alias.name != "__future__"
            and node.module != "__future__"]


def test_no_private_name_is_imported_across_modules():
    found = {str(p.relative_to(ROOT)): names for p in _modules()
             if (names := _private_imports(ast.parse(p.read_text())))}
    assert found == {}, "make the helper public in the module both use"
