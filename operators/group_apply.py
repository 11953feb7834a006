"""``group_apply(key, fn)``: run a sub-query once per key value (a partitioned operator).

The input is split by ``key(payload)``; each key value gets its own instance of the sub-query
(a single-input :class:`~operators.processor.Processor` from ``factory()``), created when the key is
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

**CTIs.** Broadcasting every CTI to every key ever seen would cost O(keys) per CTI and keep
one sub-query per key forever. cedar relies on what every cedar operator promises: *a sub-query
whose* ``state_size()`` *is 0 behaves like a fresh one that has seen the current CTI*. So:

* a *busy* group (its sub-query holds state) receives every input CTI at once, and its output
  CTI counts towards the minimum;
* a group without state receives the latest input CTI just before its next data (a valid,
  equivalent input: CTIs only ever grow); a new group likewise starts with the current input
  CTI (its sub-query would otherwise start at MIN_TIME);
* groups without state, and the groups not created yet, are represented by a *template*: an
  instance that only ever sees CTIs. The output CTI is the minimum of the template's output
  CTI and the busy groups' (a sub-query like ``shift(-5)`` puts a new key's events 5 ticks
  before the input CTI, and the template says so);
* a group is dropped as soon as its sub-query holds no state and no input event routed to it
  can still be retracted (each has ``end < CTI``, or was deleted); the key's next event creates
  a fresh instance with a new number.

A CTI therefore costs O(busy groups), and idle keys cost nothing.

**NaN keys.** Keys that compare equal are one group; NaN equals nothing, not even itself, yet
all NaN keys are one group, as in SQL's ``GROUP BY`` (and Spark's): :func:`group_key` turns
every NaN key, and every NaN item of a tuple key, into the one object :data:`NAN_KEY`. Its
output payloads are ``(nan, payload)``.

Because keys are independent, a ``GroupApply`` is correct on any subset of the keys: the Ray
runtime spreads keys over ``partitions=N`` actors, each running one, and merges them with a
:class:`~operators.union.Union`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import numpy as np

from .cht import InvalidStream
from .columns import Columns, expand
from .errors import DeadLetter, OperatorError
from .events import MIN_TIME, Cti, Insert, KeyCtis, Message, Retract
from .live import ExpiryHeap
from .processor import Processor, behind_error
from .two_input import END, ID, KEY, find_live
from .udm import field_getter

#: The one NaN every NaN group key becomes (:func:`group_key`): a dict finds it by identity.
NAN_KEY = float("nan")


def group_key(key: Any) -> Any:
    """``key`` as a group's key: a float NaN, or a tuple holding one, with each NaN replaced
    by :data:`NAN_KEY`, so that NaN keys are one group (as SQL's ``GROUP BY`` has them);
    any other key as it is.

    >>> group_key(float("nan")) is group_key(float("nan")) is NAN_KEY
    True
    >>> group_key(("a", float("nan"))) == group_key(("a", float("nan")))
    True
    """
    kind = type(key)
    if kind is float:
        return NAN_KEY if key != key else key
    if kind is int or kind is str:
        return key
    if kind is tuple:
        for k in key:
            t = type(k)
            if t is not int and t is not str and group_key(k) is not k:
                return tuple(group_key(k) for k in key)
        return key
    if isinstance(key, np.floating) and key != key:
        return NAN_KEY
    return key


# a group: [sub-query, instance number, input events that can still be retracted, output CTI,
# the last input CTI it was fed]
G_SUB, G_INST, G_OPEN, G_CTI, G_FED = range(5)


class GroupApply(Processor):
    """One ``factory()`` sub-query per value of ``key(payload)``; payloads become
    ``(key, payload)``. ``key`` is a function of the payload or a field name; NaN keys are
    one group (:func:`group_key`)."""

    _state_fields = ("recs", "ids", "expiry", "busy", "next_seq", "next_inst", "template_cti",
                     "dead_letters")
    _parts = ("template",)

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
        #: keys of the groups whose sub-query holds state
        self.busy: set[Hashable] = set()
        #: input events that can still be retracted: seq -> [id, key, start, end]
        self.recs: dict[int, list[Any]] = {}
        self.ids: dict[Hashable, int] = {}
        self.expiry = ExpiryHeap(END)
        self.next_seq = 0
        self.next_inst = 0
        #: the dead letters of every group's sub-query (a window's failing UDM calls with
        #: ``on_error="dead_letter"``), collected as they happen: groups come and go
        self.dead_letters: list[DeadLetter] = []

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
        if group is None:  # fed the current CTI with its first data (see _flush)
            inst = self.next_inst if not self.named_instances else (self.name, self.next_inst)
            group = [self._build(), inst, 0, MIN_TIME, MIN_TIME]
            self.next_inst += 1
            self.groups[key] = group
        return group

    def _feed(self, key: Hashable, group: list[Any], batch: Sequence[Message],
              out: list[Message]) -> None:
        """Run a batch through the group's sub-query; tag its output; keep ``busy`` up to
        date and drop the group once it is idle."""
        sub = group[G_SUB]
        try:
            result = sub.process(batch, 0)
        except (OperatorError, InvalidStream) as exc:
            raise OperatorError(f"group_apply {self.name!r}, group {key!r}: {exc}") from exc
        _take_dead_letters(sub, self.dead_letters)
        self._tag(key, group, result, out)
        if sub.state_size():
            self.busy.add(key)
        else:
            self.busy.discard(key)
            if not group[G_OPEN]:
                del self.groups[key]

    def _tag(self, key: Hashable, group: list[Any], result: list[Message],
             out: list[Message]) -> None:
        """The group's output with ids ``(instance, id)`` and payloads ``(key, payload)``."""
        inst = group[G_INST]
        for m in result:
            if type(m) is Columns:  # (a ColumnScan's output) its inserts, tagged
                out.extend(Insert((inst, i), s, e, (key, p)) for i, s, e, p in m.inserts())
            elif type(m) is Insert:
                out.append(Insert((inst, m.id), m.start, m.end, (key, m.payload)))
            elif type(m) is Retract:
                out.append(Retract((inst, m.id), m.start, m.end, m.new_end, (key, m.payload)))
            else:
                group[G_CTI] = m.time

    def busy_groups(self) -> list[tuple[Hashable, Processor]]:
        """``(key, sub-query)`` of every group whose sub-query holds state (what ``why``
        reads of a ``detect`` under ``group_apply``: its open runs are there)."""
        return [(k, self.groups[k][G_SUB]) for k in self.busy]

    def key_functions(self) -> tuple[Callable[[Any], Any], ...]:
        return (self.key,)

    def keyed_output(self) -> bool:
        return True

    def finish(self) -> list[Message]:
        """End of input: every group's sub-query flushes (a window records the failures of the
        windows it still holds in the dead letters)."""
        out: list[Message] = []
        for key, group in list(self.groups.items()):
            try:
                result = group[G_SUB].finish()
            except (OperatorError, InvalidStream) as exc:
                raise OperatorError(f"group_apply {self.name!r}, group {key!r}: {exc}") from exc
            _take_dead_letters(group[G_SUB], self.dead_letters)
            self._tag(key, group, result, out)
        return out

    # -- the runtime's entry point --------------------------------------------------------
    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        """Route a batch: consecutive data messages are collected per group (keeping their
        order within the group) and each group's sub-query gets one batch; a CTI first
        flushes them, then reaches every group."""
        out: list[Message] = []
        pending: dict[Hashable, list[Message]] = {}
        msg: Any = None
        try:
            for msg in expand(batch):
                kind = type(msg)
                if kind is Insert:
                    if msg[1] < self.in_cti:
                        raise behind_error(msg, msg[1], self.in_cti)
                    key = self._on_insert(msg, out)
                elif kind is Retract:
                    if msg[2] < self.in_cti or msg[3] < self.in_cti:
                        raise behind_error(msg, min(msg[2], msg[3]), self.in_cti)
                    key = self._on_retract(msg)
                elif kind is Cti:
                    self._flush(pending, out)
                    self._on_cti(msg.time, out)
                    continue
                elif kind is KeyCtis:
                    if self.per_key:
                        self._flush(pending, out)
                        self._on_key_ctis(msg, out)
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
        groups, in_cti = self.groups, self.in_cti
        for key, msgs in pending.items():
            group = groups[key]
            if group[G_FED] < in_cti:  # the CTIs it missed while it held no state
                group[G_FED] = in_cti
                msgs.insert(0, Cti(in_cti))
            self._feed(key, group, msgs, out)
        pending.clear()

    def _on_insert(self, msg: Insert, out: list[Message]) -> Hashable:
        if msg.id in self.ids:
            raise ValueError(f"duplicate id {msg.id!r}: it is still live; ids must be unique "
                             f"within a stream")
        key = group_key(self.key(msg.payload))
        group = self._group(key, out)
        seq = self.next_seq
        self.next_seq = seq + 1
        self.recs[seq] = [msg.id, key, msg.start, msg.end]
        self.ids[msg.id] = seq
        self.expiry.push(msg.end, seq)
        group[G_OPEN] += 1
        return key

    def _on_retract(self, msg: Retract) -> Hashable:
        seq, rec = find_live(msg, self.ids, self.recs)
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
        self.in_ctis = [time]  # (this process() is its own: Processor.process keeps it else)
        recs, groups, busy = self.recs, self.groups, self.busy
        # an input event ending before the CTI can never be retracted again
        for seq in self.expiry.pop_before(time, recs):
            rec = recs.pop(seq)
            del self.ids[rec[ID]]
            key = rec[KEY]
            group = groups[key]
            group[G_OPEN] -= 1
            if not group[G_OPEN] and key not in busy:
                del groups[key]
        for m in self.template.process([Cti(time)], 0):
            if type(m) is Cti:
                self.template_cti = m.time
        batch = [Cti(time)]
        for key in list(busy):
            group = groups[key]
            if group[G_FED] < time:  # (a key's own CTI may be ahead: KeyCtis)
                group[G_FED] = time
                self._feed(key, group, batch, out)
        self._out_cti(out)

    #: Set by the planner when the input's :class:`~operators.events.KeyCtis` are by this
    #: step's key (the source's ``AdvanceTime(per_key=...)`` is the same key): each group
    #: then gets its key's CTI as it moves, and finalizes its output then, not at the
    #: stream's CTI. Otherwise they are ignored.
    per_key = False

    def _on_key_ctis(self, msg: KeyCtis, out: list[Message]) -> None:
        """Each listed key's group that exists gets its key's CTI (a group created later
        starts at the stream's CTI, a valid, weaker promise)."""
        in_cti, groups = self.in_cti, self.groups
        for key, time in msg.times:
            if time <= in_cti:
                continue
            key = group_key(key)
            group = groups.get(key)
            if group is None or group[G_FED] >= time:
                continue
            group[G_FED] = time
            self._feed(key, group, [Cti(time)], out)
        self._out_cti(out)

    def _out_cti(self, out: list[Message]) -> None:
        """The output CTI: the lowest of the template's and the busy groups'."""
        low, groups = self.template_cti, self.groups
        for key in self.busy:
            low = min(low, groups[key][G_CTI])
        out.extend(self.emit_cti(low))

    # -- rescaling (operators/key_groups.py) ---------------------------------------------
    #: Set by the planner on a partition of a rescalable group_apply: instance numbers are
    #: ``(name, n)``, distinct across partitions (the merge does not tag ids then)
    named_instances = False

    def keep_keys(self, keep: Callable[[Hashable], bool]) -> None:
        """Keep only the groups (and their input events) of the keys ``keep`` keeps."""
        self.groups = {k: g for k, g in self.groups.items() if keep(k)}
        self.busy = {k for k in self.busy if k in self.groups}
        self.recs = {seq: rec for seq, rec in self.recs.items() if rec[KEY] in self.groups}
        self.ids = {i: seq for i, seq in self.ids.items() if seq in self.recs}
        self.expiry = ExpiryHeap(END)
        for seq, rec in self.recs.items():
            self.expiry.push(rec[END], seq)
        self.dead_letters = []

    def add_keys(self, other: GroupApply) -> None:
        """Take in ``other``'s groups (none of them this one's) and their input events,
        renumbered; instance numbers go on from the higher counter."""
        self.groups.update(other.groups)
        self.busy |= other.busy
        for rec in other.recs.values():
            seq = self.next_seq
            self.next_seq = seq + 1
            self.recs[seq] = rec
            self.ids[rec[ID]] = seq
            self.expiry.push(rec[END], seq)
        self.next_inst = max(self.next_inst, other.next_inst)
        self.out_cti = min(self.out_cti, other.out_cti)

    # -- state ----------------------------------------------------------------------------
    def state_size(self) -> int:
        """Input events that can still be retracted plus the state of the busy groups."""
        groups = self.groups
        return len(self.recs) + sum(groups[k][G_SUB].state_size() for k in self.busy)

    def snapshot(self) -> dict[str, Any]:
        """Its fields, the template's state, and each group's sub-query state beside the
        group's other fields (the groups come and go, so they are rebuilt on restore)."""
        state = super().snapshot()
        state["groups"] = {k: (g[G_SUB].snapshot(), *copy.deepcopy(g[1:]))
                           for k, g in self.groups.items()}
        return state

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.groups = {}
        for k, (sub_state, *rest) in state["groups"].items():
            sub = self._build()
            sub.restore(sub_state)
            self.groups[group_key(k)] = [sub, *rest]
        # a NaN key read back from a checkpoint is another NaN object: make it NAN_KEY again
        for rec in self.recs.values():
            rec[KEY] = group_key(rec[KEY])
        self.busy = {group_key(k) for k in self.busy}

    def _check(self) -> None:
        counts: dict[Hashable, int] = {}
        for seq, rec in self.recs.items():
            assert self.ids[rec[ID]] == seq and rec[END] >= self.in_cti
            counts[rec[KEY]] = counts.get(rec[KEY], 0) + 1
        assert len(self.ids) == len(self.recs)
        insts = set()
        assert self.busy <= set(self.groups)
        for key, group in self.groups.items():
            assert group[G_OPEN] == counts.get(key, 0), (key, group[G_OPEN], counts.get(key))
            assert (key in self.busy) == (group[G_SUB].state_size() > 0)
            assert key in self.busy or group[G_OPEN] > 0, f"idle group {key!r} was not dropped"
            assert key not in self.busy or group[G_FED] >= self.in_cti
            assert group[G_INST] not in insts
            insts.add(group[G_INST])
            group[G_SUB]._check()
        assert set(counts) <= set(self.groups)
        assert self.out_cti <= self.template_cti


def _take_dead_letters(proc: Processor, into: list[DeadLetter]) -> None:
    """Move the dead letters of a sub-query (one operator, a Chain of them or an in-process
    DAG) into ``into``, so they outlive the group."""
    records = proc.dead_letters
    if records:
        into.extend(records)
        records.clear()  # type: ignore[attr-defined]  # a non-empty one is the proc's list
    for inner in proc.children():
        _take_dead_letters(inner, into)
