"""The shape of ``operators/`` (issue 40 item 5): no module over 800 lines, no class over 400
(an operator too big for one class is composed of parts along its concerns), and no private
name (a leading underscore) imported from another module -- a helper two modules share is
public in one of them."""

from __future__ import annotations

import ast
from pathlib import Path

import operators

ROOT = Path(operators.__file__).parent
MOST_LINES = 800
MOST_CLASS_LINES = 400


def _modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def test_no_module_is_over_800_lines():
    long = {str(p.relative_to(ROOT)): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > MOST_LINES}
    assert long == {}, "split these along their concerns"


def test_no_class_is_over_400_lines():
    long = {f"{p.relative_to(ROOT)}:{node.name}": n for p in _modules()
            for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, ast.ClassDef)
            and (n := (node.end_lineno or 0) - node.lineno + 1) > MOST_CLASS_LINES}
    assert long == {}, "compose these of parts along their concerns (a helper or a mixin)"


def _private_imports(tree: ast.AST) -> list[str]:
    return [f"{node.module}.{alias.name}" for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names if alias.name.startswith("_") and alias.name != "__future__"
            and node.module != "__future__"]


def test_no_private_name_is_imported_across_modules():
    found = {str(p.relative_to(ROOT)): names for p in _modules()
             if (names := _private_imports(ast.parse(p.read_text())))}
    assert found == {}, "make the helper public in the module both use"
