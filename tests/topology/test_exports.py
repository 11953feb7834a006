"""The public import surface: what a topology script imports from ``topology`` (one home for
users, as bytewax has ``bytewax.operators``). Adding a name is a decision: add it here too."""

from __future__ import annotations

import ast
import pathlib

import topology

PUBLIC = {
    "MAX_TIME", "MIN_TIME", "Cti", "Insert", "Retract", "check_equivalent", "equivalent",
    "to_cht", "AdvanceTime", "Query", "Stream", "Trace", "WindowedStream", "attach", "col",
    "Aggregates", "Avg", "Count", "CountDistinct", "Max", "Min", "Sum", "TimeWeightedAverage",
    "TopK", "WindowPolicy", "per_value",
    "Aggregate", "IncrementalAggregate", "Operator", "TimeSensitiveAggregate",
    "TimeSensitiveOperator", "Window", "register", "check", "CheckFailed",
    "StreamOperator", "StepHosts",
    "Collected", "DeadLetterWarning", "RunReport",
    "QueryFailed", "SavepointFailed",  # what a deployed query's wait() and stop() raise
}
ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_all_is_the_public_surface():
    assert set(topology.__all__) == PUBLIC
    assert len(topology.__all__) == len(set(topology.__all__))


def test_the_built_ins_the_docs_list_import_from_topology():
    """docs/udm.md lists CountDistinct as a built-in (issue 41 item 14); docs/windows.md's
    WindowPolicy and docs/operators.md's per_value are public too."""
    from topology import CountDistinct, WindowPolicy, per_value

    assert CountDistinct("b").compute([{"b": 1}, {"b": 2}, {"b": 1}]) == 2
    assert WindowPolicy(emit="final").final and callable(per_value)


def test_every_public_name_resolves():
    missing = [name for name in topology.__all__ if getattr(topology, name, None) is None]
    assert missing == []


def test_examples_and_readme_import_only_the_public_surface():
    """Users copy the examples: they import cedar's names from ``topology`` alone."""
    texts = {p.name: p.read_text() for p in (ROOT / "examples").glob("*.py")}
    readme = (ROOT / "README.md").read_text()
    texts["README.md"] = "\n".join(block.split("```")[0]
                                   for block in readme.split("```python")[1:])
    bad = []
    for name, text in texts.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module and \
                    node.module.split(".")[0] in ("operators", "actors", "topology"):
                if node.module != "topology":
                    bad.append(f"{name}: from {node.module} import ...")
                else:
                    bad += [f"{name}: {a.name}" for a in node.names if a.name not in PUBLIC]
    assert bad == []
