"""The wire format of a batch: the bytes one actor sends another in one call.

Ray's serializer is an order of magnitude slower on a Python list of tuples than ``pickle``
(docs/runtime.md), so a batch travels as bytes we serialize ourselves. Messages are flattened
to plain tuples tagged by kind — ``(0, id, start, end, payload)`` for an Insert, ``(1, id,
start, end, new_end, payload)`` for a Retract, ``(2, time)`` for a Cti — and pickled with
protocol 5; on arrival they are rebuilt without re-running the constructors' checks (the
sender built them checked). Measured on 10k messages: ~1.1 µs/message to encode, ~1.2 µs to
decode, about half of pickling the message objects themselves.

A run of consecutive inserts travels as one entry of four columns (ids, starts, ends,
payloads); when the ids are :class:`~operators.events.FreshId` s of one origin (the rows a
window emits) only their numbers travel: pickle would call ``FreshId.__reduce__`` for each.
Measured on the 20k output rows of the W1 benchmark: encoding 60 ms → 13 ms.

    >>> from operators.events import Insert, Cti
    >>> decode(encode([Insert("a", 1, 2, {"x": 1}), Cti(2)]))
    [Insert(id='a', start=1, end=2, payload={'x': 1}), Cti(time=2)]
"""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np

from operators.columns import (
    Columns,
    FreshIds,
    known_arrow,
    map_columns,
    portable_column,
    restored_column,
)
from operators.events import Cti, FreshId, Insert, KeyCtis, Message, Retract

_KIND = {Insert: 0, Retract: 1, Cti: 2}
_CLASSES = (Insert, Retract, Cti)
_new = tuple.__new__
#: The tag of a :class:`~operators.columns.Columns` batch in the bytes: ``(3, i)`` stands for
#: the i-th Columns, which travel beside the bytes.
_COLUMNS = 3
#: A run of inserts: ``(4, ids, starts, ends, payloads)``.
_RUN = 4
#: A run of inserts with the ids ``FreshId(origin, n)``: ``(5, origin, ns, starts, ends,
#: payloads)``.
_FRESH_RUN = 5
#: Per-key CTIs (:class:`~operators.events.KeyCtis`): ``(6, times)``.
_KEY_CTIS = 6
_KIND[KeyCtis] = _KEY_CTIS
#: Fewer consecutive inserts than this travel one by one.
_MIN_RUN = 8


def encode(messages: Sequence[Message | Columns]) -> bytes | tuple[bytes, list[Columns]]:
    """A batch of messages for one actor call: bytes, or, when the batch holds
    :class:`~operators.columns.Columns`, ``(bytes, [Columns, ...])``. Columns are left to
    Ray's serializer, which moves their numpy arrays through the shared-memory object store
    without copying them into a pickle (measured on a 4.5 MB batch: 5 ms instead of 12 ms
    per call, the receiver reading the arrays in place).

    >>> import numpy as np
    >>> from operators.columns import Columns
    >>> c = Columns(np.arange(2), np.arange(2), np.arange(1, 3), np.arange(2))
    >>> blob = encode([c, Cti(2)])
    >>> type(blob[0]).__name__, blob[1] == [c], decode(blob)[1]
    ('bytes', True, Cti(time=2))
    """
    kind = _KIND
    columns: list[Columns] = []
    tagged: list[tuple[Any, ...]] = []
    run: list[Message] = []
    m: Any  # told apart by type() on this hot path
    for m in messages:
        t: Any = type(m)
        if t is Insert and len(m) == 4:  # (a malformed one travels alone, as it is)
            run.append(m)
            continue
        if run:
            _add_run(run, tagged)
            run = []
        if t is Columns:
            tagged.append((_COLUMNS, len(columns)))
            columns.append(m)
        else:
            tagged.append((kind[t], *m))
    if run:
        _add_run(run, tagged)
    blob = pickle.dumps(tagged, protocol=5)
    return (blob, _pack(columns)) if columns else blob


