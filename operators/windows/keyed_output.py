"""The output of :class:`~operators.windows.keyed.KeyedWindowAggregate`: a window's results
per key (an incremental aggregate's in one call where the UDM has it), and the rows they become:
with ``emit="speculative"`` the correction of the rows sent before for each (window, key) a
batch touched (a UDO's rows by the smallest difference), with ``emit="final"`` a closed
window's rows once (one column batch when the results are numbers).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from ..columns import Columns, FreshIds
from ..events import MAX_TIME, MIN_TIME, FreshId, Insert, Message, Retract
from ..payloads import identical
from ..udm import Window
from .evaluate import diff
from .keyed_columns import number_columns
from .keyed_state import KeyedWindowState
from .keyed_table import KeyTable

__all__ = ["KeyedWindowOutput"]

_new = tuple.__new__


def _recorder(by_key: dict[Hashable, list[tuple[FreshId, Any]]]
              ) -> Callable[[Hashable, tuple[Any, int, int, Any]], None]:
    """The ``sent`` callback of :func:`~operators.windows.evaluate.diff` for a UDO's rows of
    one window: a row ``(id, start, end, payload)`` that stands for key ``k`` is kept in
    ``by_key[k]`` as ``(id, payload)``."""
    def sent(k: Hashable, row: tuple[Any, int, int, Any]) -> None:
        by_key.setdefault(k, []).append((row[0], row[3]))
    return sent


class KeyedWindowOutput(KeyedWindowState):
    """The results and rows of a keyed window aggregate (see the module docstring): the
    methods :meth:`~operators.windows.keyed.KeyedWindowAggregate.end_batch`, ``on_cti`` and
    ``finish`` call."""

    def _correct(self) -> list[Message]:
        """Speculative: each touched group's current result replaces the row sent before."""
        if not self.touched and not self.touched_runs:
            return []
        out: list[Message] = []
        sent = self.sent
        produced = self._produced if self.intervals else None
        per_window: dict[int, list[Hashable]] = {}
        for n, k in self.touched:
            if produced is None or produced(n, k):  # (else touched again when its frontier
                per_window.setdefault(n, []).append(k)  # reaches it)
        again = set()  # windows whose keys came from more than one place
        for n, keys in self.touched_runs:
            if produced is not None:
                keys = [k for k in keys if produced(n, k)]
            if n in per_window:
                again.add(n)
                per_window[n] += keys
            else:
                per_window[n] = keys
        for n in again:
            per_window[n] = list(dict.fromkeys(per_window[n]))
        self.touched.clear()
        self.touched_runs.clear()
        keyed, ids = self.keyed, self.ids
        if self.apply:
            return self._correct_rows(per_window)
        for n in sorted(per_window):  # the window, its states and its rows sent: once each
            keys = per_window[n]
            s, e = self._row_lifetime(n)
            states = self.open[n]
            by_key = sent.setdefault(n, {})
            results = (states.results(keys) if type(states) is KeyTable
                       else self._results(n, {k: states[k] for k in keys}))
            get, name, j = by_key.get, ids.name, ids.next_id  # (ids.mint() without a call)
            for k, result in zip(keys, results):
                payload = (k, result) if keyed else result
                before = get(k)
                if before is not None:
                    if identical(before[1], payload):  # 2 -> 2.0 is a change: correct it
                        continue
                    out.append(_new(Retract, (before[0], s, e, s, before[1])))
                oid = FreshId(name, j)
                j += 1
                out.append(_new(Insert, (oid, s, e, payload)))
                by_key[k] = (oid, payload)
            ids.next_id = j
        return out

    def _correct_rows(self, per_window: dict[int, list[Hashable]]) -> list[Message]:
        """Speculative, a UDO: each touched group's rows now replace the rows sent before,
        by the smallest difference (:func:`~operators.windows.evaluate.diff`, as the general
        window operator corrects its output): a row that stays is not touched."""
        out: list[Message] = []
        keyed, ids, sent = self.keyed, self.ids, self.sent
        for n in sorted(per_window):
            keys = per_window[n]
            s, e = self._row_lifetime(n)
            states = self.open[n]
            by_key = sent.setdefault(n, {})
            results = self._results(n, {k: states[k] for k in keys})
            pool: list[tuple[Any, int, int, Any, Hashable]] = []
            new: list[tuple[Hashable, tuple[int, int, Any]]] = []
            for k, rows in zip(keys, results):
                before = by_key.pop(k, None)
                if before:
                    pool += [(oid, s, e, p, k) for oid, p in before]
                new += [(k, (s, e, (k, r) if keyed else r)) for r in rows]
            if pool or new:
                out += [msg for msg, _ in diff(pool, new, ids, _recorder(by_key))]
        return out

    def _results(self, n: int, by_key: dict[Hashable, Any]) -> list[Any]:
        """Window ``n``'s results of the groups ``by_key`` (key -> state), in its order: an
        incremental aggregate's in one call (``window_results`` where the UDM has it: the
        built-ins answer part by part), else one call per group; a failing group is found
        again by :meth:`_result`, which names it."""
        if type(by_key) is KeyTable:  # (the keys in its order: every key's, at once)
            return by_key.all_results()
        window = self._window(n)
        if self.incremental:
            udm: Any = self.udm
            try:
                many = getattr(udm, "window_results", None)
                if many is not None:
                    return many(list(by_key.values()), window)
                window_result = udm.window_result
                return [window_result(state, window) for state in by_key.values()]
            except Exception:  # noqa: BLE001 (raised again below, naming the group)
                pass
        return [self._result(n, k, state, window) for k, state in by_key.items()]

    def _row_lifetime(self, n: int) -> tuple[int, int]:
        g = self.grid
        ws, we = max(g.start(n), MIN_TIME), min(g.end(n), MAX_TIME)
        return self.output.row_start(ws, we), we

    def _emit(self, n: int, by_key: dict[Hashable, Any]) -> list[Message]:
        """Window ``n``'s rows, one per key: the window is built once, an incremental
        aggregate's results are taken in one pass (a failing key is found again by
        :meth:`_result`, which names it)."""
        s, e = self._row_lifetime(n)
        column = by_key.result_column() if type(by_key) is KeyTable else None
        if column is not None:  # (the results as the column they make)
            cols = number_columns(list(by_key), column, self.keyed)
            if cols is not None:
                return self._columns_out(s, e, cols, len(column))
        results = self._results(n, by_key)
        ids = self.ids
        if self.apply:  # a UDO: each of its payloads is one row
            mint = ids.mint
            if self.keyed:
                return [_new(Insert, (mint(), s, e, (k, r)))
                        for k, rows in zip(by_key, results) for r in rows]
            return [_new(Insert, (mint(), s, e, r)) for rows in results for r in rows]
        cols = number_columns(list(by_key), results, self.keyed)
        if cols is not None:  # one column batch: a join after it stays column-wise
            return self._columns_out(s, e, cols, len(results))
        first = ids.next_id
        ids.next_id = first + len(results)
        name = ids.name
        if self.keyed:
            return [_new(Insert, (FreshId(name, first + j), s, e, (k, result)))
                    for j, (k, result) in enumerate(zip(by_key, results))]
        return [_new(Insert, (FreshId(name, first + j), s, e, result))
                for j, result in enumerate(results)]

    def _columns_out(self, s: int, e: int, cols: Any, m: int) -> list[Message]:
        """``m`` rows ``[s, e)`` of payload columns ``cols`` as one column batch, their ids
        the next fresh ones (minted if read)."""
        ids = self.ids
        first = ids.next_id
        ids.next_id = first + m
        oids = FreshIds(ids.name, np.arange(first, first + m, dtype=np.int64))
        return [Columns(oids, np.full(m, s, dtype=np.int64),  # type: ignore[list-item]
                        np.full(m, e, dtype=np.int64), cols)]

    def _result(self, n: int, k: Hashable, state: Any, window: Window | None = None) -> Any:
        if window is None:
            window = self._window(n)
        call = self.call
        try:
            if self.incremental:
                return call.result(state, window)[0]
            if self.time_sensitive:
                results = call.compute([(s, s + 1, p) for s, p in
                                        zip(state.starts, state.payloads)], window)
            else:
                results = call.compute(list(state.payloads), window)
        except Exception as exc:
            raise self._error(n, k, "result" if self.incremental else "compute", exc) from exc
        if not self.apply:
            return results[0]
        if call.stamped:  # a time-sensitive UDO's events: window rows keep the payloads
            return [p for _, _, p in results]
        return results
