"""Checkpoint files: one pickled state per stage and epoch, written atomically.

Layout: ``<dir>/<query>/<epoch>/<step>.pkl`` (a step id's ``/`` and ``#`` are kept out of file
names). An epoch is *complete* when every stage of the query wrote its file; the sink writes
last (the barrier reaches it after every stage upstream), so its file marks the epoch complete
and :func:`latest_complete` only double-checks the others. ``<dir>`` is any path the Ray
workers and the driver can both reach (a local directory on one machine, a shared mount on a
cluster).

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> save(stage_path(d, "q", 1, "window#2"), {"x": 1})
    >>> latest_complete(d, "q", ["window#2"]), load(stage_path(d, "q", 1, "window#2"))
    (1, {'x': 1})
"""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Iterable
from typing import Any


def _safe(step: str) -> str:
    return step.replace("/", "_").replace("#", "-")


def query_dir(root: str, query: str) -> str:
    return os.path.join(root, _safe(query))


def stage_path(root: str, query: str, epoch: int, step: str) -> str:
    """The file of ``step``'s state at the end of ``epoch``."""
    return os.path.join(query_dir(root, query), str(epoch), _safe(step) + ".pkl")


def save(path: str, state: Any) -> None:
    """Write ``pickle(state)`` to ``path`` atomically (a reader sees all of it or nothing)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(state, f, protocol=5)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load(path: str) -> Any:
    with open(path, "rb") as f:
        return pickle.load(f)


def epochs(root: str, query: str) -> list[int]:
    """The epochs that have a directory, ascending."""
    try:
        names = os.listdir(query_dir(root, query))
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


def latest_complete(root: str, query: str, steps: Iterable[str]) -> int:
    """The newest epoch every step of ``steps`` wrote (0: none, start from scratch)."""
    steps = list(steps)
    for epoch in reversed(epochs(root, query)):
        if all(os.path.exists(stage_path(root, query, epoch, s)) for s in steps):
            return epoch
    return 0


def forget_before(root: str, query: str, epoch: int) -> None:
    """Delete the epochs older than ``epoch`` (no restart will need them)."""
    for e in epochs(root, query):
        if e < epoch:
            shutil.rmtree(os.path.join(query_dir(root, query), str(e)), ignore_errors=True)


def forget(root: str, query: str) -> None:
    """Delete every checkpoint of ``query``."""
    shutil.rmtree(query_dir(root, query), ignore_errors=True)
