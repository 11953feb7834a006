"""Steps of many queries in one Ray actor: a worker process's idle cost shared by its steps.

An idle Ray worker process costs ~0.5 % of a core whatever it runs (its core worker wakes the
main thread every 10 ms, its gRPC and io threads wake too: ``benchmarks/idle_cost.py``), so
one actor per step costs every idle step that much. A :class:`StepHost` holds up to
``capacity`` operator shells (:class:`~actors.shell.OperatorShell`), each a *slot* that
another query's step can take: a cluster with a thousand idle steps on 16 hosts burns what
16 processes burn.

A slot behaves as a shell actor does. Each has its own threads: Ray concurrency groups
``data<i>`` (one thread: the calls of one caller run in order, as in a shell actor's default
group), ``control<i>``, ``io<i>`` and ``watch<i>``, so a slot waiting on its downstream never
blocks another slot's data path (two slots of one host may feed each other). Callers reach a
slot through a :class:`HostedStep`, which has the shell actor's methods
(``step.push.remote(port, blob)``) and is passed to other actors like a handle.

The host knows the actor name (``<query>/<step>``) of each slot it holds (:meth:`names`),
which is how :mod:`topology.running.registry` finds hosted steps. A slot freed (:meth:`close`) and
taken again is a new *generation*: a call made for the old one (a batch an upstream step of
the stopped query still had in flight, a publisher that has not heard its subscriber went)
raises :class:`SlotGone`, as a call to a killed actor raises, and reaches nothing. A failure
inside a step is that step's (the shell reports it); a host process that dies takes its
slots' steps with it.

A slot is freed at once, but its data thread may still be inside the stopped step's batch
(a user function that hangs): the slot is then *stuck* (:meth:`StepHost.stuck`) and taken by
no query until that call returns, when it is reset and free again. The host's own methods
(:meth:`~StepHost.open`, :meth:`~StepHost.close`, :meth:`~StepHost.names`,
:meth:`~StepHost.free`) never wait for a slot's threads, so one stuck slot never hides or
blocks the other slots' queries.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .shell import ACTOR_OPTIONS, OperatorShell

#: The concurrency groups of one slot and their threads (as a shell actor's groups).
SLOT_GROUPS = {"data": 1, "control": 1, "io": 2, "watch": 1}
#: The Ray actor names of hosts start with this (namespace ``cedar``).
HOST_PREFIX = "~steps/"


def _group_of(method: Any) -> str:
    return getattr(method, "__ray_concurrency_group__", None) or "data"


#: The shell's methods a slot answers, with the group each runs in.
SHELL_METHODS: dict[str, str] = {
    name: _group_of(getattr(OperatorShell, name)) for name in dir(OperatorShell)
    if not name.startswith("_") and callable(getattr(OperatorShell, name))}


def host_options(capacity: int) -> dict[str, Any]:
    """The ``ray.remote`` options of a host of ``capacity`` slots."""
    groups = {f"{g}{i}": n for i in range(capacity) for g, n in SLOT_GROUPS.items()}
    return {**ACTOR_OPTIONS, "concurrency_groups": groups}


class SlotGone(RuntimeError):
    """A call for a slot that was freed (the step was stopped)."""


class StepHost:
    """Up to ``capacity`` operator shells, slot ``i`` answering in groups ``*<i>``. Its own
    methods (:meth:`open`, :meth:`close`, :meth:`names`, :meth:`free`, :meth:`stuck`) run
    in the default group, one at a time, and take only the host's own lock: none of them
    waits for a slot."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.shells: dict[int, OperatorShell] = {}  # made on first use, kept for the next
        self.held: dict[str, int] = {}  # actor name -> slot
        self.generation: dict[int, int] = {}  # slot -> how many times it was taken
        #: slot -> (actor name of the stopped step, when it was stopped: time.time()) for a
        #: freed slot whose shell is not reset yet (its data thread is still in a batch)
        self._stuck: dict[int, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def open(self, names: list[str]) -> list[tuple[int, int]] | None:
        """``(slot, generation)`` for each of the actor names ``names`` (all of them, or None
        when fewer slots are free); raises ValueError if this host holds one of the names."""
        with self._lock:
            taken = [a for a in names if a in self.held]
            if taken:
                raise ValueError(f"{taken[0]!r} is held already")
            used = set(self.held.values()) | set(self._stuck)
            free = [i for i in range(self.capacity) if i not in used]
            if len(free) < len(names):
                return None
            for a, i in zip(names, free):
                self.held[a] = i
                self.generation[i] = self.generation.get(i, 0) + 1
                if i not in self.shells:
                    self.shells[i] = OperatorShell()
            return [(i, self.generation[i]) for i in free[:len(names)]]

    def close(self, slot: int, generation: int) -> None:
        """Free ``slot`` if it is still in ``generation``: its name is released at once (a
        call made for it raises :class:`SlotGone` from now on), and its processor and edges
        are dropped by a thread of their own once the slot's data thread is out of the
        step's batch. Until then the slot is :meth:`stuck` and no query takes it. Returns at
        once: a step whose function hangs never blocks the host."""
        with self._lock:
            if self.generation.get(slot) != generation:
                return  # freed already (and maybe taken again)
            self.generation[slot] += 1  # what was sent for the step no longer reaches it
            names = [a for a, i in self.held.items() if i == slot]
            for a in names:
                del self.held[a]
            shell = self.shells.get(slot)
            if shell is None:
                return
            self._stuck[slot] = (names[0] if names else f"slot {slot}", time.time())
        threading.Thread(target=self._reset, args=(slot, shell), daemon=True,
                         name=f"cedar-free-slot-{slot}").start()

    def _reset(self, slot: int, shell: OperatorShell) -> None:
        """Drop the stopped step of ``slot`` (waits for its data thread) and free the slot."""
        try:
            shell.reset()
        finally:
            with self._lock:
                self._stuck.pop(slot, None)

    def names(self) -> dict[str, tuple[int, int]]:
        """Actor name -> ``(slot, generation)``, for every slot held."""
        with self._lock:
            return {a: (i, self.generation[i]) for a, i in self.held.items()}

    def free(self) -> int:
        """How many slots are free (neither held nor :meth:`stuck`)."""
        with self._lock:
            return self.capacity - len(self.held) - len(self._stuck)

    def stuck(self) -> dict[str, tuple[int, float]]:
        """Actor name of a stopped step -> ``(slot, seconds since it was stopped)``, for
        every slot whose data thread is still in that step's batch (a function that does
        not return): freed, but taken by no query until the call returns."""
        now = time.time()
        with self._lock:
            return {a: (i, now - t) for i, (a, t) in self._stuck.items()}


def _forward(name: str) -> Any:
    def call(self: StepHost, slot: int, generation: int, *args: Any, **kwargs: Any) -> Any:
        if self.generation.get(slot) != generation:
            raise SlotGone(f"slot {slot} of this step host was freed: its step was stopped")
        return getattr(self.shells[slot], name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


for _name in SHELL_METHODS:
    setattr(StepHost, _name, _forward(_name))


class _SlotMethod:
    def __init__(self, method: Any, slot: int, generation: int) -> None:
        self.method, self.slot, self.generation = method, slot, generation

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self.method.remote(self.slot, self.generation, *args, **kwargs)


class HostedStep:
    """Slot ``slot`` (in its ``generation``) of the host actor ``host``, called as a shell
    actor's handle is."""

    def __init__(self, host: Any, slot: int, generation: int) -> None:
        self.host, self.slot, self.generation = host, slot, generation
        self._methods: dict[str, _SlotMethod] = {}

    def __getattr__(self, name: str) -> _SlotMethod:
        group = SHELL_METHODS.get(name)
        if group is None or name.startswith("_"):
            raise AttributeError(name)
        method = self._methods.get(name)
        if method is None:
            handle = getattr(self.host, name).options(concurrency_group=f"{group}{self.slot}")
            method = self._methods[name] = _SlotMethod(handle, self.slot, self.generation)
        return method

    @property
    def _actor_id(self) -> tuple[Any, int, int]:
        """Who this is (for comparing handles): the host's actor id, the slot, its generation."""
        return (self.host._actor_id, self.slot, self.generation)

    def close(self) -> None:
        """Free the slot (the step is stopped; the host lives on)."""
        self.host.close.remote(self.slot, self.generation)

    def __reduce__(self) -> tuple[Any, ...]:
        return (HostedStep, (self.host, self.slot, self.generation))

    def __repr__(self) -> str:
        return f"HostedStep(slot {self.slot}.{self.generation} of {self.host!r})"