def _signature(c: Columns) -> tuple[Any, ...]:
    """What must agree for Columns to be packed together: the form and every array's type."""
    p = c.payload
    # the form named: numpy reads a tuple compared with a dtype as a dtype (an array's
    # int64 payload was taken for a tuple's (int64, float64), and packing failed)
    payload = (("dict", tuple((k, v.dtype) for k, v in p.items())) if isinstance(p, dict) else
               ("tuple", tuple(v.dtype for v in p)) if isinstance(p, tuple) else
               ("array", p.dtype))
    ids = c.id_column
    kind = ("fresh", ids.origin) if isinstance(ids, FreshIds) else ("array", ids.dtype)
    return (kind, c.starts.dtype, None if c.points else c.ends.dtype, payload)


def _pack(columns: list[Columns]) -> Any:
    """Several Columns as one, their arrays end to end, and the bounds: Ray's serializer then
    moves a few large buffers instead of a few per Columns (a source cuts its batch at every
    CTI: W1 sends ~26 Columns of 4 arrays per call, and a 7 MB call of 100 arrays cost its
    sender 4.6-8 ms of CPU, of one array 1.2-1.5 ms). The list as it is when the arrays'
    types differ: putting them end to end would convert them.

    Packed is ``(ids, starts, ends or None, payload, bounds)`` with the payload columns as
    they travel (:func:`~operators.columns.portable_column`): string columns whose Arrow
    arrays are known are joined as Arrow (only their rows' bytes copied), never put end to
    end as Python objects first (on Q0's output that cost the actor ~0.1 s per 920k rows).

    Ids that are fresh ids of one origin travel as their numbers (:func:`_portable_ids`): a
    Columns of them is packed alone when it cannot be packed with the others."""
    if len(columns) < 2 or any(_signature(c) != _signature(columns[0]) for c in columns[1:]):
        if not any(_maybe_fresh(c.id_column) for c in columns):
            return columns
        if len(columns) == 1:
            return _packed(columns)
        return [_packed([c]) if _maybe_fresh(c.id_column) else c for c in columns]
    return _packed(columns)


def _maybe_fresh(ids: np.ndarray | FreshIds) -> bool:
    """Whether ``ids`` may be fresh ids of one origin (unminted, or its first is a FreshId)."""
    if isinstance(ids, FreshIds):
        return True
    return ids.dtype == object and len(ids) > 0 and type(ids[0]) is FreshId


def _packed(columns: list[Columns]) -> Any:
    """:func:`_pack`'s packed form of ``columns`` (their arrays of the same types)."""
    bounds = [0]
    for c in columns:
        bounds.append(bounds[-1] + len(c))
    payloads = [c.payload for c in columns]
    p0 = payloads[0]
    payload: Any
    if isinstance(p0, dict):
        payload = {k: _joined([p[k] for p in payloads]) for k in p0}
    elif isinstance(p0, tuple):
        payload = tuple(_joined([p[i] for p in payloads]) for i in range(len(p0)))
    else:
        payload = _joined(payloads)
    unminted = [c.id_column for c in columns]
    portable: Any
    if all(isinstance(i, FreshIds) for i in unminted):  # (one origin: the signatures agree)
        # their numbers as they are: minting them to find the numbers again cost Q5's
        # window actor a fifth of its CPU
        portable = (unminted[0].origin,  # type: ignore[union-attr]
                    np.concatenate([i.ns for i in unminted]))  # type: ignore[union-attr]
    else:
        ids = (np.concatenate([c.ids for c in columns]) if len(columns) > 1
               else columns[0].ids)
        portable = _portable_ids(ids)
    return (portable, np.concatenate([c.starts for c in columns]),
            None if all(c.points for c in columns)
            else np.concatenate([c.ends for c in columns]), payload, bounds)


def _joined(parts: list[np.ndarray]) -> Any:
    """Payload columns end to end, as they travel: the known Arrow arrays of string columns
    joined, anything else put end to end and then made portable."""
    if parts[0].dtype == object:
        arrows = [known_arrow(c) for c in parts]
        if all(a is not None for a in arrows):
            import pyarrow as pa

            return pa.concat_arrays(arrows)
    return portable_column(np.concatenate(parts))


def _fresh_ids(ids: np.ndarray) -> tuple[Any, list[int]] | None:
    """``(origin, [n, ...])`` when the object column ``ids`` holds only
    :class:`~operators.events.FreshId` s of one origin with int numbers (the rows a window
    emits), else None."""
    if not len(ids):
        return None
    first = ids[0]
    if type(first) is not FreshId:
        return None
    origin = first.origin
    ns = []
    for i in ids.tolist():
        if type(i) is not FreshId or i.origin is not origin or type(i.n) is not int:
            return None
        ns.append(i.n)
    return origin, ns


