"""The layout the code relies on: every node type has a planner builder and a way to build it
from a ``Stream``, so a new operator cannot be half added (see docs/adding-an-operator.md)."""

from __future__ import annotations

import inspect

from topology import Stream, WindowedStream
from topology.building import nodes as n
from topology.planning.planner import BUILDERS

#: the node types (not a base a few of them share: Node.shared_base)
NODE_TYPES = [c for _, c in inspect.getmembers(n, inspect.isclass)
              if issubclass(c, n.Node) and c is not n.Node and not vars(c).get("shared_base")]

#: nodes a Stream method builds under another name (the verb is the step id's readable part)
BUILT_BY = {"from_events": "from_events", "from_rows": "from_rows", "published": "published",
            "group": "group_apply", "window": "aggregate"}


def test_every_node_type_has_a_builder():
    assert NODE_TYPES, "no node types found"
    assert [c.__name__ for c in NODE_TYPES if c not in BUILDERS] == []


def test_every_node_type_has_a_stream_method():
    methods = set(dir(Stream)) | set(dir(WindowedStream))
    missing = [c.__name__ for c in NODE_TYPES if BUILT_BY.get(c.verb, c.verb) not in methods]
    assert missing == []


# -- package lines ------------------------------------------------------------------------------
import ast  # noqa: E402
import pathlib  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def imported(package: str) -> dict[str, set[str]]:
    """module path -> the top-level names it imports (absolute imports only)."""
    out: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        out[str(path.relative_to(ROOT))] = names
    return out


def test_operators_know_no_runtime_clock_or_io_library():
    """operators/ is the pure algebra: no Ray, Spark, Arrow I/O, clock, threads or sockets."""
    banned = {"ray", "pyspark", "actors", "topology", "time", "threading", "socket", "os"}
    assert {m: sorted(n & banned) for m, n in imported("operators").items() if n & banned} == {}


def test_actors_know_no_topology():
    """actors/ is the Ray runtime: it hosts what the planner's side built, never imports it."""
    assert {m: sorted(n) for m, n in imported("actors").items() if "topology" in n} == {}


# -- module cycles ------------------------------------------------------------------------------
def module_graph() -> dict[str, set[str]]:
    """module -> the modules of the three packages it imports, anywhere in its body (function-
    level imports too), relative imports resolved; ``from pkg import mod`` names the module."""
    modules = {str(p.relative_to(ROOT).with_suffix("")).replace("/", ".").removesuffix(".__init__")
               for pkg in ("operators", "actors", "topology") for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod in sorted(modules):
        path = ROOT / (mod.replace(".", "/") + ".py")
        if not path.exists():
            path = ROOT / mod.replace(".", "/") / "__init__.py"
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")
                if node.level:
                    base = base[: len(base) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                targets = [target] + [f"{target}.{a.name}" for a in node.names]
            else:
                continue
            deps.update(t for t in targets if t in modules and t != mod)
        graph[mod] = deps
    return graph


def test_no_module_imports_one_that_imports_it():
    """No import cycle between modules, however long: every module can be read (and changed)
    knowing only the ones below it. A package's ``__init__`` re-exporting its modules is not a
    cycle with them; everything else is."""
    graph = module_graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for dep in sorted(graph[mod]):
            if mod.startswith(dep + ".") or dep.startswith(mod + "."):
                continue  # a package and its own modules
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep):], dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[mod] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [mod])
    assert cycles == []


# -- sizes and private names (issue 40: rooms a person can read) --------------------------------
PACKAGES = ("operators", "actors", "topology")
MOST_LINES, MOST_CLASS_LINES = 800, 400


def _package_files() -> list[pathlib.Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_no_package_file_is_over_800_lines_and_no_class_over_400():
    long = {str(p.relative_to(ROOT)): n for p in _package_files()
            if (n := len(p.read_text().splitlines())) > MOST_LINES}
    big = {f"{p.relative_to(ROOT)}:{c.name}": c.end_lineno - c.lineno + 1
           for p in _package_files() for c in ast.walk(ast.parse(p.read_text()))
           if isinstance(c, ast.ClassDef) and (c.end_lineno or 0) - c.lineno + 1 > MOST_CLASS_LINES}
    assert (long, big) == ({}, {}), "split these along their concerns (docs/architecture.md)"


def test_no_private_name_is_imported_from_another_module_of_cedar():
    found = {}
    for p in _package_files():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0]
                                                   in PACKAGES):
                names = [a.name for a in node.names if a.name.startswith("_")
                         and not a.name.startswith("__")]
                if names:
                    found[str(p.relative_to(ROOT))] = names
    assert found == {}, "make a helper two modules share public in one of them"


def test_the_rooms_of_topology_lean_one_way():
    """building <- planning <- running <- seeing, the face above them, spark beside it: a
    module-level import never reaches up (docs/architecture.md; a call up is made inside the
    function that needs it)."""
    order = ["building", "planning", "running", "seeing"]
    #: the one exception: cedar check varies a query's plan and runs it, as a user would
    uses_the_face = {"topology/seeing/checker.py"}
    up = []
    for p in (ROOT / "topology").rglob("*.py"):
        parts = p.relative_to(ROOT / "topology").parts
        if len(parts) < 2 or parts[0] not in order:
            continue
        for node in ast.parse(p.read_text()).body:  # module level only
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("topology."):
                room = node.module.split(".")[1]  # type: ignore[union-attr]
                here = str(p.relative_to(ROOT))
                if (room not in order and here not in uses_the_face) or (
                        room in order and order.index(room) > order.index(parts[0])):
                    up.append(f"{here} imports {node.module}")
    assert up == []
