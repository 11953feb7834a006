"""The benchmarks' own dependencies, declared in the ``bench`` extra
(``pip install -e ".[bench]"``): psutil here, the rest (pyspark, pyarrow, numpy, ray, moto)
imported where they are used.

psutil must be the installed package, not the copy Ray vendors: ``import ray`` puts
``ray/thirdparty_files`` first on ``sys.path``, so a plain ``import psutil`` after it silently
finds Ray's copy, whatever is installed. This module imports psutil before anything imports
Ray (every benchmark module imports it first) and :func:`psutil` refuses Ray's copy.
"""

from __future__ import annotations

import os
from types import ModuleType

try:
    import psutil as _psutil
except ImportError:  # reported by psutil() when a benchmark needs it
    _psutil = None

_HINT = 'install the benchmarks\' dependencies: pip install -e ".[bench]"'


def vendored(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from Ray's vendored ``thirdparty_files``."""
    return f"{os.sep}thirdparty_files{os.sep}" in (getattr(module, "__file__", "") or "")


def psutil() -> ModuleType:
    """The installed psutil (the ``bench`` extra); never the copy inside Ray."""
    if _psutil is None:
        raise ImportError(f"psutil is not installed: {_HINT}")
    if vendored(_psutil):
        raise ImportError(f"psutil resolved to Ray's vendored copy ({_psutil.__file__}): "
                          f"import benchmarks.deps before ray, and {_HINT}")
    return _psutil
