"""Checkpoint files: one pickled state per stage and epoch, written atomically, on any storage.

Layout: ``<root>/<query>/<epoch>/<step>.pkl`` (a step id's ``/``, ``#`` and brackets are kept
out of file names); ``<root>/<query>/output/<from>-<to>.bin``: the output the supervisor
fetched, positions ``[from, to)`` as the sink encoded them, so that a supervisor started afresh
(its actor lost) still has every row released before; ``<root>/<query>/job.pkl``: what a
deployed query's host runs (:mod:`actors.host`).

An epoch is *complete* when every stage of the query wrote its file; the sink writes last (the
barrier reaches it after every stage upstream), so its file marks the epoch complete and
:func:`latest_complete` only double-checks the others.

``<root>`` is where every node of the cluster and the driver can read and write: a local
directory on one machine, a shared mount, or a storage URI that ``pyarrow.fs`` opens —
``s3://bucket/prefix``, ``gs://...``, ``hdfs://...`` (options and credentials in the URI, e.g.
``s3://KEY:SECRET@bucket/ckpt?endpoint_override=host:9000&scheme=http`` for an S3-compatible
server). A file appears whole or not at all (:func:`actors.files.atomic_write`).

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> save(stage_path(d, "q", 1, "window#2"), {"x": 1})  # the bytes written
    21
    >>> latest_complete(d, "q", ["window#2"]), load(stage_path(d, "q", 1, "window#2"))
    (1, {'x': 1})
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterable
from typing import Any

import pyarrow.fs as pafs

from .files import atomic_write


def _safe(step: str) -> str:
    """A step id as a file name any storage URI takes (``group_apply#3[0]`` →
    ``group_apply-3.0``)."""
    return step.replace("/", "_").replace("#", "-").replace("[", ".").replace("]", "")


def normalize(root: str) -> str:
    """A root every process reads the same way: a URI as it is, a local path made absolute."""
    return root if "://" in root else os.path.abspath(root)


def join_location(location: str, *parts: str) -> str:
    """``location/part/...`` for a local path or a storage URI (its ``?options`` kept last).

    >>> join_location("s3://bucket/ckpt/?endpoint_override=localhost:9000", "cedar_feeder.pkl")
    's3://bucket/ckpt/cedar_feeder.pkl?endpoint_override=localhost:9000'
    """
    base, sep, options = location.partition("?")
    if "://" in base:
        return "/".join([base.rstrip("/"), *parts]) + sep + options
    return os.path.join(base, *parts) + sep + options


def open_location(location: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of ``location`` (a local path or a storage URI) and the path in it."""
    if "://" in location:
        return pafs.FileSystem.from_uri(location)
    return pafs.LocalFileSystem(), os.path.abspath(location)


def query_dir(root: str, query: str) -> str:
    return join_location(root, _safe(query))


def stage_path(root: str, query: str, epoch: int, step: str) -> str:
    """The file of ``step``'s state at the end of ``epoch``."""
    return join_location(root, _safe(query), str(epoch), _safe(step) + ".pkl")


def save(path: str, state: Any) -> int:
    """Write ``pickle(state)`` to ``path`` atomically (a reader sees all of it or nothing);
    returns the bytes written."""
    blob = pickle.dumps(state, protocol=5)
    atomic_write(path, blob)
    return len(blob)


def load(path: str) -> Any:
    fs, where = open_location(path)
    with fs.open_input_stream(where) as f:
        return pickle.loads(f.read())


def epochs(root: str, query: str) -> list[int]:
    """The epochs that have a directory, ascending."""
    fs, where = open_location(query_dir(root, query))
    infos = fs.get_file_info(pafs.FileSelector(where, allow_not_found=True))
    names = [i.base_name for i in infos if i.type == pafs.FileType.Directory]
    return sorted(int(n) for n in names if n.isdigit())


def latest_complete(root: str, query: str, steps: Iterable[str]) -> int:
    """The newest epoch every step of ``steps`` wrote (0: none, start from scratch)."""
    steps = list(steps)
    fs, _ = open_location(query_dir(root, query))
    for epoch in reversed(epochs(root, query)):
        files = [open_location(stage_path(root, query, epoch, s))[1] for s in steps]
        if all(i.type == pafs.FileType.File for i in fs.get_file_info(files)):
            return epoch
    return 0


def job_path(root: str, query: str) -> str:
    """Where a deployed query's host finds its job (:mod:`actors.host`)."""
    return join_location(root, _safe(query), "job.pkl")


def output_path(root: str, query: str, first: int, end: int) -> str:
    """The file of the released output at positions ``[first, end)``."""
    return join_location(root, _safe(query), "output", f"{first:016d}-{end:016d}.bin")


