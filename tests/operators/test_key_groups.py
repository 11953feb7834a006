"""Key groups (:mod:`operators.key_groups`): a partitioned group_apply cut at any point and
carried on at any other number of partitions gives the output of one uninterrupted run.

The partitions are simulated as the runtime wires them: a router sends each event to the
partition of its key group and every CTI to all, each partition is the operator named after
it, and a ``Union(tag=False)`` merges them. At the cut every partition's and the merge's
state is snapshot; :func:`regroup` deals the keys to the new width, and the merge is
restored at the new number of inputs. The merged output must be a valid stream (every
retraction finds its insert, whichever partition holds its key now) whose CHT is the
reference's.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import to_cht, validate
from operators.events import Cti, Insert, Message
from operators.group_apply import GroupApply
from operators.key_groups import key_group, partition_of, regroup
from operators.union import Union
from operators.windows import make_window, tumbling_window
from operators.windows.evaluate import Ids
from tests.kit import PROPERTY, assert_equivalent, physical_streams
from tests.operators.test_group_apply import CASES, _key
from tests.reference_joins import final_cti
from topology.planning.routing import Partitioner

GROUPS = 4


def named(factory, name: str):
    """``factory()`` as a partition of a rescalable group_apply builds it: named after its
    partition, a general group_apply numbering its instances under that name."""
    def make():
        proc = factory()
        proc.name = name
        if isinstance(getattr(proc, "ids", None), Ids):
            proc.ids.name = name
        proc.named_instances = True
        return proc
    return make


class Partitioned:
    """``n`` partitions and their merge, fed as the runtime feeds them."""

    def __init__(self, factory, n: int) -> None:
        self.factory, self.n = factory, n
        self.makers = [named(factory, f"g[{p}]") for p in range(n)]
        self.parts = [make() for make in self.makers]
        self.merge = Union(n, name="g", tag=False)
        self.router = Partitioner(_key, n, "g", GROUPS)

    def process(self, batch: list[Message]) -> list[Message]:
        routed: list[list[Message]] = [[] for _ in range(self.n)]
        for m in batch:
            if type(m) is Cti:
                for r in routed:
                    r.append(m)
            else:
                routed[self.router.index(m.payload)].append(m)
        out: list[Message] = []
        for p, part in enumerate(self.parts):
            out.extend(self.merge.process(part.process(routed[p]), p))
            part._check()
        return out

    def rescaled(self, n: int) -> Partitioned:
        """The same state at ``n`` partitions (snapshots, regrouped, restored)."""
        new = Partitioned(self.factory, n)
        states = regroup([p.snapshot() for p in self.parts], new.makers, GROUPS)
        for part, state in zip(new.parts, states, strict=True):
            part.restore(state)
        new.merge.restore(self.merge.snapshot())
        return new


def rescaled_run(factory, stream: list[Message], data) -> list[Message]:
    """``stream`` through partitions of ``factory`` at a drawn width, rescaled to another at
    a drawn cut: the merged output, checked to be a valid stream."""
    width = data.draw(st.integers(1, GROUPS), label="partitions")
    cut = data.draw(st.integers(0, len(stream)), label="cut")
    then = data.draw(st.integers(1, GROUPS), label="rescaled to")
    run = Partitioned(factory, width)
    out = run.process(stream[:cut])
    out += run.rescaled(then).process(stream[cut:])
    validate(out, name="the merged output")
    return out


@pytest.mark.parametrize("case", ["where_select", "alter_lifetime", "shift_back",
                                  "tumbling_count"])
@PROPERTY
@given(stream=physical_streams(payloads=st.integers(0, 8)), data=st.data())
def test_rescaled_at_any_cut_gives_the_uninterrupted_output(case, stream, data):
    factory, reference, _ = CASES[case]
    stream = stream + [Cti(final_cti(stream) + 10)]
    out = rescaled_run(factory, stream, data)
    assert_equivalent(out, reference(to_cht(stream)))


def test_a_key_group_moves_whole_and_keeps_its_ids():
    # a window per key holds its count open; rescaled from 1 to 4 partitions, the count's
    # correction retracts the row the one partition sent, under the same id
    factory = lambda: GroupApply(_key, lambda: make_window(tumbling_window(10), len))  # noqa: E731
    one = Partitioned(factory, 1)
    first = one.process([Insert("a", 1, 2, 0), Insert("b", 2, 3, 3), Cti(1)])
    four = one.rescaled(4)
    holder = partition_of(key_group(0, GROUPS), 4, GROUPS)  # (every payload's key is 0)
    assert [len(p.groups) for p in four.parts] == [int(p == holder) for p in range(4)]
    more = four.process([Insert("c", 3, 4, 6), Cti(20)])
    validate(first + more, name="output")
    assert sorted(to_cht(first + more)) == [(0, 10, (0, 3))]
    retracted = {m.id for m in more if type(m) is not Insert and type(m) is not Cti}
    assert retracted <= {m.id for m in first if type(m) is Insert}


def test_regroup_refuses_more_partitions_than_key_groups():
    one = Partitioned(CASES["where"][0], 1)
    with pytest.raises(ValueError, match="1 to 4 partitions, not 5"):
        regroup([p.snapshot() for p in one.parts], [one.makers[0]] * 5, GROUPS)


def _fast_paths():
    """(the keyed fast path, the general group_apply it stands for) of each rescalable one
    (the count windows' are not: they mint ids from numbers they keep, under their name)."""
    from operators.aggregates import Count
    from operators.windows import session_window
    from operators.windows.keyed import KeyedWindowAggregate
    from operators.windows.keyed_session import KeyedSessionAggregate

    def general(spec, udm):
        return lambda: GroupApply(_key, lambda: make_window(spec, udm))

    return {
        "window": (lambda: KeyedWindowAggregate(_key, tumbling_window(5), Count()),
                   general(tumbling_window(5), Count())),
        "session": (lambda: KeyedSessionAggregate(_key, session_window(3), Count()),
                    general(session_window(3), Count())),
    }


@pytest.mark.parametrize("path", ["window", "session"])
@PROPERTY
@given(stream=physical_streams(payloads=st.integers(0, 8), retractions=False, edges=False,
                               max_length=1),
       data=st.data())
def test_the_keyed_fast_paths_rescale_too(path, stream, data):
    # point inserts only (what they take): their state by key dealt, against the general
    # operator run without a cut
    fast, general = _fast_paths()[path]
    stream = [m for m in stream if type(m) is Cti or m.end == m.start + 1]
    stream = stream + [Cti(final_cti(stream) + 10)]
    out = rescaled_run(fast, stream, data)
    assert_equivalent(out, to_cht(general().process(stream)))
