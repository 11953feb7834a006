"""``group_apply(key, fn)``: run a sub-query once per key value (a partitioned operator).

The input is split by ``key(payload)``; each key value gets its own instance of the sub-query
(a single-input :class:`~operators.base.Processor` from ``factory()``), created when the key is
first seen. Every output payload becomes ``(key, payload)``. The output CHT is the union over
keys of the sub-query applied to that key's part of the input CHT::

    input     a: [0 ─ 3) 7     b: [1 ─── 5) 4     c: [2 ─ 4) 9        key = p % 2
    sub-query where(p > 5)
    output    (1, 7): [0 ─ 3)     (1, 9): [2 ─ 4)

    >>> from operators.events import Insert, Cti
    >>> from operators.where import Where
    >>> g = GroupApply(lambda p: p % 2, lambda: Where(lambda p: p > 5))
    >>> g.process([Insert("a", 0, 3, 7), Insert("b", 1, 5, 4), Insert("c", 2, 4, 9), Cti(6)])
    [Insert(id=(0, 'a'), start=0, end=3, payload=(1, 7)), \
Insert(id=(0, 'c'), start=2, end=4, payload=(1, 9)), Cti(time=6)]

**Ids.** Each sub-query instance gets a number from a counter; an output id is
``(instance number, the sub-query's output id)``, unique across groups and across the
incarnations of one key (see below), never reused.

**CTIs.** Every live group sees every input CTI. A group created later is first fed the
current input CTI (its sub-query would otherwise start at MIN_TIME). The output CTI is the
minimum of the groups' output CTIs and of what a fresh sub-query emits for the input CTI (a
*template* instance that only ever sees CTIs stands for the groups not created yet: a sub-query
like ``shift(-5)`` puts a new key's events 5 ticks before the input CTI).

**Idle groups are dropped.** Broadcasting CTIs to every key ever seen would cost O(keys) per
CTI and keep one sub-query per key forever. After each CTI, a group is dropped when no input
event routed to it can still be retracted (each has ``end < CTI``) and its sub-query holds no
state (``state_size() == 0``); the key's next event creates a fresh instance with a new
number. This assumes what every cedar operator promises: a sub-query whose ``state_size()`` is
0 behaves like a fresh one that has seen the current CTI.

Because keys are independent, a ``GroupApply`` is correct on any subset of the keys: the Ray
runtime spreads keys over ``partitions=N`` actors, each running one, and merges them with a
:class:`~operators.union.Union`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from .base import Processor
from .cht import InvalidStream
from .errors import OperatorError
from .events import MIN_TIME, Cti, Insert, Message, Retract, fmt_time
from .join import END, ID, KEY, START, ExpiryHeap
from .udm import field_getter

# a group: [sub-query, instance number, input events that can still be retracted, output CTI]
G_SUB, G_INST, G_OPEN, G_CTI = range(4)


class GroupApply(Processor):
    """One ``factory()`` sub-query per value of ``key(payload)``; payloads become
    ``(key, payload)``. ``key`` is a function of the payload or a field name."""

    def __init__(self, key: Callable[[Any], Hashable] | str, factory: Callable[[], Processor],
                 name: str | None = None) -> None:
        super().__init__(name)
        if not callable(factory):
            raise TypeError(f"group_apply: factory must be a function () -> Processor building "
                            f"the sub-query, got {factory!r}")
        self.key = field_getter(key)
        self.factory = factory
        self.template = self._build()
        self.template_cti = MIN_TIME
        #: key -> group (see G_*)
        self.groups: dict[Hashable, list[Any]] = {}
        #: input events that can still be retracted: seq -> [id, key, start, end]
        self.recs: dict[int, list[Any]] = {}
        self.ids: dict[Hashable, int] = {}
        self.expiry = ExpiryHeap()
        self.next_seq = 0
        self.next_inst = 0
        self.in_cti = MIN_TIME

    def _build(self) -> Processor:
        sub = self.factory()
        if not isinstance(sub, Processor) or sub.n_inputs != 1:
            raise TypeError(f"group_apply: factory() must return a single-input Processor (the "
                            f"sub-query for one key), got {sub!r}")
        return sub

    # -- groups ---------------------------------------------------------------------------
    def _group(self, key: Hashable, out: list[Message]) -> list[Any]:
        try:
            group = self.groups.get(key)
        except TypeError:
            raise TypeError(f"the key function returned the unhashable {key!r}; return a "
                            f"hashable value (a tuple rather than a list, ...)") from None
        if group is None:
            group = [self._build(), self.next_inst, 0, MIN_TIME]
            self.next_inst += 1
            self.groups[key] = group
            if self.in_cti > MIN_TIME:
                self._feed(key, group, [Cti(self.in_cti)], out)
        return group

    def _feed(self, key: Hashable, group: list[Any], batch: list[Message],
              out: list[Message]) -> None:
        """Run a batch through the group's sub-query; tag its output."""
        try:
            result = group[G_SUB].process(batch, 0)
        except (OperatorError, InvalidStream) as exc:
            raise OperatorError(f"group_apply {self.name!r}, group {key!r}: {exc}") from exc
        inst = group[G_INST]
        for m in result:
            kind = type(m)
            if kind is Insert:
                out.append(Insert((inst, m.id), m.start, m.end, (key, m.payload)))
            elif kind is Retract:
                out.append(Retract((inst, m.id), m.start, m.end, m.new_end, (key, m.payload)))
            else:
                group[G_CTI] = m.time

    # -- the runtime's entry point --------------------------------------------------------
    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        """Route a batch: consecutive data messages are collected per group (keeping their
        order within the group) and each group's sub-query gets one batch; a CTI first
        flushes them, then reaches every group."""
        out: list[Message] = []
        pending: dict[Hashable, list[Message]] = {}
        msg: Any = None
        try:
            for msg in batch:
                kind = type(msg)
                if kind is Insert:
                    key = self._on_insert(msg, out)
                elif kind is Retract:
                    key = self._on_retract(msg)
                elif kind is Cti:
                    self._flush(pending, out)
                    self._on_cti(msg.time, out)
                    continue
                else:
                    raise TypeError(f"expected Insert, Retract or Cti, got {type(msg).__name__}")
                if key in pending:
                    pending[key].append(msg)
                else:
                    pending[key] = [msg]
            self._flush(pending, out)
        except (OperatorError, InvalidStream):
            raise
        except Exception as exc:
            raise OperatorError(f"operator {self.name!r} failed on {msg!r} (input {port}): "
                                f"{type(exc).__name__}: {exc}") from exc
        return out

    def _flush(self, pending: dict[Hashable, list[Message]], out: list[Message]) -> None:
        groups = self.groups
        for key, msgs in pending.items():
            self._feed(key, groups[key], msgs, out)
        pending.clear()

    def _on_insert(self, msg: Insert, out: list[Message]) -> Hashable:
        if msg.id in self.ids:
            raise ValueError(f"duplicate id {msg.id!r}: it is still live; ids must be unique "
                             f"within a stream")
        key = self.key(msg.payload)
        group = self._group(key, out)
        seq = self.next_seq
        self.next_seq = seq + 1
        self.recs[seq] = [msg.id, key, msg.start, msg.end]
        self.ids[msg.id] = seq
        self.expiry.push(msg.end, seq)
        group[G_OPEN] += 1
        return key

    def _on_retract(self, msg: Retract) -> Hashable:
        seq = self.ids.get(msg.id)
        rec = None if seq is None else self.recs[seq]
        if rec is None or rec[START] != msg.start or rec[END] != msg.end:
            live = "" if rec is None else f" (it lives [{rec[START]}, {fmt_time(rec[END])}))"
            raise ValueError(f"retraction {msg!r} does not match a live event{live}; retract "
                             f"an event with its current lifetime, at or after the CTI")
        assert seq is not None
        key = rec[KEY]
        if msg.new_end == msg.start:
            del self.recs[seq]
            del self.ids[msg.id]
            self.groups[key][G_OPEN] -= 1
        else:
            rec[END] = msg.new_end
            self.expiry.push(msg.new_end, seq)
            self.expiry.compact(self.ids, self.recs)
        return key

    def _on_cti(self, time: int, out: list[Message]) -> None:
        if time <= self.in_cti:
            return
        self.in_cti = time
        recs, groups = self.recs, self.groups
        # an input event ending before the CTI can never be retracted again
        for seq in self.expiry.pop_before(time, recs):
            rec = recs.pop(seq)
            del self.ids[rec[ID]]
            groups[rec[KEY]][G_OPEN] -= 1
        for m in self.template.process([Cti(time)], 0):
            if type(m) is Cti:
                self.template_cti = m.time
        batch = [Cti(time)]
        low = self.template_cti
        idle = []
        for key, group in groups.items():
            self._feed(key, group, batch, out)
            low = min(low, group[G_CTI])
            if group[G_OPEN] == 0 and group[G_SUB].state_size() == 0:
                idle.append(key)
        for key in idle:
            del groups[key]
        out.extend(self.emit_cti(low))

    # -- state ----------------------------------------------------------------------------
    def state_size(self) -> int:
        """Input events that can still be retracted plus the state of every live group."""
        return len(self.recs) + sum(g[G_SUB].state_size() for g in self.groups.values())

    def snapshot(self) -> dict[str, Any]:
        own = {f: copy.deepcopy(getattr(self, f)) for f in (
            "recs", "ids", "expiry", "next_seq", "next_inst", "in_cti", "template_cti",
            "out_cti")}
        own["groups"] = {k: (g[G_INST], g[G_OPEN], g[G_CTI], g[G_SUB].snapshot())
                         for k, g in self.groups.items()}
        own["template"] = self.template.snapshot()
        return own

    def restore(self, state: dict[str, Any]) -> None:
        for f, v in state.items():
            if f not in ("groups", "template"):
                setattr(self, f, copy.deepcopy(v))
        self.template = self._build()
        self.template.restore(state["template"])
        self.groups = {}
        for k, (inst, n_open, cti, sub_state) in state["groups"].items():
            sub = self._build()
            sub.restore(sub_state)
            self.groups[k] = [sub, inst, n_open, cti]

    def _check(self) -> None:
        counts: dict[Hashable, int] = {}
        for seq, rec in self.recs.items():
            assert self.ids[rec[ID]] == seq and rec[END] >= self.in_cti
            counts[rec[KEY]] = counts.get(rec[KEY], 0) + 1
        assert len(self.ids) == len(self.recs)
        insts = set()
        for key, group in self.groups.items():
            assert group[G_OPEN] == counts.get(key, 0), (key, group[G_OPEN], counts.get(key))
            assert group[G_INST] < self.next_inst and group[G_INST] not in insts
            insts.add(group[G_INST])
            group[G_SUB]._check()
        assert set(counts) <= set(self.groups)
        assert self.out_cti <= self.template_cti
