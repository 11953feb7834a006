"""Arrow data as source batches: Arrow time columns become ticks, needing no Spark.

A reader takes Arrow record batches or tables (from a file, from Spark through
:mod:`topology.spark.source`, from any producer) and cuts them into the batches a source hands
to :class:`operators.ingress.Ingress`: column batches ``{name: numpy array}`` that the ingress
takes vectorised, or lists of row dicts. The time columns (timestamp, date or integer) are
turned into int64 ticks with one vectorised cast per batch (:mod:`operators.ticks`); a time
that is null or outside the time axis is left for the ingress to judge (its dead letters).

    >>> t = pa.table({"ts": pa.array([0, 2_000], pa.timestamp("ms")), "kwh": [1.5, 2.0]})
    >>> next(arrow_batches([t], start="ts"))
    {'ts': array([      0, 2000000]), 'kwh': array([1.5, 2. ])}

Only pyarrow and numpy: ``Stream.from_arrow`` reads Arrow without Spark installed.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from operators.columns import arrow_column
from operators.ticks import UNITS, from_units, from_units_array

__all__ = ["DEFAULT_BATCH_ROWS", "TableBatches", "arrow_batches", "arrow_row_batches",
           "check_times", "sub_microsecond_error"]

#: Rows per list handed to the Ingress (and per Arrow record batch read from Spark).
DEFAULT_BATCH_ROWS = 10_000


def _ticks(column: pa.Array | pa.ChunkedArray,
           name: str = "time") -> tuple[np.ndarray, np.ndarray, list[Any]] | None:
    """A timestamp, date or integer column as int64 ticks: ``(ticks, good, bad)`` where
    ``good`` marks the values that are present and fit int64 ticks, and ``bad`` holds, for the
    others in order, the value the ingress should judge: ``None`` for a null, the exact ticks
    as a Python int for a time too far out (which the ingress rejects as outside the time
    axis, instead of numpy wrapping it round). None for a column of another type.

    Timestamps with a time zone hold UTC instants; timestamps without one (Spark's
    ``TIMESTAMP_NTZ``) are read as UTC wall times, as :func:`operators.ticks.to_ticks` reads
    naive datetimes. An unsigned column (uint64) is read like a signed one: a value beyond
    int64 is a time too far out. A nanosecond timestamp column is read when every value is a
    whole microsecond; a finer value raises :func:`sub_microsecond_error` (``name`` names the
    column), never is cut silently.

    >>> t, good, bad = _ticks(pa.array([1, None, 10**13], pa.timestamp("s")))
    >>> t.tolist(), good.tolist(), bad
    ([1000000, 0, 0], [True, False, False], [None, 10000000000000000000])
    >>> t, good, bad = _ticks(pa.array([7, 2**64 - 1], pa.uint64()))
    >>> t.tolist(), good.tolist(), bad
    ([7, 0], [True, False], [18446744073709551615])
    """
    kind = column.type
    if pa.types.is_timestamp(kind):
        factor = UNITS[kind.unit]
    elif pa.types.is_date32(kind):  # days
        factor = UNITS["D"]
    elif pa.types.is_date64(kind):  # milliseconds
        factor = UNITS["ms"]
    elif pa.types.is_integer(kind):
        factor = 1
    else:
        return None
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    nulls = column.is_null().to_numpy(zero_copy_only=False)
    huge = np.zeros(len(column), dtype=bool)
    if pa.types.is_unsigned_integer(kind):
        unsigned = column.fill_null(0).to_numpy(zero_copy_only=False).astype(np.uint64)
        huge = unsigned > np.uint64(2**63 - 1)  # beyond int64: a cast would fail
        values = np.where(huge, np.uint64(0), unsigned).astype(np.int64)
    else:
        raw = column.cast(pa.int32() if pa.types.is_date32(kind) else pa.int64())
        values = raw.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if factor < 0:
        finer = (values % -factor != 0) & ~nulls
        if finer.any():
            raise sub_microsecond_error(name, kind, values[finer], len(values))
    ticks, fits = from_units_array(values, factor)
    good = fits & ~nulls & ~huge
    bad = [None if nulls[i] else int(unsigned[i]) if huge[i] else from_units(int(values[i]), factor)
           for i in np.flatnonzero(~good)]
    return ticks, good, bad


def sub_microsecond_error(name: str, kind: pa.DataType, finer: np.ndarray,
                          n: int) -> ValueError:
    """The error for a nanosecond timestamp column ``name`` whose values ``finer`` (counts of
    nanoseconds, of ``n``) are not whole microseconds: cedar's ticks are microseconds, and a
    time is never cut without the user's say, so the message says how to cut it."""
    first = np.datetime64(int(finer[0]), "ns")
    tz = getattr(kind, "tz", None)
    target = f"pyarrow.timestamp('us', tz={tz!r})" if tz else "pyarrow.timestamp('us')"
    return ValueError(
        f"time column {name!r} holds nanosecond timestamps finer than a microsecond "
        f"({len(finer)} of {n} values, the first {first}); cedar's ticks are microseconds and "
        f"it does not cut time silently: cast the column to microseconds first, e.g. "
        f"table.set_column(table.schema.get_field_index({name!r}), {name!r}, "
        f"pyarrow.compute.cast(table[{name!r}], {target}, safe=False)), which truncates as "
        f"Spark does")


