"""``union(*others)``: merge N streams into one (an N-input operator).

The output CHT is the concatenation of the input CHTs: every insert and retraction passes
through unchanged except its id, which is tagged with its input ``port`` so that ids stay
unique across inputs (two inputs may both use id ``"a"``, or both count their events from 0):

* an id equal to an integer ``i`` (``int``, ``bool``, numpy integers, ``2.0``) becomes the
  integer ``i * n_inputs + port``: integer ids stay integers, so a column batch's ids stay one
  int64 array (no Python object per event, nothing pickled per event on Ray);
* any other id becomes the pair ``(port, id)``.

The tag is a function of ``(port, id)`` alone, so a retraction that arrives as a message gets
the id its insert got in a column batch. The output CTI is the minimum of the inputs' CTIs: an
input whose CTI lags may still send events that far back::

    input 0   a: [1 ── 4)   Cti(5)
    input 1   a: [2 ─── 6)  7: [2 ─ 3)  Cti(3)
    output    (0, 'a'): [1 ── 4)  (1, 'a'): [2 ─── 6)  15: [2 ─ 3)  Cti(3)

    >>> from operators.events import Insert, Cti
    >>> u = Union(2)
    >>> u.process([Insert("a", 1, 4, "x"), Cti(5)], 0)
    [Insert(id=(0, 'a'), start=1, end=4, payload='x')]
    >>> u.process([Insert("a", 2, 6, "y"), Insert(7, 2, 3, "z"), Cti(3)], 1)
    [Insert(id=(1, 'a'), start=2, end=6, payload='y'),
     Insert(id=15, start=2, end=3, payload='z'), Cti(time=3)]
    >>> u.finish()  # at the end of every input: no input holds the CTI back any more
    [Cti(time=5)]

**An input that ends** while others are still open sends nothing more, so its CTI stops
counting (:meth:`~operators.processor.Processor.end_input`): the output CTI is the minimum
over the open inputs, and a finite input (a reference table, a batch) does not stall a live
one at its final CTI::

    input 0   Cti(3)  end
    input 1   Cti(5)           Cti(9)
    output    Cti(3)  Cti(5)   Cti(9)

    >>> u = Union(2)
    >>> u.process([Cti(3)], 0) + u.process([Cti(5)], 1)
    [Cti(time=3)]
    >>> u.end_input(0) + u.process([Cti(9)], 1)
    [Cti(time=5), Cti(time=9)]

A :class:`~operators.columns.Columns` batch passes as one: only its id column is rewritten
(:meth:`Union.on_columns`). Union holds no events: its only state is the CTI of each input. It
is also the step that merges the partitions of ``group_apply(..., partitions=N)`` and the
parts of ``Stream.from_spark(df, sources=N)`` into one stream again.
"""

from __future__ import annotations

import numbers
from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np

from .columns import Columns
from .events import FreshId, Insert, Message, Retract
from .processor import Processor

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def tag_id(id: Hashable, port: int, n_inputs: int) -> Hashable:
    """The id in a union's output of the event ``id`` of input ``port``: an id equal to an
    integer ``i`` becomes ``i * n_inputs + port``, any other the pair ``(port, id)``. Distinct
    ``(port, id)`` give distinct tags, and ids equal as dict keys (``2``, ``2.0``,
    ``numpy.int64(2)``) the same tag.

    >>> tag_id(7, 1, 2), tag_id(7.0, 1, 2), tag_id("a", 1, 2)
    (15, 15, (1, 'a'))
    """
    kind = type(id)
    if kind is int:
        return id * n_inputs + port  # type: ignore[operator]  # (an int, by type())
    if kind is str or kind is tuple or kind is FreshId:  # (no number: spares the ABC check)
        return (port, id)
    if isinstance(id, numbers.Number):
        try:
            i = int(id)  # type: ignore[call-overload]
        except (TypeError, ValueError, OverflowError):  # complex, NaN, infinite
            pass
        else:
            if i == id:
                return i * n_inputs + port
    return (port, id)


def tag_ids(ids: np.ndarray, port: int, n_inputs: int) -> np.ndarray:
    """:func:`tag_id` of every id of a column: in one numpy operation when the ids are
    integers and no tag leaves int64, else one call per id.

    >>> tag_ids(np.array([7, 0]), 1, 2).tolist()
    [15, 1]
    """
    n = n_inputs
    if not len(ids):
        return ids
    if ids.dtype.kind in "biu":
        lo, hi = int(ids.min()), int(ids.max())
        if lo * n >= _INT64_MIN and hi * n + port <= _INT64_MAX:
            return ids.astype(np.int64) * n + port
    tagged: Any = (tag_id(i, port, n) for i in ids.tolist())
    return np.fromiter(tagged, dtype=object, count=len(ids))


class Union(Processor):
    """Merges ``n_inputs`` streams; output ids are the input ids tagged with their input
    (:func:`tag_id`)."""

    def __init__(self, n_inputs: int = 2, name: str | None = None, tag: bool = True) -> None:
        super().__init__(name)
        if isinstance(n_inputs, bool) or not isinstance(n_inputs, int) or n_inputs < 1:
            raise ValueError(f"union: n_inputs must be a positive int, got {n_inputs!r}")
        self.n_inputs = n_inputs
        #: False where the inputs' ids are distinct already (the partitions of a rescalable
        #: group_apply mint theirs under their own names, :mod:`operators.key_groups`): ids
        #: pass as they are, so an event keeps its id whichever input it comes from
        self.tag = tag

    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        if not 0 <= port < self.n_inputs:
            raise ValueError(f"union {self.name!r} has inputs 0..{self.n_inputs - 1}, got a "
                             f"batch for input {port}; build it with Union(n_inputs={port + 1})")
        return super().process(batch, port)

    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        if not self.tag:
            return [msg]
        return [Insert(tag_id(msg.id, port, self.n_inputs), msg.start, msg.end, msg.payload)]

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        if not self.tag:
            return [msg]
        return [Retract(tag_id(msg.id, port, self.n_inputs), msg.start, msg.end, msg.new_end,
                        msg.payload)]

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        """The batch passes as one batch, with its ids tagged as :meth:`on_insert` tags
        them: an integer id column in one numpy operation when no tag leaves int64, else one
        :func:`tag_id` per event."""
        ids = tag_ids(msg.ids, port, self.n_inputs) if self.tag else msg.ids
        return [Columns(ids, msg.starts,  # type: ignore[list-item]
                        None if msg.points else msg.ends, msg.payload)]  # (stands for inserts)

    def restore(self, state: dict[str, Any]) -> None:
        """Resume from a snapshot; one of a union with another number of inputs (the merge
        of a group_apply restored at another ``partitions``: :mod:`operators.key_groups`)
        gives every input the lowest input CTI it had, which each partition then moves on."""
        super().restore(state)
        ctis = self.in_ctis
        if ctis is not None and len(ctis) != self.n_inputs:
            self.in_ctis = [min(ctis)] * self.n_inputs
            self.in_ended = None

    def on_cti(self, time: int, port: int) -> list[Message]:
        return self.emit_cti(self.in_cti)

    def on_end_input(self, port: int) -> list[Message]:
        """The ended input no longer holds the output CTI back: it moves up to the minimum of
        the open inputs' CTIs."""
        return self.emit_cti(self.in_cti)

    def finish(self) -> list[Message]:
        """Every input has ended, so none can send anything more: the output CTI moves up to
        the furthest input's (as a finished source's watermark stops holding back a Flink
        operator), and what that CTI makes final downstream is not held back by an input
        that simply stopped earlier."""
        return self.emit_cti(max(self.in_ctis or [self.out_cti]))
