"""String columns travel between processes as the Arrow arrays they came from: a column a
reader made of an Arrow string array (``arrow_batches``), or that an actor restored from one
(``restored_column``), a slice of it, or several put end to end (``concat``, what a batch of
several Columns becomes on the wire), goes back out as Arrow without encoding its values again
(Q0 on Ray: every bid's strings were turned into Python objects and back three times)."""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
import pytest

from actors.wire import decode, decode_rows, encode, encode_rows
from operators.columns import Columns, concat, portable_column, restored_column
from topology.building.arrow_reader import arrow_batches

N = 1_000
URLS = pa.array([f"https://x/{i % 37}" if i % 11 else None for i in range(N)])


def data_address(a: pa.Array) -> int:
    return a.buffers()[2].address


def test_a_readers_string_column_is_sent_as_its_arrow_array():
    table = pa.table({"t": np.arange(N, dtype=np.int64), "url": URLS})
    (batch,) = list(arrow_batches([table], start="t", batch_rows=N))
    wire = encode_rows(batch)
    assert type(wire["url"]) is pa.StringArray
    assert data_address(wire["url"]) == data_address(table.column("url").chunk(0))
    assert decode_rows(pickle.loads(pickle.dumps(wire)))["url"].tolist() == URLS.to_pylist()


def test_a_restored_column_its_slices_and_their_concatenation_go_back_as_arrow():
    column = restored_column(URLS)
    assert column.tolist() == URLS.to_pylist()
    with pytest.raises(ValueError, match="read-only"):
        column[0] = "changed"  # the Arrow array must keep standing for it
    assert portable_column(column) is URLS
    part = portable_column(column[300:700])  # its own rows' bytes: Arrow pickles a slice
    assert part.offset == 0 and len(part.buffers()[1]) == 4 * 401  # with all of its parent's
    assert part.to_pylist() == column[300:700].tolist()
    c = Columns(np.arange(N), np.arange(N), None, {"url": column})
    joined = concat([c.take(slice(0, 400)), c.take(slice(400, N))])
    assert joined is not None
    wire = portable_column(joined.payload["url"])
    assert type(wire) is pa.StringArray and wire.to_pylist() == URLS.to_pylist()
    halves = [c.take(slice(0, 400)), c.take(slice(400, N))]
    back = decode(pickle.loads(pickle.dumps(encode(halves))))
    assert [m.payload_at(i)["url"] for m in back for i in range(len(m))] == URLS.to_pylist()


def test_a_copy_or_a_strided_view_is_encoded_afresh():
    column = restored_column(URLS)
    copy = column.copy()  # writeable: may have changed since
    copy[1] = "changed"
    assert portable_column(copy).to_pylist()[1] == "changed"
    every_other = portable_column(column[::2])
    assert every_other.to_pylist() == URLS.to_pylist()[::2]
