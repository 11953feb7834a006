"""Metrics: what every step of a query exports to Ray's Prometheus endpoint.

Each step publishes its counters through :mod:`ray.util.metrics`, so the metrics agent Ray
runs on every node serves them on that node's metrics port (``ray start
--metrics-export-port``; Ray needs its ``ray[default]`` dependencies for the agent): no
server of cedar's. The names follow Flink's meanings with a ``cedar_`` prefix; Ray exposes
each as ``ray_<name>``, a counter with ``_total`` appended (docs/operations.md lists them,
with a scrape config and a Grafana dashboard). Tags are the query, the step, the operator
(its processor's class) and, for the per-input series, the input port — never a key, so a
query exports a few series per step whatever its data.

Cost: nothing happens per event or per batch beyond what the shell already counts (two
clock reads per batch for the busy time, one around a send that has to wait). One thread per
process (:class:`Publisher`) reads each configured step's counters every
:data:`PUBLISH_EVERY_S` seconds and sets the metrics; with no step configured it sleeps
until one is.

Example (what a shell does; ``read`` returns a :class:`Reading`)::

    publisher().add(StepMetrics("meters", "where#1", "Where", read))
    ...
    publisher().remove(metrics)  # the step was reset
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from operators.events import MIN_TIME, TICKS_PER_SECOND

#: How often the publisher thread sets a step's metrics from its counters (seconds). Ray's
#: agent exports what was set every few seconds (``metrics_report_interval_ms``), and
#: Prometheus scrapes every 15-60 s: more often would cost without showing anything.
PUBLISH_EVERY_S = 2.0

#: The tags of a step's series; the per-input series add ``input`` (the input port).
STEP_TAGS = ("query", "step", "operator")
INPUT_TAGS = (*STEP_TAGS, "input")

#: ``collect()`` runs are named ``collect-<hex>`` (topology.running.deploy): their series
#: share the query tag ``collect``, so that a driver running many of them on one cluster (a
#: pooled actor hosts one after the other) does not add series with every run.
COLLECT_PREFIX = "collect-"

#: The source row accounting (``received = processed + dropped + adjusted +
#: dead_lettered``) and the metric each field goes to.
SOURCE_COUNTERS = {
    "received": "cedar_num_records_received",
    "processed": "cedar_num_records_processed",
    "dropped": "cedar_num_late_records_dropped",
    "adjusted": "cedar_num_late_records_adjusted",
    "dead_lettered": "cedar_num_records_dead_lettered",
}


@dataclass(frozen=True)
class MetricSpec:
    """One exported metric: its name (before Ray's ``ray_`` prefix), kind, unit and tags."""

    name: str
    kind: str  # "counter" or "gauge"
    help: str
    tags: tuple[str, ...] = STEP_TAGS


#: Every metric cedar exports, in the order docs/operations.md lists them.
METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("cedar_num_records_in", "counter",
               "Events the step received (a Columns batch counts its rows; CTIs included)"),
    MetricSpec("cedar_num_records_out", "counter",
               "Events the step emitted (inserts, retractions and CTIs)"),
    MetricSpec("cedar_current_output_watermark", "gauge",
               "The step's output CTI, as event-time seconds since the epoch of its ticks"),
    MetricSpec("cedar_current_input_watermark", "gauge",
               "The CTI of one input of the step, as event-time seconds", INPUT_TAGS),
    MetricSpec("cedar_cti_lag_seconds", "gauge",
               "How far the step's output CTI is behind the CTI of this input (event-time "
               "seconds; grows while the step holds output back)", INPUT_TAGS),
    MetricSpec("cedar_input_blocking", "gauge",
               "1 on the input of a multi-input step whose CTI holds the step's CTI back "
               "(the smallest of its open inputs), 0 on the others", INPUT_TAGS),
    *(MetricSpec(name, "counter", f"Source rows {what} (received = processed + dropped + "
                                  f"adjusted + dead_lettered)")
      for what, name in SOURCE_COUNTERS.items()),
    MetricSpec("cedar_dead_letters", "gauge",
               "Inputs the step could not process and kept as dead letters"),
    MetricSpec("cedar_busy_time_ms_per_second", "gauge",
               "Milliseconds per second the step spent inside its operator"),
    MetricSpec("cedar_backpressured_time_ms_per_second", "gauge",
               "Milliseconds per second the step waited for a full downstream edge"),
    MetricSpec("cedar_idle_time_ms_per_second", "gauge",
               "Milliseconds per second the step was neither busy nor backpressured"),
    MetricSpec("cedar_state_rows", "gauge",
               "Events or windows the step holds in state"),
    MetricSpec("cedar_last_checkpoint_duration_ms", "gauge",
               "How long the step's last checkpoint write took (milliseconds)"),
    MetricSpec("cedar_last_checkpoint_size_bytes", "gauge",
               "The size of the step's last checkpoint file (bytes)"),
    MetricSpec("cedar_checkpoints", "counter", "Checkpoints the step wrote"),
)