def check_times(data: pa.Table | pa.RecordBatch, start: Any, end: Any = None) -> None:
    """Check the time columns of a whole table now, where the stream is built, as reading
    it would (:func:`_ticks`): a nanosecond column finer than microseconds is refused here,
    not in the middle of a run."""
    for name in _time_columns(start, end):
        i = data.schema.get_field_index(name)
        if i >= 0 and pa.types.is_timestamp(data.schema.field(i).type) \
                and UNITS[data.schema.field(i).type.unit] < 0:
            _ticks(data.column(i), name)


def _time_columns(*specs: Any) -> list[str]:
    return [s for s in specs if isinstance(s, str)]


def _piece(piece: pa.RecordBatch, names: list[str], columnar: bool,
           start: str | None = None) -> Any:
    """One record batch as a column batch ``{name: array}`` (when ``columnar`` and every
    time is good but maybe some in the ``start`` column) or as a list of row dicts, with
    ticks in the time columns ``names``. A start column with bad times (null, off the time
    axis) is an object array of the ticks and, at those rows, the value a row would hold:
    the ingress dead-letters those rows and takes the others column-wise
    (:meth:`operators.ingress.Ingress.push_columns`)."""
    times = {}
    for name in names:
        i = piece.schema.get_field_index(name)
        converted = _ticks(piece.column(i), name) if i >= 0 else None
        if converted is not None:
            times[name] = converted
    bad = [name for name, (_, good, _) in times.items() if not good.all()]
    if columnar and (not bad or bad == [start]):
        columns = {name: times[name][0] if name in times else arrow_column(column)
                   for name, column in zip(piece.schema.names, piece.columns)}
        if bad:
            ticks, good, values = times[bad[0]]
            mixed = ticks.astype(object)
            for i, value in zip(np.flatnonzero(~good).tolist(), values):
                mixed[i] = value
            columns[bad[0]] = mixed
        return columns
    for name, (ticks, _, _) in times.items():  # Arrow cannot make datetimes of every value
        piece = piece.set_column(piece.schema.get_field_index(name), name, pa.array(ticks))
    rows = piece.to_pylist()
    for name, (ticks, good, bad) in times.items():
        values = ticks.tolist()
        for i, value in zip(np.flatnonzero(~good).tolist(), bad):
            values[i] = value
        for row, value in zip(rows, values):
            row[name] = value
    return rows


