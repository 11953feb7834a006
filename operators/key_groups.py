"""Key groups: the unit of a partitioned ``group_apply``'s state, which rescaling moves.

Every key falls in one of ``groups`` *key groups* (:func:`key_group`: its stable hash modulo
``groups``), a number fixed when the query first starts (``group_apply(..., key_groups=G)``,
Flink's *max parallelism*). Partition ``p`` of ``n`` holds the key groups
``kg`` with ``kg * n // groups == p`` (:func:`partition_of`: a contiguous range, as Flink
assigns them), so ``n`` may be anything from 1 to ``groups``.

Each partition runs a :class:`KeyGroups`: one instance of the group_apply's operator (its
general operator or a keyed fast path, whichever the planner chose) per key group it has
seen. A key group's whole state is then one processor's snapshot: restoring a savepoint at
another width (:func:`regroup`) hands each key group's snapshot to the partition that holds
it now, whatever the operator keeps inside. Keys are independent, so the operator is correct
on any subset of them, and each instance is the operator over its key group's part of the
input.

**Ids.** An output id is the instance's id tagged with its key group
(:func:`operators.union.tag_id`: ``id * groups + kg`` for an integer, ``(kg, id)`` for any
other), the same whichever partition holds the key group: the partitions' merge passes ids
through untagged (``Union(tag=False)``), so a retraction made after a rescale finds the
event it corrects downstream.

**Cost.** Each instance gets its key group's part of every batch, so an operator that works
on a whole batch at once (a keyed window's fast path) does its work in smaller pieces: a
rescalable group_apply is slower than one operator per partition, the more so the more key
groups each partition holds (``benchmarks/rescale.py``). Hence opt-in: ``key_groups=`` is
asked for, not the default.

**CTIs.** Every instance gets every CTI (at most ``groups / n`` of them per partition); a key
group first seen later starts at the current input CTI. The output CTI is the lowest of the
instances' and a *template*'s (an instance fed only CTIs: what a key group not seen yet
would say, as :class:`~operators.group_apply.GroupApply` keeps one for its groups).
"""

from __future__ import annotations

import numbers
import pickle
import zlib
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import numpy as np

from .columns import Columns, apply_columns
from .errors import DeadLetter, OperatorError
from .events import MIN_TIME, Cti, Insert, KeyCtis, Message, Retract
from .processor import Processor, ended_error
from .udm import field_getter
from .union import tag_id, tag_ids


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


