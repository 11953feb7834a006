"""Savepoints: a checkpointed query cut at one barrier, its state written where the user says.

A savepoint is a checkpoint the user asks for (``Query.stop(savepoint=PATH)``), taken by the
same barriers (:mod:`actors.checkpoint`, :mod:`actors.barrier`): :func:`take` asks the
supervisor's feeder to stop after the round it is feeding, send one more barrier (epoch
``e``, behind every batch fed) and feed nothing after it. Once every stage wrote its file of
``e`` (the sink last), the cut is consistent: every stage's state is its state after exactly
the rounds fed, and the sink's state holds the output position ``p`` up to which it emitted.
:func:`take` waits until the supervisor has fetched (and saved) the output up to ``p``, then
copies the files of ``e`` to the savepoint's location, and writes its record last:

``<location>/<step>.pkl``
    each step's state at the cut, as its checkpoint wrote it (processor snapshot, counters,
    the sink's unacknowledged output);
``<location>/savepoint.pkl``
    the record (:data:`RECORD`): the query, the epoch, the rounds of the sources fed (their
    input positions: a restored run reads them again from their beginning and skips these
    rounds, which needs the same ``batch_size``), the ``positions`` of the sources that go
    on from a position of their own (a Spark stream's checkpoint), the output position,
    each step's plan fingerprints (upstream and own: :mod:`topology.running.upgrades`
    matches a changed plan's steps by them) and when it was taken. A location without it
    holds no (complete) savepoint: a savepoint written over another deletes the other's
    record first, and one whose writing fails (:class:`SavepointFailed`) leaves none.

``<location>`` is a local path or a storage URI, as ``checkpoint_dir`` takes.
``deploy(..., restore=PATH)`` (:mod:`topology.running.savepoints`) starts from it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from . import checkpoint as ck
from .files import atomic_write

#: The record's file name in a savepoint's location.
RECORD = "savepoint.pkl"
#: The file, in the query's checkpoint folder, of the cut the feeder made: (epoch, rounds).
CUT = "cut.pkl"
#: Seconds between two looks at the storage while a savepoint's epoch is being written.
POLL_S = 0.05


class SavepointFailed(RuntimeError):
    """``Query.stop(savepoint=...)`` could not take the savepoint; the message says why."""


def step_location(location: str, step: str) -> str:
    """The file of ``step``'s state in the savepoint at ``location``."""
    return ck.join_location(location, ck._safe(step) + ".pkl")


def record_location(location: str) -> str:
    return ck.join_location(location, RECORD)


def cut_location(root: str, query: str) -> str:
    """The file of the cut the feeder of ``query`` made last (:data:`CUT`)."""
    return ck.join_location(ck.query_dir(root, query), CUT)


def copy_file(src: str, dst: str) -> None:
    """Copy one file between any two locations (local paths or storage URIs), atomically."""
    fs, where = ck.open_location(src)
    with fs.open_input_stream(where) as f:
        atomic_write(dst, f.read())


