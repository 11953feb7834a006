"""Key groups: what a rescalable ``group_apply``'s state is dealt by when it is rescaled.

Every key falls in one of ``groups`` *key groups* (:func:`key_group`: its stable hash modulo
``groups``), a number fixed when the query first starts (``group_apply(..., partitions=N,
key_groups=G)``, :data:`KEY_GROUPS` unless said: Flink's *max parallelism*). Partition
``p`` of ``n`` holds the key groups ``kg`` with ``kg * n // groups == p``
(:func:`partition_of`: a contiguous range, as Flink assigns them), so ``n`` may be anything
from 1 to ``groups``, and the router sends each event there.

Each partition runs one operator (the group_apply's general operator or a keyed fast path,
whichever the planner chose), as an unrescalable group_apply does, at no cost per event.
An operator that can be rescaled (:class:`Rescalable`) says how to keep only some of its
keys (:meth:`~Rescalable.keep_keys`) and how to take in the keys of another instance of
itself (:meth:`~Rescalable.add_keys`); a savepoint restored at another width
(:func:`regroup`) gives each new partition the keys it holds, from every old partition.
Keys are independent, so an operator is correct on any set of them.

**Ids.** A partition's operator is named after its partition (``group_apply#2[1]``), and
mints its fresh output ids under that name (a window's ``FreshId(name, n)``, a general
group_apply's instance numbers ``(name, n)``), so ids are distinct across partitions and
the merge passes them through untagged (``Union(tag=False)``): an event keeps its id
whichever partition holds its key now, and a retraction after a rescale finds it downstream.
After a rescale each operator mints on under its own new name from the highest counter of
all the old partitions, so no new id is an old one. An operator that keeps the rows it sent
as their ids whole passes them on as they are (the by-end count window); one that keeps only
their numbers (the count window extreme) makes the numbers of a state minted under another
name whole ids of that name when it restores it, and retracts those rows under them.
"""

from __future__ import annotations

import numbers
import pickle
import zlib
from collections.abc import Callable, Hashable
from typing import Any, ClassVar, Protocol

import numpy as np

from .errors import DeadLetter
from .processor import Processor

#: The key groups of a group_apply with ``partitions > 1`` unless it says otherwise (Flink's
#: default max parallelism for small jobs): the most partitions it can be rescaled to.
KEY_GROUPS = 128


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


def key_group(key: Any, groups: int) -> int:
    """The key group of ``key`` among ``groups``: equal keys (``1``, ``1.0``, ``True``) in
    one, in every process.

    >>> key_group("m007", 128) == key_group("m007", 128) and key_group(1, 8) == key_group(1.0, 8)
    True
    """
    return stable_hash(key) % groups


def key_group_column(keys: np.ndarray, groups: int) -> np.ndarray | None:
    """:func:`key_group` of every key of a column, or None when the column's keys must be
    hashed one by one (:func:`stable_hash_column`)."""
    hashes = stable_hash_column(keys)
    return None if hashes is None else (hashes % np.uint64(groups)).astype(np.int64)


def partition_of(kg: int | np.ndarray, n: int, groups: int) -> Any:
    """The partition of ``n`` that holds key group ``kg`` (of ``groups``): contiguous ranges,
    so that a key group's partition at ``2n`` is one of the two its partition splits into."""
    return kg * n // groups


class Rescalable(Protocol):
    """An operator keyed by the group_apply's key whose state can be dealt by key."""

    def keep_keys(self, keep: Callable[[Hashable], bool]) -> None:
        """Drop the state of every key ``keep`` says no to (and the dead letters: they are
        the regrouped partition 0's, :func:`regroup`)."""

    def add_keys(self, other: Any) -> None:
        """Take in the keys of ``other``, another instance of this operator at the same cut
        holding none of this one's keys; fresh-id counters take the higher."""


class ByKey:
    """:class:`Rescalable` for an operator whose state is one dict by key (the attribute
    :attr:`by_key` names) and fresh ids minted by ``ids`` (an ``Ids``) under its own name.
    An operator whose state by key is held otherwise overrides :meth:`keep_state` and
    :meth:`add_state` (the ids, the output CTI and the dead letters are dealt here)."""

    #: the attribute holding the operator's state by key
    by_key: ClassVar[str]
    ids: Any
    out_cti: int
    dead_letters: Any

    def keep_keys(self, keep: Callable[[Hashable], bool]) -> None:
        self.keep_state(keep)
        if isinstance(self.dead_letters, list):
            self.dead_letters = []

    def add_keys(self, other: Any) -> None:
        self.add_state(other)
        self.ids.next_id = max(self.ids.next_id, other.ids.next_id)
        self.out_cti = min(self.out_cti, other.out_cti)

    def keep_state(self, keep: Callable[[Hashable], bool]) -> None:
        """Drop the state of every key ``keep`` says no to."""
        setattr(self, self.by_key, {k: v for k, v in getattr(self, self.by_key).items()
                                    if keep(k)})

    def add_state(self, other: Any) -> None:
        """Take in the state of ``other``'s keys (none of them this one's)."""
        getattr(self, self.by_key).update(getattr(other, self.by_key))

    def restore(self, state: dict[str, Any]) -> None:
        name = self.ids.name  # (fresh ids are minted under this operator's own name)
        super().restore(state)  # type: ignore[misc]  # (a Processor's, after this in the MRO)
        self.ids.name = name


def rescalable(proc: Processor) -> bool:
    """Whether ``proc`` can be dealt by key (:class:`Rescalable`)."""
    return callable(getattr(proc, "keep_keys", None)) and callable(getattr(proc, "add_keys",
                                                                          None))


def regroup(states: list[dict[str, Any]], factories: list[Callable[[], Processor]],
            groups: int) -> list[dict[str, Any]]:
    """The snapshots of ``len(factories)`` partitions (partition ``p`` built by
    ``factories[p]``) holding what the partitions of ``states`` (the snapshots of a
    consistent cut) held: each key's state goes to the partition that holds its key group
    now (:func:`partition_of`); every new partition takes in every old one, so its fresh-id
    counters start above every id minted; the dead letters go to partition 0 (counted
    once)."""
    n = len(factories)
    if not 1 <= n <= groups:
        raise ValueError(f"a group_apply of {groups} key groups runs on 1 to {groups} "
                         f"partitions, not {n}")
    out = []
    for p, make in enumerate(factories):
        merged: Any = None
        dead: list[DeadLetter] = []
        for state in states:
            proc: Any = make()
            if not rescalable(proc):
                raise ValueError(f"operator {proc.name!r} ({type(proc).__name__}) cannot be "
                                 f"dealt by key: a savepoint of it restores at the same "
                                 f"partitions only")
            proc.restore(state)
            dead.extend(proc.dead_letters)
            proc.keep_keys(lambda k, p=p: partition_of(key_group(k, groups), n, groups) == p)
            if merged is None:
                merged = proc
            else:
                merged.add_keys(proc)
        if p == 0 and dead and isinstance(merged.dead_letters, list):
            merged.dead_letters.extend(dead)
        out.append(merged.snapshot())
    return out
