"""Shared fixtures, the test tiers and the Hypothesis profiles.

One local Ray instance per test session, started only when a test asks: Ray costs seconds to
start and ~150 MB per actor (docs/runtime.md), so every Ray test shares the instance of
:func:`ray_session`; ``collect()`` reuses warm actors between tests.

**Tiers.** A test is marked by what it uses, from its fixtures (:data:`FIXTURE_MARKS`):
``ray`` (``ray_session``, or ``runtime`` when it is ``"ray"``), ``spark``, ``browser``
(``page``), ``cluster``; a test that starts Ray without asking for ``ray_session`` fails, so
that the marker never lies. Heavy tests carry ``slow`` by hand. ``python -m pytest`` (the
README's command) runs the default tier: everything but ``slow``, with the ``dev`` Hypothesis
profile. ``python -m pytest -m "" --hypothesis-profile=ci`` runs everything (``.ci/run``).

**Hypothesis profiles** give every property test its number of examples (``dev``, ``ci``,
``nightly``; ``--hypothesis-profile=NAME`` or ``CEDAR_PROFILE=NAME``): a test says how costly
one example is by the settings it takes from :mod:`tests.kit` (``PROPERTY`` in process,
``HEAVY`` for a large input or a subprocess, ``ON_RAY`` for a run on Ray), never a count.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.kit import scale

REPO = str(Path(__file__).resolve().parents[1])

#: fixture -> the marker of the tier it puts a test in
FIXTURE_MARKS = {"ray_session": "ray", "spark": "spark", "page": "browser", "cluster": "cluster"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the fixtures it uses (see the module doc). The ``nightly`` profile
    runs every property test longer: scale the per-test time limit (pyproject's ``timeout``)
    with it, so that it never cuts a test short."""
    factor = scale()
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, mark in FIXTURE_MARKS.items():
            if fixture in names:
                item.add_marker(mark)
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("runtime") == "ray":
            item.add_marker("ray")
        if factor > 1 and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(900 * factor))


@pytest.fixture(autouse=True)
def _ray_only_when_asked(request: pytest.FixtureRequest):
    """A test that starts Ray in this process without asking for ``ray_session`` fails: its
    tier would be wrong (it runs in ``-m "not ray"``) and nothing would stop its Ray."""
    ray = sys.modules.get("ray")
    before = ray is not None and ray.is_initialized()
    yield
    ray = sys.modules.get("ray")
    if (not before and ray is not None and ray.is_initialized()
            and request.node.get_closest_marker("ray") is None):
        pytest.fail("this test started Ray without asking for the ray_session fixture: add "
                    "it (or the runtime fixture) to its arguments", pytrace=False)


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
    from topology.running.deploy import release_pool

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
