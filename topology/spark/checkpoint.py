"""Where a streaming Spark source keeps its own state beside Spark's checkpoint.

Under a checkpoint location (a local path or a storage URI that ``pyarrow.fs`` opens), Spark
keeps the source's offsets and :class:`topology.spark.stream.SparkStreamFeeder` keeps
``cedar_feeder.pkl`` (the Ingress's snapshot, the last micro-batch id, the DataFrame's schema,
the committed runs and the held run) and ``cedar_run/<batch_id>.pkl`` (a held run's logged
micro-batches). This module names those files, keeps a held run's log (:class:`HeldRun`,
the feeder's part that logs, commits and cleans it), and reads the state for
whoever asks about the stream from outside a run: :func:`stream_run` (the run token a sink
keys its commits by) and :func:`stream_records` (dead letters, late events, counters).
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from actors.checkpoint import delete_location as delete_dir
from actors.checkpoint import join_location, open_location
from actors.checkpoint import load as load_checkpoint
from actors.files import atomic_write

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["HeldRun", "delete_dir", "delete_files_but", "join_location", "run_log_dir",
           "state_path", "stream_records", "stream_run"]


def state_path(checkpoint: str) -> str:
    """The feeder's state file under the checkpoint location ``checkpoint``."""
    return join_location(checkpoint, "cedar_feeder.pkl")


def run_log_dir(checkpoint: str) -> str:
    """The folder of a held run's logged micro-batches under ``checkpoint``."""
    return join_location(checkpoint, "cedar_run")


def delete_files_but(location: str, keep: set[str]) -> None:
    """Delete the files directly in folder ``location`` (a path or storage URI) whose names
    are not in ``keep``; nothing when it does not exist."""
    fs, where = open_location(location)
    try:
        infos = fs.get_file_info(pafs.FileSelector(where, allow_not_found=True))
    except (FileNotFoundError, OSError):
        return
    for info in infos:
        if info.type == pafs.FileType.File and info.base_name not in keep:
            try:
                fs.delete_file(info.path)
            except (FileNotFoundError, OSError):
                pass


def stream_run(checkpoint: str | None) -> int:
    """The number of held runs committed on the stream checkpointed at ``checkpoint`` (0 when
    nothing was, or without a checkpoint): the run token a sink keys its commits by."""
    if checkpoint is None:
        return 0
    try:
        return int(load_checkpoint(state_path(checkpoint)).get("run", 0))
    except FileNotFoundError:
        return 0


def stream_records(checkpoint: str) -> dict[str, Any]:
    """What the source of a stream checkpointed at ``checkpoint`` recorded, as of its last
    committed micro-batch: ``dead_letters`` (rows that could not become events, with the
    reason), ``late`` (late events dropped or adjusted), ``stats`` (the Ingress's counters)
    and ``last_batch_id``. Empty records if nothing was committed there yet."""
    try:
        state = load_checkpoint(state_path(checkpoint))
    except FileNotFoundError:
        return {"dead_letters": [], "late": [], "stats": {}, "last_batch_id": -1}
    ingress = state["ingress"]
    return {"dead_letters": list(ingress["dead_letters"]), "late": list(ingress["late"]),
            "stats": dict(ingress["stats"]), "last_batch_id": state["last_batch_id"]}


class HeldRun:
    """The held run of :class:`topology.spark.stream.SparkStreamFeeder` (its class doc, "A
    held run"): the micro-batches logged under :func:`run_log_dir`, the run's commit and the
    log's cleaning; the feeder keeps the attributes declared here."""

    checkpoint_location: str | None
    ingress: Any
    last_batch_id: int
    run: int
    _held: dict[str, Any] | None
    _saved_ingress: dict[str, Any] | None

    def _state_path(self) -> str:
        return state_path(self.checkpoint_location or "")

    def _save_state(self) -> None:
        raise NotImplementedError

    @property
    def holding(self) -> bool:
        """Whether a held run is under way, not committed."""
        return self._held is not None

    def _log_batch(self, table: pa.Table, batch_id: int, start: dict[str, Any]) -> None:
        """Log a held run's micro-batch before its id is saved (and so before Spark may
        commit it); ``start`` is the Ingress's state at the run's start."""
        if self._held is None:
            self._held = {"ingress": start, "batches": []}
        atomic_write(join_location(self._run_dir(), f"{batch_id}.pkl"),
                     pickle.dumps(table, protocol=pickle.HIGHEST_PROTOCOL))
        self._held["batches"].append(batch_id)

    def _run_dir(self) -> str:
        return run_log_dir(self.checkpoint_location or "")

    def commit_run(self) -> None:
        """The consumer made the held run's output durable: the run is over. The Ingress's
        state after the run's last micro-batch becomes the next run's start (not the run's
        end CTI: the end of a run is not the end of the stream), the log is dropped and
        :attr:`run` counts one more. Without a checkpoint location, nothing to do."""
        if self.checkpoint_location is None:
            return
        try:
            on_disk = load_checkpoint(self._state_path())
        except FileNotFoundError:
            on_disk = {"run": 0, "last_batch_id": -1}
        if (on_disk.get("run", 0), on_disk["last_batch_id"]) != (self.run, self.last_batch_id):
            raise RuntimeError(
                f"SparkStreamFeeder.commit_run: the stream checkpointed at "
                f"{self.checkpoint_location!r} went on after this run (a later run over it "
                f"replayed or committed it); this run's commit would undo that")
        if self._saved_ingress is not None:
            self.ingress.restore(self._saved_ingress)
        self._held = None
        self.run += 1
        self._save_state()  # the commit (one atomic write); the log is no longer needed
        # (a kill before it is deleted leaves it to the next run: :meth:`_clean_log`)
        delete_dir(self._run_dir())

    def _clean_log(self) -> None:
        """Delete the micro-batch logs no held run replays: those a run left when it was
        killed after its commit and before it deleted them (never read again, they were
        only leaked)."""
        if self.checkpoint_location is None:
            return
        keep = set() if self._held is None else {f"{b}.pkl" for b in self._held["batches"]}
        if keep:
            delete_files_but(self._run_dir(), keep)
        else:
            delete_dir(self._run_dir())
