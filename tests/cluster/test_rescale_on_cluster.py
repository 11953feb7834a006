"""Rescaling on the three-node cluster (see ``conftest.py``): the savepoint and rescale tests
of ``tests/deploy/test_rescale.py`` again, their partitions spread over the nodes, and one
rescale whose partitions are checked to land on more than one node."""

from __future__ import annotations

import tests.deploy.test_rescale as rescale
from tests.deploy.test_rescale import N, rescaled_while_running
from topology.running.registry import actor_nodes

# the same test functions, collected here so that they use this folder's ray_session
globals().update({k: v for k, v in vars(rescale).items() if k.startswith("test_")})


def test_a_rescale_spreads_the_new_partitions_over_the_nodes(ray_session, cluster, tmp_path):
    def spread(wider):
        parts = [s for s in wider.steps if s.endswith("]")]
        nodes = actor_nodes("rescale-spread")
        assert len(parts) == 3 and len({nodes[s] for s in parts}) > 1, nodes

    rescaled_while_running("rescale-spread", tmp_path, 3, N // 2, spread)
