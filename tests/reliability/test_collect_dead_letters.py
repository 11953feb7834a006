"""``collect()`` hides nothing (issue #28, item 4): the rows it does not output are returned
with it and announced. The list ``collect()`` returns carries ``dead_letters`` (each with its
reason), ``late`` and ``accounting`` (per source, ``received == processed + dropped +
adjusted + dead_lettered``), the same inline, on Ray, fused or not, and under a checkpointing
supervisor; a run with dead letters warns once (``DeadLetterWarning``) with the count and
where to read them. Spark's ``to_spark``/``write`` are in ``tests/spark/test_run_reports.py``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest

from operators.events import Cti, Insert, Retract
from operators.ingress import AdvanceTime
from tests.reliability import TERMS, assert_accounted, records, run_dag
from topology import Stream
from topology.running.inline import Collected, DeadLetterWarning

#  t=None, t="soon" and the row 7 are dead letters; t=3 is late behind the CTI of t=10
ROWS = [{"t": 10, "v": 1}, {"t": 3, "v": 2}, {"t": None, "v": 3}, {"t": 12, "v": 4},
        {"t": "soon", "v": 5}, {"t": 11, "v": 6}, 7, {"t": 20, "v": 8}]
#  y is behind Cti(5), the retraction has no insert, Cti(4) goes back
EVENTS = [Insert("x", 0, 30, {"v": 100}), Cti(5), Insert("y", 1, 2, {"v": 101}),
          Retract("nobody", 1, 2, 1), Cti(4), Insert("z", 6, 9, {"v": 102}), Cti(30)]


def _query() -> Stream:
    return (Stream.from_rows(ROWS, start="t", advance=AdvanceTime(every=1, delay=1))
            .union(Stream.from_events(EVENTS)).where(lambda p: p["v"] > 0))


def _collect(q: Stream, **kw) -> tuple[Collected, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        out = q.collect(**kw)
    return out, [w for w in said if issubclass(w.category, DeadLetterWarning)]


def _check(out: Collected, said: list[warnings.WarningMessage]) -> None:
    """What a run of :func:`_query` must report, whatever the runtime."""
    _, dag, fed = run_dag(_query())
    assert isinstance(out, Collected)
    # the same records as the stages of an inline run hold
    assert sorted(map(repr, out.dead_letters)) == sorted(map(repr, records(dag, "dead_letters")))
    assert sorted(map(repr, out.late)) == sorted(map(repr, records(dag, "late")))
    assert len(out.dead_letters) == 6 and [x.item["v"] for x in out.late] == [2]
    # every input row is in the output, the late records or the dead letters
    rows = out.accounting["from_rows#0"]
    assert rows["received"] == len(ROWS) == fed[0]
    assert_accounted(rows)
    assert rows == dag.procs["from_rows#0"].stats
    events = out.accounting["from_events#1"]
    assert events["received"] == len(EVENTS) == events["processed"] + events["dead_lettered"]
    assert rows["dead_lettered"] + events["dead_lettered"] == len(out.dead_letters)
    assert rows["dropped"] + rows["adjusted"] == len(out.late)
    inserts = [m for m in out if type(m) is Insert]
    assert len(inserts) == rows["processed"] + rows["adjusted"] + sum(
        type(m) is Insert for m in EVENTS) - sum(type(d.item) is Insert
                                                 for d in out.dead_letters)
    # one warning: the count, the first reason, where to read them, the equation
    [w] = said
    text = str(w.message)
    assert text.startswith("collect(): 6 inputs went to the dead letters, not to the output")
    assert "collect(...).dead_letters" in text and "collect(...).late" in text
    assert (f"from_rows#0: received 8 = processed {rows['processed']} + dropped "
            f"{rows['dropped']} + adjusted 0 + dead-lettered 3") in text
    assert w.filename == __file__  # it points at the caller's line


def test_inline_collect_returns_and_announces_its_dead_letters() -> None:
    out, said = _collect(_query(), runtime="inline")
    _check(out, said)
    # still a plain list of messages for everything else
    assert out == list(out) and out[:1] == [out[0]]


def test_a_clean_run_does_not_warn_and_accounts_every_row() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeadLetterWarning)
        out = Stream.from_rows([{"t": 1}, {"t": 2}], start="t").collect(runtime="inline")
    assert out.dead_letters == [] and out.late == []
    assert out.accounting == {"from_rows#0": {"received": 2, "processed": 2, "dropped": 0,
                                              "adjusted": 0, "dead_lettered": 0, "ctis": 1}}


def test_the_warning_can_be_made_an_error() -> None:
    q = Stream.from_rows([{"t": None}], start="t")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeadLetterWarning)
        with pytest.raises(DeadLetterWarning, match="1 input went to the dead letters"):
            q.collect(runtime="inline")


def test_column_batches_account_for_null_times() -> None:
    table = pa.table({"t": pa.array([1, None, 3, None], pa.int64()), "v": np.arange(4)})
    out, said = _collect(Stream.from_arrow(table, start="t"), runtime="inline", columns=True)
    [src] = out.accounting.values()
    assert {k: src[k] for k in ("received", *TERMS)} == {
        "received": 4, "processed": 2, "dropped": 0, "adjusted": 0, "dead_lettered": 2}
    assert [d.item["v"] for d in out.dead_letters] == [1, 3]
    assert len(said) == 1 and "2 inputs went to the dead letters" in str(said[0].message)


def test_an_operators_dead_letters_are_returned_too() -> None:
    def fails_on_two(vs):
        if 2 in vs:
            raise ValueError("two is not allowed")
        return sum(vs)

    events = [Insert(i, i, i + 1, i) for i in range(4)] + [Cti(10)]
    q = Stream.from_events(events).tumbling_window(2).aggregate(fails_on_two,
                                                                on_error="dead_letter")
    out, said = _collect(q, runtime="inline")
    [dead] = out.dead_letters
    assert "two is not allowed" in dead.reason
    assert out.accounting["from_events#0"]["dead_lettered"] == 0  # the source lost nothing
    assert len(said) == 1


@pytest.mark.ray
@pytest.mark.parametrize("fuse", [False, None])
def test_on_ray_collect_returns_what_the_actors_recorded(ray_session, fuse) -> None:
    out, said = _collect(_query(), runtime="ray", fuse=fuse)
    _check(out, said)


@pytest.mark.ray
def test_on_ray_with_checkpoints_collect_returns_the_dead_letters(ray_session, tmp_path) -> None:
    out, said = _collect(_query(), runtime="ray", checkpoint_dir=str(tmp_path))
    _check(out, said)
