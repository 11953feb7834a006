"""Step and query names are checked where the query is built (issue #28, item 7).

A step name names the step's Ray actor ``<query>/<step>``, its trace files and its lines in
stats and errors. Before, any string passed: ``where(..., name="a/sink")`` made an actor
``q/a/sink`` that ``cedar status`` listed as a phantom query ``q/a``, ``name="~host"`` collided
with the query's host actor and failed with Ray's own error, and ``name=""`` was silently
replaced by the planner's id. A query name also names its checkpoint folder: ``deploy("..")``
was accepted. Now each is refused by the builder call that wrote it, naming the call, the
argument and the characters allowed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from operators.aggregates import Count
from operators.events import Cti, Insert
from topology import Stream

EVENTS = [Insert(i, i, i + 1, i) for i in range(4)] + [Cti(4)]
BAD = ["a/sink", "~host", "x y", "-x", ".hidden", "tab\tname"]


def _builders() -> dict[str, Callable[[Any], Stream]]:
    """Every builder call that takes ``name=``, as a function of the name."""
    s = Stream.from_events(EVENTS)
    w = s.tumbling_window(2)
    return {
        "from_events": lambda nm: Stream.from_events(EVENTS, name=nm),
        "from_rows": lambda nm: Stream.from_rows([], start="t", name=nm),
        "from_arrow": lambda nm: Stream.from_arrow(pa.table({"t": [1]}), start="t", name=nm),
        "published": lambda nm: Stream.published("other", name=nm),
        "where": lambda nm: s.where(bool, name=nm),
        "select": lambda nm: s.select(str, name=nm),
        "alter_lifetime": lambda nm: s.alter_lifetime(duration=2, name=nm),
        "shift": lambda nm: s.shift(1, name=nm),
        "to_points": lambda nm: s.to_points(name=nm),
        "clip_duration": lambda nm: s.clip_duration(1, name=nm),
        "tumbling.aggregate": lambda nm: w.aggregate(Count(), name=nm),
        "tumbling.apply": lambda nm: w.apply(lambda ps: ps, name=nm),
        "join": lambda nm: s.join(s, name=nm),
        "anti_join": lambda nm: s.anti_join(s, name=nm),
        "left_join": lambda nm: s.left_join(s, name=nm),
        "union": lambda nm: s.union(s, name=nm),
        "group_apply": lambda nm: s.group_apply(lambda p: p, lambda g: g, name=nm),
    }


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("call", list(_builders()))
def test_a_bad_step_name_is_refused_by_the_call_that_wrote_it(call, bad):
    with pytest.raises(ValueError) as error:
        _builders()[call](bad)
    message = str(error.value)
    assert message.startswith(f"{call}(name={bad!r}): not a valid name"), message
    assert "use letters, digits and - _ . # [ ]" in message


@pytest.mark.parametrize("call", ["where", "tumbling.aggregate", "group_apply"])
def test_empty_reserved_and_non_string_names_are_refused(call):
    build = _builders()[call]
    with pytest.raises(ValueError, match=r"not a valid name; use letters"):
        build("")  # was silently replaced by the planner's id
    with pytest.raises(ValueError, match="'sink' is the query's output step"):
        build("sink")
    with pytest.raises(TypeError, match=r"\(name=7\): give a str"):
        build(7)


def test_the_message_names_the_characters_that_are_not_allowed():
    with pytest.raises(ValueError, match=r"\('/', '~' not allowed\)"):
        Stream.from_events(EVENTS).where(bool, name="a/~b/c")


def test_good_names_still_name_their_steps():
    q = (Stream.from_events(EVENTS, name="meters")
         .where(bool, name="per-meter[0]").select(str, name="zähler_2.b#1"))
    assert list(q.plan().stages) == ["meters", "per-meter[0]", "zähler_2.b#1", "sink"]


@pytest.mark.parametrize("bad", ["..", "~host", "a#b", "x y", "q[0]", ""])
def test_a_bad_query_name_is_refused_before_anything_starts(bad):
    q = Stream.from_events(EVENTS)
    with pytest.raises(ValueError, match=re.escape(f"deploy(name={bad!r}): not a valid name")):
        q.deploy(bad)
    with pytest.raises(ValueError,
                       match=re.escape(f"published(query={bad!r}): not a valid name")):
        Stream.published(bad)
