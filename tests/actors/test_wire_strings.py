"""String columns on the wire (``actors.wire``): a batch of several Columns is packed into one
whose string columns are joined as the Arrow arrays they came from (the fast path), and a
slice of a string column travels as its own rows' bytes, never its parent's buffers. What
arrives must be exactly the events sent, whichever path each column took."""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from actors.wire import decode, encode
from operators.columns import Columns, expand, restored_column
from operators.events import Cti
from tests.kit import PROPERTY

WORDS = st.lists(st.one_of(st.none(), st.text(max_size=6)), min_size=1, max_size=30)


@st.composite
def string_batches(draw):
    """Columns cut from one restored column (as an actor holds them) or made afresh, their
    string columns known Arrow slices, copies, or plain objects; CTIs between some."""
    words = draw(WORDS)
    n = draw(st.integers(300, 3_000))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    strings = pa.array([words[i] for i in rng.integers(0, len(words), n)], pa.string())
    restored = restored_column(strings)
    cuts = sorted(draw(st.lists(st.integers(0, n), min_size=1, max_size=6)))
    out = []
    for a, b in zip([0, *cuts], [*cuts, n]):
        how = draw(st.sampled_from(["known", "known", "copy", "fresh"]))
        column = restored[a:b] if how == "known" else restored[a:b].copy() if how == "copy" \
            else np.array(restored[a:b].tolist() + [], dtype=object)
        starts = np.arange(a, b, dtype=np.int64)
        out.append(Columns(starts, starts, None, {"s": column, "k": starts * 2}))
        if draw(st.booleans()):
            out.append(Cti(b))
    return out


def _through_ray(batch):
    """What a receiver decodes: the encoded batch pickled as Ray's serializer would."""
    return decode(pickle.loads(pickle.dumps(encode(batch), protocol=5)))


@PROPERTY
@given(batch=string_batches())
def test_packed_string_columns_arrive_as_sent(batch):
    got = _through_ray(batch)
    assert list(expand(got)) == list(expand(batch))
    assert [type(m) for m in got] == [type(m) for m in batch]
    assert [len(m) for m in got if isinstance(m, Columns)] == \
        [len(m) for m in batch if isinstance(m, Columns)]


def test_a_batch_of_known_string_slices_is_packed_as_one_arrow_array():
    strings = pa.array([f"u{i % 50}" if i % 7 else None for i in range(4_000)])
    restored = restored_column(strings)
    batch = [Columns(np.arange(a, a + 1_000), np.arange(a, a + 1_000), None,
                     {"s": restored[a:a + 1_000]}) for a in (0, 1_000, 2_000)]
    blob, packed = encode(batch)
    *_, payload, bounds = packed  # the fast path: one Columns, Arrow strings
    assert type(payload["s"]) is pa.StringArray and payload["s"].equals(strings.slice(0, 3_000))
    assert bounds == [0, 1_000, 2_000, 3_000]
    assert list(expand(decode((blob, packed)))) == list(expand(batch))


def test_a_slice_of_a_string_column_travels_as_its_rows_only():
    """Arrow pickles a sliced array with all its parent's buffers: a 1,000-row piece of a
    100,000-row column must not carry the other 99,000 rows."""
    strings = pa.array([f"https://www.nexmark.com/{i}/item.htm" for i in range(100_000)])
    restored = restored_column(strings)
    part = Columns(np.arange(1_000), np.arange(1_000), None, {"s": restored[50_000:51_000]})
    buffers: list[pickle.PickleBuffer] = []
    pickle.dumps(encode([part, Cti(1_000)]), protocol=5, buffer_callback=buffers.append)
    sent = sum(b.raw().nbytes for b in buffers)
    assert sent < 100_000, f"{sent:,} bytes for 1,000 urls"
    assert list(expand(_through_ray([part]))) == list(expand([part]))
