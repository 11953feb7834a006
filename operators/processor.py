"""The one interface every pure cedar operator implements.

An operator is a state machine over physical messages. The runtime (inline or a Ray actor
shell) only ever calls :meth:`Processor.process` with a batch of messages from one input port
and forwards the returned messages; nothing here knows about Ray, clocks or I/O.

Subclasses implement ``on_insert``, ``on_retract`` and ``on_cti`` (each returns a list of output
messages), name their mutable state for checkpoints by the one convention of :class:`Stateful`
(``_state_fields``, and ``_parts`` for the processors they host), read their input CTI from
:attr:`Processor.in_cti` / :attr:`Processor.in_ctis` (kept by :meth:`Processor.process`, never
copied), and may override :meth:`_check` with invariants that tests call after every step.

Everything else a runtime calls is declared here with a default, so no runtime has to guess
with ``getattr``: :meth:`end_input` when one input port of several has ended (the operator
reacts in :meth:`on_end_input`), :meth:`finish` at the end of input (of every port, or of the
last port to end), :meth:`poll` every :attr:`poll_every_s`
seconds of wall clock, the records :attr:`dead_letters` and :attr:`late`, :attr:`stats` (a
source's row accounting) and :meth:`children` (the processors one hosts).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

from .cht import InvalidStream
from .columns import Columns
from .errors import DeadLetter, LateEvent, OperatorError
from .events import MIN_TIME, Cti, Insert, KeyCtis, Message, Retract, fmt_time


class Stateful:
    """The one checkpoint convention. A class names the attributes that hold its mutable state
    in ``_state_fields`` (deep-copied) and those that hold objects with a state of their own in
    ``_parts`` (one object, or a list, tuple or dict of them: the stages of a chain, a source's
    ingress), which are checkpointed by their own :meth:`snapshot` and restored in place.

    >>> class Counter(Stateful):
    ...     _state_fields = ("n",)
    ...     def __init__(self): self.n = 0
    >>> c = Counter(); s = c.snapshot(); c.n = 5; c.restore(s); c.n
    0
    >>> c.restore({})
    Traceback (most recent call last):
    ...
    ValueError: not a snapshot of Counter (it lacks ['n']): pass what its snapshot() returned
    """

    #: Names of the attributes that hold mutable state (what a checkpoint stores).
    _state_fields: ClassVar[tuple[str, ...]] = ()
    #: Names of the attributes that hold stateful objects checkpointed by their own snapshot.
    _parts: ClassVar[tuple[str, ...]] = ()

    def snapshot(self) -> dict[str, Any]:
        """A deep copy of the mutable state, to be stored by a checkpoint."""
        state = {f: copy.deepcopy(getattr(self, f)) for f in self._state_fields}
        for name in self._parts:
            part = getattr(self, name)
            state[name] = ([p.snapshot() for p in part] if isinstance(part, (list, tuple)) else
                           {k: p.snapshot() for k, p in part.items()} if isinstance(part, dict)
                           else part.snapshot())
        return state

    def restore(self, state: dict[str, Any]) -> None:
        """Reset the state to a :meth:`snapshot` of an object built with the same
        configuration."""
        missing = [f for f in (*self._state_fields, *self._parts) if f not in state]
        if missing:
            raise ValueError(f"not a snapshot of {type(self).__name__} (it lacks {missing}): "
                             f"pass what its snapshot() returned")
        for f in self._state_fields:
            setattr(self, f, copy.deepcopy(state[f]))
        for name in self._parts:
            part, saved = getattr(self, name), state[name]
            if isinstance(part, (list, tuple)):
                for p, s in zip(part, saved, strict=True):
                    p.restore(s)
            elif isinstance(part, dict):
                for k, s in saved.items():
                    part[k].restore(s)
            else:
                part.restore(saved)


class Processor(Stateful):
    """Base class of every operator: batches in, batches out, state snapshot-able (its output
    and input CTIs always, and what :class:`Stateful`'s convention names)."""

    #: Number of input ports (1 for span and window operators, 2 for joins, N for union).
    n_inputs: int = 1

    def __init__(self, name: str | None = None) -> None:
        #: A readable step id used in error messages; the planner sets it.
        self.name = name or type(self).__name__
        #: The largest CTI emitted so far: output CTIs never go back.
        self.out_cti = MIN_TIME

    #: The input CTI of each port so far (created lazily by :meth:`process`, as multi-input
    #: operators set ``n_inputs`` after ``__init__``); part of the snapshot.
    in_ctis: list[int] | None = None
    #: The input ports that have ended before the others (:meth:`end_input`; None: none);
    #: part of the snapshot.
    in_ended: set[int] | None = None

    #: Inputs this processor could not process (:class:`~operators.errors.DeadLetter`); one
    #: that records them keeps its own list.
    dead_letters: Sequence[DeadLetter] = ()
    #: Events a source dropped or adjusted by its late-event policy
    #: (:class:`~operators.errors.LateEvent`).
    late: Sequence[LateEvent] = ()
    #: A source's row accounting (``received``, ``processed``, ...), or None.
    stats: dict[str, int] | None = None
    #: How often the runtime calls :meth:`poll` with its wall clock (None: never).
    poll_every_s: float | None = None
    #: The runtime's wall clock (seconds), given by a runtime that polls (see
    #: :attr:`poll_every_s`) to the processor it polls; an operator never reads a clock of its
    #: own, so that the same input gives the same output on every runtime.
    clock: Callable[[], float] | None = None

    # -- the runtime's entry points -------------------------------------------------------
    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        """Feed a batch of messages from input ``port``; return the output messages in order.

        An insert (or a retraction) that changes the time axis behind the input CTI of its port
        breaks the CTI's promise: it fails with an :class:`OperatorError` naming this step."""
        out: list[Message] = []
        on_insert, on_retract, on_cti = self.on_insert, self.on_retract, self.on_cti
        if self.in_ended is not None and port in self.in_ended:
            raise ended_error(self.name, port)
        ctis = self.in_ctis
        if ctis is None or port >= len(ctis):
            ctis = self._grow_in_ctis(port)
        cti = ctis[port]
        msg: Any = None
        try:
            for msg in batch:
                kind = type(msg)
                if kind is Insert:
                    if msg[1] < cti:
                        raise behind_error(msg, msg[1], cti, port)
                    out.extend(on_insert(msg, port))
                elif kind is Retract:
                    if msg[2] < cti or msg[3] < cti:
                        raise behind_error(msg, min(msg[2], msg[3]), cti, port)
                    out.extend(on_retract(msg, port))
                elif kind is Cti:
                    time = msg[0]
                    if time > cti:
                        ctis[port] = cti = time
                    out.extend(on_cti(time, port))
                elif kind is Columns:
                    if len(msg) and int(msg.starts.min()) < cti:
                        raise behind_error(msg, int(msg.starts.min()), cti, port)
                    out.extend(self.on_columns(msg, port))
                elif kind is KeyCtis:
                    out.extend(self.on_key_ctis(msg, port))
                else:
                    raise TypeError(
                        f"expected Insert, Retract or Cti, got {type(msg).__name__}"
                    )
            msg = "the end of the batch"
            out.extend(self.end_batch())
        except (OperatorError, InvalidStream):
            raise
        except Exception as exc:
            raise OperatorError(
                f"operator {self.name!r} failed on {msg if isinstance(msg, str) else repr(msg)} "
                f"(input {port}): {type(exc).__name__}: {exc}"
            ) from exc
        return out

    def end_input(self, port: int) -> list[Message]:
        """Input ``port`` has ended while another is still open: it sends nothing more, so its
        CTI no longer holds back :attr:`in_cti` (a finished Flink source's watermark counts as
        +∞ in an operator's minimum). Returns what the operator can emit now
        (:meth:`on_end_input`: a multi-input operator's output CTI moves up to the open
        inputs'). The runtimes call it on every end of an input but the last; after the last
        they call :meth:`finish`, which decides the final output as before. A second end of the
        same port returns nothing.

        >>> from operators.union import Union
        >>> u = Union(2)
        >>> u.process([Cti(3)], 0) + u.process([Cti(9)], 1)
        [Cti(time=3)]
        >>> u.end_input(0), u.in_cti
        ([Cti(time=9)], 9)
        """
        if not 0 <= port < self.n_inputs:
            raise ValueError(f"operator {self.name!r} has inputs 0..{self.n_inputs - 1}, got "
                             f"the end of input {port}")
        ended = self.in_ended
        if ended is None:
            ended = self.in_ended = set()
        if port in ended:
            return []
        ended.add(port)
        try:
            return self.on_end_input(port)
        except (OperatorError, InvalidStream):
            raise
        except Exception as exc:
            raise OperatorError(f"operator {self.name!r} failed at the end of input {port}: "
                                f"{type(exc).__name__}: {exc}") from exc

    def finish(self) -> list[Message]:
        """End of input on every port: the last output (a source's final CTI, the failures a
        window still holds). Nothing by default."""
        return []

    def poll(self, now: float) -> list[Message]:
        """Called every :attr:`poll_every_s` seconds with the runtime's clock (a source's idle
        timeout). Nothing by default."""
        return []

    def next_poll(self, now: float) -> float | None:
        """When (on the runtime's clock) :meth:`poll` may next emit, asked at ``now`` after
        an input or a poll: a runtime that polls sleeps until then or until the next input,
        so that an idle processor costs no wake-ups (None: not before the next input). By
        default every :attr:`poll_every_s` seconds."""
        return None if self.poll_every_s is None else now + self.poll_every_s

    def children(self) -> Iterable[Processor]:
        """The processors this one hosts (the stages of a chain or an in-process plan)."""
        return ()

    def end_batch(self) -> list[Message]:
        """Called after the last message of every batch: an operator that defers its output
        within a batch (a window corrects each touched window once) emits it here."""
        return []

    def _grow_in_ctis(self, port: int) -> list[int]:
        ctis = self.in_ctis or []
        ctis.extend([MIN_TIME] * (max(self.n_inputs, port + 1) - len(ctis)))
        self.in_ctis = ctis
        return ctis

    def on_message(self, msg: Message, port: int = 0) -> list[Message]:
        """Feed one message; return the output messages."""
        return self.process((msg,), port)

    # -- what subclasses implement --------------------------------------------------------
    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        raise NotImplementedError

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        raise NotImplementedError

    def on_cti(self, time: int, port: int) -> list[Message]:
        return self.emit_cti(time)

    def on_key_ctis(self, msg: KeyCtis, port: int) -> list[Message]:
        """Per-key progress (:class:`~operators.events.KeyCtis`): a hint beside the input
        CTI, which an operator not keyed by the source's key ignores (the default); one that
        keeps the events' payloads and times passes it on (``where``)."""
        return []

    def on_end_input(self, port: int) -> list[Message]:
        """Input ``port`` has ended (it is in :attr:`in_ended` already, so :attr:`in_cti` is
        the open inputs' minimum): what to emit now. Nothing by default: an operator with one
        input is only ever finished; a multi-input operator recomputes its output CTI."""
        return []

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        """A batch of inserts stored column-wise: by default, ``on_insert`` per event."""
        out: list[Message] = []
        on_insert = self.on_insert
        for ins in msg.inserts():
            out.extend(on_insert(ins, port))
        return out

    # -- helpers --------------------------------------------------------------------------
    def emit_cti(self, time: int) -> list[Message]:
        """A ``Cti(time)`` if it moves the output CTI forward, else nothing."""
        if time > self.out_cti:
            self.out_cti = time
            return [Cti(time)]
        return []

    def key_functions(self) -> tuple[Callable[[Any], Any], ...] | None:
        """The key function of each input port of an operator that keys its input (group
        apply, the keyed window, distinct with a key, the joins), or None (the default: not
        keyed). The trace recorder (:mod:`actors.recorder`) records each input's key with it."""
        return None

    def keyed_output(self) -> bool:
        """Whether every output payload is a ``(key, payload)`` pair (group apply, the keyed
        window aggregate unless ``keyed=False``); False by default."""
        return False

    def state_size(self) -> int:
        """Number of events (or windows) held in state; 0 for stateless operators."""
        return 0

    @property
    def in_cti(self) -> int:
        """The input CTI: the minimum over the ports that have not ended (nothing may arrive
        before it any more); once every port has ended, the minimum over all of them (the
        final CTI is then :meth:`finish`'s to decide)."""
        ctis = self.in_ctis
        if not ctis:
            return MIN_TIME
        ended = self.in_ended
        if ended:
            open_ = [c for i, c in enumerate(ctis) if i not in ended]
            if open_:
                return min(open_)
        return min(ctis)

    def snapshot(self) -> dict[str, Any]:
        state = super().snapshot()
        state["out_cti"] = self.out_cti
        state["in_ctis"] = None if self.in_ctis is None else list(self.in_ctis)
        state["in_ended"] = None if self.in_ended is None else sorted(self.in_ended)
        return state

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.out_cti = state["out_cti"]
        self.in_ctis = None if state["in_ctis"] is None else list(state["in_ctis"])
        ended = state.get("in_ended")  # (absent from the snapshots of before per-port ends)
        self.in_ended = None if ended is None else set(ended)

    def _check(self) -> None:
        """Assert internal invariants (tests call this after every step)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def ended_error(name: str, port: int) -> OperatorError:
    """The error for a batch on input ``port`` of step ``name`` after that input ended."""
    return OperatorError(f"operator {name!r} got a batch on input {port} after that input "
                         f"ended (end_input): nothing may follow the end of an input; a bug "
                         f"in the runtime that fed it")


def behind_error(msg: Any, time: int, cti: int, port: int = 0) -> ValueError:
    """The error for ``msg`` changing ``time``, behind the input CTI ``cti`` of ``port``."""
    what = "a column batch of inserts" if type(msg) is Columns else type(msg).__name__.lower()
    return ValueError(
        f"{what} changes time {fmt_time(time)}, behind the input CTI {fmt_time(cti)} of input "
        f"{port}: the stream into this step is not well formed. The step feeding it emitted an "
        f"event behind its own output CTI: a bug in cedar, or in a user-defined operator that "
        f"returns events behind its CTI (stamp them at or after the window start)")
