"""``MergeParts``: the union of the N sources that read the parts of one table.

``Stream.from_spark(df, sources=N)`` reads a table as N time-sorted parts, one source each.
While they run, the merge is a :class:`~operators.union.Union`: the output CTI is the minimum
of the parts' CTIs, since a part whose CTI lags may still send events that far back. At the
end of input nothing can come any more, so the final CTI is the *maximum* of the parts' final
CTIs -- what one source reading the whole table would have ended with (past every finite
endpoint of the table). With the minimum, windows past the end of the shortest part would
never be reached::

    part 0    [1 ── 4)            final Cti(5)
    part 1    [2 ────────── 9)    final Cti(10)
    output    ...  Cti(5) while running, Cti(10) at the end

    >>> from operators.events import Insert, Cti
    >>> m = MergeParts(2)
    >>> m.process([Insert("a", 1, 4, "x"), Cti(5)], 0)
    [Insert(id=(0, 'a'), start=1, end=4, payload='x')]
    >>> m.process([Insert("a", 2, 9, "y"), Cti(10)], 1)
    [Insert(id=(1, 'a'), start=2, end=9, payload='y'), Cti(time=5)]
    >>> m.finish()
    [Cti(time=10)]
"""

from __future__ import annotations

from .events import Message
from .union import Union


class MergeParts(Union):
    """A :class:`Union` whose end of input brings the maximum of its inputs' CTIs."""

    def finish(self) -> list[Message]:
        ctis = self.in_ctis
        return self.emit_cti(max(ctis)) if ctis else []
