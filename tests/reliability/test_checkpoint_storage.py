"""Checkpoints on a real S3-compatible server (moto's standalone server, started here), reached
through ``pyarrow.fs`` like any object store: the files, and a checkpointed query that loses an
actor and recovers from the checkpoint in the bucket."""

from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from actors import checkpoint as ck
from tests.reliability.test_recovery import check_exactly_once, run_with_kill, window_join


def _objects(root: str) -> list[str]:
    fs, path = pafs.FileSystem.from_uri(root)
    return sorted(i.path for i in fs.get_file_info(pafs.FileSelector(path, recursive=True,
                                                                     allow_not_found=True))
                  if i.type == pafs.FileType.File)


def test_checkpoint_files_on_an_object_store(s3_root):
    ck.save(ck.stage_path(s3_root, "q", 1, "window#2"), {"x": 1})
    ck.save(ck.stage_path(s3_root, "q", 2, "window#2"), {"x": 2})
    ck.save(ck.stage_path(s3_root, "q", 3, "join#4"), {"only": "part of epoch 3"})
    # a partition's step id has brackets, which a URI does not take as they are
    ck.save(ck.stage_path(s3_root, "p", 1, "group_apply#3[0]"), {"partition": 0})
    assert ck.load(ck.stage_path(s3_root, "p", 1, "group_apply#3[0]")) == {"partition": 0}
    assert ck.epochs(s3_root, "q") == [1, 2, 3]
    assert ck.latest_complete(s3_root, "q", ["window#2"]) == 3 - 1  # 3 lacks window#2
    assert ck.load(ck.stage_path(s3_root, "q", 2, "window#2")) == {"x": 2}
    ck.forget_before(s3_root, "q", 2)
    assert ck.epochs(s3_root, "q") == [2, 3]
    assert not any(p.endswith(".tmp") for p in _objects(s3_root))
    ck.forget(s3_root, "q")
    assert ck.epochs(s3_root, "q") == []


@pytest.mark.slow
def test_a_query_recovers_from_checkpoints_in_the_bucket(ray_session, s3_root):
    expected = window_join(20_000).collect(runtime="inline")
    out, _, recs = run_with_kill("s3-recovery", window_join(20_000), s3_root, "ray",
                                 "group_apply", 3_000, epoch=1)
    check_exactly_once(out, expected)
    assert recs and recs[0]["epoch"] >= 1  # restored from a checkpoint in the bucket
