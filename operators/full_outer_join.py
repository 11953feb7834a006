"""``full_outer_join(other, on=..., select=fn)``: the temporal full outer join.

Where a left event overlaps matching right events, the output is the join's: one event per
pair over the intersection, payload ``select(l, r)``. The parts of a left lifetime during
which no matching right event is alive come out as ``select(l, None)``, and the parts of a
right lifetime during which no matching left event is alive as ``select(None, r)`` (with the
default ``select``, the tuples ``(l, None)`` and ``(None, r)``)::

    left    a: [0 ─────────── 12)
    right   b:        [5 ──────────────── 20)
    output  (a, None): [0 ─ 5)  (a, b): [5 ── 12)  (None, b): [12 ─── 20)

    >>> from operators.events import Insert
    >>> from operators.cht import to_cht
    >>> fj = FullOuterJoin()
    >>> out = fj.process([Insert("a", 0, 12, "a")], 0) + fj.process([Insert("b", 5, 20, "b")], 1)
    >>> sorted(to_cht(out))
    [(0, 5, ('a', None)), (5, 12, ('a', 'b')), (12, 20, (None, 'b'))]

It is the composition ``union(join(l, r), select(anti_join(l, r), λl: select(l, None)),
select(anti_join(r, l), λr: select(None, r)))`` run as one operator, so each side's uncovered
parts are cut exactly as :mod:`operators.anti_join` cuts them (maximal pieces, each with a
fresh id; a later event on the other side splits or removes them by retraction). The second
anti-join is an :class:`~operators.anti_join.AntiJoin` with ``on`` swapped and the inputs
swapped. Output ids are the union's tags (:func:`~operators.union.tag_id`): input 0 for the
join's pairs, 1 for the left's uncovered parts, 2 for the right's. The output CTI is
``min(left CTI, right CTI)``: all three parts emit that (once one input has ended, the open
input's CTI: :meth:`~operators.processor.Processor.end_input`).

Output is speculative: a right event arriving after its left partner has been output as
``(l, None)`` shortens or retracts that fragment and inserts the pair (and vice versa).

**Column batches** go whole to the three parts (see :mod:`operators.left_join`), so each runs
its column-wise path (:mod:`operators.two_input_columns`) while it can; the uncovered payloads
are ``select(l, None)`` / ``select(None, r)`` on the columns where that traces, else one call
per fragment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .anti_join import AntiJoin
from .columns import Columns, apply_columns, payload_list
from .events import Message
from .join import Join
from .left_join import LeftJoin
from .processor import Processor
from .select import Select
from .union import Union


class FullOuterJoin(Processor):
    """Input 0 (left) full-outer-joined with input 1 (right); see the module docstring."""

    n_inputs = 2
    _parts = ("parts",)

    def __init__(self, on: Any = None, select: Callable[[Any, Any], Any] | None = None,
                 name: str | None = None) -> None:
        super().__init__(name)
        if select is not None and not callable(select):
            raise TypeError(f"full_outer_join: select must be a function (left, right) -> "
                            f"payload (one of the two is None where it has no partner), got "
                            f"{select!r}")
        if on is not None and (not isinstance(on, (tuple, list)) or len(on) != 2):
            raise ValueError(
                f"full_outer_join: on must be a pair (left_key, right_key) of field names or "
                f"functions of the payload, e.g. on=('meter', 'meter'), or None for a cross "
                f"join; got {on!r}")
        fn = select if select is not None else _pair
        swapped = None if on is None else (on[1], on[0])
        self.join = Join(on, fn, name=f"{self.name}.join")
        self.left_anti = AntiJoin(on, name=f"{self.name}.left_only")
        self.right_anti = AntiJoin(swapped, name=f"{self.name}.right_only")
        self.left_only = Select(lambda l: fn(l, None), name=f"{self.name}.left_unmatched")
        self.right_only = Select(lambda r: fn(None, r), name=f"{self.name}.right_unmatched")
        self.union = Union(3, name=f"{self.name}.union")
        self.parts: tuple[Processor, ...] = (self.join, self.left_anti, self.right_anti,
                                             self.left_only, self.right_only, self.union)

    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        if port not in (0, 1):
            raise ValueError(f"full_outer_join {self.name!r} has inputs 0 (left) and 1 "
                             f"(right), got a batch for input {port}")
        msgs = list(batch)
        matched = self.join.process(msgs, port)
        left = LeftJoin._runs(self.left_anti.process(msgs, port),
                              lambda m: _selected(self.left_only, m))
        right = LeftJoin._runs(self.right_anti.process(msgs, 1 - port),
                               lambda m: _selected(self.right_only, m))
        out = self.union.process(matched, 0)
        out.extend(self.union.process(left, 1))
        out.extend(self.union.process(right, 2))
        self.out_cti = max(self.out_cti, self.union.out_cti)
        return out

    def on_end_input(self, port: int) -> list[Message]:
        """One input ended: the three parts follow the open input's CTI (their output is
        CTIs; the right-only anti-join sees the inputs swapped)."""
        return self._parts_out(self.join.end_input(port), self.left_anti.end_input(port),
                               self.right_anti.end_input(1 - port))

    def finish(self) -> list[Message]:
        """Both inputs ended: the parts' final CTIs (the furthest input's), through the union."""
        return self._parts_out(self.join.finish(), self.left_anti.finish(),
                               self.right_anti.finish())

    def _parts_out(self, matched: list[Message], left: list[Message],
                   right: list[Message]) -> list[Message]:
        """The three parts' output, merged as :meth:`process` merges it."""
        out = self.union.process(matched, 0)
        out.extend(self.union.process(
            LeftJoin._runs(left, lambda m: _selected(self.left_only, m)), 1))
        out.extend(self.union.process(
            LeftJoin._runs(right, lambda m: _selected(self.right_only, m)), 2))
        self.out_cti = max(self.out_cti, self.union.out_cti)
        return out

    def state_size(self) -> int:
        """The join's and both anti-joins' state."""
        return (self.join.state_size() + self.left_anti.state_size()
                + self.right_anti.state_size())

    def _check(self) -> None:
        for part in self.parts:
            part._check()


def _selected(sel: Select, msgs: list[Message]) -> list[Message]:
    """``sel`` over an anti-join's output; a ``Columns`` batch stays one."""
    if len(msgs) != 1 or type(msgs[0]) is not Columns:
        return sel.process(msgs)
    cols: Columns = msgs[0]
    payload = apply_columns(sel.fn, cols)
    if payload is None:
        try:
            payload = np.fromiter(map(sel.fn, payload_list(cols.payload)), dtype=object,
                                  count=len(cols))
        except Exception:  # noqa: BLE001 - the per-event step raises it, naming itself
            return sel.process(msgs)
    return [cols.with_payload(payload)]  # (stands for its inserts)


def _pair(left: Any, right: Any) -> tuple[Any, Any]:
    return (left, right)
