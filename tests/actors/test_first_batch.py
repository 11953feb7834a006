"""An actor's first batch does only its work: what the data path imports lazily is imported
while the query is set up (``OperatorShell.configure``), not when the first batch comes, and
Arrow allocates from jemalloc (mimalloc's huge pages cost a first run their zeroing)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_SCRIPT = """
import sys
from actors.shell import OperatorShell
from actors.stage_config import StageConfig
from operators.where import Where
lazy = ("numpy.ma", "pyarrow.compute")
before = [m in sys.modules for m in lazy]
OperatorShell().configure(StageConfig(step="where#1", describe="where",
                                      factory=lambda: Where(bool)))
import pyarrow as pa
print(before, [m in sys.modules for m in lazy], pa.default_memory_pool().backend_name)
"""


@pytest.mark.slow
def test_configure_imports_what_the_first_batch_would():
    # a fresh interpreter: another test may have imported them in this one
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                         check=True, cwd=".").stdout.strip()
    assert out == "[False, False] [True, True] jemalloc"


@pytest.mark.slow
def test_a_pool_the_user_chose_is_kept():
    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system"}
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                         check=True, cwd=".", env=env).stdout.strip()
    assert out.endswith("] system")
