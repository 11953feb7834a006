"""What an actor process sets up once, before it runs any step: memory and the collector.

A shell actor (:class:`~actors.shell.OperatorShell`) or a step host
(:class:`~actors.step_host.StepHost`) calls :func:`set_up_process` when it makes a shell, and
:func:`import_data_path` when it configures one; each function says what it saves and where
that was measured. Nothing here knows about steps: these are settings of the Python process
(glibc's malloc, Arrow's memory pool, the garbage collector, the modules imported lazily).
"""

from __future__ import annotations

import gc
import os

#: glibc's malloc in an actor: allocations from this size on (bytes) are mapped on their own,
#: and freed memory above the heap's top is given back to the system from this size on (see
#: :func:`keep_freed_memory`).
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20


#: The collector's first threshold in an actor: allocations (minus deallocations) of tracked
#: objects between two young collections (Python's default: 700). See :func:`collect_less`.
YOUNG_THRESHOLD = 50_000


def set_up_process() -> None:
    """What every shell made in this process needs: :func:`keep_freed_memory`,
    :func:`collect_less` and :func:`freeze_once` (all idempotent)."""
    keep_freed_memory()
    collect_less()
    freeze_once()


def collect_less() -> None:
    """A young collection every :data:`YOUNG_THRESHOLD` allocations, not every 700. A keyed
    window makes a state, a row and its id per key and batch, which live until the window
    closes: at 700 they are walked by a young collection, again by a middle one, and each
    time the old generation grew by a quarter by a full one. Nexmark Q17 (2M events,
    inline, CPU): 1.30 s at 700, 0.90 s at 50,000; Q19 2.09 -> 1.60 s, Q4 1.70 -> 1.64 s,
    others within noise. The garbage that waits longer is what 50,000 allocations leave in
    cycles: kilobytes to a few MB."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def keep_freed_memory() -> None:
    """Let glibc keep the memory a batch freed for the next batch. In a Ray worker its malloc
    gives freed memory back to the system at once (its usual thresholds, which grow to 32 MB
    for mapped and 64 MB for trimmed memory as large blocks are freed, stay at 128 kB there),
    so every batch's temporaries (sorts, masks, copies of columns) fault their pages in
    again: 51k page faults per run of the W1 benchmark's keyed window (2M events), ~90 ms of
    its ~280 ms. These are the values glibc would have grown to. No-op without glibc."""
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD
    mallopt(-1, TRIM_THRESHOLD)  # M_TRIM_THRESHOLD


def import_data_path() -> None:
    """Import, while a query is set up, what the data path would import on its first batch:
    ``numpy.unique`` imports ``numpy.ma`` and restoring a string column imports
    ``pyarrow.compute`` (with its generated docstrings): 50-100 ms of CPU that every
    actor's first batch paid on top of its work (seen with py-spy in ``cedar demo``)."""
    import numpy.ma  # noqa: F401
    import pyarrow.compute  # noqa: F401

    arrow_memory_pool()


def arrow_memory_pool() -> None:
    """Arrow's buffers from jemalloc, not pyarrow's default mimalloc (unless the user chose a
    pool with ``ARROW_DEFAULT_MEMORY_POOL``): mimalloc maps its memory as transparent huge
    pages, and the kernel zeroes 2 MB at each one's first touch. In ``cedar demo`` the
    actors' first run spent 0.14-0.15 s of system time so (perf: ``clear_page_erms`` under
    ``mi_page_free_list_extend``), 0.02-0.07 s with jemalloc, which later runs reuse too."""
    import pyarrow as pa

    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except (NotImplementedError, pa.ArrowNotImplementedError):  # a build without jemalloc
        pass


_frozen = False


def freeze_once() -> None:
    """What is alive when the process's first shell is made (Ray's and the imported modules'
    ~80k objects) lives as long as the process: kept out of the collector, a full collection
    no longer walks it (~40 ms each in a Ray worker, about one per 2M events of the W1
    benchmark's keyed window). Once: a step host makes shells while other slots run, and
    their state must stay collectable."""
    global _frozen
    if not _frozen:
        gc.freeze()
        _frozen = True
