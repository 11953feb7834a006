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
