"""Reliability tests (docs/errors.md): nothing lost, nothing silently dropped.

The helpers below run a query inline while keeping hold of its stages, so that a test can read
what ``collect(runtime="inline")`` does not return: every source's ``stats``, ``late`` and
``dead_letters``, and the dead letters of the operators (a window's failing UDM calls).
"""

from __future__ import annotations

from typing import Any

from operators.cht import validate
from operators.events import Message
from topology.planning.dag import DagProcessor
from topology.running.inline import drive

#: The accounting equation's terms, as an Ingress (a rows source) counts them.
TERMS = ("processed", "dropped", "adjusted", "dead_lettered")


def run_dag(stream: Any, batch_size: int = 7) -> tuple[list[Message], DagProcessor, list[int]]:
    """Run ``stream`` inline as ``collect(runtime="inline")`` does (sources round robin, then
    the end of input); return the output, the DAG (its stages in ``dag.procs``) and how many
    items were fed to each source (port order)."""
    plan = stream.plan()
    dag = DagProcessor(plan, inline_sink=True)
    out, fed = drive(dag, plan, batch_size)
    validate(out, name="query output")
    return out, dag, fed


def records(dag: DagProcessor, kind: str) -> list[Any]:
    """Every stage's ``late`` or ``dead_letters`` records, as ``Query.late()`` /
    ``Query.dead_letters()`` gather them on Ray."""
    return [r for p in dag.procs.values() for r in (getattr(p, kind, None) or ())]


def assert_accounted(stats: dict[str, int]) -> None:
    """The accounting equation of one rows source."""
    total = sum(stats[k] for k in TERMS)
    assert stats["received"] == total, (
        f"received {stats['received']} != processed + dropped + adjusted + dead_lettered "
        f"= {total}: {stats}")