def _portable_ids(ids: np.ndarray) -> Any:
    """``ids`` as they should travel: a column of fresh ids of one origin as ``(origin,
    numbers)`` with the numbers an int64 array (Ray's pickler called ``FreshId.__reduce__``
    and looked up its dispatch table for each: Q5's keyed window and its to_points spent
    most of their CPU pickling the window rows' ids), anything else as it is."""
    if ids.dtype != object:
        return ids
    fresh = _fresh_ids(ids)
    if fresh is None:
        return ids
    origin, ns = fresh
    try:
        numbers = np.array(ns, dtype=np.int64)
    except OverflowError:  # a number beyond int64 travels as the FreshIds themselves
        return ids
    return (origin, numbers)


def _restored_ids(ids: Any) -> np.ndarray | FreshIds:
    """The id column :func:`_portable_ids` stood for: fresh ids unminted
    (:class:`~operators.columns.FreshIds`, minted when read; a join tells them apart by
    their numbers)."""
    if type(ids) is not tuple:
        return ids
    origin, numbers = ids
    return FreshIds(origin, numbers)


def _unpack(ids: Any, starts: np.ndarray, ends: np.ndarray | None, payload: Any,
            bounds: list[int]) -> list[Columns]:
    """The Columns :func:`_pack` put end to end, as views of its arrays."""
    packed = Columns(_restored_ids(ids), starts, ends, map_columns(payload, restored_column))
    return [packed.take(slice(a, b)) for a, b in itertools.pairwise(bounds)]


def _add_run(run: list[Message], tagged: list[tuple[Any, ...]]) -> None:
    """Append the entries of consecutive inserts: a short run one by one (columns would
    cost more than they save), a longer one as columns."""
    if len(run) < _MIN_RUN:
        tagged.extend((0, *m) for m in run)
        return
    ids, starts, ends, payloads = zip(*run)
    first = ids[0]
    if type(first) is FreshId:
        origin = first.origin
        if all(type(i) is FreshId and i.origin is origin for i in ids):
            tagged.append((_FRESH_RUN, origin, [i.n for i in ids], starts, ends, payloads))
            return
    tagged.append((_RUN, ids, starts, ends, payloads))


def decode(blob: bytes | tuple[bytes, list[Columns]]) -> list[Message | Columns]:
    """The messages of :func:`encode`'s result, in order."""
    classes = _CLASSES
    columns: Sequence[Columns] = ()
    if type(blob) is tuple:
        blob, columns = blob
        if type(columns) is tuple:
            columns = _unpack(*columns)
        elif any(type(c) is tuple for c in columns):  # Columns packed one by one
            columns = [_unpack(*c)[0] if type(c) is tuple else c for c in columns]
    out: list[Any] = []
    append = out.append
    for t in pickle.loads(blob):  # type: ignore[arg-type]
        tag = t[0]
        if tag < _COLUMNS:
            append(_new(classes[tag], t[1:]))
        elif tag == _COLUMNS:
            append(columns[t[1]])
        elif tag == _RUN:
            out.extend([_new(Insert, r) for r in zip(*t[1:])])
        elif tag == _KEY_CTIS:
            append(_new(KeyCtis, t[1:]))
        else:
            origin = t[1]
            out.extend([_new(Insert, (FreshId(origin, n), s, e, p))
                        for n, s, e, p in zip(*t[2:])])
    return out


def encode_rows(rows: Sequence[Any] | dict[str, Any]) -> Any:
    """A batch of source rows (plain dicts or tuples) as bytes; a column batch
    (``{name: numpy array}``) as it is, for Ray's serializer (see :func:`encode`)."""
    if type(rows) is dict:  # string columns as Arrow arrays (``portable_column``)
        return {k: portable_column(c) for k, c in rows.items()}
    return pickle.dumps(list(rows), protocol=5)


def decode_rows(blob: Any) -> Any:
    """The rows (or the column batch) of :func:`encode_rows`'s result."""
    if type(blob) is dict:
        return {k: restored_column(c) for k, c in blob.items()}
    return pickle.loads(blob)
