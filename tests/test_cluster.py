"""Runs ``tests/cluster`` — the Ray tests again on a real three-node cluster — in a pytest
process of its own (a process joins one Ray cluster only; the rest of the suite shares a local
instance)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_the_ray_tests_pass_on_a_three_node_cluster():
    env = dict(os.environ, CEDAR_CLUSTER="1")
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs",
                          "tests/cluster"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=1800)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert " passed" in run.stdout and " skipped" not in run.stdout, run.stdout[-2000:]
