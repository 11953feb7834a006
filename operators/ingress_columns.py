"""The column path of an :class:`~operators.ingress.Ingress`: a batch of rows stored
column-wise (``{name: numpy array}``) becomes :class:`~operators.columns.Columns` batches of
events with numpy, cut where a count-based CTI falls (per-key progress:
:mod:`operators.ingress_keys`), with the late rows recorded as the row
path records them; a batch the vectorised path cannot take goes row by row, and one with a
few bad start times goes both ways, around them (:meth:`IngressColumns._push_mixed`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .columns import payload_list, row_at
from .errors import LateEvent
from .events import MAX_TIME, MIN_TIME, Message
from .ingress_keys import IngressKeys

__all__ = ["MIXED_RUN", "IngressColumns", "int_column"]

#: A column batch with a few rows of bad start times stays column-wise when its runs of good
#: rows average at least this many rows (:meth:`IngressColumns._push_mixed`); else it goes row-wise.
MIXED_RUN = 64


class IngressColumns(IngressKeys):
    """How an ingress takes a column batch (see the module docstring)."""

    if TYPE_CHECKING:  # Ingress.push: where a batch the vectorised path cannot take goes
        def push(self, rows: Iterable[Any], now: float | None = None) -> list[Message]: ...

    def push_columns(self, columns: dict[str, Any], now: float | None = None) -> list[Message]:
        """Process a batch of rows stored column-wise (``{name: numpy array}``, equal lengths;
        what ``push`` also accepts): the same events, CTIs, late records and counts as
        ``push`` of the rows, in order, with the accepted events sent as
        :class:`~operators.columns.Columns` batches.

        The vectorised path takes point and interval sources whose time columns are int64
        ticks inside the time axis, with minted ids and count-based CTIs
        (``AdvanceTime(every=N)``, N >= 256, or none), and per-key progress where
        :meth:`~operators.ingress_keys.IngressKeys._key_columns` decides it (then the batch's
        CTIs come at its end); anything else (an id column, interval CTIs, a bad time in an
        int64 column) is processed row by row. A start column of
        Python objects that holds ticks except at a few rows (a null time, as the Arrow
        readers leave it) stays vectorised around those rows (:meth:`_push_mixed`).

        >>> import numpy as np
        >>> from operators.ingress import AdvanceTime, Ingress
        >>> src = Ingress(start="t", advance=AdvanceTime(every=256))
        >>> out = src.push({"t": np.arange(300, dtype=np.int64), "v": np.ones(300)})
        >>> out  # doctest: +NORMALIZE_WHITESPACE
        [Columns(256 inserts), Cti(time=255), Columns(44 inserts)]
        >>> out[0].inserts()[1]
        Insert(id=1, start=1, end=2, payload={'t': 1, 'v': 1.0})
        """
        import numpy as np

        n = len(next(iter(columns.values()))) if columns else 0
        spec = self._start_spec
        mixed = columns.get(spec) if isinstance(spec, str) else None
        if n and getattr(getattr(mixed, "dtype", None), "kind", "") == "O" and self._vectorisable():
            return self._push_mixed(columns, spec, now)  # type: ignore[arg-type]
        times = self._column_times(columns, n)
        if times is None:
            return self.push(payload_list(columns), now)
        starts, ends = times
        if self._key_of is not None:  # per-key progress (operators.ingress_keys)
            keyed = self._key_columns(columns, starts, ends, now)
            return self.push(payload_list(columns), now) if keyed is None else keyed
        out: list[Message] = []
        self.stats["received"] += n
        every = self.advance.every
        i = 0
        while i < n:
            cti = self.cti
            late = starts[i:] < cti
            accepted = None
            if late.any():
                movable = late & (ends[i:] > cti) if self.advance.policy == "adjust" else None
                accepted = ~late if movable is None else ~late | movable
            stop = n - i
            if every is not None:
                need = every - self._count
                if accepted is None:
                    stop = min(stop, need)
                else:
                    cum = np.cumsum(accepted)
                    if cum[-1] >= need:
                        stop = int(np.searchsorted(cum, need)) + 1
            part = None if accepted is None else accepted[:stop]
            self._columns_segment(columns, starts, ends, i, i + stop, part, out)
            i += stop
        if n:
            self._last_wall = now
        return out

    def _vectorisable(self) -> bool:
        """Whether this source's settings allow the vectorised path (see push_columns)."""
        adv = self.advance
        if self.shape == "edge" or self._get_id is not None or adv.interval is not None:
            return False
        if adv.per_key is not None:
            return self._keys_vectorisable()
        return adv.every is None or adv.every >= 256

    def _push_mixed(self, columns: dict[str, Any], start: str,
                    now: float | None) -> list[Message]:
        """A column batch whose start column holds ticks (Python ints) except at a few rows
        whose time the row path must judge (a null, a time off the axis: what
        :func:`topology.building.arrow_reader.arrow_batches` leaves there): the runs of good rows go
        the vectorised way, each other row alone the row way (to the dead letters, with its
        reason), in the batch's order, so the result is ``push`` of the rows. A batch with
        many such rows goes row by row: short runs would cost more than rows."""
        import numpy as np

        starts = columns[start]
        n = len(starts)
        good = np.fromiter((type(v) is int and MIN_TIME <= v < MAX_TIME for v in starts),
                           dtype=bool, count=n)
        bad = np.flatnonzero(~good).tolist()
        if len(bad) * MIXED_RUN > n:
            return self.push(payload_list(columns), now)
        out: list[Message] = []
        lo = 0
        for b in [*bad, n]:
            if b > lo:
                run = {k: c[lo:b] for k, c in columns.items()}
                run[start] = starts[lo:b].astype(np.int64)
                out.extend(self.push_columns(run, now))
            if b < n:
                out.extend(self.push([row_at(columns, b)], now))
            lo = b + 1
        return out

    def _column_times(self, columns: dict[str, Any],
                      n: int) -> tuple[Any, Any] | None:
        """The start and end arrays when the vectorised path applies (see push_columns)."""
        if not self._vectorisable() or n == 0:
            return None
        starts = int_column(columns, self._start_spec)
        if starts is None or starts.min() < MIN_TIME or starts.max() >= MAX_TIME:
            return None
        if self.shape == "point":
            return starts, starts + 1
        ends = int_column(columns, self._end_spec)
        if ends is None or ends.max() > MAX_TIME or (ends <= starts).any():
            return None
        return starts, ends

    def _columns_segment(self, columns: dict[str, Any], starts: Any, ends: Any, lo: int,
                         hi: int, accepted: Any, out: list[Message]) -> None:
        """Rows ``lo:hi`` under one CTI: ``accepted`` (None: all) are sent, the others are
        late; a count-based CTI fires when the segment completes ``every`` events."""
        import numpy as np

        from .columns import Columns

        cti, stats = self.cti, self.stats
        late: list[tuple[int, LateEvent]] = []  # (row, record): records go oldest first
        if accepted is None:
            index: Any = slice(lo, hi)
            k = hi - lo
        else:
            index = np.flatnonzero(accepted) + lo
            k = len(index)
            late = self._late_rows(columns, starts, ends, np.flatnonzero(~accepted) + lo, cti)
        if k:
            raw, end = starts[index], ends[index]
            sent = np.maximum(raw, cti) if accepted is not None else raw
            ids = np.arange(self._next_id, self._next_id + k, dtype=np.int64)
            self._next_id += k
            batch = Columns(ids, sent, None if self.shape == "point" else end,
                            {name: c[index] for name, c in columns.items()})
            out.append(batch)  # type: ignore[arg-type]  # a Columns stands for its inserts
            moved = np.flatnonzero(sent != raw).tolist() if accepted is not None else []
            for j in moved:
                msg = batch.inserts_at(j)
                late.append((int(index[j]), LateEvent(
                    self.name, "adjusted",
                    f"start {int(raw[j])} is behind the CTI {cti}; moved to start at the CTI "
                    f"(policy 'adjust')", msg.payload, msg)))
            stats["adjusted"] += len(moved)
            stats["processed"] += k - len(moved)
            self._latest = max(self._latest, int(raw.max()))
            self._top = max(self._top, int(sent.max()))
            self._horizon = max(self._horizon,
                                int(np.where(end == MAX_TIME, sent + 1, end).max()))
        self.late.extend(record for _, record in sorted(late, key=lambda x: x[0]))
        if k and self.advance.every is not None:
            self._count += k
            if self._count >= self.advance.every:
                self._count = 0
                t = self._latest - self.advance.delay
                self._emit(out, min(max(t, MIN_TIME), MAX_TIME))

    def _late_rows(self, columns: dict[str, Any], starts: Any, ends: Any, rows: Any,
                   cti: int) -> list[tuple[int, LateEvent]]:
        """The rows dropped as late, as (row, record)."""
        late = []
        for r in rows.tolist():
            row = row_at(columns, r)
            late.append((r, self._late_start(int(starts[r]), int(ends[r]), cti, row)))
        return late



def int_column(columns: dict[str, Any], spec: Any) -> Any:
    """The integer column ``spec`` names, as int64 (None: not a name, or not integers)."""
    column = columns.get(spec) if isinstance(spec, str) else None
    kind = getattr(getattr(column, "dtype", None), "kind", "")
    if column is None or not kind or kind not in "iu":
        return None
    return column.astype("int64", copy=False)
