"""The cyclic garbage collector paused for a block, as it was after; a process's start-up imports frozen.

A trainer that imported torch holds a large heap; the allocations of preflight's own import
(preflight.check's first use) then trigger one full collection of that heap, which cost
0.45-0.7 s of a 4-rank gloo trainer's time to its first step on the 2-core VM (0.9-1.3 s of
the import's whole time; docs/performance.md). Paused, preflight's import allocates the same
and the trainer's collector runs when its own allocations say so. Reference counting still
frees everything that is not in a cycle.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic cyclic collection inside the block; the collector enabled after iff it was before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def imports_frozen() -> Iterator[None]:
    """A process's own heavy imports (torch: ~10,000 classes and functions) with the collector paused,
    then moved out of its generations for good (gc.freeze).

    For preflight's own processes only (`preflight run`, `preflight launch` and its forkserver),
    never a trainer's. Collecting during the import cost 0.2-0.3 CPU-s of each ~1.5-2 CPU-s
    `import torch` here (~400 collections, three of them full), and every later full collection
    rescanned torch's heap; frozen, the rank's own allocations are collected as before, and a
    rank forked from the forkserver no longer touches (copies) the inherited heap when it collects.
    """
    with collector_paused():
        yield
        gc.freeze()
