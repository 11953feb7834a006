"""Every source node declares who feeds it on a cluster (``topology.building.nodes.Feed``): the
deployer reads the declaration and no longer probes the data (the cloudpickle trial is gone)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from operators.events import Cti, Insert
from topology import Stream
from topology.building import nodes as n
from topology.running.feeding import fed_by_cluster, pulls
from topology.spark.held_runs import Batches

TABLE = pa.table({"t": np.arange(4), "v": np.arange(4.0)})


def _source(s: Stream) -> n.Node:
    node = s._node
    while node.inputs:
        node = node.inputs[0]
    return node


@pytest.mark.parametrize("stream, feed", [
    (Stream.from_events([Insert("a", 0, 1, 1), Cti(1)]), "host"),
    # (from_events keeps the messages it is given: an iterator is read once, when built)
    (Stream.from_events(iter([Insert("a", 0, 1, 1), Cti(1)])), "host"),
    (Stream.from_rows([{"t": 1}], start="t"), "host"),
    (Stream.from_rows(({"t": i} for i in range(3)), start="t"), "driver"),
    (Stream.from_arrow(TABLE, start="t"), "host"),
    (Stream.from_arrow(iter([TABLE]), start="t"), "driver"),
    (Stream._batched(Batches(lambda: [TABLE], feed="actor"), "t", None, "point", None, None,
                     "part"), "actor"),
])
def test_each_source_declares_who_feeds_it(stream: Stream, feed: str) -> None:
    src = _source(stream)
    assert src.feed == feed  # type: ignore[attr-defined]
    plan = stream.plan()
    step = next(iter(plan.sources))
    assert fed_by_cluster(plan, step) == (feed != "driver")
    assert (pulls(plan, step) is not None) == (feed == "actor")


def test_a_declaration_outside_the_vocabulary_is_fed_by_the_driver() -> None:
    class Odd(list):  # a list subclass would be host-fed; an object with a bad feed is not
        pass

    class Declares:
        feed = "somewhere"

        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter(())

    assert n.who_feeds(Odd()) == "host"
    assert n.who_feeds(Declares()) == "driver"
