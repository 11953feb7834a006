"""``string_values``: the Python values of an Arrow string column, made through its dictionary
when its values repeat (the fast path) or one by one (the general path); both must give
exactly ``to_pylist()``, nulls included, whichever path the probe of the first rows picks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from operators import columns as oc
from operators.columns import arrow_column, portable_column, restored_column, string_values
from tests.kit import PROPERTY

WORDS = st.lists(st.one_of(st.none(), st.text(max_size=12)), min_size=1, max_size=400)


@PROPERTY
@given(words=WORDS, rows=st.integers(0, 9_000), seed=st.integers(0, 2**32 - 1),
       sliced=st.integers(0, 50))
def test_string_values_are_to_pylist(words, rows, seed, sliced):
    picks = np.random.default_rng(seed).integers(0, len(words), rows)
    column = pa.array([words[i] for i in picks], pa.string()).slice(min(sliced, rows))
    expected = column.to_pylist()
    for got in (string_values(column), restored_column(column), arrow_column(column)):
        assert got.dtype == object and got.base is None
        assert got.tolist() == expected
        assert [type(v) for v in got.tolist()] == [type(v) for v in expected]
    # a restored column still goes back as its Arrow array
    if len(column) >= 256:  # a restored column goes back as its Arrow rows, not re-encoded
        wire = portable_column(restored_column(column))
        assert type(wire) is pa.StringArray and wire.equals(column)
        assert wire is column or (column.offset and wire.offset == 0)


def test_a_repetitive_column_takes_the_dictionary_path():
    """The fast path is the one taken on Nexmark-like columns: equal rows share one string."""
    column = pa.array([f"channel-{i % 7}" if i % 5 else None for i in range(10_000)])
    out = string_values(column)
    assert out.tolist() == column.to_pylist()
    assert out[1] is out[8]  # made once, from the dictionary
    distinct = pa.array([f"u{i}" for i in range(10_000)])
    assert string_values(distinct).tolist() == distinct.to_pylist()


def test_the_probe_rows_decide_the_path(monkeypatch):
    """Few distinct values at the head, many later: the dictionary path still holds them all."""
    monkeypatch.setattr(oc, "_DICTIONARY_MIN_ROWS", 10)
    values = ["a"] * 2_000 + [f"w{i}" for i in range(3_000)] + [None]
    column = pa.array(values)
    assert string_values(column).tolist() == values
