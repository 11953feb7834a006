"""Shared fixtures: one local Ray instance per test session, started only when a test asks.

Ray costs seconds to start and ~150 MB per actor (docs/runtime.md), so every Ray test shares the
instance of :func:`ray_session`; ``collect()`` reuses warm actors between tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.kit import EXAMPLES

REPO = str(Path(__file__).resolve().parents[1])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long mode (``CEDAR_EXAMPLES=5000``) runs every property test longer: scale the
    per-test time limit (pyproject's ``timeout``) with it, so that it never cuts a test short."""
    factor = max(1, EXAMPLES // 200)
    if factor > 1:
        for item in items:
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(900 * factor))


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray instance (2 CPUs, namespace ``cedar``) shared by the whole session."""
    import ray
    # actors unpickle user functions defined in test modules: let the workers import `tests`
    path = os.environ.get("PYTHONPATH", "")
    if REPO not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, path) if p)
    started = False
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, namespace="cedar",
                 logging_level="WARNING")
        started = True
    yield ray
    from topology.deploy import release_pool

    release_pool()
    if started:
        ray.shutdown()


@pytest.fixture(params=["inline", pytest.param("ray", marks=pytest.mark.ray)])
def runtime(request):
    """Run a test body once in-process and once on Ray (Ray Data's habit of parametrizing
    the same test over execution modes)."""
    if request.param == "ray":
        request.getfixturevalue("ray_session")
    return request.param
