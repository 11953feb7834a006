"""A real multi-node Ray cluster on this machine: a head and two worker nodes, each with its
own raylet and object store (``ray.cluster_utils.Cluster``).

A process can be connected to one Ray cluster only, and the rest of the suite shares one local
instance; so the tests in this folder run in a pytest process of their own, which
``tests/test_cluster.py`` starts with ``CEDAR_CLUSTER=1``. Here ``ray_session`` is the cluster,
so every test body that asks for it (or for the ``runtime`` fixture) runs on three nodes.
"""

from __future__ import annotations

import os

import pytest

from tests.conftest import REPO

if not os.environ.get("CEDAR_CLUSTER"):
    # collected only in the process tests/test_cluster.py starts
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def cluster():
    from ray.cluster_utils import Cluster

    path = os.environ.get("PYTHONPATH", "")
    if REPO not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, path) if p)
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    workers = [c.add_node(num_cpus=2) for _ in range(2)]
    c.wait_for_nodes()
    yield c, workers
    c.shutdown()


@pytest.fixture(scope="session")
def ray_session(cluster):
    import ray

    ray.init(address=cluster[0].address, namespace="cedar", logging_level="WARNING")
    yield ray
    from topology.running.deploy import release_pool

    release_pool()
    ray.shutdown()
