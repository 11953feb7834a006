"""The trace recorder reads a step's keys through ``Processor.key_functions()`` and
``keyed_output()``, declared by the operators that key their input, not by probing their
attributes (``key``, ``keys``, ``join``, ``keyed``)."""

from __future__ import annotations

import pytest

from actors.recorder import COLUMNS, Recorder
from actors.recorder import TraceSettings as Trace
from operators.aggregates import Count
from operators.distinct import Distinct
from operators.events import Cti, Insert
from operators.group_apply import GroupApply
from operators.join import Join
from operators.left_join import LeftJoin
from operators.processor import Processor
from operators.select import Select
from operators.windows import tumbling_window
from operators.windows.keyed import KeyedWindowAggregate

KEY = COLUMNS.index("key")


def _keys(proc, batches, tmp_path):
    """The recorded (direction, port, key) of every insert row."""
    rec = Recorder(Trace(str(tmp_path)), "step", proc)
    for port, batch in batches:
        rec.process(proc, batch, port)
    return [(r[1], r[2], r[KEY]) for r in rec.rows if r[6] == "insert"]


def test_group_apply_keys_its_input_and_output(tmp_path):
    proc = GroupApply("k", lambda: Select(lambda p: p["v"]))
    got = _keys(proc, [(0, [Insert(1, 0, 5, {"k": "a", "v": 1}), Cti(1)])], tmp_path)
    assert got == [("in", 0, "'a'"), ("out", 0, "'a'")]


@pytest.mark.parametrize("keyed", [True, False])
def test_the_keyed_window_keys_its_output_unless_told_not_to(tmp_path, keyed):
    proc = KeyedWindowAggregate("k", tumbling_window(5), Count(), keyed=keyed, name="kw")
    got = _keys(proc, [(0, [Insert(1, 0, 1, {"k": "a"}), Cti(9)])], tmp_path)
    assert got == [("in", 0, "'a'"), ("out", 0, "'a'" if keyed else None)]


@pytest.mark.parametrize("make", [lambda: Join(on=("k", "k")), lambda: LeftJoin(on=("k", "k"))],
                         ids=["join", "left_join"])
def test_joins_key_both_inputs(tmp_path, make):
    got = _keys(make(), [(0, [Insert(1, 0, 5, {"k": 1})]), (1, [Insert(2, 0, 5, {"k": 2})])],
                tmp_path)
    assert ("in", 0, "1") in got and ("in", 1, "2") in got


def test_distinct_keys_its_input_not_its_output(tmp_path):
    # Distinct passes its payloads on: a tuple payload's first item is no key of the output
    proc = Distinct(key=lambda p: p[1])
    got = _keys(proc, [(0, [Insert(1, 0, 5, ("x", "y")), Cti(9)])], tmp_path)
    assert got == [("in", 0, "'y'"), ("out", 0, None)]


class Keyholder(Processor):
    """A user's operator with attributes named like the keyed operators' own."""

    def __init__(self):
        super().__init__()
        self.key = lambda p: p["secret"]  # not a key of its input
        self.keys = (self.key,)

    def on_insert(self, msg, port):
        return [msg]


def test_an_operator_that_declares_no_keys_has_none(tmp_path):
    got = _keys(Keyholder(), [(0, [Insert(1, 0, 5, ("a", 1))])], tmp_path)
    assert got == [("in", 0, None), ("out", 0, None)]
