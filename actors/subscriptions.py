"""``Subscriptions``: who reads a stage's output besides its out-edges — other queries, drivers.

Plain Python (no Ray, no locks): :class:`~actors.shell.OperatorShell` owns one per hosted
processor and calls it under its ``_lock``; tests drive it directly.

* **composed queries** (dynamic composition, ``Stream.published``): a subscriber is a
  :class:`Target` (another query's source actor and port) with its own buffer, filled with
  everything the stage emits and sent like an out-edge's (:meth:`Subscriptions.due`). A
  subscriber that went away is dropped (:meth:`drop`), not an error of the publisher.
* **driver pulls** (``Query.subscribe``, ``collect``): a pull is a queue of messages that
  waits until the driver fetches it (:meth:`take`); :meth:`hand_out` appends output to every
  pull (a checkpointed sink hands out only released output).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from operators.events import Message


class Target:
    """One receiver on Ray: the downstream actor, its input port and the calls in flight."""

    __slots__ = ("dead", "dst", "handle", "inflight", "port")

    def __init__(self, dst: str, handle: Any, port: int) -> None:
        self.dst = dst
        self.handle = handle
        self.port = port
        self.inflight: deque[Any] = deque()
        self.dead: str | None = None


class Subscriptions:
    """The composed queries and driver pulls of one stage (see the module docstring)."""

    def __init__(self) -> None:
        self.subs: dict[str, Target] = {}
        self.buffers: dict[str, list[Message]] = {}
        self.pulls: dict[int, list[Message]] = {}
        self._next_pull = 0

    # -- composed queries ----------------------------------------------------------------------
    def subscribe(self, token: str, handle: Any, port: int) -> Target:
        """A new subscriber ``token``: from now on it gets everything the stage emits."""
        target = Target(token, handle, port)
        self.subs[token] = target
        self.buffers[token] = []
        return target

    def unsubscribe(self, token: str) -> bool:
        """Forget subscriber ``token``; whether it was there."""
        self.buffers.pop(token, None)
        return self.subs.pop(token, None) is not None

    def drop(self, target: Target) -> bool:
        """Forget the subscriber ``target`` if it is one (its query went away)."""
        for token, t in list(self.subs.items()):
            if t is target:
                self.unsubscribe(token)
                return True
        return False

    def targets(self) -> list[Target]:
        return list(self.subs.values())

    def buffer(self, out: list[Message]) -> None:
        """Buffer ``out`` for every subscriber."""
        for buf in self.buffers.values():
            buf.extend(out)

    def due(self, flush: bool, size: int) -> tuple[list[tuple[Target, list[Message]]], bool]:
        """The subscribers' buffers to send now (all with ``flush``, else the full ones),
        emptied; and whether some buffer still waits."""
        ready: list[tuple[Target, list[Message]]] = []
        waiting = False
        for token, buf in self.buffers.items():
            if buf and (flush or len(buf) >= size):
                ready.append((self.subs[token], buf))
                self.buffers[token] = []
            elif buf:
                waiting = True
        return ready, waiting

    # -- driver pulls ------------------------------------------------------------------------------
    def open_pull(self, initial: list[Message]) -> int:
        """A new pull, starting with ``initial``; returns its id."""
        self._next_pull += 1
        self.pulls[self._next_pull] = list(initial)
        return self._next_pull

    def close_pull(self, pull: int) -> None:
        self.pulls.pop(pull, None)

    def hand_out(self, out: list[Message]) -> bool:
        """Append ``out`` to every pull; whether a pull got it (a reader may be waiting)."""
        if out:
            for queue in self.pulls.values():
                queue.extend(out)
        return bool(out) and bool(self.pulls)

    def waiting(self, pull: int) -> bool | None:
        """Whether messages wait for ``pull``; None when there is no such pull."""
        queue = self.pulls.get(pull)
        return None if queue is None else bool(queue)

    def take(self, pull: int) -> list[Message]:
        """The messages waiting for ``pull``, removed from it."""
        msgs = self.pulls.get(pull)
        if msgs is None:
            return []
        self.pulls[pull] = []
        return msgs
