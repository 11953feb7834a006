"""collect() keeps warm actors for the next collect() of the same Ray session; a driver that
shuts Ray down and starts it again (as ``benchmarks.run`` does between its parts) must not be
handed the dead session's actors. Run in a subprocess: it needs two Ray sessions of its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

SCRIPT = textwrap.dedent("""
    import ray
    from operators.events import Cti, Insert
    from topology import Stream

    def run():
        q = Stream.from_events([Insert("a", 0, 1, 2), Cti(1)]).where(lambda p: p > 1)
        return q.collect()

    for _ in range(2):
        ray.init(address="local", include_dashboard=False, log_to_driver=False)
        assert run() == [Insert("a", 0, 1, 2), Cti(1)], "wrong output"
        ray.shutdown()
    print("ok")
""")


@pytest.mark.slow
def test_a_new_ray_session_gets_new_actors():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
