"""``PartitionMerge``: the N partitions of a ``group_apply`` become one stream again.

Each partition is an independent operator, so the ids they mint may collide; the merge tags
every id with its partition (``(port, id)``), which keeps ids unique and never reused without
changing the CHT. Its CTI is the minimum over the partitions' CTIs (no partition may still
send anything behind it).

    >>> from operators.events import Insert, Cti
    >>> m = PartitionMerge(2)
    >>> m.process([Insert(7, 0, 4, "a"), Cti(3)], 0) + m.process([Cti(2)], 1)
    [Insert(id=(0, 7), start=0, end=4, payload='a'), Cti(time=2)]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from operators.base import CtiMerge, Processor
from operators.columns import expand
from operators.events import Cti, Insert, Message, Retract

_new = tuple.__new__


class PartitionMerge(Processor):
    _state_fields = ("merge",)

    def __init__(self, n_inputs: int, name: str | None = None) -> None:
        super().__init__(name)
        self.n_inputs = n_inputs
        self.merge = CtiMerge(n_inputs)

    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        out: list[Any] = []
        for m in expand(batch):
            kind = type(m)
            if kind is Cti:
                low = self.merge.advance(port, m.time)  # type: ignore[union-attr]
                if low is not None:
                    out.extend(self.emit_cti(low))
            elif kind is Insert or kind is Retract:
                out.append(_new(kind, ((port, m[0]),) + tuple(m[1:])))
        return out
