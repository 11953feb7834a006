"""Fresh ids on the wire (``actors.wire``): the ids a window mints, ``FreshId(origin, n)`` of
one origin, travel as their origin and an int64 array of their numbers (the fast path), never
as one pickled FreshId each; any other id column (user ids, fresh ids of several origins, a
number beyond int64) travels as it is. What arrives must be exactly the events sent, whichever
path each batch took, through a pickle as Ray's serializer would."""

from __future__ import annotations

import io
import pickle
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from actors.wire import decode, encode
from operators.columns import Columns, FreshIds, expand
from operators.events import Cti, FreshId
from tests.kit import PROPERTY

ORIGINS = st.sampled_from(["keyed_window", "w", ("a", 1), 7])


@st.composite
def id_columns(draw: Any) -> np.ndarray | FreshIds:
    """An id column: fresh ids of one origin (mostly; minted or not, as a window sends
    them), of two, user ids, or huge numbers."""
    m = draw(st.integers(1, 40))
    how = draw(st.sampled_from(["fresh", "fresh", "unminted", "unminted", "two", "user",
                                "mixed", "huge"]))
    origin = draw(ORIGINS)
    first = draw(st.integers(0, 10**6))
    if how == "unminted":
        return FreshIds(origin, np.arange(first, first + m, dtype=np.int64))
    if how == "fresh":
        values: list[Any] = [FreshId(origin, first + j) for j in range(m)]
    elif how == "two":
        values = [FreshId(origin if j % 2 else "other", j) for j in range(m)]
    elif how == "user":
        values = [f"u{j}" for j in range(m)]
    elif how == "mixed":
        values = [FreshId(origin, j) for j in range(m)] + ["u"]
    else:
        values = [FreshId(origin, 2**70 + j) for j in range(m)]
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


@st.composite
def batches(draw: Any) -> list[Any]:
    """Columns (points or intervals, payloads of one or two forms) with CTIs between some."""
    out: list[Any] = []
    for _ in range(draw(st.integers(1, 5))):
        ids = draw(id_columns())
        m = len(ids)
        starts = np.arange(m, dtype=np.int64) * 3
        ends = None if draw(st.booleans()) else starts + 5
        payload: Any = (np.arange(m, dtype=np.int64) if draw(st.booleans())
                        else (np.arange(m, dtype=np.int64), np.full(m, 2.5)))
        out.append(Columns(ids, starts, ends, payload))
        if draw(st.booleans()):
            out.append(Cti(int(starts[-1]) + 1))
    return out


def _through_ray(blob: Any) -> Any:
    """What the receiving actor gets: the blob pickled and read back (Ray pickles it)."""
    return pickle.loads(pickle.dumps(blob, protocol=5))


def _messages(batch: list[Any]) -> list[Any]:
    return [m for b in batch for m in (expand([b]) if isinstance(b, Columns) else [b])]


@given(batches())
@PROPERTY
def test_fresh_ids_arrive_as_sent(batch: list[Any]) -> None:
    got = _messages(decode(_through_ray(encode(batch))))
    sent = _messages(batch)
    assert got == sent
    # and each id of the same type (a FreshId is never equal to a user id, but be exact)
    assert [type(m[0]) for m in got] == [type(m[0]) for m in sent]


class _Counting(pickle.Pickler):
    """A pickler that counts the FreshIds it is asked to pickle."""

    def __init__(self, file: Any) -> None:
        super().__init__(file, protocol=5)
        self.fresh = 0

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is FreshId:
            self.fresh += 1
        return NotImplemented


def _pickled_fresh_ids(blob: Any) -> int:
    p = _Counting(io.BytesIO())
    p.dump(blob)
    return p.fresh


def test_window_ids_travel_as_numbers() -> None:
    """A window's rows (one Columns or several, of one origin) send no FreshId object."""
    def rows(first: int, m: int, ends: bool) -> Columns:
        ids = np.empty(m, dtype=object)
        ids[:] = [FreshId("keyed_window", first + j) for j in range(m)]
        starts = np.zeros(m, dtype=np.int64)
        return Columns(ids, starts, starts + 10 if ends else None,
                       (np.arange(m), np.ones(m, dtype=np.int64)))

    def unminted(first: int, m: int) -> Columns:
        c = rows(first, m, False)
        return Columns(FreshIds("keyed_window", np.arange(first, first + m)), c.starts, None,
                       c.payload)

    for batch in ([rows(0, 500, False)], [rows(0, 500, False), Cti(3), rows(500, 300, False)],
                  [rows(0, 200, False), rows(200, 100, True)],  # the last: two forms
                  [unminted(0, 500), Cti(3), unminted(500, 300)],
                  [unminted(0, 200), rows(200, 100, True)]):
        blob = encode(batch)
        assert _pickled_fresh_ids(blob) == 0
        got = decode(_through_ray(blob))
        assert _messages(got) == _messages(batch)
        # unminted on arrival: a join tells them apart by number (ColumnEvents)
        assert all(type(c.id_column) is FreshIds for c in got if type(c) is Columns)
