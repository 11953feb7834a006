"""The plans of the benchmark's queries, pinned: every Nexmark query and W1–W3, as
``explain()`` prints them (the tree, and each stage with the fast path chosen for it, the
``variant`` of :mod:`topology.planning.rules`), against the files in ``tests/topology/plans/``.

A change to the planner that moves a query off its fast path, or onto another, shows here as
a diff of the plan. When the change is meant, write the files anew and read the diff::

    CEDAR_UPDATE_PLANS=1 python -m pytest tests/topology/test_plan_snapshots.py
"""

from __future__ import annotations

import os
import pathlib
import re

import pytest

from benchmarks import workloads as wl
from benchmarks.nexmark import generator as gen
from benchmarks.nexmark import queries as nq
from topology import Stream

PLANS = pathlib.Path(__file__).with_name("plans")
UPDATE = os.environ.get("CEDAR_UPDATE_PLANS") == "1"


def _text(q: Stream) -> str:
    """``explain()`` without what changes from run to run (object addresses)."""
    return re.sub(r" at 0x[0-9a-f]+", "", q.explain()) + "\n"


def _nexmark() -> dict[str, Stream]:
    src = nq.sources({**gen.generate(2_000, seed=1), "side_input": gen.side_input(keys=10)})
    return {name: q.cedar(*(src[i] for i in q.inputs)) for name, q in nq.QUERIES.items()}


def _workloads() -> dict[str, Stream]:
    cols = wl.points(1_000, keys=10, seed=1)
    left, right = wl.source(cols, name="left"), wl.source(cols, name="right")
    return {"W1": wl.w1(wl.source(cols, name="src")), "W2": wl.w2(wl.source(cols, name="src")),
            "W3": wl.w3(left, right)}


QUERIES = {**_nexmark(), **_workloads()}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_the_plan_is_the_pinned_one(name):
    path = PLANS / f"{name}.txt"
    got = _text(QUERIES[name])
    if UPDATE or not path.exists():
        path.write_text(got)
        if not UPDATE:
            pytest.fail(f"{path} did not exist: written now, read it and commit it")
    assert got == path.read_text()


def test_no_plan_file_is_left_over():
    assert sorted(p.stem for p in PLANS.glob("*.txt")) == sorted(QUERIES)
