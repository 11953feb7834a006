"""Where a streaming Spark source keeps its own state beside Spark's checkpoint.

Under a checkpoint location (a local path or a storage URI that ``pyarrow.fs`` opens), Spark
keeps the source's offsets and :class:`topology.spark.stream.SparkStreamFeeder` keeps
``cedar_feeder.pkl`` (the Ingress's snapshot, the last micro-batch id, the DataFrame's schema,
the committed runs and the held run) and ``cedar_run/<batch_id>.pkl`` (a held run's logged
micro-batches). This module names those files, deletes the log, and reads the state for
whoever asks about the stream from outside a run: :func:`stream_run` (the run token a sink
keys its commits by) and :func:`stream_records` (dead letters, late events, counters).
"""

from __future__ import annotations

from typing import Any

import pyarrow.fs as pafs

from actors.checkpoint import delete_location as delete_dir
from actors.checkpoint import join_location, open_location
from actors.checkpoint import load as load_checkpoint

__all__ = ["delete_dir", "delete_files_but", "join_location", "run_log_dir", "state_path",
           "stream_records", "stream_run"]


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
