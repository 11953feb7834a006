"""``Supervisor``: the driver side of a checkpointed query — feeds, collects, restarts.

With ``checkpoint_dir`` set, one supervisor per query runs it: in the query's host actor
(:mod:`actors.host`) for ``deploy()``, so the query outlives the script that deployed it, or
in the driver for ``collect()``.

* **feeding** (its own thread): the sources are fed round robin, one batch of each in turn;
  after every ``checkpoint_every`` rounds a barrier of the next epoch goes into every source,
  behind its data (so epoch ``e`` ends after round ``e * checkpoint_every``). Every batch (as
  the bytes sent) and barrier is kept in a log until the sink reports the epoch complete; then
  the log forgets what came before that barrier. The ends of input go to all sources once
  every feed is exhausted (an ended input sends no more barriers, so ends wait for the last
  one).
* **collecting**: the sink releases output only for checkpointed epochs (see
  :mod:`actors.shell`); the supervisor fetches it by position (:meth:`fetch_from`), saves it
  beside the checkpoints (:func:`actors.checkpoint.save_output`) and only then acknowledges
  it (the next fetch), and keeps it in :attr:`output`.
* **recovery**: when an actor dies (a failed call, or its *vigil* failing: a call to
  :meth:`~actors.shell.OperatorShell.until_failed` that the supervisor keeps pending on every
  step, which returns when the step fails and raises when it dies), the supervisor
  pauses the feeder, kills every actor of the query, starts new ones restored from the newest
  complete epoch on disk, replays the log after that epoch's barrier, and resumes fetching at
  the position it had reached. Output positions at or after the restored sink's are produced
  again only if they were never released, so no row is emitted twice.
* **resuming** (``start(resume=True)``: the supervisor itself was lost, with its log): the
  saved output is read back, every actor of the query is replaced by one restored from the
  newest complete epoch ``e``, and the sources are read again from their beginning, skipping
  the ``e * checkpoint_every`` rounds that epoch had taken in. Sources must therefore be
  re-readable (a list, a table, files), which is what lets a cluster process feed them. A
  query that had finished (its whole output saved, ``finished.pkl``) is not run again: the
  output its sink released at the end came after the last epoch, and would come twice.
* **savepoints** (:mod:`actors.savepoints`): the feeder cuts the query at one more barrier
  on demand; a run restored from a savepoint begins at its epoch, rounds and output position.

Operators must be deterministic functions of their input (docs/udm.md already asks it of UDMs); the
interleaving of a multi-input stage may differ on replay, which is harmless because nothing
after the restored epoch had been released. A wall-clock idle timeout (``AdvanceTime``'s
``idle_timeout``) makes a source depend on timing, so a restart may place its CTIs differently
(still a valid run, not necessarily the same one).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from operators.errors import SourceFailed
from operators.feeds import END, round_robin

from . import checkpoint as ck
from .config import ShellConfig
from .savepoints import SavepointCut
from .wire import decode

#: Seconds one fetch waits for output (it returns as soon as output is released or the query
#: ends or fails; a failure or death elsewhere ends the wait through the vigils). An idle
#: query's sink answers one fetch per FETCH_S: 2 s cost it ~0.1 % of a core above Ray's floor
#: (benchmarks/idle_cost.py --checkpoint).
FETCH_S = 10.0
#: What :meth:`Supervisor._step_error` says of a step whose actor is gone.
DEAD = "a step is dead"
#: Seconds one vigil call waits for its step to fail before it is renewed.
VIGIL_S = 30.0


class Supervisor(SavepointCut):
    """Runs one checkpointed query. ``start_actors(generation)`` returns fresh actor handles
    by step (replacing any actor of the query still alive); ``configure(handles, restore)``
    configures them (``restore``: epoch or 0); ``feeds_from(rounds)`` returns (step, iterator
    of encoded batches) per fed source, each read from its beginning and the first ``rounds``
    rounds skipped (or going on from a position of its own, see ``at_cut``). ``settings``
    gives ``checkpoint_every`` and the in-flight window of the feeding
    (:class:`~actors.config.ShellConfig`). ``manifest`` is what the query's sink says
    of it (its steps' actors, explain, claim, ...): the supervisor answers it too, so that a
    driver reaches the query's released output when its sink is gone. ``base``, ``at_cut``
    and ``wake`` are its savepoints' (:class:`~actors.savepoints.SavepointCut`)."""

    def __init__(self, *, name: str, steps: list[str], sink: str, root: str,
                 start_actors: Callable[[int], dict[str, Any]],
                 configure: Callable[[dict[str, Any], int], None],
                 feeds_from: Callable[[int], list[tuple[str, Iterator[bytes]]]],
                 settings: ShellConfig, manifest: dict[str, Any] | None = None,
                 base: tuple[int, int, int] = (0, 0, 0),
                 at_cut: Callable[[], dict[str, Any]] = dict,
                 wake: Callable[[], None] = lambda: None) -> None:
        self.name, self.steps, self.sink_step, self.root = name, steps, sink, root
        self._manifest = dict(manifest or {})
        self._start_actors, self._configure = start_actors, configure
        self._feeds_from, self.every = feeds_from, settings.checkpoint_every
        self.max_in_flight = settings.max_in_flight
        self.batch_size = settings.batch_size
        self.lock = threading.RLock()  # held while sending to the actors (feeder, recovery)
        self.generation = 0
        self.handles: dict[str, Any] = {}
        self.log: list[tuple[Any, ...]] = []  # ("b", step, blob) | ("e", epoch) | ("end",)
        self.committed = 0  # the newest epoch the sink reported complete
        self.output: list[Any] = []  # released output messages, in order
        self.pos = base[2]  # the next output position to fetch
        self.recoveries: list[dict[str, Any]] = []
        self.error: str | None = None
        #: (step, reason) of the failure, when the query failed
        self.failure: tuple[str, str] | None = None
        self.done = threading.Event()
        self.stop_event = threading.Event()
        self.new_output = threading.Condition()
        self._inflight: dict[str, deque[Any]] = {}
        self._suspect = threading.Event()
        #: the fetches the watcher has sent to the sink (an idle query: one per FETCH_S)
        self.fetches = 0
        self._threads: list[threading.Thread] = []
        #: step -> its pending vigil call (see the module docstring; the watcher's own)
        self._vigils: dict[str, Any] = {}
        self._init_cut(base, at_cut, wake)

    # -- life cycle ----------------------------------------------------------------------------
    def start(self, resume: bool = False) -> None:
        """Start the query's actors and the feeding and collecting threads; with ``resume``,
        carry on a run whose supervisor was lost (see the module docstring)."""
        t0 = time.monotonic()
        epoch = self.committed = self.base_epoch
        with self.lock:
            if resume:
                # the recoveries before the supervisor was lost count too
                self.recoveries = ck.load_recoveries(self.root, self.name)
                for _, end, blob in ck.load_output(self.root, self.name, self.base_pos):
                    self.output.extend(decode(blob))
                    self.pos = end
                if ck.has_finished(self.root, self.name):  # its output is whole: no rerun
                    self._finish()
                    return
                epoch = self.committed = ck.latest_complete(self.root, self.name, self.steps)
                self.resume_cut(epoch)  # from a savepoint's cut: its rounds are its own
                self.generation = 1
            self.handles = self._start_actors(self.generation)
            self._configure(self.handles, epoch)
            feeds = self._feeds_from(self.rounds_at(epoch))
            self._inflight = {s: deque() for s, _ in feeds}
        if resume:
            self.recoveries.append({"recovery_s": time.monotonic() - t0, "epoch": epoch,
                                    "replayed": 0, "generation": self.generation,
                                    "output_position": self.pos, "resumed": True})
            ck.save_recoveries(self.root, self.name, self.recoveries)
        threads = ((lambda: self._feed(feeds, epoch), "cedar-ckpt-feeder"),
                   (self._watch, "cedar-ckpt-sup"))
        for target, label in threads:
            t = threading.Thread(target=target, name=label, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, kill: bool = False) -> None:
        """Stop feeding and collecting; with ``kill``, kill the query's actors too (under
        the lock, so that no restart comes between)."""
        self.stop_event.set()
        self.done.set()
        with self.new_output:
            self.new_output.notify_all()
        if kill:
            import ray

            with self.lock:
                for h in self.handles.values():
                    try:
                        ray.kill(h, no_restart=True)
                    except Exception:  # noqa: BLE001 - dead already
                        pass

    def wait(self, timeout_s: float | None = None) -> bool:
        return self.done.wait(timeout_s)

    def stats(self) -> dict[str, Any]:
        last = self.recoveries[-1] if self.recoveries else None
        return {"recoveries": len(self.recoveries),
                "recovery_s": last["recovery_s"] if last else None,
                "checkpoint_epoch": self.committed, "generation": self.generation,
                "logged": len(self.log)}

    # -- what a Query asks (here or through the host actor) --------------------------------------
    def manifest(self) -> dict[str, Any]:
        """The query's manifest, as its sink gives it (:meth:`OperatorShell.manifest
        <actors.shell.OperatorShell.manifest>`)."""
        return dict(self._manifest)

    def current_handles(self) -> dict[str, Any]:
        with self.lock:
            return dict(self.handles)

    def recovery_log(self) -> list[dict[str, Any]]:
        return list(self.recoveries)

    def state(self) -> tuple[str, str | None, str | None]:
        """(``"running"``, ``"recovering"``, ``"finished"`` or ``"failed"``, the failed step,
        the reason): what ``Query.state()`` reports."""
        if self.failure is not None:
            return "failed", *self.failure
        if self.done.is_set():
            return "finished", None, None
        return ("recovering" if self._suspect.is_set() else "running"), None, None

    def output_from(self, i: int, timeout_s: float = 0.0) -> tuple[list[Any], bool, str | None]:
        """The released output from index ``i`` on (waiting up to ``timeout_s`` for some),
        whether the query is done, and its error."""
        with self.new_output:
            if i >= len(self.output) and not self.done.is_set() and timeout_s > 0:
                self.new_output.wait(timeout_s)
            return self.output[i:], self.done.is_set(), self.error

    def outcome(self, timeout_s: float | None = None) -> tuple[bool, str | None]:
        """Wait up to ``timeout_s`` for the end: (done, error)."""
        return self.done.wait(timeout_s), self.error

    # -- feeding --------------------------------------------------------------------------------
    def _feed(self, feeds: list[tuple[str, Iterator[bytes]]], epoch: int) -> None:
        try:
            steps = [step for step, _ in feeds]
            first = self.rounds_at(epoch) + 1
            for rounds, round_ in enumerate(round_robin([it for _, it in feeds]), first):
                if self.stop_event.is_set():
                    break
                live = False  # whether a feed may go on after this round
                for i, blob in round_:
                    if blob is not END:
                        live = True
                        self._send(("b", steps[i], blob))
                if live and (rounds - self.base_rounds) % self.every == 0:
                    epoch += 1
                    self._send(("e", epoch))
                if live and self.cut_asked.is_set():  # a savepoint: its barrier, no more
                    epoch += 1
                    self.cut_positions = self._at_cut()
                    self.mark_cut(epoch, rounds)
                    self._send(("e", epoch))
                    self.cut = (epoch, rounds)
                    return
            if not self.stop_event.is_set():
                self._send(("end",))
        except SourceFailed as exc:  # a source's data raised: that step fails the query
            self._fail(f"query {self.name!r} failed in {exc}", exc.step, str(exc))
            with self.lock:
                try:  # and its failure travels down the query, as a step's own does
                    self.handles[exc.step].fail.remote(0, str(exc))
                except Exception:  # noqa: BLE001 - its actor is gone: the query failed anyway
                    pass
        except Exception as exc:  # noqa: BLE001 - the source data failed: report it
            self._fail(f"feeding the sources failed: {type(exc).__name__}: {exc}", "sources")
        finally:
            self.cut_made.set()  # a savepoint waiting for the cut: made, or never will be

    def _send(self, entry: tuple[Any, ...]) -> None:
        with self.lock:
            if entry[0] == "e":
                self._trim()
            self.log.append(entry)
            try:
                self._deliver(entry)
            except Exception:  # noqa: BLE001 - an actor died: the watcher restarts and replays
                self._suspect.set()

    def _deliver(self, entry: tuple[Any, ...]) -> None:
        """Send one log entry to the current actors (called with the lock held)."""
        import ray

        if entry[0] == "b":
            _, step, blob = entry
            q = self._inflight[step]
            while len(q) >= self.max_in_flight:
                ray.get(q.popleft())
            q.append(self.handles[step].push.remote(0, blob))
        elif entry[0] == "e":
            for step, q in self._inflight.items():
                q.append(self.handles[step].barrier.remote(0, entry[1]))
        else:
            for step in self._inflight:
                self.handles[step].end.remote(0)

    def _trim(self) -> None:
        """Forget the log before the barrier of the committed epoch."""
        for i, e in enumerate(self.log):
            if e[0] == "e" and e[1] == self.committed:
                del self.log[:i + 1]
                return

    # -- collecting and watching ----------------------------------------------------------------
    def _watch(self) -> None:
        import ray

        while not self.stop_event.is_set():
            try:
                ref = self.handles[self.sink_step].fetch_from.remote(self.pos, FETCH_S)
                self.fetches += 1
                step, error = self.sink_step, None
                while True:  # the fetch, or a step that fails or dies meanwhile
                    ready, _ = ray.wait([ref, *self._renew_vigils()], num_returns=1)
                    if self.stop_event.is_set():
                        return
                    if ref in ready:
                        break
                    step, error = self._vigil_report()
                    if error is not None:
                        break
                dead = error is not None
                if not dead:
                    blob, nxt, epoch, finished, error = ray.get(ref)
                    msgs = decode(blob)
                    if msgs:  # saved before the next fetch acknowledges it
                        ck.save_output(self.root, self.name, self.pos, nxt, blob)
                        with self.new_output:
                            self.output.extend(msgs)
                            self.pos = nxt
                            self.new_output.notify_all()
                    if epoch > self.committed:
                        self.committed = epoch
                        ck.forget_before(self.root, self.name, epoch)
                    if finished and not msgs:
                        ck.save(ck.finished_path(self.root, self.name), self.pos)
                        self._finish()
                        return
                    dead = self._suspect.is_set() or error is not None
                    if not dead:
                        step, error = self._vigil_report()
                        dead = error is not None
                    elif error is not None:
                        step = self._step_error()[0]
                if dead and not self._alive():
                    if not self._recover_or_fail():
                        return
                elif error is not None:
                    self._fail(f"query {self.name!r} failed in {error}", step, error)
                    return
            except ray.exceptions.RayActorError:
                if self.stop_event.is_set():
                    return
                if not self._recover_or_fail():
                    return
            except Exception as exc:  # noqa: BLE001 - never die silently
                self._fail(f"the supervisor of {self.name!r} failed: {type(exc).__name__}: "
                           f"{exc}\n{traceback.format_exc()}", "~supervisor")
                return

    def _recover_or_fail(self) -> bool:
        """Recover; a recovery that fails (actors that cannot start, a run stopped or
        replaced meanwhile) fails the query with its reason instead of ending the watch
        silently. Returns whether the query goes on: not once it was stopped (its actors
        were killed on purpose) or has failed (a source that raised: nothing to replay)."""
        if self.stop_event.is_set() or self.failure is not None:
            return False
        try:
            self._recover()
            return True
        except Exception as exc:  # noqa: BLE001 - reported as the query's failure
            step, reason = getattr(exc, "step", "~supervisor"), getattr(exc, "reason", None)
            self._fail(f"query {self.name!r}: recovering failed: "
                       f"{reason or f'{type(exc).__name__}: {exc}'}", step,
                       reason or f"recovering failed: {type(exc).__name__}: {exc}")
            return False

    def _renew_vigils(self) -> list[Any]:
        """Every step's pending vigil, a new one for each step that has none."""
        for step, handle in self.handles.items():
            if step not in self._vigils:
                self._vigils[step] = handle.until_failed.remote(VIGIL_S)
        return list(self._vigils.values())

    def _vigil_report(self) -> tuple[str, str | None]:
        """(step, error) after the vigils that returned (without waiting): (sink, ``DEAD``)
        when an actor died, the first failed step in plan order (:meth:`_step_error`) when
        one failed, else (sink, None); a vigil that returned is renewed next time."""
        import ray

        refs = list(self._vigils.values())
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0) if refs else ([], [])
        failed = False
        for step, ref in list(self._vigils.items()):
            if ref in ready:
                del self._vigils[step]
                try:
                    failed = failed or ray.get(ref) is not None
                except ray.exceptions.RayActorError:
                    return self.sink_step, DEAD
        return self._step_error() if failed else (self.sink_step, None)

    def _step_error(self) -> tuple[str, str | None]:
        """(step, error) of the first step of the query (in plan order, so the one where a
        failure began) with an error (a failed checkpoint write, a UDM that raised), or
        "a step is dead"; error None when every step answers without one. An error that
        only upstream steps see (their output is gone) comes with a death, which
        :meth:`_alive` then finds."""
        import ray

        steps = list(self.handles)
        refs = [self.handles[s].error_info.remote() for s in steps]
        try:
            infos = ray.get(refs, timeout=10)
        except ray.exceptions.RayActorError:
            return self.sink_step, DEAD
        except ray.exceptions.GetTimeoutError:
            return self.sink_step, None  # busy, not dead
        return next(((s, error) for s, (error, _) in zip(steps, infos) if error is not None),
                    (self.sink_step, None))

    def _alive(self) -> bool:
        import ray

        refs = [h.ping.remote() for h in self.handles.values()]
        try:
            ray.get(refs, timeout=10)
        except ray.exceptions.RayActorError:
            return False
        except ray.exceptions.GetTimeoutError:
            return True  # busy, not dead
        return True

    def _finish(self) -> None:
        self.done.set()
        with self.new_output:
            self.new_output.notify_all()

    def _fail(self, message: str, step: str, reason: str | None = None) -> None:
        """Fail the query: ``message`` (what ``Query.wait()`` used to raise), ``step`` where it
        failed and ``reason`` (default: the message)."""
        if self.error is None:
            self.error = message
            self.failure = (step, reason or message)
        self._finish()

    def _recover(self) -> None:
        """Restart every actor from the newest complete epoch and replay the log after it."""
        import ray

        t0 = time.monotonic()
        self._suspect.set()
        with self.lock:
            for attempt in range(5):
                old = self.handles
                for h in old.values():
                    try:
                        ray.kill(h, no_restart=True)
                    except Exception:  # noqa: BLE001 - dead already
                        pass
                epoch = ck.latest_complete(self.root, self.name, self.steps)
                self.generation += 1
                try:
                    self.handles = self._start_actors(self.generation)
                    self._vigils = {}
                    self._configure(self.handles, epoch)
                    self._inflight = {s: deque() for s in self._inflight}
                    start = 0
                    for i, e in enumerate(self.log):
                        if e[0] == "e" and e[1] == epoch:
                            start = i + 1
                    replay = self.log[start:]
                    for entry in replay:
                        self._deliver(entry)
                except ray.exceptions.RayActorError:
                    if attempt == 4:
                        raise
                    continue
                break
            self._suspect.clear()
        self.recoveries.append({"recovery_s": time.monotonic() - t0, "epoch": epoch,
                                "replayed": len(replay), "generation": self.generation,
                                "output_position": self.pos})
        ck.save_recoveries(self.root, self.name, self.recoveries)
