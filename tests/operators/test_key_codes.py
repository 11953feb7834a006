"""``KeyCodes`` codes keys in bulk (new integer keys without a Python call each, the integer
table widened with room to spare): it must give exactly the codes the one-key-at-a-time
coding gives (new keys numbered in the order of each batch's sorted distinct values, equal
keys by Python's ``==`` one code), and its ``keys`` and ``codes`` must stay each other's
inverse, whatever the batches: growing ids, spans past the table's limit, floats and
objects between them."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from operators.two_input_columns import KeyCodes
from tests.kit import PROPERTY

INTS = st.one_of(st.integers(-50, 50), st.integers(0, 2**40), st.integers(-(2**62), 2**62))
BATCH = st.one_of(
    st.lists(INTS, min_size=1, max_size=30).map(lambda v: np.array(v, dtype=np.int64)),
    st.lists(st.sampled_from([1.0, 2.5, -0.0, 3.0]), min_size=1, max_size=5).map(np.array),
    st.lists(st.sampled_from(["a", 1, 7, True]), min_size=1, max_size=5)
    .map(lambda v: np.array(v, dtype=object)))


def reference_codes(batches: list[np.ndarray]) -> list[list[int]]:
    """One key at a time, as a dict: a numeric batch's distinct values in sorted order, an
    object batch's in the order they come."""
    codes: dict[object, int] = {}
    out = []
    for column in batches:
        firsts = np.unique(column).tolist() if column.dtype != object else column.tolist()
        for v in firsts:
            codes.setdefault(v, len(codes))
        out.append([codes[v] for v in column.tolist()])
    return out


@PROPERTY
@given(batches=st.lists(BATCH, min_size=1, max_size=8), span=st.sampled_from([8, 64, 1 << 22]))
def test_bulk_coding_is_one_key_at_a_time(batches, span):
    # (a small table limit: integer batches fall to the general path too)
    kc = type("Limited", (KeyCodes,), {"SPAN": span, "__slots__": ()})()
    got = []
    for column in batches:
        codes = kc.encode(column)
        assert codes is not None
        got.append(codes.tolist())
    assert got == reference_codes(batches)
    assert kc.codes == {k: i for i, k in enumerate(kc.keys)}
    table = np.flatnonzero(kc.lookup >= 0)
    for offset in table.tolist():
        assert kc.keys[kc.lookup[offset]] == kc.base + offset


def test_growing_ids_widen_the_table_with_room():
    """Ids that grow batch after batch (Nexmark's persons) widen the table a few times, not
    at every batch."""
    kc, widened, size = KeyCodes(), 0, 0
    for first in range(0, 100_000, 1_000):
        kc.encode(np.arange(first, first + 1_000))
        widened += len(kc.lookup) != size
        size = len(kc.lookup)
    assert widened <= 8 and kc.keys == list(range(100_000))