def save_output(root: str, query: str, first: int, end: int, blob: Any) -> None:
    """Save the sink's encoded output at positions ``[first, end)``."""
    save(output_path(root, query, first, end), blob)


def load_output(root: str, query: str, first_pos: int = 0) -> list[tuple[int, int, Any]]:
    """Every saved output part as ``(from, to, blob)``, in order, contiguous from
    ``first_pos`` (a run restored from a savepoint begins at the savepoint's position)."""
    fs, where = open_location(join_location(root, _safe(query), "output"))
    infos = fs.get_file_info(pafs.FileSelector(where, allow_not_found=True))
    parts = []
    for info in infos:
        stem = info.base_name.removesuffix(".bin")
        first, _, end = stem.partition("-")
        if info.type == pafs.FileType.File and first.isdigit() and end.isdigit():
            parts.append((int(first), int(end), info.path))
    out, pos = [], first_pos
    for first, end, path in sorted(parts):
        if first != pos:
            raise ValueError(f"the saved output of query {query!r} has a gap at position {pos}"
                             f" (next part starts at {first}): {where}")
        with fs.open_input_stream(path) as f:
            out.append((first, end, pickle.loads(f.read())))
        pos = end
    return out


def forget_before(root: str, query: str, epoch: int) -> None:
    """Delete the epochs older than ``epoch`` (no restart will need them)."""
    for e in epochs(root, query):
        if e < epoch:
            delete_location(join_location(root, _safe(query), str(e)))


def forget(root: str, query: str) -> None:
    """Delete every checkpoint of ``query``."""
    delete_location(query_dir(root, query))


def delete_location(location: str) -> None:
    """Delete the folder ``location`` (a path or storage URI) and what it holds; nothing when
    it does not exist."""
    fs, where = open_location(location)
    try:
        fs.delete_dir(where)
    except (FileNotFoundError, OSError):
        pass  # gone already


# -- the claim on a query's name (topology/running/deploy.py) --------------------------------------
def claim_path(root: str, query: str) -> str:
    """The claim file of a deployed query's name: beside its folder, which a new run deletes."""
    return join_location(root, _safe(query) + ".claim")


def claim(root: str, query: str, record: dict[str, Any]) -> dict[str, Any] | None:
    """Create the claim file of ``query`` holding ``record``, only if there is none: returns
    None when this call created it, else the record already there. On a local path (or a
    shared mount) the file appears whole and exactly one of two racing claims wins (a hard
    link of a finished file, which fails if the name exists). ``pyarrow.fs`` offers no
    create-if-absent on other storage, so there the check and the write are two steps."""
    import json

    path = claim_path(root, query)
    data = json.dumps(record).encode()
    if "://" not in path:
        from .files import temp_path

        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = temp_path(path)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return read_claim(root, query) or {}
        finally:
            os.remove(tmp)
        return None
    held = read_claim(root, query)
    if held is not None:
        return held
    atomic_write(path, data)
    return None


def read_claim(root: str, query: str) -> dict[str, Any] | None:
    """The record of ``query``'s claim file, or None when there is none."""
    import json

    fs, where = open_location(claim_path(root, query))
    try:
        with fs.open_input_stream(where) as f:
            out: dict[str, Any] = json.loads(f.read() or b"{}")
            return out
    except (FileNotFoundError, OSError):
        return None


def release_claim(root: str, query: str, token: str | None) -> None:
    """Delete ``query``'s claim file if it holds ``token`` (any claim when ``token`` is None)."""
    held = read_claim(root, query)
    if held is None or (token is not None and held.get("token") != token):
        return
    fs, where = open_location(claim_path(root, query))
    try:
        fs.delete_file(where)
    except (FileNotFoundError, OSError):
        pass


def recoveries_path(root: str, query: str) -> str:
    """The record of a checkpointed query's recoveries, kept across restarts of its host."""
    return join_location(root, _safe(query), "recoveries.pkl")


def load_recoveries(root: str, query: str) -> list[dict[str, Any]]:
    """The recoveries :func:`save_recoveries` kept (none: an empty list)."""
    try:
        return list(load(recoveries_path(root, query)))
    except (FileNotFoundError, OSError):
        return []


def save_recoveries(root: str, query: str, recoveries: list[dict[str, Any]]) -> None:
    """Keep the recoveries beside the checkpoints: a restarted host counts on from them."""
    save(recoveries_path(root, query), list(recoveries))


def finished_path(root: str, query: str) -> str:
    """The mark of a query whose whole output is saved: its input ended and the sink
    released the last of it (released at the end without a checkpoint, so a run resumed
    from the last epoch would release that output again)."""
    return join_location(root, _safe(query), "finished.pkl")


def has_finished(root: str, query: str) -> bool:
    fs, where = open_location(finished_path(root, query))
    return bool(fs.get_file_info(where).type == pafs.FileType.File)