@dataclass
class Reading:
    """What a step's counters say now (read by the shell without waiting for its data path:
    :meth:`actors.inspection.Inspection._metrics_reading`). Times are cumulative seconds;
    ticks are the engine's (``TICKS_PER_SECOND`` per second)."""

    records_in: int = 0
    records_out: int = 0
    out_cti: int = MIN_TIME
    #: the CTI of each input port (None: the step has no CTI inputs, as a rows source)
    in_ctis: Sequence[int] | None = None
    #: the input ports that ended before the others (they hold nothing back)
    in_ended: frozenset[int] = frozenset()
    #: a source's row accounting (None: not a source)
    source: dict[str, int] | None = None
    dead_letters: int = 0
    busy_s: float = 0.0
    backpressured_s: float = 0.0
    #: events or windows held (None: the step was busy, keep the last value)
    state_rows: int | None = None
    checkpoints: int = 0
    checkpoint_ms: float | None = None
    checkpoint_bytes: int | None = None


class _Instruments:
    """The process's Ray metric objects, one per :data:`METRICS` entry (made once: Ray keeps
    one registration per name and process)."""

    _made: _Instruments | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        from ray.util import metrics as rm

        self.by_name: dict[str, Any] = {
            m.name: (rm.Counter if m.kind == "counter" else rm.Gauge)(
                m.name, description=m.help, tag_keys=m.tags) for m in METRICS}

    @classmethod
    def get(cls) -> _Instruments | None:
        """The instruments, or None outside Ray (a shell a test drives in-process: Ray's
        metrics need a connected worker)."""
        import ray

        if not ray.is_initialized():
            return None
        with cls._lock:
            if cls._made is None:
                cls._made = _Instruments()
            return cls._made


def _seconds(ticks: int) -> float:
    return ticks / TICKS_PER_SECOND


