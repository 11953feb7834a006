"""Where an operator's output goes: the out-edges of a stage and how a batch is split on them.

An edge carries the whole output to one input port of a downstream stage, or, for the
partitions of ``group_apply(..., partitions=N)``, only the events whose key hashes to that
partition (CTIs go to every partition: each one must see time advance). The hash is stable
across processes (``hash()`` of a string is salted per process), so a key always lands on the
same partition whichever actor routes it.

    >>> from operators.events import Insert, Cti
    >>> p = Partitioner(lambda v: v, 2)
    >>> r = Router([OutEdge("g0", 0, p, 0), OutEdge("g1", 0, p, 1)])
    >>> [[m.payload if type(m) is Insert else m for m in b]
    ...  for b in r.route([Insert(1, 0, 1, 3), Insert(2, 0, 1, 4), Cti(1)])]
    [[4, Cti(time=1)], [3, Cti(time=1)]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from operators.columns import Columns, apply_columns
from operators.errors import OperatorError
from operators.events import Cti, KeyCtis, Message
from operators.ingress import LateOut
from operators.key_groups import partition_of, stable_hash, stable_hash_column

__all__ = ["OutEdge", "Partitioner", "Router", "stable_hash", "stable_hash_column"]


@dataclass(frozen=True, eq=False)
class Partitioner:
    """Spreads events over ``n`` partitions by ``stable_hash(key(payload)) % n``, or, with
    ``groups``, by key group (``stable_hash(key(payload)) % groups``, each partition a
    contiguous range of them: :func:`operators.key_groups.partition_of`)."""

    key: Callable[[Any], Any]
    n: int
    step: str = "group_apply"
    groups: int | None = None

    def index(self, payload: Any) -> int:
        try:
            k = self.key(payload)
        except Exception as exc:
            raise OperatorError(
                f"operator {self.step!r}: the group key function failed on payload "
                f"{payload!r}: {type(exc).__name__}: {exc}"
            ) from exc
        if self.groups is None:
            return stable_hash(k) % self.n
        return int(partition_of(stable_hash(k) % self.groups, self.n, self.groups))

    def indexes(self, cols: Columns) -> np.ndarray | None:
        """The partition of every event of a column batch, or None when its keys must be
        found event by event (:func:`operators.expr` cannot evaluate the key function
        exactly on these columns, or its keys are not integers)."""
        keys = apply_columns(self.key, cols)
        if not isinstance(keys, np.ndarray):
            return None
        hashes = stable_hash_column(keys)
        if hashes is None:
            return None
        if self.groups is None:
            return (hashes % np.uint64(self.n)).astype(np.int64)
        return partition_of((hashes % np.uint64(self.groups)).astype(np.int64), self.n,
                            self.groups)


@dataclass(frozen=True)
class OutEdge:
    """The output of a stage goes to input ``port`` of stage ``dst`` (only partition
    ``index`` of ``partition`` when that is set)."""

    dst: str
    port: int
    partition: Partitioner | None = None
    index: int = 0
    #: the edge of a late stream (``Stream.late()``): it carries only the producer's late
    #: events (the :class:`~operators.ingress.LateOut` markers' inserts), the others none
    late: bool = False
    #: the producer sends per-key CTIs (:class:`~operators.events.KeyCtis`): True on an edge
    #: that carries them (to a step keyed by the source's ``per_key``), False on one that
    #: drops them; None where the producer sends none
    key_ctis: bool | None = None


class Router:
    """Splits an output batch over a stage's out-edges, keeping the order of messages."""

    def __init__(self, edges: Sequence[OutEdge]) -> None:
        self.edges = list(edges)
        self._partitioners: list[Partitioner] = []
        for e in self.edges:
            if e.partition is not None and all(p is not e.partition
                                               for p in self._partitioners):
                self._partitioners.append(e.partition)
        if any(e.late for e in self.edges):
            self._late = Router([e for e in self.edges if not e.late])
        elif any(e.key_ctis is not None for e in self.edges):
            self._keyed = Router([replace(e, key_ctis=None) for e in self.edges])

    def route(self, msgs: list[Message]) -> list[list[Message]]:
        """One list per edge (in edge order); unpartitioned edges share ``msgs`` itself."""
        if self._late is not None:
            return self._route_late(msgs)
        if self._keyed is not None:
            return self._route_keyed(msgs)
        if not self._partitioners:
            return [msgs] * len(self.edges)
        split: dict[int, list[list[Message]]] = {}
        for p in self._partitioners:
            buckets: list[list[Message]] = [[] for _ in range(p.n)]
            index = p.index
            m: Any  # told apart by type() on this hot path
            for m in msgs:
                if type(m) is Cti or type(m) is KeyCtis:  # (a partition ignores others' keys)
                    for b in buckets:
                        b.append(m)  # type: ignore[arg-type]  # KeyCtis travel beside
                elif type(m) is Columns:
                    self._split_columns(p, m, buckets)
                else:
                    buckets[index(m.payload)].append(m)
            split[id(p)] = buckets
        return [msgs if e.partition is None else split[id(e.partition)][e.index]
                for e in self.edges]

    # -- late streams (Stream.late()) ---------------------------------------------------
    _late: Router | None = None

    def _route_late(self, msgs: list[Message]) -> list[list[Message]]:
        """The late events to the late edges, the rest to the others (by their own router)."""
        assert self._late is not None
        late: list[Message] = [m.event for m in cast(list[Any], msgs) if type(m) is LateOut]
        if late:
            msgs = [m for m in msgs if type(m) is not LateOut]
        rest = iter(self._late.route(msgs))
        return [late if e.late else next(rest) for e in self.edges]

    # -- per-key CTIs (AdvanceTime(per_key=...)) ----------------------------------------
    _keyed: Router | None = None

    def _route_keyed(self, msgs: list[Message]) -> list[list[Message]]:
        """The per-key CTIs only on the edges that carry them (see OutEdge.key_ctis)."""
        assert self._keyed is not None
        every = self._keyed.route(msgs)
        if not any(type(m) is KeyCtis for m in msgs):
            return every
        plain = self._keyed.route([m for m in msgs if type(m) is not KeyCtis])
        return [a if e.key_ctis else b for e, a, b in zip(self.edges, every, plain, strict=True)]

    @staticmethod
    def _split_columns(p: Partitioner, cols: Columns, buckets: list[list[Message]]) -> None:
        """A column batch split over the partitions column-wise (its events keep their order
        within each), or event by event when its keys cannot be hashed column-wise."""
        parts = p.indexes(cols)
        if parts is None:
            for m in cols.inserts():
                buckets[p.index(m.payload)].append(m)
            return
        for i, bucket in enumerate(buckets):
            mask = parts == i
            if mask.all():
                bucket.append(cols)  # type: ignore[arg-type]  # stands for its inserts
            elif mask.any():
                bucket.append(cols.take(mask))  # type: ignore[arg-type]
