"""Whole files written atomically: a reader sees all of a file or none of it.

Every writer here writes under a temporary name beside the target (``.tmp-<random>``: hidden,
so Spark, pyarrow datasets and ``glob("*.parquet")`` skip it) and moves it into place; a rename
within one folder is atomic. :func:`atomic_path` serves writers that need a path (a parquet
writer); :func:`atomic_write` writes bytes, to a local path or to a storage URI that
``pyarrow.fs`` opens (``s3://...``, ``gs://...``, ``hdfs://...``).

    >>> import tempfile
    >>> where = os.path.join(tempfile.mkdtemp(), "a", "state.bin")
    >>> atomic_write(where, b"all or nothing")
    >>> open(where, "rb").read(), os.listdir(os.path.dirname(where))
    (b'all or nothing', ['state.bin'])
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import pyarrow.fs as pafs

__all__ = ["TMP_PREFIX", "atomic_path", "atomic_write", "temp_path"]

#: How a temporary name starts: a folder's owner may delete what a crash left behind.
TMP_PREFIX = ".tmp-"


def temp_path(path: str) -> str:
    """A fresh temporary name in the folder of ``path``."""
    return os.path.join(os.path.dirname(path), f"{TMP_PREFIX}{uuid.uuid4().hex}")


@contextlib.contextmanager
def atomic_path(path: str, durable: bool = True) -> Iterator[str]:
    """Yields a temporary local path to write the file to; on success the file is moved to
    ``path`` (synced to disk first when ``durable``: after a crash it is there whole or not at
    all), on failure it is removed."""
    tmp = temp_path(path)
    try:
        yield tmp
        if durable:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


#: Storage schemes whose objects appear whole when their upload completes (and which have no
#: real folders): written in place, without a temporary object and a move.
OBJECT_STORES = ("s3", "gs", "gcs")


def atomic_write(location: str, data: bytes, durable: bool = True) -> None:
    """Write ``data`` as the whole file ``location`` (a local path or a storage URI), making
    its folder if need be. An object store's put is atomic already: there the object is
    written in place, which costs one request instead of three (folder, put, and a move that
    is a copy and a delete)."""
    if "://" not in location:
        os.makedirs(os.path.dirname(os.path.abspath(location)), exist_ok=True)
        with atomic_path(location, durable) as tmp, open(tmp, "wb") as f:
            f.write(data)
        return
    fs, where = pafs.FileSystem.from_uri(location)
    if location.split("://", 1)[0].lower() in OBJECT_STORES:
        with fs.open_output_stream(where) as f:
            f.write(data)
        return
    fs.create_dir(where.rsplit("/", 1)[0], recursive=True)
    tmp = temp_path(where)
    with fs.open_output_stream(tmp) as f:
        f.write(data)
    fs.move(tmp, where)
