"""The runtime tests of the suite, run again on a three-node cluster (see ``conftest.py``):
results must equal the inline runtime's. Plus where the actors ran, and node loss. (The
operators' differential tests are not run again here: they prove the operators, which the
cluster does not change, and the runtime tests prove the placement and transport.)"""

from __future__ import annotations

import random

import pytest

import tests.topology.test_runtimes as runtimes
from operators.aggregates import Count
from operators.cht import to_cht
from tests.kit import assert_equivalent
from topology import Stream
from topology.running.registry import actor_nodes

# the same test functions, collected here so that they use this folder's ray_session
globals().update({k: v for k, v in vars(runtimes).items() if k.startswith("test_")})


def lose_a_worker_node(cluster, live, at: int, expected) -> None:
    """Once the query's source has taken ``at`` events and a checkpoint is complete, remove a
    worker node running some of its actors; the query must end with the fault-free output,
    exactly once, its actors restarted off that node."""
    from tests.reliability.test_recovery import check_exactly_once, wait_events

    head = cluster.head_node.node_id
    wait_events(live, next(s for s in live.steps if s.startswith("from_")), at, epoch=1)
    nodes = actor_nodes(live.name)
    victim = next(node for node in cluster.list_all_nodes()
                  if node.node_id != head and node.node_id in nodes.values())
    assert not live.wait(0), "the query ended before the node loss: make it longer"
    cluster.remove_node(victim)
    assert live.wait(300)
    check_exactly_once(live.output(), expected)
    assert len(live.recoveries()) >= 1
    assert victim.node_id not in actor_nodes(live.name).values()


def _query(partitions: int = 4) -> Stream:
    rows = [{"t": i, "k": i % 7} for i in range(20_000)]
    return (Stream.from_rows(rows, start="t")
            .group_apply(lambda p: p["k"], lambda g: g.tumbling_window(1_000).aggregate(Count()),
                         partitions=partitions))


def test_a_partitioned_query_spreads_over_the_nodes(ray_session, cluster):
    assert len([node for node in ray_session.nodes() if node["Alive"]]) == 3
    q = _query()
    live = q.deploy("spread-check", history=True)
    try:
        live.wait()
        nodes = actor_nodes("spread-check")
        assert nodes.pop("~host") == cluster[0].head_node.node_id  # it feeds the source
        assert len(nodes) == len(live.steps)
        assert len(set(nodes.values())) == 3, nodes
        # the query's own stats say the same
        assert {s: st["node"] for s, st in live.stats().items()} == nodes
        assert_equivalent(live.snapshot(), to_cht(q.collect("inline")))
    finally:
        live.stop()


def test_steps_can_be_pinned_to_a_node(ray_session, cluster):
    worker = cluster[1][0].node_id
    q = _query(partitions=2)
    steps = list(q.plan().stages)
    live = q.deploy("pin-check", history=True, placement=dict.fromkeys(steps, worker))
    try:
        live.wait()
        nodes = actor_nodes("pin-check")
        assert nodes.pop("~host") == cluster[0].head_node.node_id
        assert set(nodes.values()) == {worker}
        assert_equivalent(live.snapshot(), to_cht(q.collect("inline")))
    finally:
        live.stop()


@pytest.mark.parametrize("seed", [1, 2])
def test_a_lost_worker_node_recovers_from_the_newest_checkpoint(ray_session, cluster, tmp_path,
                                                               seed):
    """A worker node (its raylet, object store and actors) goes away mid-stream; the query,
    checkpointed, restarts on the surviving nodes and its output equals the fault-free run,
    with nothing emitted twice."""
    from tests.reliability.test_recovery import window_join

    expected = window_join(20_000).collect(runtime="inline")
    rng = random.Random(seed)
    live = window_join(20_000).deploy(f"node-loss-{seed}", checkpoint_dir=str(tmp_path),
                                      checkpoint_every=2, batch_size=500)
    try:
        lose_a_worker_node(cluster[0], live, rng.randrange(2_000, 12_000), expected)
    finally:
        live.stop()
        cluster[0].add_node(num_cpus=2)
        cluster[0].wait_for_nodes()


