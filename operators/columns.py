"""``Columns``: a batch of inserts stored column-wise, the fast path of the physical stream.

A columnar source (``Stream.from_arrow``, ``Stream.from_spark``) emits runs of accepted
events as one ``Columns`` message instead of one :class:`~operators.events.Insert` per event:
numpy arrays of ids, starts and ends, and the payloads as columns. Its meaning is exactly the
list of inserts :meth:`Columns.inserts` returns, in order, so every operator can take it: the
base :class:`~operators.processor.Processor` expands it and calls ``on_insert`` per event, and an
operator with a vectorised path (``where``, ``select``, the keyed window aggregate) overrides
``on_columns``. Payload columns come in three forms, chosen by what produced them:

* a ``dict`` of arrays: each payload is a row dict (what a source reads);
* a ``tuple`` of arrays: each payload is a tuple (what ``select(lambda r: (r["k"], r["v"]))``
  gives);
* one array: each payload is a scalar.

    >>> import numpy as np
    >>> c = Columns(np.arange(2), np.array([5, 7]), np.array([6, 8]),
    ...             {"k": np.array([1, 2]), "v": np.array([0.5, 1.5])})
    >>> c.inserts()  # doctest: +NORMALIZE_WHITESPACE
    [Insert(id=0, start=5, end=6, payload={'k': 1, 'v': 0.5}),
     Insert(id=1, start=7, end=8, payload={'k': 2, 'v': 1.5})]

**Vectorised user functions.** :func:`apply_columns` runs a user function once on the payload
columns when that gives exactly what calling it per payload gives (the rule is in
:mod:`operators.expr`), and returns None otherwise: the caller then calls it per event.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, final

import numpy as np

from .events import FreshId, Insert, Message
from .expr import evaluate, trace

__all__ = ["Columns", "FreshIds", "apply_columns", "arrow_column", "compact_arrow", "concat",
           "count_events", "expand", "known_arrow", "map_columns", "one_row", "payload_list",
           "portable_column", "remember_arrow", "restored_column", "row_at", "rows_as_columns",
           "string_values",
           "timestamp_values"]

_new = tuple.__new__


class FreshIds:
    """The id column ``FreshId(origin, n)`` for each ``n`` of ``ns`` (int64), not minted yet:
    a window's output ids, which a join of its rows only needs to tell apart
    (:class:`~operators.two_input_columns.ColumnEvents`). Minting and hashing one Python
    object per row was a third of Nexmark Q5's time (600k windows' counts per run);
    :attr:`Columns.ids` mints them when something asks for the ids themselves."""

    __slots__ = ("_minted", "ns", "origin")

    def __init__(self, origin: str, ns: np.ndarray) -> None:
        self.origin, self.ns = origin, ns
        self._minted: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ns)

    def __getitem__(self, index: np.ndarray | slice) -> FreshIds:
        return FreshIds(self.origin, self.ns[index])

    def __reduce__(self) -> tuple[Any, ...]:
        return (FreshIds, (self.origin, self.ns))  # (the ns, not one object per id)

    def minted(self) -> np.ndarray:
        """The ids as an object array of :class:`~operators.events.FreshId` (made once)."""
        if self._minted is None:
            origin = self.origin
            ids = np.empty(len(self.ns), dtype=object)
            ids[:] = [FreshId(origin, n) for n in self.ns.tolist()]
            self._minted = ids
        return self._minted


@final  # never subclassed: the runtime dispatches on type(msg) is
class Columns:
    """``len(starts)`` inserts: ``ids``, ``starts``, ``ends`` (int64 arrays; ``ends=None``
    for point events, ``[s, s + 1)``, which then travel without an end column) and
    ``payload`` columns (a dict of arrays, a tuple of arrays or one array; see the module
    doc). ``ids`` may be given as :class:`FreshIds`, minted when :attr:`ids` is read:
    :attr:`id_column` is the column as given."""

    __slots__ = ("_ends", "_ids", "payload", "starts")

    def __init__(self, ids: np.ndarray | FreshIds, starts: np.ndarray,
                 ends: np.ndarray | None, payload: Any) -> None:
        self._ids, self.starts, self._ends, self.payload = ids, starts, ends, payload

    @property
    def ids(self) -> np.ndarray:
        ids = self._ids
        return ids.minted() if isinstance(ids, FreshIds) else ids

    @property
    def id_column(self) -> np.ndarray | FreshIds:
        """The ids as given: :class:`FreshIds` stay unminted (an operator that passes the
        ids on, or only tells them apart)."""
        return self._ids

    @property
    def ends(self) -> np.ndarray:
        return self.starts + 1 if self._ends is None else self._ends

    @property
    def points(self) -> bool:
        """Whether every event is a point (known without looking at the ends)."""
        return self._ends is None

    def __len__(self) -> int:
        return len(self.starts)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unpickle, (self._ids, self.starts, self._ends,
                            map_columns(self.payload, portable_column)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Columns) and self.inserts() == other.inserts()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Columns({len(self)} inserts)"

    def payloads(self) -> list[Any]:
        """The payloads as Python values, one per event."""
        return payload_list(self.payload)

    def payload_at(self, i: int) -> Any:
        """The payload of event ``i`` as a Python value."""
        return row_at(self.payload, i)

    def inserts(self) -> list[Insert]:
        """The events as :class:`~operators.events.Insert` messages, in order."""
        return [_new(Insert, t) for t in zip(self.ids.tolist(), self.starts.tolist(),
                                              self.ends.tolist(), self.payloads())]

    def inserts_at(self, i: int) -> Insert:
        """Event ``i`` as an :class:`~operators.events.Insert`."""
        ids = self._ids
        oid = (FreshId(ids.origin, int(ids.ns[i])) if isinstance(ids, FreshIds)
               else _item(ids, i))
        return _new(Insert, (oid, self.starts[i].item(), self.ends[i].item(),
                             self.payload_at(i)))

    def take(self, index: np.ndarray | slice) -> Columns:
        """The events selected by a boolean mask or an index array, in order (a string
        column that remembers its Arrow array remembers how to take from it too)."""
        return Columns(self._ids[index], self.starts[index],
                       None if self._ends is None else self._ends[index],
                       map_columns(self.payload, lambda c: taken(c, index)))

    def with_payload(self, payload: Any) -> Columns:
        """The same events with other payload columns."""
        return Columns(self._ids, self.starts, self._ends, payload)

    def with_lifetimes(self, starts: np.ndarray, ends: np.ndarray | None) -> Columns:
        """The same events (ids, unminted ones too, and payloads) with other lifetimes."""
        return Columns(self._ids, starts, ends, self.payload)


#: Object columns shorter than this pickle as they are (Arrow's set-up would cost more).
_ARROW_MIN_ROWS = 256


def portable_column(column: np.ndarray) -> Any:
    """``column`` as it should be pickled: an object column of strings (and Nones) as an Arrow
    string array, whose buffers pickle as a few blocks of bytes (Ray moves them out of band)
    instead of one pickled object per value -- 5-10x faster for a column of 460k strings
    (Nexmark's bids); anything else as it is. :func:`restored_column` turns it back.

    A column :func:`restored_column` made (or a slice of one) goes back as the Arrow array
    it came from, without looking at its values again: an actor passing string columns on
    (a select, a where) re-sends the buffers it received. A slice goes as its own rows'
    bytes (:func:`compact_arrow`): Arrow pickles a sliced array with all of its parent's
    buffers.

    >>> c = np.array(["a", None] * 200, dtype=object)
    >>> wire = portable_column(c)
    >>> type(wire).__name__, restored_column(wire).tolist() == c.tolist()
    ('StringArray', True)
    >>> portable_column(restored_column(wire)) is wire  # no new buffers
    True
    >>> again = portable_column(restored_column(wire)[10:300])  # its rows only
    >>> again.to_pylist() == c[10:300].tolist(), again.offset, len(again.buffers()[1]) // 4
    (True, 0, 291)
    >>> portable_column(np.array([b"a", "b"] * 200, dtype=object)).dtype  # bytes stay bytes
    dtype('O')
    """
    if column.dtype != object or len(column) < _ARROW_MIN_ROWS:
        return column
    known = _known_arrow(column)
    if known is not None:
        return compact_arrow(known)
    import pyarrow as pa

    try:
        strings = pa.array(column)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return column  # not all strings
    # inferred ``string``: every value is a str or None (bytes, or a mix, infer ``binary``)
    return strings if type(strings) is pa.StringArray else column


def known_arrow(column: np.ndarray) -> Any:
    """The Arrow string array that holds the values of the object column ``column`` (one
    :func:`restored_column` or a reader made, a contiguous slice of one, or several put end to
    end), sliced to it and not compacted; None if there is none."""
    return _known_arrow(column) if column.dtype == object else None


def compact_arrow(array: Any) -> Any:
    """``array``, or a copy of just its rows when it is a slice of a larger array: pickling
    (Ray's too) sends a sliced array with every byte of its parent's buffers -- a 10k-row
    piece of a 920k-row column of urls cost ``ray.put`` 126 ms instead of 1.2 ms."""
    offsets = array.buffers()[1]
    if array.offset == 0 and (offsets is None or offsets.size <= 4 * (len(array) + 1) + 64):
        return array
    import pyarrow as pa

    return pa.concat_arrays([array])


def restored_column(column: Any) -> np.ndarray:
    """The numpy column :func:`portable_column` stood for (read-only, as Ray's numeric
    columns are: it remembers its Arrow array, which must keep standing for it)."""
    if isinstance(column, np.ndarray):
        return column
    out = string_values(column)
    out.flags.writeable = False
    _remember(out, column)
    return out


#: A string column of at least this many rows is probed for repeats (:func:`string_values`).
_DICTIONARY_MIN_ROWS = 4_096
#: The rows probed, and the most distinct values among them for the dictionary path.
_PROBE_ROWS, _PROBE_MOST_DISTINCT = 1_024, 256


def string_values(column: Any) -> np.ndarray:
    """The Python values of an Arrow string array (``str`` or None each, as ``to_pylist()``
    gives them) as a new object array of its own (``base`` None). A column whose first
    :data:`_PROBE_ROWS` rows repeat (at most a quarter distinct) is made through its
    dictionary: each distinct string made once, the rows pointing at it -- 4-5x faster on
    Nexmark's bid channels and urls (6k distinct of 920k rows: 0.02 s instead of 0.09-0.11 s
    per column), where making the Python strings is most of a stateless query's cost.

    >>> import pyarrow as pa
    >>> string_values(pa.array(["a", None, "b"] * 2000)).tolist()[:4]
    ['a', None, 'b', 'a']
    """
    import pyarrow.compute as pc

    n = len(column)
    if n >= _DICTIONARY_MIN_ROWS and \
            len(pc.unique(column.slice(0, _PROBE_ROWS))) <= _PROBE_MOST_DISTINCT:
        encoded = column.dictionary_encode()
        words = encoded.dictionary
        values = np.empty(len(words) + 1, dtype=object)  # the last stands for a null
        values[:-1] = words.to_numpy(zero_copy_only=False)
        values[-1] = None
        indices = encoded.indices
        if indices.null_count:
            indices = indices.fill_null(len(words))
        out = values[indices.to_numpy(zero_copy_only=False)]
    else:
        out = column.to_numpy(zero_copy_only=False)
    if out.base is not None or out.dtype != object:  # (a view would not be remembered)
        out = np.array(out, dtype=object)
    return out


def arrow_column(column: Any) -> np.ndarray:
    """A pyarrow array (or chunked array) as the payload column a source makes of it:
    numbers and bools without nulls as they are, anything else as an object array of the
    Python values a row would hold (a string array remembered, see :func:`remember_arrow`)."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if column.null_count == 0 and (pa.types.is_integer(kind) or pa.types.is_floating(kind)
                                   or pa.types.is_boolean(kind)):
        return column.to_numpy(zero_copy_only=False)
    if type(column) is pa.StringArray:  # sent to an actor as it is (portable_column)
        strings = string_values(column)
        remember_arrow(strings, column)
        return strings
    if type(column) is pa.TimestampArray:
        stamps = timestamp_values(column)
        if stamps is not None:
            return stamps
    values = np.empty(len(column), dtype=object)
    values[:] = column.to_pylist()
    return values


