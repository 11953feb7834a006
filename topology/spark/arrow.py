"""A result's CHT as Arrow: the table layout every Spark sink writes, built without Spark.

:func:`cht_to_arrow` turns CHT rows ``(start, end, payload)`` into a table with ``start``,
``end`` timestamp columns (:data:`TIME_TYPE`, null for ∞) plus the payload's fields;
:func:`columns_to_arrow` does it column-wise for a column batch; :func:`cht_batches` turns a
whole result (messages, column batches or CHT rows) into record batches of that layout, one
batch held at a time, and :func:`unify_batches` / :func:`result_to_arrow` give them one
schema. :func:`with_times` writes payload fields that hold ticks as timestamps. The sinks that
hand these to Spark are :mod:`topology.spark.sink`.

    >>> table = cht_to_arrow([(0, 5, {"meter": "m1", "kwh": 1.5})])
    >>> table.column_names
    ['start', 'end', 'meter', 'kwh']
    >>> table.to_pylist()[0]["end"].isoformat()
    '1970-01-01T00:00:00.000005+00:00'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from operators.cht import cht_rows
from operators.columns import Columns, concat
from operators.events import MAX_TIME, MIN_TIME, Cti, Insert, Retract

__all__ = ["ROW_CHUNK", "TIME_TYPE", "cht_batches", "cht_to_arrow", "columns_to_arrow",
           "conform", "result_to_arrow", "unified_schema", "unify_batches", "with_times"]

#: The Arrow type of the ``start``/``end`` columns of every sink.
TIME_TYPE = pa.timestamp("us", tz="UTC")


def _is_group_pair(payload: Any) -> bool:
    return type(payload) is tuple and len(payload) == 2


def _flatten(payload: Any, fields: dict[str, Any], depth: int = 1) -> None:
    """The payload's fields into ``fields``: see :func:`cht_to_arrow`."""
    if isinstance(payload, dict):
        for k, v in payload.items():
            fields[str(k)] = v
    elif _is_group_pair(payload):
        fields["key" if depth == 1 else f"key{depth}"] = payload[0]
        _flatten(payload[1], fields, depth + 1)
    elif isinstance(payload, tuple) and hasattr(payload, "_asdict"):
        fields.update(payload._asdict())
    elif dataclasses.is_dataclass(payload) and not isinstance(payload, type):
        fields.update({f.name: getattr(payload, f.name) for f in dataclasses.fields(payload)})
    else:
        fields["value"] = payload


def _time_column(ticks: Sequence[int], open_at: int) -> pa.Array:
    values = np.fromiter(ticks, dtype=np.int64, count=len(ticks))
    return pa.array(values, type=pa.int64(), mask=values == open_at).cast(TIME_TYPE)


def cht_to_arrow(rows: Iterable[tuple[int, int, Any]],
                 schema: pa.Schema | None = None) -> pa.Table:
    """CHT rows ``(start, end, payload)`` as an Arrow table.

    Columns: ``start`` and ``end`` as ``timestamp[us, tz=UTC]`` (tick = µs since the epoch);
    an end at ``MAX_TIME`` (∞, an edge still open) and a start at ``MIN_TIME`` become **null**.
    Then the payload's fields:

    * a dict: its keys (the union over all rows, in first-seen order; missing ones are null);
    * a pair ``(key, payload)`` as produced by ``group_apply``: a ``key`` column, then the
      inner payload's fields (a nested group's key is ``key2``, ...);
    * a NamedTuple or a dataclass: its fields;
    * anything else: one ``value`` column.

    A payload field named ``start`` or ``end`` is renamed ``payload_start`` / ``payload_end``.
    With ``schema``, columns are built with its types (a sink uses the schema of its first
    file, so that all files agree); columns it lacks are added, its columns that the rows lack
    are null.

    >>> t = cht_to_arrow([(0, MAX_TIME, ("m1", 3)), (2, 3, ("m2", 1))])
    >>> t.column_names, t.column("end").null_count, t.column("value").to_pylist()
    (['start', 'end', 'key', 'value'], 1, [3, 1])
    """
    rows = list(rows)
    flat: list[dict[str, Any]] = []
    names: dict[str, None] = {}
    if schema is not None:  # the schema's columns first, in its order
        names.update((f.name, None) for f in schema if f.name not in ("start", "end"))
    uniform = _uniform_fields(rows)
    if uniform is not None:  # every payload of one form: each field's values in one pass
        names.update((k, None) for k in uniform)
    for row in rows if uniform is None else ():
        try:
            _, _, payload = row
        except (TypeError, ValueError):
            raise TypeError(f"cht_to_arrow: expected (start, end, payload) rows, got {row!r}; "
                            f"turn messages into rows with operators.cht.to_cht") from None
        fields: dict[str, Any] = {}
        _flatten(payload, fields)
        if "start" in fields or "end" in fields:
            fields = {f"payload_{k}" if k in ("start", "end") else k: v
                      for k, v in fields.items()}
        for k in fields:
            names.setdefault(k, None)
        flat.append(fields)
    columns: dict[str, pa.Array] = {
        "start": _time_column([r[0] for r in rows], MIN_TIME),
        "end": _time_column([r[1] for r in rows], MAX_TIME),
    }
    for name in names:
        if uniform is None:
            values = [fields.get(name) for fields in flat]
        else:
            values = uniform.get(name) or [None] * len(rows)
        kind = None
        if schema is not None and schema.get_field_index(name) >= 0:
            kind = schema.field(name).type
        try:
            columns[name] = pa.array(values, type=kind)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            want = f" as {kind}" if kind is not None else ""
            raise TypeError(
                f"cht_to_arrow: payload field {name!r} cannot be stored in one column{want} "
                f"({type(exc).__name__}: {exc}); give it one type in every row, e.g. with "
                f".select(...) before the sink"
            ) from None
    return pa.table(columns)


