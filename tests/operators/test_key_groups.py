"""Key groups (:mod:`operators.key_groups`): a partitioned group_apply cut at any point and
carried on at any other number of partitions gives the output of one uninterrupted run.

The partitions are simulated as the runtime wires them: a router sends each event (each
event of a column batch) to the partition of its key group and every CTI to all, each
partition is the operator named after it, and a ``Union(tag=False)`` merges them. At the
cut every partition's and the merge's state is snapshot; :func:`regroup` deals the keys to
the new width, and the merge is restored at the new number of inputs. The merged output
must be a valid stream (every retraction finds its insert, whichever partition holds its
key now) whose CHT is the reference's.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Count, Max, Min
from operators.cht import to_cht, validate
from operators.columns import Columns, expand
from operators.events import Cti, Insert, Message
from operators.group_apply import GroupApply
from operators.key_groups import key_group, partition_of, regroup
from operators.union import Union
from operators.windows import CountWindow, WindowPolicy, make_window, tumbling_window
from operators.windows.count import CountWindowOperator
from operators.windows.evaluate import Ids
from operators.windows.keyed_count import KeyedEndAggregate
from operators.windows.keyed_count_start import KeyedCountExtreme
from tests.kit import INF, PROPERTY, assert_equivalent, physical_streams
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
            elif type(m) is Columns:
                index = self.router.indexes(m)
                assert index is not None, "the test's keys run on the columns"
                for p, r in enumerate(routed):
                    if (index == p).any():
                        r.append(m.take(index == p))
            else:
                routed[self.router.index(m.payload)].append(m)
        out: list[Message] = []
        for p, part in enumerate(self.parts):
            out.extend(self.merge.process(part.process(routed[p]), p))
            part._check()
        return out

    def rescaled(self, n: int) -> Partitioned:
        """The same state at ``n`` partitions (snapshots, regrouped, restored): each key's
        in one partition, none lost or doubled."""
        new = Partitioned(self.factory, n)
        states = regroup([p.snapshot() for p in self.parts], new.makers, GROUPS)
        for part, state in zip(new.parts, states, strict=True):
            part.restore(state)
            part._check()
        assert sum(p.state_size() for p in new.parts) == sum(p.state_size() for p in self.parts)
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
    """(the keyed fast path, the general group_apply it stands for) of the window and
    session fast paths (the count windows': below)."""
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


def _value(p):
    return p


def in_columns(stream: list[Message], data) -> list[Message]:
    """``stream`` with drawn runs of its inserts as column batches (the payload one int
    column, on which the key and the value run)."""
    out: list[Message] = []
    run: list[Insert] = []
    for m in [*stream, None]:
        if type(m) is Insert and (not run or data.draw(st.integers(0, 3), label="join")):
            run.append(m)
            continue
        if run:
            out.append(Columns(np.array([i.id for i in run], dtype=object),
                               np.array([i.start for i in run], dtype=np.int64),
                               np.array([i.end for i in run], dtype=np.int64),
                               np.array([i.payload for i in run], dtype=np.int64)))
            run = []
        if type(m) is Insert:
            run.append(m)
        elif m is not None:
            out.append(m)
    return out


COUNT_UDMS = {"max": lambda: Max(_value), "min": lambda: Min(_value), "count": Count}


@pytest.mark.parametrize("emit", ["speculative", "final"])
@PROPERTY
@given(stream=physical_streams(payloads=st.integers(0, 8)), udm=st.sampled_from(sorted(COUNT_UDMS)),
       columns=st.booleans(), data=st.data())
def test_the_by_end_count_window_rescales(emit, stream, udm, columns, data):
    # the keyed by-end count window (retractions, edges; held column-wise while only column
    # batches of inserts came, emit="final", Min or Max), against the general operator
    make = COUNT_UDMS[udm]
    policy = WindowPolicy(emit=emit)
    if columns:  # (inserts only, at their first lifetimes: a column batch holds inserts)
        stream = [m for m in stream if type(m) in (Insert, Cti)]
    ends = [m.end for m in stream if type(m) is Insert and m.end != INF]
    stream = stream + [Cti(max([final_cti(stream), *ends]) + 10)]  # (every window closed)
    general = GroupApply(_key, lambda: CountWindowOperator(CountWindow(1, "end"), make()))
    want = to_cht(general.process(stream))
    if columns:
        stream = in_columns(stream, data)
    out = rescaled_run(lambda: KeyedEndAggregate(_key, make(), policy=policy), stream, data)
    assert_equivalent(out, want)


@PROPERTY
@given(stream=physical_streams(payloads=st.integers(0, 8), retractions=False, edges=False,
                               span=8),
       n=st.integers(1, 4), which=st.sampled_from([Max, Min]), columns=st.booleans(),
       data=st.data())
def test_the_count_window_extreme_rescales(stream, n, which, columns, data):
    # the keyed count window extreme (by start, Min or Max over inserts): a window open at
    # the cut and corrected after it is retracted under the id another partition sent it with
    stream = stream + [Cti(final_cti(stream) + 10)]
    if columns:
        stream = in_columns(stream, data)
    general = GroupApply(_key, lambda: CountWindowOperator(CountWindow(n), which(_value)))
    out = rescaled_run(lambda: KeyedCountExtreme(_key, CountWindow(n), which(_value)), stream,
                       data)
    assert_equivalent(list(expand(out)), to_cht(general.process(list(expand(stream)))))


def test_the_planner_runs_a_rescalable_group_apply_of_count_windows_rescalable():
    # the partitions of a group_apply the planner runs as a count window fast path can be
    # dealt by key (a rescale of them is no longer refused)
    from operators.key_groups import rescalable
    from topology import Stream

    rows = [{"t": t, "close": t + 2, "k": t % 3, "v": t % 5} for t in range(6)]
    src = Stream.from_rows(rows, start="t", end="close", shape="interval")
    for window, fast in ((lambda g: g.count_window(1, by="end"), KeyedEndAggregate),
                         (lambda g: g.count_window(3), KeyedCountExtreme)):
        q = src.group_apply("k", lambda g, w=window: w(g).aggregate(Max("v")), partitions=2)
        ops = [s.factory() for s in q.plan().stages.values() if s.role == "operator"]
        parts = [op for op in ops if isinstance(op, fast)]
        assert len(parts) == 2 and all(rescalable(p) for p in parts)
