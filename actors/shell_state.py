"""``ShellState``: what every part of an operator shell reads — the hosted step, its edges,
counters and failure — and the two locks that guard it.

:class:`~actors.shell.OperatorShell` is composed of parts, one module each, all over this
state: the data path and configuration (:mod:`actors.shell`), the outbox with its batching,
backpressure and flush timer (:mod:`actors.outbox`), checkpoint barriers
(:mod:`actors.checkpointing`), subscriptions of other queries and drivers
(:mod:`actors.readers`) and the control reads (:mod:`actors.inspection`). The process-wide
set-up is :mod:`actors.process`.

Two locks: ``_send_lock`` orders everything that submits calls (data path, timer,
subscriptions), ``_lock`` guards the processor and buffers; control reads take only
``_lock``, which the data path never holds while it waits on a downstream actor. ``_wake``
(a condition on ``_lock``) wakes the readers that wait for output, an end or a failure.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Any

import ray

from operators.events import MIN_TIME, Message
from operators.processor import Processor

from .barrier import Barriers
from .config import ShellConfig
from .metrics import StepMetrics, publisher
from .process import set_up_process
from .recorder import Recorder
from .stage_config import Routes, StageCheckpoint
from .subscriptions import Subscriptions, Target


class ShellState:
    """The state of one shell and its locks (see the module docstring); :meth:`_reset`
    gives every field its value for an idle shell."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._timer: threading.Thread | None = None
        #: set when the timer's next deadline came nearer (a buffer began to wait, a poll
        #: is due sooner): the timer sleeps until its deadline otherwise, or for good
        self._armed = threading.Event()
        #: how often the timer thread woke up (idle, it sleeps: tests count this)
        self.timer_wakes = 0
        #: the Ray node this actor runs on (None for a shell made outside Ray, as tests do:
        #: asking Ray would start one, or join whatever cluster /tmp/ray last recorded)
        self.node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        #: the hosted step's exported metrics (:mod:`actors.metrics`; None: no step)
        self.metrics: StepMetrics | None = None
        set_up_process()
        self._reset()

    def _reset(self) -> None:
        if self.metrics is not None:  # the step goes: its last counts out, then no more
            publisher().remove(self.metrics)
            self.metrics = None
        self.step = "(idle)"
        self.describe = ""
        self.proc: Processor | None = None
        self.n_in = 0
        #: splits an output batch over the out-edges (a :class:`topology.planning.routing.Router`,
        #: built on the planner's side: the shell only calls its ``route``)
        self.router: Routes | None = None
        self.targets: list[Target] = []
        self.buffers: list[list[Message]] = []
        #: composed queries and driver pulls (:mod:`actors.subscriptions`)
        self.readers = Subscriptions()
        self.rows_input = False
        #: batch size, in-flight window, flush timer, trace (:mod:`actors.config`)
        self.settings = ShellConfig()
        self.info: dict[str, Any] = {}
        self.ends = 0
        self.finished = False
        self.error: str | None = None
        self.error_trace: str | None = None
        self.counts = {"events_in": 0, "events_out": 0, "batches_in": 0, "batches_out": 0}
        self.out_cti = MIN_TIME
        #: wall time (time.time()) of the last output CTI advance and of the last input batch:
        #: ``why`` says how long ago a step moved (topology/seeing/why.py)
        self.cti_wall: float | None = None
        self.push_wall: float | None = None
        self.finished_wall: float | None = None  # when every input had ended (time.time())
        #: since when (time.time()) the data path is inside the processor (None: it is not)
        self.busy_since: float | None = None
        #: seconds spent processing batches, and waiting for a full out-edge (backpressure),
        #: since configured; checkpoints written and the last one's (milliseconds, bytes):
        #: what the step's metrics export (:mod:`actors.metrics`)
        self.busy_s = 0.0
        self.backpressured_s = 0.0
        self.checkpoints = 0
        self.last_checkpoint: tuple[float, int] | None = None
        #: the last full answer of ``stats()``: a busy step answers from it
        self._last_stats: dict[str, Any] | None = None
        self._oldest: float | None = None  # when the oldest buffered message arrived
        self._poll: Callable[[float], list[Message]] | None = None  # the processor's poll
        self._next_poll: float | None = None  # when (time.monotonic()) to poll next
        #: checkpoints: alignment, the epoch write, the sink's release (:mod:`actors.barrier`;
        #: off until configured with a checkpoint directory)
        self.barriers = self._barriers(None)
        #: the step's trace recorder (None: tracing off, see :mod:`actors.recorder`)
        self.trace: Recorder | None = None

    def _barriers(self, ckpt: StageCheckpoint | None) -> Barriers:
        """The stage's checkpoint part, wired to its data path (the shell's)."""
        raise NotImplementedError

    @property
    def is_sink(self) -> bool:
        """Whether this is a checkpointed query's (transactional) sink."""
        return self.barriers.is_sink

    # -- failure -----------------------------------------------------------------------------
    def _failed(self, exc: BaseException) -> None:
        """The step failed with ``exc``: keep the first error, naming the step (called with
        _lock)."""
        msg = str(exc)
        if self.step not in msg:
            msg = f"step {self.step!r} ({self.describe}) failed: {type(exc).__name__}: {msg}"
        self.error = msg
        self.error_trace = traceback.format_exc()
        self._wake.notify_all()

    def _forward_failure(self) -> None:
        """Pass the step's error to every out-edge and subscriber still there."""
        for t in list(self.targets) + self.readers.targets():
            if t.dead is None:
                t.handle.fail.remote(t.port, self.error)