def _uniform_fields(rows: list[tuple[int, int, Any]]) -> dict[str, list[Any]] | None:
    """The payload columns of ``rows`` when every payload is a dict with the first one's keys,
    or a ``group_apply`` pair ``(key, dict)`` of them (the common results), built one field at
    a time (what :func:`_flatten` gives row by row); None for any other mix, which takes the
    row-by-row path. The ``payload_start``/``payload_end`` renaming applies here too."""
    if not rows or not all(type(r) is tuple and len(r) == 3 for r in rows):
        return None
    first = rows[0][2]
    paired = _is_group_pair(first)
    inner = first[1] if paired else first
    if type(inner) is not dict or (paired and _is_group_pair(inner)):
        return None
    keys = inner.keys()
    if paired:
        if not all(type(p) is tuple and len(p) == 2 and type(p[1]) is dict
                   and p[1].keys() == keys for _, _, p in rows):
            return None
        dicts = [p[1] for _, _, p in rows]
    else:
        if not all(type(p) is dict and p.keys() == keys for _, _, p in rows):
            return None
        dicts = [p for _, _, p in rows]
    out: dict[str, list[Any]] = {"key": [p[0] for _, _, p in rows]} if paired else {}
    for k in keys:
        name = str(k)
        if paired and name == "key":
            return None  # the row path lets the payload's "key" win: keep its rule
        out[f"payload_{name}" if name in ("start", "end") else name] = [d[k] for d in dicts]
    return out


# -- the batch sinks at scale: a result's CHT as Arrow record batches -----------------------
#: Rows per record batch built from row messages (the per-row conversion is done in chunks).
ROW_CHUNK = 65_536
_COLUMN_WISE_DTYPES = "biuf"  # numpy kinds converted column-wise: bool, int, unsigned, float
_FLAT_TYPES = (dict, tuple)  # payload values the row layout flattens into several columns


