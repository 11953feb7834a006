"""The collector's freeze happens once per process: a step host makes a shell for a new slot
while other slots hold their queries' state, which must stay collectable."""

from __future__ import annotations

import subprocess
import sys

import pytest

_SCRIPT = """
import gc
from actors.shell import OperatorShell
OperatorShell()
first = gc.get_freeze_count()
state = [[i] for i in range(10_000)]  # another slot's window state, alive meanwhile
OperatorShell()
print(first > 0, gc.get_freeze_count() == first)
"""


@pytest.mark.slow
def test_a_later_shell_freezes_nothing_more():
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                         check=True, cwd=".").stdout.strip()
    assert out == "True True"
