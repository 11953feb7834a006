"""Single inserts beside column batches: while an input holds few events, a row insert joins
the join's column-wise state as a one-row batch (``ROWS_INTO_COLUMNS``) instead of handing
the whole state over to the per-event path (a small table of metadata given as rows, joined
with a column stream). The CHT must stay the per-event path's, on random mixes of rows and
column batches, with and without retractions, a checkpoint and restore midway."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators import join as join_module
from operators.cht import to_cht
from operators.events import Cti, Insert
from operators.join import Join
from tests import reference_joins as ref
from tests.kit import PROPERTY, assert_equivalent
from tests.operators.test_join_columns import CASES, _columns, run, streams
from tests.reference_joins import final_cti


def mixed(pairs, rng: random.Random, float_right: bool, rows: float):
    """``(port, batch)``: each insert alone as an Insert with probability ``rows``, else in a
    run of Columns on its port (cut at random); CTIs and retractions alone."""
    out, run_, run_port = [], [], None

    def flush():
        if run_:
            out.append((run_port, [_columns(run_, float_right and run_port == 1)]))
            run_.clear()

    for port, msg in pairs:
        if type(msg) is Insert and rng.random() >= rows:
            if run_ and (port != run_port or rng.random() < 0.2):
                flush()
            run_port = port
            run_.append(msg)
            continue
        flush()
        out.append((port, [msg]))
    flush()
    return out


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("retractions", [False, True])
@PROPERTY
@given(data=st.data())
def test_rows_among_column_batches_give_the_per_event_cht(case, retractions, data):
    on, select = CASES[case]
    pairs, left, right = data.draw(streams(retractions))
    rng = random.Random(data.draw(st.integers(0, 2**32), label="seed"))
    float_right = data.draw(st.booleans(), label="float_right")
    rows = data.draw(st.sampled_from([0.1, 0.5, 1.0]), label="rows")
    feed = mixed(pairs, rng, float_right, rows)
    restore_at = data.draw(st.integers(0, len(feed)), label="restore_at")
    out, _ = run(on, select, feed, restore_at)
    assert_equivalent(out, ref.join(to_cht(left), to_cht(right), on=on, select=select))
    assert final_cti(out) == min(final_cti(left), final_cti(right))


def test_a_small_table_of_rows_keeps_the_stream_column_wise():
    # the meters' metadata as 3 rows, then the readings as one column batch: all column-wise
    meters = [Insert(f"m{k}", 0, 2**62, {"k": k, "v": 10 * k}) for k in range(3)]
    readings = [Insert(f"r{i}", i, i + 1, {"k": i % 4, "v": i}) for i in range(1, 40)]
    op = Join(on=("k", "k"), select=lambda r, m: (m["v"], r["v"]))
    out = op.process(meters, 1)
    out += op.process([_columns(readings, False), Cti(50)], 0)
    out += op.process([Cti(50)], 1)
    assert op.columns is not None, "the rows left the column-wise state"
    from operators.columns import expand
    assert_equivalent(list(expand(out)), ref.join(to_cht(readings), to_cht(meters), on=("k", "k"),
                                                  select=lambda r, m: (m["v"], r["v"])))


def test_past_the_limit_rows_take_the_per_event_path(monkeypatch):
    monkeypatch.setattr(join_module, "ROWS_INTO_COLUMNS", 2)
    op = Join(on=("k", "k"))
    for k in range(2):
        op.process([Insert(f"m{k}", 0, 10, {"k": k, "v": k})], 1)
    assert op.columns is not None
    op.process([Insert("m2", 0, 10, {"k": 2, "v": 2})], 1)
    assert op.columns is None


def test_a_row_with_a_tuple_id_joins_column_wise_under_its_own_id() -> None:
    # a tuple id must stay one id in the one-row batch (np.array([id]) makes it a row of two)
    j = Join(on=None)
    j.process([Insert(("a", 0), 10, 20, 1)], 0)
    assert j.columns is not None and j.columns.sides[0].ids.tolist() == [("a", 0)]
    out = j.process([Insert(("b", 1), 15, 30, 2), Cti(40)], 1)
    assert to_cht(out) == [(15, 20, (1, 2))]
