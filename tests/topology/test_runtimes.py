"""The same test bodies on both runtimes (``runtime`` is ``"inline"`` and ``"ray"``): errors
name their step, order survives many small batches, partitioned group_apply agrees with one
partition."""

from __future__ import annotations

import pytest

from operators.cht import to_cht, validate
from operators.errors import OperatorError
from operators.events import MAX_TIME, Cti, Insert, Retract
from tests.kit import assert_equivalent
from topology import Stream


def _readings(n, keys=3):
    return [Insert(f"m{i}", i, i + 4, {"k": i % keys, "v": i % 5}) for i in range(n)] + [
        Cti(n + 4)]


def test_errors_in_an_actor_name_the_step(runtime):
    stream = Stream.from_events([Insert("a", 0, 1, {"x": 1}), Insert("b", 1, 2, {}), Cti(2)])
    query = stream.select(lambda p: p["x"], name="read-x").where(lambda v: v > 0)
    with pytest.raises(OperatorError, match=r"read-x.*KeyError"):
        query.collect(runtime=runtime)
    # the runtime is still usable afterwards
    assert to_cht(stream.where(lambda p: "x" in p).collect(runtime=runtime)) == [(0, 1, {"x": 1})]


def test_big_stream_in_many_batches_keeps_order(runtime):
    # retractions must arrive after their inserts through every actor: 20k messages in
    # batches of 256 with at most 2 in flight per edge
    msgs = []
    for i in range(5_000):
        msgs.append(Insert(i, i, i + 10, i))
        if i % 2:
            msgs.append(Cti(i))
    msgs += [Insert(i, i, MAX_TIME, i) for i in range(5_000, 10_000)]  # edges, closed later
    msgs += [Retract(i, i, MAX_TIME, i + 5, i) for i in range(5_000, 10_000)] + [Cti(20_000)]
    query = Stream.from_events(msgs).shift(1).where(lambda p: p % 3 != 0).select(lambda p: -p)
    out = query.collect(runtime=runtime, batch_size=256, **(
        {"max_in_flight": 2} if runtime == "ray" else {}))
    validate(out)
    assert_equivalent(out, Stream.from_events(msgs).shift(1).where(lambda p: p % 3 != 0)
                      .select(lambda p: -p).collect(runtime="inline", batch_size=10_000))
    assert len(to_cht(out)) == 10_000 - 10_000 // 3 - 1


def test_group_apply_partitions_agree(runtime):
    from operators.aggregates import Count

    stream = Stream.from_events(_readings(80, keys=7))

    def per_key(partitions):
        return stream.group_apply(lambda p: p["k"],
                                  lambda g: g.count_window(3).aggregate(Count()),
                                  partitions=partitions)

    one = per_key(1).collect(runtime=runtime)
    four = per_key(4).collect(runtime=runtime)
    validate(four)
    assert_equivalent(four, one)
    assert {p[0] for _, _, p in to_cht(one)} == set(range(7))
