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

import numbers
import pickle
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from operators.columns import Columns, apply_columns
from operators.errors import OperatorError
from operators.events import Cti, KeyCtis, Message
from operators.ingress import LateOut


def stable_hash(key: Any) -> int:
    """A hash of ``key`` that is the same in every process, and equal for keys that compare
    equal: ``1``, ``True``, ``1.0``, ``np.int64(1)``, ``np.float32(1.0)``, ``Decimal(1)`` and
    ``Fraction(1)`` are one key (Python's numeric hash is defined across number types and is
    not salted per process, unlike ``hash()`` of a string)."""
    if isinstance(key, (numbers.Number, np.generic)) and not isinstance(key, (str, bytes)):
        if key != key:
            return 0
        return hash(key) & 0x7FFFFFFFFFFFFFFF
    if isinstance(key, str):
        return zlib.crc32(key.encode("utf-8", "surrogatepass"))
    if isinstance(key, bytes):
        return zlib.crc32(key)
    if isinstance(key, tuple):
        h = 0x345678
        for k in key:
            h = (h * 1_000_003) ^ stable_hash(k)
        return h & 0x7FFFFFFFFFFFFFFF
    return zlib.crc32(pickle.dumps(key, protocol=4))


_P61 = (1 << 61) - 1  # Python's numeric hash is taken modulo this prime


def stable_hash_column(keys: np.ndarray) -> np.ndarray | None:
    """:func:`stable_hash` of every key of an integer, bool or integral float column, as
    uint64, computed without a Python call per key; None for other columns (and integers
    beyond ±2**62), which are hashed key by key.

    >>> keys = np.array([0, 1, -1, -2, 2**61, 7])
    >>> stable_hash_column(keys).tolist() == [stable_hash(k) for k in keys.tolist()]
    True
    """
    kind = keys.dtype.kind
    if kind == "f":
        if not len(keys) or not np.isfinite(keys).all() or (keys != np.floor(keys)).any() \
                or np.abs(keys).max() >= 2**53:
            return None
        keys = keys.astype(np.int64)
    elif kind == "u":
        if len(keys) and int(keys.max()) >= 2**62:
            return None
        keys = keys.astype(np.int64)
    elif kind == "b":
        keys = keys.astype(np.int64)
    elif kind != "i" or (len(keys) and max(-int(keys.min()), int(keys.max())) >= 2**62):
        return None
    keys = keys.astype(np.int64, copy=False)
    h = np.where(keys < 0, -(np.abs(keys) % _P61), keys % _P61)
    h[h == -1] = -2  # (hash(-1) is -2 in Python)
    return h.astype(np.uint64) & np.uint64(0x7FFFFFFFFFFFFFFF)


@dataclass(frozen=True, eq=False)
class Partitioner:
    """Spreads events over ``n`` partitions by ``stable_hash(key(payload)) % n``."""

    key: Callable[[Any], Any]
    n: int
    step: str = "group_apply"

    def index(self, payload: Any) -> int:
        try:
            k = self.key(payload)
        except Exception as exc:
            raise OperatorError(
                f"operator {self.step!r}: the group key function failed on payload "
                f"{payload!r}: {type(exc).__name__}: {exc}"
            ) from exc
        return stable_hash(k) % self.n

    def indexes(self, cols: Columns) -> np.ndarray | None:
        """The partition of every event of a column batch, or None when its keys must be
        found event by event (:func:`operators.expr` cannot evaluate the key function
        exactly on these columns, or its keys are not integers)."""
        keys = apply_columns(self.key, cols)
        if not isinstance(keys, np.ndarray):
            return None
        hashes = stable_hash_column(keys)
        return None if hashes is None else (hashes % np.uint64(self.n)).astype(np.int64)


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