def test_cedar_run_status_and_inspect_against_the_cluster(ray_session, cluster, tmp_path):
    # a topology script deployed with `cedar run SCRIPT --address ADDR` from a process of its
    # own; `cedar status` and `cedar inspect` from others; this process attaches to it
    import os
    import subprocess
    import sys

    from tests.conftest import REPO
    from topology import attach

    script = tmp_path / "counts.py"
    script.write_text(
        "from operators.aggregates import Count\n"
        "from topology import Stream\n"
        "rows = [{'t': i, 'k': i % 3} for i in range(3_000)]\n"
        "q = (Stream.from_rows(rows, start='t')\n"
        "     .group_apply('k', lambda g: g.tumbling_window(1_000).aggregate(Count()))\n"
        "     .deploy('cli-on-cluster', history=True))\n"
        "assert q.wait(120)\n"
        "print('deployed', q.name)\n")
    address = cluster[0].address
    env = dict(os.environ, PYTHONPATH=REPO)

    def cedar(*args: str) -> str:
        run = subprocess.run([sys.executable, "-m", "topology.app.cli", *args], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        return run.stdout

    try:
        assert "deployed cli-on-cluster" in cedar("run", str(script), "--address", address)
        assert "cli-on-cluster" in cedar("status", "--address", address).split()
        shown = cedar("inspect", "cli-on-cluster", "--address", address)
        assert "snapshot: 9 rows" in shown and "sink" in shown
        # the script's driver is gone; its query's actors and output are not
        expected = sorted((w, w + 1_000, (k, sum(1 for i in range(w, w + 1_000) if i % 3 == k)))
                          for w in (0, 1_000, 2_000) for k in range(3))
        assert sorted(attach("cli-on-cluster").snapshot()) == expected
    finally:
        try:
            attach("cli-on-cluster").stop()
        except Exception:  # noqa: BLE001 - the script failed before deploying
            pass


@pytest.mark.parametrize("seed", [1, 2])
def test_a_query_outlives_its_killed_script_and_a_lost_node(ray_session, cluster, s3_root,
                                                            seed):
    """The script that deployed a checkpointed query (checkpoints on an S3 server, no shared
    disk) is killed with SIGKILL at once; then a worker node running some of the query's
    actors goes away. The query's host, on the head node, keeps feeding and recovers; a
    third process finds it with `cedar status`/`inspect` and reads its output; the output
    equals the fault-free run's, exactly once."""
    from tests.reliability.test_outlive_driver import deploy_from_a_script, run_elsewhere
    from tests.reliability.test_recovery import window_join
    from topology import attach

    name, n = f"orphan-node-loss-{seed}", 60_000  # long enough to be running at the loss
    address = cluster[0].address
    expected = window_join(n).collect(runtime="inline")
    deploy_from_a_script(address, "kill", name, s3_root, n)
    live = attach(name)
    try:
        # the host lives where the cluster does
        assert actor_nodes(name)["~host"] == cluster[0].head_node.node_id
        lose_a_worker_node(cluster[0], live, random.Random(seed).randrange(2_000, 12_000),
                           expected)
        third = run_elsewhere("import sys\nfrom topology import attach\n"
                              "from topology.app import cli\n"
                              "q = attach(sys.argv[2], address=sys.argv[1])\n"
                              "print('output', len(q.output()), 'recoveries', "
                              "len(q.recoveries()))\n"
                              "cli.main(['status', '--address', sys.argv[1]])\n"
                              "cli.main(['inspect', sys.argv[2], '--address', sys.argv[1]])\n",
                              address, name)
        assert f"output {len(live.output())} recoveries" in third
        assert name in third.split() and "sink" in third
    finally:
        live.stop()
        cluster[0].add_node(num_cpus=2)
        cluster[0].wait_for_nodes()
