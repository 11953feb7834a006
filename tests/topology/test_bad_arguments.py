"""Every bad argument fails at the builder call that wrote it (docs/STYLE: "validate where it
was written"), as a TypeError or ValueError whose message names the argument -- never later,
inside ``plan()`` or ``collect()``.

The cases walk every public method of :class:`Stream` and :class:`WindowedStream`, found with
``inspect``: a new method without a bad-argument case here (or a reason in :data:`NO_CASE`)
fails :func:`test_every_public_method_has_a_case`. Only the call is made: no plan, no run.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest

from operators.aggregates import Count
from operators.events import Cti, Insert
from operators.windows import WindowPolicy, tumbling_window
from topology import Stream, WindowedStream

S = Stream.from_events([Insert(1, 0, 1, {"k": 1}), Cti(1)])
ROWS = Stream.from_rows([{"t": 0}], start="t")
W = S.tumbling_window(5)

#: method -> [(call with a bad argument, the argument its message must name)]
CASES: dict[str, list[tuple[Callable[[], Any], str]]] = {
    # -- sources
    "from_events": [(lambda: Stream.from_events(42), "messages"),
                    (lambda: Stream.from_events([], name="a/b"), "name")],
    "from_rows": [(lambda: Stream.from_rows(42, start="t"), "rows"),
                  (lambda: Stream.from_rows([], start="t", shape="blob"), "shape")],
    "from_spark": [(lambda: Stream.from_spark(42, start="t"), "df")],
    "from_arrow": [(lambda: Stream.from_arrow(42, start="t"), "data"),
                   (lambda: Stream.from_arrow({"t": [1]}, start="t", name="a b"), "name")],
    "published": [(lambda: Stream.published("a/b"), "query")],
    # -- span operators
    "where": [(lambda: S.where(3), "pred"), (lambda: S.where(bool, name="sink"), "name")],
    "select": [(lambda: S.select("x"), "fn")],
    "alter_lifetime": [(lambda: S.alter_lifetime(duration=-1), "duration"),
                       (lambda: S.alter_lifetime(duration=1.5), "duration"),
                       (lambda: S.alter_lifetime(start=5), "start")],
    "shift": [(lambda: S.shift(1.5), "delta")],
    "to_points": [(lambda: S.to_points(name="a/b"), "name")],
    "clip_duration": [(lambda: S.clip_duration(-1), "limit"),
                      (lambda: S.clip_duration(0), "limit")],
    "scan": [(lambda: S.scan(42), "step"),
             (lambda: S.scan(lambda st, p: (st, []), tie=3), "tie"),
             (lambda: S.scan(lambda st, p: (st, []), name="a/b"), "name")],
    "distinct": [(lambda: S.distinct(key=1.5), "key"),
                 (lambda: S.distinct(name="a/b"), "name")],
    "detect": [(lambda: S.detect("A B+ (C", within=5), "column 7"),
               (lambda: S.detect("A B", {"C": lambda p, m: True}, within=5), "define"),
               (lambda: S.detect("A B", within=None), "within"),  # type: ignore[arg-type]
               (lambda: S.detect("A B", within=0), "within"),
               (lambda: S.detect("A B", within=5, emit="soon"), "emit"),
               (lambda: S.detect("A B", within=5, key=1.5), "key")],
    "not_followed_by": [(lambda: S.not_followed_by(S, within=0), "within"),
                        (lambda: S.not_followed_by(S, within=5, on="k"), "on"),
                        (lambda: S.not_followed_by(42, within=5), "other")],  # type: ignore[arg-type]
    # -- windows
    "window": [(lambda: S.window("tumbling"), "spec"),
               (lambda: S.window(tumbling_window(5), output="bogus"), "output"),
               (lambda: S.window(tumbling_window(5), clip="bogus"), "clip"),
               (lambda: S.window(tumbling_window(5), emit="eventually"), "emit"),
               (lambda: S.window(tumbling_window(5), clip=3), "clip"),
               (lambda: S.window(tumbling_window(5), policy="final"), "policy"),
               (lambda: S.window(tumbling_window(5), emit="final",
                                 policy=WindowPolicy()), "policy")],
    "hopping_window": [(lambda: S.hopping_window(size=0, hop=1), "size"),
                       (lambda: S.hopping_window(10, hop=-2), "hop"),
                       (lambda: S.hopping_window(10, 2, alignment=0.5), "alignment"),
                       (lambda: S.hopping_window(10, 2, output="bogus"), "output")],
    "tumbling_window": [(lambda: S.tumbling_window(0), "size"),
                        (lambda: S.tumbling_window(5, emit="later"), "emit")],
    "snapshot_window": [(lambda: S.snapshot_window(clip="bogus"), "clip"),
                        (lambda: S.snapshot_window(output="compressed"), "output")],
    "count_window": [(lambda: S.count_window(0), "n_starts"),
                     (lambda: S.count_window(3, by="middle"), "by"),
                     (lambda: S.count_window(3, output="window"), "output"),
                     (lambda: S.count_window(3, clip="none"), "clip")],
    "session_window": [(lambda: S.session_window(gap=0), "gap"),
                       (lambda: S.session_window(5, max_duration=2), "max_duration"),
                       (lambda: S.session_window(5, output="compressed"), "output")],
    # -- multi-input
    "join": [(lambda: S.join(other=42), "other"), (lambda: S.join(S, on=3), "on"),
             (lambda: S.join(S, on=("k", 1.5)), "on"), (lambda: S.join(S, select=3), "select")],
    "anti_join": [(lambda: S.anti_join(42), "other"), (lambda: S.anti_join(S, on="k"), "on")],
    "left_join": [(lambda: S.left_join(42), "other"), (lambda: S.left_join(S, select=1), "select")],
    "full_outer_join": [(lambda: S.full_outer_join(42), "other"),
                        (lambda: S.full_outer_join(S, select=1), "select")],
    "import_ctis": [(lambda: S.import_ctis(42), "leader"),
                    (lambda: S.import_ctis(S, policy="keep"), "policy")],
    "late": [(lambda: ROWS.late(name="a/b"), "name")],
    "union": [(lambda: S.union(42), "others"), (lambda: S.union(S, "x"), "others")],
    "group_apply": [(lambda: S.group_apply("k", 3), "fn"),
                    (lambda: S.group_apply(1.5, lambda g: g), "key"),
                    (lambda: S.group_apply("k", lambda g: 3), "fn"),
                    (lambda: S.group_apply("k", lambda g: g, partitions=0), "partitions"),
                    (lambda: S.group_apply("k", lambda g: g, key_groups=0), "key_groups"),
                    (lambda: S.group_apply("k", lambda g: g, partitions=200), "key_groups")],
    "with_partitions": [(lambda: S.with_partitions(4), "partitions"),
                        (lambda: S.group_apply("k", lambda g: g, partitions=2)
                         .with_partitions(3, step="where#9"), "step")],
    # -- planning and running (each fails before anything runs)
    "plan": [(lambda: S.plan(fuse="yes"), "fuse"), (lambda: S.plan(fuse=2), "fuse")],
    "explain": [(lambda: S.explain(stages="no"), "stages"), (lambda: S.explain(fuse=1), "fuse")],
    "collect": [(lambda: S.collect(runtime="bogus"), "runtime"),
                (lambda: S.collect("inline", batch_size=0), "batch_size"),
                (lambda: S.collect(fuse="deep"), "fuse"),
                (lambda: S.collect("inline", fuse="deep"), "fuse")],
    "to_spark": [(lambda: S.to_spark(runtime="bogus"), "runtime")],
    "write": [(lambda: S.write("/nonexistent/out", mode="sometimes"), "mode"),
              (lambda: S.write("/nonexistent/out", runtime="bogus"), "runtime")],
    "to_spark_stream": [(lambda: S.to_spark_stream("/nonexistent/out", runtime="bogus"),
                         "runtime")],
    "deploy": [(lambda: S.deploy("a/b"), "name"), (lambda: S.deploy("a", fuse="deep"), "fuse")],
}

#: WindowedStream's methods: what a window runs.
WINDOWED_CASES: dict[str, list[tuple[Callable[[], Any], str]]] = {
    "aggregate": [(lambda: W.aggregate(42), "udm"),
                  (lambda: W.aggregate(Count(), on_error="ignore"), "on_error"),
                  (lambda: W.aggregate(Count(), name="a/b"), "name"),
                  (lambda: S.snapshot_window(output="keep").aggregate(Count()), "output")],
    "apply": [(lambda: W.apply(Count()), "aggregate"),
              (lambda: W.apply(42), "udm")],
}

#: Public methods with no argument that could be bad, and why.
NO_CASE: dict[str, str] = {}


def _public(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls) if not name.startswith("_")
            and callable(getattr(cls, name))}


def test_every_public_method_has_a_case():
    assert _public(Stream) == set(CASES) | set(NO_CASE), (
        "give each public Stream method a bad-argument case in CASES (or a reason in NO_CASE)")
    assert _public(WindowedStream) == set(WINDOWED_CASES)


ALL = [(f"{m}[{i}]", call, arg) for table in (CASES, WINDOWED_CASES)
       for m, cases in table.items() for i, (call, arg) in enumerate(cases)]


@pytest.mark.parametrize("case,call,arg", ALL, ids=[c for c, _, _ in ALL])
def test_a_bad_argument_fails_at_the_call_naming_it(case, call, arg):
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    assert re.search(rf"\b{arg}\b", str(info.value)), (
        f"{case}: {type(info.value).__name__}: {info.value} does not name {arg!r}")


def test_policy_strings_and_the_policy_object_build_the_same_node():
    by_names = S.hopping_window(10, 2, clip="left", output="point_end", emit="final")
    by_policy = S.hopping_window(10, 2, policy=WindowPolicy("left", "point_end", "final"))
    assert by_names.policy == by_policy.policy == WindowPolicy("left", "point_end", "final")
    # the node holds the policy with the window's default filled in
    node = S.count_window(3).aggregate(Count())._node
    assert node.policy == WindowPolicy(output="point_end")


def test_a_window_policy_is_frozen_and_checked_once_when_made():
    p = WindowPolicy(output="compressed")
    with pytest.raises(AttributeError):
        p.output = "window"  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"emit=None .*'speculative', 'final'"):
        WindowPolicy(emit=None)  # type: ignore[arg-type]
