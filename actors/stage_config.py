"""``StageConfig``: what the driver hands an actor to host one stage of a plan.

The driver (:mod:`topology.running.deploy`) makes one per stage from the
:class:`~topology.planning.plan.Plan` and sends it to the stage's
:class:`~actors.shell.OperatorShell` (``configure``): which processor to build, how many input edges
it has, where its output goes, and whether it checkpoints. The shell reads these fields and nothing
else; the same frozen object can be sent again (a checkpointed query configures fresh actors from it
after a failure).

Pure Python (no Ray): it travels to the actor pickled, its factory with cloudpickle. It
imports nothing from :mod:`topology` (``topology`` imports ``actors``, never the reverse):
the router the planner's side builds is seen through the :class:`Routes` protocol.

Example::

    >>> from operators.where import Where
    >>> cfg = StageConfig(step="where#1", factory=lambda: Where(bool), describe="where")
    >>> cfg.n_in, cfg.router, cfg.checkpoint
    (1, None, None)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from operators.events import Message
from operators.processor import Processor

from .config import ShellConfig


class Edge(Protocol):
    """An out-edge as the shell sees it: the step it feeds and that step's input port
    (:class:`topology.planning.routing.OutEdge`)."""

    @property
    def dst(self) -> str: ...

    @property
    def port(self) -> int: ...


class Routes(Protocol):
    """What splits a stage's output over its out-edges (:class:`topology.planning.routing.Router`,
    built on the planner's side): one list of messages per edge, in edge order."""

    @property
    def edges(self) -> Sequence[Edge]: ...

    def route(self, msgs: list[Message]) -> list[list[Message]]: ...


@dataclass(frozen=True)
class StageCheckpoint:
    """Where a checkpointed stage writes its epochs (:mod:`actors.checkpoint`): the query's
    checkpoint ``root`` (a directory or storage URI), the ``query``'s name, and whether the
    stage is the query's transactional sink (its output is released once its epoch is on
    disk: :class:`actors.barrier.Barriers`)."""

    root: str
    query: str
    sink: bool = False


@dataclass(frozen=True)
class StageConfig:
    """One stage of a plan, as its actor hosts it (see the module docstring)."""

    #: The stage's step id (``where#1``, ``from_rows#0+where#1``): errors and stats name it.
    step: str
    #: Builds the stage's processor in the actor (called once per ``configure``).
    factory: Callable[[], Processor]
    #: The query's name (``deploy(name)``; ``collect()``'s own): the ``query`` tag of the
    #: stage's metrics (:mod:`actors.metrics`).
    query: str = ""
    #: What the stage does, for people (``explain()``'s line): errors and stats show it.
    describe: str = ""
    #: How many input edges feed the stage (a source: one, its feed); after the end of the
    #: last one the processor finishes and the end goes on.
    n_in: int = 1
    #: Splits the output over the out-edges (None: the stage has none, as a sink).
    router: Routes | None = None
    #: The actor (or step-host slot) of each step an out-edge goes to, by step id.
    handles: Mapping[str, Any] = field(default_factory=dict)
    #: Whether the input is a source's rows (encoded with ``encode_rows``), not messages.
    rows: bool = False
    #: What ``deploy`` tells the stage of its query (``manifest()`` answers it): the sink's
    #: is the query's manifest (its actors, edges, explain, claim ...), the others' empty.
    info: Mapping[str, Any] = field(default_factory=dict)
    #: Batch size, in-flight window, flush timer, trace (:mod:`actors.config`).
    settings: ShellConfig = field(default_factory=ShellConfig)
    #: Where the stage checkpoints (None: it does not; barriers are then ignored).
    checkpoint: StageCheckpoint | None = None
    #: The stage's checkpoint file to resume from (an epoch's, after a failure), or None.
    restore: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.step, str) or not self.step:
            raise ValueError(f"StageConfig(step={self.step!r}): a step id must be a "
                             f"non-empty string")
        if not callable(self.factory):
            raise TypeError(f"StageConfig(step={self.step!r}): factory={self.factory!r} "
                            f"must be a callable that builds the stage's processor")
        if isinstance(self.n_in, bool) or not isinstance(self.n_in, int) or self.n_in < 1:
            raise ValueError(f"StageConfig(step={self.step!r}): n_in={self.n_in!r} must be "
                             f"the number of input edges, a whole number >= 1")
        missing = [e.dst for e in self.edges if e.dst not in self.handles]
        if missing:
            raise ValueError(f"StageConfig(step={self.step!r}): no actor handle for the "
                             f"out-edge(s) to {', '.join(missing)}; pass handles={{step: "
                             f"actor}} for every edge of the router")
        if self.restore is not None and self.checkpoint is None:
            raise ValueError(f"StageConfig(step={self.step!r}): restore={self.restore!r} "
                             f"needs checkpoint= (where the resumed stage goes on writing)")

    @property
    def edges(self) -> Sequence[Edge]:
        """The stage's out-edges, in the router's order (none without a router)."""
        return self.router.edges if self.router is not None else ()
