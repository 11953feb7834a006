"""The logical node of the merge of a table's parts (``Stream.from_spark(df, sources=N)``).

A :class:`topology.nodes.Union` whose processor is :class:`operators.merge_parts.MergeParts`
(the final CTI is the maximum of the parts' final CTIs); registered with the planner here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from operators.merge_parts import MergeParts

from . import nodes as n
from . import planner


@dataclass(frozen=True, eq=False, kw_only=True)
class UnionOfParts(n.Union):
    def describe(self) -> str:
        return f"union({len(self.inputs)} parts of one table)"


def _b_union_of_parts(node: UnionOfParts, step: str) -> Any:
    return functools.partial(MergeParts, len(node.inputs), name=step)


planner.BUILDERS[UnionOfParts] = _b_union_of_parts