def arrow_batches(
    batches: Iterable[pa.RecordBatch | pa.Table],
    start: Any,
    end: Any = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    columnar: bool = True,
    columns: Collection[str] | None = None,
) -> Iterator[Any]:
    """Arrow batches (or tables) cut into source batches of at most ``batch_rows`` rows:
    column batches ``{name: numpy array}`` that the ingress takes vectorised, or, when
    ``columnar`` is false or an end time is null or out of range, lists of row dicts.

    The ``start`` and ``end`` columns (when they are column names of timestamp, date or
    integer type) hold int64 ticks; a null time is ``None`` in its row so that the Ingress
    sends the row to its dead letters (in a column batch, a start column with nulls is an
    object array of ticks and ``None``). Other columns keep their Python values (timestamps as
    aware ``datetime`` objects; in a column batch, numbers and bools without nulls as numpy
    arrays, anything else as object arrays).

    >>> t = pa.table({"ts": pa.array([1_000_000, None], pa.timestamp("us", tz="UTC")),
    ...               "kwh": [1.5, 2.0]})
    >>> next(arrow_batches([t], start="ts"))
    {'ts': array([1000000, None], dtype=object), 'kwh': array([1.5, 2. ])}
    >>> next(arrow_batches([t], start="ts", columnar=False))
    [{'ts': 1000000, 'kwh': 1.5}, {'ts': None, 'kwh': 2.0}]
    >>> next(arrow_batches([t.slice(0, 1)], start="ts"))
    {'ts': array([1000000]), 'kwh': array([1.5])}

    With ``columns`` (the planner's column pruning, :mod:`topology.planning.pruning`) a batch holds
    only those columns, selected before any is converted; a batch missing one of them is
    read whole (the step that reads it then fails as it would have).

    >>> next(arrow_batches([t], start="ts", columns={"ts"}))
    {'ts': array([1000000, None], dtype=object)}
    """
    if not (isinstance(batch_rows, int) and batch_rows >= 1):
        raise ValueError(f"batch_rows={batch_rows!r}: give an int >= 1 (rows per batch)")
    names = _time_columns(start, end)
    start_column = start if isinstance(start, str) and start != end else None
    for batch in batches:
        for piece in _pieces(batch, batch_rows):
            if columns is not None and set(columns) <= set(piece.schema.names):
                piece = piece.select([c for c in piece.schema.names if c in columns])
            if piece.num_rows:
                yield _piece(piece, names, columnar, start_column)


def _pieces(batch: pa.RecordBatch | pa.Table, batch_rows: int) -> list[pa.RecordBatch]:
    """``batch`` cut into record batches of at most ``batch_rows`` rows (slices: no copy)."""
    if isinstance(batch, pa.Table):
        return batch.to_batches(max_chunksize=batch_rows)
    return [batch.slice(i, batch_rows) for i in range(0, batch.num_rows, batch_rows)]


def arrow_row_batches(
    batches: Iterable[pa.RecordBatch | pa.Table],
    start: Any,
    end: Any = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> Iterator[list[dict[str, Any]]]:
    """:func:`arrow_batches` as lists of row dicts only.

    >>> t = pa.table({"ts": pa.array([1_000_000, None], pa.timestamp("us", tz="UTC")),
    ...               "kwh": [1.5, 2.0]})
    >>> next(arrow_row_batches([t], start="ts"))
    [{'ts': 1000000, 'kwh': 1.5}, {'ts': None, 'kwh': 2.0}]
    """
    return arrow_batches(batches, start, end, batch_rows, columnar=False)



class TableBatches:
    """A table's (or record batch's) source batches (:func:`arrow_batches`), read afresh each
    time it is iterated: ``from_arrow``'s data over a table, which any process can read
    (fed by a deployed query's host, :data:`topology.building.nodes.Feed`). :meth:`project` gives
    the same batches with only some columns, selected before they are converted.

    >>> t = pa.table({"ts": [0, 1], "kwh": [1.5, 2.0], "note": ["a", "b"]})
    >>> b = TableBatches(t, "ts")
    >>> next(iter(b.project({"ts", "kwh"})))
    {'ts': array([0, 1]), 'kwh': array([1.5, 2. ])}
    """

    feed = "host"

    def __init__(self, table: pa.Table | pa.RecordBatch, start: Any, end: Any = None,
                 batch_rows: int = DEFAULT_BATCH_ROWS,
                 columns: frozenset[str] | None = None) -> None:
        self.table, self.start, self.end, self.batch_rows = table, start, end, batch_rows
        #: the columns kept (None: all)
        self.columns = columns

    def __iter__(self) -> Iterator[Any]:
        return arrow_batches((self.table,), self.start, self.end, self.batch_rows,
                             columns=self.columns)

    def skipping(self, k: int) -> TableBatches:
        """The same batches from the ``k``-th on, the first ``k`` neither converted nor
        read: the table sliced after their rows (a restore skips the batches fed before its
        savepoint's cut this way; slicing at a batch's edge leaves the batches after it as
        they were).

        >>> t = pa.table({"ts": list(range(10))})
        >>> [len(b["ts"]) for b in TableBatches(t, "ts", batch_rows=4).skipping(1)]
        [4, 2]
        """
        rows = sum(p.num_rows for p in itertools.islice(
            (p for p in _pieces(self.table, self.batch_rows) if p.num_rows), k))
        return TableBatches(self.table.slice(rows), self.start, self.end, self.batch_rows,
                            self.columns)

    def project(self, columns: Collection[str]) -> TableBatches:
        return TableBatches(self.table, self.start, self.end, self.batch_rows,
                            frozenset(columns))
