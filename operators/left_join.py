"""``left_join(other, on=..., select=fn, default=None)``: the temporal left outer join.

Where a left event overlaps matching right events, the output is the join's: one event per
pair over the intersection with payload ``select(l, r)``. Where, during its lifetime, no
matching right event is alive, the left event is output with payload ``select(l, default)``
(with the default ``select``, the tuple ``(l, default)``)::

    left    a: [0 ─────────────────── 20)
    right   b:        [5 ──── 9)
    output  (a, None): [0 ─ 5)  (a, b): [5 ─ 9)  (a, None): [9 ─── 20)

    >>> from operators.events import Insert
    >>> from operators.cht import to_cht
    >>> lj = LeftJoin()
    >>> out = lj.process([Insert("a", 0, 20, "a")], 0) + lj.process([Insert("b", 5, 9, "b")], 1)
    >>> to_cht(out)
    [(0, 5, ('a', None)), (5, 9, ('a', 'b')), (9, 20, ('a', None))]

It is the composition ``union(join(l, r), select(anti_join(l, r), lambda l: select(l,
default)))``, run as one operator: both inputs feed a :class:`~operators.join.Join` and an
:class:`~operators.anti_join.AntiJoin`; their outputs meet in a :class:`~operators.union.Union`,
so output ids are the join's ids tagged with input 0 for matched and the fragments' ids tagged
with input 1 for unmatched parts (:func:`~operators.union.tag_id`), and the output CTI is
``min(left CTI, right CTI)``; once one input has ended, the open input's CTI
(:meth:`~operators.processor.Processor.end_input`).

**Column batches** go to both parts whole, so each runs its column-wise path while it can
(and both leave it on the same message: a retraction, a single insert, or a batch whose keys
or payload columns the arrays cannot hold). Their ``Columns`` output stays a ``Columns``
batch: the unmatched payloads are ``select(l, default)`` on the columns where that traces
(:mod:`operators.expr`), else one call per fragment, and the union tags their ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .anti_join import AntiJoin
from .columns import Columns, apply_columns, payload_list
from .events import Message
from .join import Join
from .processor import Processor
from .select import Select
from .union import Union


class LeftJoin(Processor):
    """Input 0 (left) outer-joined with input 1 (right); see the module docstring."""

    n_inputs = 2
    _parts = ("parts",)

    def __init__(self, on: Any = None, select: Callable[[Any, Any], Any] | None = None,
                 default: Any = None, name: str | None = None) -> None:
        super().__init__(name)
        if select is not None and not callable(select):
            raise TypeError(f"left_join: select must be a function (left, right) -> payload, "
                            f"got {select!r}")
        fn = select if select is not None else _pair
        self.join = Join(on, fn, name=f"{self.name}.join")
        self.anti = AntiJoin(on, name=f"{self.name}.anti_join")
        self.unmatched = Select(lambda l: fn(l, default), name=f"{self.name}.unmatched")
        self.union = Union(2, name=f"{self.name}.union")
        self.parts: tuple[Processor, ...] = (self.join, self.anti, self.unmatched, self.union)

    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        if port not in (0, 1):
            raise ValueError(f"left_join {self.name!r} has inputs 0 (left) and 1 (right), got "
                             f"a batch for input {port}")
        msgs = list(batch)
        matched = self.join.process(msgs, port)
        unmatched = self._runs(self.anti.process(msgs, port), self._unmatched)
        out = self.union.process(matched, 0)  # (a Columns stays one: Union.on_columns)
        out.extend(self.union.process(unmatched, 1))
        self.out_cti = max(self.out_cti, self.union.out_cti)
        return out

    def on_end_input(self, port: int) -> list[Message]:
        """One input ended: both parts follow the open input's CTI (their output is CTIs)."""
        return self._parts_out(self.join.end_input(port), self.anti.end_input(port))

    def finish(self) -> list[Message]:
        """Both inputs ended: the parts' final CTIs (the furthest input's), through the union."""
        return self._parts_out(self.join.finish(), self.anti.finish())

    def _parts_out(self, matched: list[Message], anti: list[Message]) -> list[Message]:
        """The join's and the anti-join's output, merged as :meth:`process` merges it."""
        out = self.union.process(matched, 0)
        out.extend(self.union.process(self._runs(anti, self._unmatched), 1))
        self.out_cti = max(self.out_cti, self.union.out_cti)
        return out

    @staticmethod
    def _runs(msgs: list[Message], step: Callable[[list[Message]], list[Message]]
              ) -> list[Message]:
        """``step`` over the runs of messages between ``Columns`` batches and over each
        ``Columns`` batch alone, in order."""
        if not any(type(m) is Columns for m in msgs):
            return step(msgs) if msgs else []
        out: list[Message] = []
        run: list[Message] = []
        for msg in msgs:
            if type(msg) is not Columns:
                run.append(msg)
                continue
            if run:
                out.extend(step(run))
                run = []
            out.extend(step([msg]))
        if run:
            out.extend(step(run))
        return out

    def _unmatched(self, msgs: list[Message]) -> list[Message]:
        """``select(l, default)`` over the anti-join's output; a ``Columns`` batch stays one."""
        if len(msgs) != 1 or type(msgs[0]) is not Columns:
            return self.unmatched.process(msgs)
        cols: Columns = msgs[0]
        fn = self.unmatched.fn
        payload = apply_columns(fn, cols)
        if payload is None:
            try:
                payload = np.fromiter(map(fn, payload_list(cols.payload)), dtype=object,
                                      count=len(cols))
            except Exception:  # noqa: BLE001 - the per-event step raises it, naming itself
                return self.unmatched.process(msgs)
        return [cols.with_payload(payload)]  # (stands for its inserts)

    def key_functions(self) -> tuple[Callable[[Any], Any], ...] | None:
        return self.join.key_functions()

    def state_size(self) -> int:
        """The join's and the anti-join's state."""
        return self.join.state_size() + self.anti.state_size()

    def _check(self) -> None:
        for part in self.parts:
            part._check()


def _pair(left: Any, right: Any) -> tuple[Any, Any]:
    return (left, right)