class SavepointCut:
    """The supervisor's part in savepoints (:class:`~actors.supervisor.Supervisor` is one):
    where its run began, and the cut its feeder makes when :meth:`savepoint` asks."""

    name: str
    root: str
    steps: list[str]
    sink_step: str
    every: int
    batch_size: int
    pos: int
    failure: tuple[str, str] | None
    done: threading.Event
    new_output: threading.Condition

    def _init_cut(self, base: tuple[int, int, int], at_cut: Callable[[], dict[str, Any]],
                  wake: Callable[[], None]) -> None:
        #: called by the feeder at the cut: stops the sources that keep a position of their
        #: own (a Spark stream's checkpoint) and returns their positions
        self._at_cut = at_cut
        #: called when a savepoint is asked: a source waiting for data yields an empty
        #: batch, so that the feeder reaches the cut
        self.wake_sources = wake
        #: where the run began: (epoch, rounds fed, output position) of the savepoint it
        #: was restored from, else zeros
        self.base_epoch, self.base_rounds, self.base_pos = base
        #: a savepoint's cut: asked, and made by the feeder ((epoch, rounds) of the cut's
        #: barrier in :attr:`cut`; None: the input ended or failed first)
        self.cut_asked, self.cut_made = threading.Event(), threading.Event()
        self.cut: tuple[int, int] | None = None
        #: the positions of the sources that keep their own, at the cut (the ``at_cut``
        #: of :class:`~actors.supervisor.Supervisor`)
        self.cut_positions: dict[str, Any] = {}

    def rounds_at(self, epoch: int) -> int:
        """The rounds of the sources fed when barrier ``epoch`` went in (counted from their
        beginning, a restored run's included)."""
        return self.base_rounds + (epoch - self.base_epoch) * self.every

    def mark_cut(self, epoch: int, rounds: int) -> None:
        """Keep the cut (its barrier ``epoch`` after ``rounds`` rounds) beside the
        checkpoints, before its barrier goes in: that epoch ends after ``rounds``, not
        after a multiple of ``every``, which a supervisor resuming from it (its host
        lost while the savepoint was written) must know (:meth:`resume_cut`)."""
        ck.save(cut_location(self.root, self.name), (epoch, rounds))

    def resume_cut(self, epoch: int) -> None:
        """Resuming from ``epoch``: a cut at or before it is where the epochs since count
        their rounds from (:meth:`rounds_at`); a cut after it never completed, and is
        forgotten (a later epoch of that number is an ordinary one)."""
        where = cut_location(self.root, self.name)
        try:
            cut: tuple[int, int] = ck.load(where)
        except (FileNotFoundError, OSError):
            return
        if cut[0] <= epoch:
            self.base_epoch, self.base_rounds = cut
        else:
            fs, path = ck.open_location(where)
            fs.delete_file(path)

    def manifest(self) -> dict[str, Any]:
        raise NotImplementedError

    def savepoint(self, location: str, timeout_s: float = 60.0) -> dict[str, Any]:
        """Cut the query, write its savepoint to ``location`` and return its record; the
        query is fed no more (:func:`take`)."""
        return take(self, location, timeout_s)


def inside_checkpoints(location: str, root: str, query: str) -> bool:
    """Whether ``location`` lies in the checkpoint folder of ``query`` under ``root``, which
    a deploy of that name deletes."""
    folder = ck.query_dir(root, query).partition("?")[0].rstrip("/")
    return (location.partition("?")[0].rstrip("/") + "/").startswith(folder + "/")