@dataclass(eq=False)
class StepMetrics:
    """The metrics of one configured step: its tags, where it reads its counters, and what it
    published last (counters are exported as increments since then)."""

    query: str
    step: str
    operator: str
    read: Callable[[], Reading]
    _last: Reading = field(default_factory=Reading)
    _last_t: float = field(default_factory=time.monotonic)
    #: one publish at a time (the thread's and a reset's final one)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def tags(self) -> dict[str, str]:
        query = "collect" if self.query.startswith(COLLECT_PREFIX) else self.query
        return {"query": query, "step": self.step, "operator": self.operator}

    def publish(self, now: float | None = None) -> Reading:
        """Read the step's counters and set its metrics; returns the reading."""
        with self._lock:
            now = time.monotonic() if now is None else now
            r = self.read()
            instruments = _Instruments.get()
            if instruments is not None:
                self._set(instruments.by_name, r, now)
            self._last, self._last_t = r, now
            return r

    def _set(self, m: dict[str, Any], r: Reading, now: float) -> None:
        """Set the metrics ``m`` (by name) from reading ``r`` (at ``now``)."""
        last, tags = self._last, self.tags

        def inc(name: str, value: int, before: int) -> None:
            if value > before:
                m[name].inc(value - before, tags=tags)

        inc("cedar_num_records_in", r.records_in, last.records_in)
        inc("cedar_num_records_out", r.records_out, last.records_out)
        inc("cedar_checkpoints", r.checkpoints, last.checkpoints)
        if r.source is not None:
            before = last.source or {}
            for what, name in SOURCE_COUNTERS.items():
                inc(name, r.source.get(what, 0), before.get(what, 0))
        if r.out_cti != MIN_TIME:
            m["cedar_current_output_watermark"].set(_seconds(r.out_cti), tags=tags)
        ctis = list(r.in_ctis or ())
        open_ = [c for i, c in enumerate(ctis) if i not in r.in_ended]
        holding = min(open_) if len(ctis) > 1 and open_ else None
        for port, cti in enumerate(ctis):
            t = {**tags, "input": str(port)}
            if holding is not None:
                blocking = port not in r.in_ended and cti == holding
                m["cedar_input_blocking"].set(1.0 if blocking else 0.0, tags=t)
            if cti == MIN_TIME:
                continue
            m["cedar_current_input_watermark"].set(_seconds(cti), tags=t)
            lag = 0.0 if r.out_cti == MIN_TIME else max(0.0, _seconds(cti - r.out_cti))
            m["cedar_cti_lag_seconds"].set(lag, tags=t)
        m["cedar_dead_letters"].set(r.dead_letters, tags=tags)
        elapsed = now - self._last_t
        if elapsed > 0:
            busy = min(1000.0, 1000 * max(0.0, r.busy_s - last.busy_s) / elapsed)
            back = min(1000.0 - busy,
                       1000 * max(0.0, r.backpressured_s - last.backpressured_s) / elapsed)
            m["cedar_busy_time_ms_per_second"].set(busy, tags=tags)
            m["cedar_backpressured_time_ms_per_second"].set(back, tags=tags)
            m["cedar_idle_time_ms_per_second"].set(1000.0 - busy - back, tags=tags)
        if r.state_rows is not None:
            m["cedar_state_rows"].set(r.state_rows, tags=tags)
        if r.checkpoint_ms is not None:
            m["cedar_last_checkpoint_duration_ms"].set(r.checkpoint_ms, tags=tags)
        if r.checkpoint_bytes is not None:
            m["cedar_last_checkpoint_size_bytes"].set(r.checkpoint_bytes, tags=tags)


class Publisher:
    """The process's publishing thread: every :data:`PUBLISH_EVERY_S` it publishes each
    registered step (a step host's slots share it); with none registered it sleeps until
    :meth:`add` wakes it."""

    def __init__(self, every_s: float = PUBLISH_EVERY_S) -> None:
        self.every_s = every_s
        self._steps: list[StepMetrics] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        #: how often the thread woke up (an idle process: never, while no step is configured)
        self.wakes = 0

    def add(self, metrics: StepMetrics) -> None:
        with self._lock:
            self._steps.append(metrics)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="cedar-metrics",
                                                daemon=True)
                self._thread.start()
        self._wake.set()

    def remove(self, metrics: StepMetrics, final: bool = True) -> None:
        """Stop publishing ``metrics`` (publishing its last reading first when ``final``)."""
        with self._lock:
            if metrics not in self._steps:
                return
            self._steps.remove(metrics)
        if final:
            self._publish_one(metrics)

    def _publish_one(self, metrics: StepMetrics) -> None:
        try:
            metrics.publish()
        except Exception:  # noqa: BLE001 - metrics never fail a step
            pass

    def _loop(self) -> None:
        while True:
            self._wake.clear()  # before reading the steps: a later add() wakes the wait
            with self._lock:
                steps = list(self._steps)
            if not steps:
                self._wake.wait()
                continue
            self.wakes += 1
            for s in steps:
                self._publish_one(s)
            time.sleep(self.every_s)


_PUBLISHER: Publisher | None = None
_PUBLISHER_LOCK = threading.Lock()


def publisher() -> Publisher:
    """The process's :class:`Publisher` (made on first use)."""
    global _PUBLISHER
    with _PUBLISHER_LOCK:
        if _PUBLISHER is None:
            _PUBLISHER = Publisher()
        return _PUBLISHER