#: The units whose every value numpy turns into a ``datetime`` (``ns`` may be finer than µs).
_DATETIME_UNITS = ("s", "ms", "us")
#: The ticks of ``datetime.min`` and ``datetime.max`` in microseconds since the epoch.
_DATETIME_US = (-62_135_596_800_000_000, 253_402_300_799_999_999)
#: Time zone names of UTC itself, whose ``fromutc`` changes nothing.
_UTC_NAMES = ("UTC", "Etc/UTC", "+00:00")


def timestamp_values(column: Any) -> np.ndarray | None:
    """The Python values of an Arrow timestamp array (``datetime`` or None each, exactly as
    ``to_pylist()`` gives them: aware in the column's time zone, or naive) as an object
    array; None when they are not all datetimes (nanoseconds, years outside 1-9999).
    ``to_pylist()`` looks the zone up per value (7 µs each on Nexmark's auction
    ``expires``, the largest cost of Q3 when its column is read); here numpy computes every
    value's fields and ``datetime`` is built from them by its pickle constructor, then moved
    into the zone by ``fromutc`` (C calls only; 25x faster).

    >>> import pyarrow as pa
    >>> timestamp_values(pa.array([0, None], pa.timestamp("s", tz="UTC"))).tolist()
    [datetime.datetime(1970, 1, 1, 0, 0, tzinfo=zoneinfo.ZoneInfo(key='UTC')), None]
    """
    import datetime
    import itertools

    import pyarrow as pa

    kind = column.type
    if kind.unit not in _DATETIME_UNITS:
        return None
    ticks = column.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
    per_us = {"s": 1_000_000, "ms": 1_000, "us": 1}[kind.unit]
    low, high = -(-_DATETIME_US[0] // per_us), _DATETIME_US[1] // per_us
    if len(ticks) and not (low <= int(ticks.min()) and int(ticks.max()) <= high):
        return None
    us = ticks * per_us
    pickled: Any = datetime.datetime  # (called as unpickling does: a state, maybe a zone)
    if kind.tz is None:
        made = map(pickled, _datetime_states(us))
    else:
        zone = pa.scalar(0, type=kind).as_py().tzinfo  # the very zone to_pylist() gives
        made = map(pickled, _datetime_states(us), itertools.repeat(zone))
        if kind.tz not in _UTC_NAMES:  # (UTC's fromutc changes nothing)
            made = map(zone.fromutc, made)
    out = np.fromiter(made, dtype=object, count=len(us))
    if column.null_count:
        out[np.asarray(column.is_null(), dtype=bool)] = None
    return out


def _datetime_states(us: np.ndarray) -> list[bytes]:
    """The pickle state of the naive ``datetime`` of each of ``us`` (µs since the epoch, in
    ``datetime``'s range): year (2 bytes), month, day, hour, minute, second, microsecond (3
    bytes), big-endian, fold 0."""
    stamp = us.astype("datetime64[us]")
    day = stamp.astype("datetime64[D]")
    month = stamp.astype("datetime64[M]")
    year = month.astype(np.int64) // 12 + 1970
    rest = (stamp - day).astype(np.int64)
    hour, rest = np.divmod(rest, 3_600_000_000)
    minute, rest = np.divmod(rest, 60_000_000)
    second, micro = np.divmod(rest, 1_000_000)
    fields = np.empty((len(us), 10), dtype=np.uint8)
    for i, v in enumerate((year >> 8, year & 255, month.astype(np.int64) % 12 + 1,
                           (day - month.astype("datetime64[D]")).astype(np.int64) + 1,
                           hour, minute, second, micro >> 16, (micro >> 8) & 255,
                           micro & 255)):
        fields[:, i] = v
    return fields.view("V10").ravel().tolist()  # (V, not S: S drops trailing zero bytes)


def remember_arrow(column: np.ndarray, arrow: Any) -> None:
    """Make the object column ``column`` read-only and remember that the Arrow string array
    ``arrow`` holds its values (a reader that made it from ``arrow``): :func:`portable_column`
    then sends ``arrow`` instead of encoding the values again. ``arrow`` may be a function
    that makes that array (or None when it cannot), called once, when it is first asked for."""
    _remember(column, arrow)


def _remember(column: np.ndarray, arrow: Any) -> None:
    column.flags.writeable = False
    key = id(column)
    _ARROW_OF[key] = (weakref.ref(column, lambda _: _ARROW_OF.pop(key, None)), arrow)


def taken(column: np.ndarray, index: np.ndarray | slice) -> np.ndarray:
    """``column[index]``; rows taken by a mask or an index array from a string column whose
    Arrow array is known remember how to take them from it (made only if asked for:
    :func:`portable_column`, :func:`~operators.vectorized.per_value`)."""
    out = column[index]
    if (column.dtype == object and isinstance(index, np.ndarray)
            and len(out) >= _ARROW_MIN_ROWS and _known_arrow(column) is not None):
        rows = np.flatnonzero(index) if index.dtype == bool else index
        parent = weakref.ref(column)  # (what outlives its batch keeps no Arrow of it alive)

        def take() -> Any:
            alive = parent()
            known = None if alive is None else _known_arrow(alive)
            return None if known is None else known.take(rows)

        _remember(out, take)
    return out


def _concatenated(parts: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate(parts)``; string columns that remember their Arrow arrays make one
    that remembers theirs put end to end (see :func:`portable_column`)."""
    out = np.concatenate(parts)
    if out.dtype == object and len(out) >= _ARROW_MIN_ROWS:
        arrows = [_known_arrow(c) for c in parts]
        if all(a is not None for a in arrows):
            import pyarrow as pa

            _remember(out, pa.concat_arrays(arrows))
    return out


#: The Arrow array of each live column :func:`restored_column` made, by ``id``.
_ARROW_OF: dict[int, tuple[Any, Any]] = {}


def _known_arrow(column: np.ndarray) -> Any:
    """The Arrow array ``column`` (or the column it is a contiguous slice of) was restored
    from, sliced to it; None if there is none."""
    base = column if column.base is None else column.base
    entry = _ARROW_OF.get(id(base))
    if entry is None or entry[0]() is not base or base.flags.writeable \
            or not isinstance(base, np.ndarray) or base.ndim != 1:
        return None
    if callable(entry[1]):  # made when first asked for (remember_arrow)
        made = entry[1]()
        if made is None:
            _ARROW_OF.pop(id(base), None)
            return None
        entry = _ARROW_OF[id(base)] = (entry[0], made)
    if column is base:
        return entry[1]
    step = column.strides[0] if column.ndim == 1 else 0
    if step != base.itemsize:
        return None
    offset, rest = divmod(column.__array_interface__["data"][0]
                          - base.__array_interface__["data"][0], base.itemsize)
    if rest or offset < 0 or offset + len(column) > len(base):
        return None
    return entry[1].slice(offset, len(column))


def _unpickle(ids: np.ndarray | FreshIds, starts: np.ndarray, ends: np.ndarray | None,
              payload: Any) -> Columns:
    return Columns(ids, starts, ends, map_columns(payload, restored_column))


def _item(column: np.ndarray, i: int) -> Any:
    value = column[i]
    return value.item() if isinstance(value, np.generic) else value


def row_at(payload: Any, i: int) -> Any:
    """Row ``i`` of payload columns (a dict, tuple or one array) as a Python value."""
    if isinstance(payload, dict):
        return {k: _item(c, i) for k, c in payload.items()}
    if isinstance(payload, tuple):
        return tuple(_item(c, i) for c in payload)
    return _item(payload, i)


def one_row(payload: Any) -> Any:
    """One payload as payload columns of one row (the form :class:`Columns` holds: a dict or
    tuple of arrays, or one array): numbers and bools as numpy arrays of their type, anything
    else in an object array. ``row_at(one_row(p), 0) == p``.

    >>> one_row({"k": 1, "name": "a"})
    {'k': array([1]), 'name': array(['a'], dtype=object)}
    """
    if type(payload) is dict:
        return {k: _one(v) for k, v in payload.items()}
    if type(payload) is tuple:
        return tuple(_one(v) for v in payload)
    return _one(payload)


def rows_as_columns(payloads: list[Any]) -> Any:
    """Payloads (at least one) as payload columns, ``payload_list`` of which gives them back
    equal and of the same types: row dicts with the same fields as a dict of columns, tuples
    of one length as a tuple of columns, anything else as one column; ints (within int64),
    floats and bools in numpy arrays of their type, any other value in an object array.

    >>> rows_as_columns([(1, "a"), (2, (3, 4))])
    (array([1, 2]), array(['a', (3, 4)], dtype=object))
    >>> rows_as_columns([{"k": 1}, {"k": 2.5}])
    {'k': array([1, 2.5], dtype=object)}
    """
    first = payloads[0]
    if type(first) is dict:
        keys = list(first)
        if all(type(p) is dict and list(p) == keys for p in payloads):
            return {k: _values_column([p[k] for p in payloads]) for k in keys}
    elif type(first) is tuple and all(type(p) is tuple and len(p) == len(first)
                                      for p in payloads):
        return tuple(_values_column([p[i] for p in payloads]) for i in range(len(first)))
    return _values_column(payloads)


def _values_column(values: list[Any]) -> np.ndarray:
    kinds = set(map(type, values))
    if len(kinds) == 1 and kinds <= {bool, float, int}:
        try:
            return np.array(values, dtype={bool: np.bool_, float: np.float64,
                                           int: np.int64}[kinds.pop()])
        except OverflowError:
            pass
    return np.fromiter(values, dtype=object, count=len(values))  # (tuples stay values)


def _one(value: Any) -> np.ndarray:
    if type(value) in (bool, float) or isinstance(value, (np.number, np.bool_)) or (
            type(value) is int and -2**63 <= value < 2**63):
        return np.array([value])
    out = np.empty(1, dtype=object)
    out[0] = value
    return out


def map_columns(payload: Any, fn: Callable[[np.ndarray], np.ndarray]) -> Any:
    """Payload columns with ``fn`` applied to each column (same form)."""
    if isinstance(payload, dict):
        return {k: fn(c) for k, c in payload.items()}
    if isinstance(payload, tuple):
        return tuple(fn(c) for c in payload)
    return fn(payload)


def payload_list(payload: Any) -> list[Any]:
    """Payload columns as Python values, one per event (row dicts for a dict of columns)."""
    if isinstance(payload, dict):
        keys = list(payload)
        return [dict(zip(keys, values))
                for values in zip(*(payload[k].tolist() for k in keys))]
    if isinstance(payload, tuple):
        return list(zip(*(c.tolist() for c in payload)))
    return payload.tolist()


def concat(parts: list[Columns]) -> Columns | None:
    """The events of several :class:`Columns` in order, as one (None when their payload
    columns differ in form or names)."""
    first = parts[0].payload
    if isinstance(first, dict):
        names = list(first)
        if any(not isinstance(p.payload, dict) or list(p.payload) != names for p in parts):
            return None
        payload: Any = {k: _concatenated([p.payload[k] for p in parts]) for k in names}
    elif isinstance(first, tuple):
        if any(not isinstance(p.payload, tuple) or len(p.payload) != len(first) for p in parts):
            return None
        payload = tuple(_concatenated([p.payload[i] for p in parts]) for i in range(len(first)))
    else:
        if any(not isinstance(p.payload, np.ndarray) for p in parts):
            return None
        payload = _concatenated([p.payload for p in parts])
    fresh = [p.id_column for p in parts]
    column: np.ndarray | FreshIds
    if all(isinstance(c, FreshIds) for c in fresh) and len(
            {c.origin for c in fresh}) == 1:  # type: ignore[union-attr]
        column = FreshIds(fresh[0].origin,  # type: ignore[union-attr]
                          np.concatenate([c.ns for c in fresh]))  # type: ignore[union-attr]
    else:
        column = np.concatenate([p.ids for p in parts])
    return Columns(column,
                   np.concatenate([p.starts for p in parts]),
                   None if all(p.points for p in parts)
                   else np.concatenate([p.ends for p in parts]), payload)


def count_events(batch: Any) -> int:
    """Rows, messages or events in a batch: a :class:`Columns` counts its events, a column
    batch of rows (``{name: array}``) its rows."""
    if type(batch) is dict:
        return len(next(iter(batch.values()))) if batch else 0
    return sum(len(m) if type(m) is Columns else 1 for m in batch)


def expand(batch: Iterable[Message | Columns]) -> Iterator[Message]:
    """The messages of ``batch`` with every :class:`Columns` expanded into its inserts."""
    for msg in batch:
        if type(msg) is Columns:
            yield from msg.inserts()
        else:
            yield msg


def apply_columns(fn: Callable[[Any], Any], cols: Columns) -> Any:
    """``fn`` applied to all payloads at once — an array, a tuple of arrays or a dict of
    arrays holding exactly the values ``fn`` gives per payload — or None when ``fn`` (or these
    values) must run per event (see :mod:`operators.expr`).

    >>> c = Columns(np.arange(3), np.arange(3), np.arange(1, 4), {"v": np.array([1, 5, 9])})
    >>> apply_columns(lambda r: r["v"] > 4, c)
    array([False,  True,  True])
    >>> apply_columns(lambda r: (r["v"], r["v"] * 2), c)
    (array([1, 5, 9]), array([ 2, 10, 18]))
    >>> apply_columns(lambda r: bool(r["v"] > 4), c) is None  # not elementwise
    True
    """
    return evaluate(trace(fn), cols.payload, len(cols))
