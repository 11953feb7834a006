"""A restore skips a table's batches fed before the cut without reading them
(``TableBatches.skipping``, ``source_batches(..., skip=k)``): the batches after the ``k``-th
are exactly those a full read gives, whatever the table's chunks, the batch size or ``k``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from tests.kit import PROPERTY
from topology import Stream
from topology.building.arrow_reader import TableBatches
from topology.running.inline import source_batches


def same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(np.array_equal(x[c], y[c]) for c in x)
        for x, y in zip(a, b))


@PROPERTY
@given(chunks=st.lists(st.integers(0, 12), min_size=1, max_size=6),
       batch_rows=st.integers(1, 7), k=st.integers(0, 20))
def test_the_batches_after_k_are_a_full_reads(chunks, batch_rows, k):
    t, parts = 0, []
    for n in chunks:  # chunks of n rows, some empty
        parts.append(pa.table({"ts": np.arange(t, t + n, dtype=np.int64),
                               "v": np.arange(n, dtype=np.float64)}))
        t += n
    table = pa.concat_tables(parts)
    whole = list(TableBatches(table, "ts", batch_rows=batch_rows))
    assert same(list(TableBatches(table, "ts", batch_rows=batch_rows).skipping(k)), whole[k:])
    plan = Stream.from_arrow(table, start="ts", batch_rows=batch_rows).plan()
    [src] = plan.sources
    assert same(list(source_batches(plan, src, 100, skip=k)), whole[k:])


def test_rows_not_batched_are_skipped_by_the_batch():
    plan = Stream.from_rows([{"t": i} for i in range(10)], start="t").plan()
    [src] = plan.sources
    assert [[r["t"] for r in b] for b in source_batches(plan, src, 4, skip=1)] == \
        [[4, 5, 6, 7], [8, 9]]
