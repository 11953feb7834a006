"""The logical node of the merge of a table's parts (``Stream.from_spark(df, sources=N)``).

A :class:`topology.building.nodes.Union` that ``explain()`` shows as the parts of one table; it runs
as an :class:`operators.union.Union`: while the parts' sources run, the merged CTI is the
minimum of theirs; at the end of every part, the maximum of their final CTIs -- what one
source reading the whole table would have ended with. The planner sees through it as through
any union (:meth:`~topology.building.nodes.Node.lengths`: a union of point sources is a point
source).
"""

from __future__ import annotations

from dataclasses import dataclass

from topology.building import nodes as n
from topology.planning import planner


@dataclass(frozen=True, eq=False, kw_only=True)
class UnionOfParts(n.Union):
    def describe(self, clock: str | None = None) -> str:
        return f"union({len(self.inputs)} parts of one table)"


planner.BUILDERS[UnionOfParts] = planner.BUILDERS[n.Union]
