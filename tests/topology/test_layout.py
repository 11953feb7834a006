"""The layout the code relies on: every node type has a planner builder and a way to build it
from a ``Stream``, so a new operator cannot be half added (see docs/adding-an-operator.md)."""

from __future__ import annotations

import inspect

from topology import Stream, WindowedStream
from topology import nodes as n
from topology.planner import BUILDERS

NODE_TYPES = [c for _, c in inspect.getmembers(n, inspect.isclass)
              if issubclass(c, n.Node) and c is not n.Node]

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