class KeyGroups(Processor):
    """A partition of ``group_apply(..., partitions=N)``: one ``factory()`` operator per key
    group of ``key(payload)`` (of ``groups``) it has seen; output ids tagged by key group
    (see the module docstring).

    >>> from operators.group_apply import GroupApply
    >>> from operators.where import Where
    >>> k = KeyGroups("k", lambda: GroupApply("k", lambda: Where(bool)), 4)
    >>> out = k.process([Insert(1, 0, 5, {"k": "a"}), Insert(2, 1, 5, {"k": "b"}), Cti(3)])
    >>> sorted(m.payload[0] for m in out if type(m) is Insert), out[-1]
    (['a', 'b'], Cti(time=3))
    """

    _state_fields = ("ctis", "dead_letters")

    def __init__(self, key: Callable[[Any], Hashable] | str, factory: Callable[[], Processor],
                 groups: int, name: str | None = None) -> None:
        super().__init__(name)
        self.key = field_getter(key)
        self.factory = factory
        self.groups = groups
        #: key group -> its operator
        self.parts: dict[int, Processor] = {}
        #: key group -> the output CTI of its operator (the template's under -1)
        self.ctis: dict[int, int] = {-1: MIN_TIME}
        self.template = factory()
        #: the dead letters of every key group's operator, collected as they happen
        self.dead_letters: list[DeadLetter] = []

    # -- the runtime's entry point --------------------------------------------------------
    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        """Route a batch: consecutive data messages go to their key group's operator as one
        batch each (in order within the group); a CTI or per-key CTIs first flush them."""
        if port != 0:
            raise ValueError(f"group_apply {self.name!r} has one input, got a batch for "
                             f"input {port}")
        if self.in_ended:
            raise ended_error(self.name, port)
        out: list[Message] = []
        pending: dict[int, list[Message]] = {}
        msg: Any  # told apart by type() on this hot path
        for msg in batch:
            kind = type(msg)
            if kind is Insert or kind is Retract:
                pending.setdefault(self._group_of(msg.payload), []).append(msg)
            elif kind is Columns:
                self._split(msg, pending)
            elif kind is Cti:
                self._flush(pending, out)
                self._on_cti(msg.time, out)
            elif kind is KeyCtis:
                self._flush(pending, out)
                self._on_key_ctis(msg, out)
            else:
                raise TypeError(f"expected Insert, Retract or Cti, got {type(msg).__name__}")
        self._flush(pending, out)
        out.extend(self.emit_cti(min(self.ctis.values())))
        return out

    def _group_of(self, payload: Any) -> int:
        try:
            return stable_hash(self.key(payload)) % self.groups
        except Exception as exc:
            raise OperatorError(
                f"operator {self.name!r}: the group key function failed on payload "
                f"{payload!r}: {type(exc).__name__}: {exc}") from exc

    def _split(self, cols: Columns, pending: dict[int, list[Message]]) -> None:
        """A column batch split by key group column-wise (event by event when its keys
        cannot be hashed so)."""
        keys = apply_columns(self.key, cols)
        kgs = key_group_column(keys, self.groups) if isinstance(keys, np.ndarray) else None
        if kgs is None:
            for m in cols.inserts():
                pending.setdefault(self._group_of(m.payload), []).append(m)
            return
        if len(kgs) and (kgs == kgs[0]).all():
            pending.setdefault(int(kgs[0]), []).append(cols)  # type: ignore[arg-type]
            return
        order = np.argsort(kgs, kind="stable")
        bounds = np.flatnonzero(np.diff(kgs[order])) + 1
        for run in np.split(order, bounds):
            pending.setdefault(int(kgs[run[0]]), []).append(cols.take(run))  # type: ignore[arg-type]

    def _part(self, kg: int, out: list[Message]) -> Processor:
        part = self.parts.get(kg)
        if part is None:  # a key group first seen: it starts at the current input CTI
            part = self.parts[kg] = self.factory()
            self.ctis[kg] = MIN_TIME
            if self.in_cti > MIN_TIME:
                self._tag(kg, part.process([Cti(self.in_cti)], 0), out)
        return part

    def _flush(self, pending: dict[int, list[Message]], out: list[Message]) -> None:
        for kg, msgs in pending.items():
            self._tag(kg, self._part(kg, out).process(msgs, 0), out)
        pending.clear()

    def _on_cti(self, time: int, out: list[Message]) -> None:
        if time <= self.in_cti:
            return
        self.in_ctis = [time]
        batch = [Cti(time)]
        self._tag(-1, self.template.process(batch, 0), [])
        for kg, part in self.parts.items():
            self._tag(kg, part.process(batch, 0), out)

    def _on_key_ctis(self, msg: KeyCtis, out: list[Message]) -> None:
        """Each key group's operator gets its keys' CTIs (one not seen yet starts at the
        stream's CTI later, a valid, weaker promise)."""
        by_group: dict[int, list[tuple[Hashable, int]]] = {}
        for key, time in msg.times:
            by_group.setdefault(stable_hash(key) % self.groups, []).append((key, time))
        for kg, times in by_group.items():
            part = self.parts.get(kg)
            if part is not None:
                key_ctis: list[Any] = [KeyCtis(times)]
                self._tag(kg, part.process(key_ctis, 0), out)

    def _tag(self, kg: int, result: list[Message], out: list[Message]) -> None:
        """A key group's output, its ids tagged by key group; its CTI recorded."""
        g = self.groups
        new = tuple.__new__  # (the fields are an operator's output: valid already)
        m: Any
        for m in result:
            kind = type(m)
            if kind is Insert or kind is Retract:
                i = m[0]
                out.append(new(kind, (i * g + kg if type(i) is int else tag_id(i, kg, g),
                                      *m[1:])))
            elif kind is Columns:
                out.append(Columns(tag_ids(m.ids, kg, g), m.starts,  # type: ignore[arg-type]
                                   None if m.points else m.ends, m.payload))
            elif kind is Cti:
                self.ctis[kg] = m.time
        part = self.parts.get(kg)
        if part is not None and part.dead_letters:
            _take_dead_letters(part, self.dead_letters)

    def finish(self) -> list[Message]:
        """End of input: every key group's operator flushes."""
        out: list[Message] = []
        for kg, part in self.parts.items():
            self._tag(kg, part.finish(), out)
        return out

    # -- what the runtime and the debugger read ---------------------------------------------
    def state_size(self) -> int:
        return sum(p.state_size() for p in self.parts.values())

    def children(self) -> Iterable[Processor]:
        return self.parts.values()

    def key_functions(self) -> tuple[Callable[[Any], Any], ...]:
        return (self.key,)

    def keyed_output(self) -> bool:
        return self.template.keyed_output()

    def busy_groups(self) -> list[tuple[Hashable, Processor]]:
        """``(key, sub-query)`` of every group holding state, over the key groups."""
        return [g for p in self.parts.values() for g in getattr(p, "busy_groups", list)()]

    # -- state ----------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Its fields, the template's state and each key group's operator's state (under
        ``"parts"``: what :func:`regroup` hands from partition to partition)."""
        state = super().snapshot()
        state["template"] = self.template.snapshot()
        state["parts"] = {kg: p.snapshot() for kg, p in self.parts.items()}
        state["groups"] = self.groups
        return state

    def restore(self, state: dict[str, Any]) -> None:
        if state.get("groups") != self.groups:
            raise ValueError(f"group_apply {self.name!r} keeps its state in {self.groups} key "
                             f"groups, the snapshot in {state.get('groups')}: a query keeps "
                             f"its key_groups= from its first start")
        super().restore(state)
        self.template.restore(state["template"])
        self.parts = {}
        for kg, saved in state["parts"].items():
            self.parts[kg] = part = self.factory()
            part.restore(saved)

    def _check(self) -> None:
        for kg, part in self.parts.items():
            assert 0 <= kg < self.groups and kg in self.ctis
            part._check()


def _take_dead_letters(proc: Processor, into: list[DeadLetter]) -> None:
    records = proc.dead_letters
    into.extend(records)
    records.clear()  # type: ignore[attr-defined]  # a non-empty one is the proc's list


def regroup(states: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The :class:`KeyGroups` snapshots of ``n`` partitions holding what the partitions of
    ``states`` (snapshots taken at one consistent cut) held: each key group's operator state
    goes to the partition that holds it at width ``n`` (:func:`partition_of`). Every
    partition had the same input CTIs; the new ones take the lowest of the old output CTIs
    (the merge downstream has seen no CTI above it), and the dead letters go to partition 0
    (counted once)."""
    groups = states[0]["groups"]
    if not 1 <= n <= groups:
        raise ValueError(f"a group_apply of {groups} key groups runs on 1 to {groups} "
                         f"partitions, not {n}")
    base = states[0]
    out_cti = min(s["out_cti"] for s in states)
    news = []
    for p in range(n):
        parts = {kg: saved for s in states for kg, saved in s["parts"].items()
                 if partition_of(kg, n, groups) == p}
        ctis = {kg: c for s in states for kg, c in s["ctis"].items()
                if kg in parts}
        ctis[-1] = base["ctis"][-1]
        news.append({**base, "parts": parts, "ctis": ctis, "out_cti": out_cti,
                     "dead_letters": [d for s in states for d in s["dead_letters"]]
                     if p == 0 else []})
    return news
