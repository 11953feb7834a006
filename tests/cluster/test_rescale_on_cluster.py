"""Rescaling on the three-node cluster (see ``conftest.py``): the savepoint and rescale tests
of ``tests/deploy/test_rescale.py`` again, their partitions spread over the nodes, and one
rescale whose partitions are checked to land on more than one node."""

from __future__ import annotations

import tests.deploy.test_rescale as rescale
from operators.cht import to_cht, validate
from tests.deploy.test_rescale import N, query, rows, slow, wait_rows
from tests.deploy.test_savepoint import BATCH
from topology.running.registry import actor_nodes

# the same test functions, collected here so that they use this folder's ray_session
globals().update({k: v for k, v in vars(rescale).items() if k.startswith("test_")})


def test_a_rescale_spreads_the_new_partitions_over_the_nodes(ray_session, cluster, tmp_path):
    live = query(slow(), 2).deploy("rescale-spread", checkpoint_dir=str(tmp_path / "ckpt"),
                                   batch_size=BATCH, checkpoint_every=4)
    try:
        wait_rows(live, N // 2)
        wider = live.rescale(3, str(tmp_path / "savepoint"))
    except BaseException:
        live.stop()
        raise
    try:
        parts = [s for s in wider.steps if s.endswith("]")]
        nodes = actor_nodes("rescale-spread")
        assert len(parts) == 3 and len({nodes[s] for s in parts}) > 1, nodes
        assert wider.wait(120)
        every = live.output() + wider.output()
    finally:
        wider.stop()
    validate(every, name="the output before and after")
    assert sorted(to_cht(every)) == sorted(to_cht(query(rows(), 1).collect(runtime="inline")))