def take(sup: SavepointCut, location: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """Cut the query ``sup`` runs at one barrier, write its savepoint to ``location`` and
    return the record (see the module docstring). The sources are fed nothing more.
    Raises :class:`SavepointFailed` when the query has ended, failed or does not reach the
    cut within ``timeout_s``, or ``location`` is in the query's checkpoint folder."""
    began = time.monotonic()
    deadline = began + timeout_s
    if inside_checkpoints(location, sup.root, sup.name):
        raise SavepointFailed(
            f"query {sup.name!r}: the savepoint location {location!r} is inside the query's "
            f"checkpoint folder {ck.query_dir(sup.root, sup.name)!r}, which the next deploy "
            f"of {sup.name!r} deletes; give a location outside it")
    if sup.done.is_set():
        raise SavepointFailed(_ended(sup))
    sup.cut_asked.set()
    sup.wake_sources()  # a source waiting for data: an empty batch, and the cut after it
    if not sup.cut_made.wait(max(0.0, deadline - time.monotonic())):
        raise SavepointFailed(
            f"query {sup.name!r}: its sources did not finish their current batch within "
            f"{timeout_s:.0f} s (a source waiting for data); try again when data comes, "
            f"or stop it without a savepoint")
    if sup.cut is None:
        raise SavepointFailed(_ended(sup))
    epoch, rounds = sup.cut
    sink_file = ck.stage_path(sup.root, sup.name, epoch, sup.sink_step)
    while ck.latest_complete(sup.root, sup.name, sup.steps) < epoch:
        _check(sup, deadline, timeout_s, f"the barrier of epoch {epoch} to reach every step")
        time.sleep(POLL_S)
    sink = ck.load(sink_file)
    position = sink["released_base"] + len(sink["released"])
    with sup.new_output:  # every output before the cut delivered (and saved) first
        while sup.pos < position:
            _check(sup, deadline, timeout_s, f"the output up to position {position}")
            sup.new_output.wait(POLL_S)
    manifest = sup.manifest()
    record = {"query": sup.name, "epoch": epoch, "rounds": rounds, "output_position": position,
              "batch_size": sup.batch_size, "steps": list(sup.steps), "sink": sup.sink_step,
              "fingerprints": dict(manifest.get("fingerprints", {})),
              "own_fingerprints": dict(manifest.get("own_fingerprints", {})),
              "source_fingerprints": dict(manifest.get("source_fingerprints", {})),
              "fingerprint": manifest.get("fingerprint"), "positions": sup.cut_positions,
              "taken": None, "took_s": None}
    try:
        # a savepoint written over another: not one until its own record is written (else
        # a writing cut short would leave the other's record over a mix of both's files)
        _delete(record_location(location))
        for step in sup.steps:
            copy_file(ck.stage_path(sup.root, sup.name, epoch, step),
                      step_location(location, step))
        record.update(taken=time.time(), took_s=time.monotonic() - began)
        ck.save(record_location(location), record)  # last: the savepoint is complete
    except OSError as exc:
        raise SavepointFailed(
            f"query {sup.name!r}: writing its savepoint to {location!r} failed: "
            f"{type(exc).__name__}: {exc}; {location!r} holds no savepoint now (the query "
            f"is fed no more: stop it, and deploy it again from another savepoint or from "
            f"the start)") from exc
    return record


def _delete(location: str) -> None:
    fs, where = ck.open_location(location)
    try:
        fs.delete_file(where)
    except FileNotFoundError:
        pass  # none


def _check(sup: SavepointCut, deadline: float, timeout_s: float, what: str) -> None:
    if sup.failure is not None:
        raise SavepointFailed(f"query {sup.name!r} failed while its savepoint was taken: "
                              f"step {sup.failure[0]}: {sup.failure[1]}")
    if time.monotonic() > deadline:
        raise SavepointFailed(f"query {sup.name!r}: waited {timeout_s:.0f} s for {what}; "
                              f"the savepoint was not written (the query is fed no more: "
                              f"stop it, and deploy it again from its last savepoint or "
                              f"from the start)")


def _ended(sup: SavepointCut) -> str:
    if sup.failure is not None:
        return (f"query {sup.name!r} failed (step {sup.failure[0]}: {sup.failure[1]}): a "
                f"failed query has no consistent cut to save; stop it without a savepoint")
    return (f"query {sup.name!r}: its input ended before the cut, so its output is complete "
            f"and there is nothing to resume; stop it without a savepoint")


def load_record(location: str) -> dict[str, Any]:
    """The record of the savepoint at ``location``; ValueError saying what to do when there
    is none."""
    try:
        record: dict[str, Any] = ck.load(record_location(location))
    except (FileNotFoundError, OSError):
        raise ValueError(
            f"restore={location!r}: no savepoint there (no {RECORD}: none was taken there, or "
            f"its writing did not finish); take one with Query.stop(savepoint=PATH) or "
            f"`cedar stop NAME --savepoint PATH`") from None
    return record


def seed(location: str, root: str, query: str, record: dict[str, Any]) -> None:
    """Write the savepoint's state into the checkpoints of ``query`` under ``root`` as the
    epoch it was cut at: the restored run's first complete epoch, from which it starts and
    restarts until it checkpoints a newer one. Each step of the restored plan takes the
    state of the savepoint's step ``record["mapping"]`` names (its own, or one the planner
    numbered otherwise), or, named None, starts as a new processor
    (``record["fresh"][step]``, its snapshot) that has seen nothing, or, a partition of a
    rescaled group_apply or a source stage keeping only its source's, the state
    ``record["made"]`` holds; without a mapping
    (the same plan) each step takes its own."""
    epoch = record["epoch"]
    mapping = record.get("mapping") or {step: step for step in record["steps"]}
    made = record.get("made") or {}
    for step, old in mapping.items():
        target = ck.stage_path(root, query, epoch, step)
        if step in made:  # made from the savepoint's (upgrades.made_states)
            ck.save(target, {**made[step], "epoch": epoch})
        elif old == step:
            copy_file(step_location(location, step), target)
        elif old is not None:  # the planner numbered it otherwise: its file, under its id
            ck.save(target, {**ck.load(step_location(location, old)), "step": step})
        else:
            ck.save(target, fresh_state(step, epoch, record["fresh"][step]))


def fresh_state(step: str, epoch: int, proc: Any) -> dict[str, Any]:
    """The checkpoint of a step that has seen nothing, at ``epoch``: what
    :meth:`~actors.checkpointing.Checkpointing._checkpoint` would write of a new one."""
    from operators.events import MIN_TIME

    return {"step": step, "epoch": epoch, "proc": proc,
            "counts": {"events_in": 0, "events_out": 0, "batches_in": 0, "batches_out": 0},
            "out_cti": MIN_TIME, "released": [], "released_base": 0}
