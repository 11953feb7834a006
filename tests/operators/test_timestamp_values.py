"""``timestamp_values``: an Arrow timestamp column's Python values made by numpy and one zone
step per value must be exactly ``to_pylist()`` (values, zone, fold), nulls included, in every
unit and zone; a column numpy cannot make (nanoseconds, years outside 1-9999) is left to
``to_pylist()``."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.columns import arrow_column, timestamp_values
from tests.kit import PROPERTY

ZONES = (None, "UTC", "+00:00", "Etc/UTC", "Europe/Paris", "America/New_York", "+05:30")
#: around 2023's DST changes in Paris and New York, and the whole datetime range
US = st.one_of(st.integers(1_679_788_800_000_000, 1_679_799_600_000_000),
               st.integers(1_698_537_600_000_000, 1_698_548_400_000_000),
               st.integers(-62_135_596_800_000_000 + 86_400_000_000,
                           253_402_300_799_999_999 - 86_400_000_000))


@PROPERTY
@given(values=st.lists(st.one_of(st.none(), US), max_size=60),
       unit=st.sampled_from(("s", "ms", "us")), zone=st.sampled_from(ZONES),
       sliced=st.integers(0, 3))
def test_timestamp_values_are_to_pylist(values, unit, zone, sliced):
    per = {"s": 1_000_000, "ms": 1_000, "us": 1}[unit]
    ticks = [None if v is None else v // per for v in values]
    column = pa.array(ticks, pa.timestamp(unit, tz=zone)).slice(min(sliced, len(ticks)))
    expected = column.to_pylist()
    got = timestamp_values(column)
    assert got is not None and got.dtype == object
    assert got.tolist() == expected
    assert [(type(v), None if v is None else (v.tzinfo, v.fold, repr(v))) for v in got] == \
        [(type(v), None if v is None else (v.tzinfo, v.fold, repr(v))) for v in expected]
    assert arrow_column(column).tolist() == expected


def test_what_numpy_cannot_make_is_left_to_to_pylist():
    assert timestamp_values(pa.array([1], pa.timestamp("ns", tz="UTC"))) is None
    far = pa.array([300_000_000_000_000_000], pa.timestamp("us"))  # year 11476
    assert timestamp_values(far) is None
    with pytest.raises(OverflowError):
        arrow_column(far)  # as to_pylist() fails