def _plain_array(values: np.ndarray) -> pa.Array | None:
    """A numpy payload column as the Arrow array the row path gives for its values (Python
    ints are int64, floats double), or None when only the row path can convert it."""
    kind = values.dtype.kind
    if kind in _COLUMN_WISE_DTYPES:
        if values.dtype == np.uint64:
            return None  # Python ints above 2**63 would need the row path's inference
        target = {"b": pa.bool_(), "f": pa.float64()}.get(kind, pa.int64())
        return pa.array(values).cast(target)
    if kind in "USO":
        try:
            return pa.array(values, from_pandas=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            return None  # mixed types: the row path explains the column
    return None  # datetime64, structured...: the row path


def _scalar_column(values: np.ndarray) -> pa.Array | None:
    """A column of payloads the row layout keeps whole (a ``value`` column), or None when some
    are dicts, tuples or dataclasses, which it flattens into several columns."""
    if values.dtype.kind == "O":
        kinds = set(map(type, values))
        if any(issubclass(k, _FLAT_TYPES) or dataclasses.is_dataclass(k) for k in kinds):
            return None
    return _plain_array(values)


def _columns_fields(payload: Any) -> dict[str, pa.Array] | None:
    """Payload columns in the layout of :func:`cht_to_arrow`, or None (then the row path)."""
    fields: dict[str, pa.Array | None] = {}
    if isinstance(payload, dict):
        for k, v in payload.items():
            fields[str(k)] = _plain_array(v)
    elif isinstance(payload, tuple):
        if len(payload) != 2:
            return None  # a tuple payload is one list-valued column: rare, the row path
        fields["key"] = _plain_array(payload[0])
        fields["value"] = _scalar_column(payload[1])
    else:
        fields["value"] = _scalar_column(payload)
    if any(a is None for a in fields.values()):
        return None
    return {f"payload_{k}" if k in ("start", "end") else k: a
            for k, a in fields.items()}


def _ticks_column(ticks: np.ndarray, open_at: int) -> pa.Array:
    return pa.array(ticks, type=pa.int64(), mask=ticks == open_at).cast(TIME_TYPE)


def columns_to_arrow(cols: Columns) -> pa.RecordBatch | None:
    """A :class:`~operators.columns.Columns` batch of inserts as an Arrow record batch in the
    layout of :func:`cht_to_arrow`, built column-wise (no Python value per row); None when
    its payload columns need the row path (object columns holding dicts or tuples, which the
    layout flattens; datetime64 or uint64 columns).

    >>> c = Columns(np.arange(2), np.array([0, 3]), np.array([2, MAX_TIME]),
    ...             (np.array(["m1", "m2"]), np.array([1.5, 2.0])))
    >>> columns_to_arrow(c).to_pydict()["value"], columns_to_arrow(c).column(1).null_count
    ([1.5, 2.0], 1)
    """
    fields = _columns_fields(cols.payload)
    if fields is None:
        return None
    arrays = {"start": _ticks_column(np.asarray(cols.starts, dtype=np.int64), MIN_TIME),
              "end": _ticks_column(np.asarray(cols.ends, dtype=np.int64), MAX_TIME), **fields}
    return pa.RecordBatch.from_pydict(arrays)


def _ids_hit(ids: np.ndarray, retracted: set[Any]) -> np.ndarray:
    """Which of ``ids`` a retraction names."""
    if ids.dtype.kind in "iu" and all(type(i) is int for i in retracted):
        return np.isin(ids, np.fromiter(retracted, dtype=np.int64, count=len(retracted)))
    return np.fromiter((i in retracted for i in ids.tolist()), dtype=bool, count=len(ids))


def _lifetime(row: tuple[int, int, Any]) -> tuple[int, int]:
    return row[0], row[1]


def _split_stream(items: list[Any]) -> tuple[list[Columns], list[Insert | Retract]]:
    """A physical stream's column batches whose rows no retraction touches, and the other
    messages in order (a column row that a retraction names becomes an Insert where it was,
    so the retraction applies to it as in :func:`operators.cht.to_cht`)."""
    retracted = {m.id for m in items if type(m) is Retract}
    columns: list[Columns] = []
    rows: list[Insert | Retract] = []
    for m in items:
        kind = type(m)
        if kind is Columns:
            if retracted:
                hit = _ids_hit(m.ids, retracted)
                if hit.any():
                    rows.extend(m.take(hit).inserts())
                    m = m.take(~hit)
            if len(m):
                columns.append(m)
        elif kind is Insert or kind is Retract:
            rows.append(m)
    return columns, rows


def _group(columns: list[Columns], rows: int) -> Iterator[Columns]:
    """Consecutive column batches merged up to ``rows`` events (a query's sink may emit many
    small ones); batches of another payload form start a new group."""
    group: list[Columns] = []
    size = 0
    for c in columns:
        if group and size + len(c) > rows:
            yield from _merged(group)
            group, size = [], 0
        group.append(c)
        size += len(c)
    if group:
        yield from _merged(group)


def _merged(group: list[Columns]) -> Iterator[Columns]:
    whole = concat(group) if len(group) > 1 else group[0]
    if whole is not None:
        yield whole
    else:
        yield from group


def with_times(batch: Any, times: Collection[str]) -> Any:
    """``batch`` (an Arrow table or record batch) with its integer columns named in ``times``
    (payload fields that hold ticks: a reading's ``ts``) as ``timestamp[us, tz=UTC]``, as
    ``start`` and ``end`` are (∞ and -∞ as null); other columns as they are.

    >>> with_times(pa.table({"ts": [1_767_225_600_000_000], "n": [7]}), ["ts"]).schema.types
    [TimestampType(timestamp[us, tz=UTC]), DataType(int64)]
    """
    for name in times:
        i = batch.schema.get_field_index(name)
        if i < 0 or not pa.types.is_integer(batch.schema.field(i).type):
            continue
        ticks = batch.column(i)
        if isinstance(ticks, pa.ChunkedArray):
            ticks = ticks.combine_chunks()
        values = ticks.cast(pa.int64())
        outside = pc.or_(pc.greater_equal(values, MAX_TIME), pc.less_equal(values, MIN_TIME))
        shown = pc.if_else(outside, pa.scalar(None, pa.int64()), values)
        batch = batch.set_column(i, pa.field(name, TIME_TYPE), shown.cast(TIME_TYPE))
    return batch


def cht_batches(rows_or_messages: Iterable[Any],
                chunk_rows: int = ROW_CHUNK, times: Collection[str] = ()
                ) -> Iterator[pa.RecordBatch]:
    """The CHT of a result as Arrow record batches in the layout of :func:`cht_to_arrow`:
    column batches (:class:`~operators.columns.Columns`, what the column path of a query
    delivers) are converted column-wise; the rows of row messages -- or CHT rows
    ``(start, end, payload)`` -- through :func:`cht_to_arrow`, ``chunk_rows`` at a time.

    Each batch has the columns and types of its own rows; :func:`unify_batches` (or the sinks)
    give them one schema. Memory beyond the input: one batch. ``times``: payload fields that
    hold ticks, written as timestamps (:func:`with_times`).
    """
    if times:
        for batch in cht_batches(rows_or_messages, chunk_rows):
            yield with_times(batch, times)
        return
    items = rows_or_messages if isinstance(rows_or_messages, list) else list(rows_or_messages)
    if any(type(m) in (Insert, Retract, Cti, Columns) for m in items):
        columns, messages = _split_stream(items)
        # inserts alone are their own CHT (no retraction to apply); in time order, as the
        # column batches come, not in the canonical order of to_cht
        rows = sorted(cht_rows(messages) if any(type(m) is Retract for m in messages) else
                      [(m.start, m.end, m.payload) for m in messages], key=_lifetime)
    else:
        columns, rows = [], items
    for c in _group(columns, chunk_rows):
        batch = columns_to_arrow(c)
        if batch is not None:
            yield batch
        else:
            rows.extend(zip(c.starts.tolist(), c.ends.tolist(), c.payloads()))
    for i in range(0, len(rows), chunk_rows):
        yield from cht_to_arrow(rows[i:i + chunk_rows]).to_batches()


def unified_schema(schemas: Sequence[pa.Schema]) -> pa.Schema:
    """One schema for record batches with their own: the union of their columns in
    first-seen order, each of the type the row path infers for all the values (an int column
    with floats is double); TypeError like :func:`cht_to_arrow` when values cannot share one."""
    base = [pa.schema([pa.field("start", TIME_TYPE), pa.field("end", TIME_TYPE)])]
    try:
        return pa.unify_schemas(base + list(schemas), promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        name = _clash(schemas)
        raise TypeError(
            f"cht_to_arrow: payload field {name!r} cannot be stored in one column "
            f"({type(exc).__name__}: {exc}); give it one type in every row, e.g. with "
            f".select(...) before the sink"
        ) from None


def _clash(schemas: Sequence[pa.Schema]) -> str:
    seen: dict[str, pa.Schema] = {}
    for s in schemas:
        for f in s:
            one = pa.schema([f])
            if f.name in seen:
                try:
                    pa.unify_schemas([seen[f.name], one], promote_options="permissive")
                except (pa.ArrowInvalid, pa.ArrowTypeError):
                    return f.name
            seen[f.name] = one
    return "?"


def conform(batch: pa.RecordBatch | pa.Table, schema: pa.Schema) -> pa.RecordBatch | pa.Table:
    """``batch`` with exactly the columns of ``schema`` (missing ones null), of its types."""
    n = batch.num_rows
    arrays = [batch.column(f.name).cast(f.type) if f.name in batch.schema.names
              else pa.nulls(n, f.type) for f in schema]
    kind = pa.RecordBatch if isinstance(batch, pa.RecordBatch) else pa.Table
    return kind.from_arrays(arrays, schema=schema)


def unify_batches(batches: Iterable[pa.RecordBatch]) -> pa.Table:
    """Record batches of :func:`cht_batches` as one table of one schema
    (:func:`unified_schema`).

    >>> from operators.events import Insert
    >>> c = Columns(np.arange(2), np.array([0, 1]), None, {"v": np.array([1, 2])})
    >>> t = unify_batches(cht_batches([c, Insert("x", 5, 6, {"v": 2.5, "w": "a"})]))
    >>> t.column_names, t.column("v").to_pylist(), t.column("w").to_pylist()
    (['start', 'end', 'v', 'w'], [1.0, 2.0, 2.5], [None, None, 'a'])
    """
    batches = list(batches)
    schema = unified_schema([b.schema for b in batches])
    return pa.Table.from_batches([conform(b, schema) for b in batches], schema=schema)


def result_to_arrow(rows_or_messages: Iterable[Any], times: Collection[str] = ()) -> pa.Table:
    """The CHT of a result (messages, column batches or CHT rows) as one Arrow table: the
    rows of :func:`cht_to_arrow`, built column-wise where the result is columnar; the payload
    fields named in ``times`` as timestamps (:func:`with_times`)."""
    return unify_batches(cht_batches(rows_or_messages, times=times))
