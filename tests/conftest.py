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


@pytest.fixture(scope="session")
def s3_root():
    """A real S3-compatible server (moto's standalone server, in a process of its own) and a
    checkpoint root URI on it, with a bucket made."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    import pyarrow.fs as pafs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline, "moto's server did not start"
                time.sleep(0.2)
        root = (f"s3://key:secret@cedar-ckpt/run?endpoint_override=127.0.0.1:{port}"
                f"&scheme=http&region=us-east-1&allow_bucket_creation=true")
        fs, _ = pafs.FileSystem.from_uri(root)
        fs.create_dir("cedar-ckpt")
        yield root
    finally:
        server.terminate()
        server.wait(10)
