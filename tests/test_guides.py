"""The guides to extending cedar (``docs/adding-*.md``) name files, modules and functions; this
checks that every one of them still exists, so a rename or a removal cannot leave a guide
pointing at nothing:

* every ``path/like/this.py`` (or ``.md``, or a ``folder/``) in backticks is in the repository;
* every dotted name in backticks that starts with a package (``operators.udm.ColumnAggregate``,
  ``tests.kit.physical_streams``) imports: the longest importable module, then its attributes;
* a name written right after a module's path (```operators/windows/keyed.py` `supports```) or
  before ``in `path.py``` (```_b_window` in `topology/planning/planner.py```) is defined in that
  module.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
GUIDES = sorted([*(REPO / "docs").glob("adding-*.md"), REPO / "docs" / "architecture.md"])
PACKAGES = ("operators", "actors", "topology", "tests", "benchmarks")

PATH = re.compile(r"`((?:[\w.-]+/)+(?:[\w.-]+\.(?:py|md))?)`")
DOTTED = re.compile(r"`((?:" + "|".join(PACKAGES) + r")(?:\.\w+)+)`")
IDENT = r"`(\w+)(?:\([^`]*\))?`"
AFTER_PATH = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.py)`\s+" + IDENT)
BEFORE_PATH = re.compile(IDENT + r"\s+in\s+`((?:[\w.-]+/)+[\w.-]+\.py)`")

#: Named by a guide, on a branch being merged (h-policy): drop once it is on main.
PENDING: set[str] = set()


def _module_of(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _resolve(dotted: str) -> Any:
    """The object a dotted name names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def _defines(module: Any, name: str) -> bool:
    """Whether ``module`` defines ``name``, or a class defined there has it (a method)."""
    if hasattr(module, name):
        return True
    return any(isinstance(c, type) and c.__module__ == module.__name__ and hasattr(c, name)
               for c in vars(module).values())


def names(text: str) -> tuple[set[str], set[str], set[tuple[str, str]]]:
    """The paths, dotted names and (module path, name) pairs a guide's text mentions, outside
    its code blocks (which may show code that is not in cedar, e.g. a worked example)."""
    text = re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.S | re.M)
    pairs = {(m.group(1), m.group(2)) for m in AFTER_PATH.finditer(text)}
    pairs |= {(m.group(2), m.group(1)) for m in BEFORE_PATH.finditer(text)}
    return ({m.group(1) for m in PATH.finditer(text)}, set(DOTTED.findall(text)), pairs)


def problems(text: str) -> list[str]:
    """What a guide's text names that does not exist."""
    paths, dotted, pairs = names(text)
    out = [f"no file {p}" for p in sorted(paths)
           if p not in PENDING and not (REPO / p).exists()]
    for d in sorted(dotted):
        try:
            _resolve(d)
        except (ImportError, AttributeError):
            out.append(f"no {d}")
    for path, name in sorted(pairs):
        if (REPO / path).exists() and not _defines(_resolve(_module_of(path)), name):
            out.append(f"no {name} in {path}")
    return out


def test_there_are_guides_and_the_index_links_them():
    assert len(GUIDES) >= 5, GUIDES
    index = (REPO / "docs" / "README.md").read_text()
    assert all(f"({g.name})" in index for g in GUIDES)


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: p.name)
def test_every_file_module_and_name_a_guide_mentions_exists(guide: Path):
    text = guide.read_text()
    paths, dotted, pairs = names(text)
    assert paths and (dotted or pairs), "the check found nothing to check in this guide"
    assert problems(text) == []


def test_the_check_catches_a_misspelt_name():
    assert problems("`operators/windows/keyd.py`") == ["no file operators/windows/keyd.py"]
    assert problems("`operators.udm.ColumnAggregat`") == ["no operators.udm.ColumnAggregat"]
    assert problems("`operators.udmm.ColumnAggregate`") == ["no operators.udmm.ColumnAggregate"]
    assert problems("`operators/windows/keyed.py` `support`") == [
        "no support in operators/windows/keyed.py"]
    assert problems("`assign_step` in `topology/planning/planner.py`") == [
        "no assign_step in topology/planning/planner.py"]
    assert problems("`operators/windows/keyed.py` `supports`, `operators.udm.ColumnAggregate`, "
                    "`assign_steps` in `topology/planning/planner.py`, `session_window` in "
                    "`topology/stream.py`, in a block:\n```\n`operators.nope`\n```") == []
